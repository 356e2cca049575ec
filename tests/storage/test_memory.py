"""The in-memory engine answers as the local log does: the same operations on both, the
same offsets, bytes and errors (storage/memory.py against storage/local/log.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.interface import CorruptLogError, LogConfig, OffsetOutOfRangeError, PartitionLog
from storage.local.log import PartitionLog as LocalLog
from storage.memory import MemoryLog
from storage.record_batch import encode_batch


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[PartitionLog, PartitionLog]]:
    local = LocalLog(tmp_path / "t-0", LogConfig())
    yield local, MemoryLog("t-0")
    local.close()


def fill(log: PartitionLog) -> None:
    for i in range(5):
        log.append_records([(b"k%d" % i, b"v%d" % i), (None, b"x")], timestamp_ms=100 + 10 * i)
    log.append(encode_batch(0, [(b"late", b"z")], timestamp_ms=120))


def both(pair: tuple[PartitionLog, PartitionLog]) -> tuple[PartitionLog, PartitionLog]:
    for log in pair:
        fill(log)
    return pair


def test_appends_and_reads_are_the_same(pair: tuple[PartitionLog, PartitionLog]) -> None:
    local, memory = both(pair)
    assert (memory.log_start_offset, memory.log_end_offset) == (0, 11)
    for offset in (0, 1, 2, 5, 10, 11):
        for max_bytes in (1, 100, 1 << 20):
            assert memory.read(offset, max_bytes) == local.read(offset, max_bytes)
        assert memory.read(offset, 1 << 20, max_offset=6) == local.read(offset, 1 << 20, 6)
    assert list(memory.iter_batches(3)) == list(local.iter_batches(3))
    assert list(memory.verified_batches()) == list(local.verified_batches())
    with pytest.raises(OffsetOutOfRangeError):
        memory.read(12, 100)


def test_timestamp_lookups_are_the_same(pair: tuple[PartitionLog, PartitionLog]) -> None:
    local, memory = both(pair)
    for ts in (0, 100, 105, 120, 140, 141):
        assert memory.offset_for_timestamp(ts) == local.offset_for_timestamp(ts)
    assert memory.offset_for_max_timestamp() == local.offset_for_max_timestamp() == (140, 8)


def test_truncation_and_log_start_are_the_same(pair: tuple[PartitionLog, PartitionLog]) -> None:
    local, memory = both(pair)
    for log in (local, memory):
        log.delete_segments_before(3)
        log.truncate_to(7)  # inside the batch at 6: the whole batch goes
    assert (memory.log_start_offset, memory.log_end_offset) == (3, 6)
    assert (local.log_start_offset, local.log_end_offset) == (3, 6)
    assert list(memory.iter_batches(0)) == list(local.iter_batches(0))
    for log in (local, memory):
        log.truncate_to(0)
    assert (memory.log_start_offset, memory.log_end_offset) == (0, 0)
    assert (local.log_start_offset, local.log_end_offset) == (0, 0)


def test_a_corrupt_batch_is_never_served_and_marks_the_log() -> None:
    log = MemoryLog("t-0")
    fill(log)
    log.corrupt(4)
    assert log.read(0, 1 << 20, max_offset=4)  # the batches before it are fine
    with pytest.raises(CorruptLogError):
        log.read(4, 1 << 20)
    assert log.damaged is not None and "CRC" in log.damaged
    with pytest.raises(CorruptLogError):
        list(log.verified_batches())


def test_a_cut_back_drops_what_is_not_durable_and_runs_the_hooks() -> None:
    log = MemoryLog("t-0")
    seen: list[int] = []
    log.on_cut_back.append(lambda _log, end: seen.append(end))
    log.append_records([(b"a", b"1")], timestamp_ms=1)
    log.flush()
    gen = log.cut_backs
    log.append_records([(b"b", b"2")], timestamp_ms=2)
    assert log.discard_unflushed() == 1
    assert seen == [1] and log.log_end_offset == 1 and not log.survived(1, gen)
    assert log.append_records([(b"c", b"3")], timestamp_ms=3) == (1, 1)


def test_retention_drops_whole_batches_but_never_the_newest() -> None:
    log = MemoryLog("t-0", LogConfig(retention_ms=50), clock=lambda: 1000)
    fill(log)
    assert log.apply_retention(now_ms=175) > 0
    assert log.log_start_offset == 6  # the batches stamped 100..120 expired; 130 did not
    assert log.apply_retention(now_ms=10_000) > 0
    assert log.log_start_offset == 10 and log.log_end_offset == 11
