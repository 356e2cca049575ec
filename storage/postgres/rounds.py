"""The journal's round statement: what one round writes, and its arguments.

How this works: ``PgJournal`` keeps a ``Part`` per attached log (its lease and what it
recorded since the last round began); a round captures each part's batches as a
``Round`` (rows of at most ``MAX_ROW_BYTES``, ``rows_of``) and runs ``ROUND_SQL`` once
with ``round_args``: a data-modifying CTE that advances each partition's ``next_offset``
where this node still holds the lease, inserts the batches of the partitions it accepted
into ``kgc_record_log``, and inserts the group history noted for them into
``kgc_group_history`` (``Part.history``: one value per offsets partition and round, see
``docs/history.md``), joined to the same accepted rows, so history lands exactly with its
offsets and a fenced node writes neither. A part with history but no batch (membership
changes without records) still takes part: its lease is checked with ``next_offset``
unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from storage.interface import PartitionLog
from storage.record_batch import iter_batches

__all__ = ["LEASES_SQL", "MAX_ROW_BYTES", "ROUND_SQL", "Part", "Round", "round_args", "rows_of"]

# A kgc_record_log row holds at most this many bytes of batches (one batch may exceed it).
MAX_ROW_BYTES = 1 << 20

ROUND_SQL = """
WITH p AS (
    SELECT * FROM unnest($3::text[], $4::int[], $5::int[], $6::bigint[], $7::bigint[])
        WITH ORDINALITY AS p(topic, partition, epoch, expected, new_next, i)
), accepted AS (
    UPDATE kgc_partition AS k SET next_offset = p.new_next
    FROM p
    WHERE k.topic = p.topic AND k.partition = p.partition
      AND k.owner_node = $1 AND k.owner_broker_epoch = $2
      AND k.epoch = p.epoch AND k.next_offset = p.expected
    RETURNING p.i, p.topic, p.partition, p.epoch
), inserted AS (
    INSERT INTO kgc_record_log
        (topic, partition, base_offset, last_offset, epoch, record_count, max_timestamp, batch)
    SELECT a.topic, a.partition, r.base_offset, r.last_offset, a.epoch,
           r.record_count, r.max_timestamp, r.batch
    FROM unnest($8::int[], $9::bigint[], $10::bigint[], $11::int[], $12::bigint[], $13::bytea[])
        AS r(i, base_offset, last_offset, record_count, max_timestamp, batch)
    JOIN accepted AS a ON a.i = r.i
), history AS (
    INSERT INTO kgc_group_history (offsets_partition, after_offset, written_ms, epoch, value)
    SELECT a.partition, h.after_offset, h.written_ms, a.epoch, h.value
    FROM unnest($14::int[], $15::bigint[], $16::bigint[], $17::bytea[])
        AS h(i, after_offset, written_ms, value)
    JOIN accepted AS a ON a.i = h.i
)
SELECT i FROM accepted
"""

LEASES_SQL = """
SELECT k.topic, k.partition, k.owner_node, k.owner_broker_epoch, k.epoch, k.next_offset
FROM kgc_partition AS k
JOIN unnest($1::text[], $2::int[]) AS q(topic, partition)
  ON k.topic = q.topic AND k.partition = q.partition
"""

# A history value noted for a round: (the log end it follows, written at ms, the value).
HistoryRow = tuple[int, int, bytes]


@dataclass(slots=True)
class Part:
    """An attached log: its lease and what it recorded since the last round began."""

    topic: str
    partition: int
    epoch: int
    expected: int  # the next_offset committed in the database
    pending: list[bytes] = field(default_factory=list)
    # Group history for kgc_group_history (an offsets partition's): what the round adds.
    history: list[HistoryRow] = field(default_factory=list)
    # Maintenance to run (see the module doc): the new log start, the cleaned offset.
    trim_before: int | None = None
    compact_upto: int | None = None


@dataclass(slots=True)
class Round:
    """One partition's share of a round statement."""

    log: PartitionLog
    part: Part
    expected: int
    new_next: int
    generation: int  # log.cut_backs when the round was captured
    rows: list[tuple[int, int, int, int, bytes]]  # base, last, count, max ts, bytes
    history: list[HistoryRow] = field(default_factory=list)


def rows_of(batches: Sequence[bytes]) -> tuple[list[tuple[int, int, int, int, bytes]], int, int]:
    """Group batches into rows of at most MAX_ROW_BYTES; returns (rows, first, next offset)."""
    rows: list[tuple[int, int, int, int, bytes]] = []
    cur: list[bytes] = []
    size = count = 0
    base = last = max_ts = -1
    first = -1
    for b in batches:
        for h, _s, _e in iter_batches(b):
            if first < 0:
                first = h.base_offset
            if cur and size + h.size > MAX_ROW_BYTES:
                rows.append((base, last, count, max_ts, b"".join(cur)))
                cur, size, count, max_ts = [], 0, 0, -1
            if not cur:
                base = h.base_offset
            elif h.base_offset != last + 1:
                raise ValueError(f"batch at {h.base_offset} does not follow offset {last}")
            cur.append(b)
            size += h.size
            count += h.records_count
            last = h.last_offset
            max_ts = max(max_ts, h.max_timestamp)
    if cur:
        rows.append((base, last, count, max_ts, b"".join(cur)))
    return rows, first, last + 1


def round_args(node_id: int, broker_epoch: int, batch: list[Round]) -> list[Any]:
    """ROUND_SQL's arguments for ``batch`` (a round's index is its position, from 1)."""
    topics, parts, epochs, expected, new_next = [], [], [], [], []
    ri: list[int] = []
    bases: list[int] = []
    lasts: list[int] = []
    counts: list[int] = []
    max_ts: list[int] = []
    blobs: list[bytes] = []
    hi: list[int] = []
    h_after: list[int] = []
    h_ms: list[int] = []
    h_values: list[bytes] = []
    for idx, r in enumerate(batch, start=1):
        topics.append(r.part.topic)
        parts.append(r.part.partition)
        epochs.append(r.part.epoch)
        expected.append(r.expected)
        new_next.append(r.new_next)
        for base, last, count, ts, blob in r.rows:
            ri.append(idx)
            bases.append(base)
            lasts.append(last)
            counts.append(count)
            max_ts.append(ts)
            blobs.append(blob)
        for after, ms, value in r.history:
            hi.append(idx)
            h_after.append(after)
            h_ms.append(ms)
            h_values.append(value)
    return [
        node_id,
        broker_epoch,
        topics,
        parts,
        epochs,
        expected,
        new_next,
        ri,
        bases,
        lasts,
        counts,
        max_ts,
        blobs,
        hi,
        h_after,
        h_ms,
        h_values,
    ]
