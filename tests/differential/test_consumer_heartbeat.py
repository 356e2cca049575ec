"""KIP-848 consumer groups, Kafka vs kgc: ConsumerGroupHeartbeat's validation (codes and
messages), the first heartbeat, epochs, reconciliation between two members, subscription
changes, the uniform and range server assignors, fencing, leaving; ConsumerGroupDescribe;
how the classic APIs see a consumer group.

Member ids are chosen by the client (v1, KIP-1082) and are fixed strings (unique within their
group, whose name is the run's), so the assignors -- whose member order is Kafka's HashMap
order of member ids -- see the same input on both sides and in every run.
Owned partitions name topic ids, which each side reads from its own Metadata.

Kafka 4.4 recomputes target assignments at most every group.consumer.assignment.interval.ms
(1 s), off its coordinator thread: each group here asks for it synchronously
(``synchronous_assignment``), so answers do not depend on timing. First members join without
a subscription, then subscribe (from before kgc moved a new group's epoch as 4.4 does; see
test_consumer_kafka44.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from support.diffkit import Runner, Side
from support.groupops import (
    CG_DESCRIBE,
    CG_HEARTBEAT,
    DESCRIBE_GROUPS,
    HEARTBEAT,
    JOIN,
    LEAVE,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    SYNC,
    cg_describe_req,
    cg_req,
    commit_req,
    fetch_groups_req,
    hb_req,
    join_req,
    leave_req,
    list_groups_req,
    subscription,
    sync_req,
    synchronous_assignment,
    wait_topic_assignable,
)

from protocol.messages import describe_groups, metadata

pytestmark = [pytest.mark.kafka, pytest.mark.integration]


def _topic_id(side: Side, topic: str) -> Any:
    _, meta = side.untimed().request(
        metadata.API_KEY,
        metadata.MetadataRequest(topics=[metadata.MetadataRequestTopic(name=topic)]),
        version=12,
    )
    return meta.topics[0].topic_id


def _owned(resp: Any, before: list[tuple[Any, list[int]]] | None = None) -> list[Any]:
    """The partitions a heartbeat answer leaves the member, as ``owned`` for its next
    heartbeat: the answer's assignment, or ``before`` when it has none (no change)."""
    if resp.assignment is None:
        return list(before or [])
    return [(t.topic_id, list(t.partitions)) for t in resp.assignment.topic_partitions]


def validation(side: Side) -> None:
    group = side.name("cg-valid")
    topic = side.name("cg-valid-t")
    side.create_topic(topic, 1)
    wait_topic_assignable(side, topic, 1)
    side.wait_coordinator(group)
    ok = {"rebalance": 30000, "topics": [topic], "owned": []}
    cases: list[tuple[str, int, Any]] = [
        ("empty_group", 0, cg_req("", "m", 0, **ok)),  # type: ignore[arg-type]
        ("empty_member_v1", 1, cg_req(group, "", 0, **ok)),  # type: ignore[arg-type]
        ("empty_member_epoch_gt0_v0", 0, cg_req(group, "", 3, **ok)),  # type: ignore[arg-type]
        ("empty_member_leave_v0", 0, cg_req(group, "", -1)),
        ("no_rebalance_timeout", 1, cg_req(group, "m", 0, topics=[topic], owned=[])),
        ("no_topic_partitions", 1, cg_req(group, "m", 0, rebalance=30000, topics=[topic])),
        (
            "owned_on_join",
            1,
            cg_req(group, "m", 0, rebalance=30000, topics=[topic], owned=[(bytes(16), [0])]),
        ),
        ("no_subscription", 1, cg_req(group, "m", 0, rebalance=30000, owned=[])),
        ("empty_instance", 1, cg_req(group, "m", 0, instance="", **ok)),  # type: ignore[arg-type]
        ("empty_rack", 1, cg_req(group, "m", 0, rack="", **ok)),  # type: ignore[arg-type]
        ("static_leave_no_instance", 1, cg_req(group, "m", -2)),
        ("epoch_minus_3", 1, cg_req(group, "m", -3)),
        ("unknown_assignor", 1, cg_req(group, "m", 0, assignor="foo", **ok)),  # type: ignore[arg-type]
        (
            "bad_regex",
            1,
            cg_req(group, "m", 0, rebalance=30000, regex="[", owned=[]),
        ),
        ("unknown_group_epoch", 1, cg_req(side.name("cg-nope"), "m", 4)),
        ("unknown_group_leave", 1, cg_req(side.name("cg-nope"), "m", -1)),
    ]
    for step, version, req in cases:
        side.call(CG_HEARTBEAT, version, req, step=step)
    # v0: the server names the member.
    synchronous_assignment(side, group)
    first = side.call(
        CG_HEARTBEAT, 0, cg_req(group, "", 0, rebalance=30000, topics=[], owned=[]), step="v0_join"
    )
    side.call(
        CG_HEARTBEAT,
        0,
        cg_req(group, first.member_id, first.member_epoch, topics=[topic]),
        step="v0_subscribes",
    )
    side.call(CG_HEARTBEAT, 0, cg_req(group, "ghost", 1), step="unknown_member")
    side.call(CG_HEARTBEAT, 0, cg_req(group, first.member_id, 7), step="fenced_ahead")
    side.call(CG_HEARTBEAT, 0, cg_req(group, first.member_id, 0, topics=[topic]), step="rejoin")
    side.call(CG_HEARTBEAT, 0, cg_req(group, first.member_id, -1), step="leave")
    side.call(CG_HEARTBEAT, 0, cg_req(group, first.member_id, -1), step="leave_again")
    side.call(CG_DESCRIBE, 0, cg_describe_req(group, side.name("cg-nope"), ""), step="describe")


def test_heartbeat_validation_and_first_heartbeats(diff_shared: Runner) -> None:
    outcome = diff_shared(validation)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert steps["empty_group"].error_message == "GroupId can't be empty."


def two_members(side: Side) -> None:
    group = side.name("cg-two")
    t, u = side.name("cg-t"), side.name("cg-u")
    side.create_topic(t, 4)
    side.create_topic(u, 2)
    wait_topic_assignable(side, t, 4)
    wait_topic_assignable(side, u, 2)
    side.wait_coordinator(group)
    synchronous_assignment(side, group)
    tid = _topic_id(side, t)
    m1, m2 = "member-one", "member-two"  # fixed: the same assignor input every run

    def beat(step: str, mid: str, epoch: int, **kw: Any) -> Any:
        return side.call(CG_HEARTBEAT, 1, cg_req(group, mid, epoch, **kw), step=step)

    r0 = beat("m1.join_unsubscribed", m1, 0, rebalance=30000, topics=[], owned=[])
    r1 = beat("m1.subscribes", m1, r0.member_epoch, topics=[t], owned=[])
    a1 = _owned(r1)
    beat("m1.partial", m1, r1.member_epoch)
    beat("m1.full", m1, r1.member_epoch, rebalance=30000, topics=[t], owned=a1)
    r2 = beat("m2.join", m2, 0, rebalance=30000, topics=[t], owned=[])
    side.call(CG_DESCRIBE, 1, cg_describe_req(group), step="describe_assigning")
    # m1 is told to give partitions back; until it does, m2 waits for them.
    r1b = beat("m1.revoke", m1, r1.member_epoch, owned=a1)
    beat("m2.waits", m2, r2.member_epoch, owned=_owned(r2))
    a1b = _owned(r1b, a1)
    r1c = beat("m1.acknowledges", m1, r1b.member_epoch, owned=a1b)
    a1c = _owned(r1c, a1b)
    r2b = beat("m2.gets", m2, r2.member_epoch, owned=_owned(r2))
    a2b = _owned(r2b)
    side.call(CG_DESCRIBE, 1, cg_describe_req(group), step="describe_stable")
    # Stale and future epochs, an unknown member, a lost answer (previous epoch).
    beat("m1.future_epoch", m1, r1c.member_epoch + 1)
    beat("m1.previous_epoch_subset", m1, r1.member_epoch, owned=a1c)
    beat("m1.previous_epoch_other", m1, r1.member_epoch, owned=[(tid, [0, 1, 2, 3])])
    beat("ghost", side.name("ghost"), 3)
    # m2 also subscribes to u: a new epoch, a new target.
    r2c = beat("m2.subscribes_u", m2, r2b.member_epoch, topics=[t, u], owned=a2b)
    r1d = beat("m1.after_u", m1, r1c.member_epoch, owned=a1c)
    a1d = _owned(r1d, a1c)
    beat("m2.after_u", m2, r2c.member_epoch, owned=_owned(r2c, a2b))
    side.call(CG_DESCRIBE, 1, cg_describe_req(group), step="describe_u")
    # Offsets by members: the right epoch, a stale one, an old version.
    side.call(
        OFFSET_COMMIT,
        9,
        commit_req(group, {t: {0: 5}}, generation=r1d.member_epoch, member_id=m1),
        step="commit_member",
    )
    side.call(
        OFFSET_COMMIT,
        9,
        commit_req(group, {t: {0: 5}}, generation=r1d.member_epoch + 1, member_id=m1),
        step="commit_future_epoch",
    )
    side.call(
        OFFSET_COMMIT,
        8,
        commit_req(group, {t: {0: 5}}, generation=r1d.member_epoch, member_id=m1),
        step="commit_v8",
    )
    side.call(OFFSET_COMMIT, 9, commit_req(group, {t: {1: 5}}), step="commit_admin_nonempty")
    side.call(
        OFFSET_FETCH,
        9,
        fetch_groups_req({group: {t: [0]}}, member_id=m1, member_epoch=r1d.member_epoch),
        step="fetch_member",
    )
    side.call(
        OFFSET_FETCH,
        9,
        fetch_groups_req({group: {t: [0]}}, member_id=m1, member_epoch=99),
        step="fetch_stale",
    )
    # The classic APIs on a consumer group.
    for v in (5, 6):
        side.call(
            DESCRIBE_GROUPS,
            v,
            describe_groups.DescribeGroupsRequest(groups=[group]),
            step=f"describe_groups_v{v}",
        )
    side.call(JOIN, 9, join_req(group, ptype="connect"), step="classic_join_other_type")
    resp = side.member("admin").conn.call(LIST_GROUPS, 5, list_groups_req(types=["consumer"]))
    resp.groups = sorted(
        (g for g in resp.groups if g.group_id.endswith(side.token)), key=lambda g: g.group_id
    )
    side.note("list_consumer_groups", LIST_GROUPS, 5, resp)
    # m2 leaves; m1 gets everything back.
    beat("m2.leave", m2, -1)
    beat("m1.after_leave", m1, r1d.member_epoch, owned=a1d)
    side.call(CG_DESCRIBE, 1, cg_describe_req(group), step="describe_end")


def test_two_members_reconcile(diff_shared: Runner) -> None:
    outcome = diff_shared(two_members)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert steps["m1.revoke"].assignment is not None
    assert steps["m1.future_epoch"].error_code == 110  # FENCED_MEMBER_EPOCH


def range_assignor(side: Side) -> None:
    group = side.name("cg-range")
    t = side.name("cg-r")
    side.create_topic(t, 5)
    wait_topic_assignable(side, t, 5)
    side.wait_coordinator(group)
    synchronous_assignment(side, group)
    ms = [f"rm{i}" for i in range(3)]
    answers = {}
    owned: dict[str, list[Any]] = {}
    first = side.call(
        CG_HEARTBEAT,
        1,
        cg_req(group, ms[0], 0, rebalance=30000, topics=[], owned=[]),
        step="rm0.join_unsubscribed",
    )
    for mid in ms:
        answers[mid] = side.call(
            CG_HEARTBEAT,
            1,
            cg_req(
                group,
                mid,
                first.member_epoch if mid == ms[0] else 0,
                rebalance=30000,
                topics=[t],
                owned=[],
                assignor="range",
            ),
            step=f"{mid[:3]}.join",
        )
        owned[mid] = _owned(answers[mid])
    # Two rounds: revocations acknowledged, freed partitions handed out.
    for rnd in range(2):
        for mid in ms:
            r = answers[mid]
            answers[mid] = side.call(
                CG_HEARTBEAT,
                1,
                cg_req(group, mid, r.member_epoch, owned=owned[mid]),
                step=f"{mid[:3]}.round{rnd}",
            )
            owned[mid] = _owned(answers[mid], owned[mid])
    side.call(CG_DESCRIBE, 1, cg_describe_req(group), step="describe")


def test_range_assignor_three_members(diff_shared: Runner) -> None:
    diff_shared(range_assignor)


def classic_member_joins(side: Side) -> None:
    """A classic (JoinGroup) member inside a consumer group: its id, generation = its member
    epoch, its assignment through SyncGroup, heartbeats while the others reconcile, leave."""
    group = side.name("cg-interop")
    t = side.name("cg-i")
    side.create_topic(t, 2)
    wait_topic_assignable(side, t, 2)
    side.wait_coordinator(group)
    synchronous_assignment(side, group)
    m1 = "modern"
    r0 = side.call(CG_HEARTBEAT, 1, cg_req(group, m1, 0, rebalance=30000, topics=[], owned=[]))
    r1 = side.call(CG_HEARTBEAT, 1, cg_req(group, m1, r0.member_epoch, topics=[t]), step="m1.sub")
    held = _owned(r1)
    c = side.member("classic")
    protocols = [("range", subscription(t))]
    first = c.call(JOIN, 9, join_req(group, protocols=protocols), step="c.join_id")
    jc = c.call(JOIN, 9, join_req(group, first.member_id, protocols=protocols), step="c.join")
    c.call(SYNC, 5, sync_req(group, jc.generation_id, jc.member_id, pname="range"), step="c.sync")
    c.call(HEARTBEAT, 4, hb_req(group, jc.generation_id, jc.member_id), step="c.heartbeat")
    r2 = side.call(CG_HEARTBEAT, 1, cg_req(group, m1, r1.member_epoch, owned=held), step="m1.hb")
    side.call(
        CG_HEARTBEAT,
        1,
        cg_req(group, m1, r2.member_epoch, owned=_owned(r2, held)),
        step="m1.ack",
    )
    c.call(HEARTBEAT, 4, hb_req(group, jc.generation_id, jc.member_id), step="c.heartbeat2")
    side.call(CG_DESCRIBE, 1, cg_describe_req(group), step="describe")
    c.call(LEAVE, 5, leave_req(group, jc.member_id), step="c.leave")
    side.call(CG_DESCRIBE, 1, cg_describe_req(group), step="describe_after_leave")


def test_classic_member_in_a_consumer_group(diff_shared: Runner) -> None:
    diff_shared(classic_member_joins)
