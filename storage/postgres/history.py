"""kgc_group_history's reads and retention (its rows are inserted by the journal's round).

How this works: a group's history is the rows of its ``__consumer_offsets`` partition
(schema version 3, ``storage.postgres.schema``); ``values`` reads those written in a time
window through the (offsets_partition, written_ms) index and returns them in the
partition's log order (``after_offset``: the order the owners wrote them, whatever their
clocks), on the pool's connections, never the journal's writer. ``delete_before`` is the
retention: a bounded DELETE per partition, repeated until nothing is left below the cut,
so one pass never holds a long transaction; autovacuum then makes the space reusable.
Reads and deletes need no lease: rows are immutable and old ones are nobody's to fence.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DELETE_BATCH_ROWS", "PgHistoryRows"]

# Rows one retention DELETE removes at most (one short transaction each).
DELETE_BATCH_ROWS = 10_000

_VALUES_SQL = """
SELECT value FROM kgc_group_history
WHERE offsets_partition = $1 AND written_ms >= $2 AND written_ms <= $3
ORDER BY after_offset, written_ms
"""

_START_SQL = "SELECT min(written_ms) FROM kgc_group_history WHERE offsets_partition = $1"

_DELETE_SQL = """
DELETE FROM kgc_group_history WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM kgc_group_history
    WHERE offsets_partition = $1 AND written_ms < $2
    LIMIT $3))
"""

_INT64_MAX = 2**63 - 1


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
