"""The storage contract, run against every engine: the local journal (LogManager, Flusher,
storage/local/journal.py), PostgreSQL (PgJournal, materialize) and the in-memory engine the
runtime and data plane tests use (storage/memory.py).

What the runtime and the data plane rely on: an appended batch reads back byte for byte
once ``wait_durable`` returned; ``durable_end`` covers only what a round made durable; a
failed round fails its waiters with FlushError and cuts the log back to its durable end,
and appends work again once the fault is gone; a log rebuilt from durable storage (reopened
from disk, or materialized from the database) holds exactly the acknowledged batches.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from storage.interface import FlushError
from storage.local.durability import Flusher
from storage.local.log import LogConfig, PartitionLog
from storage.local.manager import LogManager
from storage.memory import MemoryDurability, MemoryLog, MemoryLogs

JOURNALED = LogConfig(journaled=True)


class LocalEngine:
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dir = tmp_path / "data"
        self.monkeypatch = monkeypatch
        self.flusher = Flusher()
        self.logs = LogManager(self.dir, flusher=self.flusher)

    async def start(self) -> None:
        return None

    async def make_log(self, p: int) -> PartitionLog:
        return self.logs.get_or_create("t", p, JOURNALED)

    async def fail(self) -> None:
        def eio(fd: int) -> None:
            raise OSError(5, "simulated EIO")

        self.monkeypatch.setattr(os, "fdatasync", eio)

    async def heal(self) -> None:
        self.monkeypatch.undo()

    async def rebuilt(self, log: PartitionLog, p: int) -> PartitionLog:
        await self.flusher.stop()
        self.logs.close_all()
        self.logs = LogManager(self.dir)
        self.logs.open_all(lambda t, q: JOURNALED)
        again = self.logs.get("t", p)
        assert again is not None
        return again

    async def close(self) -> None:
        await self.flusher.stop()
        self.logs.close_all()


class PostgresEngine:
    def __init__(self, tmp_path: Path, pg_server: Any, pg_url: str) -> None:
        self.dir = tmp_path / "cache"
        self.server = pg_server
        self.url = pg_url
        self.flusher = Flusher()
        self.journal: Any = None

    async def start(self) -> None:
        from support.pgjournal_kit import make_leases, started_journal

        await make_leases(self.url, "t", 4)
        self.journal = await started_journal(self.url)

    async def make_log(self, p: int) -> PartitionLog:
        from support.pgjournal_kit import attached_log

        return attached_log(self.journal, self.dir, "t", p)

    async def fail(self) -> None:
        await asyncio.to_thread(self.server.stop, "immediate")

    async def heal(self) -> None:
        await asyncio.to_thread(self.server.restart)
        # The journal reconnects by itself at a round after its backoff: probe with a
        # partition of its own until a round commits.
        probe = await self.make_log(3)
        async with asyncio.timeout(30):
            while True:
                _b, last = probe.append_records([(b"probe", b"")], timestamp_ms=1)
                try:
                    await self.flusher.wait_durable(probe, last)
                    return
                except FlushError:
                    await asyncio.sleep(0.05)

    async def rebuilt(self, log: PartitionLog, p: int) -> PartitionLog:
        import asyncpg
        from support.pgjournal_kit import lease_row

        from storage.postgres.materialize import materialize

        conn = await asyncpg.connect(self.url)
        try:
            fresh = PartitionLog(self.dir / "rebuilt" / f"t-{p}", LogConfig())
            await materialize(conn, fresh, await lease_row(conn, "t", p))
            return fresh
        finally:
            await conn.close()

    async def close(self) -> None:
        await self.flusher.stop()
        await self.journal.close()


class MemoryEngine:
    def __init__(self) -> None:
        self.flusher = MemoryDurability()
        self.logs = MemoryLogs()

    async def start(self) -> None:
        return None

    async def make_log(self, p: int) -> MemoryLog:
        return self.logs.get_or_create("t", p, JOURNALED)

    async def fail(self) -> None:
        self.flusher.failing = OSError(5, "simulated EIO")

    async def heal(self) -> None:
        self.flusher.failing = None

    async def rebuilt(self, log: MemoryLog, p: int) -> MemoryLog:
        again = self.logs.reopen().get("t", p)
        assert again is not None
        return again

    async def close(self) -> None:
        await self.flusher.stop()
        self.logs.close_all()


Engine = LocalEngine | PostgresEngine | MemoryEngine


@pytest.fixture(params=["local", "memory", pytest.param("postgres", marks=pytest.mark.postgres)])
async def engine(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Engine]:
    eng: Engine
    if request.param == "local":
        eng = LocalEngine(tmp_path, monkeypatch)
    elif request.param == "memory":
        eng = MemoryEngine()
    else:
        eng = PostgresEngine(
            tmp_path, request.getfixturevalue("pg_server"), request.getfixturevalue("pg_url")
        )
    await eng.start()
    yield eng
    await eng.close()


def batches(log: PartitionLog) -> list[tuple[int, bytes]]:
    return [(h.base_offset, data) for h, data in log.iter_batches(0)]


async def test_a_durable_append_reads_back_byte_for_byte(engine: Engine) -> None:
    log = await engine.make_log(0)
    base, last = log.append_records([(b"k1", b"v1"), (b"k2", b"v2")], timestamp_ms=5)
    await asyncio.wait_for(engine.flusher.wait_durable(log, last), 10)
    (stored,) = batches(log)
    assert stored[0] == base == 0 and last == 1
    assert log.read(0, 1 << 20) == stored[1]
    assert log.durable_end == log.log_end_offset == 2


async def test_durable_end_covers_only_what_a_round_made_durable(engine: Engine) -> None:
    log = await engine.make_log(0)
    _b, last = log.append_records([(b"a", b"1")], timestamp_ms=1)
    await asyncio.wait_for(engine.flusher.wait_durable(log, last), 10)
    log.append_records([(b"b", b"2")], timestamp_ms=2)  # nobody waits: no round yet
    assert log.log_end_offset == 2
    assert log.durable_end == 1


async def test_a_failed_round_fails_its_waiters_and_cuts_the_log_back(engine: Engine) -> None:
    log = await engine.make_log(0)
    _b, last = log.append_records([(b"a", b"1")], timestamp_ms=1)
    await asyncio.wait_for(engine.flusher.wait_durable(log, last), 10)
    acked = batches(log)
    await engine.fail()
    _b, lost = log.append_records([(b"b", b"2")], timestamp_ms=2)
    with pytest.raises(FlushError) as exc:
        await asyncio.wait_for(engine.flusher.wait_durable(log, lost), 30)
    assert exc.value.log is log and exc.value.truncated_to == 1
    assert log.log_end_offset == log.durable_end == 1
    assert batches(log) == acked
    await engine.heal()
    _b, last = log.append_records([(b"c", b"3")], timestamp_ms=3)
    assert last == 1  # the cut offset is reused
    await asyncio.wait_for(engine.flusher.wait_durable(log, last), 10)
    assert log.durable_end == 2


async def test_a_rebuilt_log_holds_exactly_the_acknowledged_batches(engine: Engine) -> None:
    log = await engine.make_log(0)
    _b, last = log.append_records([(b"a", b"1")], timestamp_ms=1)
    await asyncio.wait_for(engine.flusher.wait_durable(log, last), 10)
    await engine.fail()
    _b, lost = log.append_records([(b"b", b"lost")], timestamp_ms=2)
    with pytest.raises(FlushError):
        await asyncio.wait_for(engine.flusher.wait_durable(log, lost), 30)
    await engine.heal()
    _b, last = log.append_records([(b"c", b"3")], timestamp_ms=3)
    await asyncio.wait_for(engine.flusher.wait_durable(log, last), 10)
    acked = batches(log)
    assert len(acked) == 2
    again = await engine.rebuilt(log, 0)
    assert batches(again) == acked
    assert (again.log_start_offset, again.log_end_offset) == (0, 2)


async def test_cluster_mode_never_takes_a_local_fsync_for_durability(tmp_path: Path) -> None:
    """A log not journaled in the database cannot be waited durable in cluster mode."""
    from storage.local.durability import Flusher
    from storage.local.log import PartitionLog

    flusher = Flusher(remote_only=True)
    plog = PartitionLog(tmp_path / "t-0")
    _, last = plog.append_records([(b"k", b"v")], timestamp_ms=0)
    with pytest.raises(FlushError):
        await flusher.wait_durable(plog, last)
    plog.close()
