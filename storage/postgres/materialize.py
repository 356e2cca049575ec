"""Filling a fresh local log (the cache) from the PostgreSQL journal, at a takeover.

How this works: ``materialize(conn, log, lease)`` reads ``kgc_record_log`` rows of the
partition in keyset pages (``base_offset > $last ORDER BY base_offset LIMIT n``: short
queries, no cursor and no long snapshot holding back vacuum, notes §7.5), verifies every
batch's CRC and offsets, and writes each row's batches to the local log in one write
(``PartitionLog.restore_run``). The log starts at the first row kept (or at
``lease.log_start_offset`` when that is later: the log start is raised after), and ends at
``lease.next_offset``: rows at or beyond it can only come from an ambiguous round of a
writer that was fenced since (they must not exist, and are never served). The next page is
fetched while the current one is written. A page is sized to about 8 MiB of rows.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from storage.interface import Lease
from storage.record_batch import HEADER_SIZE, CorruptBatchError, iter_batches, verify_crc

if TYPE_CHECKING:
    from storage.local.log import PartitionLog

__all__ = ["MaterializeError", "materialize"]

_PAGE_BYTES = 8 << 20
_MIN_ROWS, _MAX_ROWS, _FIRST_ROWS = 8, 4096, 256

_PAGE_SQL = """
SELECT base_offset, last_offset, batch FROM kgc_record_log
WHERE topic = $1 AND partition = $2 AND base_offset > $3 AND base_offset < $4
  AND last_offset >= $5
ORDER BY base_offset
LIMIT $6
"""


class MaterializeError(RuntimeError):
    """The database's log of a partition cannot be trusted (a corrupt row, a hole)."""


async def materialize(conn: Any, log: PartitionLog, lease: Lease) -> int:
    """Fill the EMPTY ``log`` from ``kgc_record_log`` up to ``lease.next_offset``.

    ``conn`` is an asyncpg connection (a pool's). Returns the number of batches written.
    Raises MaterializeError naming topic/partition/offset for a corrupt row, an overlap,
    or a log that does not reach ``lease.next_offset``.
    """
    topic, partition, end = lease.topic, lease.partition, lease.next_offset
    name = f"{topic}-{partition}"
    started = False
    batches = 0
    limit = _FIRST_ROWS
    last = -1

    def fetch(after: int, n: int) -> asyncio.Task[list[Any]]:
        return asyncio.ensure_future(
            conn.fetch(_PAGE_SQL, topic, partition, after, end, lease.log_start_offset, n)
        )

    page_task = fetch(last, limit)
    while True:
        rows = await page_task
        if not rows:
            break
        last = int(rows[-1]["base_offset"])
        full = len(rows) == limit
        if full:
            total = sum(len(r["batch"]) for r in rows)
            limit = max(_MIN_ROWS, min(_MAX_ROWS, _PAGE_BYTES * len(rows) // max(total, 1)))
            page_task = fetch(last, limit)  # the next page travels while this one is written
        try:
            for row in rows:
                if not started:
                    log.start_at(min(int(row["base_offset"]), lease.log_start_offset))
                    started = True
                batches += _restore_row(log, name, row, end)
        except BaseException:
            if full:
                page_task.cancel()
            raise
        if not full:
            break
    if not started:
        if end > lease.log_start_offset:
            raise MaterializeError(
                f"{name}: no rows in the database for offsets {lease.log_start_offset}..{end - 1}"
            )
        log.start_at(end)
    if log.log_end_offset != end:
        raise MaterializeError(
            f"{name}: the database's log ends at offset {log.log_end_offset}, "
            f"the lease at {end} (rows are missing)"
        )
    if log.log_start_offset < lease.log_start_offset:
        log.delete_segments_before(lease.log_start_offset)
    return batches


def _restore_row(log: PartitionLog, name: str, row: Any, end: int) -> int:
    """Check one row's batches and write them to ``log``; returns how many."""
    data: bytes = row["batch"]
    base = int(row["base_offset"])
    expect = base
    if base < log.log_end_offset:
        raise MaterializeError(
            f"{name}: row at offset {base} overlaps the log end {log.log_end_offset}"
        )
    first = None
    count = 0
    records = 0
    max_ts = -1
    stop = len(data)
    try:
        for h, s, e in iter_batches(data):
            if h.base_offset >= end:
                stop = s  # past the lease: a fenced writer's round, never served
                break
            if h.base_offset != expect or h.next_offset > end:
                raise MaterializeError(
                    f"{name}: batch at offset {h.base_offset} in the row at {base} "
                    f"(expected offset {expect}, lease end {end})"
                )
            if not verify_crc(data, s, e):
                raise MaterializeError(
                    f"{name}: CRC mismatch in the batch at offset {h.base_offset} (row at {base})"
                )
            if first is None:
                first = h
            expect = h.next_offset
            records += h.records_count
            if h.max_timestamp > max_ts:
                max_ts = h.max_timestamp
            count += 1
            stop = e
        else:
            if stop != len(data):
                raise MaterializeError(f"{name}: truncated batch in the row at offset {base}")
    except CorruptBatchError as exc:
        raise MaterializeError(f"{name}: corrupt row at offset {base}: {exc}") from None
    if first is None:
        return 0
    if stop < len(data) and stop >= HEADER_SIZE:
        data = data[:stop]
    span = dataclasses.replace(
        first,
        batch_length=stop - 12,
        last_offset_delta=expect - 1 - first.base_offset,
        max_timestamp=max_ts,
        records_count=records,
    )
    log.restore_run(data, span)
    return count
