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
import struct
from typing import TYPE_CHECKING, Any

import crc32c

from storage.interface import Lease
from storage.record_batch import HEADER_SIZE, LOG_OVERHEAD, parse_header

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


# The v2 batch header (record_batch's layout); unpacked to a tuple, no header objects:
# at ~1 µs a batch, building one BatchHeader per batch would be most of the load time.
_HEAD = struct.Struct(">qiibIhiqqqhii")
_CRC_START = 21  # attributes onwards are covered by the CRC


def _restore_row(log: PartitionLog, name: str, row: Any, end: int) -> int:
    """Check one row's batches (framing, offsets, CRC) and write them to ``log``."""
    data: bytes = row["batch"]
    base = int(row["base_offset"])
    if base < log.log_end_offset:
        raise MaterializeError(
            f"{name}: row at offset {base} overlaps the log end {log.log_end_offset}"
        )
    view = memoryview(data)
    unpack = _HEAD.unpack_from
    n = len(data)
    pos = 0
    expect = base
    count = records = 0
    max_ts = -1
    while pos < n:
        if n - pos < HEADER_SIZE:
            raise MaterializeError(f"{name}: truncated batch in the row at offset {base}")
        (b_off, length, _ple, magic, crc, _a, delta, _bt, ts, _pid, _pe, _seq, recs) = unpack(
            data, pos
        )
        stop = pos + LOG_OVERHEAD + length
        if magic != 2 or stop > n or length < HEADER_SIZE - LOG_OVERHEAD or delta < 0:
            raise MaterializeError(
                f"{name}: corrupt batch at byte {pos} of the row at offset {base}"
            )
        if b_off >= end:
            break  # past the lease: a fenced writer's round, never served
        # Offsets only go up; a compacted row (storage.postgres.compaction) has gaps.
        if b_off < expect or b_off + delta >= end:
            raise MaterializeError(
                f"{name}: batch at offset {b_off} in the row at {base} "
                f"(expected offset {expect} or later, lease end {end})"
            )
        if crc32c.crc32c(view[pos + _CRC_START : stop]) != crc:
            raise MaterializeError(
                f"{name}: CRC mismatch in the batch at offset {b_off} (row at {base})"
            )
        expect = b_off + delta + 1
        records += recs
        if ts > max_ts:
            max_ts = ts
        count += 1
        pos = stop
    if count == 0:
        return 0
    if pos < n:
        data = data[:pos]
    span = dataclasses.replace(
        parse_header(data),
        batch_length=pos - LOG_OVERHEAD,
        last_offset_delta=expect - 1 - base,
        max_timestamp=max_ts,
        records_count=records,
    )
    log.restore_run(data, span)
    return count
