from __future__ import annotations

from pathlib import Path
from typing import Any as FakeClock

import pytest

from storage.local.log import (
    CLEAN_SHUTDOWN_FILE,
    InvalidBatchError,
    LogConfig,
    OffsetOutOfRangeError,
    PartitionLog,
    RecordTooLargeError,
)
from storage.record_batch import decode_records, encode_batch, iter_batches, parse_header

SMALL = LogConfig(segment_bytes=2_000, index_interval_bytes=200, retention_ms=-1)


def offsets_in(data: bytes) -> list[int]:
    out = []
    for h, s, e in iter_batches(data):
        out.extend(h.base_offset + r.offset_delta for r in decode_records(data[s:e]))
    return out


def fill(log: PartitionLog, n: int, per_batch: int = 3, size: int = 40) -> None:
    for i in range(n):
        log.append_records([(b"k%d" % i, bytes([i % 256]) * size)] * per_batch)


def test_append_assigns_offsets_and_reads_back(tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog(tmp_path / "t-0", SMALL, clock)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    # The producer's base offset is ignored and patched, CRC untouched.
    assert log.append(encode_batch(999, [(b"a", b"1"), (b"b", b"2")], timestamp_ms=5)) == (0, 1)
    assert log.append_records([(b"c", b"3")]) == (2, 2)
    assert log.log_end_offset == 3
    data = log.read(0, 1 << 20)
    assert offsets_in(data) == [0, 1, 2]
    assert offsets_in(log.read(2, 1 << 20)) == [2]
    assert offsets_in(log.read(1, 1 << 20)) == [0, 1, 2]  # from the batch holding 1
    assert log.read(3, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100)
    log.close()


def test_read_returns_whole_batch_even_when_larger_than_max(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(), clock)
    log.append_records([(b"k", b"x" * 5000)])
    log.append_records([(b"k", b"y" * 10)])
    first = log.read(0, 10)
    assert parse_header(first).size == len(first) and offsets_in(first) == [0]
    both = log.read(0, 1 << 20)
    assert offsets_in(both) == [0, 1]
    # max_bytes falling inside the second batch: only whole batches come back.
    assert offsets_in(log.read(0, len(first) + 20)) == [0]


def test_append_validation(tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(max_message_bytes=500), clock)
    good = encode_batch(0, [(b"k", b"v")], timestamp_ms=1)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    with pytest.raises(InvalidBatchError, match="CRC"):
        log.append(bytes(bad))
    with pytest.raises(InvalidBatchError):
        log.append(good + b"\x00")
    with pytest.raises(RecordTooLargeError):
        log.append(encode_batch(0, [(b"k", b"v" * 600)], timestamp_ms=1))
    assert log.log_end_offset == 0


def test_segments_roll_by_size_and_index_lookups(tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog(tmp_path / "t-0", SMALL, clock)
    fill(log, 200)
    assert len(log.segments) > 5
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert names[0] == "00000000000000000000.log"
    assert [int(n[:20]) for n in names] == [s.base_offset for s in log.segments]
    assert all(s.size <= SMALL.segment_bytes for s in log.segments)
    assert any((tmp_path / "t-0" / n.replace(".log", ".index")).stat().st_size > 0 for n in names)
    for off in range(0, 600, 7):
        got = offsets_in(log.read(off, 1))
        assert off in got and got[0] <= off
    replay = [h.base_offset for h, _ in log.iter_batches()]
    assert replay == list(range(0, 600, 3))
    assert next(h.base_offset for h, _ in log.iter_batches(301)) == 300


def test_roll_by_time(tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(segment_ms=1000), clock)
    log.append_records([(b"a", b"1")])
    clock.advance(999)
    log.append_records([(b"a", b"2")])
    assert len(log.segments) == 1
    clock.advance(1)
    log.append_records([(b"a", b"3")])
    assert [s.base_offset for s in log.segments] == [0, 2]
    clock.advance(1000)
    assert log.maybe_roll_by_time()
    assert log.active_segment.base_offset == 3 and log.active_segment.size == 0


def test_offset_for_timestamp(tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog(tmp_path / "t-0", SMALL, clock)
    for i in range(100):
        log.append_records([(b"k", b"v" * 30), (b"k", b"w" * 30)], timestamp_ms=1000 + 10 * i)
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(1000) == (0, 1000)
    assert log.offset_for_timestamp(1001) == (2, 1010)
    assert log.offset_for_timestamp(1500) == (100, 1500)
    assert log.offset_for_timestamp(1990) == (198, 1990)
    assert log.offset_for_timestamp(1991) is None
    log.close()
    log = PartitionLog(tmp_path / "t-0", SMALL, clock)
    assert log.offset_for_timestamp(1505) == (102, 1510)


def test_retention_by_time_and_size_and_log_start_persisted(
    tmp_path: Path, clock: FakeClock
) -> None:
    cfg = LogConfig(segment_bytes=1000, retention_ms=10_000, index_interval_bytes=100)
    log = PartitionLog(tmp_path / "t-0", cfg, clock)
    for i in range(60):
        log.append_records([(b"k", b"x" * 50)], timestamp_ms=clock.now + i)
    nseg = len(log.segments)
    assert nseg > 3
    assert log.apply_retention(clock.now + 5_000) == 0
    deleted = log.apply_retention(clock.now + 20_000)
    # Everything expired, but the active segment always stays.
    assert deleted == nseg - 1 and len(log.segments) == 1
    assert log.log_start_offset == log.active_segment.base_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    start = log.log_start_offset
    log.close_without_marker()
    log = PartitionLog(tmp_path / "t-0", cfg, clock)
    assert log.log_start_offset == start and log.log_end_offset == 60

    cfg2 = LogConfig(
        segment_bytes=1000, retention_ms=-1, retention_bytes=2500, index_interval_bytes=100
    )
    log2 = PartitionLog(tmp_path / "u-0", cfg2, clock)
    for _ in range(60):
        log2.append_records([(b"k", b"x" * 50)])
    log2.apply_retention()
    assert log2.size_bytes <= 2500 + 1000
    assert log2.size_bytes - log2.segments[0].size < 2500
    compact = PartitionLog(
        tmp_path / "c-0", LogConfig(cleanup_policy="compact", segment_bytes=500), clock
    )
    for _ in range(20):
        compact.append_records([(b"k", b"x" * 50)], timestamp_ms=0)
    assert compact.apply_retention() == 0


def test_retention_by_time_deletes_an_expired_active_segment_once_durable(
    tmp_path: Path, clock: FakeClock
) -> None:
    """As Kafka (UnifiedLog.deletableSegments): when every record of the active segment has
    expired too, it is rolled and deleted, and the log start moves to the log end -- a quiet
    topic's old records expire. Not before they are durable (Kafka: the high watermark)."""
    cfg = LogConfig(segment_bytes=1_000_000, retention_ms=10_000, index_interval_bytes=100)
    log = PartitionLog(tmp_path / "t-0", cfg, clock)
    for i in range(5):
        log.append_records([(b"k", b"x" * 50)], timestamp_ms=clock.now + i)
    assert len(log.segments) == 1
    assert log.apply_retention(clock.now + 20_000) == 0  # not durable yet
    log.flush()
    assert log.apply_retention(clock.now + 5_000) == 0  # not expired
    assert log.apply_retention(clock.now + 20_000) == 1
    assert (log.log_start_offset, log.log_end_offset) == (5, 5)
    assert len(log.segments) == 1 and log.active_segment.base_offset == 5
    log.append_records([(b"k", b"y")], timestamp_ms=clock.now + 20_000)
    assert offsets_in(log.read(5, 1000)) == [5]
    log.close_without_marker()
    log = PartitionLog(tmp_path / "t-0", cfg, clock)
    assert (log.log_start_offset, log.log_end_offset) == (5, 6)
    log.close()


def test_delete_segments_before(tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog(tmp_path / "t-0", SMALL, clock)
    fill(log, 100)
    mid = log.segments[3].base_offset + 1
    log.delete_segments_before(mid)
    assert log.log_start_offset == mid
    assert log.segments[0].next_offset > mid
    assert offsets_in(log.read(mid, 1))[-1] >= mid
    log.close()
    log = PartitionLog(tmp_path / "t-0", SMALL, clock)
    assert log.log_start_offset == mid
    assert (tmp_path / "t-0" / CLEAN_SHUTDOWN_FILE).exists() is False


def test_reopen_after_clean_close_and_after_crash(tmp_path: Path, clock: FakeClock) -> None:
    d = tmp_path / "t-0"
    log = PartitionLog(d, SMALL, clock)
    fill(log, 50)
    end = log.log_end_offset
    log.close()
    assert (d / CLEAN_SHUTDOWN_FILE).exists()
    log = PartitionLog(d, SMALL, clock)
    assert not (d / CLEAN_SHUTDOWN_FILE).exists()
    assert log.log_end_offset == end
    fill(log, 10)
    log.close_without_marker()  # crash: no marker, recovery point stale
    log = PartitionLog(d, SMALL, clock)
    assert log.log_end_offset == end + 30
    assert [h.base_offset for h, _ in log.iter_batches()] == list(range(0, end + 30, 3))
    assert log.append_records([(b"z", b"z")]) == (end + 30, end + 30)


def test_missing_or_stale_index_is_rebuilt(tmp_path: Path, clock: FakeClock) -> None:
    d = tmp_path / "t-0"
    log = PartitionLog(d, SMALL, clock)
    fill(log, 50)
    log.close()
    (d / "00000000000000000000.index").unlink()
    idx = sorted(d.glob("*.index"))[1]
    idx.write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x01")  # points into the middle of a batch
    log = PartitionLog(d, SMALL, clock)
    for off in range(0, 150, 5):
        assert off in offsets_in(log.read(off, 1))
    assert (d / "00000000000000000000.index").exists()


def test_truncate_to(tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog(tmp_path / "t-0", SMALL, clock)
    fill(log, 100)
    log.truncate_to(151)  # inside batch 150..152: the whole batch goes
    assert log.log_end_offset == 150
    assert [h.base_offset for h, _ in log.iter_batches()][-1] == 147
    assert log.append_records([(b"n", b"n")]) == (150, 150)
    log.truncate_to(60)
    assert log.log_end_offset == 60
    log.close()
    log = PartitionLog(tmp_path / "t-0", SMALL, clock)
    assert log.log_end_offset == 60
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (0, 0, 1)


def test_delete_removes_directory(tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog(tmp_path / "t-0", SMALL, clock)
    fill(log, 5)
    log.delete()
    assert not (tmp_path / "t-0").exists()


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        LogConfig(cleanup_policy="compcat")
    with pytest.raises(ValueError):
        LogConfig(flush_policy="sometimes")
    assert LogConfig(cleanup_policy="compact,delete").compact
    assert LogConfig(cleanup_policy="compact,delete").delete
