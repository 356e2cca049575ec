"""Benchmark of ``kgc audit``: records/s for an audit of N offset-commit records, local[2].

How this works: a data directory is written with kgc's own storage code (``PartitionLog``,
``storage.records``): ``--groups`` groups each committing ``--partitions`` partitions of one
topic, 100 commit records per batch (as a coordinator's group commit writes them), spread
over 8 offsets partitions with 8 MiB segments, plus the topic's own log and catalog. Then the
full audit (list, decode on executors, stitch, three report tables and summary.json) runs
in one process: *cold* includes starting the SparkSession, then ``--warm`` runs in the same
session (the JVM keeps warming up over the first few). Prints seconds and records/s per run
and the median of the warm runs.

    python bench/bench_audit.py            # 1,000,000 records
    python bench/bench_audit.py --records 200000 --keep /tmp/auditbench
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from storage.local.log import LogConfig
from storage.local.manager import LogManager
from storage.records import (
    encode_offset_commit_key,
    encode_offset_commit_value,
    partition_for,
)

OFFSETS_PARTITIONS = 8
TOPIC = "events"


def write_log(root: Path, records: int, groups: int, partitions: int) -> None:
    now = 1_700_000_000_000
    logs = LogManager(root, clock=lambda: now)
    cfg = LogConfig(segment_bytes=8 << 20, cleanup_policy="compact", retention_ms=-1)
    olog = [logs.get_or_create("__consumer_offsets", p, cfg) for p in range(OFFSETS_PARTITIONS)]
    keys = [(f"group-{g}", p) for g in range(groups) for p in range(partitions)]
    rounds = records // len(keys)
    keyb = {k: encode_offset_commit_key(k[0], TOPIC, k[1]) for k in keys}
    by_part: dict[int, list[tuple[str, int]]] = {}
    for k in keys:
        by_part.setdefault(partition_for(k[0], OFFSETS_PARTITIONS), []).append(k)
    written = 0
    for r in range(rounds):
        ts = now - (rounds - r) * 1000
        for opart, ks in by_part.items():
            for i in range(0, len(ks), 100):
                chunk = ks[i : i + 100]
                recs = [
                    (keyb[k], encode_offset_commit_value((r + 1) * 10, "", ts, leader_epoch=0))
                    for k in chunk
                ]
                olog[opart].append_records(recs, timestamp_ms=ts)
                written += len(recs)
    for p in range(partitions):
        tlog = logs.get_or_create(TOPIC, p, LogConfig())
        for _ in range(rounds * 10 // 100):
            tlog.append_records([(None, b"x")] * 100, timestamp_ms=now - 10_000_000)
    (root / "topics.json").write_text(
        json.dumps([{"name": TOPIC, "id": "00" * 16, "partitions": partitions, "configs": {}}])
    )
    logs.close_all()
    print(f"wrote {written:,} commit records ({len(keys)} keys) to {root}", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--keep", type=Path, default=None, help="write/keep the log here")
    ap.add_argument("--warm", type=int, default=8, help="warm runs after the cold one")
    args = ap.parse_args()

    from coordinator.audit.cli import build_summary, spark_session, write_reports
    from coordinator.audit.job import AuditOptions, run_audit

    tmp = Path(tempfile.mkdtemp(prefix="kgc-audit-bench-"))
    root = args.keep or tmp / "data"
    if not (root / "topics.json").exists():
        shutil.rmtree(root, ignore_errors=True)
        write_log(root, args.records, args.groups, args.partitions)
    rows = []
    t0 = time.perf_counter()
    spark = spark_session(args.master)
    t_session = time.perf_counter() - t0
    try:
        for i in range(1 + args.warm):
            label = "cold" if i == 0 else f"warm {i}"
            t = time.perf_counter()
            result = run_audit(spark, AuditOptions(str(root), now_ms=1_700_000_000_000))
            t_run = time.perf_counter()
            summary, _, _ = build_summary(result, "error")
            write_reports(result, str(tmp / f"out-{i}"), "parquet", summary)
            result.stats["seconds"]["write"] = round(time.perf_counter() - t_run, 3)
            result.release()
            el = time.perf_counter() - t + (t_session if i == 0 else 0.0)
            n = summary["records"]
            rows.append(
                (label, n, el, n / el, result.stats["seconds"], summary["findings"]["total"])
            )
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'run':<7} {'records':>10} {'seconds':>8} {'records/s':>11}  findings  phases (s)")
    for label, n, el, rate, phases, nf in rows:
        print(f"{label:<7} {n:>10,} {el:>8.2f} {rate:>11,.0f}  {nf:>8}  {phases}")
    if len(rows) > 1:
        warm = sorted(rows[1:], key=lambda r: r[2])
        mid = warm[len(warm) // 2]
        print(f"warm median: {mid[2]:.2f} s, {mid[3]:,.0f} records/s (of {len(warm)} warm runs)")
    print(f"(cold includes SparkSession start: {t_session:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
