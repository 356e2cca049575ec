"""KIP-345 static membership."""

from support.group_context import GroupContext, subscription

from coordinator.group import ClassicGroupState
from coordinator.group.events import JoinPhaseExtended
from protocol.errors import ErrorCode
from protocol.messages.join_group import JoinGroupResponse
from protocol.messages.sync_group import SyncGroupResponse
from storage.records import decode_group_metadata_value

RANGE = ("range", subscription("t"))
RR = ("roundrobin", subscription("t"))


def jr(h: GroupContext, handle: int) -> JoinGroupResponse:
    r = h.reply(handle)
    assert isinstance(r, JoinGroupResponse), r
    return r


def static_stable(
    h: GroupContext, instances: list[str], **kw: object
) -> tuple[dict[str, str], int]:
    handles = {i: h.join("g", instance=i, **kw) for i in instances}  # type: ignore[arg-type]
    h.advance_until_answered(list(handles.values()))
    ids = {i: jr(h, x).member_id for i, x in handles.items()}
    gen = jr(h, handles[instances[0]]).generation_id
    h.sync_all("g", list(ids.values()), gen, jr(h, handles[instances[0]]).leader)
    assert h.state("g") is ClassicGroupState.STABLE
    return ids, gen


def test_static_member_as_first_member_needs_no_member_id_round_trip() -> None:
    h = GroupContext()
    x = h.join("g", instance="i1")
    assert h.reply(x) is None  # parked directly, no MEMBER_ID_REQUIRED
    h.advance(3000)
    r = jr(h, x)
    assert r.error_code == 0 and r.generation_id == 1 and r.leader == r.member_id
    assert r.member_id.startswith("i1-")
    assert r.members[0].group_instance_id == "i1"
    assert h.shard.groups["g"].static_members == {"i1": r.member_id}


def test_static_follower_replacement_in_stable_does_not_rebalance() -> None:
    h = GroupContext()
    ids, gen = static_stable(h, ["a", "b"])
    n = len(h.records)
    r = jr(h, h.join("g", instance="b"))
    assert r.error_code == 0 and r.generation_id == gen and r.member_id != ids["b"]
    assert r.leader == ids["a"] and r.members == [] and not r.skip_assignment
    g = h.shard.groups["g"]
    assert g.state is ClassicGroupState.STABLE and g.static_members["b"] == r.member_id
    assert h.shard.rebalances == dict.fromkeys(h.shard.rebalances, 0) | {"join": 1}
    # The replacement is persisted, keeping b's assignment.
    assert len(h.records) == n + 1
    value = h.records[-1][2]
    assert value is not None
    v = decode_group_metadata_value(value)
    assert [m.member_id for m in v.members] == [ids["a"], r.member_id]
    assert v.members[1].assignment == ids["b"].encode()
    sync = h.reply(h.sync("g", r.member_id, gen, instance="b"))
    assert isinstance(sync, SyncGroupResponse) and sync.assignment == ids["b"].encode()
    h.assert_replay_equivalent()


def test_static_leader_replacement_v9_gets_skip_assignment() -> None:
    h = GroupContext()
    ids, _gen = static_stable(h, ["a", "b"])
    r = jr(h, h.join("g", instance="a", version=9))
    assert r.skip_assignment and r.leader == r.member_id
    assert [m.member_id for m in r.members] == [r.member_id, ids["b"]]
    assert h.state("g") is ClassicGroupState.STABLE


def test_static_leader_replacement_before_v9_names_old_leader() -> None:
    h = GroupContext()
    ids, _gen = static_stable(h, ["a", "b"])
    r = jr(h, h.join("g", instance="a", version=8))
    assert not r.skip_assignment and r.members == []
    assert r.leader == ids["a"]  # so the new incarnation acts as a follower and just syncs
    assert h.shard.groups["g"].leader_id == r.member_id


def test_old_static_member_id_is_fenced_after_replacement() -> None:
    h = GroupContext()
    ids, gen = static_stable(h, ["a", "b"])
    new = jr(h, h.join("g", instance="b")).member_id
    old = ids["b"]
    assert h.heartbeat("g", old, gen, instance="b") == ErrorCode.FENCED_INSTANCE_ID
    sync = h.reply(h.sync("g", old, gen, instance="b"))
    assert isinstance(sync, SyncGroupResponse) and sync.error_code == ErrorCode.FENCED_INSTANCE_ID
    assert jr(h, h.join("g", old, instance="b")).error_code == ErrorCode.FENCED_INSTANCE_ID
    commit = h.commit("g", {("t", 0): 1}, member_id=old, generation=gen, instance="b")
    assert commit == {("t", 0): ErrorCode.FENCED_INSTANCE_ID}
    assert h.heartbeat("g", new, gen, instance="b") == ErrorCode.NO_ERROR
    # Without the instance id, the old id is merely unknown.
    assert h.heartbeat("g", old, gen) == ErrorCode.UNKNOWN_MEMBER_ID


def test_duplicate_static_follower_parked_join_is_fenced() -> None:
    h = GroupContext()
    ids, _gen = static_stable(h, ["a", "b"])
    h.join("g", ids["a"], instance="a")  # leader rejoin: PreparingRebalance
    old_join = h.join("g", ids["b"], instance="b")
    assert h.reply(old_join) is not None  # both rejoined -> generation 2
    gen2 = jr(h, old_join).generation_id
    old_sync = h.sync("g", ids["b"], gen2, instance="b")
    assert h.reply(old_sync) is None
    # A second process with the same instance id shows up during CompletingRebalance.
    new_join = h.join("g", instance="b")
    r = h.reply(old_sync)
    assert isinstance(r, SyncGroupResponse) and r.error_code == ErrorCode.FENCED_INSTANCE_ID
    assert h.reply(new_join) is None  # the replacement forced a rebalance
    assert h.state("g") is ClassicGroupState.PREPARING_REBALANCE
    assert h.shard.rebalances["static_replacement"] == 1


def test_static_replacement_during_completing_rebalance_forces_rebalance() -> None:
    h = GroupContext()
    ids, gen = static_stable(h, ["a", "b"])
    a, b = ids["a"], ids["b"]
    h.join("g", a, instance="a")  # leader rejoin; both rejoin -> CompletingRebalance
    h.join("g", b, instance="b")
    assert h.state("g") is ClassicGroupState.COMPLETING_REBALANCE
    parked = h.sync("g", b, gen + 1, instance="b")
    assert h.reply(parked) is None
    # The leader's instance restarts while the leader may be computing the assignment.
    na = h.join("g", instance="a")
    assert h.state("g") is ClassicGroupState.PREPARING_REBALANCE
    assert h.shard.rebalances["static_replacement"] == 1
    r = h.reply(parked)
    assert isinstance(r, SyncGroupResponse) and r.error_code == ErrorCode.REBALANCE_IN_PROGRESS
    rb = h.join("g", b, instance="b")
    new_a = jr(h, na).member_id
    assert jr(h, na).generation_id == jr(h, rb).generation_id == gen + 2
    assert jr(h, na).leader == new_a
    assert [m.member_id for m in jr(h, na).members] == [new_a, b]


def test_static_rejoin_with_changed_protocol_rebalances() -> None:
    h = GroupContext()
    ids, gen = static_stable(h, ["a", "b"], protocols=(RANGE, RR))
    assert h.shard.groups["g"].protocol_name == "range"
    x = h.join("g", instance="b", protocols=(RR,))
    assert h.reply(x) is None
    assert h.state("g") is ClassicGroupState.PREPARING_REBALANCE
    assert h.shard.rebalances["static_replacement"] == 1
    h.join("g", ids["a"], instance="a", protocols=(RANGE, RR))
    assert jr(h, x).protocol_name == "roundrobin" and jr(h, x).generation_id == gen + 1


def test_static_rejoin_with_unchanged_selection_but_new_metadata_does_not_rebalance() -> None:
    h = GroupContext()
    _ids, gen = static_stable(h, ["a", "b"], protocols=(RANGE, RR))
    r = jr(h, h.join("g", instance="b", protocols=(RANGE,)))
    assert r.error_code == 0 and r.generation_id == gen
    assert h.state("g") is ClassicGroupState.STABLE


def test_group_waits_for_non_rejoined_static_member_until_rebalance_timeout() -> None:
    h = GroupContext()
    ids, gen = static_stable(h, ["a", "b"], session=10000, rebalance=30000)
    ha = h.join("g", ids["a"], instance="a", session=10000, rebalance=30000)
    for _ in range(6):  # b keeps heartbeating but does not rejoin
        h.advance(5000)
        if h.reply(ha) is None:
            assert h.heartbeat("g", ids["b"], gen, instance="b") == ErrorCode.REBALANCE_IN_PROGRESS
    r = jr(h, ha)
    # Static members are not dropped for failing to rejoin.
    assert r.generation_id == gen + 1
    assert [m.member_id for m in r.members] == [ids["a"], ids["b"]]
    assert h.shard.groups["g"].static_members == {"a": ids["a"], "b": ids["b"]}


def test_group_stuck_while_only_non_rejoined_static_members_remain() -> None:
    h = GroupContext()
    ids, gen = static_stable(h, ["a", "b"], session=10000, rebalance=20000)
    h.leave("g", (ids["a"], "a"))
    assert h.state("g") is ClassicGroupState.PREPARING_REBALANCE
    for _ in range(10):  # 50 s: b heartbeats, never rejoins; no one can lead
        h.advance(5000)
        h.heartbeat("g", ids["b"], gen, instance="b")
    assert h.state("g") is ClassicGroupState.PREPARING_REBALANCE
    assert JoinPhaseExtended("g") in h.events
    hb = h.join("g", ids["b"], instance="b", session=10000, rebalance=20000)
    r = jr(h, hb)
    assert r.generation_id == gen + 1 and r.leader == ids["b"]


def test_static_member_removed_by_session_timeout() -> None:
    h = GroupContext()
    ids, gen = static_stable(h, ["a", "b"], session=10000)
    for _ in range(3):
        h.advance(5000)
        h.heartbeat("g", ids["a"], gen, instance="a")
    assert "b" not in h.shard.groups["g"].static_members
    assert h.state("g") is ClassicGroupState.PREPARING_REBALANCE


def test_batch_leave_of_static_members() -> None:
    h = GroupContext()
    ids, _gen = static_stable(h, ["a", "b", "c", "d"])
    resp = h.leave(
        "g",
        (ids["a"], "a"),  # by member id and instance id
        ("", "b"),  # admin removal by instance id alone
        ("wrong-id", "c"),  # fenced
        ("", "zzz"),  # unknown instance
        ("ghost", None),  # unknown member
    )
    assert [m.error_code for m in resp.members] == [
        0,
        0,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.UNKNOWN_MEMBER_ID,
    ]
    assert [(m.member_id, m.group_instance_id) for m in resp.members][1] == ("", "b")
    g = h.shard.groups["g"]
    assert set(g.static_members) == {"c", "d"}
    assert g.state is ClassicGroupState.PREPARING_REBALANCE
    assert h.shard.rebalances["leave"] == 1
