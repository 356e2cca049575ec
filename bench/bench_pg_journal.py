"""Durable appends through the PostgreSQL journal vs the local journal.

N concurrent appenders each append one offset-commit-sized batch (one ~100-byte record)
to one of the 50 offsets partitions and await ``Flusher.wait_durable``, in a loop, for a
fixed time. Prints durable appends/s, p50/p99 latency and the rounds (statements or
fdatasyncs) per engine and concurrency. Without ``--url`` a throwaway PostgreSQL is started
from Debian's binaries (tests/support/pgserver.py), on this machine.

    python bench/bench_pg_journal.py [--url postgresql://...] [--appenders 1,20,200] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import checkout  # noqa: F401  (puts this checkout and tests/ on the import path)
from results import record  # a sibling: bench/ is where this script runs from

from storage.interface import Lease
from storage.local.durability import Flusher
from storage.local.log import LogConfig, PartitionLog
from storage.local.manager import LogManager
from storage.postgres.journal import PgJournal
from storage.postgres.schema import migrate

PARTITIONS = 50
TOPIC = "__consumer_offsets"
NODE, BROKER_EPOCH, EPOCH = 1, 1, 1
RECORD = (b"k" * 40, b"v" * 60)


@contextlib.contextmanager
def local_postgres() -> Iterator[str]:
    from support.pgserver import PgServer

    server = PgServer(Path(tempfile.mkdtemp(prefix="kgc-bench-pg-"))).start()
    try:
        yield str(server.url)
    finally:
        server.destroy()


async def reset_leases(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await migrate(conn)
        await conn.execute("DELETE FROM kgc_record_log WHERE topic = $1", TOPIC)
        await conn.execute("DELETE FROM kgc_partition WHERE topic = $1", TOPIC)
        await conn.execute("DELETE FROM kgc_topic WHERE name = $1", TOPIC)
        await conn.execute(
            "INSERT INTO kgc_topic (name, topic_id, partitions, internal) VALUES ($1, $2, $3, true)",
            TOPIC,
            uuid.uuid4(),
            PARTITIONS,
        )
        await conn.execute(
            "INSERT INTO kgc_partition (topic, partition, topic_id, owner_node,"
            " owner_broker_epoch, epoch) SELECT $1, p, (SELECT topic_id FROM kgc_topic"
            " WHERE name = $1), $2, $3, $4 FROM generate_series(0, $5 - 1) AS p",
            TOPIC,
            NODE,
            BROKER_EPOCH,
            EPOCH,
            PARTITIONS,
        )
    finally:
        await conn.close()


async def drive(logs: list[PartitionLog], flusher: Flusher, n: int, seconds: float) -> list[float]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def appender(i: int) -> None:
        log = logs[i % len(logs)]
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            _b, last = log.append_records([RECORD], timestamp_ms=1_700_000_000_000)
            await flusher.wait_durable(log, last)
            latencies.append(time.perf_counter() - t)

    await asyncio.gather(*(appender(i) for i in range(n)))
    return latencies


async def run_local(n: int, seconds: float) -> tuple[list[float], int]:
    with tempfile.TemporaryDirectory(prefix="kgc-bench-") as d:
        flusher = Flusher()
        manager = LogManager(Path(d), flusher=flusher)
        cfg = LogConfig(journaled=True, cleanup_policy="compact", segment_bytes=100 << 20)
        logs = [manager.get_or_create(TOPIC, p, cfg) for p in range(PARTITIONS)]
        lat = await drive(logs, flusher, n, seconds)
        rounds = manager.journal.stats.rounds
        await flusher.stop()
        manager.close_all()
    return lat, rounds


async def run_pg(url: str, n: int, seconds: float) -> tuple[list[float], int]:
    await reset_leases(url)
    journal = PgJournal(url, NODE, application_name="kgc-bench")
    journal.broker_epoch = BROKER_EPOCH
    await journal.start()
    flusher = Flusher()
    with tempfile.TemporaryDirectory(prefix="kgc-bench-") as d:
        logs = []
        for p in range(PARTITIONS):
            log = PartitionLog(Path(d) / f"{TOPIC}-{p}", LogConfig(segment_bytes=100 << 20))
            journal.attach(log, Lease(TOPIC, p, EPOCH, 0, 0))
            logs.append(log)
        lat = await drive(logs, flusher, n, seconds)
        await flusher.stop()
        for log in logs:
            log.close()
    await journal.close()
    return lat, journal.stats.rounds


def pct(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))] * 1000


async def main_async(args: argparse.Namespace, url: str) -> None:
    print(
        f"{'engine':<10} {'appenders':>9} {'appends/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'rounds':>7} {'per round':>9}"
    )
    for n in [int(x) for x in args.appenders.split(",")]:
        for engine in ("local", "postgres"):
            if engine == "local":
                lat, rounds = await run_local(n, args.seconds)
            else:
                lat, rounds = await run_pg(url, n, args.seconds)
            lat.sort()
            record(
                "pg_journal",
                f"{engine}, {n} appenders",
                len(lat) / args.seconds,
                "appends/s",
                "higher",
            )
            print(
                f"{engine:<10} {n:>9} {len(lat) / args.seconds:>10.0f} {pct(lat, 0.5):>8.2f} "
                f"{pct(lat, 0.99):>8.2f} {rounds:>7} {len(lat) / max(rounds, 1):>9.1f}",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a PostgreSQL URL (default: start a throwaway server)")
    ap.add_argument("--appenders", default="1,20,200")
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    if args.url:
        asyncio.run(main_async(args, args.url))
    else:
        with local_postgres() as url:
            asyncio.run(main_async(args, url))


if __name__ == "__main__":
    main()
