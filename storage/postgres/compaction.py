"""Retention and compaction of ``kgc_record_log``: the database follows the local log.

How this works
--------------
In cluster mode the local ``PartitionLog`` is a cache of the partition's rows; retention
and the cleaner work on that cache, and ``PgJournal`` (``trim`` / ``compacted``) hands the
result to the two statements here, run on the journal's maintenance connection (never
the writer connection: a round never waits behind them).

* ``trim``: the log start moved. One short transaction deletes the rows wholly below the
  new start and raises ``kgc_partition.log_start_offset``; the UPDATE of the lease row is
  the last statement, conditional on the lease (owner node, broker epoch, epoch), so a
  node that lost the lease changes nothing (the transaction is rolled back).
* ``rewrite``: the cleaner finished a pass below ``upto``. The rows below ``cut`` are
  replaced by the cleaned batches of the local log (same offsets, rows of at most
  ``MAX_ROW_BYTES``, offsets may skip inside a row; ``epoch`` is the lease epoch the
  rewrite was written under, ``append_time`` its time, which is how the audit tells
  rewritten rows apart). ``cut`` is the base offset of the last row starting below
  ``upto``: that row is left as it is, so a row straddling ``upto`` is never split and
  the table's last offset (the log end materialize checks against the lease) never
  moves. Rows from ``cut`` on are never touched, so rounds committed meanwhile (always
  at or above the lease's ``next_offset`` >= ``cut``) cannot be lost.

Fencing without blocking appends: the DELETE and the INSERTs run first (their row
locks are on old rows no round touches); only then ``SELECT … FOR NO KEY UPDATE`` takes
the lease row, checked against the lease, and the transaction commits at once. The lease
row is therefore held for one round trip and a commit: a round of that partition waits at
most that long, and a takeover either commits before (the check fails and everything is
rolled back) or waits for the commit (and the new owner loads the rewritten rows). The
round statement's CAS on ``next_offset`` is unaffected: neither statement changes it.

Tombstones follow the cleaner's own rules (KIP-534 delete horizon, delete.retention.ms):
the rows hold exactly the cleaned batches, so loading the partition after a compaction
replays to the same latest value per key as the uncompacted log did.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from storage.record_batch import BatchHeader

__all__ = [
    "CleanedRow",
    "FencedError",
    "RewriteResult",
    "TrimResult",
    "cleaned_rows",
    "find_cut",
    "rewrite",
    "trim",
]

# A statement of the rewrite inserts at most this many bytes of rows (or _INSERT_ROWS).
_INSERT_BYTES = 16 << 20
_INSERT_ROWS = 2000

_LEASE = (
    "topic = $1 AND partition = $2 AND owner_node = $3 AND owner_broker_epoch = $4 AND epoch = $5"
)

_CUT_SQL = """
SELECT max(base_offset) FROM kgc_record_log
WHERE topic = $1 AND partition = $2 AND base_offset < $3
"""

_DELETE_BELOW_SQL = """
WITH d AS (
    DELETE FROM kgc_record_log
    WHERE topic = $1 AND partition = $2 AND base_offset < $3
    RETURNING octet_length(batch) AS n
)
SELECT count(*) AS rows, coalesce(sum(n), 0)::bigint AS bytes FROM d
"""

_INSERT_SQL = """
INSERT INTO kgc_record_log
    (topic, partition, base_offset, last_offset, epoch, record_count, max_timestamp, batch)
SELECT $1, $2, r.base_offset, r.last_offset, r.epoch, r.record_count, r.max_timestamp, r.batch
FROM unnest($3::bigint[], $4::bigint[], $5::int[], $6::int[], $7::bigint[], $8::bytea[])
    AS r(base_offset, last_offset, epoch, record_count, max_timestamp, batch)
"""

_FENCE_SQL = f"SELECT next_offset FROM kgc_partition WHERE {_LEASE} FOR NO KEY UPDATE"

_NEXT_OFFSET_SQL = f"SELECT next_offset FROM kgc_partition WHERE {_LEASE}"

_TRIM_DELETE_SQL = """
WITH d AS (
    DELETE FROM kgc_record_log
    WHERE topic = $1 AND partition = $2 AND last_offset < $3
    RETURNING octet_length(batch) AS n
)
SELECT count(*) AS rows, coalesce(sum(n), 0)::bigint AS bytes FROM d
"""

_RAISE_START_SQL = f"""
UPDATE kgc_partition SET log_start_offset = greatest(log_start_offset, $6::bigint)
WHERE {_LEASE}
RETURNING log_start_offset
"""


class FencedError(Exception):
    """The lease was not ours (any more) when the statement checked it: nothing changed."""


class CleanedRow(NamedTuple):
    """One ``kgc_record_log`` row of cleaned batches (offsets may have gaps inside)."""

    base_offset: int
    last_offset: int
    epoch: int
    record_count: int
    max_timestamp: int
    batch: bytes


@dataclass(frozen=True, slots=True)
class RewriteResult:
    topic: str
    partition: int
    cut: int  # rows below this offset were replaced
    rows_before: int
    bytes_before: int
    rows_after: int
    bytes_after: int


@dataclass(frozen=True, slots=True)
class TrimResult:
    topic: str
    partition: int
    log_start_offset: int  # the lease's log start after the trim
    rows_deleted: int
    bytes_deleted: int


def cleaned_rows(
    batches: Iterable[tuple[BatchHeader, bytes]], max_row_bytes: int, epoch: int
) -> list[CleanedRow]:
    """Group batches (in offset order) into rows of at most ``max_row_bytes`` (a larger
    batch gets a row of its own), written under lease ``epoch``."""
    rows: list[CleanedRow] = []
    cur: list[bytes] = []
    size = count = 0
    base = last = max_ts = -1

    def close() -> None:
        rows.append(CleanedRow(base, last, epoch, count, max_ts, b"".join(cur)))

    for h, data in batches:
        if cur and size + len(data) > max_row_bytes:
            close()
            cur, size, count, max_ts = [], 0, 0, -1
        if not cur:
            base = h.base_offset
        elif h.base_offset <= last:
            raise ValueError(f"batch at {h.base_offset} does not follow offset {last}")
        cur.append(data)
        size += len(data)
        count += h.records_count
        last = h.last_offset
        max_ts = max(max_ts, h.max_timestamp)
    if cur:
        close()
    return rows


async def find_cut(conn: Any, topic: str, partition: int, upto: int) -> int | None:
    """The base offset of the last row starting below ``upto`` (kept as it is), or None."""
    cut = await conn.fetchval(_CUT_SQL, topic, partition, upto)
    return None if cut is None else int(cut)


async def rewrite(
    conn: Any,
    *,
    topic: str,
    partition: int,
    node_id: int,
    broker_epoch: int,
    epoch: int,
    cut: int,
    rows: Sequence[CleanedRow],
) -> RewriteResult:
    """Replace the rows below ``cut`` by ``rows`` (all below ``cut``), fenced on the lease.

    One transaction on ``conn`` (see the module doc); raises FencedError (nothing
    changed) when the lease is not (owner node, broker epoch, epoch) at the end.
    """
    if any(r.last_offset >= cut for r in rows):
        raise ValueError(f"{topic}-{partition}: cleaned rows reach the kept row at {cut}")
    lease = (topic, partition, node_id, broker_epoch, epoch)
    async with conn.transaction():
        gone = await conn.fetchrow(_DELETE_BELOW_SQL, topic, partition, cut)
        i = 0
        while i < len(rows):
            j, size = i, 0
            while j < len(rows) and j - i < _INSERT_ROWS and (j == i or size < _INSERT_BYTES):
                size += len(rows[j].batch)
                j += 1
            chunk = rows[i:j]
            await conn.execute(
                _INSERT_SQL,
                topic,
                partition,
                [r.base_offset for r in chunk],
                [r.last_offset for r in chunk],
                [r.epoch for r in chunk],
                [r.record_count for r in chunk],
                [r.max_timestamp for r in chunk],
                [r.batch for r in chunk],
            )
            i = j
        # Last: the fence. The lease row stays locked only until the commit right after.
        next_offset = await conn.fetchval(_FENCE_SQL, *lease)
        if next_offset is None or next_offset < cut:
            raise FencedError(f"{topic}-{partition}: the lease at epoch {epoch} is not ours")
    return RewriteResult(
        topic,
        partition,
        cut,
        int(gone["rows"]),
        int(gone["bytes"]),
        len(rows),
        sum(len(r.batch) for r in rows),
    )


async def trim(
    conn: Any,
    *,
    topic: str,
    partition: int,
    node_id: int,
    broker_epoch: int,
    epoch: int,
    before: int,
) -> TrimResult:
    """Delete the rows wholly below ``before`` (at most the lease's ``next_offset``) and
    raise ``log_start_offset`` to it, fenced on the lease (FencedError: nothing changed)."""
    lease = (topic, partition, node_id, broker_epoch, epoch)
    async with conn.transaction():
        next_offset = await conn.fetchval(_NEXT_OFFSET_SQL, *lease)
        if next_offset is None:
            raise FencedError(f"{topic}-{partition}: the lease at epoch {epoch} is not ours")
        bound = min(before, int(next_offset))
        gone = await conn.fetchrow(_TRIM_DELETE_SQL, topic, partition, bound)
        start = await conn.fetchval(_RAISE_START_SQL, *lease, bound)
        if start is None:
            raise FencedError(f"{topic}-{partition}: the lease at epoch {epoch} is not ours")
    return TrimResult(topic, partition, int(start), int(gone["rows"]), int(gone["bytes"]))
