"""Regular-expression subscriptions: resolution by timer, refresh on new topics, tombstones.

Kafka's tests: testConsumerGroupMemberPicksUpExistingResolvedRegularExpression,
testConsumerGroupMemberJoinsWithNewRegex, testConsumerGroupMemberJoinsRefreshesExpiredRegexes,
testResolvedRegularExpressionsRemovedWhen... (semantics note §3.6, §10 items 39-41).
"""

from __future__ import annotations

from support.consumer_member import Mark, Member, kinds, settle
from support.group_context import GroupContext

from coordinator.group.timers import consumer_regex_key
from storage.records import (
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
)


def test_new_regex_resolves_through_the_timer_then_bumps() -> None:
    c = GroupContext.with_topics(foo=2, food=1, bar=1)
    c.sleep(20_000)
    m = Member(c, "g", "m", regex="fo.*")
    r = m.join()
    assert r.member_epoch == 1 and m.partitions() == set()  # not resolved yet
    assert c.shard.pending_timers()[consumer_regex_key("g")] == c.now  # due at once
    mark = Mark(c)
    c.sleep(0)
    recs = mark.new()
    assert kinds(recs) == ["16", "3"]
    k16, v16 = recs[0]
    assert k16 == ConsumerGroupRegularExpressionKey("g", "fo.*")
    assert isinstance(v16, ConsumerGroupRegularExpressionValue)
    assert v16.topics == ["foo", "food"] and v16.timestamp == 20_000
    assert recs[1][1].epoch == 2
    settle([m])
    assert m.partitions() == {("foo", 0), ("foo", 1), ("food", 0)}
    assert m.epoch == 2


def test_regex_is_a_full_match() -> None:
    c = GroupContext.with_topics(topic=1)
    c.topics.add("topic-1", 1)
    m = Member(c, "g", "m", regex="topic")
    m.join()
    c.sleep(0)
    settle([m])
    assert m.partitions() == {("topic", 0)}


def test_a_member_picking_up_an_existing_resolved_regex_bumps_at_once() -> None:
    c = GroupContext.with_topics(foo=4)
    a = Member(c, "g", "a", regex="f.*")
    a.join()
    c.sleep(0)
    settle([a])
    epoch = c.shard.consumer.groups["g"].group_epoch
    mark = Mark(c)
    b = Member(c, "g", "b", regex="f.*")
    r = b.join()
    assert r.member_epoch == epoch + 1
    assert "16" not in kinds(mark.new())
    assert consumer_regex_key("g") not in c.shard.pending_timers()
    settle([a, b])
    assert len(a.partitions()) == len(b.partitions()) == 2


def test_a_topic_created_later_is_picked_up() -> None:
    c = GroupContext.with_topics(foo=1)
    m = Member(c, "g", "m", regex="f.*")
    m.join()
    c.sleep(0)
    settle([m])
    assert m.partitions() == {("foo", 0)}
    c.topics.add("fox", 2)
    c.apply(c.shard.topics_changed(["fox"], created=True, now_ms=c.now))
    # Kafka resolves a group's regexes at most every 10 s.
    m.beat()
    assert consumer_regex_key("g") not in c.shard.pending_timers()
    c.sleep(10_001)
    m.beat()
    assert consumer_regex_key("g") in c.shard.pending_timers()
    mark = Mark(c)
    c.sleep(0)
    assert kinds(mark.new()) == ["16", "3"]
    settle([m])
    assert m.partitions() == {("foo", 0), ("fox", 0), ("fox", 1)}


def test_regex_is_tombstoned_when_its_last_subscriber_leaves() -> None:
    c = GroupContext.with_topics(foo=2)
    a, b = Member(c, "g", "a", regex="f.*"), Member(c, "g", "b", regex="f.*")
    a.join()
    c.sleep(0)
    b.join()
    settle([a, b])
    mark = Mark(c)
    a.leave()
    assert kinds(mark.new()) == ["8✝", "7✝", "5✝", "3"]
    mark = Mark(c)
    b.leave()
    recs = mark.new()
    assert kinds(recs) == ["8✝", "7✝", "5✝", "16✝", "3", "6"]  # 6: emptied, KAFKA-20442
    assert recs[3][0] == ConsumerGroupRegularExpressionKey("g", "f.*")
    assert c.shard.consumer.groups["g"].resolved_regexes == {}


def test_regex_is_tombstoned_when_its_last_subscriber_is_fenced() -> None:
    c = GroupContext.with_topics(foo=2)
    a = Member(c, "g", "a", regex="f.*")
    a.join()
    c.sleep(0)
    mark = Mark(c)
    c.sleep(45_000)
    assert kinds(mark.new()) == ["8✝", "7✝", "5✝", "16✝", "3", "6"]


def test_switching_from_a_regex_to_names_tombstones_it_and_bumps() -> None:
    c = GroupContext.with_topics(foo=2, bar=1)
    a = Member(c, "g", "a", regex="f.*")
    a.join()
    c.sleep(0)
    settle([a])
    epoch = c.shard.consumer.groups["g"].group_epoch
    mark = Mark(c)
    r = a.beat(subscribed_topic_regex="", subscribed_topic_names=["bar"])
    assert c.shard.consumer.groups["g"].group_epoch == epoch + 1
    # foo is revoked first, at the old epoch
    assert r.member_epoch == epoch and a.partitions() == set()
    assert kinds(mark.new())[:3] == ["5", "16✝", "3"]
    settle([a])
    assert a.partitions() == {("bar", 0)}
