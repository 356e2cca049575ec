"""The disk's own durable-write latency: the floor under every durable reply's latency.

How this works: what one group-commit round costs the disk is a write at the end of a file
and an ``fdatasync`` of it (the journal's round, ``storage/local/journal.py``). This times
``--count`` such rounds back to back in a file under ``--dir`` (default: a temporary
directory on the same file system as ``/tmp``; pass kgc's data directory's file system to
measure that one), each writing ``--bytes`` (a round's batch of commits), and prints the
latency distribution. A durable reply waits for the round in flight (if any) and then its
own, so its latency is about one to two of these; a p99 target on replies cannot be below
this p99, whatever the server does.

Run: ``python bench/bench_fsync.py [--count 2000] [--bytes 2048] [--dir PATH]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from results import record  # a sibling: bench/ is where this script runs from


def percentile(sorted_ms: list[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=2000, help="rounds (write + fdatasync)")
    ap.add_argument("--bytes", type=int, default=2048, help="bytes written per round")
    ap.add_argument("--dir", type=Path, default=None, help="a directory on the disk to measure")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kgc-fsync-", dir=args.dir) as d:
        path = Path(d) / "probe.jnl"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            data = os.urandom(args.bytes)
            pos = 0
            times: list[float] = []
            for _ in range(args.count):
                t = time.perf_counter()
                written = os.pwrite(fd, data, pos)
                if written != len(data):
                    raise SystemExit(f"short write: {written} of {len(data)} bytes")
                os.fdatasync(fd)
                times.append((time.perf_counter() - t) * 1000.0)
                pos += written
        finally:
            os.close(fd)
    times.sort()
    p50, p90, p99 = (percentile(times, q) for q in (0.5, 0.9, 0.99))
    print(f"{args.count} rounds of pwrite({args.bytes} B) + fdatasync in {d}")
    print(f"{'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'mean ms':>8}")
    print(f"{p50:>8.3f} {p90:>8.3f} {p99:>8.3f} {times[-1]:>8.3f} {statistics.fmean(times):>8.3f}")
    record("fsync", "pwrite + fdatasync p50", p50, "ms", "lower")
    record("fsync", "pwrite + fdatasync p99", p99, "ms", "lower")


if __name__ == "__main__":
    main()
