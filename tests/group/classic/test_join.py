"""JoinGroup scenarios from Kafka's checklist: validation, KIP-394, max size, delays, completion."""

from support.group_context import GroupContext, subscription

from coordinator.group import ClassicGroupState, GroupConfig
from coordinator.group.events import MembersRemoved, RebalanceStarted
from protocol.errors import ErrorCode
from protocol.messages.join_group import JoinGroupResponse

RANGE = ("range", subscription("t"))
RR = ("roundrobin", subscription("t"))


def jr(h: GroupContext, handle: int) -> JoinGroupResponse:
    r = h.reply(handle)
    assert isinstance(r, JoinGroupResponse), r
    return r


def test_session_timeout_below_minimum_is_invalid_session_timeout() -> None:
    h = GroupContext()
    assert jr(h, h.join("g", session=5999)).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert "g" not in h.shard.groups


def test_session_timeout_above_maximum_is_invalid_session_timeout() -> None:
    h = GroupContext()
    assert jr(h, h.join("g", session=1800001)).error_code == ErrorCode.INVALID_SESSION_TIMEOUT


def test_empty_group_id_is_invalid_group_id_before_session_timeout_check() -> None:
    h = GroupContext()
    assert jr(h, h.join("", session=1)).error_code == ErrorCode.INVALID_GROUP_ID


def test_unknown_member_id_on_unknown_group_is_unknown_member_id() -> None:
    h = GroupContext()
    r = jr(h, h.join("g", "ghost"))
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert "g" not in h.shard.groups


def test_unknown_member_id_on_existing_group_is_unknown_member_id() -> None:
    h = GroupContext()
    h.stable_group("g", 1)
    r = jr(h, h.join("g", "ghost"))
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert r.member_id == "ghost"
    assert h.state("g") is ClassicGroupState.STABLE


def test_empty_protocol_type_is_inconsistent_group_protocol() -> None:
    h = GroupContext()
    assert jr(h, h.join("g", protocol_type="")).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert jr(h, h.join("g2", protocols=())).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_new_group_is_persisted_with_an_empty_metadata_record() -> None:
    h = GroupContext()
    h.join("g")
    assert len(h.records) == 1
    assert h.mirror.groups["g"].generation == 0
    assert h.mirror.groups["g"].state is ClassicGroupState.EMPTY


def test_other_protocol_type_or_unsupported_protocol_is_inconsistent() -> None:
    h = GroupContext()
    ids, _ = h.stable_group("g", 1)
    assert jr(h, h.join("g", protocol_type="connect")).error_code == (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    assert jr(h, h.join("g", protocols=(RR,))).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # Also for a known member changing to an unsupported-by-all protocol set.
    assert jr(h, h.join("g", ids[0], protocol_type="connect")).error_code == (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )


def test_member_id_required_from_v4_and_generated_from_client_id() -> None:
    h = GroupContext()
    r = jr(h, h.join("g", version=4, client_id="app"))
    assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert r.member_id.startswith("app-")
    assert h.shard.groups["g"].is_pending(r.member_id)
    assert f"pending-g-{r.member_id}" in h.timers


def test_v3_join_without_member_id_is_admitted_directly() -> None:
    h = GroupContext()
    handle = h.join("g", version=3, client_id="old")
    assert h.reply(handle) is None  # parked for the initial delay
    h.advance(3000)
    r = jr(h, handle)
    assert r.error_code == 0 and r.generation_id == 1 and r.member_id.startswith("old-")
    assert r.leader == r.member_id


def test_first_generation_is_one_and_only_leader_gets_members() -> None:
    h = GroupContext()
    a, ha = h.join_new("g")
    b, hb = h.join_new("g")
    h.advance_until_answered([ha, hb])
    ra, rb = jr(h, ha), jr(h, hb)
    assert ra.generation_id == rb.generation_id == 1
    assert ra.leader == rb.leader == a
    assert [m.member_id for m in ra.members] == [a, b]
    assert rb.members == []
    assert ra.protocol_name == "range" and ra.protocol_type == "consumer"
    assert h.state("g") is ClassicGroupState.COMPLETING_REBALANCE


def test_protocol_selected_by_vote() -> None:
    h = GroupContext()
    handles = [
        h.join_new("g", protocols=(RR, RANGE))[1],
        h.join_new("g", protocols=(RANGE, RR))[1],
        h.join_new("g", protocols=(RANGE, RR))[1],
    ]
    h.advance_until_answered(handles)
    assert {jr(h, x).protocol_name for x in handles} == {"range"}


def test_max_size_counts_parked_members_not_pending_ones() -> None:
    h = GroupContext(GroupConfig(group_max_size=3))
    pending = [jr(h, h.join("g")).member_id for _ in range(5)]  # Empty group: all get ids
    handles = [h.join("g", mid) for mid in pending]
    errors = [h.reply(x).error_code if h.reply(x) else None for x in handles]
    assert errors == [None, None, None, ErrorCode.GROUP_MAX_SIZE_REACHED] * 1 + [
        ErrorCode.GROUP_MAX_SIZE_REACHED
    ]
    assert jr(h, handles[3]).member_id == ""
    g = h.shard.groups["g"]
    assert list(g.members) == pending[:3] and not g.pending_members
    h.advance_until_answered(handles[:3])
    assert jr(h, handles[0]).generation_id == 1
    assert len(h.shard.groups["g"].members) == 3


def test_new_member_rejected_when_stable_group_is_full() -> None:
    h = GroupContext(GroupConfig(group_max_size=2))
    h.stable_group("g", 2)
    r = jr(h, h.join("g"))
    assert r.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert h.state("g") is ClassicGroupState.STABLE


def test_last_joiners_kicked_when_rejoining_group_over_max_size() -> None:
    from storage.records import (
        MemberMetadata,
        encode_group_metadata_key,
        encode_group_metadata_value,
    )

    h = GroupContext(GroupConfig(group_max_size=3))
    h2 = GroupContext(GroupConfig(group_max_size=3))
    members = [
        MemberMetadata(f"m{i}", None, "c", "h", 30000, 10000, subscription("t"), b"")
        for i in range(5)
    ]
    value = encode_group_metadata_value("consumer", 4, "range", "m0", 1, members)
    shard = h2.shard
    p = shard.partition_of("g")
    shard.begin_load(p)
    shard.replay(p, encode_group_metadata_key("g"), value)
    res = h2.apply(shard.load_complete(p, h2.now))
    assert shard.groups["g"].state is ClassicGroupState.PREPARING_REBALANCE
    assert [(e.cause, e.reason) for e in res.events if isinstance(e, RebalanceStarted)] == [
        ("join", "freshly loaded group has 5 members, over group.max.size 3")
    ]
    handles = [h2.join("g", f"m{i}") for i in range(5)]
    assert [h2.reply(x) is None for x in handles] == [True, True, True, False, False]
    assert all(jr(h2, x).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED for x in handles[3:])
    h2.advance_until_answered(handles[:3])
    assert {jr(h2, x).generation_id for x in handles[:3]} == {5}
    assert list(shard.groups["g"].members) == ["m0", "m1", "m2"]
    del h


def test_initial_rebalance_delay_extended_while_members_arrive_capped_by_rebalance_timeout() -> (
    None
):
    h = GroupContext()
    _, ha = h.join_new("g", rebalance=10000)
    h.advance(2000)
    _, hb = h.join_new("g", rebalance=10000)
    h.advance(1000)  # t=3000: delay ends but B arrived -> extended
    assert h.reply(ha) is None
    h.advance(2000)
    _, hc = h.join_new("g", rebalance=10000)  # t=5000
    h.advance(3000)  # t=8000 (timer at 6000 extended to 9000)
    _, hd = h.join_new("g", rebalance=10000)
    h.advance(1000)  # t=9000: extended by the remaining 1000 only
    assert h.reply(ha) is None
    h.advance(500)
    _, he = h.join_new("g", rebalance=10000)  # t=9500
    h.advance(499)
    assert h.reply(ha) is None
    h.advance(1)  # t=10000 == rebalance timeout: no more extension
    handles = [ha, hb, hc, hd, he]
    assert all(jr(h, x).generation_id == 1 for x in handles)
    assert len(jr(h, ha).members) == 5


def test_initial_rebalance_completes_after_delay_when_nobody_else_joins() -> None:
    h = GroupContext()
    _, ha = h.join_new("g")
    h.advance(2999)
    assert h.reply(ha) is None
    h.advance(1)
    assert jr(h, ha).generation_id == 1


def test_join_completes_when_pending_member_joins() -> None:
    h = GroupContext()
    (a,), gen = h.stable_group("g", 1)
    pending = jr(h, h.join("g")).member_id
    ha = h.join("g", a)  # leader rejoin starts a rebalance
    assert h.state("g") is ClassicGroupState.PREPARING_REBALANCE
    assert h.reply(ha) is None  # waits for the pending member
    hb = h.join("g", pending)
    assert jr(h, ha).generation_id == jr(h, hb).generation_id == gen + 1
    assert h.state("g") is ClassicGroupState.COMPLETING_REBALANCE


def test_join_completes_when_pending_member_times_out() -> None:
    h = GroupContext()
    (a,), gen = h.stable_group("g", 1)
    pending = jr(h, h.join("g", session=7000)).member_id
    ha = h.join("g", a)
    h.advance(6999)
    assert h.reply(ha) is None
    h.advance(1)
    assert jr(h, ha).generation_id == gen + 1
    assert not h.shard.groups["g"].is_pending(pending)


def test_unchanged_follower_join_in_stable_does_not_rebalance() -> None:
    h = GroupContext()
    (a, b), gen = h.stable_group("g", 2)
    r = jr(h, h.join("g", b))
    assert r.error_code == 0 and r.generation_id == gen and r.members == [] and r.leader == a
    assert h.state("g") is ClassicGroupState.STABLE


def test_changed_follower_metadata_in_stable_rebalances() -> None:
    h = GroupContext()
    (a, b), gen = h.stable_group("g", 2)
    hb = h.join("g", b, protocols=(("range", subscription("t", "u")),))
    assert h.reply(hb) is None
    assert h.state("g") is ClassicGroupState.PREPARING_REBALANCE
    assert h.shard.rebalances["metadata_change"] == 1
    ha = h.join("g", a)
    assert jr(h, ha).generation_id == jr(h, hb).generation_id == gen + 1


def test_unchanged_leader_join_in_stable_rebalances() -> None:
    h = GroupContext()
    (a, b), gen = h.stable_group("g", 2)
    ha = h.join("g", a)
    assert h.reply(ha) is None
    assert h.state("g") is ClassicGroupState.PREPARING_REBALANCE
    assert h.heartbeat("g", b, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    hb = h.join("g", b)
    assert jr(h, ha).generation_id == gen + 1
    assert jr(h, hb).leader == a


def test_unchanged_join_in_completing_rebalance_returns_current_generation() -> None:
    h = GroupContext()
    a, ha = h.join_new("g")
    b, hb = h.join_new("g")
    h.advance_until_answered([ha, hb])
    r = jr(h, h.join("g", a))
    assert r.generation_id == 1 and [m.member_id for m in r.members] == [a, b]
    r = jr(h, h.join("g", b))
    assert r.generation_id == 1 and r.members == []
    assert h.state("g") is ClassicGroupState.COMPLETING_REBALANCE


def test_not_rejoined_dynamic_members_removed_at_join_completion() -> None:
    h = GroupContext()
    (a, b, c), gen = h.stable_group("g", 3, session=10000, rebalance=30000)
    ha = h.join("g", a)
    hb = h.join("g", b)
    for _ in range(6):  # c keeps its session alive but never rejoins
        h.advance(5000)
        if h.reply(ha) is None:
            assert h.heartbeat("g", c, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    r = jr(h, ha)
    assert r.generation_id == gen + 1
    assert [m.member_id for m in r.members] == [a, b]
    assert jr(h, hb).generation_id == gen + 1
    assert c not in h.shard.groups["g"].members
    assert h.heartbeat("g", c, gen) == ErrorCode.UNKNOWN_MEMBER_ID
    assert MembersRemoved("g", (c,)) in h.events


def test_new_member_join_timeout_expires_parked_new_member() -> None:
    h = GroupContext()
    (a,), gen = h.stable_group("g", 1, rebalance=600000, session=10000)
    b, hb = h.join_new("g", rebalance=600000)
    # a keeps heartbeating but never rejoins; b is parked and new.
    for _ in range(60):
        h.advance(5000)
        h.heartbeat("g", a, gen)
    r = jr(h, hb)
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID and r.member_id == ""
    assert b not in h.shard.groups["g"].members


def test_member_id_is_client_id_dash_uuid_by_default() -> None:
    import re

    from coordinator.group import GroupShard, RequestContext
    from protocol.messages.join_group import JoinGroupRequest, JoinGroupRequestProtocol

    shard = GroupShard()
    shard.mark_all_loaded()
    res = shard.join_group(
        RequestContext(9, "client-1", "/h", 1),
        JoinGroupRequest(
            "g", 10000, 30000, "", None, "consumer", [JoinGroupRequestProtocol("r", b"")]
        ),
        0,
    )
    resp = res.replies[0][1]
    assert isinstance(resp, JoinGroupResponse)
    assert re.fullmatch(
        r"client-1-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
        resp.member_id,
    )
