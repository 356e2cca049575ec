"""Replay benchmark for the offsets log: 1,000,000 offset commits over 10,000 groups.

Writes a ``__consumer_offsets``-style partition (batches of 100 records, keys
and values in Kafka's format) and times what a coordinator does at start-up:
open the log, iterate the batches, decode the records and decode every key
and value, and the runtime's own load (``replay_partition`` into a ``GroupShard``:
CRC checks, records, keys, values, groups and offsets built).  Target (issue 18): the
1M-record load under 2 s.

``--serve`` measures a real start instead: the same commits written into a data
directory as kgc keeps it (each group's records in its offsets partition, of 50), then
``kgc serve`` spawned ``--runs`` times on it; each run is timed from the spawn to the
port answering OffsetFetch with every offsets partition loaded and the right offsets
(one probe group per partition, checked against what was written), beside kgc's own
"loaded ... in N s" log line.  Medians are printed.  With ``--workers N`` kgc runs
``--kgc-workers N``: each worker loads its share of the offsets partitions at the same
time, and the slowest worker's line is the load time.

    python bench/bench_storage_load.py [--records N] [--dir PATH]
    python bench/bench_storage_load.py --serve [--runs 5] [--workers N] [--dir PATH]
"""

from __future__ import annotations

import argparse
import functools
import inspect
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import checkout  # noqa: F401  (puts this checkout and tests/ on the import path)
from results import record  # a sibling: bench/ is where this script runs from

from coordinator.group import GroupShard
from coordinator.runtime.replay import replay_partition
from storage.local.log import LogConfig, PartitionLog
from storage.record_batch import decode_records, iter_record_tuples
from storage.records import (
    OffsetCommitKey,
    decode_key,
    decode_offset_commit_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)

CONFIG = LogConfig(segment_bytes=100 << 20, cleanup_policy="compact", retention_ms=-1)


def commit(i: int, groups: int) -> tuple[str, str, int]:
    """The i-th commit's (group, topic, partition); its offset is i."""
    return f"group-{i % groups:05d}", f"topic-{i % 7}", (i // groups) % 12


def write(d: Path, n: int, groups: int, per_batch: int) -> PartitionLog:
    log = PartitionLog(d, CONFIG)
    ts = 1_700_000_000_000
    batch: list[tuple[bytes | None, bytes | None]] = []
    for i in range(n):
        key = encode_offset_commit_key(*commit(i, groups))
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

    # What the runtime does at start (GroupRuntime._replay): the same, plus the CRC of
    # every batch and the groups and offsets built in the shard.
    t = time.perf_counter()
    log = PartitionLog(d, CONFIG)
    shard = GroupShard()
    shard.begin_load(0)
    args: list[object] = [log, functools.partial(shard.replay, 0)]
    if "offsets" in inspect.signature(replay_partition).parameters:
        args.append(shard.offset_manager)  # a tree before the direct path has no such argument
    loaded = sum(replay_partition(*args))  # type: ignore[arg-type]
    times["open + replay into the group shard (start-up path)"] = time.perf_counter() - t
    assert loaded == count and sum(map(len, shard.offsets.values())) == len(state)
    log.close()
    return times


# ---------------------------------------------------------------- --serve


def write_data_dir(data_dir: Path, n: int, groups: int, per_batch: int) -> dict[str, int]:
    """The commits in kgc's data directory layout; returns the expected offsets of one
    probe group per offsets partition (a key stands for a group's (topic, partition))."""
    from coordinator.config import Settings, offsets_log_config
    from storage.local.manager import LogManager
    from storage.records import OFFSETS_TOPIC, partition_for

    settings = Settings(data_dir=data_dir)
    nparts = settings.offsets_topic_num_partitions
    cfg = offsets_log_config(settings)
    logs = LogManager(data_dir)
    ts = 1_700_000_000_000
    pending: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    part_of = {f"group-{g:05d}": partition_for(f"group-{g:05d}", nparts) for g in range(groups)}
    probes: dict[int, str] = {}
    for g, p in part_of.items():
        probes.setdefault(p, g)
    expected: dict[str, int] = {}
    probe_set = set(probes.values())
    for i in range(n):
        group, topic, partition = commit(i, groups)
        p = part_of[group]
        batch = pending.setdefault(p, [])
        batch.append(
            (
                encode_offset_commit_key(group, topic, partition),
                encode_offset_commit_value(i, "", ts + i, leader_epoch=3),
            )
        )
        if group in probe_set:
            expected[f"{group}/{topic}/{partition}"] = i
        if len(batch) == per_batch:
            logs.get_or_create(OFFSETS_TOPIC, p, cfg).append_records(batch, ts + i)
            batch.clear()
    for p, batch in pending.items():
        if batch:
            logs.get_or_create(OFFSETS_TOPIC, p, cfg).append_records(batch, ts + n)
    logs.close_all()
    logs.release_lock()
    return expected


def serve_once(
    data_dir: Path, expected: dict[str, int], workers: int = 1
) -> tuple[float, float | None]:
    """Spawn ``kgc serve``; seconds until OffsetFetch answers every probe group with the
    offsets written, and kgc's own load time from its log (the slowest worker's, with
    ``workers`` > 1: each loads its share of the offsets partitions, in parallel)."""
    from support.kgc_process import KgcProcess

    from coordinator.config import Settings
    from coordinator.tools.client import Connection
    from protocol.errors import ErrorCode
    from protocol.messages import offset_fetch
    from storage.records import OFFSETS_TOPIC, partition_for

    groups = sorted({k.split("/")[0] for k in expected})
    by_worker: dict[int, list[str]] = {0: groups}
    if workers == 1:  # (a tree from before kgc.workers has neither import below)
        kgc = KgcProcess(data_dir, "--kgc-log-level", "INFO")
    else:
        from support.workerskit import Workers

        from coordinator.placement import worker_of

        nparts = Settings(data_dir=data_dir).offsets_topic_num_partitions
        by_worker = {}
        for g in groups:
            w = worker_of(OFFSETS_TOPIC, partition_for(g, nparts), workers)
            by_worker.setdefault(w, []).append(g)
        kgc = Workers(data_dir, "--kgc-log-level", "INFO", workers=workers)
    t0 = time.perf_counter()
    kgc.start(timeout=300)
    got: dict[str, int] = {}
    try:
        for w, groups in sorted(by_worker.items()):
            request = offset_fetch.Request(
                groups=[
                    offset_fetch.OffsetFetchRequestGroup(group_id=g, topics=None) for g in groups
                ]
            )
            with Connection.to(f"127.0.0.1:{kgc.port + w}") as c:
                while True:
                    _, resp = c.request(offset_fetch.API_KEY, request, version=8)
                    if all(
                        g.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS for g in resp.groups
                    ):
                        break
                    time.sleep(0.005)
            got.update(
                (f"{g.group_id}/{t.name}/{p.partition_index}", p.committed_offset)
                for g in resp.groups
                for t in g.topics
                for p in t.partitions
            )
        ready = time.perf_counter() - t0
        if got != expected:
            raise SystemExit(
                f"OffsetFetch after the load differs from what was written: {len(got)} vs {len(expected)} offsets"
            )
    finally:
        kgc.stop()
    loads = re.findall(
        r"loaded \d+ offsets-log records from \d+ partitions in ([0-9.]+) s", kgc.log()
    )
    return ready, max(map(float, loads)) if loads else None


def serve_main(base: Path, args: argparse.Namespace) -> None:
    data = base / "data"
    t = time.perf_counter()
    expected = write_data_dir(data, args.records, args.groups, args.per_batch)
    print(
        f"wrote {args.records:,} commits over {args.groups:,} groups into {data} in {time.perf_counter() - t:.1f} s"
    )
    print(f"{'run':>4} {'spawn to OffsetFetch served s':>30} {'kgc load (its log) s':>22}")
    readies: list[float] = []
    loads: list[float] = []
    for run in range(args.runs):
        ready, load_s = serve_once(data, expected, args.workers)
        readies.append(ready)
        if load_s is not None:
            loads.append(load_s)
        print(
            f"{run + 1:>4} {ready:>30.2f} {load_s if load_s is not None else float('nan'):>22.2f}"
        )
    print(
        f"median: spawn to served {statistics.median(readies):.2f} s, "
        f"kgc load {statistics.median(loads) if loads else float('nan'):.2f} s (target < 2 s)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--per-batch", type=int, default=100)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--serve", action="store_true", help="time real kgc serve starts")
    ap.add_argument("--runs", type=int, default=5, help="--serve: starts to time")
    ap.add_argument(
        "--workers", type=int, default=1, help="--serve: kgc.workers (the load split among them)"
    )
    args = ap.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="kgc-bench-"))
    if args.serve:
        try:
            serve_main(base, args)
        finally:
            if args.dir is None:
                shutil.rmtree(base, ignore_errors=True)
        return
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
        startup = times["open + replay into the group shard (start-up path)"]
        print(f"open + replay into the group shard: {startup:.2f} s (issue 18: < 2 s)")
        record("storage_load", "open + full replay", total, "s", "lower")
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
