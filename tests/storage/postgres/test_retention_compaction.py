"""Retention and compaction reach kgc_record_log: the database does not grow without bound.

Against a real PostgreSQL: a moved log start (retention, DeleteRecords-style truncation)
deletes the rows below it and raises the lease's log start, and a takeover loads from
there; a finished cleaner pass over an offsets partition replaces its rows by the cleaned
batches (fewer rows, fewer bytes) and a fresh load replays to the same latest value per
key; a compaction whose lease moved changes nothing; appends during a compaction are
neither blocked nor lost.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from support.pgjournal_kit import lease_row, make_leases, started_journal, wait_until_blocked

from coordinator.audit.source_pg import _LogRow, row_checks
from coordinator.runtime.replay import replay_partition
from storage.interface import Lease
from storage.local.cleaner import LogCleaner
from storage.local.durability import Flusher
from storage.local.log import LogConfig, PartitionLog
from storage.postgres.journal import MAX_ROW_BYTES, PgJournal
from storage.postgres.materialize import materialize
from storage.record_batch import iter_batches, iter_record_tuples
from storage.records import encode_offset_commit_key, encode_offset_commit_value

pytestmark = pytest.mark.postgres

OFFSETS = "__consumer_offsets"
EPOCH = 5  # the lease epoch make_leases gives


def commit(i: int, key: int) -> tuple[bytes, bytes]:
    """An OffsetCommit record: key ``key`` (group g<key % 7>, partition ``key``), offset i."""
    return (
        encode_offset_commit_key(f"g{key % 7}", "orders", key),
        encode_offset_commit_value(i, "", 1_000 + i),
    )


def offsets_log(
    journal: PgJournal, base: Path, partition: int = 0, *, segment_bytes: int = 64 << 10
) -> PartitionLog:
    config = LogConfig(
        segment_bytes=segment_bytes, cleanup_policy="compact", delete_retention_ms=1_000
    )
    log = PartitionLog(base / f"{OFFSETS}-{partition}", config)
    journal.attach(log, Lease(OFFSETS, partition, EPOCH, 0, 0))
    return log


async def append_rounds(
    flusher: Flusher,
    log: PartitionLog,
    records: Sequence[tuple[bytes, bytes | None]],
    per_round: int,
    ts: int = 1_000,
) -> None:
    """One batch per record, ``per_round`` batches per round statement (one row each)."""
    for i in range(0, len(records), per_round):
        last = -1
        for key, value in records[i : i + per_round]:
            _b, last = log.append_records([(key, value)], timestamp_ms=ts)
        await asyncio.wait_for(flusher.wait_durable(log, last), 20)


def latest(plog: PartitionLog) -> dict[bytes, bytes]:
    """The latest value per key, as the group runtime's replay sees the partition."""
    state: dict[bytes, bytes] = {}

    def apply(key: bytes, value: bytes | None) -> None:
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value

    for _n in replay_partition(plog, apply):
        pass
    return state


def tombstones(plog: PartitionLog) -> int:
    n = 0
    for _h, data in plog.iter_batches(0):
        n += sum(1 for _o, _t, _k, v in iter_record_tuples(data) if v is None)
    return n


async def table_size(conn: Any, topic: str, partition: int) -> tuple[int, int]:
    row = await conn.fetchrow(
        "SELECT count(*) AS n, coalesce(sum(octet_length(batch)), 0) AS b FROM kgc_record_log"
        " WHERE topic = $1 AND partition = $2",
        topic,
        partition,
    )
    return int(row["n"]), int(row["b"])


async def all_rows(conn: Any, topic: str, partition: int) -> list[tuple[Any, ...]]:
    rows = await conn.fetch(
        "SELECT base_offset, last_offset, epoch, record_count, max_timestamp, batch"
        " FROM kgc_record_log WHERE topic = $1 AND partition = $2 ORDER BY base_offset",
        topic,
        partition,
    )
    return [tuple(r) for r in rows]


async def assert_rows_as_the_audit_expects(conn: Any, topic: str, partition: int) -> None:
    """Rewritten rows: at most MAX_ROW_BYTES (or one batch), the lease epoch, appended after
    the row they precede (how the audit tells them apart); its row checks find nothing."""
    lease = await lease_row(conn, topic, partition)
    rows = await conn.fetch(
        "SELECT base_offset, last_offset, epoch, batch,"
        " (extract(epoch FROM append_time) * 1000000)::bigint AS us"
        " FROM kgc_record_log WHERE topic = $1 AND partition = $2 ORDER BY base_offset",
        topic,
        partition,
    )
    rewritten = rows[:-1]
    assert rewritten, "nothing was rewritten"
    for r in rewritten:
        assert r["epoch"] == lease.epoch
        assert r["us"] > rows[-1]["us"]
        assert len(r["batch"]) <= MAX_ROW_BYTES or len(list(iter_batches(r["batch"]))) == 1
    log_rows = [
        _LogRow(r["base_offset"], r["last_offset"], r["epoch"], r["batch"], r["us"]) for r in rows
    ]
    assert row_checks(partition, (lease.log_start_offset, lease.next_offset), log_rows) == []


async def fresh_load(conn: Any, base: Path, topic: str, partition: int) -> PartitionLog:
    """What a node taking the partition over builds: a new local log from the table."""
    lease = await lease_row(conn, topic, partition)
    fresh = PartitionLog(base / f"{topic}-{partition}", LogConfig())
    await materialize(conn, fresh, lease)
    return fresh


async def until(cond: Callable[[], Awaitable[bool]], timeout: float = 10) -> None:
    async with asyncio.timeout(timeout):
        while not await cond():
            await asyncio.sleep(0.01)


# ---------------------------------------------------------------------------- retention


async def test_retention_trims_rows_and_lease_start_and_a_takeover_loads_from_there(
    pg_url: str, tmp_path: Path
) -> None:
    await make_leases(pg_url, "t", 1)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    conn = await asyncpg.connect(pg_url)
    try:
        config = LogConfig(segment_bytes=1024, retention_ms=60_000)
        log = PartitionLog(tmp_path / "a" / "t-0", config)
        journal.attach(log, Lease("t", 0, EPOCH, 0, 0))
        records: list[tuple[bytes, bytes | None]] = [
            (b"k%d" % i, b"v%d" % i * 10) for i in range(200)
        ]
        await append_rounds(flusher, log, records, per_round=7)  # 29 rows
        rows_before, _ = await table_size(conn, "t", 0)
        assert rows_before == 29
        # The last records are stamped "now": the active segment holding them has not expired
        # (an expired active segment would go too, rolled, as in Kafka).
        await append_rounds(
            flusher, log, [(b"late%d" % i, b"v") for i in range(10)], per_round=10, ts=10**12
        )

        # retention.ms: every inactive segment is older than a minute "now"; the log tells
        # its journal, which trims the table in the background (no round needed).
        assert log.apply_retention(now_ms=10**12) > 0
        start = log.log_start_offset
        assert start > 0

        async def trimmed() -> bool:
            lease = await lease_row(conn, "t", 0)
            return lease.log_start_offset == start

        await until(trimmed)
        assert journal.stats.trims >= 1
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM kgc_record_log WHERE topic = 't' AND last_offset < $1", start
            )
            == 0
        )
        rows_after, _ = await table_size(conn, "t", 0)
        assert 0 < rows_after < rows_before
        # The row holding the new start stays whole (rows are never split).
        assert (
            await conn.fetchval("SELECT min(base_offset) FROM kgc_record_log WHERE topic = 't'")
            <= start
        )

        # DeleteRecords-style: the start moves inside a segment, to an exact offset.
        mid = (start + log.log_end_offset) // 2
        assert start < mid < log.log_end_offset
        log.delete_segments_before(mid)
        assert log.log_start_offset == mid
        assert not await journal.maintain()
        lease = await lease_row(conn, "t", 0)
        assert lease.log_start_offset == mid
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM kgc_record_log WHERE topic = 't' AND last_offset < $1", mid
            )
            == 0
        )

        # A takeover (epoch + 1) loads the partition from the new start, and appends go on.
        journal.detach(log)
        await conn.execute("UPDATE kgc_partition SET epoch = epoch + 1 WHERE topic = 't'")
        fresh = await fresh_load(conn, tmp_path / "b", "t", 0)
        lease = await lease_row(conn, "t", 0)
        assert (fresh.log_start_offset, fresh.log_end_offset) == (mid, log.log_end_offset)
        assert [d for _h, d in fresh.iter_batches(0)] == [d for _h, d in log.iter_batches(0)]
        journal.attach(fresh, lease)
        _b, last = fresh.append_records([(b"after", b"takeover")], timestamp_ms=5)
        await asyncio.wait_for(flusher.wait_durable(fresh, last), 10)
        assert (await lease_row(conn, "t", 0)).next_offset == last + 1
    finally:
        await conn.close()
        await flusher.stop()
        await journal.close()


async def test_a_fenced_trim_changes_nothing(pg_url: str, tmp_path: Path) -> None:
    await make_leases(pg_url, "t", 1)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    conn = await asyncpg.connect(pg_url)
    try:
        log = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=1024))
        journal.attach(log, Lease("t", 0, EPOCH, 0, 0))
        await append_rounds(flusher, log, [(b"k", b"v" * 50)] * 60, per_round=6)
        before = await all_rows(conn, "t", 0)
        await conn.execute("UPDATE kgc_partition SET epoch = epoch + 1 WHERE topic = 't'")
        log.delete_segments_before(30)
        assert not await journal.maintain()  # refused: nothing to retry
        assert journal.stats.maintenance_errors == 1 and journal.stats.trims == 0
        assert await all_rows(conn, "t", 0) == before
        assert (await lease_row(conn, "t", 0)).log_start_offset == 0
    finally:
        await conn.close()
        await flusher.stop()
        await journal.close()


# ---------------------------------------------------------------------------- compaction


async def test_compaction_shrinks_the_table_and_a_fresh_load_replays_the_same_state(
    pg_url: str, tmp_path: Path
) -> None:
    await make_leases(pg_url, OFFSETS, 1)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    conn = await asyncpg.connect(pg_url)
    try:
        log = offsets_log(journal, tmp_path / "a")
        # 5000 commits over 50 keys; five other keys committed early, then deleted
        # (tombstones) half-way and never written again.
        gone = [commit(0, 1000 + k)[0] for k in range(5)]
        records: list[tuple[bytes, bytes | None]] = [(k, b"early") for k in gone]
        records += [commit(i, i % 50) for i in range(2500)]
        records += [(k, None) for k in gone]
        records += [commit(i, i % 50) for i in range(2500, 5000)]
        await append_rounds(flusher, log, records, per_round=50)
        expected = latest(log)
        assert len(expected) == 50 and not any(k in expected for k in gone)
        rows_before, bytes_before = await table_size(conn, OFFSETS, 0)
        last_row = (await all_rows(conn, OFFSETS, 0))[-1]

        # The cleaner's pass ends at the active segment's base: roll, so all of it counts.
        log.roll()
        now = [int(time.time() * 1000)]
        cleaner = LogCleaner(log, clock=lambda: now[0])
        cleaner.clean_all()
        assert not await journal.maintain()
        result = journal.last_rewrite
        assert result is not None and journal.stats.compactions == 1
        rows_after, bytes_after = await table_size(conn, OFFSETS, 0)
        assert rows_after <= rows_before // 10 and bytes_after <= bytes_before // 10
        assert (rows_before - rows_after) == result.rows_before - result.rows_after
        # The last row (at the cut) is left as it was: the log end never moves.
        assert (await all_rows(conn, OFFSETS, 0))[-1] == last_row
        assert result.cut == last_row[0]
        await assert_rows_as_the_audit_expects(conn, OFFSETS, 0)

        fresh = await fresh_load(conn, tmp_path / "b", OFFSETS, 0)
        assert fresh.log_end_offset == log.log_end_offset
        assert latest(fresh) == expected
        assert tombstones(fresh) == len(gone)  # kept until delete.retention.ms has passed

        # Rounds go on after the rewrite (the CAS on next_offset did not move)...
        more = [commit(i, i % 50) for i in range(5000, 5600)]
        await append_rounds(flusher, log, more, per_round=60)
        expected = latest(log)
        # ...and once the tombstones' delete horizon has passed, a second pass drops them
        # here as in the local log.
        log.roll()
        now[0] += 2_000
        cleaner.clean_all()
        assert not await journal.maintain()
        assert journal.stats.compactions == 2
        assert tombstones(log) == 0
        fresh2 = await fresh_load(conn, tmp_path / "c", OFFSETS, 0)
        assert tombstones(fresh2) == 0
        assert latest(fresh2) == expected == latest(log)
        assert fresh2.log_end_offset == log.log_end_offset
    finally:
        await conn.close()
        await flusher.stop()
        await journal.close()


async def test_a_compaction_whose_epoch_moved_changes_nothing(pg_url: str, tmp_path: Path) -> None:
    await make_leases(pg_url, OFFSETS, 1)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    conn = await asyncpg.connect(pg_url)
    try:
        log = offsets_log(journal, tmp_path / "a")
        await append_rounds(flusher, log, [commit(i, i % 10) for i in range(1000)], per_round=20)
        before = await all_rows(conn, OFFSETS, 0)
        await conn.execute("UPDATE kgc_partition SET epoch = epoch + 1")
        log.roll()
        LogCleaner(log).clean_all()
        assert not await journal.maintain()  # refused: nothing to retry
        assert journal.last_rewrite is None and journal.stats.compactions == 0
        assert journal.stats.maintenance_errors == 1
        assert await all_rows(conn, OFFSETS, 0) == before
    finally:
        await conn.close()
        await flusher.stop()
        await journal.close()


async def test_a_takeover_committed_while_the_rewrite_waits_for_the_lease_leaves_all_rows(
    pg_url: str, tmp_path: Path
) -> None:
    """The fence is the rewrite's last statement: its DELETE and INSERTs have run when
    another node's takeover commits; the check then fails and all of it is rolled back."""
    await make_leases(pg_url, OFFSETS, 1)
    journal = await started_journal(pg_url, maintenance_lock_timeout_ms=30_000)
    flusher = Flusher()
    conn = await asyncpg.connect(pg_url)
    taker = await asyncpg.connect(pg_url)
    try:
        log = offsets_log(journal, tmp_path / "a")
        await append_rounds(flusher, log, [commit(i, i % 10) for i in range(1000)], per_round=20)
        before = await all_rows(conn, OFFSETS, 0)
        tx = taker.transaction()
        await tx.start()
        await taker.execute(
            "UPDATE kgc_partition SET owner_node = 99, owner_broker_epoch = 1, epoch = epoch + 1"
        )
        log.roll()
        LogCleaner(log).clean_all()  # kicks the background maintenance
        await wait_until_blocked(conn, journal.maintenance_application_name)
        await tx.commit()
        assert not await journal.maintain()  # waits for the running one; nothing retried
        assert journal.last_rewrite is None and journal.stats.maintenance_errors == 1
        assert await all_rows(conn, OFFSETS, 0) == before
    finally:
        await taker.close()
        await conn.close()
        await flusher.stop()
        await journal.close()


async def test_appends_during_a_compaction_are_neither_blocked_nor_lost(
    pg_url: str, tmp_path: Path
) -> None:
    await make_leases(pg_url, OFFSETS, 1)
    journal = await started_journal(pg_url, maintenance_lock_timeout_ms=30_000)
    flusher = Flusher()
    conn = await asyncpg.connect(pg_url)
    holder = await asyncpg.connect(pg_url)
    try:
        log = offsets_log(journal, tmp_path / "a")
        await append_rounds(flusher, log, [commit(i, i % 20) for i in range(2000)], per_round=40)
        log.roll()
        # Hold the first row: the rewrite's transaction starts and waits in its DELETE.
        tx = holder.transaction()
        await tx.start()
        await holder.execute("SELECT 1 FROM kgc_record_log WHERE base_offset = 0 FOR UPDATE")
        LogCleaner(log).clean_all()
        compaction = asyncio.ensure_future(journal.maintain())
        await wait_until_blocked(conn, journal.maintenance_application_name)
        # Meanwhile: 30 rounds of new commits (new keys), each acknowledged as durable.
        during = [commit(10_000 + i, 100 + i) for i in range(300)]
        rounds_before = journal.stats.rounds
        await append_rounds(flusher, log, during, per_round=10)
        assert journal.stats.rounds - rounds_before == 30
        assert not compaction.done()  # they did not wait for the compaction
        await tx.rollback()
        assert not await asyncio.wait_for(compaction, 30)
        assert journal.last_rewrite is not None and journal.stats.compactions == 1

        # ...and a live appender while two more passes run: nothing lost either.
        stop = asyncio.Event()
        appended: list[tuple[bytes, bytes | None]] = []

        async def appender() -> None:
            i = 0
            while not stop.is_set():
                rec = commit(20_000 + i, 1000 + i % 300)
                appended.append(rec)
                await append_rounds(flusher, log, [rec], per_round=1)
                i += 1

        task = asyncio.ensure_future(appender())
        for _ in range(2):
            rounds_before = journal.stats.rounds

            async def appends_went_on(since: int = rounds_before) -> bool:
                return journal.stats.rounds > since + 5

            log.roll()
            LogCleaner(log).clean_all()
            assert not await journal.maintain()
            await until(appends_went_on)
        stop.set()
        await asyncio.wait_for(task, 20)
        assert journal.stats.compactions == 3

        expected = latest(log)
        assert len(appended) > 10
        for key, value in [*during, *dict(appended).items()]:
            assert expected[key] == value
        fresh = await fresh_load(conn, tmp_path / "b", OFFSETS, 0)
        assert fresh.log_end_offset == log.log_end_offset == log.durable_end
        assert latest(fresh) == expected
    finally:
        await holder.close()
        await conn.close()
        await flusher.stop()
        await journal.close()


# ---------------------------------------------------------------------------- measurement


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.parametrize(
    ("keys_order", "per_round"), [("cyclic", 100), ("random", 100), ("random", 1)]
)
async def test_measure_100k_commits_to_100_keys(
    pg_url: str, tmp_path: Path, keys_order: str, per_round: int
) -> None:
    """Rows and bytes of one offsets partition before and after compaction (printed).

    "cyclic": key i % 100, so the last round holds the latest commit of every key;
    "random": keys drawn at random, so the latest commits are spread over the log.
    ``per_round`` commits share a round (one row); 1 is the worst case for the table.
    """
    await make_leases(pg_url, OFFSETS, 1)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    conn = await asyncpg.connect(pg_url)
    try:
        log = offsets_log(journal, tmp_path / "a", segment_bytes=1 << 20)
        rnd = random.Random(14)
        keys = [i % 100 if keys_order == "cyclic" else rnd.randrange(100) for i in range(100_000)]
        records: list[tuple[bytes, bytes | None]] = [commit(i, k) for i, k in enumerate(keys)]
        t0 = time.perf_counter()
        await append_rounds(flusher, log, records, per_round=per_round)
        t_append = time.perf_counter() - t0
        expected = latest(log)
        rows_before, bytes_before = await table_size(conn, OFFSETS, 0)
        t0 = time.perf_counter()
        await fresh_load(conn, tmp_path / "b", OFFSETS, 0)
        t_load_before = time.perf_counter() - t0

        log.roll()
        t0 = time.perf_counter()
        LogCleaner(log).clean_all()
        t_clean = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert not await journal.maintain()
        t_rewrite = time.perf_counter() - t0
        rows_after, bytes_after = await table_size(conn, OFFSETS, 0)
        t0 = time.perf_counter()
        fresh = await fresh_load(conn, tmp_path / "c", OFFSETS, 0)
        t_load_after = time.perf_counter() - t0
        assert latest(fresh) == expected
        print(
            f"\n100k commits / 100 keys ({keys_order}), {per_round} per round: appended in "
            f"{t_append:.1f} s\n"
            f"  before: {rows_before} rows, {bytes_before} bytes; load {t_load_before:.3f} s\n"
            f"  after:  {rows_after} rows, {bytes_after} bytes; load {t_load_after:.3f} s\n"
            f"  local clean {t_clean:.2f} s, database rewrite {t_rewrite:.3f} s"
        )
        assert rows_after <= 3 and bytes_after < bytes_before // 50
    finally:
        await conn.close()
        await flusher.stop()
        await journal.close()
