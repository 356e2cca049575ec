"""The history table's merge against a real PostgreSQL: the round rows older than the merge
lag become one row per run, and every read (any time window, across merged and round
rows) gives the same entries in the same order as before; a fenced merge changes nothing,
nor does a merge whose connection dies in the middle of its transaction; retention deletes
a merged row only once its last turn is past the retention."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from support.pgjournal_kit import attached_log, make_leases, started_journal

from coordinator.group.records import OffsetEntry, offset_commit_record
from coordinator.history.model import MembershipChange, OffsetChange
from coordinator.history.table import HistoryTable
from storage.local.durability import Flusher
from storage.local.log import PartitionLog
from storage.postgres.history import MERGE_MAX_ROWS, PgHistoryRows, runs
from storage.postgres.journal import PgJournal

pytestmark = pytest.mark.postgres

TOPIC = "__consumer_offsets"
LAG = 50  # ms: the rows of the first half of a test's turns are old enough at NOW
NOW = 1100
# Read windows of every kind: all, a merged row's middle, across merged and round rows,
# one turn, round rows only, nothing.
WINDOWS = [(0, None), (1012, 1027), (1015, 1065), (1020, 1020), (1055, None), (0, 999)]


def commit(partition: int, group: str, offset: int, previous: int, ms: int) -> OffsetChange:
    records = [
        offset_commit_record(partition, group, "orders", p, OffsetEntry(offset + p, -1, "m", ms))
        for p in range(3)
    ]
    return OffsetChange(
        partition, group, "m-1", "client-1", "/10.0.0.1", records, [previous] * 3, [0] * 3
    )


def table(
    pool: asyncpg.Pool,
    journal: PgJournal,
    logs: dict[int, PartitionLog],
    retention_ms: int = 10_000,
) -> HistoryTable:
    def note(p: int, now_ms: int, value: bytes) -> bool:
        journal.note_history(logs[p], now_ms, value)
        return True

    def lease(p: int) -> tuple[int, int, int] | None:
        held = journal.lease_of(logs[p])
        return None if held is None else (journal.node_id, journal.broker_epoch, held[2])

    return HistoryTable(
        retention_ms,
        PgHistoryRows(pool),
        note,
        lambda g: int(g[1]),
        logs.keys,
        merge_lag_ms=LAG,
        lease=lease,
    )


async def write_turns(hist: HistoryTable, logs: dict[int, PartitionLog], flusher: Flusher) -> None:
    """Ten turns, 10 ms apart from 1000: commits of g0 and h0 (partition 0) and g1
    (partition 1), a membership change of g0 every third turn, one round each."""
    for i in range(10):
        ms = 1000 + 10 * i
        targets = []
        for p in logs:
            _b, last = logs[p].append_records([(b"k", b"v")], timestamp_ms=ms)
            targets.append((logs[p], last))
        hist.add([commit(0, "g0", 10 * i, 10 * i - 10, ms), commit(1, "g1", i, i - 1, ms)])
        hist.add([commit(0, "h0", 5 * i, -1, ms)])
        if i % 3 == 0:
            hist.add_membership(0, MembershipChange(ms, "g0", "stable", i, "", "", "m-1", 1, 5))
        hist.write(ms, set())
        await asyncio.wait_for(flusher.wait_durable_many(targets), 10)


async def reads(hist: HistoryTable) -> list[Any]:
    return [await hist.read(g, a, b) for g in ("g0", "h0", "g1") for a, b in WINDOWS]


async def table_rows(pool: asyncpg.Pool) -> list[tuple[Any, ...]]:
    rows = await pool.fetch(
        "SELECT offsets_partition, after_offset, written_ms, first_written_ms, epoch, value"
        " FROM kgc_group_history ORDER BY offsets_partition, after_offset, written_ms"
    )
    return [tuple(r) for r in rows]


class Setup:
    def __init__(self, journal: PgJournal, pool: asyncpg.Pool, logs: dict[int, PartitionLog]):
        self.journal, self.pool, self.logs = journal, pool, logs
        self.flusher = Flusher()
        self.hist = table(pool, journal, logs)


async def setup(pg_url: str, tmp_path: Path) -> Setup:
    await make_leases(pg_url, TOPIC, 2)
    journal = await started_journal(pg_url)
    logs = {p: attached_log(journal, tmp_path, TOPIC, p) for p in range(2)}
    pool = await asyncpg.create_pool(pg_url, min_size=1, max_size=3)
    s = Setup(journal, pool, logs)
    await write_turns(s.hist, logs, s.flusher)
    return s


async def close(s: Setup) -> None:
    await s.pool.close()
    await s.flusher.stop()
    await s.journal.close()


async def test_merge_keeps_every_entry_in_order_for_every_window(
    pg_url: str, tmp_path: Path
) -> None:
    s = await setup(pg_url, tmp_path)
    try:
        before = await reads(s.hist)
        assert len(before[0]) == 30 + 4  # g0: ten turns of 3 changes, 4 membership changes
        assert await s.pool.fetchval("SELECT count(*) FROM kgc_group_history") == 20
        # Rows written before NOW - LAG = 1050 (turns 0-4) are merged: one row a partition.
        assert await s.hist.apply_merge(NOW) == 10
        rows = await table_rows(s.pool)
        merged = [(r[0], r[1], r[2], r[3], r[4]) for r in rows if r[3] is not None]
        assert merged == [(0, 5, 1040, 1000, 5), (1, 5, 1040, 1000, 5)]
        assert len(rows) == 2 + 2 * 5
        assert await reads(s.hist) == before
        assert await s.hist.start_ms("g0") == 1000
        # Nothing more is old enough; later, the rest: a second merged row a partition,
        # after the first in the log order.
        assert await s.hist.apply_merge(NOW) == 0
        assert await s.hist.apply_merge(NOW + 100) == 10
        rows = await table_rows(s.pool)
        assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
            (0, 5, 1040, 1000), (0, 10, 1090, 1050), (1, 5, 1040, 1000), (1, 10, 1090, 1050)
        ]  # fmt: skip
        assert await reads(s.hist) == before
        assert (s.hist.rows_merged, s.hist.merged_rows_written) == (20, 4)
    finally:
        await close(s)


async def test_a_fenced_merge_changes_nothing(pg_url: str, tmp_path: Path) -> None:
    s = await setup(pg_url, tmp_path)
    try:
        rows = await table_rows(s.pool)
        # Another node took partition 1 over; this one has not heard yet.
        await s.pool.execute(
            "UPDATE kgc_partition SET owner_node = 8, owner_broker_epoch = 1, epoch = epoch + 1"
            " WHERE partition = 1"
        )
        assert await s.hist.apply_merge(NOW) == 5  # partition 0's only
        after = await table_rows(s.pool)
        assert [r for r in after if r[0] == 1] == [r for r in rows if r[0] == 1]
        assert [r[3] for r in after if r[0] == 0] == [1000] + [None] * 5
    finally:
        await close(s)


async def test_a_merge_killed_in_its_transaction_leaves_the_rows_as_they_were(
    pg_url: str, tmp_path: Path
) -> None:
    s = await setup(pg_url, tmp_path)
    try:
        rows = await table_rows(s.pool)
        watcher = await asyncpg.connect(pg_url)
        # Hold partition 0's lease row, as a round in flight does: the merge deletes and
        # inserts, then waits for the lease row, and its backend is killed right there.
        async with s.pool.acquire() as holder, holder.transaction():
            await holder.execute(
                "SELECT 1 FROM kgc_partition WHERE partition = 0 FOR NO KEY UPDATE"
            )
            merging = asyncio.ensure_future(s.hist.apply_merge(NOW))
            async with asyncio.timeout(10):
                while True:
                    # (not on ``holder``: in a transaction, pg_stat_activity stays as it was)
                    pid = await watcher.fetchval(
                        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND query LIKE '%FOR NO KEY UPDATE%'"
                    )
                    if pid is not None:
                        break
                    await asyncio.sleep(0.01)
            assert await watcher.fetchval("SELECT pg_terminate_backend($1)", pid)
        await watcher.close()
        # Partition 0's merge failed (logged), partition 1's went on.
        assert await asyncio.wait_for(merging, 10) == 5
        after = await table_rows(s.pool)
        assert [r for r in after if r[0] == 0] == [r for r in rows if r[0] == 0]
        # The next pass merges it.
        assert await s.hist.apply_merge(NOW) == 5
        assert (
            await s.pool.fetchval(
                "SELECT count(*) FROM kgc_group_history WHERE first_written_ms IS NOT NULL"
            )
            == 2
        )
    finally:
        await close(s)


async def test_a_merge_failing_in_the_database_changes_nothing(pg_url: str, tmp_path: Path) -> None:
    s = await setup(pg_url, tmp_path)
    try:
        rows = await table_rows(s.pool)
        # The merged row's INSERT is refused after the DELETE ran: all rolled back.
        await s.pool.execute(
            "ALTER TABLE kgc_group_history ADD CONSTRAINT unmerged CHECK (first_written_ms IS NULL)"
        )
        assert await s.hist.apply_merge(NOW) == 0
        assert await table_rows(s.pool) == rows
    finally:
        await close(s)


async def test_retention_deletes_a_merged_row_once_its_last_turn_is_past(
    pg_url: str, tmp_path: Path
) -> None:
    s = await setup(pg_url, tmp_path)
    try:
        s.hist.retention_ms = 1000
        assert await s.hist.apply_merge(NOW) == 10  # rows 1000-1040 of each partition
        # Cut at 1030: the merged rows hold turns after it, kept whole (their first
        # turns too: the overshoot is at most the merge lag).
        assert await s.hist.apply_retention(2030) == 0
        assert await s.hist.start_ms("g0") == 1000
        assert (await s.hist.read("g1"))[0].timestamp_ms == 1000
        # Cut at 1045: past the merged rows' last turn; the round rows from 1050 stay.
        assert await s.hist.apply_retention(2045) == 2
        assert await s.hist.start_ms("g0") == 1050
        assert sorted({e.timestamp_ms for e in await s.hist.read("g1")}) == [
            1050 + 10 * i for i in range(5)
        ]
    finally:
        await close(s)


def test_a_run_keeps_the_log_order_when_clocks_differ() -> None:
    # (after_offset, written_ms, epoch, bytes), in log order. After a failover to an owner
    # whose clock is behind, a row at log end 2 was written at 300, before 400 of a row at
    # log end 1: a merged row of the first two would sort as (2, 400), after (2, 350), so
    # the run goes on through (2, 350) though it holds more than MERGE_MAX_BYTES.
    big, small = 3 << 20, 1 << 20
    rows = [(1, 400, 5, big), (2, 300, 6, small), (2, 350, 6, small), (3, 360, 6, small)]
    assert runs(rows, 1000) == [rows[:3], rows[3:]]
    # Otherwise a run ends at the span of written time, the bytes or the rows it may hold.
    assert runs([(1, 100, 5, 10), (2, 201, 5, 10), (3, 250, 5, 10)], 100) == [
        [(1, 100, 5, 10)], [(2, 201, 5, 10), (3, 250, 5, 10)]
    ]  # fmt: skip
    assert [len(r) for r in runs([(i, i, 5, 1) for i in range(MERGE_MAX_ROWS + 1)], 10**9)] == [
        MERGE_MAX_ROWS, 1
    ]  # fmt: skip
