"""The group history's table against a real PostgreSQL: written in the journal's round with
the offsets it describes (a fenced or failed round writes neither), history alone still
checks the lease, reads in log order by group and time from any connection, retention
deletes old rows only."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest
from support.pgjournal_kit import attached_log, lease_row, make_leases, started_journal

from coordinator.group.records import OffsetEntry, offset_commit_record
from coordinator.history.codec import decode
from coordinator.history.model import MembershipChange, OffsetChange, OffsetHistoryEntry
from coordinator.history.table import HistoryTable
from storage.interface import FlushError, NotOwnerError
from storage.local.durability import Flusher
from storage.postgres.history import PgHistoryRows
from storage.postgres.journal import PgJournal

pytestmark = pytest.mark.postgres

TOPIC = "__consumer_offsets"


def commit(partition: int, group: str, offset: int, previous: int) -> OffsetChange:
    record = offset_commit_record(partition, group, "orders", 3, OffsetEntry(offset, -1, "", 1000))
    return OffsetChange(partition, group, "m-1", "client-1", "/10.0.0.1", [record], [previous], [0])


def table(
    pool: asyncpg.Pool, journal: PgJournal, logs: dict[int, object], retention_ms: int = 10_000
) -> HistoryTable:
    def note(p: int, now_ms: int, value: bytes) -> bool:
        plog = logs.get(p)
        if plog is None:
            return False
        try:
            journal.note_history(plog, now_ms, value)  # type: ignore[arg-type]
        except NotOwnerError:
            return False
        return True

    return HistoryTable(retention_ms, PgHistoryRows(pool), note, lambda g: int(g[-1]), logs.keys)


async def test_history_lands_in_the_round_of_its_offsets(pg_url: str, tmp_path: Path) -> None:
    await make_leases(pg_url, TOPIC, 2)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    logs = {p: attached_log(journal, tmp_path, TOPIC, p) for p in range(2)}
    pool = await asyncpg.create_pool(pg_url, min_size=1, max_size=2)
    try:
        hist = table(pool, journal, logs)  # type: ignore[arg-type]
        targets = []
        for p, offset in ((0, 10), (1, 20)):
            _b, last = logs[p].append_records([(b"k", b"v")], timestamp_ms=100)
            targets.append((logs[p], last))
            hist.add([commit(p, f"g{p}", offset, -1)])
        hist.write(100, set())
        await asyncio.wait_for(flusher.wait_durable_many(targets), 10)
        assert journal.stats.rounds == 1  # history and offsets: one statement
        rows = await pool.fetch(
            "SELECT offsets_partition, after_offset, written_ms, epoch FROM kgc_group_history"
            " ORDER BY offsets_partition"
        )
        assert [tuple(r) for r in rows] == [(0, 1, 100, 5), (1, 1, 100, 5)]
        # A second turn: a change and a membership change of g0, read back in order.
        _b, last = logs[0].append_records([(b"k", b"v2")], timestamp_ms=200)
        hist.add([commit(0, "g0", 11, 10)])
        hist.add_membership(0, MembershipChange(200, "g0", "stable", 4, "", "", "m-1", 1, 5))
        hist.write(200, set())
        await asyncio.wait_for(flusher.wait_durable(logs[0], last), 10)
        entries = await hist.read("g0")
        offsets = [(e.offset, e.previous) for e in entries if isinstance(e, OffsetHistoryEntry)]
        assert offsets == [(10, -1), (11, 10)]
        assert [e.kind for e in entries if isinstance(e, MembershipChange)] == ["stable"]
        assert [
            e.offset for e in await hist.read("g0", 150) if isinstance(e, OffsetHistoryEntry)
        ] == [11]
        assert [e.timestamp_ms for e in await hist.read("g0", 0, 150)] == [100]
        assert await hist.read("g1", 0, 50) == []
        assert await hist.start_ms("g0") == 100
        assert await hist.start_ms("g1") == 100
    finally:
        await pool.close()
        await flusher.stop()
        await journal.close()


async def test_a_fenced_round_writes_no_history(pg_url: str, tmp_path: Path) -> None:
    await make_leases(pg_url, TOPIC, 2)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    logs = {p: attached_log(journal, tmp_path, TOPIC, p) for p in range(2)}
    pool = await asyncpg.create_pool(pg_url, min_size=1, max_size=2)
    try:
        hist = table(pool, journal, logs)  # type: ignore[arg-type]
        # Another node takes partition 1 over, as after a pause past the session timeout.
        await pool.execute(
            "UPDATE kgc_partition SET owner_node = 8, owner_broker_epoch = 1, epoch = epoch + 1"
            " WHERE partition = 1"
        )
        targets = []
        for p in range(2):
            _b, last = logs[p].append_records([(b"k", b"v")], timestamp_ms=100)
            targets.append((logs[p], last))
            hist.add([commit(p, f"g{p}", 7, -1)])
        hist.write(100, set())
        with pytest.raises(NotOwnerError):
            await asyncio.wait_for(flusher.wait_durable_many(targets), 10)
        assert logs[0].durable_end == 1
        rows = await pool.fetch("SELECT offsets_partition FROM kgc_group_history")
        assert [r["offsets_partition"] for r in rows] == [0]
        assert await hist.read("g1") == []
        # Not attached any more: its history is not even taken.
        before = hist.bytes_written
        hist.add([commit(1, "g1", 8, 7)])
        hist.write(101, set())
        assert hist.bytes_written == before
    finally:
        await pool.close()
        await flusher.stop()
        await journal.close()


async def test_history_alone_checks_the_lease(pg_url: str, tmp_path: Path) -> None:
    await make_leases(pg_url, TOPIC, 1)
    journal = await started_journal(pg_url)
    flusher = Flusher(remote_only=True, journal=journal)
    flusher.start()  # as a cluster node's: every round syncs the journal
    logs = {0: attached_log(journal, tmp_path, TOPIC, 0)}
    pool = await asyncpg.create_pool(pg_url, min_size=1, max_size=2)
    try:
        hist = table(pool, journal, logs)  # type: ignore[arg-type]
        hist.poke = flusher.poke
        hist.add_membership(
            0, MembershipChange(50, "g0", "rebalance_started", 3, "join", "", "m", -1, -1)
        )
        hist.write(50, set())
        async with asyncio.timeout(10):
            while not await pool.fetchval("SELECT count(*) FROM kgc_group_history"):
                await asyncio.sleep(0.02)
        assert await pool.fetchval("SELECT next_offset FROM kgc_partition") == 0
        assert [e.kind for e in await hist.read("g0")] == ["rebalance_started"]  # type: ignore[union-attr]
        # Fenced: the history alone is refused as well.
        await pool.execute("UPDATE kgc_partition SET epoch = epoch + 1")
        hist.add_membership(0, MembershipChange(60, "g0", "stable", 3, "", "", "m", 1, 10))
        hist.write(60, set())
        async with asyncio.timeout(10):
            while journal.stats.fenced == 0:
                await asyncio.sleep(0.02)
        assert await pool.fetchval("SELECT count(*) FROM kgc_group_history") == 1
    finally:
        await pool.close()
        await flusher.stop()
        await journal.close()


async def test_a_failed_round_writes_no_history(pg_url: str, tmp_path: Path) -> None:
    await make_leases(pg_url, TOPIC, 1)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    logs = {0: attached_log(journal, tmp_path, TOPIC, 0)}
    pool = await asyncpg.create_pool(pg_url, min_size=1, max_size=2)
    try:
        hist = table(pool, journal, logs)  # type: ignore[arg-type]
        # A history row the table refuses: the whole round is rolled back.
        await pool.execute(
            "ALTER TABLE kgc_group_history ADD CONSTRAINT small CHECK (written_ms < 1000)"
        )
        _b, last = logs[0].append_records([(b"k", b"v")], timestamp_ms=5000)
        hist.add([commit(0, "g0", 1, -1)])
        hist.write(5000, set())
        with pytest.raises(FlushError):
            await asyncio.wait_for(flusher.wait_durable(logs[0], last), 10)
        assert logs[0].log_end_offset == 0  # cut back
        assert await pool.fetchval("SELECT count(*) FROM kgc_record_log") == 0
        assert await pool.fetchval("SELECT count(*) FROM kgc_group_history") == 0
        # The next round starts clean: the failed round's history is not written later.
        await pool.execute("ALTER TABLE kgc_group_history DROP CONSTRAINT small")
        _b, last = logs[0].append_records([(b"k", b"v")], timestamp_ms=10)
        hist.add([commit(0, "g0", 2, -1)])
        hist.write(10, set())
        await asyncio.wait_for(flusher.wait_durable(logs[0], last), 10)
        rows = await pool.fetch("SELECT value FROM kgc_group_history")
        assert [[e.offset for e in decode(r["value"])] for r in rows] == [[2]]  # type: ignore[union-attr]
    finally:
        await pool.close()
        await flusher.stop()
        await journal.close()


async def test_history_alone_of_a_failed_round_goes_with_the_next(
    pg_url: str, tmp_path: Path
) -> None:
    """A membership change without records whose round fails (rolled back: nothing was
    written) goes again with the partition's next round, once, before that round's own
    history; a fenced round's does not (the partition is another node's now)."""
    await make_leases(pg_url, TOPIC, 1)
    journal = await started_journal(pg_url)
    flusher = Flusher(remote_only=True, journal=journal)
    flusher.start()
    logs = {0: attached_log(journal, tmp_path, TOPIC, 0)}
    pool = await asyncpg.create_pool(pg_url, min_size=1, max_size=2)
    try:
        hist = table(pool, journal, logs)  # type: ignore[arg-type]
        hist.poke = flusher.poke
        await pool.execute("ALTER TABLE kgc_group_history ADD CONSTRAINT none CHECK (false)")
        hist.add_membership(
            0, MembershipChange(50, "g0", "rebalance_started", 3, "join", "", "m", -1, -1)
        )
        hist.write(50, set())
        async with asyncio.timeout(10):
            while journal.stats.errors == 0:
                await asyncio.sleep(0.02)
        await pool.execute("ALTER TABLE kgc_group_history DROP CONSTRAINT none")
        # The next round: a commit of the same partition.
        _b, last = logs[0].append_records([(b"k", b"v")], timestamp_ms=60)
        hist.add([commit(0, "g0", 1, -1)])
        hist.write(60, set())
        await asyncio.wait_for(flusher.wait_durable(logs[0], last), 10)
        rows = await pool.fetch(
            "SELECT after_offset, written_ms FROM kgc_group_history ORDER BY after_offset"
        )
        assert [tuple(r) for r in rows] == [(0, 50), (1, 60)]
        entries = await hist.read("g0")
        assert [
            (e.kind, e.timestamp_ms) if isinstance(e, MembershipChange) else (e.offset, 60)
            for e in entries
        ] == [("rebalance_started", 50), (1, 60)]
        # A fenced round's history is dropped with the partition.
        await pool.execute("UPDATE kgc_partition SET epoch = epoch + 1")
        hist.add_membership(0, MembershipChange(70, "g0", "stable", 3, "", "", "m", 1, 10))
        hist.write(70, set())
        async with asyncio.timeout(10):
            while journal.stats.fenced == 0:
                await asyncio.sleep(0.02)
        await pool.execute("UPDATE kgc_partition SET epoch = epoch - 1")
        journal.attach(logs[0], await lease_row(pool, TOPIC, 0))  # ours again
        _b, last = logs[0].append_records([(b"k", b"v")], timestamp_ms=80)
        hist.add([commit(0, "g0", 2, 1)])
        hist.write(80, set())
        await asyncio.wait_for(flusher.wait_durable(logs[0], last), 10)
        assert [
            r["written_ms"]
            for r in await pool.fetch(
                "SELECT written_ms FROM kgc_group_history ORDER BY after_offset"
            )
        ] == [50, 60, 80]
    finally:
        await pool.close()
        await flusher.stop()
        await journal.close()


async def test_retention_deletes_old_rows_only(pg_url: str, tmp_path: Path) -> None:
    await make_leases(pg_url, TOPIC, 3)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    logs = {p: attached_log(journal, tmp_path, TOPIC, p) for p in range(3)}
    pool = await asyncpg.create_pool(pg_url, min_size=1, max_size=2)
    try:
        hist = table(pool, journal, {0: logs[0], 1: logs[1]}, retention_ms=1000)  # type: ignore[arg-type]
        for now in (1000, 2000, 3000):
            targets = []
            for p in range(3):
                _b, last = logs[p].append_records([(b"k", b"v")], timestamp_ms=now)
                targets.append((logs[p], last))
                journal.note_history(logs[p], now, b"x" * 10)
            await asyncio.wait_for(flusher.wait_durable_many(targets), 10)
        # This node coordinates partitions 0 and 1: their rows before 2500 - 1000 go.
        assert await hist.apply_retention(2500) == 2
        rows = await pool.fetch(
            "SELECT offsets_partition, written_ms FROM kgc_group_history"
            " ORDER BY offsets_partition, written_ms"
        )
        assert [tuple(r) for r in rows] == [
            (0, 2000), (0, 3000), (1, 2000), (1, 3000), (2, 1000), (2, 2000), (2, 3000)
        ]  # fmt: skip
        assert await hist.apply_retention(2500) == 0
        assert await hist.start_ms("g1") == 2000
    finally:
        await pool.close()
        await flusher.stop()
        await journal.close()
