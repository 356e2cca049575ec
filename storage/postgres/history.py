"""kgc_group_history's reads, retention and merge (its rows are inserted by the journal's
round).

How this works: a group's history is the rows of its ``__consumer_offsets`` partition
(schema versions 3 and 4, ``storage.postgres.schema``); ``values`` reads those whose time
span meets a time window (a round's row was written at ``written_ms``; a merged row spans
``first_written_ms`` to ``written_ms``) through the (offsets_partition, written_ms) index
and returns them in the partition's log order (``after_offset``: the order the owners
wrote them, whatever their clocks), on the pool's connections, never the journal's writer.
``delete_before`` is the retention: a bounded DELETE per partition, repeated until nothing
is left below the cut, so one pass never holds a long transaction; autovacuum then makes
the space reusable. A merged row goes only once its last turn is past the cut. Reads and
deletes need no lease: rows are immutable and old ones are nobody's to fence.

``merge`` replaces runs of a partition's round rows written before a cut by one row each,
whose value ``combine`` makes of theirs (``coordinator.history.codec.merge``): a round's
row pays PostgreSQL's row header, an index entry and a value compressed alone; a merged
row holds a few minutes of turns compressed together. A run is a stretch of the
partition's unmerged rows in log order (``after_offset, written_ms``), starting at the
first and stopping before the first row not old enough, of at most ``MERGE_MAX_ROWS`` rows,
``MERGE_MAX_BYTES`` of values and ``max_span_ms`` of written time; the merged row takes
the last row's ``after_offset``, the run's last time as ``written_ms`` and its first as
``first_written_ms``, so it sorts where its rows did. One transaction per run, on a pool
connection: read the run's values, delete exactly those rows (the DELETE's RETURNING must
match what was read, else a concurrent retention or insert changed them: rolled back),
insert the merged row, and last, as ``storage.postgres.compaction`` does, lock the lease
row checked against the lease (``SELECT ... FOR NO KEY UPDATE``): a node that lost the
partition changes nothing (``FencedError``, rolled back), and a takeover waits for the
commit, one round trip. An aborted transaction (a crash, a lost connection) leaves the
rows as they were: the merge is all or nothing. The commit path is untouched: rounds
insert as before, and no run ever includes a row a round may still insert.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from storage.postgres.compaction import FencedError
from storage.records.offsets import OFFSETS_TOPIC

__all__ = [
    "DELETE_BATCH_ROWS",
    "MERGE_MAX_BYTES",
    "MERGE_MAX_ROWS",
    "MergeResult",
    "PgHistoryRows",
    "runs",
]

log = logging.getLogger("kgc.storage.postgres")

# Rows one retention DELETE removes at most (one short transaction each).
DELETE_BATCH_ROWS = 10_000
# A merged row replaces at most this many rows, of at most this many bytes of values
# together (a read of a group decompresses the whole rows of its partition in the window).
MERGE_MAX_ROWS = 20_000
MERGE_MAX_BYTES = 4 << 20
# Unmerged rows one look takes (a backlog is merged over several looks, at most
# _MERGE_SCANS a merge: the rest waits for the next).
_MERGE_SCAN_ROWS = 50_000
_MERGE_SCANS = 8

_VALUES_SQL = """
SELECT value FROM kgc_group_history
WHERE offsets_partition = $1 AND written_ms >= $2
  AND coalesce(first_written_ms, written_ms) <= $3
ORDER BY after_offset, written_ms
"""

_START_SQL = """
SELECT min(coalesce(first_written_ms, written_ms)) FROM kgc_group_history
WHERE offsets_partition = $1
"""

_DELETE_SQL = """
DELETE FROM kgc_group_history WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM kgc_group_history
    WHERE offsets_partition = $1 AND written_ms < $2
    LIMIT $3))
"""

_UNMERGED_SQL = """
SELECT after_offset, written_ms, epoch, octet_length(value) AS n FROM kgc_group_history
WHERE offsets_partition = $1 AND first_written_ms IS NULL AND written_ms >= $2
ORDER BY after_offset, written_ms
LIMIT $3
"""

# A run: the unmerged rows of a partition from (after, ms) to (after, ms), in log order.
_RUN = """
offsets_partition = $1 AND first_written_ms IS NULL
  AND written_ms BETWEEN $2 AND $3
  AND (after_offset, written_ms) >= ($4, $5) AND (after_offset, written_ms) <= ($6, $7)
"""

_RUN_VALUES_SQL = f"""
SELECT after_offset, written_ms, epoch, value FROM kgc_group_history WHERE {_RUN}
ORDER BY after_offset, written_ms
"""

_RUN_DELETE_SQL = f"""
DELETE FROM kgc_group_history WHERE {_RUN}
RETURNING after_offset, written_ms, epoch, octet_length(value) AS n
"""

_MERGED_INSERT_SQL = """
INSERT INTO kgc_group_history
    (offsets_partition, after_offset, written_ms, epoch, value, first_written_ms)
VALUES ($1, $2, $3, $4, $5, $6)
"""

_FENCE_SQL = """
SELECT next_offset FROM kgc_partition
WHERE topic = $1 AND partition = $2 AND owner_node = $3 AND owner_broker_epoch = $4
  AND epoch = $5
FOR NO KEY UPDATE
"""

_INT64_MAX = 2**63 - 1

# (after_offset, written_ms, epoch, value bytes): a row as a run names it.
_Row = tuple[int, int, int, int]


class MergeResult(NamedTuple):
    """What one ``merge`` of a partition did."""

    rows_before: int  # round rows replaced
    rows_after: int  # merged rows written
    bytes_before: int
    bytes_after: int
    since_ms: int | None  # the next merge of the partition looks at rows from this time on


class PgHistoryRows:
    """``coordinator.history.table.HistoryRows`` on an asyncpg pool."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    async def values(self, offsets_partition: int, from_ms: int, to_ms: int | None) -> list[bytes]:
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                _VALUES_SQL, offsets_partition, from_ms, _INT64_MAX if to_ms is None else to_ms
            )
        return [bytes(r["value"]) for r in rows]

    async def start_ms(self, offsets_partition: int) -> int | None:
        async with self.pool.acquire() as conn:
            found = await conn.fetchval(_START_SQL, offsets_partition)
        return None if found is None else int(found)

    async def delete_before(self, offsets_partitions: list[int], before_ms: int) -> int:
        deleted = 0
        async with self.pool.acquire() as conn:
            for p in offsets_partitions:
                while True:
                    status = await conn.execute(_DELETE_SQL, p, before_ms, DELETE_BATCH_ROWS)
                    n = int(status.split()[-1])
                    deleted += n
                    if n < DELETE_BATCH_ROWS:
                        break
        return deleted

    async def merge(
        self,
        offsets_partition: int,
        lease: tuple[int, int, int],
        before_ms: int,
        max_span_ms: int,
        combine: Callable[[list[bytes]], bytes],
        since_ms: int | None = None,
    ) -> MergeResult:
        """Merge the partition's round rows written before ``before_ms`` (see the module
        doc), fenced on ``lease`` (node id, broker epoch, lease epoch): FencedError when it
        is not held (that run changed nothing). ``since_ms``: the rows before it were
        looked at already (``MergeResult.since_ms`` of the last merge)."""
        before = after = bytes_before = bytes_after = 0
        since = since_ms
        async with self.pool.acquire() as conn:
            for _scan in range(_MERGE_SCANS):
                found = await conn.fetch(
                    _UNMERGED_SQL,
                    offsets_partition,
                    -_INT64_MAX if since is None else since,
                    _MERGE_SCAN_ROWS,
                )
                rows: list[_Row] = [(r[0], r[1], r[2], r[3]) for r in found]
                old = 0
                while old < len(rows) and rows[old][1] < before_ms:
                    old += 1
                for run in runs(rows[:old], max_span_ms):
                    if len(run) < 2:
                        continue  # nothing to gain
                    try:
                        size = await _merge_run(conn, offsets_partition, lease, run, combine)
                    except _Changed as exc:  # merged at the next pass, from the same place
                        log.info("%s", exc)
                        return MergeResult(before, after, bytes_before, bytes_after, since)
                    except ValueError as exc:  # a value that does not decode: left as it is
                        log.error("history rows of offsets partition %d not merged: %s",
                                  offsets_partition, exc)  # fmt: skip
                        continue
                    before += len(run)
                    after += 1
                    bytes_before += sum(r[3] for r in run)
                    bytes_after += size
                # The next merge starts at the first row left (a row a round adds later
                # is written later on this clock; a new owner starts without a bound).
                left = rows[old:]
                if left:
                    since = min(r[1] for r in left)
                elif rows:
                    since = max(r[1] for r in rows)
                if len(rows) < _MERGE_SCAN_ROWS or old == 0:
                    break
        return MergeResult(before, after, bytes_before, bytes_after, since)


def runs(rows: Sequence[_Row], max_span_ms: int) -> list[list[_Row]]:
    """``rows`` (unmerged, in log order, all old enough) cut into runs of at most
    ``MERGE_MAX_ROWS`` rows, ``MERGE_MAX_BYTES`` of values and ``max_span_ms`` of written
    time; a run ends only where the next row sorts after the merged row would (its key,
    the last row's after_offset and the run's last time), so the merged row keeps the
    rows' place in the log order even when owners' clocks differ."""
    out: list[list[_Row]] = []
    i = 0
    while i < len(rows):
        run = [rows[i]]
        low = high = rows[i][1]
        size = rows[i][3]
        j = i + 1
        while j < len(rows):
            after, ms, _epoch, n = rows[j]
            key_next = (after, ms)
            must = key_next <= (run[-1][0], high)  # it would sort before the merged row
            fits = (
                len(run) < MERGE_MAX_ROWS
                and size + n <= MERGE_MAX_BYTES
                and max(high, ms) - min(low, ms) <= max_span_ms
            )
            if not (must or fits):
                break
            run.append(rows[j])
            low, high, size = min(low, ms), max(high, ms), size + n
            j += 1
        out.append(run)
        i = j
    return out


async def _merge_run(
    conn: Any,
    p: int,
    lease: tuple[int, int, int],
    run: list[_Row],
    combine: Callable[[list[bytes]], bytes],
) -> int:
    """Replace ``run`` by one merged row in one transaction; the merged value's bytes."""
    low = min(r[1] for r in run)
    high = max(r[1] for r in run)
    bounds = (p, low, high, run[0][0], run[0][1], run[-1][0], run[-1][1])
    async with conn.transaction():
        found = await conn.fetch(_RUN_VALUES_SQL, *bounds)
        values = [bytes(r["value"]) for r in found]
        read = [
            (r["after_offset"], r["written_ms"], r["epoch"], len(v))
            for r, v in zip(found, values, strict=True)
        ]
        if read != list(run):
            raise _Changed(f"history rows of offsets partition {p} changed before the merge")
        merged = combine(values)
        gone = await conn.fetch(_RUN_DELETE_SQL, *bounds)
        if sorted(tuple(r) for r in gone) != sorted(run):
            raise _Changed(f"history rows of offsets partition {p} changed during the merge")
        await conn.execute(_MERGED_INSERT_SQL, p, run[-1][0], high, lease[2], merged, low)
        # Last: the fence. The lease row stays locked only until the commit right after.
        if await conn.fetchval(_FENCE_SQL, OFFSETS_TOPIC, p, *lease) is None:
            raise FencedError(
                f"{OFFSETS_TOPIC}-{p}: the lease at epoch {lease[2]} is not ours: no merge"
            )
    return len(merged)


class _Changed(Exception):
    """A run's rows changed between the look and the merge (rolled back; merged later)."""
