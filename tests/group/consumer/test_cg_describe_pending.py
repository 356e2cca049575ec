"""ConsumerGroupDescribe shows what a member holds, partitions pending revocation included, as
Kafka 4.4's ConsumerGroupMember.asConsumerGroupDescribeMember does (found by the generated
differential scenarios: a member asked to give a partition back was described without it)."""

from __future__ import annotations

from cgkit import Cluster, Member

from coordinator.group.consumer.member import MemberState


def test_a_member_revoking_is_described_with_what_it_still_holds() -> None:
    c = Cluster(t=3)
    a = Member(c, "g", "a", ["t"])
    a.join()
    assert a.partitions() == {("t", 0), ("t", 1), ("t", 2)}
    Member(c, "g", "b", ["t"]).join()
    a.beat(ack=False)  # a partial heartbeat: told to revoke, not acknowledged
    member = c.shard.consumer.groups["g"].members["a"]
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    (d,) = c.describe("g")
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
