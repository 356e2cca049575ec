"""Group epochs, target assignment and the records each heartbeat writes: one test per rule.

Kafka's tests: testMemberJoinsEmptyConsumerGroup, testNewJoiningMemberTriggersNewTargetAssignment,
testUpdatingSubscriptionTriggersNewTargetAssignment, testLeavingMemberBumpsGroupEpoch,
testConsumerGroupHeartbeatFullResponse, testConsumerGroupStates, and partition growth
(a topic's metadata hash changes: the epoch moves and the new partitions are assigned).
Semantics note §3, §8.2, §10 items 12-17. Epochs are Kafka 4.4's: a new group starts at 1,
so its first member subscribing to topics joins at 2 (test_cg_kafka44.py).
"""

from __future__ import annotations

from support.consumer_member import Mark, Member, kinds, settle
from support.group_context import GroupContext, list_groups

from coordinator.group.consumer.group import ConsumerGroupState
from coordinator.group.consumer.member import MemberState
from coordinator.group.consumer.metadata_hash import group_hash
from storage.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicPartitions,
)

Parts = dict[bytes, frozenset[int]]


def parts(c: GroupContext, **topics: list[int]) -> Parts:
    return {c.tid(t): frozenset(ps) for t, ps in topics.items()}


def tps(value_parts: list[TopicPartitions]) -> Parts:
    return {tp.topic_id: frozenset(tp.partitions) for tp in value_parts if tp.partitions}


def test_first_member_joining_writes_exactly_kafkas_records() -> None:
    c = GroupContext.with_topics(foo=6, bar=3)
    mark = Mark(c)
    m = Member(c, "g", "m1", ["foo", "bar"])
    r = m.join()
    assert (r.error_code, r.member_id, r.member_epoch) == (0, "m1", 2)
    assert m.partitions() == {("foo", p) for p in range(6)} | {("bar", p) for p in range(3)}
    expected_hash = group_hash({"foo", "bar"}, c.topics, {})
    foo, bar = c.tid("foo"), c.tid("bar")
    records = mark.new()
    assert kinds(records) == ["5", "3", "7", "6", "8"]
    (k5, v5), (k3, v3), (k7, v7), (k6, v6), (k8, v8) = records
    assert k5 == ConsumerGroupMemberMetadataKey("g", "m1")
    assert v5 == ConsumerGroupMemberMetadataValue(
        instance_id=None,
        rack_id=None,
        client_id="client",
        client_host="/127.0.0.1",
        subscribed_topic_names=["bar", "foo"],  # sorted, as Kafka writes them
        subscribed_topic_regex="",
        rebalance_timeout_ms=300000,
        server_assignor=None,
    )
    assert (k3, v3) == (ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(2, expected_hash))
    assert expected_hash != 0
    assert k7 == ConsumerGroupTargetAssignmentMemberKey("g", "m1")
    assert isinstance(v7, ConsumerGroupTargetAssignmentMemberValue)
    assert tps(v7.topic_partitions) == {foo: frozenset(range(6)), bar: frozenset(range(3))}
    assert (k6, v6) == (
        ConsumerGroupTargetAssignmentMetadataKey("g"),
        ConsumerGroupTargetAssignmentMetadataValue(2),
    )
    assert k8 == ConsumerGroupCurrentMemberAssignmentKey("g", "m1")
    assert isinstance(v8, ConsumerGroupCurrentMemberAssignmentValue)
    assert (v8.member_epoch, v8.previous_member_epoch, v8.state) == (2, 0, 0)
    assert tps(v8.assigned_partitions) == {foo: frozenset(range(6)), bar: frozenset(range(3))}
    assert {tp.topic_id: tp.assignment_epochs for tp in v8.assigned_partitions} == {
        foo: [2] * 6,
        bar: [2] * 3,
    }
    assert v8.partitions_pending_revocation == []


def test_empty_subscription_first_join_is_at_the_new_groups_epoch_1() -> None:
    c = GroupContext.with_topics(foo=2)
    mark = Mark(c)
    r = Member(c, "g", "m1", []).join()
    assert r.member_epoch == 1 and r.assignment is not None
    # No bump: the group was born at epoch 1 with an empty target (Kafka 4.4).
    assert kinds(mark.new()) == ["5", "8"]


def test_new_member_bumps_epoch_and_new_target_revokes_from_the_others() -> None:
    c = GroupContext.with_topics(foo=6)
    a = Member(c, "g", "a", ["foo"])
    a.join()
    mark = Mark(c)
    b = Member(c, "g", "b", ["foo"])
    r = b.join()
    assert (r.member_epoch, r.assignment is not None) == (3, True)
    assert b.partitions() == set()  # a still owns everything
    recs = mark.new()
    assert kinds(recs) == ["5", "3", "7", "7", "6", "8"]
    assert recs[1][1].epoch == 3
    targets = {k.member_id: tps(v.topic_partitions) for k, v in recs if k.version == 7}
    foo = c.tid("foo")
    assert sorted(len(t[foo]) for t in targets.values()) == [3, 3]
    assert targets["a"][foo] | targets["b"][foo] == frozenset(range(6))
    g = c.shard.consumer.groups["g"]
    assert g.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    # a learns what to give up at its old epoch
    mark = Mark(c)
    r = a.beat()
    assert r.member_epoch == 2
    assert a.partitions() == {("foo", p) for p in targets["a"][foo]}
    (k8, v8), *_ = mark.new()
    assert k8.member_id == "a"
    assert v8.state == MemberState.UNREVOKED_PARTITIONS
    assert tps(v8.partitions_pending_revocation) == {foo: targets["b"][foo]}
    settle([a, b])
    assert {a.epoch, b.epoch} == {3}


def test_subscription_change_bumps_and_recomputes_the_target() -> None:
    c = GroupContext.with_topics(foo=2, bar=2)
    a = Member(c, "g", "a", ["foo"])
    a.join()
    mark = Mark(c)
    r = a.beat(subscribed_topic_names=["foo", "bar"])
    assert r.member_epoch == 3
    assert kinds(mark.new()) == ["5", "3", "7", "6", "8"]
    assert a.partitions() == {("foo", 0), ("foo", 1), ("bar", 0), ("bar", 1)}
    # the same set in another order changes nothing
    mark = Mark(c)
    r = a.beat(subscribed_topic_names=["bar", "foo"])
    assert r.member_epoch == 3 and mark.new() == []


def test_field_changes_other_than_topic_names_write_the_member_but_do_not_bump() -> None:
    c = GroupContext.with_topics(foo=2)
    a = Member(c, "g", "a", ["foo"])
    a.join()
    for change in (
        {"rack_id": "r1"},
        {"rebalance_timeout_ms": 1000},
        {"server_assignor": "uniform"},  # the default: the preferred assignor stays
    ):
        mark = Mark(c)
        r = a.beat(**change)
        assert r.member_epoch == 2, change
        assert kinds(mark.new()) == ["5"], change
    # Another assignor does bump (Kafka 4.4; test_cg_kafka44.py).
    assert a.beat(server_assignor="range").member_epoch == 3


def test_leave_writes_tombstones_and_bumps_without_a_new_target() -> None:
    c = GroupContext.with_topics(foo=4)
    a, b = Member(c, "g", "a", ["foo"]), Member(c, "g", "b", ["foo"])
    a.join()
    b.join()
    settle([a, b])
    g = c.shard.consumer.groups["g"]
    epoch, target_epoch = g.group_epoch, g.assignment_epoch
    mark = Mark(c)
    r = b.leave()
    assert (r.error_code, r.member_id, r.member_epoch) == (0, "b", -1)
    recs = mark.new()
    assert kinds(recs) == ["8✝", "7✝", "5✝", "3"]
    assert {k.member_id for k, _ in recs[:3]} == {"b"}
    assert recs[3][1].epoch == epoch + 1
    assert recs[3][1].metadata_hash == group_hash({"foo"}, c.topics, {})
    assert (g.group_epoch, g.assignment_epoch) == (epoch + 1, target_epoch)
    assert g.state is ConsumerGroupState.ASSIGNING
    assert "b" not in g.target and "b" not in g.members


def test_full_request_returns_the_assignment_and_partial_returns_none() -> None:
    c = GroupContext.with_topics(foo=2)
    a = Member(c, "g", "a", ["foo"])
    a.join()
    partial = a.beat()
    assert partial.assignment is None
    full = a.beat(rebalance_timeout_ms=300000, subscribed_topic_names=["foo"])
    assert full.assignment is not None
    assert {tuple(tp.partitions) for tp in full.assignment.topic_partitions} == {(0, 1)}
    # not full without TopicPartitions
    assert (
        a.beat(ack=False, rebalance_timeout_ms=300000, subscribed_topic_names=["foo"]).assignment
        is None
    )
    # a regex instead of names also makes it full
    assert a.beat(rebalance_timeout_ms=300000, subscribed_topic_regex="").assignment is not None


def test_epoch_bump_with_unchanged_partitions_returns_new_epoch_and_no_assignment() -> None:
    c = GroupContext.with_topics(foo=2, bar=1)
    a = Member(c, "g", "a", ["foo"])
    b = Member(c, "g", "b", ["bar"])
    a.join()
    b.join()
    settle([a, b])
    b.beat(subscribed_topic_names=["bar", "baz"])  # baz does not exist: bumps, same partitions
    r = a.beat()
    assert r.member_epoch == c.shard.consumer.groups["g"].group_epoch == 4
    assert r.assignment is None


def test_states_empty_assigning_reconciling_stable() -> None:
    c = GroupContext.with_topics(foo=4)
    seen: list[str] = []

    def state() -> ConsumerGroupState:
        s = c.shard.consumer.groups["g"].state
        (listed,) = list_groups(c)
        assert listed.group_state == s.value
        (d,) = c.consumer_group_describe("g")
        assert d.group_state == s.value
        seen.append(s.value)
        return s

    a, b = Member(c, "g", "a", ["foo"]), Member(c, "g", "b", ["foo"])
    a.join()
    assert state() is ConsumerGroupState.STABLE
    b.join()
    assert state() is ConsumerGroupState.RECONCILING
    settle([a, b])
    assert state() is ConsumerGroupState.STABLE
    b.leave()
    assert state() is ConsumerGroupState.ASSIGNING
    a.beat()
    assert state() is ConsumerGroupState.STABLE
    a.leave()
    assert state() is ConsumerGroupState.EMPTY
    assert seen == ["Stable", "Reconciling", "Stable", "Assigning", "Stable", "Empty"]
    # an Empty group continues from its epoch
    epoch = c.shard.consumer.groups["g"].group_epoch
    assert Member(c, "g", "c", ["foo"]).join().member_epoch == epoch + 1


def test_partition_growth_bumps_the_epoch_and_assigns_the_new_partitions() -> None:
    c = GroupContext.with_topics(foo=2)
    a, b = Member(c, "g", "a", ["foo"]), Member(c, "g", "b", ["foo"])
    a.join()
    b.join()
    settle([a, b])
    g = c.shard.consumer.groups["g"]
    epoch, old_hash = g.group_epoch, g.metadata_hash
    c.topics.add("foo", 6)
    # Nothing happens until the shard is told and a member heartbeats.
    assert a.beat().member_epoch == epoch
    c.apply(c.shard.topics_changed(["foo"], created=False, now_ms=c.now))
    mark = Mark(c)
    r = a.beat()
    assert r.error_code == 0
    assert g.group_epoch == epoch + 1 and g.metadata_hash != old_hash
    assert kinds(mark.new())[:1] == ["3"]
    settle([a, b])
    assert a.partitions() | b.partitions() == {("foo", p) for p in range(6)}
    assert len(a.partitions()) == len(b.partitions()) == 3
    assert a.epoch == b.epoch == epoch + 1


def test_unrelated_topic_change_does_not_bump() -> None:
    c = GroupContext.with_topics(foo=2, bar=1)
    a = Member(c, "g", "a", ["foo"])
    a.join()
    c.topics.add("bar", 4)
    c.apply(c.shard.topics_changed(["bar"], created=False, now_ms=c.now))
    mark = Mark(c)
    assert a.beat().member_epoch == 2
    assert mark.new() == []


def test_subscribing_to_a_topic_created_later() -> None:
    c = GroupContext.with_topics(foo=1)
    a = Member(c, "g", "a", ["foo", "later"])
    a.join()
    assert a.partitions() == {("foo", 0)}
    c.topics.add("later", 2)
    c.apply(c.shard.topics_changed(["later"], created=True, now_ms=c.now))
    r = a.beat()
    assert r.member_epoch == 3
    assert a.partitions() == {("foo", 0), ("later", 0), ("later", 1)}
