"""Classic groups, Kafka vs kgc: static membership (KIP-345) -- joins by group.instance.id,
replacement in Stable without a rebalance, fencing of the old member id, admin removal by
instance id, a replacement with a changed protocol."""

from __future__ import annotations

import pytest
from support.diffkit import Runner, Side
from support.groupops import (
    JOIN,
    LEAVE,
    SYNC,
    assign_all,
    hb,
    join_req,
    leave_req,
    sync,
    sync_req,
    wait_state,
)

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

BOTH = [("range", b"meta"), ("roundrobin", b"meta")]


def static_members(side: Side) -> None:
    group = side.name("classic-static")
    side.wait_coordinator(group)
    a, b = side.member("a"), side.member("b")
    # Static members join without MEMBER_ID_REQUIRED. a forms the group alone (a group formed
    # from Empty by two would depend on the initial rebalance delay), then b joins and a
    # rejoins once b's join is parked: that join phase ends when both have joined.
    ja = a.call(JOIN, 9, join_req(group, instance="ia", protocols=BOTH), step="a.join")
    sync(a, group, ja, assign_all(ja), instance="ia")

    def a_rejoins() -> object:
        wait_state(side, group, "PreparingRebalance")
        return a.call(
            JOIN, 9, join_req(group, ja.member_id, instance="ia", protocols=BOTH), step="a.rj"
        )

    jb, ja = side.together(
        [
            lambda: b.call(JOIN, 9, join_req(group, instance="ib", protocols=BOTH), step="b.join"),
            a_rejoins,
        ]
    )
    side.together(
        [
            lambda: sync(b, group, jb, instance="ib"),
            lambda: sync(a, group, ja, assign_all(ja), instance="ia"),
        ]
    )
    hb(a, group, ja, instance="ia")
    hb(b, group, jb, instance="ib")
    # b restarts: a new member id for instance ib, no rebalance (same protocols).
    b2 = side.member("b2", client_id="diff-b")
    jb2 = b2.call(JOIN, 9, join_req(group, instance="ib", protocols=BOTH), step="b2.replace")
    hb(b, group, jb, instance="ib", step="b.old_id_heartbeat")
    b.call(
        SYNC,
        5,
        sync_req(group, jb.generation_id, jb.member_id, instance="ib"),
        step="b.old_id_sync",
    )
    b.call(
        JOIN, 9, join_req(group, jb.member_id, instance="ib", protocols=BOTH), step="b.old_id_join"
    )
    b.call(LEAVE, 5, leave_req(group, (jb.member_id, "ib")), step="b.old_id_leave")
    sync(b2, group, jb2, instance="ib")
    hb(b2, group, jb2, instance="ib")
    # The leader restarts: v9 tells it to skip the assignment; v8 names the old leader.
    a2 = side.member("a2", client_id="diff-a")
    ja2 = a2.call(JOIN, 9, join_req(group, instance="ia", protocols=BOTH), step="a2.replace_v9")
    a3 = side.member("a3", client_id="diff-a")
    ja3 = a3.call(JOIN, 8, join_req(group, instance="ia", protocols=BOTH), step="a3.replace_v8")
    hb(a2, group, ja2, instance="ia", step="a2.fenced_heartbeat")
    hb(a3, group, ja3, instance="ia")
    # A known instance with someone else's member id.
    a3.call(
        JOIN,
        9,
        join_req(group, jb2.member_id, instance="ia", protocols=BOTH),
        step="a3.wrong_member_id",
    )
    # A replacement with other protocols: a rebalance (b2 hears of it and rejoins).
    changed = [("roundrobin", b"other")]  # the group's choice becomes roundrobin

    def b2_follows() -> object:
        wait_state(side, group, "PreparingRebalance")  # a4's join is parked
        hb(b2, group, jb2, instance="ib", step="b2.heartbeat_rebalancing")
        return b2.call(
            JOIN, 9, join_req(group, jb2.member_id, instance="ib", protocols=BOTH), step="b2.rejoin"
        )

    ja4, jb3 = side.together(
        [
            lambda: side.member("a4", client_id="diff-a").call(
                JOIN, 9, join_req(group, instance="ia", protocols=changed), step="a4.replace"
            ),
            b2_follows,
        ],
        stagger=0.2,
    )
    a4 = side.member("a4")
    side.together(
        [
            lambda: sync(b2, group, jb3, instance="ib", pname="roundrobin"),
            lambda: sync(a4, group, ja4, assign_all(ja4), instance="ia", pname="roundrobin"),
        ]
    )
    # Admin removal by instance id alone (as kafka-consumer-groups --delete --members).
    side.call(
        LEAVE, 5, leave_req(group, ("", "ib"), ("", "ia"), ("", "nobody")), step="admin_leave"
    )
    hb(a4, group, ja4, instance="ia", step="a4.after_removal")


def test_static_membership(diff_shared: Runner) -> None:
    outcome = diff_shared(static_members)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert steps["b.old_id_heartbeat"].error_code == 82  # FENCED_INSTANCE_ID
    assert steps["a2.replace_v9"].skip_assignment
