"""Replay benchmark for the offsets log: 1,000,000 offset commits over 10,000 groups.

Writes a ``__consumer_offsets``-style partition (batches of 100 records, keys
and values in Kafka's format) and times what a coordinator does at start-up:
open the log, iterate the batches, decode the records and decode every key
and value.  Target: replay < 3 s.

    python bench/bench_storage_load.py [--records N] [--dir PATH]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from storage.local.log import LogConfig, PartitionLog
from storage.offsets_format import (
    OffsetCommitKey,
    decode_key,
    decode_offset_commit_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from storage.record_batch import decode_records, iter_record_tuples

CONFIG = LogConfig(segment_bytes=100 << 20, cleanup_policy="compact", retention_ms=-1)


def write(d: Path, n: int, groups: int, per_batch: int) -> PartitionLog:
    log = PartitionLog(d, CONFIG)
    ts = 1_700_000_000_000
    batch: list[tuple[bytes | None, bytes | None]] = []
    for i in range(n):
        g = i % groups
        key = encode_offset_commit_key(f"group-{g:05d}", f"topic-{i % 7}", (i // groups) % 12)
        batch.append((key, encode_offset_commit_value(i, "", ts + i, leader_epoch=3)))
        if len(batch) == per_batch:
            log.append_records(batch, ts + i)
            batch = []
    if batch:
        log.append_records(batch, ts + n)
    log.close()
    return log


def replay(d: Path) -> dict[str, float]:
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    log = PartitionLog(d, CONFIG)
    times["open (clean shutdown)"] = time.perf_counter() - t0

    t = time.perf_counter()
    batches = [data for _h, data in log.iter_batches()]
    times["iterate batches"] = time.perf_counter() - t

    t = time.perf_counter()
    n = 0
    for data in batches:
        for _rec in decode_records(data):
            n += 1
    times["decode_records (dataclasses)"] = time.perf_counter() - t

    t = time.perf_counter()
    state: dict[OffsetCommitKey, int] = {}
    count = 0
    for _h, data in log.iter_batches():
        for _off, _ts, key, value in iter_record_tuples(data):
            assert key is not None
            k = decode_key(key)
            if isinstance(k, OffsetCommitKey):
                if value is None:
                    state.pop(k, None)
                else:
                    state[k] = decode_offset_commit_value(value).offset
            count += 1
    times["full replay: iterate + decode records + keys + values"] = time.perf_counter() - t
    times["_records"] = count
    times["_keys"] = len(state)
    log.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--per-batch", type=int, default=100)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="kgc-bench-"))
    d = base / "__consumer_offsets-0"
    try:
        t = time.perf_counter()
        log = write(d, args.records, args.groups, args.per_batch)
        write_s = time.perf_counter() - t
        size = sum(p.stat().st_size for p in d.glob("*.log"))
        print(
            f"wrote {args.records:,} records in {log.log_end_offset // args.per_batch:,} batches, "
            f"{size / 1e6:.1f} MB, {write_s:.2f} s"
        )
        times = replay(d)
        print(f"{'phase':<56} {'seconds':>8}")
        print("-" * 65)
        for name, secs in times.items():
            if not name.startswith("_"):
                print(f"{name:<56} {secs:>8.3f}")
        print("-" * 65)
        print(
            f"records replayed: {int(times['_records']):,}; distinct offset keys: {int(times['_keys']):,}"
        )
        total = (
            times["open (clean shutdown)"]
            + times["full replay: iterate + decode records + keys + values"]
        )
        print(f"open + full replay: {total:.2f} s (target < 3 s)")
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
