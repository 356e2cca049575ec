"""Consumer groups seen by the group APIs (DeleteGroups, ListGroups, DescribeGroups,
ConsumerGroupDescribe) and replay of every record type rebuilding the same state.

Kafka's tests: testConsumerGroupDelete, testDescribeGroupsGroupIdNotFoundException(BeforeV6),
testConsumerGroupDescribe*, testReplayConsumerGroup*, testSubscriptionUpgradeToMetadataHash
(semantics note §1.3, §3.7, §5.6, §7.7, §8.3, §10 items 21, 47-49, 51).
"""

from __future__ import annotations

from support.consumer_member import Mark, Member, decode, group_state, kinds, settle
from support.group_context import GroupContext, delete_groups, describe_groups, list_groups

from coordinator.group.consumer.group import ResolvedRegex
from coordinator.group.types import RequestContext
from protocol.errors import ErrorCode
from protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from storage.records import (
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    encode_consumer_group_key,
    encode_consumer_group_value,
)

# ------------------------------------------------------------ DeleteGroups


def test_delete_groups_refuses_a_non_empty_consumer_group() -> None:
    c = GroupContext.with_topics(foo=1)
    Member(c, "g", "a", ["foo"]).join()
    mark = Mark(c)
    assert delete_groups(c, "g") == {"g": ErrorCode.NON_EMPTY_GROUP}
    assert mark.new() == []
    assert "g" in c.shard.consumer.groups


def test_delete_groups_tombstones_an_empty_consumer_group_in_kafkas_order() -> None:
    c = GroupContext.with_topics(foo=1)
    a = Member(c, "g", "a", regex="f.*")
    b = Member(c, "g", "b", ["foo"])
    a.join()
    c.sleep(0)
    b.join()
    settle([a, b])
    b.leave()
    a.leave()  # the last subscriber of its regex: the regex record goes with it
    assert c.shard.consumer.groups["g"].resolved_regexes == {}
    mark = Mark(c)
    assert delete_groups(c, "g") == {"g": ErrorCode.NO_ERROR}
    assert kinds(mark.new()) == ["6✝", "4✝", "3✝"]
    assert "g" not in c.shard.consumer.groups
    assert "g" not in c.replayed().consumer.groups
    assert delete_groups(c, "g") == {"g": ErrorCode.GROUP_ID_NOT_FOUND}


def test_delete_tombstones_a_resolved_regex_left_behind() -> None:
    """A regex record whose subscribers are gone (replayed from an older log) is tombstoned too."""
    c = GroupContext.with_topics(foo=1)
    a = Member(c, "g", "a", ["foo"])
    a.join()
    a.leave()
    g = c.shard.consumer.groups["g"]
    g.replay_regex("f.*", ResolvedRegex(frozenset({"foo"}), 0, 0))
    mark = Mark(c)
    delete_groups(c, "g")
    assert kinds(mark.new()) == ["6✝", "16✝", "4✝", "3✝"]


# ------------------------------------------------------------ ListGroups


def test_list_groups_type_and_state_filters() -> None:
    c = GroupContext.with_topics(foo=2)
    Member(c, "g", "a", ["foo"]).join()
    (listed,) = list_groups(c)
    assert (listed.group_id, listed.protocol_type, listed.group_state, listed.group_type) == (
        "g",
        "consumer",
        "Stable",
        "consumer",
    )
    assert [x.group_id for x in list_groups(c, types=["Consumer"])] == ["g"]
    assert list_groups(c, types=["classic"]) == []
    assert [x.group_id for x in list_groups(c, states=["STABLE"])] == ["g"]
    assert list_groups(c, states=["Empty"]) == []
    assert [x.group_id for x in list_groups(c, version=4, types=["classic"])] == [
        "g"
    ]  # v4: no type filter


# ------------------------------------------------------------ DescribeGroups (classic API)


def test_describe_groups_sees_a_consumer_group_as_dead() -> None:
    c = GroupContext.with_topics(foo=2)
    Member(c, "g", "a", ["foo"]).join()
    (v6,) = describe_groups(c, "g", version=6)
    assert (v6.group_state, v6.error_code, v6.error_message) == (
        "Dead",
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group g is not a classic group.",
    )
    assert v6.members == []
    (v5,) = describe_groups(c, "g", version=5)
    assert (v5.group_state, v5.error_code, v5.members) == ("Dead", ErrorCode.NO_ERROR, [])


# ------------------------------------------------------------ ConsumerGroupDescribe


def test_consumer_group_describe_fields() -> None:
    c = GroupContext.with_topics(foo=2, bar=1)
    a = Member(c, "g", "a", ["foo", "bar"], instance_id="i1", rack="r1", assignor="range")
    b = Member(c, "g", "b", ["foo"], assignor="range")
    x = Member(c, "g", "x", regex="ba.*")
    a.join()
    b.join()
    x.join()
    c.sleep(0)
    settle([a, b, x])
    (d,) = c.consumer_group_describe("g")
    g = c.shard.consumer.groups["g"]
    assert d.error_code == 0 and d.group_id == "g"
    assert (d.group_state, d.group_epoch, d.assignment_epoch) == (
        "Stable",
        g.group_epoch,
        g.assignment_epoch,
    )
    assert d.assignor_name == "range"  # the one most members name
    members = {m.member_id: m for m in d.members}
    ma = members["a"]
    assert (ma.instance_id, ma.rack_id, ma.member_epoch) == ("i1", "r1", g.group_epoch)
    assert (ma.client_id, ma.client_host) == ("client", "/127.0.0.1")
    assert ma.subscribed_topic_names == ["bar", "foo"]
    assert ma.subscribed_topic_regex == ""
    assert ma.member_type == 1
    own = {(tp.topic_name, p) for tp in ma.assignment.topic_partitions for p in tp.partitions}
    assert own == a.partitions()
    tgt = {
        (tp.topic_name, p) for tp in ma.target_assignment.topic_partitions for p in tp.partitions
    }
    assert tgt == own
    assert members["x"].subscribed_topic_regex == "ba.*"
    assert members["x"].subscribed_topic_names == []
    (d0,) = c.consumer_group_describe("g", version=0)
    assert {m.member_type for m in d0.members} == {-1}


def test_consumer_group_describe_errors() -> None:
    c = GroupContext.with_topics()
    empty, unknown = c.consumer_group_describe("", "nope")
    assert (empty.group_id, empty.error_code) == ("", ErrorCode.INVALID_GROUP_ID)
    assert (unknown.error_code, unknown.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group nope not found.",
    )


def test_consumer_group_describe_leaves_out_deleted_topics() -> None:
    c = GroupContext.with_topics(foo=2, bar=1)
    a = Member(c, "g", "a", ["foo", "bar"])
    a.join()
    c.topics.remove("bar")
    (d,) = c.consumer_group_describe("g")
    assert [tp.topic_name for tp in d.members[0].assignment.topic_partitions] == ["foo"]


# ------------------------------------------------------------ replay (item 51)


def test_replay_of_every_record_and_tombstone_rebuilds_the_same_state() -> None:
    c = GroupContext.with_topics(foo=4, bar=2)
    checked: list[str] = []

    def same(what: str) -> None:
        other = c.replayed()
        if "g" not in c.shard.consumer.groups:
            assert "g" not in other.consumer.groups, what
        else:
            assert group_state(other, "g") == group_state(c.shard, "g"), what
        checked.append(what)

    a = Member(c, "g", "a", ["foo"], rack="r")
    s = Member(c, "g", "s", ["foo", "bar"], instance_id="i1", assignor="range")
    x = Member(c, "g", "x", regex="ba.*")
    a.join()
    same("first join: 5 3 7 6 8")
    s.join()
    same("static join")
    a.beat(ack=False)
    same("unrevoked")
    x.join()
    c.sleep(0)
    same("regex resolved: 16")
    settle([a, s, x])
    same("settled")
    s.leave(epoch=-2)
    same("static temporary leave")
    s2 = Member(c, "g", "s2", ["foo", "bar"], instance_id="i1", assignor="range")
    s2.join()
    same("static replacement")
    x.leave()
    same("leave with regex tombstone")
    c.sleep(45_000)
    same("session expiry of everyone")
    assert c.shard.consumer.groups["g"].is_empty()
    delete_groups(c, "g")
    same("deleted")
    kinds_written = set(kinds(decode(c.records)))
    assert kinds_written >= {
        "3",
        "5",
        "6",
        "7",
        "8",
        "16",
        "3✝",
        "5✝",
        "6✝",
        "7✝",
        "8✝",
        "16✝",
        "4✝",
    }


def test_a_legacy_partition_metadata_record_is_tombstoned_on_the_next_heartbeat() -> None:
    c = GroupContext.with_topics(foo=2)
    a = Member(c, "g", "a", ["foo"])
    a.join()
    key = ConsumerGroupPartitionMetadataKey("g")
    c.records.append(
        (
            c.shard.partition_of("g"),
            encode_consumer_group_key(key),
            encode_consumer_group_value(ConsumerGroupPartitionMetadataValue([])),
        )
    )
    other = c.replayed()
    g = other.consumer.groups["g"]
    assert g.has_legacy_partition_metadata
    epoch = g.group_epoch
    ctx = RequestContext(1, "client", "/127.0.0.1", 1)
    req = ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="a", member_epoch=a.epoch, topic_partitions=None
    )
    out = other.consumer_group_heartbeat(ctx, req, c.now)
    assert kinds(decode(out.records)) == ["4✝"]
    assert not g.has_legacy_partition_metadata
    assert g.group_epoch == epoch  # the hash is the same: no bump (it was written by 4.1 already)
