from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any as FakeClock

import pytest

from storage.local.log import RECOVERY_POINT_FILE, LogConfig, PartitionLog

CFG = LogConfig(segment_bytes=1500, index_interval_bytes=128, retention_ms=-1)


def build(d: Path, clock: FakeClock, n: int = 40) -> list[tuple[int, int, int]]:
    """n batches of 1-3 records; returns (base, last, size) per batch."""
    log = PartitionLog(d, CFG, clock)
    out = []
    for i in range(n):
        recs = [(b"key-%d" % i, b"val-%d-%d" % (i, j) * 3) for j in range(1 + i % 3)]
        base, last = log.append_records(recs)
        out.append((base, last, 0))
    log.flush()
    log.close_without_marker()  # "crash": no clean-shutdown marker
    return out


def replay(log: PartitionLog) -> list[int]:
    return [h.base_offset for h, _ in log.iter_batches()]


def last_log_file(d: Path) -> Path:
    return sorted(d.glob("*.log"))[-1]


def batch_bounds(path: Path) -> list[tuple[int, int]]:
    from storage.record_batch import iter_batches

    return [(s, e) for _h, s, e in iter_batches(path.read_bytes())]


@pytest.fixture
def pristine(tmp_path: Path, clock: FakeClock) -> tuple[Path, list[tuple[int, int, int]]]:
    d = tmp_path / "pristine" / "t-0"
    batches = build(d, clock)
    return d, batches


def test_every_truncation_of_the_last_batch(
    tmp_path: Path, clock: FakeClock, pristine: tuple[Path, list[tuple[int, int, int]]]
) -> None:
    src, batches = pristine
    seg = last_log_file(src)
    (s, e) = batch_bounds(seg)[-1]
    bases = [b for b, _, _ in batches]
    for cut in range(s + 1, e):  # every partial length of the last batch
        d = tmp_path / f"cut{cut}" / "t-0"
        shutil.copytree(src, d)
        os.truncate(last_log_file(d), cut)
        log = PartitionLog(d, CFG, clock)
        assert replay(log) == bases[:-1], cut
        assert log.log_end_offset == batches[-1][0]
        assert last_log_file(d).stat().st_size == s
        assert log.append_records([(b"new", b"v")]) == (batches[-1][0], batches[-1][0])
        log.close()
        shutil.rmtree(d.parent)


def test_flipped_bytes_in_last_batch(
    tmp_path: Path, clock: FakeClock, pristine: tuple[Path, list[tuple[int, int, int]]]
) -> None:
    src, batches = pristine
    (s, e) = batch_bounds(last_log_file(src))[-1]
    bases = [b for b, _, _ in batches]
    # Bytes 0-7 (base offset) and 12-15 (leader epoch) are outside the CRC by
    # design; everything else must be caught.
    positions = [p for p in range(s, e) if not (s <= p < s + 8 or s + 12 <= p < s + 16)]
    for p in positions:
        d = tmp_path / f"flip{p}" / "t-0"
        shutil.copytree(src, d)
        f = last_log_file(d)
        data = bytearray(f.read_bytes())
        data[p] ^= 0x40
        f.write_bytes(bytes(data))
        log = PartitionLog(d, CFG, clock)
        assert replay(log) == bases[:-1], p
        assert log.append_records([(b"new", b"v")])[0] == batches[-1][0]
        log.close()
        shutil.rmtree(d.parent)


def test_damage_in_the_middle_drops_everything_after_and_warns(
    tmp_path: Path,
    clock: FakeClock,
    pristine: tuple[Path, list[tuple[int, int, int]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    src, batches = pristine
    d = tmp_path / "mid" / "t-0"
    shutil.copytree(src, d)
    (d / RECOVERY_POINT_FILE).unlink()  # forces a full CRC scan
    files = sorted(d.glob("*.log"))
    assert len(files) >= 3
    victim = files[1]
    bounds = batch_bounds(victim)
    s, e = bounds[2]
    data = bytearray(victim.read_bytes())
    data[e - 1] ^= 0xFF
    victim.write_bytes(bytes(data))
    from storage.record_batch import parse_header

    bad_base = parse_header(bytes(data[s:e])).base_offset
    with caplog.at_level(logging.WARNING):
        log = PartitionLog(d, CFG, clock)
    kept = [b for b, _, _ in batches if b < bad_base]
    assert replay(log) == kept
    assert log.log_end_offset == bad_base
    assert len(log.segments) == 2
    msg = caplog.text
    assert victim.name in msg and f"position {s}" in msg and "CRC" in msg
    assert files[2].name in msg  # later segments named as removed
    assert log.append_records([(b"x", b"y")]) == (bad_base, bad_base)


def test_recovery_point_limits_the_scan(
    tmp_path: Path, clock: FakeClock, pristine: tuple[Path, list[tuple[int, int, int]]]
) -> None:
    src, batches = pristine
    d = tmp_path / "rp" / "t-0"
    shutil.copytree(src, d)
    # Damage before the recovery point is not re-read (Kafka trusts flushed data).
    files = sorted(d.glob("*.log"))
    data = bytearray(files[0].read_bytes())
    data[-1] ^= 0xFF
    files[0].write_bytes(bytes(data))
    log = PartitionLog(d, CFG, clock)
    assert replay(log) == [b for b, _, _ in batches]


def test_garbage_tail_after_valid_batches(tmp_path: Path, clock: FakeClock) -> None:
    d = tmp_path / "t-0"
    log = PartitionLog(d, CFG, clock)
    log.append_records([(b"a", b"1")])
    log.append_records([(b"b", b"2")])
    log.close_without_marker()
    f = last_log_file(d)
    size = f.stat().st_size
    with open(f, "ab") as fh:
        fh.write(b"\x00" * 100)  # preallocated zeros after a power cut
    log = PartitionLog(d, CFG, clock)
    assert replay(log) == [0, 1] and f.stat().st_size == size
