"""Cluster mode on PostgreSQL against the local engine: commits, failover, load.

How this works: the script starts its own PostgreSQL (``tests/support/pgserver.py``, fsync on) and
kgc processes (``tests/support/clusterkit.py``), then measures, in one run:

(a) durable OffsetCommits/s and p50/p99 with one partition per request: M concurrent
    simple committers (generation -1, one group and one connection each, one request in
    flight), each connected to its group's coordinator (FindCoordinator first, as clients
    do), against a local-engine kgc, a 1-node and a 3-node cluster. A 1 s warm-up decodes
    every answer (the "errors" column); the measured run sends loadgen's pre-encoded
    requests, so the client's CPU stays off the two cores the servers share. For the PostgreSQL
    runs it also reads what the database paid: WAL bytes (``pg_current_wal_lsn``),
    ``kgc_record_log`` rows written, and the CPU time of every PostgreSQL process
    (``/proc``), each divided by the commits acknowledged, plus the kgc nodes' CPU.
(b) failover time: a committer in a tight loop (20 ms between tries, FindCoordinator
    again after any error) on a group; its coordinator is SIGKILLed (and, separately,
    SIGTERMed: the graceful hand-off); the time from the signal to the first commit
    acknowledged by another node. Target: < 2 x broker.session.timeout.ms.
(c) time to load 1,000,000 offset records: written through a node as OffsetCommits (50
    partitions per request over 20,000 groups), then the node restarts on an empty data
    dir (so it must read PostgreSQL, not its local cache): the server's own "loaded …
    records … in X s" and the time until every offsets partition answers. Local engine:
    the same records, restarted on its own data dir. Target: < 5 s.

Usage, from the repo root: ``python bench/bench_cluster.py [--members 200] [--seconds 5]
[--records 1000000] [--session-timeout-ms 3000] [--skip-load]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (puts this checkout and tests/ on the import path)
from aioclient import AsyncConn
from loadgen import run_load
from support.clusterkit import Cluster
from support.kgc_process import KgcProcess
from support.pgserver import PgServer

from coordinator.tools.client import Connection
from protocol.framing import RequestHeader, encode_request
from protocol.messages import create_topics, find_coordinator, offset_commit
from protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)

HOST = "127.0.0.1"
TOPIC = "bench"
TOPIC_PARTITIONS = 50


# -- helpers -------------------------------------------------------------------------


def create_topic(bootstrap: str) -> None:
    with Connection.to(bootstrap) as c:
        c.request(
            create_topics.API_KEY,
            create_topics.Request(
                topics=[
                    create_topics.CreatableTopic(
                        name=TOPIC, num_partitions=TOPIC_PARTITIONS, replication_factor=1
                    )
                ]
            ),
        )


def coordinator_port(bootstraps: list[str], group: str, timeout: float = 30.0) -> int:
    """The port FindCoordinator names for ``group`` (retried while partitions move)."""
    deadline = time.monotonic() + timeout
    req = find_coordinator.Request(key_type=0, coordinator_keys=[group])
    while True:
        for b in bootstraps:
            try:
                with Connection.to(b, timeout=2) as c:
                    _, resp = c.request(find_coordinator.API_KEY, req, version=4)
            except OSError:
                continue
            (coord,) = resp.coordinators
            if coord.error_code == 0:
                return int(coord.port)
        if time.monotonic() > deadline:
            raise RuntimeError(f"no coordinator for {group}")
        time.sleep(0.02)


def commit_request(group: str, partitions: list[int], offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            OffsetCommitRequestTopic(
                name=TOPIC,
                partitions=[
                    OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=offset, committed_metadata="m"
                    )
                    for p in partitions
                ],
            )
        ],
    )


@dataclass
class CommitResult:
    commits: int
    seconds: float
    latencies_ms: list[float]
    errors: int

    @property
    def rate(self) -> float:
        return self.commits / self.seconds

    def pct(self, q: float) -> float:
        lat = sorted(self.latencies_ms)
        return lat[min(len(lat) - 1, int(q * len(lat)))] if lat else float("nan")


async def commit_load(
    ports: list[int], groups: list[str], partitions: int, seconds: float, rounds: int = 0
) -> CommitResult:
    """Each committer i commits ``partitions`` partitions of group i at ports[i].

    Runs for ``seconds``, or ``rounds`` requests per committer when given.
    """
    conns = [await AsyncConn.open(HOST, port, f"c{i}") for i, port in enumerate(ports)]
    lat: list[float] = []
    count = 0
    errors = 0
    stop_at = time.perf_counter() + seconds
    parts = list(range(partitions))

    async def committer(i: int, conn: AsyncConn) -> None:
        nonlocal count, errors
        offset = 0
        while (offset < rounds) if rounds else (time.perf_counter() < stop_at):
            offset += 1
            t0 = time.perf_counter()
            resp = await conn.call(
                offset_commit.API_KEY, 8, commit_request(groups[i], parts, offset)
            )
            lat.append((time.perf_counter() - t0) * 1000)
            bad = sum(1 for t in resp.topics for p in t.partitions if p.error_code)
            errors += bad
            count += partitions - bad

    start = time.perf_counter()
    await asyncio.gather(*(committer(i, c) for i, c in enumerate(conns)))
    elapsed = time.perf_counter() - start
    for c in conns:
        await c.close()
    return CommitResult(count, elapsed, lat, errors)


def proc_cpu_s(pid: int, children: bool = False) -> float:
    """utime+stime (and waited-for children's, if asked) of ``pid`` in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def postgres_cpu_s(pg: PgServer) -> float:
    """CPU of the postmaster, its live children and its reaped children."""
    root = pg.postmaster_pid()
    if root is None:
        return 0.0
    total = proc_cpu_s(root, children=True)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == root:
            total += proc_cpu_s(int(entry.name))
    return total


def pg_scalar(pg: PgServer, sql: str) -> int:
    return int(pg.psql(pg.database, sql).strip() or 0)


@dataclass
class DbCost:
    wal_bytes: int
    rows: int
    pg_cpu_s: float
    kgc_cpu_s: float


@contextmanager
def db_cost(pg: PgServer | None, nodes: list[KgcProcess]) -> Iterator[list[DbCost]]:
    out: list[DbCost] = []
    pids = [n.proc.pid for n in nodes if n.proc is not None]
    kgc0 = sum(proc_cpu_s(p) for p in pids)
    if pg is None:
        yield out
        out.append(DbCost(0, 0, 0.0, sum(proc_cpu_s(p) for p in pids) - kgc0))
        return
    lsn0 = pg.psql(pg.database, "SELECT pg_current_wal_lsn()").strip()
    rows0 = pg_scalar(pg, "SELECT count(*) FROM kgc_record_log")
    cpu0 = postgres_cpu_s(pg)
    yield out
    cpu1 = postgres_cpu_s(pg)
    wal = pg_scalar(pg, f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{lsn0}')::bigint")
    rows = pg_scalar(pg, "SELECT count(*) FROM kgc_record_log") - rows0
    out.append(DbCost(wal, rows, cpu1 - cpu0, sum(proc_cpu_s(p) for p in pids) - kgc0))


# -- (a) commits ---------------------------------------------------------------------


async def pipelined_commits(
    ports: list[int], groups: list[str], seconds: float
) -> tuple[int, float, list[float]]:
    """loadgen's pre-encoded requests (so the client's CPU stays off the server's cores):
    one connection per group to its coordinator, one request in flight each; the same
    offset re-committed is still one durable record per request. Returns (requests,
    seconds, latencies)."""
    by_port: dict[int, list[bytes]] = {}
    for i, (port, group) in enumerate(zip(ports, groups, strict=True)):
        body = commit_request(group, [0], 1)
        frame = encode_request(RequestHeader(offset_commit.API_KEY, 8, i, f"c{i}"), body)
        by_port.setdefault(port, []).append(frame)
    results = await asyncio.gather(
        *(
            run_load(
                HOST,
                port,
                lambda n, frames=frames: frames[n // 1_000_000],  # type: ignore[misc]
                connections=len(frames),
                depth=1,
                seconds=seconds,
                warmup=0,
            )
            for port, frames in by_port.items()
        )
    )
    lat = [x for r in results for x in r.latencies_ms]
    return sum(r.requests for r in results), max(r.seconds for r in results), lat


def measure_commits(
    name: str, bootstraps: list[str], nodes: list[KgcProcess], pg: PgServer | None, args: Any
) -> None:
    groups = [f"commit-{i}" for i in range(args.members)]
    ports = [coordinator_port(bootstraps, g) for g in groups]
    spread = len(set(ports))
    # Warm-up with decoded answers: connections, loaded groups, and no error anywhere.
    warm = asyncio.run(commit_load(ports, groups, 1, 1.0))
    with db_cost(pg, nodes) as cost:
        n, secs, lat = asyncio.run(pipelined_commits(ports, groups, args.seconds))
    r = CommitResult(n, secs, lat, warm.errors)
    (c,) = cost
    per = max(r.commits, 1)
    db = (
        f"{c.wal_bytes / per:>9.0f} {c.rows / max(r.seconds, 1e-9):>9.0f} "
        f"{r.commits / max(c.rows, 1):>9.1f} {c.pg_cpu_s / per * 1e6:>9.1f}"
        if pg is not None
        else f"{'-':>9} {'-':>9} {'-':>9} {'-':>9}"
    )
    print(
        f"{name:<22} {spread:>6} {r.rate:>12.0f} {r.pct(0.5):>7.2f} {r.pct(0.99):>7.2f} "
        f"{r.errors:>6} {db} {c.kgc_cpu_s / per * 1e6:>9.1f}",
        flush=True,
    )


def commits_table(pg: PgServer, base: Path, args: Any) -> None:
    print(
        f"\n(a) OffsetCommit v8, 1 partition per request, {args.members} committers "
        f"(one group each, one request in flight), {args.seconds:.0f} s"
    )
    print(
        f"{'engine':<22} {'coords':>6} {'commits/s':>12} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'errors':>6} {'WAL B/c':>9} {'rows/s':>9} {'c/row':>9} {'PG µs/c':>9} {'kgc µs/c':>9}"
    )
    kgc = KgcProcess(base / "local" / "data", "--kgc-log-level", "WARNING")
    kgc.data_dir.mkdir(parents=True)
    try:
        kgc.start()
        kgc.wait_loaded()
        create_topic(kgc.bootstrap)
        measure_commits("local (fsync batch)", [kgc.bootstrap], [kgc], None, args)
    finally:
        if kgc.alive():
            kgc.stop()
    for n in (1, 3):
        pg.reset()
        cluster = Cluster(
            base / f"pg{n}", pg.url, nodes=n, session_timeout_ms=args.session_timeout_ms
        )
        try:
            cluster.start_all()
            nodes = list(cluster.nodes.values())
            create_topic(nodes[0].bootstrap)
            cluster.wait_topic_led(TOPIC)
            measure_commits(
                f"postgres, {n} node{'s' if n > 1 else ''}",
                [p.bootstrap for p in nodes],
                nodes,
                pg,
                args,
            )
        finally:
            cluster.close()


# -- (b) failover --------------------------------------------------------------------


def failover_once(cluster: Cluster, group: str, sig: signal.Signals) -> tuple[int, int, float]:
    """(old node, new node, seconds from the signal to the first commit acknowledged elsewhere)."""
    bootstraps = [p.bootstrap for p in cluster.nodes.values()]
    port = coordinator_port(bootstraps, group)
    victim = cluster.node_of_port(port)
    with Connection.to(f"{HOST}:{port}") as c:
        for i in range(20):
            resp = c.call(offset_commit.API_KEY, 8, commit_request(group, [0], i))
            assert resp.topics[0].partitions[0].error_code == 0, resp
    proc = cluster.nodes[victim]
    assert proc.proc is not None
    proc.proc.send_signal(sig)
    t0 = time.monotonic()
    offset = 100
    while True:
        live = [p.bootstrap for n, p in cluster.nodes.items() if n != victim]
        try:
            port = coordinator_port(live, group, timeout=0.5)
            if cluster.node_of_port(port) != victim:
                with Connection.to(f"{HOST}:{port}", timeout=5) as c:
                    offset += 1
                    resp = c.call(offset_commit.API_KEY, 8, commit_request(group, [0], offset))
                    if resp.topics[0].partitions[0].error_code == 0:
                        elapsed = time.monotonic() - t0
                        break
        except (OSError, RuntimeError):
            pass
        if time.monotonic() - t0 > 60:
            raise RuntimeError("no failover within 60 s")
        time.sleep(0.02)
    proc.proc.wait(30)
    return victim, cluster.node_of_port(port), elapsed


def failover_table(pg: PgServer, base: Path, args: Any) -> None:
    st = args.session_timeout_ms
    print(
        f"\n(b) failover, 3 nodes, broker.session.timeout.ms={st}, "
        f"broker.heartbeat.interval.ms={args.heartbeat_interval_ms} (target < {2 * st} ms)"
    )
    print(f"{'signal':<10} {'from':>5} {'to':>5} {'first commit elsewhere ms':>26}")
    for i, sig in enumerate((signal.SIGKILL, signal.SIGKILL, signal.SIGKILL, signal.SIGTERM)):
        pg.reset()
        cluster = Cluster(
            base / f"failover{i}",
            pg.url,
            nodes=3,
            session_timeout_ms=st,
            heartbeat_interval_ms=args.heartbeat_interval_ms,
        )
        try:
            cluster.start_all()
            create_topic(cluster.nodes[1].bootstrap)
            cluster.wait_topic_led(TOPIC)  # every node knows it (catalog at heartbeats)
            old, new, s = failover_once(cluster, f"failover-{i}", sig)
            print(f"{sig.name:<10} {old:>5} {new:>5} {s * 1000:>26.0f}", flush=True)
        finally:
            cluster.close()


# -- (c) load ------------------------------------------------------------------------


def write_records(bootstrap: str, records: int, per_request: int, groups: int) -> float:
    """Write ``records`` offset records through ``bootstrap``'s groups; the time it took."""
    group_ids = [f"load-{i}" for i in range(groups)]
    rounds = max(1, records // (per_request * groups))
    port = int(bootstrap.rpartition(":")[2])
    t0 = time.perf_counter()
    for chunk in range(0, groups, 200):
        batch = group_ids[chunk : chunk + 200]
        r = asyncio.run(commit_load([port] * len(batch), batch, per_request, 0, rounds=rounds))
        assert r.errors == 0, r.errors
    return time.perf_counter() - t0


def loaded_line(log: str) -> tuple[int, float] | None:
    """(records, seconds) the server says it loaded: the local engine's one line, or, for a
    cluster node, the records of its per-partition "loaded …" lines and the span from the
    first load's start to the last one's end (partitions load concurrently)."""
    parts = re.findall(
        r"^(\S+) \w+ \S+ loaded __consumer_offsets-\d+ at leader epoch \d+: \d+ batches, "
        r"(\d+) records, in (\d+) ms",
        log,
        re.MULTILINE,
    )
    if parts:
        ends = [datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() for ts, _, _ in parts]
        starts = [e - int(ms) / 1000 for e, (_, _, ms) in zip(ends, parts, strict=True)]
        return sum(int(n) for _, n, _ in parts), max(ends) - min(starts)
    found = re.findall(r"loaded (\d+) offsets-log records from \d+ partitions in ([0-9.]+) s", log)
    if not found:
        return None
    n, s = found[-1]
    return int(n), float(s)


def load_table(pg: PgServer, base: Path, args: Any) -> None:
    groups = 20_000
    per_request = max(1, args.records // groups)
    print(
        f"\n(c) loading {args.records:,} offset records ({groups:,} groups x {per_request} "
        "partitions, uncompacted), one node restarted"
    )
    print(
        f"{'engine':<26} {'write s':>8} {'records':>10} {'server load s':>14} {'until ready s':>14}"
    )
    for engine in ("local", "postgres"):
        if engine == "local":
            node = KgcProcess(base / "load-local" / "data", "--kgc-log-level", "INFO")
            node.data_dir.mkdir(parents=True)
            cluster = None
        else:
            pg.reset()
            cluster = Cluster(
                base / "load-pg", pg.url, nodes=1, session_timeout_ms=args.session_timeout_ms
            )
            node = cluster.nodes[1]
        try:
            if cluster is not None:
                cluster.start_all()
            else:
                node.start()
                node.wait_loaded()
            create_topic(node.bootstrap)
            if cluster is not None:
                cluster.wait_topic_led(TOPIC)
            wrote = write_records(node.bootstrap, groups * per_request, per_request, groups)
            node.stop()
            if cluster is not None:
                # An empty data dir: the node must read the offsets from PostgreSQL. DEBUG
                # makes it log every partition's load, not only those over a second.
                shutil.rmtree(node.data_dir)
                node.data_dir.mkdir()
                node.extra += ["--kgc-log-level", "DEBUG"]
            node.log_path.write_text("")
            t0 = time.perf_counter()
            node.start(timeout=120)
            if cluster is not None:
                cluster.wait_ready(timeout=120)
            else:
                node.wait_loaded(timeout=120)
            ready = time.perf_counter() - t0
            line = loaded_line(node.log_path.read_text(errors="replace"))
            n, s = line if line is not None else (-1, float("nan"))
            print(f"{engine:<26} {wrote:>8.1f} {n:>10} {s:>14.2f} {ready:>14.2f}", flush=True)
        finally:
            if cluster is not None:
                cluster.close()
            elif node.alive():
                node.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--members", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--session-timeout-ms", type=int, default=3000)
    ap.add_argument("--heartbeat-interval-ms", type=int, default=500)
    ap.add_argument("--skip-commits", action="store_true")
    ap.add_argument("--skip-failover", action="store_true")
    ap.add_argument("--skip-load", action="store_true")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="kgc-bench-cluster-"))
    # Its own temp dir: as root the server runs as ``postgres``, who cannot enter ``base``.
    pg_dir = Path(tempfile.mkdtemp(prefix="kgc-bench-pg-"))
    pg = PgServer(pg_dir).start()
    try:
        print(
            f"PostgreSQL {pg.psql('postgres', 'SHOW server_version').strip()} "
            f"(fsync on, synchronous_commit on), {os.cpu_count()} CPUs shared by everything; "
            f"load average before the run {os.getloadavg()[0]:.1f}"
        )
        if not args.skip_commits:
            commits_table(pg, base, args)
        if not args.skip_failover:
            failover_table(pg, base, args)
        if not args.skip_load:
            load_table(pg, base, args)
    finally:
        pg.destroy()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(pg_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
