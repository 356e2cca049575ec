"""Classic groups, Kafka vs kgc: members removed by time -- a session that expires, a member
that does not rejoin within the rebalance timeout, a follower that never syncs.

Both sides play at once (``parallel=True``): the session timeout cannot be below Kafka's
group.min.session.timeout.ms (6 s). Waiting is done by polling on the unrecorded setup
connection until the awaited answer shows, so the recorded steps do not depend on timing.
"""

from __future__ import annotations

import time

import pytest
from support.diffkit import Runner, Side
from support.groupops import (
    HEARTBEAT,
    JOIN,
    assign_all,
    hb,
    hb_req,
    join,
    join_req,
    member_id_for,
    sync,
    wait_state,
)

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

SESSION = 6000  # Kafka's group.min.session.timeout.ms: the smallest allowed
REBALANCE = 1000


def _poll_heartbeat(side: Side, group: str, generation: int, member_id: str, code: int) -> None:
    """Heartbeat (unrecorded) until the answer is ``code``."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        resp = side.untimed().call(HEARTBEAT, 4, hb_req(group, generation, member_id))
        if resp.error_code == code:
            return
        time.sleep(0.2)
    raise AssertionError(f"{side.label}: heartbeat of {member_id} never answered {code}")


def _pair(side: Side, group: str) -> tuple[object, ...]:
    """a forms the group alone, b joins while a rejoins (no dependence on the initial
    rebalance delay); both synced."""
    a, b = side.member("a"), side.member("b")
    kw = {"session": SESSION, "rebalance": REBALANCE}
    ja = join(a, group, **kw)  # type: ignore[arg-type]
    sync(a, group, ja, assign_all(ja))
    ib = member_id_for(b, group, **kw)  # type: ignore[arg-type]
    ja, jb = side.together(
        [
            lambda: a.call(JOIN, 9, join_req(group, ja.member_id, **kw)),  # type: ignore[arg-type]
            lambda: b.call(JOIN, 9, join_req(group, ib, **kw)),  # type: ignore[arg-type]
        ]
    )
    side.together([lambda: sync(b, group, jb), lambda: sync(a, group, ja, assign_all(ja))])
    return a, b, ja, jb


def expiries(side: Side) -> None:
    kw = {"session": SESSION, "rebalance": REBALANCE}
    # 1. The rebalance timeout: b does not rejoin, so the join phase ends without it.
    group = side.name("classic-rebalance-timeout")
    side.wait_coordinator(group)
    a, b, ja, jb = _pair(side, group)
    ja2 = a.call(JOIN, 9, join_req(group, ja.member_id, **kw), step="a.rejoin_alone")  # type: ignore[attr-defined, arg-type]
    hb(b, group, jb, step="b.heartbeat_removed")  # type: ignore[arg-type]
    sync(a, group, ja2, assign_all(ja2))  # type: ignore[arg-type]
    # 2. A follower that never syncs: removed after the rebalance timeout, a rebalance.
    group = side.name("classic-sync-timeout")
    side.wait_coordinator(group)
    a, c = side.member("a2"), side.member("c2")
    ja0 = join(a, group, **kw)  # type: ignore[arg-type]
    sync(a, group, ja0, assign_all(ja0))
    ic = member_id_for(c, group, **kw)  # type: ignore[arg-type]
    ja, jc = side.together(
        [
            lambda: a.call(JOIN, 9, join_req(group, ja0.member_id, **kw)),  # type: ignore[arg-type]
            lambda: c.call(JOIN, 9, join_req(group, ic, **kw)),  # type: ignore[arg-type]
        ]
    )
    sync(a, group, ja, assign_all(ja))
    _poll_heartbeat(side, group, ja.generation_id, ja.member_id, 27)
    hb(a, group, ja, step="a2.heartbeat_after_sync_timeout")
    ja2 = a.call(JOIN, 9, join_req(group, ja.member_id, **kw), step="a2.rejoin")  # type: ignore[arg-type]
    hb(c, group, jc, step="c2.heartbeat_removed")
    sync(a, group, ja2, assign_all(ja2))
    # 3. A session that expires: b stops heartbeating, a hears of it and rejoins alone.
    group = side.name("classic-session")
    side.wait_coordinator(group)
    a, b, ja, jb = _pair(side, group)
    _poll_heartbeat(side, group, ja.generation_id, ja.member_id, 27)  # type: ignore[attr-defined]
    hb(a, group, ja, step="a.heartbeat_after_expiry")  # type: ignore[arg-type]
    ja2 = a.call(JOIN, 9, join_req(group, ja.member_id, **kw), step="a.rejoin_after_expiry")  # type: ignore[attr-defined, arg-type]
    hb(b, group, jb, step="b.heartbeat_expired")  # type: ignore[arg-type]
    sync(a, group, ja2, assign_all(ja2))  # type: ignore[arg-type]


def pending_member(side: Side) -> None:
    """A member handed an id (MEMBER_ID_REQUIRED) that does not come back: the join phase
    waits for it until the rebalance timeout; when it does come back, it rebalances in."""
    kw = {"session": SESSION, "rebalance": REBALANCE}
    group = side.name("classic-pending")
    side.wait_coordinator(group)
    p, b = side.member("p"), side.member("b")
    pid = member_id_for(p, group, **kw)  # type: ignore[arg-type]
    jb = join(b, group, **kw)  # type: ignore[arg-type]
    sync(b, group, jb, assign_all(jb))
    jp, jb2 = side.together(
        [
            lambda: p.call(JOIN, 9, join_req(group, pid, **kw), step="p.comes_back"),  # type: ignore[arg-type]
            lambda: (
                wait_state(side, group, "PreparingRebalance"),  # p's join is parked
                hb(b, group, jb, step="b.heartbeat_rebalancing"),
                b.call(JOIN, 9, join_req(group, jb.member_id, **kw), step="b.rejoin"),  # type: ignore[arg-type]
            )[2],
        ],
        stagger=0.2,
    )
    side.together([lambda: sync(p, group, jp), lambda: sync(b, group, jb2, assign_all(jb2))])


def test_pending_member_holds_the_join_phase_until_the_rebalance_timeout(
    diff_shared: Runner,
) -> None:
    outcome = diff_shared(pending_member)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert steps["b.heartbeat_rebalancing"].error_code == 27
    assert len(steps["b.rejoin"].members) == 2


def test_members_removed_by_timeouts(diff_shared: Runner) -> None:
    outcome = diff_shared(expiries, parallel=True)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert steps["b.heartbeat_expired"].error_code == 25
    assert len(steps["a.rejoin_after_expiry"].members) == 1
