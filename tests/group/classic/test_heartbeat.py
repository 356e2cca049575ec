"""Heartbeat, session timeouts and LeaveGroup."""

from support.group_context import GroupContext

from coordinator.group import ClassicGroupState
from coordinator.group.events import RebalanceStarted
from protocol.errors import ErrorCode
from protocol.messages.heartbeat import HeartbeatRequest
from protocol.messages.join_group import JoinGroupResponse
from protocol.messages.sync_group import SyncGroupResponse


def test_heartbeat_answer_in_each_state() -> None:
    h = GroupContext()
    assert h.heartbeat("g", "m", 0) == ErrorCode.UNKNOWN_MEMBER_ID  # unknown group
    a, ha = h.join_new("g")
    assert h.heartbeat("g", a, 0) == ErrorCode.REBALANCE_IN_PROGRESS  # PreparingRebalance
    b, hb = h.join_new("g")
    h.advance_until_answered([ha, hb])
    assert h.state("g") is ClassicGroupState.COMPLETING_REBALANCE
    assert h.heartbeat("g", a, 1) == ErrorCode.NO_ERROR
    h.sync("g", a, 1, {})
    assert h.state("g") is ClassicGroupState.STABLE
    assert h.heartbeat("g", b, 1) == ErrorCode.NO_ERROR
    h.leave("g", (a, None), (b, None))
    assert h.state("g") is ClassicGroupState.EMPTY
    assert h.heartbeat("g", a, 2) == ErrorCode.UNKNOWN_MEMBER_ID


def test_heartbeat_with_illegal_generation() -> None:
    h = GroupContext()
    (a,), gen = h.stable_group("g", 1)
    assert h.heartbeat("g", a, gen + 1) == ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat("g", a, gen - 1) == ErrorCode.ILLEGAL_GENERATION


def test_heartbeat_keeps_member_alive_and_session_expiry_rebalances() -> None:
    h = GroupContext()
    (a, b), gen = h.stable_group("g", 2, session=10000)
    for _ in range(5):
        h.advance(6000)
        assert h.heartbeat("g", a, gen) == ErrorCode.NO_ERROR
        if h.state("g") is ClassicGroupState.STABLE:
            h.heartbeat("g", b, gen)
    h.advance(9999)
    assert h.heartbeat("g", a, gen) == ErrorCode.NO_ERROR
    h.advance(1)  # b silent for 10000 ms
    assert h.state("g") is ClassicGroupState.PREPARING_REBALANCE
    assert b not in h.shard.groups["g"].members
    assert h.shard.rebalances["session_timeout"] == 1
    started = [e for e in h.events if isinstance(e, RebalanceStarted)]
    assert (started[-1].cause, started[-1].reason) == (
        "session_timeout",
        f"member {b} session expired after 10000 ms",
    )
    r = h.reply(h.join("g", a))
    assert isinstance(r, JoinGroupResponse) and r.generation_id == gen + 1
    assert any(
        f"generation {gen + 1}: member {b} session expired after 10000 ms; 1 members, protocol range"
        in e
        for e in h.event_lines()
    )


def test_heartbeat_moves_the_deadline_without_timer_work_and_the_timer_re_arms() -> None:
    h = GroupContext()
    (a,), gen = h.stable_group("g", 1, session=10000)
    key = f"heartbeat-g-{a}"
    armed = h.timers[key]
    h.advance(4000)
    result = h.shard.heartbeat(h.ctx(4), HeartbeatRequest("g", gen, a, None), h.now)
    h.apply(result)
    # the deadline moved later: no timer operation, the runtime's wake-up stays where it was
    assert result.wakeup is None and h.timers[key] == armed
    assert h.shard.pending_timers()[key] == h.now + 10000
    h.advance(armed - h.now)  # the old deadline fires and re-arms for the rest
    assert h.timers[key] == armed + 4000 and h.state("g") is ClassicGroupState.STABLE
    assert a in h.shard.groups["g"].members
    h.advance(4000)  # now the session really is over
    assert a not in h.shard.groups["g"].members


def test_session_timeout_during_rebalance_completes_join_without_the_member() -> None:
    h = GroupContext()
    (a, _b), gen = h.stable_group("g", 2, session=10000, rebalance=60000)
    ha = h.join("g", a)  # leader rejoins; b never does and never heartbeats
    h.advance(9999)
    assert h.reply(ha) is None
    h.heartbeat("g", a, gen)
    h.advance(1)
    r = h.reply(ha)
    assert isinstance(r, JoinGroupResponse)
    assert r.generation_id == gen + 1 and [m.member_id for m in r.members] == [a]


def test_parked_member_is_not_expired_by_session_timeout() -> None:
    h = GroupContext()
    (a, b), gen = h.stable_group("g", 2, session=10000, rebalance=60000)
    ha = h.join("g", a)
    for _ in range(8):  # 40 s: a's session deadline passes while it is parked
        h.advance(5000)
        assert h.heartbeat("g", b, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    assert a in h.shard.groups["g"].members and h.reply(ha) is None
    hb = h.join("g", b)
    r = h.reply(ha)
    assert isinstance(r, JoinGroupResponse) and r.generation_id == gen + 1
    assert h.reply(hb) is not None


def test_last_member_leaving_empties_group_and_writes_metadata() -> None:
    h = GroupContext()
    (a,), gen = h.stable_group("g", 1)
    resp = h.leave("g", (a, None))
    assert resp.members[0].error_code == 0
    g = h.shard.groups["g"]
    assert (
        g.state is ClassicGroupState.EMPTY and g.generation == gen + 1 and g.protocol_name is None
    )
    assert h.shard.rebalances["leave"] == 1
    assert f"heartbeat-g-{a}" not in h.timers
    h.assert_replay_equivalent()


def test_leave_v0_single_member_uses_top_level_error() -> None:
    h = GroupContext()
    (_a, b), _gen = h.stable_group("g", 2)
    assert h.leave("g", ("ghost", None), version=0).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.leave("g", (b, None), version=2).error_code == 0
    assert h.state("g") is ClassicGroupState.PREPARING_REBALANCE


def test_leave_unknown_group_is_unknown_member_id() -> None:
    h = GroupContext()
    # v3+: Kafka's coordinator service answers every member UNKNOWN_MEMBER_ID, the whole
    # request NONE (an empty batch: no members, no error).
    resp = h.leave("nope", ("m", None), ("", "i1"))
    assert resp.error_code == 0
    assert [(r.member_id, r.group_instance_id, r.error_code) for r in resp.members] == [
        ("m", None, ErrorCode.UNKNOWN_MEMBER_ID),
        ("", "i1", ErrorCode.UNKNOWN_MEMBER_ID),
    ]
    assert h.leave("nope").members == [] and h.leave("nope").error_code == 0
    # Before v3 the one member's error is the request's.
    assert h.leave("nope", ("m", None), version=2).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert "nope" not in h.shard.groups


def test_leave_of_pending_member() -> None:
    h = GroupContext()
    r = h.reply(h.join("g"))
    assert isinstance(r, JoinGroupResponse)
    resp = h.leave("g", (r.member_id, None))
    assert resp.members[0].error_code == 0
    assert not h.shard.groups["g"].pending_members
    assert f"pending-g-{r.member_id}" not in h.timers


def test_leave_during_preparing_rebalance_can_complete_join() -> None:
    h = GroupContext()
    (a, b), gen = h.stable_group("g", 2)
    ha = h.join("g", a)
    assert h.reply(ha) is None
    h.leave("g", (b, None))
    r = h.reply(ha)
    assert isinstance(r, JoinGroupResponse) and r.generation_id == gen + 1


def test_leave_answers_removed_members_parked_requests() -> None:
    h = GroupContext()
    (a, b), gen = h.stable_group("g", 2)
    ha = h.join("g", a)
    hb = h.join("g", b)
    assert h.reply(hb) is not None  # both rejoined -> completed
    hs = h.sync("g", b, gen + 1)
    h.leave("g", (b, None))
    r = h.reply(hs)
    assert isinstance(r, SyncGroupResponse) and r.error_code != 0
    del ha
