"""KIP-932 share groups, Kafka vs kgc: ShareGroupHeartbeat's validation (codes and messages),
the first join's empty assignment, the assignment once the share state is initialized,
shared partitions, epochs, fencing, leaving; ShareGroupDescribe; ListGroups of type share;
the other group APIs on a share group's id and ShareGroupHeartbeat on a consumer group's.

Member ids are fixed strings chosen by the client (as librdkafka chooses its own). A new
member's partitions are initialized asynchronously on both servers (the share coordinator
writes their state first): ``until_assigned`` heartbeats, unrecorded, until the member is
given partitions and records that answer (``side.note``), so the number of heartbeats a
server needed is not compared but the epoch and the assignment are. Kafka 4.4 batches
share-group target assignments (``share.assignment.interval.ms``); the group is set to 0
(unrecorded), as kgc always assigns at once. Each topic is known to the group coordinator
before a member subscribes (``wait_topic_assignable``): Kafka's coordinator learns of a new
topic a moment after its creation, and would otherwise bump the epoch once more.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from support.diffkit import Side
from support.groupops import (
    CG_HEARTBEAT,
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    HEARTBEAT,
    JOIN,
    LEAVE,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC,
    cg_req,
    commit_req,
    delete_req,
    fetch_groups_req,
    hb_req,
    join_req,
    leave_req,
    list_groups_req,
    offset_delete_req,
    sync_req,
    wait_topic_assignable,
)

from protocol.messages import describe_groups
from protocol.messages import incremental_alter_configs as iac
from protocol.messages import share_group_describe as sgd
from protocol.messages import share_group_heartbeat as sgh

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

SG_HEARTBEAT, SG_DESCRIBE = sgh.API_KEY, sgd.API_KEY


def sg_req(
    group: str,
    member: str,
    epoch: int,
    topics: list[str] | None = None,
    rack: str | None = None,
) -> sgh.ShareGroupHeartbeatRequest:
    return sgh.ShareGroupHeartbeatRequest(
        group_id=group,
        member_id=member,
        member_epoch=epoch,
        rack_id=rack,
        subscribed_topic_names=topics,
    )


def immediate_assignment(side: Side, group: str) -> None:
    """Kafka: the group's target is recomputed in the heartbeat that needs it."""
    if side.label != "kafka":
        return
    req = iac.IncrementalAlterConfigsRequest(
        resources=[
            iac.AlterConfigsResource(
                resource_type=32,
                resource_name=group,
                configs=[iac.AlterableConfig(name="share.assignment.interval.ms", value="0")],
            )
        ]
    )
    _, resp = side.untimed().request(iac.API_KEY, req, version=1)
    assert not resp.responses[0].error_code, resp


def until_assigned(side: Side, group: str, member: str, epoch: int, step: str) -> Any:
    """Heartbeat (unrecorded) until ``member`` holds partitions; note the answer."""
    conn = side.untimed()
    deadline = time.monotonic() + side.timeout
    while True:
        r = conn.call(SG_HEARTBEAT, 1, sg_req(group, member, epoch))
        if r.error_code or (r.assignment is not None and r.assignment.topic_partitions):
            side.note(step, SG_HEARTBEAT, 1, r)
            return r
        epoch = r.member_epoch
        assert time.monotonic() < deadline, f"{side.label}: {member} never assigned"
        time.sleep(0.05)


def listed(side: Side, group: str, step: str, **filters: list[str]) -> None:
    """ListGroups, noting the answer's error and the scenario's own group (the servers hold
    other runs' groups too)."""
    _, resp = side.untimed().request(LIST_GROUPS, list_groups_req(**filters), version=5)
    mine = [g for g in resp.groups if g.group_id == group]
    side.note(step, LIST_GROUPS, 5, {"error_code": resp.error_code, "groups": mine})


def validation(side: Side) -> None:
    group = side.name("sg-valid")
    topic = side.name("sg-valid-t")
    side.create_topic(topic, 1)
    wait_topic_assignable(side, topic, 1)
    side.wait_coordinator(group)
    cases: list[tuple[str, Any]] = [
        ("empty_member", sg_req(group, "", 0, [topic])),
        ("long_member", sg_req(group, "m" * 37, 0, [topic])),
        ("blank_member", sg_req(group, "  ", 0, [topic])),
        ("empty_group", sg_req("", "m", 0, [topic])),
        ("null_topics_join", sg_req(group, "m", 0, None)),
        ("empty_topics_join", sg_req(group, "m", 0, [])),
        ("empty_rack", sg_req(group, "m", 0, [topic], rack="")),
        ("epoch_minus_2", sg_req(group, "m", -2, [topic])),
        ("unknown_group", sg_req(group, "m", 3, [topic])),
        ("leave_unknown_group", sg_req(group, "m", -1)),
    ]
    for step, req in cases:
        side.call(SG_HEARTBEAT, 1, req, step=step)


def test_validation(diff_shared: Any) -> None:
    diff_shared(validation)


def membership(side: Side) -> None:
    group = side.name("sg-members")
    topic = side.name("sg-members-t")
    side.create_topic(topic, 3)
    wait_topic_assignable(side, topic, 3)
    side.wait_coordinator(group)
    immediate_assignment(side, group)
    a = side.member("a", "share-a")
    b = side.member("b", "share-b")
    first = a.call(SG_HEARTBEAT, 1, sg_req(group, "ma", 0, [topic]), step="first_join")
    ra = until_assigned(side, group, "ma", first.member_epoch, "a_assigned")
    rb = b.call(SG_HEARTBEAT, 1, sg_req(group, "mb", 0, [topic]), step="b_joins")
    a.call(SG_HEARTBEAT, 1, sg_req(group, "ma", ra.member_epoch), step="a_gives_up_one")
    a.call(SG_HEARTBEAT, 1, sg_req(group, "ma", rb.member_epoch), step="a_steady")
    a.call(SG_HEARTBEAT, 1, sg_req(group, "ma", rb.member_epoch + 5), step="a_epoch_ahead")
    a.call(SG_HEARTBEAT, 1, sg_req(group, "mz", rb.member_epoch), step="unknown_member")
    side.call(SG_DESCRIBE, 1, sgd.ShareGroupDescribeRequest(group_ids=[group]), step="describe")
    listed(side, group, "list_share", types=["share"])
    listed(side, group, "list_stable", states=["stable"], types=["share"])
    listed(side, group, "list_consumer", types=["consumer"])
    b.call(SG_HEARTBEAT, 1, sg_req(group, "mb", -1), step="b_leaves")
    b.call(SG_HEARTBEAT, 1, sg_req(group, "mb", -1), step="b_leaves_again")
    a.call(SG_HEARTBEAT, 1, sg_req(group, "ma", 0, [topic]), step="a_rejoins")
    a.call(SG_HEARTBEAT, 1, sg_req(group, "ma", -1), step="a_leaves")
    side.call(
        SG_DESCRIBE, 1, sgd.ShareGroupDescribeRequest(group_ids=[group]), step="describe_empty"
    )


def test_membership(diff_shared: Any) -> None:
    diff_shared(membership)


def shared_partition(side: Side) -> None:
    group = side.name("sg-shared")
    topic = side.name("sg-shared-t")
    side.create_topic(topic, 1)
    wait_topic_assignable(side, topic, 1)
    side.wait_coordinator(group)
    immediate_assignment(side, group)
    first = side.call(SG_HEARTBEAT, 1, sg_req(group, "m1", 0, [topic]), step="m1_joins")
    r1 = until_assigned(side, group, "m1", first.member_epoch, "m1_assigned")
    for i in (2, 3):
        side.call(SG_HEARTBEAT, 1, sg_req(group, f"m{i}", 0, [topic]), step=f"m{i}_joins")
    side.call(SG_HEARTBEAT, 1, sg_req(group, "m1", r1.member_epoch), step="m1_shares")
    side.call(
        SG_DESCRIBE, 1, sgd.ShareGroupDescribeRequest(group_ids=[group, "", side.name("none")])
    )


def test_members_share_one_partition(diff_shared: Any) -> None:
    diff_shared(shared_partition)


def other_types(side: Side) -> None:
    share = side.name("sg-other-share")
    consumer = side.name("sg-other-consumer")
    topic = side.name("sg-other-t")
    side.create_topic(topic, 1)
    wait_topic_assignable(side, topic, 1)
    side.wait_coordinator(share)
    side.wait_coordinator(consumer)
    side.call(SG_HEARTBEAT, 1, sg_req(share, "m", 0, [topic]), step="share_join")
    side.call(
        CG_HEARTBEAT,
        1,
        cg_req(share, "c", 0, rebalance=30000, topics=[topic], owned=[]),
        step="consumer_hb_on_share",
    )
    side.call(JOIN, 9, join_req(share, "x"), step="join_on_share")
    for v in (5, 6):
        side.call(
            DESCRIBE_GROUPS,
            v,
            describe_groups.DescribeGroupsRequest(groups=[share]),
            step=f"describe_groups_v{v}",
        )
    side.call(
        CG_HEARTBEAT,
        1,
        cg_req(consumer, "c", 0, rebalance=30000, topics=[topic], owned=[]),
        step="consumer_join",
    )
    side.call(SG_HEARTBEAT, 1, sg_req(consumer, "m", 0, [topic]), step="share_hb_on_consumer")
    side.call(SG_HEARTBEAT, 1, sg_req(consumer, "m", -1), step="share_leave_on_consumer")
    side.call(
        SG_DESCRIBE, 1, sgd.ShareGroupDescribeRequest(group_ids=[consumer]), step="sg_describe_cg"
    )


def offsets_and_deletion(side: Side) -> None:
    group = side.name("sg-offsets")
    topic = side.name("sg-offsets-t")
    side.create_topic(topic, 1)
    wait_topic_assignable(side, topic, 1)
    side.wait_coordinator(group)
    first = side.call(SG_HEARTBEAT, 1, sg_req(group, "m", 0, [topic]), step="join")
    until_assigned(side, group, "m", first.member_epoch, "assigned")
    side.call(OFFSET_COMMIT, 9, commit_req(group, {topic: {0: 1}}), step="commit_simple")
    side.call(
        OFFSET_COMMIT,
        9,
        commit_req(group, {topic: {0: 1}}, generation=3, member_id="m"),
        step="commit_member",
    )
    side.call(OFFSET_FETCH, 9, fetch_groups_req({group: None}), step="fetch_all")
    side.call(OFFSET_FETCH, 9, fetch_groups_req({group: {topic: [0]}}), step="fetch_named")
    side.call(OFFSET_DELETE, 0, offset_delete_req(group, {topic: [0]}), step="offset_delete")
    side.call(SYNC, 5, sync_req(group, 1, "x"), step="sync")
    side.call(HEARTBEAT, 4, hb_req(group, 1, "x"), step="heartbeat")
    side.call(LEAVE, 5, leave_req(group, "x"), step="leave_v5")
    side.call(DELETE_GROUPS, 2, delete_req(group), step="delete_non_empty")
    side.call(SG_HEARTBEAT, 1, sg_req(group, "m", -1), step="member_leaves")
    side.call(DELETE_GROUPS, 2, delete_req(group), step="delete_empty")
    side.call(DELETE_GROUPS, 2, delete_req(group), step="delete_again")
    side.call(SG_DESCRIBE, 1, sgd.ShareGroupDescribeRequest(group_ids=[group]), step="gone")
    side.call(SG_HEARTBEAT, 1, sg_req(group, "m", 0, [topic]), step="rejoin_new_group")


def test_offsets_apis_and_delete_groups(diff_shared: Any) -> None:
    diff_shared(offsets_and_deletion)


def test_one_type_per_group_id(diff_shared: Any) -> None:
    diff_shared(other_types)
