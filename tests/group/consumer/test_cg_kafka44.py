"""Consumer groups as Kafka 4.4 runs them where it differs from 4.1-4.2 (pure shard, fake clock).

* A new group is born at group epoch 1 and target assignment epoch 1, with no record
  (Kafka 4.3+'s ModernGroup constructor and TargetAssignmentMetadata.INITIAL): a first member
  that subscribes to nothing joins at 1 (records 5 and 8 only); one that subscribes to topics
  bumps the group once more, to 2 -- the "double bump" seen from a client.
* A member that changes the group's preferred server assignor bumps the group epoch
  (GroupMetadataManager.hasPreferredServerAssignorChanged).
* KIP-1251 (KAFKA-20066): each partition a member holds has the epoch at which it was assigned
  to the member, kept in the current-assignment record (type 8, tagged AssignmentEpochs);
  an OffsetCommit or TxnOffsetCommit with a member epoch older than the member's is accepted
  when every partition was assigned to the member at that epoch or before
  (ConsumerGroup.validateOffsetCommit's assignment-epoch validator). OffsetFetch still wants
  the exact epoch.

What Kafka 4.4 writes was read off the reference broker (tests/differential/
test_consumer_kafka44.py compares the answers).
"""

from __future__ import annotations

from support.consumer_member import Mark, Member, kinds
from support.group_context import GroupContext

from coordinator.group.types import GroupConfig
from protocol.errors import ErrorCode
from protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
)
from protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)
from storage.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMetadataValue,
    TopicPartitions,
    encode_consumer_group_key,
    encode_consumer_group_value,
)

# ------------------------------------------------------------ helpers


def commit(
    c: GroupContext,
    group: str,
    member: str,
    epoch: int,
    parts: list[tuple[str, int]],
    *,
    version: int = 9,
) -> dict[tuple[str, int], int]:
    ctx = c.ctx(version)
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(OffsetCommitRequestPartition(p, 1))
    req = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=epoch,
        member_id=member,
        topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
    )
    out = c.apply(c.shard.offset_commit(ctx, req, c.now))
    (resp,) = [r for h, r in out.replies if h == ctx.reply_to]
    assert isinstance(resp, OffsetCommitResponse)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def txn_commit(
    c: GroupContext, group: str, member: str, epoch: int, parts: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    ctx = c.ctx(3)
    req = TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id=group,
        producer_id=7,
        producer_epoch=0,
        generation_id=epoch,
        member_id=member,
        topics=[
            TxnOffsetCommitRequestTopic(t, [TxnOffsetCommitRequestPartition(p, 1)])
            for t, p in parts
        ],
    )
    out = c.apply(c.shard.txn_offset_commit(ctx, req, c.now))
    (resp,) = [r for h, r in out.replies if h == ctx.reply_to]
    assert isinstance(resp, TxnOffsetCommitResponse)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def fetch_error(c: GroupContext, group: str, member: str, epoch: int, topic: str) -> int:
    ctx = c.ctx(9)
    req = OffsetFetchRequest(
        groups=[
            OffsetFetchRequestGroup(
                group_id=group,
                member_id=member,
                member_epoch=epoch,
                topics=[OffsetFetchRequestTopics(name=topic, partition_indexes=[0])],
            )
        ]
    )
    out = c.shard.offset_fetch(ctx, req, c.now)
    (resp,) = [r for h, r in out.replies if h == ctx.reply_to]
    assert isinstance(resp, OffsetFetchResponse)
    return resp.groups[0].error_code


def epochs_of(c: GroupContext, group: str, member: str) -> dict[tuple[str, int], int]:
    """The assignment epoch of every partition the member holds, by topic name."""
    m = c.shard.consumer.groups[group].members[member]
    return {(c.name(t), p): e for t, ps in m.held_epochs().items() for p, e in ps.items()}


# ------------------------------------------------------------ a new group's epoch


def test_a_first_member_subscribing_to_nothing_joins_a_new_group_at_epoch_1() -> None:
    c = GroupContext.with_topics(t=2)
    mark = Mark(c)
    a = Member(c, "g", "a", [])
    r = a.join()
    assert (r.error_code, r.member_epoch) == (0, 1)
    # Kafka 4.4 writes the member's subscription and its current assignment only: the
    # group's epoch (1) and its empty target (epoch 1) are where a new group starts.
    assert kinds(mark.new()) == ["5", "8"]
    g = c.shard.consumer.groups["g"]
    assert (g.group_epoch, g.assignment_epoch) == (1, 1)
    # A restarted coordinator rebuilds the same group from those two records.
    other = c.replayed().consumer.groups["g"]
    assert (other.group_epoch, other.assignment_epoch) == (1, 1)
    assert other.members["a"].member_epoch == 1


def test_a_first_member_subscribing_to_topics_moves_a_new_group_to_epoch_2() -> None:
    c = GroupContext.with_topics(t=2)
    mark = Mark(c)
    r = Member(c, "g", "a", ["t"]).join()
    assert (r.error_code, r.member_epoch) == (0, 2)
    records = mark.new()
    # Kafka 4.4's records: subscription, group epoch 2, target, target epoch 2, assignment.
    assert kinds(records) == ["5", "3", "7", "6", "8"]
    assert [v.epoch for _, v in records if isinstance(v, ConsumerGroupMetadataValue)] == [2]
    (current,) = [v for _, v in records if isinstance(v, ConsumerGroupCurrentMemberAssignmentValue)]
    assert (current.member_epoch, current.previous_member_epoch) == (2, 0)
    assert [tp.assignment_epochs for tp in current.assigned_partitions] == [[2, 2]]


def test_a_first_member_naming_another_assignor_moves_a_new_group_to_epoch_2() -> None:
    c = GroupContext.with_topics(t=2)
    r = Member(c, "g", "a", [], assignor="range").join()
    assert r.member_epoch == 2
    # Naming the default assignor (the first configured) changes nothing.
    r = Member(c, "h", "a", [], assignor=GroupConfig().consumer_group_assignors[0]).join()
    assert r.member_epoch == 1


# ------------------------------------------------------------ the preferred assignor


def test_a_member_changing_the_preferred_assignor_bumps_the_group_epoch() -> None:
    c = GroupContext.with_topics(t=2)
    a = Member(c, "g", "a", [])
    assert a.join().member_epoch == 1
    a.topics = ["t"]
    assert a.beat(subscribed_topic_names=["t"]).member_epoch == 2
    # b joins subscribing to nothing: no new subscription, but it makes "range" the group's
    # preferred assignor (the one most members name), so the target must be recomputed.
    mark = Mark(c)
    b = Member(c, "g", "b", [], assignor="range")
    assert b.join().member_epoch == 3
    assert "3" in kinds(mark.new())
    assert c.shard.consumer.groups["g"].group_epoch == 3
    # c names range too: still range, no bump.
    cm = Member(c, "g", "c", [], assignor="range")
    assert cm.join().member_epoch == 3
    assert c.shard.consumer.groups["g"].group_epoch == 3


def test_a_member_switching_assignor_bumps_only_when_the_preferred_one_changes() -> None:
    c = GroupContext.with_topics(t=2)
    a = Member(c, "g", "a", ["t"], assignor="range")
    assert a.join().member_epoch == 2  # subscription and assignor: one bump from 1
    b = Member(c, "g", "b", [], assignor="range")
    assert b.join().member_epoch == 2  # range stays preferred
    x = Member(c, "g", "x", [], assignor="uniform")
    assert x.join().member_epoch == 2  # two range, one uniform: still range
    group = c.shard.consumer.groups["g"]
    assert group.preferred_assignor("uniform") == "range"
    # b moves to uniform: two uniform, one range -- the preferred assignor changes.
    assert b.beat(server_assignor="uniform").member_epoch == 3
    assert group.group_epoch == 3 and group.preferred_assignor("range") == "uniform"
    # a changes its subscription back and forth without touching assignors: bumps for the
    # subscription only; x naming uniform again (unchanged) bumps nothing.
    assert x.beat(server_assignor="uniform").error_code == 0
    assert group.group_epoch == 3


# ------------------------------------------------------------ KIP-1251 assignment epochs


def _two_members(c: GroupContext) -> tuple[Member, Member]:
    """m holds t-0 and t-1 since epoch 2; other joins for u: the group and m move to 3."""
    m = Member(c, "g", "m", [])
    m.join()
    m.topics = ["t"]
    r = m.beat(subscribed_topic_names=["t"])
    assert r.member_epoch == 2 and m.partitions() == {("t", 0), ("t", 1)}
    other = Member(c, "g", "other", ["u"])
    assert other.join().member_epoch == 3
    assert m.beat().member_epoch == 3
    assert m.partitions() == {("t", 0), ("t", 1)}
    return m, other


def test_reconciliation_keeps_the_epoch_a_partition_was_assigned_at() -> None:
    c = GroupContext.with_topics(t=2, u=1)
    _two_members(c)
    assert epochs_of(c, "g", "m") == {("t", 0): 2, ("t", 1): 2}
    assert epochs_of(c, "g", "other") == {("u", 0): 3}


def test_a_commit_with_an_older_epoch_is_accepted_for_partitions_held_since() -> None:
    c = GroupContext.with_topics(t=2, u=1)
    _two_members(c)
    # The member is at 3; its commit sent at 2 (before it learnt 3) is for partitions it
    # was assigned at 2: accepted (Kafka 4.1-4.2: STALE_MEMBER_EPOCH).
    assert commit(c, "g", "m", 2, [("t", 0), ("t", 1)]) == {("t", 0): 0, ("t", 1): 0}
    assert c.shard.offsets["g"][("t", 0)].offset == 1
    # Older than the partitions' assignment: refused.
    assert commit(c, "g", "m", 1, [("t", 0)]) == {("t", 0): ErrorCode.STALE_MEMBER_EPOCH}
    # Newer than the member's: refused.
    assert commit(c, "g", "m", 4, [("t", 0)]) == {("t", 0): ErrorCode.STALE_MEMBER_EPOCH}
    # A partition the member does not hold fails the whole request.
    assert commit(c, "g", "m", 2, [("t", 0), ("u", 0)]) == {
        ("t", 0): ErrorCode.STALE_MEMBER_EPOCH,
        ("u", 0): ErrorCode.STALE_MEMBER_EPOCH,
    }
    # The exact epoch needs no assignment at all, as before.
    assert commit(c, "g", "m", 3, [("u", 0)]) == {("u", 0): 0}


def test_a_partition_new_at_an_epoch_is_not_committed_with_an_earlier_one() -> None:
    c = GroupContext.with_topics(t=4)
    a = Member(c, "g", "a", ["t"])
    assert a.join().member_epoch == 2
    b = Member(c, "g", "b", ["t"])
    b.join()  # epoch 3: a gives two partitions up, b waits for them
    a.beat()  # a is told what to give up (UNREVOKED, still at 2)
    a.beat()  # a acknowledges the revocation, reaches 3 with what it kept
    assert a.epoch == 3
    b.beat()  # b gets the released partitions at 3
    assert b.epoch == 3 and len(b.partitions()) == 2
    held_b = sorted(b.partitions())
    assert epochs_of(c, "g", "b") == dict.fromkeys(held_b, 3)
    kept_a = sorted(a.partitions())
    assert epochs_of(c, "g", "a") == dict.fromkeys(kept_a, 2)
    # a commits its kept partitions with its previous epoch: accepted.
    assert set(commit(c, "g", "a", 2, kept_a).values()) == {0}
    # b's partitions were assigned at 3: b's epoch 2 was never its, and 2 < 3.
    assert set(commit(c, "g", "b", 2, held_b).values()) == {ErrorCode.STALE_MEMBER_EPOCH}


def test_partitions_pending_revocation_keep_their_epoch_for_commits() -> None:
    c = GroupContext.with_topics(t=4)
    a = Member(c, "g", "a", ["t"])
    a.join()  # epoch 2, all four
    b = Member(c, "g", "b", [])
    b.join()  # epoch 2 too: subscribing to nothing changes nothing
    assert b.epoch == 2
    b.topics = ["t"]
    b.beat(subscribed_topic_names=["t"])  # epoch 3: a must give two up
    r = a.beat(ack=False)  # told, not acknowledged: UNREVOKED at its epoch (2)
    member = c.shard.consumer.groups["g"].members["a"]
    assert member.state.name == "UNREVOKED_PARTITIONS" and r.member_epoch == 2
    pending = sorted((c.name(t), p) for t, ps in member.pending_revocation.items() for p in ps)
    assert len(pending) == 2
    assert {k: v for k, v in epochs_of(c, "g", "a").items() if k in pending} == dict.fromkeys(
        pending, 2
    )
    # Committing what it is giving up, at its epoch: exact, accepted.
    assert set(commit(c, "g", "a", 2, pending).values()) == {0}


def test_a_txn_offset_commit_with_an_older_epoch_is_accepted_too() -> None:
    c = GroupContext.with_topics(t=2, u=1)
    _two_members(c)
    assert txn_commit(c, "g", "m", 2, [("t", 0)]) == {("t", 0): 0}
    # Refused ones answer ILLEGAL_GENERATION on TxnOffsetCommit, as Kafka maps them.
    assert txn_commit(c, "g", "m", 2, [("u", 0)]) == {("u", 0): ErrorCode.ILLEGAL_GENERATION}
    assert txn_commit(c, "g", "m", 1, [("t", 1)]) == {("t", 1): ErrorCode.ILLEGAL_GENERATION}


def test_an_offset_fetch_still_wants_the_member_epoch_exactly() -> None:
    c = GroupContext.with_topics(t=2, u=1)
    _two_members(c)
    assert fetch_error(c, "g", "m", 3, "t") == 0
    assert fetch_error(c, "g", "m", 2, "t") == ErrorCode.STALE_MEMBER_EPOCH


def test_assignment_epochs_are_kept_in_the_log_and_replayed() -> None:
    c = GroupContext.with_topics(t=2, u=1)
    _two_members(c)
    other = c.replayed()
    m = other.consumer.groups["g"].members["m"]
    assert m.member_epoch == 3
    replayed = {(c.name(t), p): e for t, ps in m.held_epochs().items() for p, e in ps.items()}
    assert replayed == {("t", 0): 2, ("t", 1): 2}
    # The replayed coordinator accepts the older epoch the same way.
    c.shard = other
    assert commit(c, "g", "m", 2, [("t", 0)]) == {("t", 0): 0}


def test_a_record_without_assignment_epochs_gives_each_partition_the_member_epoch() -> None:
    """Records of Kafka 4.2 and before (and of kgc before this): no AssignmentEpochs."""
    c = GroupContext.with_topics(t=2)
    tid = c.tid("t")
    shard = c.shard
    key = encode_consumer_group_key(ConsumerGroupCurrentMemberAssignmentKey("g", "m"))
    value = encode_consumer_group_value(
        ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=5,
            previous_member_epoch=4,
            state=0,
            assigned_partitions=[TopicPartitions(tid, [0])],
            partitions_pending_revocation=[TopicPartitions(tid, [1])],
        )
    )
    p = shard.partitions.partition_of("g")
    c.records.append((p, key, value))
    m = c.replayed().consumer.groups["g"].members["m"]
    assert m.held_epochs() == {tid: {0: 5, 1: 5}}
