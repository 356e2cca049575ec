"""ConsumerGroupHeartbeat validation, lookups, epochs and size: one test per rule.

Kafka's tests: testConsumerHeartbeatRequestValidation, testConsumerHeartbeatRegexValidation,
testUnknownGroupId, testConsumerGroupMemberEpochValidation, the 4.2 rejoin tests of
KAFKA-19233 and testNewMemberIsRejectedWithMaximumMembersIsReached (semantics note §2, §10
items 1-11).
"""

from __future__ import annotations

import pytest
from support.consumer_member import Member, settle
from support.group_context import GroupContext

from coordinator.group.consumer.member import MemberState
from coordinator.group.types import GroupConfig
from protocol.errors import ErrorCode
from protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)

BAD = ErrorCode.INVALID_REQUEST


def join_req(**kw: object) -> ConsumerGroupHeartbeatRequest:
    base = {
        "group_id": "g",
        "member_id": "m",
        "member_epoch": 0,
        "rebalance_timeout_ms": 300000,
        "subscribed_topic_names": ["foo"],
        "topic_partitions": [],
    }
    base.update(kw)
    return ConsumerGroupHeartbeatRequest(**base)  # type: ignore[arg-type]


def state_of(c: GroupContext, member_id: str) -> MemberState:
    return c.shard.consumer.groups["g"].members[member_id].state


def err(r: ConsumerGroupHeartbeatResponse) -> tuple[int, str | None]:
    return r.error_code, r.error_message


# ------------------------------------------------------------ §10 item 1-4: request validation


@pytest.mark.parametrize(
    ("version", "epoch"),
    [(1, 0), (1, 5), (0, 5), (0, -1), (1, -1)],
)
def test_blank_member_id_is_invalid_for_v1_positive_epochs_and_leave(
    version: int, epoch: int
) -> None:
    c = GroupContext.with_topics(foo=1)
    for mid in ("", "   "):
        r = c.consumer_group_heartbeat(join_req(member_id=mid, member_epoch=epoch), version)
        assert err(r) == (BAD, "MemberId can't be empty.")


def test_v0_join_and_minus_2_skip_the_member_id_check() -> None:
    c = GroupContext.with_topics(foo=1)
    # v0, epoch -2, blank id: not a MemberId error (the group is looked up instead)
    r = c.consumer_group_heartbeat(join_req(member_id="", member_epoch=-2, instance_id="i"), 0)
    assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    # v0, epoch 0, blank id: the server makes one up, epoch 1, a non-null empty assignment
    c2 = GroupContext.with_topics()
    r = c2.consumer_group_heartbeat(join_req(member_id="", subscribed_topic_names=[]), 0)
    assert r.error_code == 0 and r.member_id == "gen-1" and r.member_epoch == 1
    assert r.assignment is not None and r.assignment.topic_partitions == []


def test_member_id_is_checked_before_group_id() -> None:
    c = GroupContext.with_topics()
    r = c.consumer_group_heartbeat(join_req(member_id="", group_id=""), 1)
    assert err(r) == (BAD, "MemberId can't be empty.")


@pytest.mark.parametrize("gid", ["", "  "])
def test_blank_group_id(gid: str) -> None:
    c = GroupContext.with_topics()
    assert err(c.consumer_group_heartbeat(join_req(group_id=gid))) == (
        BAD,
        "GroupId can't be empty.",
    )


def test_blank_instance_id_and_rack_id() -> None:
    c = GroupContext.with_topics()
    assert err(c.consumer_group_heartbeat(join_req(instance_id=""))) == (
        BAD,
        "InstanceId can't be empty.",
    )
    assert err(c.consumer_group_heartbeat(join_req(instance_id=" "))) == (
        BAD,
        "InstanceId can't be empty.",
    )
    assert err(c.consumer_group_heartbeat(join_req(rack_id=""))) == (BAD, "RackId can't be empty.")
    # instance id before rack id
    assert err(c.consumer_group_heartbeat(join_req(instance_id="", rack_id=""))) == (
        BAD,
        "InstanceId can't be empty.",
    )


def test_join_requires_rebalance_timeout() -> None:
    c = GroupContext.with_topics()
    assert err(c.consumer_group_heartbeat(join_req(rebalance_timeout_ms=-1))) == (
        BAD,
        "RebalanceTimeoutMs must be provided in first request.",
    )


@pytest.mark.parametrize("tps", [None, [TopicPartitions(topic_id=b"\x01" * 16, partitions=[0])]])
def test_join_requires_empty_topic_partitions(tps: list[TopicPartitions] | None) -> None:
    c = GroupContext.with_topics()
    assert err(c.consumer_group_heartbeat(join_req(topic_partitions=tps))) == (
        BAD,
        "TopicPartitions must be empty when (re-)joining.",
    )


def test_join_requires_names_or_regex() -> None:
    c = GroupContext.with_topics()
    r = c.consumer_group_heartbeat(
        join_req(subscribed_topic_names=None, subscribed_topic_regex=None)
    )
    assert err(r) == (
        BAD,
        "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
    )
    # an empty list, or "" as the regex, is a valid (empty) subscription
    assert c.consumer_group_heartbeat(join_req(subscribed_topic_names=[])).error_code == 0
    r = c.consumer_group_heartbeat(
        join_req(member_id="m2", subscribed_topic_names=None, subscribed_topic_regex="")
    )
    assert r.error_code == 0


def test_temporary_leave_needs_instance_id_and_epoch_below_minus_2_is_invalid() -> None:
    c = GroupContext.with_topics()
    r = c.consumer_group_heartbeat(
        ConsumerGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=-2)
    )
    assert err(r) == (BAD, "InstanceId can't be null.")
    r = c.consumer_group_heartbeat(
        ConsumerGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=-3)
    )
    assert err(r) == (BAD, "MemberEpoch is invalid.")


def test_unknown_server_assignor_lists_the_supported_ones_also_on_leave() -> None:
    c = GroupContext.with_topics(foo=1)
    r = c.consumer_group_heartbeat(join_req(server_assignor="sticky"))
    assert err(r) == (
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        "ServerAssignor sticky is not supported. Supported assignors: uniform, range.",
    )
    Member(c, "g", "m", ["foo"]).join()
    leave = ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="m", member_epoch=-1, server_assignor="sticky"
    )
    assert c.consumer_group_heartbeat(leave).error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert "m" in c.shard.consumer.groups["g"].members
    assert (
        c.consumer_group_heartbeat(join_req(member_id="m3", server_assignor="range")).error_code
        == 0
    )


def test_invalid_regex_then_valid_regex_then_back_to_names() -> None:
    c = GroupContext.with_topics(foo=2, bar=1)
    r = c.consumer_group_heartbeat(
        join_req(subscribed_topic_names=None, subscribed_topic_regex="[")
    )
    assert err(r) == (
        ErrorCode.INVALID_REGULAR_EXPRESSION,
        "SubscribedTopicRegex `[` is not a valid regular expression: missing closing ].",
    )
    assert "g" not in c.shard.consumer.groups  # nothing written
    m = Member(c, "g", "m", regex="fo.*")
    assert m.join().member_epoch == 1
    r = m.beat(subscribed_topic_regex="", subscribed_topic_names=["bar"])
    assert r.error_code == 0
    settle([m])
    assert m.partitions() == {("bar", 0)}


@pytest.mark.parametrize(
    ("regex", "description"),
    [
        ("(", "missing closing )"),
        ("*", "missing argument to repetition operator"),
        ("a\\", "trailing backslash at end of expression"),
        ("[z-a]", "invalid character class range"),
        ("a{2000}", "invalid repeat count"),
        ("(?<x", "invalid named capture"),
        (")", "unexpected )"),
    ],
)
def test_invalid_regex_message_is_re2j_description(regex: str, description: str) -> None:
    """Kafka puts RE2/J's PatternSyntaxException.getDescription() in the message."""
    c = GroupContext.with_topics()
    r = c.consumer_group_heartbeat(
        join_req(subscribed_topic_names=None, subscribed_topic_regex=regex)
    )
    assert err(r) == (
        ErrorCode.INVALID_REGULAR_EXPRESSION,
        f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {description}.",
    )


# ------------------------------------------------------------ §10 item 8: lookups


def test_unknown_group_with_positive_epoch_or_leave_is_group_id_not_found() -> None:
    c = GroupContext.with_topics()
    r = c.consumer_group_heartbeat(
        ConsumerGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=1)
    )
    assert err(r) == (ErrorCode.GROUP_ID_NOT_FOUND, "Consumer group g not found.")
    r = c.consumer_group_heartbeat(
        ConsumerGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=-1)
    )
    # The leave path words it as Kafka's consumerGroupLeave does (seen on Kafka 4.4).
    assert err(r) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group g not found.")
    assert "g" not in c.shard.consumer.groups
    assert c.records == []


def test_unknown_member_with_positive_epoch_or_leave_is_unknown_member_id() -> None:
    c = GroupContext.with_topics(foo=1)
    Member(c, "g", "a", ["foo"]).join()
    r = c.consumer_group_heartbeat(
        ConsumerGroupHeartbeatRequest(group_id="g", member_id="x", member_epoch=1)
    )
    assert err(r) == (ErrorCode.UNKNOWN_MEMBER_ID, "Member x is not a member of group g.")
    r = c.consumer_group_heartbeat(
        ConsumerGroupHeartbeatRequest(group_id="g", member_id="x", member_epoch=-1)
    )
    assert err(r) == (ErrorCode.UNKNOWN_MEMBER_ID, "Member x is not a member of group g.")


# ------------------------------------------------------------ §10 items 9-10: member epochs


def _a_at_epoch_2() -> tuple[GroupContext, Member, Member]:
    """a at epoch 3 (previous 2) owning foo 0-2 after b joined; b owns foo 3-5 (a new group
    starts at epoch 1, a's subscription moves it to 2, b's joining to 3)."""
    c = GroupContext.with_topics(foo=6)
    a, b = Member(c, "g", "a", ["foo"]), Member(c, "g", "b", ["foo"])
    a.join()
    b.join()
    settle([a, b])
    ma = c.shard.consumer.groups["g"].members["a"]
    assert (ma.member_epoch, ma.previous_member_epoch) == (3, 2)
    return c, a, b


def test_epoch_ahead_is_fenced() -> None:
    _c, a, _ = _a_at_epoch_2()
    r = a.beat(member_epoch=4)
    assert err(r) == (
        ErrorCode.FENCED_MEMBER_EPOCH,
        "The consumer group member has a greater member epoch (4) than the one known by the "
        "group coordinator (3). The member must abandon all its partitions and rejoin.",
    )


def test_epoch_behind_and_not_the_previous_is_fenced() -> None:
    c = GroupContext.with_topics(foo=6)
    ms = [Member(c, "g", f"m{i}", ["foo"]) for i in range(3)]
    for m in ms:
        m.join()
        settle(ms[: ms.index(m) + 1])
    m0 = c.shard.consumer.groups["g"].members["m0"]
    assert m0.member_epoch == 4 and m0.previous_member_epoch == 3
    r = ms[0].beat(member_epoch=2)
    assert err(r) == (
        ErrorCode.FENCED_MEMBER_EPOCH,
        "The consumer group member has a smaller member epoch (2) than the one known by the "
        "group coordinator (4). The member must abandon all its partitions and rejoin.",
    )


def test_previous_epoch_without_owned_partitions_is_fenced() -> None:
    _c, a, _ = _a_at_epoch_2()
    assert a.beat(ack=False, member_epoch=2).error_code == ErrorCode.FENCED_MEMBER_EPOCH


def test_previous_epoch_owning_more_than_assigned_is_fenced() -> None:
    c, a, _b = _a_at_epoch_2()
    foo = c.tid("foo")
    owned = [TopicPartitions(topic_id=foo, partitions=[0, 1, 2, 3, 4, 5])]
    assert (
        a.beat(member_epoch=2, topic_partitions=owned).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    )


def test_previous_epoch_with_a_subset_of_the_assignment_is_accepted() -> None:
    """A lost response: the member still speaks its previous epoch and is told the current one."""
    c, a, _ = _a_at_epoch_2()
    foo = c.tid("foo")
    some = sorted(a.owned["foo"])[:1]
    r = a.beat(member_epoch=2, topic_partitions=[TopicPartitions(topic_id=foo, partitions=some)])
    assert r.error_code == 0 and r.member_epoch == 3


def test_rejoin_at_epoch_0_from_stable_gets_the_assignment_back() -> None:
    """Kafka 4.2 (KAFKA-19233): a known member may rejoin with epoch 0."""
    c, a, _ = _a_at_epoch_2()
    before = a.partitions()
    epoch = c.shard.consumer.groups["g"].group_epoch
    r = a.join()
    assert r.error_code == 0 and r.member_epoch == 3
    assert a.partitions() == before
    assert c.shard.consumer.groups["g"].group_epoch == epoch  # nothing changed: no bump


def test_rejoin_at_epoch_0_from_unrevoked_partitions() -> None:
    c = GroupContext.with_topics(foo=4)
    a, b = Member(c, "g", "a", ["foo"]), Member(c, "g", "b", ["foo"])
    a.join()
    b.join()
    a.beat(ack=False)  # told to revoke half, does not acknowledge
    assert state_of(c, "a") is MemberState.UNREVOKED_PARTITIONS
    r = a.join()  # rejoining owns nothing: the revocation is done
    assert r.error_code == 0 and r.member_epoch == 3
    assert state_of(c, "a") is MemberState.STABLE
    assert len(a.partitions()) == 2
    settle([a, b])
    assert len(b.partitions()) == 2 and a.partitions().isdisjoint(b.partitions())


def test_rejoin_at_epoch_0_from_unreleased_partitions() -> None:
    c = GroupContext.with_topics(foo=4)
    a, b = Member(c, "g", "a", ["foo"]), Member(c, "g", "b", ["foo"])
    a.join()
    b.join()
    assert state_of(c, "b") is MemberState.UNRELEASED_PARTITIONS
    r = b.join()
    assert r.error_code == 0 and r.member_epoch == 3
    assert state_of(c, "b") is MemberState.UNRELEASED_PARTITIONS
    a.beat()
    a.beat()
    r = b.join()
    assert r.member_epoch == 3 and len(b.partitions()) == 2
    assert state_of(c, "b") is MemberState.STABLE


# ------------------------------------------------------------ §10 item 11: group size


def test_full_group_rejects_new_members_and_keeps_serving_the_others() -> None:
    c = GroupContext.with_topics(GroupConfig(consumer_group_max_size=2), foo=4)
    a, b = Member(c, "g", "a", ["foo"]), Member(c, "g", "b", ["foo"])
    a.join()
    b.join()
    n = len(c.records)
    r = Member(c, "g", "c", ["foo"]).join()
    assert err(r) == (
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        "The consumer group has reached its maximum capacity of 2 members.",
    )
    assert len(c.records) == n
    # v0 with a blank id is a new member too
    assert (
        c.consumer_group_heartbeat(join_req(member_id=""), 0).error_code
        == ErrorCode.GROUP_MAX_SIZE_REACHED
    )
    settle([a, b])
    assert a.beat().error_code == 0
    assert a.join().error_code == 0  # an existing member id always passes
