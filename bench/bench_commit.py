"""Offset-commit durability and offsets-log load benchmarks.

(a) commit: M concurrent committers (one connection and one simple group each:
    generation -1, empty member id) send OffsetCommit v8 with P partitions per request,
    one request in flight each, for S seconds; partition-commits/s and p50/p99, with the
    default fsync policy (group commit) and with fsync off.
(b) load: a log of N offset commits over G groups is written with kgc's storage code,
    then ``kgc serve`` starts on it; we report the server's own load time and the time
    until OffsetFetch stops answering COORDINATOR_LOAD_IN_PROGRESS, without and with
    compaction run beforehand.

Usage: ``python bench/bench_commit.py [--members 100] [--seconds 5] [--records 1000000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import tempfile
import time
from pathlib import Path

import checkout  # noqa: F401  (puts this checkout and tests/ on the import path)
from aioclient import AsyncConn
from results import record
from support.kgc_process import KgcProcess

from coordinator.config import Settings, offsets_log_config
from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import create_topics, offset_commit, offset_fetch
from protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from storage.local.cleaner import LogCleaner
from storage.local.manager import LogManager
from storage.records import (
    encode_offset_commit_key,
    encode_offset_commit_value,
    partition_for,
)

HOST = "127.0.0.1"


async def commit_load(
    port: int, members: int, partitions: int, seconds: float
) -> tuple[float, float, float, int]:
    conns = [await AsyncConn.open(HOST, port, f"c{i}") for i in range(members)]
    lat: list[float] = []
    count = 0
    errors = 0
    stop_at = time.perf_counter() + seconds

    async def committer(i: int, conn: AsyncConn) -> None:
        nonlocal count, errors
        offset = 0
        while time.perf_counter() < stop_at:
            offset += 1
            req = OffsetCommitRequest(
                group_id=f"commit-{i}",
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=[
                    OffsetCommitRequestTopic(
                        name="bench",
                        partitions=[
                            OffsetCommitRequestPartition(
                                partition_index=p, committed_offset=offset, committed_metadata="m"
                            )
                            for p in range(partitions)
                        ],
                    )
                ],
            )
            t0 = time.perf_counter()
            resp = await conn.call(offset_commit.API_KEY, 8, req)
            lat.append((time.perf_counter() - t0) * 1000)
            if any(p.error_code for t in resp.topics for p in t.partitions):
                errors += 1
            count += partitions

    start = time.perf_counter()
    await asyncio.gather(*(committer(i, c) for i, c in enumerate(conns)))
    elapsed = time.perf_counter() - start
    for c in conns:
        await c.close()
    lat.sort()
    return count / elapsed, statistics.median(lat), lat[int(0.99 * (len(lat) - 1))], errors


def write_offsets_log(data_dir: Path, records: int, groups: int, compact: bool) -> None:
    settings = Settings(data_dir=data_dir)
    logs = LogManager(data_dir)
    cfg = offsets_log_config(settings)
    per_partition: dict[int, list[tuple[bytes, bytes]]] = {}
    now = int(time.time() * 1000)
    for i in range(records):
        g = f"group-{i % groups}"
        p = partition_for(g, settings.offsets_topic_num_partitions)
        key = encode_offset_commit_key(g, "bench", (i // groups) % 10)
        value = encode_offset_commit_value(
            offset=i, leader_epoch=-1, metadata="", commit_timestamp=now
        )
        batch = per_partition.setdefault(p, [])
        batch.append((key, value))
        if len(batch) >= 100:
            logs.get_or_create("__consumer_offsets", p, cfg).append_records(batch, timestamp_ms=now)
            batch.clear()
    for p, batch in per_partition.items():
        if batch:
            logs.get_or_create("__consumer_offsets", p, cfg).append_records(batch, timestamp_ms=now)
    if compact:
        for plog in logs.logs():
            plog.roll()
            LogCleaner(plog).clean_all()
    logs.close_all()


def measure_load(data_dir: Path, probe_group: str) -> tuple[float, float | None]:
    kgc = KgcProcess(data_dir, "--kgc-log-level", "INFO")
    t0 = time.perf_counter()
    kgc.start(timeout=120)
    try:
        with Connection.to(kgc.bootstrap) as c:
            while True:
                _, resp = c.request(
                    offset_fetch.API_KEY,
                    offset_fetch.Request(
                        groups=[
                            offset_fetch.OffsetFetchRequestGroup(group_id=probe_group, topics=None)
                        ]
                    ),
                    version=8,
                )
                if resp.groups[0].error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                    break
                time.sleep(0.01)
        until_ready = time.perf_counter() - t0
    finally:
        kgc.stop()
    m = re.search(r"from \d+ partitions in ([0-9.]+) s", kgc.log())
    return until_ready, float(m.group(1)) if m else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--members", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--skip-load", action="store_true")
    args = ap.parse_args()
    print(
        f"\n(a) OffsetCommit v8, {args.members} concurrent committers, one request in flight each"
    )
    print(
        f"{'fsync policy':<14} {'partitions/req':>14} {'partition-commits/s':>20} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}"
    )
    for policy in ("batch", "none"):
        with tempfile.TemporaryDirectory() as tmp:
            kgc = KgcProcess(
                Path(tmp) / "data", "--log-flush-policy", policy, "--kgc-log-level", "WARNING"
            )
            kgc.start()
            try:
                with Connection.to(kgc.bootstrap) as c:
                    c.request(
                        create_topics.API_KEY,
                        create_topics.Request(
                            topics=[
                                create_topics.CreatableTopic(
                                    name="bench", num_partitions=50, replication_factor=1
                                )
                            ]
                        ),
                    )
                for parts in (1, 50):
                    rate, p50, p99, errors = asyncio.run(
                        commit_load(kgc.port, args.members, parts, args.seconds)
                    )
                    print(
                        f"{policy:<14} {parts:>14} {rate:>20.0f} {p50:>8.2f} {p99:>8.2f} {errors:>7}"
                    )
                    measure = f"OffsetCommit {parts} partitions/req, flush {policy}"
                    record("commit", measure, rate, "partition-commits/s", "higher")
                    record("commit", f"{measure}, p99", p99, "ms", "lower")
            finally:
                kgc.stop()
    if args.skip_load:
        return
    print(f"\n(b) loading {args.records:,} offset commits over {args.groups:,} groups")
    print(f"{'log':<22} {'server load s':>14} {'until ready s':>14}")
    for compact in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "data"
            write_offsets_log(data, args.records, args.groups, compact)
            until_ready, load_s = measure_load(data, "group-1")
            name = "compacted" if compact else "uncompacted"
            print(
                f"{name:<22} {load_s if load_s is not None else float('nan'):>14.2f} {until_ready:>14.2f}"
            )
            record("commit", f"load {name} log, until ready", until_ready, "s", "lower")
            if load_s is not None:
                record("commit", f"load {name} log, server load", load_s, "s", "lower")


if __name__ == "__main__":
    main()
