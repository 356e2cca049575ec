"""materialize: a fresh local log filled from kgc_record_log holds exactly what was
journaled, never rows past the lease, and refuses a corrupt row by name."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from support.pgjournal_kit import attached_log, lease_row, make_leases, started_journal

from storage.interface import Lease
from storage.local.durability import Flusher
from storage.local.log import LogConfig, PartitionLog
from storage.postgres.materialize import MaterializeError, materialize
from storage.record_batch import encode_batch, set_base_offset

pytestmark = pytest.mark.postgres


def batches_of(log: PartitionLog) -> list[tuple[int, int, bytes]]:
    return [(h.base_offset, h.last_offset, data) for h, data in log.iter_batches(0)]


async def journal_some(
    pg_url: str, tmp_path: Path, partitions: int, rounds: int
) -> list[PartitionLog]:
    await make_leases(pg_url, "t", partitions)
    journal = await started_journal(pg_url)
    flusher = Flusher()
    logs = [attached_log(journal, tmp_path / "src", "t", p) for p in range(partitions)]
    for r in range(rounds):
        targets = []
        for p, log in enumerate(logs):
            for j in range(1 + (r + p) % 3):
                recs = [(b"k%d" % j, b"v%d.%d.%d" % (r, p, j))] * (1 + j)
                _b, last = log.append_records(recs, timestamp_ms=1000 + r)
            targets.append((log, last))
        await asyncio.wait_for(flusher.wait_durable_many(targets), 10)
    await flusher.stop()
    await journal.close()
    return logs


async def test_round_trip_same_batches_offsets_start_and_end(pg_url: str, tmp_path: Path) -> None:
    sources = await journal_some(pg_url, tmp_path, 3, 7)
    conn = await asyncpg.connect(pg_url)
    try:
        for p, src in enumerate(sources):
            lease = await lease_row(conn, "t", p)
            assert lease.next_offset == src.log_end_offset
            fresh = PartitionLog(tmp_path / "dst" / f"t-{p}", LogConfig())
            n = await materialize(conn, fresh, lease)
            assert n == len(batches_of(src))
            assert batches_of(fresh) == batches_of(src)
            assert (fresh.log_start_offset, fresh.log_end_offset) == (0, src.log_end_offset)
            assert fresh.read(src.log_end_offset - 1, 1 << 20)  # served like any local log
    finally:
        await conn.close()


async def test_rows_past_the_lease_are_never_served(pg_url: str, tmp_path: Path) -> None:
    (src,) = await journal_some(pg_url, tmp_path, 1, 3)
    conn = await asyncpg.connect(pg_url)
    try:
        lease = await lease_row(conn, "t", 0)
        # A row a fenced writer's ambiguous round could have left (must not exist anyway).
        stray = encode_batch(lease.next_offset, [(b"x", b"stray")], timestamp_ms=1)
        await conn.execute(
            "INSERT INTO kgc_record_log (topic, partition, base_offset, last_offset, epoch,"
            " record_count, max_timestamp, batch) VALUES ('t', 0, $1, $1, 4, 1, 1, $2)",
            lease.next_offset,
            stray,
        )
        fresh = PartitionLog(tmp_path / "dst" / "t-0", LogConfig())
        await materialize(conn, fresh, lease)
        assert batches_of(fresh) == batches_of(src)
        assert fresh.log_end_offset == lease.next_offset
    finally:
        await conn.close()


async def test_a_corrupt_row_names_topic_partition_and_offset(pg_url: str, tmp_path: Path) -> None:
    await journal_some(pg_url, tmp_path, 1, 4)
    conn = await asyncpg.connect(pg_url)
    try:
        base = await conn.fetchval("SELECT base_offset FROM kgc_record_log ORDER BY 1 OFFSET 2")
        # Flip one byte inside the CRC span of the row's first batch.
        await conn.execute(
            "UPDATE kgc_record_log SET batch = set_byte(batch, 70, get_byte(batch, 70) # 255)"
            " WHERE base_offset = $1",
            base,
        )
        lease = await lease_row(conn, "t", 0)
        fresh = PartitionLog(tmp_path / "dst" / "t-0", LogConfig())
        with pytest.raises(MaterializeError, match=rf"t-0: CRC mismatch .* offset {base}\b"):
            await materialize(conn, fresh, lease)
    finally:
        await conn.close()


async def test_a_log_whose_start_moved_starts_there(pg_url: str, tmp_path: Path) -> None:
    (src,) = await journal_some(pg_url, tmp_path, 1, 5)
    conn = await asyncpg.connect(pg_url)
    try:
        second = await conn.fetchval("SELECT base_offset FROM kgc_record_log ORDER BY 1 OFFSET 1")
        await conn.execute("DELETE FROM kgc_record_log WHERE base_offset < $1", second)
        await conn.execute("UPDATE kgc_partition SET log_start_offset = $1", second + 1)
        lease = await lease_row(conn, "t", 0)
        fresh = PartitionLog(tmp_path / "dst" / "t-0", LogConfig())
        await materialize(conn, fresh, lease)
        assert fresh.log_start_offset == second + 1
        assert fresh.log_end_offset == src.log_end_offset
        assert [b for b in batches_of(fresh)] == [b for b in batches_of(src) if b[1] >= second + 1]
        # Rows missing in the middle of the lease's range are an error, not a silent hole.
        await conn.execute("UPDATE kgc_partition SET log_start_offset = 0")
        lease = await lease_row(conn, "t", 0)
        await conn.execute("DELETE FROM kgc_record_log")
        empty = PartitionLog(tmp_path / "dst2" / "t-0", LogConfig())
        with pytest.raises(MaterializeError, match="t-0"):
            await materialize(conn, empty, lease)
    finally:
        await conn.close()


async def test_an_empty_partition_starts_at_the_lease(pg_url: str, tmp_path: Path) -> None:
    await make_leases(pg_url, "t", 1)
    conn = await asyncpg.connect(pg_url)
    try:
        await conn.execute("UPDATE kgc_partition SET next_offset = 40, log_start_offset = 40")
        lease = await lease_row(conn, "t", 0)
        fresh = PartitionLog(tmp_path / "t-0", LogConfig())
        assert await materialize(conn, fresh, lease) == 0
        assert (fresh.log_start_offset, fresh.log_end_offset) == (40, 40)
        # And a journal can take it from there.
        journal = await started_journal(pg_url)
        journal.attach(fresh, lease)
        flusher = Flusher()
        _b, last = fresh.append_records([(b"k", b"v")], timestamp_ms=1)
        await asyncio.wait_for(flusher.wait_durable(fresh, last), 10)
        assert last == 40 and fresh.durable_end == 41
        await flusher.stop()
        await journal.close()
    finally:
        await conn.close()


async def fill_offsets_like(conn: Any, records: int, per_row: int = 50) -> Lease:
    """``records`` one-record batches of ~100-byte records, ``per_row`` batches a row."""
    template = encode_batch(0, [(b"g" * 40, b"m" * 60)], timestamp_ms=1_700_000_000_000)
    size = len(template)
    rows = []
    for base in range(0, records, per_row):
        n = min(per_row, records - base)
        blob = b"".join(set_base_offset(template, base + i) for i in range(n))
        rows.append(("t", 0, base, base + n - 1, 5, n, 1_700_000_000_000, blob))
    await conn.copy_records_to_table(
        "kgc_record_log",
        records=rows,
        columns=[
            "topic",
            "partition",
            "base_offset",
            "last_offset",
            "epoch",
            "record_count",
            "max_timestamp",
            "batch",
        ],
    )
    await conn.execute("UPDATE kgc_partition SET next_offset = $1", records)
    assert size > 100
    return Lease("t", 0, 5, records, 0)


@pytest.mark.slow
async def test_one_million_offset_records_materialize_in_under_five_seconds(
    pg_url: str, tmp_path: Path
) -> None:
    await make_leases(pg_url, "t", 1)
    conn = await asyncpg.connect(pg_url)
    try:
        lease = await fill_offsets_like(conn, 1_000_000)
        fresh = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=100 << 20))
        started = time.perf_counter()
        n = await materialize(conn, fresh, lease)
        elapsed = time.perf_counter() - started
        assert n == 1_000_000 and fresh.log_end_offset == 1_000_000
        print(f"materialized 1,000,000 batches in {elapsed:.2f} s")
        assert elapsed < 5.0
    finally:
        await conn.close()
