"""Helpers for the PostgreSQL journal tests: a migrated database with leases owned by a
fake node, a PgJournal attached to local logs, and a loopback proxy that can swallow the
server's answers (an ambiguous commit: the statement commits, the client never hears)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from storage.interface import Lease
from storage.local.log import LogConfig, PartitionLog
from storage.postgres.journal import PgJournal
from storage.postgres.schema import migrate

NODE_ID = 7
BROKER_EPOCH = 3
APP = "kgc-test-writer"


async def make_leases(
    url: str,
    topic: str,
    partitions: int,
    *,
    epoch: int = 5,
    node_id: int = NODE_ID,
    broker_epoch: int = BROKER_EPOCH,
) -> None:
    """Migrate, then one topic with ``partitions`` lease rows owned by the fake node."""
    conn = await asyncpg.connect(url)
    try:
        await migrate(conn)
        await conn.execute(
            "INSERT INTO kgc_topic (name, topic_id, partitions) VALUES ($1, $2, $3)",
            topic,
            uuid.uuid4(),
            partitions,
        )
        await conn.execute(
            "INSERT INTO kgc_partition (topic, partition, topic_id, owner_node,"
            " owner_broker_epoch, epoch, next_offset, log_start_offset)"
            " SELECT $1, p, (SELECT topic_id FROM kgc_topic WHERE name = $1), $2, $3, $4, 0, 0"
            " FROM generate_series(0, $5 - 1) AS p",
            topic,
            node_id,
            broker_epoch,
            epoch,
            partitions,
        )
    finally:
        await conn.close()


async def lease_row(conn: Any, topic: str, partition: int) -> Lease:
    row = await conn.fetchrow(
        "SELECT epoch, next_offset, log_start_offset FROM kgc_partition"
        " WHERE topic = $1 AND partition = $2",
        topic,
        partition,
    )
    return Lease(topic, partition, row["epoch"], row["next_offset"], row["log_start_offset"])


async def started_journal(url: str, **kw: Any) -> PgJournal:
    journal = PgJournal(url, NODE_ID, application_name=APP, **kw)
    journal.broker_epoch = BROKER_EPOCH
    await journal.start()
    return journal


def attached_log(
    journal: PgJournal, base: Path, topic: str, partition: int, epoch: int = 5
) -> PartitionLog:
    log = PartitionLog(base / f"{topic}-{partition}", LogConfig())
    journal.attach(log, Lease(topic, partition, epoch, 0, 0))
    return log


def local_bytes(log: PartitionLog) -> bytes:
    return b"".join(data for _h, data in log.iter_batches(0))


async def db_bytes(conn: Any, topic: str, partition: int) -> bytes:
    rows = await conn.fetch(
        "SELECT batch FROM kgc_record_log WHERE topic = $1 AND partition = $2 ORDER BY base_offset",
        topic,
        partition,
    )
    return b"".join(r["batch"] for r in rows)


async def wait_until_blocked(
    conn: Any, application_name: str = APP, timeout: float = 10, exclude: int = 0
) -> int:
    """Wait until the writer's backend (not ``exclude``) waits on a lock; returns its pid."""
    async with asyncio.timeout(timeout):
        while True:
            # Inside a transaction pg_stat_activity is a snapshot taken at first use.
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            pid = await conn.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
                " AND wait_event_type = 'Lock' AND pid <> $2",
                application_name,
                exclude,
            )
            if pid is not None:
                return int(pid)
            await asyncio.sleep(0.01)


class SwallowingProxy:
    """A loopback TCP proxy; ``swallow = True`` drops what the server sends on the
    connections open at that moment (new connections pass normally)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.swallow_conns: set[int] = set()
        self.conns: list[int] = []
        self._server: asyncio.Server | None = None
        self.port = 0
        self.swallowed = asyncio.Event()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def swallow_existing(self) -> None:
        self.swallow_conns = set(self.conns)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cid = len(self.conns)
        self.conns.append(cid)
        up_r, up_w = await asyncio.open_connection(*self.target)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, down: bool) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    if down and cid in self.swallow_conns:
                        self.swallowed.set()
                        continue
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.close()

        await asyncio.gather(pipe(reader, up_w, False), pipe(up_r, writer, True))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
