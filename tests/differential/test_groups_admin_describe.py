"""Group administration, Kafka vs kgc: DescribeGroups in every classic state and at every
version, ListGroups with its state and type filters, DeleteGroups of empty, non-empty and
unknown groups, FindCoordinator v0-6.

ListGroups names every group of the server, and both servers hold other scenarios' groups:
its answers are recorded (``side.note``) with only this scenario's groups, sorted.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.diffkit import Runner, Side
from support.groupops import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    JOIN,
    LEAVE,
    LIST_GROUPS,
    OFFSET_COMMIT,
    assign_all,
    commit_req,
    delete_req,
    join_req,
    leave_req,
    list_groups_req,
    member_id_for,
    subscription,
    sync,
    wait_state,
)

from protocol.messages import describe_groups, find_coordinator

pytestmark = [pytest.mark.kafka, pytest.mark.integration]


def _describe_all_versions(side: Side, label: str, *groups: str) -> None:
    for v in range(7):
        side.call(
            DESCRIBE_GROUPS,
            v,
            describe_groups.DescribeGroupsRequest(
                groups=list(groups), include_authorized_operations=v >= 3
            ),
            step=f"describe_{label}_v{v}",
        )


def _listed(side: Side, label: str, version: int, **kw: Any) -> None:
    resp = side.member("admin").conn.call(LIST_GROUPS, version, list_groups_req(**kw))
    mine = sorted(
        (g for g in resp.groups if g.group_id.endswith(side.token)), key=lambda g: g.group_id
    )
    resp.groups = mine
    side.note(f"list_{label}_v{version}", LIST_GROUPS, version, resp)


def lifecycle_admin(side: Side) -> None:
    group = side.name("adm-life")
    unknown = side.name("adm-unknown")
    simple = side.name("adm-simple")
    topic = side.name("adm-t")
    side.create_topic(topic, 1)
    for g in (group, unknown, simple):
        side.wait_coordinator(g)
    side.call(OFFSET_COMMIT, 9, commit_req(simple, {topic: {0: 4}}), step="simple_commit")
    # The empty group id is one group for the whole server (other scenarios commit to it on
    # the shared Kafka broker): it exists, Empty, on both sides from here on.
    side.call(OFFSET_COMMIT, 9, commit_req("", {topic: {0: 1}}), step="empty_id_commit")
    subs = [("range", subscription(topic))]
    a, b = side.member("a"), side.member("b")
    ia = member_id_for(a, group, protocols=subs)
    ja = a.call(JOIN, 9, join_req(group, ia, protocols=subs))
    _describe_all_versions(side, "completing", group, unknown)
    sync(a, group, ja, assign_all(ja))
    _describe_all_versions(side, "stable", group, simple, "")
    for v in (0, 3, 4, 5):
        _listed(side, "all", v)
    _listed(side, "stable", 4, states=["Stable"])
    _listed(side, "empty_lower", 4, states=["empty"])
    _listed(side, "classic", 5, types=["classic"])
    _listed(side, "consumer", 5, types=["consumer"])
    _listed(side, "both", 5, states=["Stable", "Empty"], types=["Classic"])
    # b joins: PreparingRebalance until a rejoins.
    ib = member_id_for(b, group, protocols=subs)

    def a_rejoins() -> object:
        wait_state(side, group, "PreparingRebalance")  # b's join is parked
        side.call(
            DESCRIBE_GROUPS,
            5,
            describe_groups.DescribeGroupsRequest(groups=[group]),
            step="describe_preparing",
        )
        _listed(side, "preparing", 4, states=["PreparingRebalance"])
        return a.call(JOIN, 9, join_req(group, ja.member_id, protocols=subs), step="a.rejoin")

    jb, ja2 = side.together(
        [lambda: b.call(JOIN, 9, join_req(group, ib, protocols=subs)), a_rejoins], stagger=0.3
    )
    side.together([lambda: sync(b, group, jb), lambda: sync(a, group, ja2, assign_all(ja2))])
    side.call(DELETE_GROUPS, 3, delete_req(group, unknown), step="delete_v3")
    side.call(DELETE_GROUPS, 2, delete_req(group, simple, unknown, ""), step="delete_mixed_v2")
    _describe_all_versions(side, "after_delete", group, simple)
    # Everyone leaves: Empty, then deletable.
    a.call(LEAVE, 5, leave_req(group, ja2.member_id, jb.member_id))
    side.call(DESCRIBE_GROUPS, 5, describe_groups.DescribeGroupsRequest(groups=[group]), step="d_e")
    for v in (0, 1):
        side.call(DELETE_GROUPS, v, delete_req(group), step=f"delete_empty_v{v}")
    side.call(DESCRIBE_GROUPS, 5, describe_groups.DescribeGroupsRequest(groups=[group]), step="d_x")
    _listed(side, "end", 5)


def test_describe_list_delete_through_a_group_life(diff_shared: Runner) -> None:
    outcome = diff_shared(lifecycle_admin)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert steps["describe_preparing"].groups[0].group_state == "PreparingRebalance"
    codes = {r.group_id[:8]: r.error_code for r in steps["delete_mixed_v2"].results}
    assert codes == {"adm-life": 68, "adm-simp": 0, "adm-unkn": 69, "": 0}


def find_coordinators(side: Side) -> None:
    group = side.name("adm-fc")
    side.wait_coordinator(group)
    for v in range(4):
        side.call(
            FIND_COORDINATOR, v, find_coordinator.FindCoordinatorRequest(key=group), step=f"v{v}"
        )
        side.call(
            FIND_COORDINATOR, v, find_coordinator.FindCoordinatorRequest(key=""), step=f"v{v}_empty"
        )
    for v in (4, 5, 6):
        side.call(
            FIND_COORDINATOR,
            v,
            find_coordinator.FindCoordinatorRequest(
                key_type=0, coordinator_keys=[group, side.name("adm-fc2"), ""]
            ),
            step=f"v{v}_batch",
        )
    side.call(
        FIND_COORDINATOR,
        4,
        find_coordinator.FindCoordinatorRequest(key_type=7, coordinator_keys=[group]),
        step="bad_key_type",
    )


def test_find_coordinator_at_every_version(diff_shared: Runner) -> None:
    diff_shared(find_coordinators)
