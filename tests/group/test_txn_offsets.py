"""Transactional offsets in the pure group core: Kafka's OffsetMetadataManagerTest and
CoordinatorRuntimeTest cases for TxnOffsetCommit, markers, require_stable, deletion and
expiry, with a fake clock; every test also replays what was written into a second shard
(``assert_replay_equivalent``: committed and pending offsets alike).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.group_context import GroupContext, end_txn, offset_delete

from coordinator.group import GroupConfig
from coordinator.group.types import TxnBatch
from protocol.errors import ErrorCode
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)
from storage.records import OffsetCommitKey, decode_key

T0 = ("t", 0)
T1 = ("t", 1)


def txn(
    h: GroupContext,
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    producer_id: int = 7,
    producer_epoch: int = 0,
    member_id: str = "",
    generation: int = -1,
    instance: str | None = None,
    metadata: str = "",
    version: int = 3,
) -> dict[tuple[str, int], int]:
    ctx = h.ctx(version)
    req = TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id=group,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance,
        topics=[
            TxnOffsetCommitRequestTopic(
                t, [TxnOffsetCommitRequestPartition(p, o, committed_metadata=metadata)]
            )
            for (t, p), o in offsets.items()
        ],
    )
    h.apply(h.shard.txn_offset_commit(ctx, req, h.now))
    r = h.reply(ctx.reply_to)
    assert isinstance(r, TxnOffsetCommitResponse)
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def stable(h: GroupContext, group: str, tp: tuple[str, int] = T0) -> tuple[int, int]:
    """(error code, offset) of a require_stable fetch of one partition."""
    p = h.fetch(group, {tp[0]: [tp[1]]}, require_stable=True).topics[0].partitions[0]
    return p.error_code, p.committed_offset


# ------------------------------------------------------------ TxnOffsetCommit


def test_the_offsets_are_one_transactional_batch_of_the_producer() -> None:
    h = GroupContext()
    assert txn(h, "g", {T0: 5, T1: 6}, producer_id=42, producer_epoch=3) == {T0: 0, T1: 0}
    result = h.results[-1]
    assert result.txn == TxnBatch(42, 3, False)
    keys = [decode_key(k) for _, k, _ in result.records]
    assert [(k.topic, k.partition) for k in keys if isinstance(k, OffsetCommitKey)] == [T0, T1]
    # Invisible until the marker; a simple classic group holds them.
    assert h.committed("g", "t", 0) == -1 and "g" in h.shard.groups
    assert set(h.shard.pending_txn_offsets["g"][42]) == {T0, T1}
    h.assert_replay_equivalent()


def test_generic_group_txn_commit_with_illegal_generation() -> None:
    # OffsetMetadataManagerTest.testGenericGroupTransactionalOffsetCommitWithIllegalGenerationId
    h = GroupContext()
    (member,), gen = h.stable_group("g", 1)
    bad = txn(h, "g", {T0: 1}, member_id=member, generation=gen + 1)
    assert bad == {T0: ErrorCode.ILLEGAL_GENERATION}
    assert txn(h, "g", {T0: 1}, member_id="ghost", generation=gen) == {
        T0: ErrorCode.UNKNOWN_MEMBER_ID
    }
    # Unlike OffsetCommit, no member fields at all is accepted in a non-empty group.
    assert txn(h, "g", {T0: 1}) == {T0: 0}
    assert txn(h, "g", {T1: 2}, member_id=member, generation=gen) == {T1: 0}
    # An unknown group with a generation is refused; with -1 a simple group is made.
    assert txn(h, "other", {T0: 1}, generation=1) == {T0: ErrorCode.ILLEGAL_GENERATION}
    assert "other" not in h.shard.groups and "other" not in h.shard.pending_txn_offsets
    h.assert_replay_equivalent()


def test_metadata_too_large_is_per_partition_and_only_the_rest_is_written() -> None:
    h = GroupContext(GroupConfig(offset_metadata_max_bytes=4))
    ctx = h.ctx(3)
    req = TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id="g",
        producer_id=7,
        producer_epoch=0,
        topics=[
            TxnOffsetCommitRequestTopic(
                "t",
                [
                    TxnOffsetCommitRequestPartition(0, 1, committed_metadata="12345"),
                    TxnOffsetCommitRequestPartition(1, 2, committed_metadata="ok"),
                ],
            )
        ],
    )
    h.apply(h.shard.txn_offset_commit(ctx, req, h.now))
    r = h.reply(ctx.reply_to)
    codes = [p.error_code for p in r.topics[0].partitions]
    assert codes == [ErrorCode.OFFSET_METADATA_TOO_LARGE, 0]
    assert set(h.shard.pending_txn_offsets["g"][7]) == {T1}


def test_unknown_partitions_are_answered_first_as_kafkas_builder_merges() -> None:
    h = GroupContext.builder().with_topic_partitions({"t": 2, "u": 1}.get).build()
    ctx = h.ctx(3)
    parts = TxnOffsetCommitRequestPartition
    req = TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id="g",
        producer_id=7,
        producer_epoch=0,
        topics=[
            TxnOffsetCommitRequestTopic("t", [parts(0, 1), parts(7, 1), parts(1, 1)]),
            TxnOffsetCommitRequestTopic("nope", [parts(0, 1)]),
            TxnOffsetCommitRequestTopic("u", [parts(0, 1)]),
        ],
    )
    h.apply(h.shard.txn_offset_commit(ctx, req, h.now))
    r = h.reply(ctx.reply_to)
    got = [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics]
    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert got == [
        ("t", [(7, unknown), (0, 0), (1, 0)]),
        ("nope", [(0, unknown)]),
        ("u", [(0, 0)]),
    ]


def test_delayed_txn_commit_with_bumped_epoch_is_rejected() -> None:
    # TxnOffsetCommitRequestTest.testDelayedTxnOffsetCommitWithBumpedEpochIsRejected: the
    # offsets log saw epoch 1 of the producer (its marker); a commit at epoch 0 is refused.
    h = GroupContext()
    assert txn(h, "g", {T0: 1}, producer_epoch=0) == {T0: 0}
    assert end_txn(h, "g", 7, False, producer_epoch=1) == ErrorCode.NO_ERROR
    written = len(h.records)
    assert txn(h, "g", {T0: 2}, producer_epoch=0) == {T0: ErrorCode.INVALID_PRODUCER_EPOCH}
    assert len(h.records) == written and "g" not in h.shard.pending_txn_offsets
    assert txn(h, "g", {T0: 3}, producer_epoch=1) == {T0: 0}
    h.assert_replay_equivalent()
    # The epochs are rebuilt by replay too: the replayed shard refuses the old epoch.
    other = h.replayed()
    assert other.offset_manager.producer_epoch_error(other.partition_of("g"), 7, 0)


def test_txn_commit_while_the_partition_loads() -> None:
    h = GroupContext()
    p = h.shard.partition_of("g")
    h.shard.begin_load(p)
    assert txn(h, "g", {T0: 1}, version=2) == {T0: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
    # Producers before 2.0 (v0-1) get COORDINATOR_NOT_AVAILABLE instead.
    assert txn(h, "g", {T0: 1}, version=1) == {T0: ErrorCode.COORDINATOR_NOT_AVAILABLE}


# ------------------------------------------------------------ markers


def test_commit_marker_makes_the_offsets_visible_and_abort_drops_them() -> None:
    h = GroupContext()
    txn(h, "g", {T0: 5}, producer_id=1)
    txn(h, "g", {T1: 6}, producer_id=2)
    assert end_txn(h, "g", 1, True) == ErrorCode.NO_ERROR
    assert h.results[-1].txn == TxnBatch(1, 0, True)
    assert h.committed("g", "t", 0) == 5 and h.committed("g", "t", 1) == -1
    assert end_txn(h, "g", 2, False) == ErrorCode.NO_ERROR
    assert h.committed("g", "t", 1) == -1
    assert "g" not in h.shard.pending_txn_offsets
    # A marker for a producer with nothing pending is written and changes nothing.
    assert end_txn(h, "g", 3, True) == ErrorCode.NO_ERROR
    h.assert_replay_equivalent()


def test_a_marker_ends_the_transaction_only_on_its_own_offsets_partition() -> None:
    h = GroupContext()
    a = next(g for g in (f"a{i}" for i in range(100)) if h.shard.partition_of(g) != 0)
    b = next(
        g
        for g in (f"b{i}" for i in range(100))
        if h.shard.partition_of(g) not in (0, h.shard.partition_of(a))
    )
    txn(h, a, {T0: 1})
    txn(h, b, {T0: 2})
    assert end_txn(h, a, 7, True) == ErrorCode.NO_ERROR
    assert h.committed(a, "t", 0) == 1
    assert h.committed(b, "t", 0) == -1 and stable(h, b)[0] == ErrorCode.UNSTABLE_OFFSET_COMMIT
    h.assert_replay_equivalent()


def test_marker_epoch_and_coordinator_epoch_validation() -> None:
    # CoordinatorRuntimeTest.testScheduleTransactionCompletionWhenEpochValidationFails and
    # ProducerStateManagerTest.testOldEpochForControlRecord / testCoordinatorFencing.
    h = GroupContext()
    txn(h, "g", {T0: 1}, producer_epoch=2)
    assert end_txn(h, "g", 7, True, producer_epoch=1) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert stable(h, "g")[0] == ErrorCode.UNSTABLE_OFFSET_COMMIT  # nothing changed
    assert end_txn(h, "g", 7, False, producer_epoch=2, coordinator_epoch=5) == 0
    txn(h, "g", {T0: 2}, producer_epoch=2)
    fenced = end_txn(h, "g", 7, True, producer_epoch=2, coordinator_epoch=4)
    assert fenced == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert stable(h, "g")[0] == ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert end_txn(h, "g", 7, True, producer_epoch=2, coordinator_epoch=5) == 0
    assert h.committed("g", "t", 0) == 2
    h.assert_replay_equivalent()


def test_marker_on_a_partition_not_served_here() -> None:
    h = GroupContext()
    p = h.shard.partition_of("g")
    h.shard.begin_load(p)
    assert end_txn(h, "g", 7, True) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    h.shard.unload(p, h.now)
    assert end_txn(h, "g", 7, True) == ErrorCode.NOT_COORDINATOR


def test_delayed_tv1_marker_commits_the_next_transactions_offsets() -> None:
    # WriteTxnMarkersRequestTest.testDelayedWriteTxnMarkersShouldNotCommitTxnOffset (TV1):
    # without a per-transaction epoch a delayed marker at the same epoch is accepted and
    # ends whatever transaction the producer has open, as in Kafka.
    h = GroupContext()
    txn(h, "g", {T0: 1})
    assert end_txn(h, "g", 7, True) == 0
    txn(h, "g", {T0: 2})
    assert end_txn(h, "g", 7, True) == 0  # the first marker, delivered again late
    assert h.committed("g", "t", 0) == 2


def test_replay_end_marker_keeps_the_most_recent_committed_offset() -> None:
    # OffsetMetadataManagerTest.testReplayTransactionEndMarkerKeepsTheMostRecentCommittedOffset
    h = GroupContext()
    txn(h, "g", {T0: 10}, producer_id=1)
    assert h.commit("g", {T0: 20}) == {T0: 0}  # a plain commit after the pending one
    txn(h, "g", {T1: 30}, producer_id=1)
    h.commit("g", {T1: 25})
    txn(h, "g", {T1: 31}, producer_id=2)  # after the plain commit of t-1
    assert end_txn(h, "g", 1, True) == 0
    assert h.committed("g", "t", 0) == 20  # the pending offset is older than the commit
    assert h.committed("g", "t", 1) == 25
    assert end_txn(h, "g", 2, True) == 0
    assert h.committed("g", "t", 1) == 31  # newer than the plain commit: it wins
    h.assert_replay_equivalent()


def test_two_producers_committing_the_same_partition_keep_the_newer_record() -> None:
    h = GroupContext()
    txn(h, "g", {T0: 1}, producer_id=1)
    txn(h, "g", {T0: 2}, producer_id=2)
    assert end_txn(h, "g", 2, True) == 0
    assert stable(h, "g") == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)  # producer 1 is open
    assert end_txn(h, "g", 1, True) == 0
    assert h.committed("g", "t", 0) == 2  # producer 1's record is older
    h.assert_replay_equivalent()


# ------------------------------------------------------------ require_stable


def test_fetch_offsets_with_pending_transactional_offsets() -> None:
    # OffsetMetadataManagerTest.testFetchOffsetsWithPendingTransactionalOffsets
    h = GroupContext()
    h.commit("g", {T0: 1, T1: 1})
    txn(h, "g", {T0: 5})
    assert stable(h, "g", T0) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
    assert stable(h, "g", T1) == (0, 1)  # partition-level: t-1 has nothing pending
    plain = h.fetch("g", {"t": [0]}).topics[0].partitions[0]
    assert (plain.error_code, plain.committed_offset) == (0, 1)  # the last committed one
    # Fetch-all: the same per partition.
    every = h.fetch("g", None, require_stable=True).topics[0].partitions
    assert {(p.partition_index, p.error_code, p.committed_offset) for p in every} == {
        (0, ErrorCode.UNSTABLE_OFFSET_COMMIT, -1),
        (1, 0, 1),
    }
    end_txn(h, "g", 7, True)
    assert stable(h, "g", T0) == (0, 5)


# ------------------------------------------------------------ deletion and expiry


def test_delete_group_all_offsets_with_pending_transactional_offsets() -> None:
    # OffsetMetadataManagerTest.testDeleteGroupAllOffsetsWithPendingTransactionalOffsets
    h = GroupContext()
    h.commit("g", {T0: 1})
    txn(h, "g", {T0: 2, T1: 3})
    ctx = h.ctx(2)
    h.apply(h.shard.delete_groups(ctx, DeleteGroupsRequest(groups_names=["g"]), h.now))
    assert h.reply(ctx.reply_to).results[0].error_code == 0
    tombstones = [decode_key(k) for _, k, v in h.results[-1].records if v is None]
    offsets = [(k.topic, k.partition) for k in tombstones if isinstance(k, OffsetCommitKey)]
    assert offsets == [T0, T1]  # committed first, then the pending-only partition
    assert "g" not in h.shard.pending_txn_offsets
    # The transaction's later COMMIT brings nothing back.
    assert end_txn(h, "g", 7, True) == 0
    assert "g" not in h.shard.offsets
    h.assert_replay_equivalent()


def test_replay_with_tombstone_and_pending_transactional_offsets() -> None:
    # OffsetMetadataManagerTest.testReplayWithTombstoneAndPendingTransactionalOffsets, through
    # OffsetDelete: a tombstone is written for a partition with only a pending offset.
    h = GroupContext()
    txn(h, "g", {T0: 2, T1: 3})
    resp = offset_delete(h, "g", {"t": [0]})
    assert resp.topics[0].partitions[0].error_code == 0
    assert h.results[-1].records and h.results[-1].records[0][2] is None
    assert stable(h, "g", T0) == (0, -1) and stable(h, "g", T1)[0] == 88
    end_txn(h, "g", 7, True)
    assert h.committed("g", "t", 0) == -1 and h.committed("g", "t", 1) == 3
    h.assert_replay_equivalent()


def test_cleanup_expired_offsets_with_pending_transactional_offsets() -> None:
    # OffsetMetadataManagerTest.testCleanupExpiredOffsetsWithPendingTransactionalOffsets
    config = GroupConfig(offsets_retention_minutes=1, offsets_retention_check_interval_ms=1000)
    h = GroupContext(config)
    h.commit("g", {T0: 1, T1: 1})
    txn(h, "g", {T0: 2})
    h.sleep(61_000)
    assert h.committed("g", "t", 0) == 1  # kept: a transactional offset is pending there
    assert h.committed("g", "t", 1) == -1  # expired
    assert "g" in h.shard.groups  # a group with an open transaction is not removed
    end_txn(h, "g", 7, False)
    h.sleep(1000)
    assert h.committed("g", "t", 0) == -1 and "g" not in h.shard.groups
    h.assert_replay_equivalent()


def test_a_group_with_only_pending_offsets_is_not_expired() -> None:
    config = GroupConfig(offsets_retention_minutes=1, offsets_retention_check_interval_ms=1000)
    h = GroupContext(config)
    txn(h, "g", {T0: 2})
    h.sleep(120_000)
    assert "g" in h.shard.groups
    end_txn(h, "g", 7, True)
    assert h.committed("g", "t", 0) == 2


def test_topic_deletion_tombstones_pending_offsets() -> None:
    h = GroupContext()
    txn(h, "g", {T0: 2})
    h.apply(h.shard.topic_deleted("t", h.now))
    assert [v for _, _, v in h.results[-1].records] == [None]
    end_txn(h, "g", 7, True)
    assert h.committed("g", "t", 0) == -1
    h.assert_replay_equivalent()


# ------------------------------------------------------------ replay, any interleaving

_GROUPS = ("g", "h")
_OPS = st.lists(
    st.tuples(
        st.sampled_from(("commit", "txn", "marker", "delete")),
        st.sampled_from(_GROUPS),
        st.integers(0, 1),  # partition of topic t
        st.integers(1, 3),  # producer id
        st.booleans(),  # marker: commit or abort
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(_OPS)
def test_any_interleaving_replays_to_the_same_state(
    ops: list[tuple[str, str, int, int, bool]],
) -> None:
    h = GroupContext()
    for n, (op, group, partition, pid, commit) in enumerate(ops):
        tp = ("t", partition)
        if op == "commit":
            assert h.commit(group, {tp: n}) == {tp: 0}
        elif op == "txn":
            assert txn(h, group, {tp: n}, producer_id=pid) == {tp: 0}
        elif op == "marker":
            assert end_txn(h, group, pid, commit) == 0
        else:
            offset_delete(h, group, {"t": [partition]})
    h.assert_replay_equivalent()
    other = h.replayed()
    assert other.offsets == h.shard.offsets
    assert other.pending_txn_offsets == h.shard.pending_txn_offsets
    # And both go on the same way: every producer commits now.
    for pid in (1, 2, 3):
        for group in _GROUPS:
            _, err = other.complete_transaction(other.partition_of(group), pid, 0, 0, True, 0)
            assert err == 0
            end_txn(h, group, pid, True)
    assert other.offsets == h.shard.offsets
