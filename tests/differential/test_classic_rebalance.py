"""Classic groups, Kafka vs kgc: two and three members rebalancing, protocol selection, rejoins.

Concurrent joins go through ``side.together`` (sent in a fixed order, 50 ms apart); every
member id is first handed out by a sequential MEMBER_ID_REQUIRED step, so ids are numbered
alike on both sides.
"""

from __future__ import annotations

import pytest
from support.diffkit import Runner, Side
from support.groupops import (
    JOIN,
    LEAVE,
    SYNC,
    assign_all,
    hb,
    join,
    join_req,
    leave_req,
    member_id_for,
    subscription,
    sync,
    sync_req,
    wait_state,
)

pytestmark = [pytest.mark.kafka, pytest.mark.integration]


def _form(side: Side, group: str, labels: list[str], **kw: object) -> dict[str, object]:
    """Members ``labels`` form the group (the first leads) and sync; their answers.

    The first joins alone, then the others join while it rejoins: that join phase ends when
    every member (the pending ones included) has joined, whatever the arrival times -- a
    group formed from Empty would depend on the initial rebalance delay (100 ms)."""
    ms = [side.member(label) for label in labels]
    first = join(ms[0], group, **kw)  # type: ignore[arg-type]
    sync(ms[0], group, first, assign_all(first))
    ids = [first.member_id] + [member_id_for(m, group, **kw) for m in ms[1:]]  # type: ignore[arg-type]
    joined = side.together(
        [
            lambda m=m, i=i: m.call(JOIN, 9, join_req(group, i, **kw))  # type: ignore[misc]
            for m, i in zip(ms, ids, strict=True)
        ]
    )
    leader = joined[0]
    syncs = side.together(
        [lambda m=m, j=j: sync(m, group, j) for m, j in zip(ms[1:], joined[1:], strict=True)]  # type: ignore[misc]
        + [lambda: sync(ms[0], group, leader, assign_all(leader))]
    )
    return {"members": ms, "joined": joined, "synced": syncs}


def two_members(side: Side) -> None:
    group = side.name("classic-two")
    side.wait_coordinator(group)
    f = _form(side, group, ["a", "b"])
    a, b = f["members"]  # type: ignore[misc]
    ja, jb = f["joined"]  # type: ignore[misc]
    hb(a, group, ja)
    hb(b, group, jb)
    # A third member arrives: the others learn of it from their heartbeats and rejoin.
    c = side.member("c")
    cid = member_id_for(c, group)

    def a_moves() -> object:
        wait_state(side, group, "PreparingRebalance")  # c's join is parked
        hb(a, group, ja, step="a.heartbeat_during_rebalance")
        a.call(
            SYNC,
            5,
            sync_req(group, ja.generation_id, ja.member_id),
            step="a.sync_during_rebalance",
        )
        return a.call(JOIN, 9, join_req(group, ja.member_id), step="a.rejoin")

    joined = side.together(
        [
            lambda: c.call(JOIN, 9, join_req(group, cid)),
            a_moves,
            lambda: b.call(JOIN, 9, join_req(group, jb.member_id), step="b.rejoin"),
        ],
        stagger=0.2,
    )
    jc, ja2, jb2 = joined
    # Generation 2: the old generation is now illegal.
    hb(a, group, ja, step="a.heartbeat_old_generation")
    side.together(
        [
            lambda: sync(b, group, jb2),
            lambda: sync(c, group, jc),
            lambda: sync(a, group, ja2, assign_all(ja2)),
        ]
    )
    for m, j in ((a, ja2), (b, jb2), (c, jc)):
        hb(m, group, j)
    # The follower b leaves: a rebalance without it.
    b.call(LEAVE, 5, leave_req(group, jb2.member_id))
    hb(a, group, ja2, step="a.heartbeat_after_leave")
    ja3, jc3 = side.together(
        [
            lambda: a.call(JOIN, 9, join_req(group, ja2.member_id), step="a.rejoin2"),
            lambda: c.call(JOIN, 9, join_req(group, jc.member_id), step="c.rejoin2"),
        ]
    )
    side.together(
        [lambda: sync(c, group, jc3), lambda: sync(a, group, ja3, assign_all(ja3))],
    )
    # The leader leaves: c is alone, and leads once it rejoins.
    a.call(LEAVE, 5, leave_req(group, ja3.member_id), step="a.leave")
    jc4 = c.call(JOIN, 9, join_req(group, jc3.member_id), step="c.rejoin_alone")
    sync(c, group, jc4, assign_all(jc4))
    c.call(LEAVE, 5, leave_req(group, jc4.member_id), step="c.leave")


def test_two_then_three_members_rebalance(diff_shared: Runner) -> None:
    outcome = diff_shared(two_members)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert steps["a.heartbeat_during_rebalance"].error_code == 27
    assert steps["a.heartbeat_old_generation"].error_code == 22


def protocol_vote(side: Side) -> None:
    group = side.name("classic-vote")
    side.wait_coordinator(group)
    lists = {
        "a": [("range", b"a"), ("roundrobin", b"a"), ("sticky", b"a")],
        "b": [("sticky", b"b"), ("roundrobin", b"b")],
        "c": [("roundrobin", b"c"), ("sticky", b"c"), ("range", b"c")],
    }
    ms = {k: side.member(k) for k in lists}
    # a forms the group alone; b and c join while it rejoins (see ``_form``).
    ja0 = join(ms["a"], group, protocols=lists["a"])
    sync(ms["a"], group, ja0, assign_all(ja0))
    ids = {"a": ja0.member_id}
    ids.update({k: member_id_for(ms[k], group, protocols=lists[k]) for k in ("b", "c")})
    joined = side.together(
        [
            lambda k=k: ms[k].call(JOIN, 9, join_req(group, ids[k], protocols=lists[k]))  # type: ignore[misc]
            for k in lists
        ]
    )
    # A fourth member without any of the group's protocols, one of another type.
    d = side.member("d")
    d.call(JOIN, 9, join_req(group, protocols=[("cooperative", b"d")]), step="d.no_common")
    d.call(JOIN, 9, join_req(group, ptype="connect"), step="d.other_type")
    d.call(JOIN, 9, join_req(group, ptype=""), step="d.empty_type")
    # Sync with the protocol the group did not select (v5 checks it).
    ja = joined[0]
    ms["a"].call(
        SYNC,
        5,
        sync_req(group, ja.generation_id, ja.member_id, pname="range"),
        step="a.sync_wrong_protocol",
    )
    ms["a"].call(
        SYNC,
        5,
        sync_req(group, ja.generation_id, ja.member_id, ptype="connect", pname="roundrobin"),
        step="a.sync_wrong_type",
    )
    side.together(
        [
            lambda: sync(ms["b"], group, joined[1], pname="roundrobin"),
            lambda: sync(ms["c"], group, joined[2], pname=None, ptype=None),
            lambda: sync(ms["a"], group, ja, assign_all(ja), pname="roundrobin"),
        ]
    )


def test_protocol_vote_and_inconsistent_protocols(diff_shared: Runner) -> None:
    outcome = diff_shared(protocol_vote)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert steps["a.join_group"].protocol_name == "roundrobin"
    assert steps["d.no_common"].error_code == 23


def rejoins(side: Side) -> None:
    group = side.name("classic-rejoin")
    side.wait_coordinator(group)
    topics = subscription("t1")
    f = _form(side, group, ["a", "b"], protocols=[("range", topics)])
    a, b = f["members"]  # type: ignore[misc]
    ja, jb = f["joined"]  # type: ignore[misc]
    # Stable, unchanged follower: answered at once with the current generation.
    b.call(JOIN, 9, join_req(group, jb.member_id, protocols=[("range", topics)]), step="b.same")
    # Stable, the leader rejoins: a rebalance (b learns it from a heartbeat).

    def b_follows() -> object:
        wait_state(side, group, "PreparingRebalance")  # a's join is parked
        hb(b, group, jb, step="b.heartbeat_rebalancing")
        return b.call(
            JOIN, 9, join_req(group, jb.member_id, protocols=[("range", topics)]), step="b.rejoin"
        )

    ja2, jb2 = side.together(
        [
            lambda: a.call(
                JOIN, 9, join_req(group, ja.member_id, protocols=[("range", topics)]), step="a.rj"
            ),
            b_follows,
        ],
        stagger=0.2,
    )
    # CompletingRebalance: an unchanged rejoin gets the same generation again.
    b.call(JOIN, 9, join_req(group, jb2.member_id, protocols=[("range", topics)]), step="b.retry")
    hb(b, group, jb2, step="b.heartbeat_completing")
    # b syncs (parked: the leader has not), then rejoins with a changed subscription on a
    # second connection: the parked sync is answered REBALANCE_IN_PROGRESS.
    b_alt = side.member("b_alt", client_id="diff-b")
    changed = [("range", subscription("t1", "t2"))]
    _parked, jb3, ja3 = side.together(
        [
            lambda: sync(b, group, jb2),
            lambda: b_alt.call(JOIN, 9, join_req(group, jb2.member_id, protocols=changed)),
            lambda: (
                wait_state(side, group, "PreparingRebalance"),  # b's changed join is parked
                a.call(
                    JOIN,
                    9,
                    join_req(group, ja2.member_id, protocols=[("range", topics)]),
                    step="a.rj2",
                ),
            )[1],
        ],
        stagger=0.2,
    )
    side.together([lambda: sync(b, group, jb3), lambda: sync(a, group, ja3, assign_all(ja3))])
    hb(a, group, ja3)
    hb(b, group, jb3)


def test_rejoins_in_each_state(diff_shared: Runner) -> None:
    outcome = diff_shared(rejoins)
    codes = [e.response.error_code for e in outcome.kafka.exchanges if e.step == "b.sync_group"]
    assert codes == [0, 27, 0]  # formed; parked then failed by the rejoin; resynced
