"""Session and rebalance timeouts with a fake clock, and static membership: one test per rule.

Kafka's tests: testSessionTimeoutLifecycle, testSessionTimeoutExpiration,
testOnLoadedSessionTimeoutExpiration, testRebalanceTimeoutLifecycle,
testRebalanceTimeoutExpiration, testGroupEpochBumpWhenNewStaticMemberJoins,
testNoGroupEpochBumpWhenStaticMemberTemporarilyLeaves, testStaticMemberGetsBackAssignmentUponRejoin,
testStaticMemberRejoinsWithNewSubscribedTopics, testShouldThrow..., testSessionTimeoutExpirationStaticMember.
Semantics note §4.6, §5.1-§5.4, §10 items 32-38.
"""

from __future__ import annotations

from support.consumer_member import Mark, Member, kinds, settle
from support.group_context import GroupContext

from coordinator.group.consumer.member import MemberState
from coordinator.group.timers import TimerKind, consumer_rebalance_key, consumer_session_key
from protocol.errors import ErrorCode

SESSION = 45_000


# ------------------------------------------------------------ item 32: session timeout


def test_session_timer_is_rearmed_by_every_heartbeat() -> None:
    c = GroupContext.with_topics(foo=2)
    a = Member(c, "g", "a", ["foo"])
    a.join()
    key = consumer_session_key("g", "a")
    assert c.shard.pending_timers()[key] == SESSION
    c.sleep(30_000)
    a.beat()
    assert c.shard.pending_timers()[key] == 30_000 + SESSION
    c.sleep(SESSION - 1)
    assert "a" in c.shard.consumer.groups["g"].members
    mark = Mark(c)
    c.sleep(1)
    g = c.shard.consumer.groups["g"]
    assert "a" not in g.members and key not in c.shard.pending_timers()
    assert kinds(mark.new()) == ["8✝", "7✝", "5✝", "3", "6"]  # 6: emptied, KAFKA-20442
    assert g.group_epoch == 3  # born at 1, 2 with a's subscription, 3 when a is fenced


def test_session_timers_are_rearmed_in_full_on_load() -> None:
    c = GroupContext.with_topics(foo=2)
    a = Member(c, "g", "a", ["foo"])
    a.join()
    c.sleep(40_000)  # 5 s before a's timer
    other = c.replayed()  # loaded at 40 s: a full session from now
    key = consumer_session_key("g", "a")
    assert other.pending_timers()[key] == 40_000 + SESSION
    assert other.timers.pop_due(40_000 + SESSION - 1) is None
    timer = other.timers.pop_due(40_000 + SESSION)
    assert timer is not None and timer.action.kind is TimerKind.CONSUMER_SESSION
    other.on_timer(timer, 40_000 + SESSION)
    assert "a" not in other.consumer.groups["g"].members


def test_a_timer_for_a_member_already_gone_does_nothing() -> None:
    c = GroupContext.with_topics(foo=2)
    a, b = Member(c, "g", "a", ["foo"]), Member(c, "g", "b", ["foo"])
    a.join()
    b.join()
    timer = c.shard.timers.pop_due(SESSION)  # a's, taken before it leaves
    assert timer is not None
    a.leave()
    mark = Mark(c)
    c.apply(c.shard.on_timer(timer, SESSION))
    assert mark.new() == []


# ------------------------------------------------------------ item 33: rebalance timeout


def _unrevoked(timeout: int = 10_000) -> tuple[GroupContext, Member, Member]:
    c = GroupContext.with_topics(foo=4)
    a = Member(c, "g", "a", ["foo"], rebalance_timeout_ms=timeout)
    b = Member(c, "g", "b", ["foo"])
    a.join()
    b.join()
    a.beat(ack=False)
    assert c.shard.consumer.groups["g"].members["a"].state is MemberState.UNREVOKED_PARTITIONS
    return c, a, b


def test_rebalance_timer_exists_only_while_unrevoked() -> None:
    c = GroupContext.with_topics(foo=4)
    a = Member(c, "g", "a", ["foo"], rebalance_timeout_ms=10_000)
    a.join()
    key = consumer_rebalance_key("g", "a")
    assert key not in c.shard.pending_timers()
    b = Member(c, "g", "b", ["foo"])
    b.join()
    a.beat(ack=False)
    assert c.shard.pending_timers()[key] == 10_000
    a.beat(ack=False)  # still unrevoked, nothing changed: the timer is not pushed back
    c.sleep(1_000)
    a.beat(ack=False)
    assert c.shard.pending_timers()[key] == 10_000
    a.beat()  # acknowledges: the timer goes
    assert key not in c.shard.pending_timers()


def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    c, a, b = _unrevoked()
    epoch = c.shard.consumer.groups["g"].group_epoch
    mark = Mark(c)
    c.sleep(10_000)
    g = c.shard.consumer.groups["g"]
    assert "a" not in g.members
    assert kinds(mark.new()) == ["8✝", "7✝", "5✝", "3"]
    assert g.group_epoch == epoch + 1
    assert a.beat().error_code == ErrorCode.UNKNOWN_MEMBER_ID
    settle([b])
    assert b.partitions() == {("foo", p) for p in range(4)}


def test_rebalance_timeout_fences_only_at_the_epoch_it_was_armed_for() -> None:
    c, _a, _ = _unrevoked()
    g = c.shard.consumer.groups["g"]
    m = g.members["a"]
    # The member's epoch moved on (as replay would show it) while the timer still runs.
    g.replay_current_assignment(
        "a", m.member_epoch + 1, m.member_epoch, m.state, m.assigned, m.pending_revocation
    )
    c.sleep(10_000)
    assert "a" in g.members


def test_rebalance_timer_is_rearmed_on_load_for_unrevoked_members() -> None:
    c, _, _ = _unrevoked()
    c.sleep(5_000)
    other = c.replayed()
    assert other.pending_timers()[consumer_rebalance_key("g", "a")] == 15_000
    assert consumer_rebalance_key("g", "b") not in other.pending_timers()


# ------------------------------------------------------------ items 35-38: static members


def test_new_static_member_bumps_the_epoch() -> None:
    c = GroupContext.with_topics(foo=2)
    Member(c, "g", "a", ["foo"]).join()
    r = Member(c, "g", "s", ["foo"], instance_id="i1").join()
    assert r.member_epoch == 3
    assert c.shard.consumer.groups["g"].static_members == {"i1": "s"}


def test_temporary_leave_writes_epoch_minus_2_without_a_bump_and_keeps_the_partitions() -> None:
    c = GroupContext.with_topics(foo=4)
    s = Member(c, "g", "s", ["foo"], instance_id="i1")
    d = Member(c, "g", "d", ["foo"])
    s.join()
    d.join()
    settle([s, d])
    g = c.shard.consumer.groups["g"]
    epoch = g.group_epoch
    held = s.partitions()
    mark = Mark(c)
    r = s.leave(epoch=-2)
    assert (r.error_code, r.member_id, r.member_epoch) == (0, "s", -2)
    recs = mark.new()
    assert kinds(recs) == ["8"]
    assert recs[0][1].member_epoch == -2
    assert g.group_epoch == epoch
    assert g.members["s"].member_epoch == -2
    assert all(
        g.current_partition_epoch(c.tid(t), p) == -2 for t, p in held
    )  # nobody else may take them
    settle([d])
    assert d.partitions().isdisjoint(held)


def test_static_rejoin_with_a_new_member_id_gets_its_assignment_back_without_a_bump() -> None:
    c = GroupContext.with_topics(foo=4)
    s = Member(c, "g", "s1", ["foo"], instance_id="i1")
    d = Member(c, "g", "d", ["foo"])
    s.join()
    d.join()
    settle([s, d])
    g = c.shard.consumer.groups["g"]
    epoch = g.group_epoch
    held = s.partitions()
    s.leave(epoch=-2)
    mark = Mark(c)
    s2 = Member(c, "g", "s2", ["foo"], instance_id="i1")
    r = s2.join()
    assert r.error_code == 0 and r.member_epoch == epoch
    assert s2.partitions() == held
    recs = mark.new()
    assert kinds(recs)[:6] == ["8✝", "7✝", "5✝", "5", "7", "8"]
    assert [k.member_id for k, _ in recs[:3]] == ["s1"] * 3
    assert [k.member_id for k, _ in recs[3:6]] == ["s2"] * 3
    assert "3" not in kinds(recs)
    assert g.group_epoch == epoch
    assert g.static_members == {"i1": "s2"} and "s1" not in g.members
    # the old member id is no longer the instance's
    r = s.beat(instance_id="i1", member_epoch=epoch)
    assert r.error_code == ErrorCode.FENCED_INSTANCE_ID


def test_static_rejoin_with_new_topics_bumps() -> None:
    c = GroupContext.with_topics(foo=2, bar=2)
    s = Member(c, "g", "s1", ["foo"], instance_id="i1")
    s.join()
    s.leave(epoch=-2)
    r = Member(c, "g", "s2", ["foo", "bar"], instance_id="i1").join()
    assert r.member_epoch == 3


def test_static_leave_minus_1_bumps() -> None:
    c = GroupContext.with_topics(foo=2)
    s = Member(c, "g", "s", ["foo"], instance_id="i1")
    s.join()
    mark = Mark(c)
    assert s.leave().member_epoch == -1
    assert kinds(mark.new()) == ["8✝", "7✝", "5✝", "3", "6"]  # 6: emptied, KAFKA-20442
    assert c.shard.consumer.groups["g"].static_members == {}


def test_second_live_static_joiner_is_unreleased_instance_id() -> None:
    c = GroupContext.with_topics(foo=2)
    Member(c, "g", "s1", ["foo"], instance_id="i1").join()
    r = Member(c, "g", "s2", ["foo"], instance_id="i1").join()
    assert r.error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    assert c.shard.consumer.groups["g"].static_members == {"i1": "s1"}


def test_unknown_instance_id_is_unknown_member_id_on_heartbeat_and_leave() -> None:
    c = GroupContext.with_topics(foo=2)
    Member(c, "g", "s1", ["foo"], instance_id="i1").join()
    x = Member(c, "g", "s1", ["foo"], instance_id="other")
    x.epoch = 1
    assert x.beat(instance_id="other").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert x.leave().error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert x.leave(epoch=-2).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_member_id_mismatch_is_fenced_instance_id_on_heartbeat_and_leave() -> None:
    c = GroupContext.with_topics(foo=2)
    Member(c, "g", "s1", ["foo"], instance_id="i1").join()
    x = Member(c, "g", "imposter", ["foo"], instance_id="i1")
    x.epoch = 1
    fenced = "Static member imposter with instance id i1 was fenced by member s1."  # Kafka's
    r = x.beat(instance_id="i1")
    assert (r.error_code, r.error_message) == (ErrorCode.FENCED_INSTANCE_ID, fenced)
    r = x.leave()
    assert (r.error_code, r.error_message) == (ErrorCode.FENCED_INSTANCE_ID, fenced)
    assert x.leave(epoch=-2).error_code == ErrorCode.FENCED_INSTANCE_ID
    assert "s1" in c.shard.consumer.groups["g"].members


def test_static_member_epoch_is_validated_like_a_dynamic_one() -> None:
    c = GroupContext.with_topics(foo=2)
    s = Member(c, "g", "s1", ["foo"], instance_id="i1")
    s.join()
    r = s.beat(instance_id="i1", member_epoch=5)
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH


def test_session_expiry_removes_a_temporarily_left_static_member() -> None:
    c = GroupContext.with_topics(foo=2)
    s = Member(c, "g", "s", ["foo"], instance_id="i1")
    d = Member(c, "g", "d", ["foo"])
    s.join()
    d.join()
    settle([s, d])
    c.sleep(10_000)
    s.leave(epoch=-2)
    epoch = c.shard.consumer.groups["g"].group_epoch
    c.sleep(SESSION - 10_000 - 1)
    d.beat()
    assert "s" in c.shard.consumer.groups["g"].members
    c.sleep(1)  # s's session, armed by its last heartbeat, expires
    g = c.shard.consumer.groups["g"]
    assert "s" not in g.members and g.static_members == {}
    assert g.group_epoch == epoch + 1
    settle([d])
    assert d.partitions() == {("foo", 0), ("foo", 1)}
