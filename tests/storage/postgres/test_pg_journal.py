"""PgJournal against a real PostgreSQL: one fenced statement per round, exact bytes in
kgc_record_log, fencing, a stopped database, and ambiguous commits resolved from the lease."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from support.pgjournal_kit import (
    BROKER_EPOCH,
    SwallowingProxy,
    attached_log,
    db_bytes,
    local_bytes,
    make_leases,
    started_journal,
    wait_until_blocked,
)

from storage.interface import FlushError, NotOwnerError
from storage.local.durability import Flusher
from storage.postgres.journal import MAX_ROW_BYTES

pytestmark = pytest.mark.postgres


async def test_one_statement_per_round_stores_the_exact_bytes(pg_url: str, tmp_path: Path) -> None:
    await make_leases(pg_url, "t", 12)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    logs = [attached_log(journal, tmp_path, "t", p) for p in range(12)]
    targets = []
    for i, log in enumerate(logs):
        for j in range(3):
            _b, last = log.append_records([(b"k%d" % j, b"v%d-%d" % (i, j))], timestamp_ms=10 + j)
        targets.append((log, last))
    await asyncio.wait_for(flusher.wait_durable_many(targets), 10)
    assert journal.stats.rounds == 1  # twelve partitions, one statement
    assert journal.stats.rows == 12
    conn = await asyncpg.connect(pg_url)
    try:
        for p, log in enumerate(logs):
            assert log.durable_end == log.log_end_offset == 3
            assert await db_bytes(conn, "t", p) == local_bytes(log)
        rows = await conn.fetch(
            "SELECT partition, base_offset, last_offset, epoch, record_count, max_timestamp"
            " FROM kgc_record_log ORDER BY partition"
        )
        assert [tuple(r) for r in rows] == [(p, 0, 2, 5, 3, 12) for p in range(12)]
        nexts = await conn.fetch("SELECT next_offset FROM kgc_partition ORDER BY partition")
        assert [r["next_offset"] for r in nexts] == [3] * 12
        # A second round continues from the committed offsets.
        _b, last = logs[4].append_records([(b"x", b"y")], timestamp_ms=20)
        await asyncio.wait_for(flusher.wait_durable(logs[4], last), 10)
        assert journal.stats.rounds == 2
        assert await db_bytes(conn, "t", 4) == local_bytes(logs[4])
    finally:
        await conn.close()
        await flusher.stop()
        await journal.close()


async def test_waiters_are_released_only_after_the_commit(pg_url: str, tmp_path: Path) -> None:
    await make_leases(pg_url, "t", 1)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    log = attached_log(journal, tmp_path, "t", 0)
    blocker = await asyncpg.connect(pg_url)
    try:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("LOCK TABLE kgc_partition IN EXCLUSIVE MODE")
        _b, last = log.append_records([(b"k", b"v")], timestamp_ms=1)
        waiter = asyncio.ensure_future(flusher.wait_durable(log, last))
        await wait_until_blocked(blocker)  # the round statement is at the server, waiting
        assert not waiter.done() and log.durable_end == 0
        await tx.rollback()
        await asyncio.wait_for(waiter, 10)
        assert log.durable_end == 1
        assert await db_bytes(blocker, "t", 0) == local_bytes(log)
    finally:
        await blocker.close()
        await flusher.stop()
        await journal.close()


async def test_rows_are_capped_and_split_within_one_statement(pg_url: str, tmp_path: Path) -> None:
    await make_leases(pg_url, "t", 1)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    log = attached_log(journal, tmp_path, "t", 0)
    targets = []
    for i in range(6):
        _b, last = log.append_records([(b"k", bytes([i]) * 400_000)], timestamp_ms=i)
        targets.append((log, last))
    await asyncio.wait_for(flusher.wait_durable_many(targets), 20)
    conn = await asyncpg.connect(pg_url)
    try:
        sizes = await conn.fetch(
            "SELECT base_offset, last_offset, length(batch) AS n FROM kgc_record_log"
            " ORDER BY base_offset"
        )
        assert journal.stats.rounds == 1 and len(sizes) == 3
        assert all(r["n"] <= MAX_ROW_BYTES for r in sizes)
        assert [(r["base_offset"], r["last_offset"]) for r in sizes] == [(0, 1), (2, 3), (4, 5)]
        assert await db_bytes(conn, "t", 0) == local_bytes(log)
    finally:
        await conn.close()
        await flusher.stop()
        await journal.close()


async def test_a_fenced_partition_is_refused_cut_back_and_reported(
    pg_url: str, tmp_path: Path
) -> None:
    await make_leases(pg_url, "t", 2)
    journal = await started_journal(pg_url)
    fenced: list[tuple[str, int]] = []
    journal.on_fenced.append(lambda t, p: fenced.append((t, p)))
    flusher = Flusher()
    mine, taken = (attached_log(journal, tmp_path, "t", p) for p in (0, 1))
    for log in (mine, taken):
        _b, last = log.append_records([(b"a", b"1")], timestamp_ms=1)
        await asyncio.wait_for(flusher.wait_durable(log, last), 10)
    other = await asyncpg.connect(pg_url)
    try:
        # Another node takes partition 1 over (a new epoch), as after a pause past the session.
        await other.execute(
            "UPDATE kgc_partition SET owner_node = 8, owner_broker_epoch = 1, epoch = epoch + 1"
            " WHERE topic = 't' AND partition = 1"
        )
        _b, last_mine = mine.append_records([(b"b", b"2")], timestamp_ms=2)
        _b, last_taken = taken.append_records([(b"b", b"2")], timestamp_ms=2)
        ok = asyncio.ensure_future(flusher.wait_durable(mine, last_mine))
        with pytest.raises(NotOwnerError) as exc:
            await asyncio.wait_for(flusher.wait_durable(taken, last_taken), 10)
        await asyncio.wait_for(ok, 10)  # the other partition of the same round committed
        assert (exc.value.topic, exc.value.partition) == ("t", 1)
        assert exc.value.log is taken and exc.value.truncated_to == 1
        assert taken.log_end_offset == 1 and taken.durable_end == 1
        assert fenced == [("t", 1)]
        rows = await other.fetchval(
            "SELECT count(*) FROM kgc_record_log WHERE topic = 't' AND partition = 1"
        )
        assert rows == 1  # nothing of the refused round
        assert (
            await other.fetchval("SELECT next_offset FROM kgc_partition WHERE partition = 1") == 1
        )
        # It stays refused: the next append does not even reach the log.
        with pytest.raises(NotOwnerError):
            taken.append_records([(b"c", b"3")], timestamp_ms=3)
        assert taken.log_end_offset == 1
        assert journal.stats.fenced == 1
    finally:
        await other.close()
        await flusher.stop()
        await journal.close()


async def test_a_stale_broker_epoch_is_refused(pg_url: str, tmp_path: Path) -> None:
    # The same node id registered again elsewhere (a newer broker epoch): our writes stop.
    await make_leases(pg_url, "t", 1, broker_epoch=BROKER_EPOCH + 1)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    log = attached_log(journal, tmp_path, "t", 0)
    _b, last = log.append_records([(b"a", b"1")], timestamp_ms=1)
    with pytest.raises(NotOwnerError):
        await asyncio.wait_for(flusher.wait_durable(log, last), 10)
    assert log.log_end_offset == 0
    await flusher.stop()
    await journal.close()


async def test_database_stopped_fails_waiters_then_recovers(
    pg_server: Any, pg_url: str, tmp_path: Path
) -> None:
    await make_leases(pg_url, "t", 3)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    logs = [attached_log(journal, tmp_path, "t", p) for p in range(3)]
    acked = []
    for log in logs:
        _b, last = log.append_records([(b"a", b"1")], timestamp_ms=1)
        await asyncio.wait_for(flusher.wait_durable(log, last), 10)
        acked.append(local_bytes(log))
    blocker = await asyncpg.connect(pg_url)
    tx = blocker.transaction()
    await tx.start()
    await blocker.execute("LOCK TABLE kgc_partition IN EXCLUSIVE MODE")
    waiters = []
    for log in logs:
        _b, last = log.append_records([(b"b", b"2")], timestamp_ms=2)
        waiters.append(asyncio.ensure_future(flusher.wait_durable(log, last)))
    await wait_until_blocked(blocker)  # the round is in flight when the server goes
    await asyncio.to_thread(pg_server.stop, "immediate")
    results = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 30)
    assert all(isinstance(r, FlushError) for r in results), results
    assert all(log.log_end_offset == 1 and log.durable_end == 1 for log in logs)
    # While the database is down, new waiters fail fast too (no waiter is parked).
    _b, last = logs[0].append_records([(b"c", b"3")], timestamp_ms=3)
    with pytest.raises(FlushError):
        await asyncio.wait_for(flusher.wait_durable(logs[0], last), 10)
    await asyncio.to_thread(pg_server.restart)
    # The same journal reconnects by itself (after its backoff).
    async with asyncio.timeout(30):
        while True:
            _b, last = logs[0].append_records([(b"d", b"4")], timestamp_ms=4)
            try:
                await flusher.wait_durable(logs[0], last)
                break
            except FlushError:
                await asyncio.sleep(0.05)
    conn = await asyncpg.connect(pg_url)
    try:
        assert await db_bytes(conn, "t", 0) == local_bytes(logs[0])
        for p in (1, 2):
            assert await db_bytes(conn, "t", p) == acked[p]  # only what was acknowledged
    finally:
        await conn.close()
        await flusher.stop()
        await journal.close()


async def terminated_rounds(pg_url: str, tmp_path: Path, kills: int) -> Any:
    """Terminate the writer's backend ``kills`` times while its round waits on a lock."""
    await make_leases(pg_url, "t", 1)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    log = attached_log(journal, tmp_path, "t", 0)
    _b, last = log.append_records([(b"a", b"1")], timestamp_ms=1)
    await asyncio.wait_for(flusher.wait_durable(log, last), 10)
    blocker = await asyncpg.connect(pg_url)
    tx = blocker.transaction()
    await tx.start()
    await blocker.execute("LOCK TABLE kgc_partition IN EXCLUSIVE MODE")
    _b, last = log.append_records([(b"b", b"2")], timestamp_ms=2)
    waiter = asyncio.ensure_future(flusher.wait_durable(log, last))
    pid = 0
    for _ in range(kills):
        pid = await wait_until_blocked(blocker, exclude=pid)
        assert await blocker.fetchval("SELECT pg_terminate_backend($1)", pid)
    await tx.rollback()
    outcome = await asyncio.wait_for(asyncio.gather(waiter, return_exceptions=True), 20)
    return journal, flusher, log, blocker, outcome[0]


async def test_writer_terminated_mid_round_is_resolved_and_retried_once(
    pg_url: str, tmp_path: Path
) -> None:
    journal, flusher, log, conn, outcome = await terminated_rounds(pg_url, tmp_path, kills=1)
    try:
        # The lease said "not committed", so the round ran once more, and landed once.
        assert outcome is None
        assert log.durable_end == log.log_end_offset == 2
        assert await conn.fetchval("SELECT next_offset FROM kgc_partition") == 2
        assert await db_bytes(conn, "t", 0) == local_bytes(log)
        assert journal.stats.errors == 1
    finally:
        await conn.close()
        await flusher.stop()
        await journal.close()


async def test_writer_terminated_twice_fails_the_waiters_not_the_lease(
    pg_url: str, tmp_path: Path
) -> None:
    journal, flusher, log, conn, outcome = await terminated_rounds(pg_url, tmp_path, kills=2)
    try:
        assert isinstance(outcome, FlushError) and not isinstance(outcome, NotOwnerError)
        assert log.log_end_offset == 1 and log.durable_end == 1
        assert await conn.fetchval("SELECT next_offset FROM kgc_partition") == 1
        # Still attached: the next round writes from offset 1.
        _b, last = log.append_records([(b"c", b"3")], timestamp_ms=3)
        await asyncio.wait_for(flusher.wait_durable(log, last), 10)
        assert await db_bytes(conn, "t", 0) == local_bytes(log)
    finally:
        await conn.close()
        await flusher.stop()
        await journal.close()


async def test_lost_answer_of_a_committed_round_resolves_to_landed(
    pg_server: Any, pg_url: str, tmp_path: Path
) -> None:
    # The statement commits but its answer never arrives (a network cut at the worst time):
    # reading the lease after reconnecting shows the round landed, so it is acknowledged.
    await make_leases(pg_url, "t", 1)
    proxy = SwallowingProxy("127.0.0.1", pg_server.port)
    await proxy.start()
    url = pg_url.replace(f":{pg_server.port}/", f":{proxy.port}/")
    journal = await started_journal(url, statement_timeout_ms=500)
    flusher = Flusher()
    log = attached_log(journal, tmp_path, "t", 0)
    try:
        _b, last = log.append_records([(b"a", b"1")], timestamp_ms=1)
        await asyncio.wait_for(flusher.wait_durable(log, last), 10)
        proxy.swallow_existing()
        _b, last = log.append_records([(b"b", b"2")], timestamp_ms=2)
        await asyncio.wait_for(flusher.wait_durable(log, last), 20)
        assert proxy.swallowed.is_set()  # the answer really was lost
        assert journal.stats.errors == 1  # ...and resolved from the lease
        assert log.durable_end == 2
        conn = await asyncpg.connect(pg_url)
        try:
            assert await db_bytes(conn, "t", 0) == local_bytes(log)
        finally:
            await conn.close()
    finally:
        await flusher.stop()
        await journal.close()
        await proxy.close()


async def test_trim_deletes_rows_below_and_raises_log_start(pg_url: str, tmp_path: Path) -> None:
    await make_leases(pg_url, "t", 1)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    log = attached_log(journal, tmp_path, "t", 0)
    for i in range(4):  # four rounds, four rows
        _b, last = log.append_records([(b"k", b"%d" % i)], timestamp_ms=i)
        await asyncio.wait_for(flusher.wait_durable(log, last), 10)
    journal.trim(log, 2)
    assert not await journal.maintain()  # off the commit path, on its own connection
    _b, last = log.append_records([(b"k", b"4")], timestamp_ms=5)
    await asyncio.wait_for(flusher.wait_durable(log, last), 10)
    conn = await asyncpg.connect(pg_url)
    try:
        bases = [
            r["base_offset"]
            for r in await conn.fetch("SELECT base_offset FROM kgc_record_log ORDER BY 1")
        ]
        assert bases == [2, 3, 4]
        assert await conn.fetchval("SELECT log_start_offset FROM kgc_partition") == 2
    finally:
        await conn.close()
        await flusher.stop()
        await journal.close()


class BrokenOnce:
    """The writer connection, whose next ``fetch`` raises what asyncpg raised there."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.broken = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    async def fetch(self, *args: Any, **kwargs: Any) -> Any:
        if self.broken:
            self.broken = False
            raise asyncpg.InternalClientError("cannot switch to state 12; another operation")
        return await self.conn.fetch(*args, **kwargs)


async def test_an_unexpected_client_error_fails_the_round_and_keeps_the_log_in_step(
    pg_url: str, tmp_path: Path
) -> None:
    """A PostgreSQL restart once left asyncpg's writer connection answering the next statement
    with InternalClientError ("another operation is in progress"). It escaped the journal's
    handlers: the waiters failed, but the log kept the batches the journal had already taken,
    so the next round of that partition was refused ("first batch at N+1, expected N")."""
    await make_leases(pg_url, "t", 1)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    log = attached_log(journal, tmp_path, "t", 0)
    try:
        _b, last = log.append_records([(b"k", b"v0")], timestamp_ms=1)
        await asyncio.wait_for(flusher.wait_durable(log, last), 10)
        journal._conn = BrokenOnce(journal._conn)
        _b, last = log.append_records([(b"k", b"v1")], timestamp_ms=2)
        # Handled as a lost connection: a new one reads the lease (the round did not land)
        # and runs the round again, safely (the CAS on next_offset).
        await asyncio.wait_for(flusher.wait_durable(log, last), 10)
        assert log.log_end_offset == log.durable_end == 2
        assert journal._conn is not None and not isinstance(journal._conn, BrokenOnce)
        # The partition goes on: the next append is made durable too.
        _b, last = log.append_records([(b"k", b"v2")], timestamp_ms=3)
        await asyncio.wait_for(flusher.wait_durable(log, last), 10)
        assert log.durable_end == 3
        check = await asyncpg.connect(pg_url)
        try:
            assert await db_bytes(check, "t", 0) == local_bytes(log)
        finally:
            await check.close()
    finally:
        await flusher.stop()
        await journal.close()
