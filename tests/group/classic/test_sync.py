"""SyncGroup scenarios: parking, assignment propagation, errors, pending-sync expiry."""

from support.group_context import GroupContext

from coordinator.group import ClassicGroupState
from coordinator.group.events import RebalanceStarted
from protocol.errors import ErrorCode
from protocol.messages.join_group import JoinGroupResponse
from protocol.messages.sync_group import SyncGroupResponse
from storage.records import decode_group_metadata_value, decode_key


def sr(h: GroupContext, handle: int) -> SyncGroupResponse:
    r = h.reply(handle)
    assert isinstance(r, SyncGroupResponse), r
    return r


def completing(h: GroupContext, n: int, **kw: object) -> tuple[list[str], int]:
    ids, handles = [], []
    for _ in range(n):
        mid, hd = h.join_new("g", **kw)  # type: ignore[arg-type]
        ids.append(mid)
        handles.append(hd)
    h.advance_until_answered(handles)
    r = h.reply(handles[0])
    assert isinstance(r, JoinGroupResponse)
    assert h.state("g") is ClassicGroupState.COMPLETING_REBALANCE
    return ids, r.generation_id


def test_follower_sync_parked_until_leader_assignment_then_released_with_record() -> None:
    h = GroupContext()
    (a, b, c), gen = completing(h, 3)
    hb = h.sync("g", b, gen)
    hc = h.sync("g", c, gen)
    assert h.reply(hb) is None and h.reply(hc) is None
    n_records = len(h.records)
    res_handle = h.sync("g", a, gen, {a: b"A", b: b"B"})
    assert sr(h, res_handle).assignment == b"A"
    assert sr(h, hb).assignment == b"B"
    assert sr(h, hc).assignment == b""  # left out by the leader: empty assignment
    assert sr(h, hb).protocol_name == "range" and sr(h, hb).protocol_type == "consumer"
    assert h.state("g") is ClassicGroupState.STABLE
    # Exactly one group metadata record, carrying all three assignments.
    assert len(h.records) == n_records + 1
    _, key, value = h.records[-1]
    assert decode_key(key).group == "g"  # type: ignore[union-attr]
    assert value is not None
    v = decode_group_metadata_value(value)
    assert v.generation == gen and v.leader == a and v.protocol == "range"
    assert {m.member_id: m.assignment for m in v.members} == {a: b"A", b: b"B", c: b""}
    h.assert_replay_equivalent()


def test_follower_sync_after_leader_gets_assignment_immediately() -> None:
    h = GroupContext()
    (a, b), gen = completing(h, 2)
    ha = h.sync("g", a, gen, {a: b"1", b: b"2"})
    assert sr(h, ha).error_code == 0
    assert sr(h, h.sync("g", b, gen)).assignment == b"2"


def test_sync_with_illegal_generation() -> None:
    h = GroupContext()
    (_a, b), gen = completing(h, 2)
    assert sr(h, h.sync("g", b, gen + 1)).error_code == ErrorCode.ILLEGAL_GENERATION
    assert sr(h, h.sync("g", b, gen - 1)).error_code == ErrorCode.ILLEGAL_GENERATION


def test_sync_with_inconsistent_protocol_name_or_type_v5() -> None:
    h = GroupContext()
    (_a, b), gen = completing(h, 2)
    assert sr(h, h.sync("g", b, gen, protocol_name="roundrobin")).error_code == (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    assert sr(h, h.sync("g", b, gen, protocol_type="connect")).error_code == (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    # Before v5 the fields do not exist, so nothing to compare.
    assert h.reply(h.sync("g", b, gen, version=4, protocol_name="roundrobin")) is None


def test_sync_unknown_member_and_unknown_group() -> None:
    h = GroupContext()
    (a, _b), gen = completing(h, 2)
    assert sr(h, h.sync("g", "ghost", gen)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert sr(h, h.sync("nope", a, gen)).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_sync_during_preparing_rebalance_is_rebalance_in_progress() -> None:
    h = GroupContext()
    (a, b), gen = h.stable_group("g", 2)
    h.join("g", a)
    assert sr(h, h.sync("g", b, gen)).error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_rejoin_during_completing_rebalance_fails_parked_syncs() -> None:
    h = GroupContext()
    (a, b), gen = completing(h, 2)
    hb = h.sync("g", b, gen)
    h.join("g", a, protocols=(("range", b"changed"),))  # changed metadata -> rebalance
    assert sr(h, hb).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert sr(h, hb).assignment == b""
    assert h.state("g") is ClassicGroupState.PREPARING_REBALANCE


def test_leader_failure_during_sync_removes_leader_and_rebalances() -> None:
    h = GroupContext()
    (a, b, c), gen = completing(h, 3, rebalance=20000, session=30000)
    hb = h.sync("g", b, gen)
    hc = h.sync("g", c, gen)
    h.advance(19999)
    assert h.reply(hb) is None
    h.advance(1)  # pending-sync deadline: the leader never synced
    assert sr(h, hb).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert sr(h, hc).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    g = h.shard.groups["g"]
    assert a not in g.members and g.state is ClassicGroupState.PREPARING_REBALANCE
    assert h.shard.rebalances["sync_timeout"] == 1
    hb2, hc2 = (
        h.join("g", b, rebalance=20000, session=30000),
        h.join("g", c, rebalance=20000, session=30000),
    )
    r = h.reply(hb2)
    assert isinstance(r, JoinGroupResponse) and r.generation_id == gen + 1 and r.leader == b
    assert h.reply(hc2) is not None


def test_leader_leaving_during_sync_rebalances_and_reelects() -> None:
    h = GroupContext()
    (a, b), gen = completing(h, 2)
    hb = h.sync("g", b, gen)
    h.leave("g", (a, None))
    assert sr(h, hb).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.shard.groups["g"].leader_id == b
    r = h.reply(h.join("g", b))
    assert isinstance(r, JoinGroupResponse) and r.leader == b and r.generation_id == gen + 1


def test_followers_that_never_sync_are_removed_after_rebalance_timeout() -> None:
    h = GroupContext()
    (a, b, c), gen = completing(h, 3, rebalance=20000, session=30000)
    h.sync("g", a, gen, {a: b"x", b: b"y", c: b"z"})
    assert h.state("g") is ClassicGroupState.STABLE
    h.sync("g", b, gen)
    h.advance(20000)
    g = h.shard.groups["g"]
    assert c not in g.members and set(g.members) == {a, b}
    assert g.state is ClassicGroupState.PREPARING_REBALANCE
    assert h.heartbeat("g", a, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    assert any(
        e.cause == "sync_timeout" and e.reason.startswith(f"members {c} did not send SyncGroup")
        for e in h.events
        if isinstance(e, RebalanceStarted)
    )


def test_sync_in_stable_returns_current_assignment() -> None:
    h = GroupContext()
    (_a, b), gen = h.stable_group("g", 2)
    r = sr(h, h.sync("g", b, gen))
    assert r.error_code == 0 and r.assignment == b.encode()
