"""Sequence checking, dedupe and producer-id allocation (Kafka's ProducerStateManager rules)."""

from __future__ import annotations

from pathlib import Path

from coordinator.dataplane.producers import (
    INT32_MAX,
    PartitionProducers,
    ProducerIdAllocator,
    in_sequence,
    last_sequence,
)
from protocol.errors import ErrorCode

PID = 7


def append(t: PartitionProducers, epoch: int, seq: int, count: int, offset: int) -> None:
    v = t.check(PID, epoch, seq, count - 1)
    assert v.error == 0 and v.duplicate is None, v
    t.record(PID, epoch, seq, offset, offset + count - 1, now_ms=0)


def test_sequence_wraps() -> None:
    assert last_sequence(0, 4) == 4
    assert last_sequence(INT32_MAX, 0) == INT32_MAX
    assert last_sequence(INT32_MAX - 1, 3) == 1
    assert in_sequence(INT32_MAX, 0)
    assert in_sequence(4, 5)
    assert not in_sequence(4, 6)


def test_unknown_producer_may_start_anywhere_and_non_idempotent_is_ignored() -> None:
    t = PartitionProducers()
    assert t.check(PID, 0, 12345, 9).error == 0
    assert t.check(-1, -1, -1, 9).error == 0


def test_in_order_batches_pass() -> None:
    t = PartitionProducers()
    append(t, 0, 0, 5, 0)
    append(t, 0, 5, 3, 5)
    append(t, 0, 8, 1, 8)


def test_duplicate_of_last_five_returns_original_offsets() -> None:
    t = PartitionProducers()
    for i in range(7):
        append(t, 0, i * 2, 2, 100 + i * 2)
    # Batches 2..6 are cached (5 of them); a retry of batch 3 is a duplicate.
    v = t.check(PID, 0, 6, 1)
    assert v.error == 0 and v.duplicate is not None
    assert (v.duplicate.first_offset, v.duplicate.last_offset) == (106, 107)
    # Batch 0 fell out of the cache: a retry is out of order, not a duplicate.
    v = t.check(PID, 0, 0, 1)
    assert v.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and v.duplicate is None
    # Same first sequence but a different length is not a duplicate.
    assert t.check(PID, 0, 6, 0).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_gap_is_out_of_order() -> None:
    t = PartitionProducers()
    append(t, 0, 0, 5, 0)
    assert t.check(PID, 0, 6, 0).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_old_epoch_is_fenced_and_new_epoch_restarts_at_zero() -> None:
    t = PartitionProducers()
    append(t, 3, 0, 5, 0)
    assert t.check(PID, 2, 5, 0).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert t.check(PID, 4, 5, 0).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    append(t, 4, 0, 2, 5)
    # The old epoch's batches no longer count as duplicates.
    assert t.check(PID, 3, 0, 4).error == ErrorCode.INVALID_PRODUCER_EPOCH


def test_sequence_wraps_around_int32() -> None:
    t = PartitionProducers()
    append(t, 0, INT32_MAX - 1, 2, 0)
    append(t, 0, 0, 1, 2)


def test_prune_forgets_deleted_and_idle_producers() -> None:
    t = PartitionProducers()
    t.record(1, 0, 0, 0, 9, now_ms=1000)
    t.record(2, 0, 0, 10, 19, now_ms=1000)
    t.record(3, 0, 0, 20, 29, now_ms=50_000)
    assert t.prune(log_start_offset=10, now_ms=60_000, expiration_ms=30_000) == 2
    assert list(t.entries) == [3]


def test_allocator_never_reuses_ids_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "pids"
    a = ProducerIdAllocator(path, block=10)
    ids = [a.allocate() for _ in range(3)]
    assert ids == [0, 1, 2]
    b = ProducerIdAllocator(path, block=10)  # "restart" (the rest of the block is skipped)
    assert b.allocate() == 10
    b.ensure_above(500)
    assert b.allocate() == 501
    c = ProducerIdAllocator(path, block=10)
    assert c.allocate() >= 502
