"""The group history's cost on the commit path, and its storage: history on against off.

How this works: rounds alternate the two servers (off then on, on then off, ...) so a noisy
neighbour on the shared machine hits both. Each round starts a fresh ``kgc serve`` on an
empty data directory -- ``--offsets-history-retention-ms 0`` (off) or the default 7 days
(on) -- creates the topic, and runs ``bench_commit.commit_load``: M committers (one
connection and one simple group each) send OffsetCommit v8 of P partitions, every commit
moving every offset (each one a history change: the worst case), one request in flight
each, for S seconds. The server's CPU time (utime + stime of its process, /proc) is read
around the load; CPU per commit request = CPU / requests. With history on, the bytes of the
``__kgc_group_history`` segments over the changes written give the bytes per change, and
the week's storage for 1,000 groups x 10 partitions changing an offset every 5 s.

``--cluster``: the same against a one-node cluster on its own PostgreSQL (fsync on), a
fresh database a round, where history goes to the table ``kgc_group_history`` in the
journal's round statement: the node's CPU and PostgreSQL's (all its processes) per commit,
and the table's size (``pg_total_relation_size``: heap, TOAST and index) over the changes.
The node merges the rows older than ``--merge-lag-ms`` (``offsets.history.merge.lag.ms``,
the server's default 60 s; 0: no merge) in the background: after the load the benchmark
waits until the lag has passed and the merge has left at most one round row per offsets
partition, then measures the table twice: as it is (the merged-away rows are dead tuples,
space autovacuum hands to the next rows) and after ``VACUUM FULL`` (the live rows: what a
week of history costs, the space of the last lag's round rows aside). The CPU is measured
around the load only, as before: the merge runs after it.

``--count``: the server runs under valgrind's cachegrind, which counts the instructions it
executes (user space, all threads; the kernel's share is not counted): a count, the same
on a loaded machine as on a quiet one, where CPU time swings with the neighbours. Two
servers a mode, loaded for S and 3S seconds: the difference of their counts over the
difference of their commit requests cancels start-up and shutdown. The server is slowed
about 50 times, so a round gathers every committer's commit (the batching of a saturated
server); the seconds are of the slowed server.

Usage: ``python bench/bench_history.py [--rounds 5] [--members 50] [--partitions 10]
[--seconds 5] [--cluster [--merge-lag-ms 60000] | --count]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import cachegrind
import checkout  # puts this checkout and tests/ on the import path
from bench_commit import commit_load
from results import record
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.messages import create_topics

_TICK = os.sysconf("SC_CLK_TCK")
WEEK_CHANGES = 1000 * 10 * (7 * 86_400 // 5)  # 1,000 groups x 10 partitions, one per 5 s


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def history_bytes(data_dir: Path) -> int:
    return sum(f.stat().st_size for f in data_dir.glob("__kgc_group_history-*/*.log"))


class CountedKgc(KgcProcess):
    """``kgc serve`` under valgrind's cachegrind: ``instructions`` after it stopped."""

    def __init__(self, data_dir: Path, out: Path, *extra: str) -> None:
        super().__init__(data_dir, *extra)
        self.out = out

    def spawn(self, flags: list[str], log: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            cachegrind.command(
                str(self.out), [sys.executable, "-m", "coordinator", "serve", *flags]
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=cachegrind.ENV,
        )

    def instructions(self) -> int:
        return cachegrind.instructions(self.out)


def fsync_rounds(kgc: KgcProcess) -> int:
    """The server's fsync rounds so far (one journal ``fdatasync`` each), from /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{kgc.metrics_port}/metrics", timeout=600) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("kgc_fsync_duration_seconds_count"):
                return int(float(line.split()[1]))
    raise RuntimeError("no kgc_fsync_duration_seconds_count in /metrics")


def counted(history: bool, args: argparse.Namespace) -> tuple[float, float, int]:
    """(server instructions per commit request, partition-commits/s, history bytes): two
    servers under cachegrind, loaded for ``seconds`` and three times as long; the
    difference of their counts over the difference of their requests cancels start-up
    and shutdown. Prints the commits an fsync round gathered (the same difference over
    the difference of rounds): the history's per-round cost is shared by them."""
    runs = []
    for seconds in (args.seconds, 3 * args.seconds):
        with tempfile.TemporaryDirectory() as tmp:
            flags = ["--kgc-log-level", "WARNING"]
            if not history:
                flags += ["--offsets-history-retention-ms", "0"]
            kgc = CountedKgc(Path(tmp) / "data", Path(tmp) / "cachegrind.out", *flags)
            kgc.start(timeout=1800)
            try:
                kgc.wait_loaded(timeout=1800)
                create_bench_topic(kgc.bootstrap, args.partitions)
                before = fsync_rounds(kgc)
                rate, _p50, _p99, errors = asyncio.run(
                    commit_load(kgc.port, args.members, args.partitions, seconds)
                )
                rounds = fsync_rounds(kgc) - before
                assert errors == 0, f"{errors} commits failed"
                size = history_bytes(Path(tmp) / "data")
            finally:
                kgc.stop(timeout=300)
            runs.append((kgc.instructions(), rate * seconds / args.partitions, size, rate, rounds))
    (i1, r1, _, _, f1), (i2, r2, size, rate, f2) = runs
    print(
        f"      {'on' if history else 'off'}: {r1:.0f} and {r2:.0f} commits in {f1} and {f2} "
        f"fsync rounds, {r1 / max(f1, 1):.2f} and {r2 / max(f2, 1):.2f} commits a round",
        flush=True,
    )
    return (i2 - i1) / (r2 - r1), rate, size


def create_bench_topic(bootstrap: str, partitions: int) -> None:
    with Connection.to(bootstrap) as c:
        c.request(
            create_topics.API_KEY,
            create_topics.Request(
                topics=[
                    create_topics.CreatableTopic(
                        name="bench", num_partitions=partitions, replication_factor=1
                    )
                ]
            ),
        )


def one(history: bool, args: argparse.Namespace) -> tuple[float, float, int]:
    """(server CPU us per commit request, partition-commits/s, history bytes)."""
    with tempfile.TemporaryDirectory() as tmp:
        flags = ["--kgc-log-level", "WARNING"]
        if not history:
            flags += ["--offsets-history-retention-ms", "0"]
        kgc = KgcProcess(Path(tmp) / "data", *flags)
        kgc.start()
        try:
            kgc.wait_loaded()
            create_bench_topic(kgc.bootstrap, args.partitions)
            assert kgc.proc is not None
            before = cpu_s(kgc.proc.pid)
            rate, _p50, _p99, errors = asyncio.run(
                commit_load(kgc.port, args.members, args.partitions, args.seconds)
            )
            used = cpu_s(kgc.proc.pid) - before
            assert errors == 0, f"{errors} commits failed"
            requests = rate * args.seconds / args.partitions
            return used / requests * 1e6, rate, history_bytes(Path(tmp) / "data")
        finally:
            kgc.stop()


def merged(pg: Any, lag_ms: int, end_s: float, timeout_s: float = 600.0) -> None:
    """Wait until the lag has passed since ``end_s`` (the load's end, time.time()) and the
    merge has left at most one round row per offsets partition (a run of one is not
    merged) for a whole pass."""
    sql = (
        "SELECT coalesce(max(n), 0) || ' ' || coalesce(sum(n), 0) FROM (SELECT count(*) AS n"
        " FROM kgc_group_history WHERE first_written_ms IS NULL GROUP BY offsets_partition) c"
    )
    pass_s = min(max(lag_ms // 2, 100), 60_000) / 1000
    time.sleep(max(0.0, end_s + lag_ms / 1000 - time.time()))
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        now = pg.psql(pg.database, sql).strip()
        if now == last and int(now.split()[0]) <= 1:
            return
        last = now
        time.sleep(pass_s + 0.5)
    raise TimeoutError(f"the history merge did not settle: {last}")


def table_size(pg: Any) -> int:
    return int(pg.psql(pg.database, "SELECT pg_total_relation_size('kgc_group_history')").strip())


def one_cluster(
    history: bool, args: argparse.Namespace, pg: Any
) -> tuple[float, float, int, int, int]:
    """(node + PostgreSQL CPU us per commit request, partition-commits/s, table bytes after
    the load, after the merge, after the merge and VACUUM FULL)."""
    from bench_cluster import postgres_cpu_s, proc_cpu_s
    from support.clusterkit import Cluster

    pg.reset()
    flags: tuple[str, ...] = (
        "--kgc-log-level",
        "WARNING",
        "--offsets-history-merge-lag-ms",
        str(args.merge_lag_ms),
    )
    if not history:
        flags += ("--offsets-history-retention-ms", "0")
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp), pg.url, nodes=1, extra=flags)
        try:
            cluster.start_all()
            (node,) = cluster.nodes.values()
            with Connection.to(node.bootstrap) as c:
                c.request(
                    create_topics.API_KEY,
                    create_topics.Request(
                        topics=[
                            create_topics.CreatableTopic(
                                name="bench", num_partitions=args.partitions, replication_factor=1
                            )
                        ]
                    ),
                )
            cluster.wait_topic_led("bench")
            assert node.proc is not None
            before = proc_cpu_s(node.proc.pid) + postgres_cpu_s(pg)
            rate, _p50, _p99, errors = asyncio.run(
                commit_load(node.port, args.members, args.partitions, args.seconds)
            )
            used = proc_cpu_s(node.proc.pid) + postgres_cpu_s(pg) - before
            end_s = time.time()
            assert errors == 0, f"{errors} commits failed"
            requests = rate * args.seconds / args.partitions
            if not history:
                return used / requests * 1e6, rate, 0, 0, 0
            size = table_size(pg)
            after = vacuumed = size
            if args.merge_lag_ms > 0:
                merged(pg, args.merge_lag_ms, end_s)
                after = table_size(pg)
                pg.psql(pg.database, "VACUUM FULL kgc_group_history")
                vacuumed = table_size(pg)
            return used / requests * 1e6, rate, size, after, vacuumed
        finally:
            cluster.close()


def main() -> None:
    # The servers run this checkout's kgc (not whichever an editable install points at).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(checkout.ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--members", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--cluster", action="store_true", help="a one-node cluster on PostgreSQL")
    ap.add_argument(
        "--merge-lag-ms",
        type=int,
        default=60_000,
        help="--cluster: offsets.history.merge.lag.ms of the node (0: no merge)",
    )
    ap.add_argument(
        "--only", choices=("on", "off"), help="run one side only (a count repeated on its own)"
    )
    ap.add_argument(
        "--count", action="store_true", help="count the server's instructions (callgrind)"
    )
    args = ap.parse_args()
    pg: Any = None
    if args.cluster:
        from support.pgserver import PgServer

        pg = PgServer(Path(tempfile.mkdtemp(prefix="kgc-bench-pg-"))).start()
    try:
        run(args, pg)
    finally:
        if pg is not None:
            pg.destroy()


def run(args: argparse.Namespace, pg: Any) -> None:
    cpu: dict[bool, list[float]] = {False: [], True: []}
    per_change: list[float] = []
    # --cluster with a merge: bytes per change after the merge, and after it and VACUUM FULL.
    merged_change: list[float] = []
    live_change: list[float] = []
    unit = "instr/commit" if args.count else "cpu us/commit"
    print(f"{'round':>5} {'history':>8} {unit:>14} {'partition-commits/s':>20}")
    for r in range(args.rounds):
        for history in (False, True) if r % 2 == 0 else (True, False):
            if args.only and history != (args.only == "on"):
                continue
            if pg:
                us, rate, size, after, vacuumed = one_cluster(history, args, pg)
                if history:
                    merged_change.append(after / (rate * args.seconds))
                    live_change.append(vacuumed / (rate * args.seconds))
            else:
                us, rate, size = counted(history, args) if args.count else one(history, args)
            cpu[history].append(us)
            if history:
                per_change.append(size / (rate * args.seconds * (3 if args.count else 1)))
            print(f"{r:>5} {'on' if history else 'off':>8} {us:>14.1f} {rate:>20.0f}")
    if args.only:
        return
    off, on = statistics.median(cpu[False]), statistics.median(cpu[True])
    b = statistics.median(per_change)
    where = "node + PostgreSQL" if pg else "server"
    what, unit = ("instructions", "") if args.count else ("CPU", " us")
    print(
        f"\nmedian {where} {what} per commit request ({args.partitions} partitions): "
        f"off {off:.1f}{unit}, on {on:.1f}{unit} ({(on / off - 1) * 100:+.1f}%)"
    )
    print(
        f"history: {b:.1f} bytes per change ({'the table, unmerged,' if pg else 'segments'} on disk / "
        f"changes); a week of 1,000 "
        f"groups x 10 partitions changing every 5 s: {WEEK_CHANGES:,} changes, "
        f"{WEEK_CHANGES * b / 1e9:.1f} GB"
    )
    if args.count:
        record("history", "server instructions per commit, history off", off, "instr", "lower")
        record("history", "server instructions per commit, history on", on, "instr", "lower")
        return
    if pg:
        record("history", "cluster CPU per commit, history off", off, "us", "lower")
        record("history", "cluster CPU per commit, history on", on, "us", "lower")
        if args.merge_lag_ms <= 0:
            record("history", "table bytes per offset change", b, "B", "lower")
            return
        m, live = statistics.median(merged_change), statistics.median(live_change)
        print(
            f"merged (offsets.history.merge.lag.ms={args.merge_lag_ms}): {m:.1f} bytes per "
            f"change as the table is (the merged-away rows dead, their space reused by the "
            f"next rows); {live:.1f} after VACUUM FULL (the live rows): a week, "
            f"{WEEK_CHANGES * live / 1e9:.1f} GB"
        )
        record("history", "table bytes per offset change, before the merge", b, "B", "lower")
        record("history", "table bytes per offset change", live, "B", "lower")
        return
    record("history", "server CPU per commit, history off", off, "us", "lower")
    record("history", "server CPU per commit, history on", on, "us", "lower")
    record("history", "bytes per offset change", b, "B", "lower")


if __name__ == "__main__":
    main()
