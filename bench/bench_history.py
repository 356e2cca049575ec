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

Usage: ``python bench/bench_history.py [--rounds 5] [--members 50] [--partitions 10]
[--seconds 5] [--cluster]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

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
            with Connection.to(kgc.bootstrap) as c:
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


def one_cluster(history: bool, args: argparse.Namespace, pg: Any) -> tuple[float, float, int]:
    """(node + PostgreSQL CPU us per commit request, partition-commits/s, table bytes)."""
    from bench_cluster import postgres_cpu_s, proc_cpu_s
    from support.clusterkit import Cluster

    pg.reset()
    flags: tuple[str, ...] = ("--kgc-log-level", "WARNING")
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
            assert errors == 0, f"{errors} commits failed"
            size = int(
                pg.psql(pg.database, "SELECT pg_total_relation_size('kgc_group_history')").strip()
            )
            requests = rate * args.seconds / args.partitions
            return used / requests * 1e6, rate, size if history else 0
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
    print(f"{'round':>5} {'history':>8} {'cpu us/commit':>14} {'partition-commits/s':>20}")
    for r in range(args.rounds):
        for history in (False, True) if r % 2 == 0 else (True, False):
            us, rate, size = one_cluster(history, args, pg) if pg else one(history, args)
            cpu[history].append(us)
            if history:
                per_change.append(size / (rate * args.seconds))
            print(f"{r:>5} {'on' if history else 'off':>8} {us:>14.1f} {rate:>20.0f}")
    off, on = statistics.median(cpu[False]), statistics.median(cpu[True])
    b = statistics.median(per_change)
    where = "node + PostgreSQL" if pg else "server"
    print(
        f"\nmedian {where} CPU per commit request ({args.partitions} partitions): "
        f"off {off:.1f} us, on {on:.1f} us ({(on / off - 1) * 100:+.1f}%)"
    )
    print(
        f"history: {b:.1f} bytes per change ({'the table' if pg else 'segments'} on disk / "
        f"changes); a week of 1,000 "
        f"groups x 10 partitions changing every 5 s: {WEEK_CHANGES:,} changes, "
        f"{WEEK_CHANGES * b / 1e9:.1f} GB"
    )
    if pg:
        record("history", "cluster CPU per commit, history off", off, "us", "lower")
        record("history", "cluster CPU per commit, history on", on, "us", "lower")
        record("history", "table bytes per offset change", b, "B", "lower")
        return
    record("history", "server CPU per commit, history off", off, "us", "lower")
    record("history", "server CPU per commit, history on", on, "us", "lower")
    record("history", "bytes per offset change", b, "B", "lower")


if __name__ == "__main__":
    main()
