"""ConsumerGroupDescribe shows what a member holds, partitions pending revocation included, as
Kafka 4.4's ConsumerGroupMember.asConsumerGroupDescribeMember does (found by the generated
differential scenarios: a member asked to give a partition back was described without it)."""

from __future__ import annotations

from support.consumer_member import Member
from support.group_context import GroupContext

from coordinator.group.consumer.member import MemberState


def test_a_member_revoking_is_described_with_what_it_still_holds() -> None:
    c = GroupContext.with_topics(t=3)
    a = Member(c, "g", "a", ["t"])
    a.join()
    assert a.partitions() == {("t", 0), ("t", 1), ("t", 2)}
    Member(c, "g", "b", ["t"]).join()
    a.beat(ack=False)  # a partial heartbeat: told to revoke, not acknowledged
    member = c.shard.consumer.groups["g"].members["a"]
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    (d,) = c.consumer_group_describe("g")
    (described,) = [m for m in d.members if m.member_id == "a"]
    held = {
        (tp.topic_name, p) for tp in described.assignment.topic_partitions for p in tp.partitions
    }
    assert held == {("t", 0), ("t", 1), ("t", 2)}
    target = {
        (tp.topic_name, p)
        for tp in described.target_assignment.topic_partitions
        for p in tp.partitions
    }
    assert len(target) == 2 and target < held


def test_held_partitions_are_listed_assigned_first_then_pending() -> None:
    # Kafka's accumulateTopicPartitions: the assigned set, then the pending one, per topic.
    c = GroupContext.with_topics(t=3)
    b = Member(c, "g", "b", ["t"])
    b.join()
    a = Member(c, "g", "a", ["t"])
    a.join()
    b.beat(ack=False)
    member = c.shard.consumer.groups["g"].members["b"]
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    (d,) = c.consumer_group_describe("g")
    (described,) = [m for m in d.members if m.member_id == "b"]
    (tp,) = described.assignment.topic_partitions
    assigned = sorted(p for ps in member.assigned.values() for p in ps)
    pending = sorted(p for ps in member.pending_revocation.values() for p in ps)
    assert pending and tp.partitions == assigned + pending
