"""The audit's PostgreSQL source: ``kgc audit --storage-url postgresql://...`` (cluster mode).

How this works
--------------
In cluster mode the logs live in ``kgc_record_log`` (one row per partition and write round:
RecordBatch v2 bytes concatenated, byte for byte what a local segment holds), next to the
leases (``kgc_partition``: ``next_offset``, ``log_start_offset``, ``epoch``) and the catalog
(``kgc_topic``).  The job reads them with Spark's JDBC source and PostgreSQL's own driver
(Debian's ``/usr/share/java/postgresql.jar``), never with ``--packages``:

* ``OFFSETS_SQL``: every ``__consumer_offsets`` lease LEFT JOIN its rows, partitioned by
  ``partition`` (one range of offsets partitions per task, read in one query, so each
  partition's rows and its ``next_offset`` come from one snapshot even while kgc writes);
  ``decode_pg_batches`` is its ``mapInArrow`` function.  It sorts each partition's rows by
  offset, runs the checks only the database allows (``row_checks``) and decodes the rows
  with the file audit's decoder: consecutive rows are concatenated and decoded as ONE
  buffer (a row of a round holds a few records; decoding each alone costs ~0.5 ms of numpy
  set-up, ~90x the per-batch cost), each row a ``decode.Piece`` with its own S row and name
  ``pg:__consumer_offsets-7@<base_offset>``, so a row is audited like a small segment.  A
  row whose bytes are not whole batches is decoded alone, so its damage stays its own.
* ``CONTEXT_SQL`` (driver, small): the catalog, every lease's log start / end (lag needs no
  topic data) and a time line per topic partition from the ``last_offset`` and
  ``max_timestamp`` columns of its newest rows (the batches are not read), like the file
  audit's time line of the active segment.

The rows out are ``decode.SCHEMA`` rows, so ``stitch`` and the reports are shared with the
file audit.  Nothing here imports pyspark.

Why JDBC rather than PySpark's Python Data Source: the JDBC source already plans the
partitioned read (one range query per task), and hands ``mapInArrow`` Arrow batches with the
bytea as a binary column -- the same shape as ``binaryFile`` gives the file audit, so the
decoder, the routing shuffle and ``stitch`` are reused as they are; a Python Data Source would
need its own partition planning and paging code and a Python database driver on every
executor, for a measured 440-480k records/s against ~580k for ``mapInArrow``.
"""

from __future__ import annotations

import bisect
import gc
import struct
from collections.abc import Iterator
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import pyarrow as pa

from coordinator.audit.decode import OFFSETS_TOPIC, Piece, decode_offsets
from coordinator.audit.schema import SCHEMA, Row
from coordinator.audit.stitch import Context, TopicLog, row_name
from storage.record_batch import HEADER_SIZE, LOG_OVERHEAD
from storage.urls import redact_url

__all__ = [
    "CONTEXT_SQL",
    "DEFAULT_JDBC_JAR",
    "OFFSETS_SQL",
    "JdbcTarget",
    "decode_pg_batches",
    "jdbc_target",
    "pg_context",
    "redact_url",
    "row_checks",
    "row_name",
]

DEFAULT_JDBC_JAR = "/usr/share/java/postgresql.jar"
# Rows of one partition decoded as one buffer, up to about this many bytes.
CHUNK_BYTES = 64 << 20
# The time line of a topic partition: its newest rows, thinned to every fourth (<= 256 points,
# as the file audit's).
TIMELINE_ROWS = 1024
TIMELINE_STEP = 4

# One query per task: the lease's figures repeated on each of its rows (none: one row of
# nulls), so the checks against next_offset see the same snapshot as the rows.
OFFSETS_SQL = f"""(SELECT p.partition, p.log_start_offset, p.next_offset,
       r.base_offset, r.last_offset, r.epoch, r.record_count, r.batch,
       (extract(epoch FROM r.append_time) * 1000000)::bigint AS append_us
FROM kgc_partition p
LEFT JOIN kgc_record_log r ON r.topic = p.topic AND r.partition = p.partition
WHERE p.topic = '{OFFSETS_TOPIC}') kgc_offsets_rows"""

# kind C: (topic, partitions, topic id in hex) of the catalog; L: (topic, partition,
# log_start_offset, next_offset) of every lease; P: (topic, partition, max timestamp so far,
# next offset after the row, base offset of the oldest row of the time line).
CONTEXT_SQL = f"""SELECT 'C' AS kind, name AS topic, 0 AS partition,
       partitions::bigint AS a, 0::bigint AS b, 0::bigint AS c,
       replace(topic_id::text, '-', '') AS tid
FROM kgc_topic
UNION ALL
SELECT 'L', topic, partition, log_start_offset, next_offset, 0, NULL FROM kgc_partition
UNION ALL
SELECT 'P', p.topic, p.partition, x.ts, x.next_offset, x.since, NULL
FROM kgc_partition p
CROSS JOIN LATERAL (
    SELECT max(t.max_timestamp) OVER (ORDER BY t.base_offset) AS ts,
           t.last_offset + 1 AS next_offset,
           min(t.base_offset) OVER () AS since,
           row_number() OVER (ORDER BY t.base_offset DESC) AS back
    FROM (SELECT r.base_offset, r.last_offset, r.max_timestamp
          FROM kgc_record_log r
          WHERE r.topic = p.topic AND r.partition = p.partition
          ORDER BY r.base_offset DESC LIMIT {TIMELINE_ROWS}) t
) x
WHERE p.topic <> '{OFFSETS_TOPIC}' AND (x.back - 1) % {TIMELINE_STEP} = 0"""


class JdbcTarget(NamedTuple):
    """A ``postgresql://`` URL as the JDBC source takes it: URL, user and password apart."""

    url: str
    user: str | None
    password: str | None


def jdbc_target(storage_url: str) -> JdbcTarget:
    """``postgresql://user:pass@host:port/db?opts`` -> ``jdbc:postgresql://host:port/db?opts``.

    The credentials go to the driver as properties, not in the URL (which Spark may log).
    A Unix-socket URL (no host) cannot be reached from Spark's JVM: ValueError.
    """
    parts = urlsplit(storage_url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"--storage-url must be a postgresql:// URL, not {parts.scheme}://")
    query = parse_qsl(parts.query, keep_blank_values=True)
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    kept = []
    for k, v in query:
        if k == "user":
            user = v
        elif k == "password":
            password = v
        elif k == "host" and v.startswith("/"):
            raise ValueError("a Unix-socket storage URL cannot be read over JDBC: give host:port")
        else:
            kept.append((k, v))
    if not parts.hostname:
        raise ValueError("the storage URL names no host: JDBC needs host[:port]")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    database = parts.path.lstrip("/") or (user or "")
    url = f"jdbc:postgresql://{netloc}/{database}"
    if kept:
        url += "?" + urlencode(kept)
    return JdbcTarget(url, user, password)


_LENGTH = struct.Struct(">i")


def _whole_batches(buf: bytes) -> bool:
    """Whether ``buf`` is whole v2 batches end to end (header fields only, no CRC): then it
    can share a decode buffer with its neighbours without its damage spilling into them."""
    pos, n = 0, len(buf)
    while pos < n:
        if n - pos < HEADER_SIZE or buf[pos + 16] != 2:
            return False
        length = _LENGTH.unpack_from(buf, pos + 8)[0]
        if length < HEADER_SIZE - LOG_OVERHEAD:
            return False
        pos += LOG_OVERHEAD + length
    return pos == n


class _Lease(NamedTuple):
    log_start: int
    next_offset: int


class _LogRow(NamedTuple):
    base: int
    last: int
    epoch: int
    batch: bytes
    appended: int = 0  # append_time, in µs since the epoch


def _finding(opart: int, at: int, check: str, detail: str, log_offset: int) -> Row:
    name = row_name(opart, at)
    return {
        "kind": "F",
        "src": name,
        "opart": opart,
        "seg": at,
        "lo1": log_offset,
        "severity": "error",
        "chk": check,
        "detail": f"{name}: {detail}",
    }


def row_checks(opart: int, lease: _Lease | tuple[int, int], rows: list[_LogRow]) -> list[Row]:
    """What only the database shows about one offsets partition's rows (sorted by offset).

    Rows are appended in offset order, so ``append_time`` grows with the offset; a row
    appended after a row that follows it was *rewritten*: compaction
    (``storage.postgres.compaction.rewrite``) replaces the rows below one row it keeps by the
    cleaned batches, which may leave offsets out anywhere below that row.

    * ``offset_gap``: offsets with no row between two rows (``base_offset`` beyond the
      previous ``last_offset + 1``) where the row before is not rewritten, after the last row
      (below ``next_offset``: compaction keeps the last row, retention removes rows only
      below log_start_offset), or no row at all though ``next_offset`` is above
      log_start_offset.  Offsets missing before the first row are not flagged: compaction
      may remove every record below the row it keeps.  Rows that overlap are the stitch's
      overlapping_segments, as for files.
    * ``row_beyond_next_offset``: a row reaching ``next_offset`` or past it, which the fenced
      write (rows and ``next_offset`` in one statement) cannot leave.
    * ``partition_epoch_regression``: a row written under a lower lease epoch than an earlier
      offset's row (rewritten rows carry their batches' epoch and are left out): a stale
      owner wrote after its successor, which fencing must prevent.

    (That each batch's partitionLeaderEpoch equals its row's epoch is not checked: kgc's
    writer stores batches as produced and leaves that field as the producer set it.)
    """
    log_start, next_offset = lease
    out: list[Row] = []
    if not rows:
        if next_offset > log_start:
            out.append(
                _finding(
                    opart,
                    log_start,
                    "offset_gap",
                    f"no rows, but next_offset is {next_offset} and log_start_offset "
                    f"{log_start}: offsets {log_start}..{next_offset - 1} are missing",
                    log_start,
                )
            )
        return out
    # rewritten[i]: row i was appended after some row that follows it (compaction's)
    rewritten = [False] * len(rows)
    later = None
    for i in range(len(rows) - 1, -1, -1):
        rewritten[i] = later is not None and rows[i].appended > later
        later = rows[i].appended if later is None else min(later, rows[i].appended)
    reach: int | None = None  # the highest offset seen so far
    top_epoch: int | None = None
    for i, r in enumerate(rows):
        if reach is not None and r.base > reach + 1 and not rewritten[i - 1]:
            out.append(
                _finding(
                    opart,
                    r.base,
                    "offset_gap",
                    f"offsets {reach + 1}..{r.base - 1} have no row (after the previous row)",
                    reach + 1,
                )
            )
        if r.last >= next_offset:
            out.append(
                _finding(
                    opart,
                    r.base,
                    "row_beyond_next_offset",
                    f"row holds offsets {r.base}..{r.last} but the partition's next_offset "
                    f"is {next_offset}",
                    r.base,
                )
            )
        if not rewritten[i] and top_epoch is not None and r.epoch < top_epoch:
            out.append(
                _finding(
                    opart,
                    r.base,
                    "partition_epoch_regression",
                    f"row written at epoch {r.epoch} after a row at epoch {top_epoch}",
                    r.base,
                )
            )
        if not rewritten[i]:
            top_epoch = r.epoch if top_epoch is None else max(top_epoch, r.epoch)
        reach = r.last if reach is None else max(reach, r.last)
    assert reach is not None
    if reach + 1 < next_offset:
        out.append(
            _finding(
                opart,
                reach + 1,
                "offset_gap",
                f"offsets {reach + 1}..{next_offset - 1} have no row (next_offset is "
                f"{next_offset})",
                reach + 1,
            )
        )
    return out


def _decode_chunk(
    opart: int, rows: list[_LogRow], window: int, num_partitions: int, future_limit_ms: int
) -> list[Row]:
    """Decode consecutive rows as one buffer; each finding names the row it is about."""
    pieces: list[Piece] = []
    at = 0
    for r in rows:
        pieces.append(Piece(at, r.base, row_name(opart, r.base)))
        at += len(r.batch)
    buf = rows[0].batch if len(rows) == 1 else b"".join(r.batch for r in rows)
    out = decode_offsets(
        pieces[0].src,
        opart,
        rows[0].base,
        buf,
        window=window,
        num_partitions=num_partitions,
        future_limit_ms=future_limit_ms,
        pieces=pieces,
    )
    bases = [r.base for r in rows]
    for row in out:
        if row["kind"] == "F":
            lo = row["lo1"]
            i = 0 if lo is None else max(bisect.bisect_right(bases, lo) - 1, 0)
            row["src"] = pieces[i].src
            row["detail"] = f"{pieces[i].src}: {row['detail']}"
    return out


def _partition_rows(
    opart: int,
    lease: _Lease,
    rows: list[_LogRow],
    window: int,
    num_partitions: int,
    future_limit_ms: int,
) -> list[Row]:
    """All decoded rows of one offsets partition: the row checks, then its chunks."""
    out = row_checks(opart, lease, rows)
    chunk: list[_LogRow] = []
    size = 0
    for r in rows:
        if not _whole_batches(r.batch):
            if chunk:
                out += _decode_chunk(opart, chunk, window, num_partitions, future_limit_ms)
                chunk, size = [], 0
            out += _decode_chunk(opart, [r], window, num_partitions, future_limit_ms)
            continue
        chunk.append(r)
        size += len(r.batch)
        if size >= CHUNK_BYTES:
            out += _decode_chunk(opart, chunk, window, num_partitions, future_limit_ms)
            chunk, size = [], 0
    if chunk:
        out += _decode_chunk(opart, chunk, window, num_partitions, future_limit_ms)
    return out


def decode_pg_batches(
    batches: Iterator[pa.RecordBatch],
    *,
    window: int,
    num_partitions: int,
    future_limit_ms: int,
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function over ``OFFSETS_SQL``'s rows: ``decode.SCHEMA`` batches out.

    A task's input is whole offsets partitions (the JDBC source partitions by ``partition``)
    in no particular order; it is gathered and sorted first, then each partition is decoded.
    """
    gathered = list(batches)
    if not gathered:  # a range of partitions without leases
        return
    table = pa.Table.from_batches(gathered)
    if not table.num_rows:
        return
    table = table.sort_by([("partition", "ascending"), ("base_offset", "ascending")])
    gc_was_enabled = gc.isenabled()
    gc.disable()  # as decode.decode_batches: many short-lived tuples
    try:
        cols = [
            table.column(n).to_pylist()
            for n in ("partition", "log_start_offset", "next_offset", "base_offset")
        ]
        last_col, epoch_col, batch_col, appended_col = (
            table.column(n) for n in ("last_offset", "epoch", "batch", "append_us")
        )
        i, n = 0, table.num_rows
        while i < n:
            opart = int(cols[0][i])
            lease = _Lease(int(cols[1][i]), int(cols[2][i]))
            rows: list[_LogRow] = []
            while i < n and cols[0][i] == opart:
                base = cols[3][i]
                if base is not None:  # else: a lease without rows (LEFT JOIN)
                    rows.append(
                        _LogRow(
                            int(base),
                            int(last_col[i].as_py()),
                            int(epoch_col[i].as_py()),
                            batch_col[i].as_py() or b"",
                            int(appended_col[i].as_py()),
                        )
                    )
                i += 1
            out = _partition_rows(opart, lease, rows, window, num_partitions, future_limit_ms)
            if out:
                yield pa.RecordBatch.from_pydict(
                    {c: [r.get(c) for r in out] for c in SCHEMA.names}, schema=SCHEMA
                )
    finally:
        if gc_was_enabled:
            gc.enable()


def pg_context(
    rows: list[Any],
    *,
    now_ms: int,
    window: int,
    retention_ms: int,
    offsets_partitions: int | None,
) -> tuple[Context, dict[str, int]]:
    """The stitch's Context from ``CONTEXT_SQL``'s rows, and some counts for the summary.

    Lag comes from the leases (``next_offset`` is the log end, ``log_start_offset`` the
    start); the time line (before it, ``end_at`` answers the oldest row's base offset, as
    the file audit answers its active segment's).  The offsets partition count is
    ``offsets_partitions`` if given, else the catalog's, else the highest lease + 1
    (0: nothing to audit).
    """
    catalog: dict[str, int] = {}
    topic_ids: dict[str, str] = {}
    leases: dict[tuple[str, int], tuple[int, int]] = {}
    since: dict[tuple[str, int], int] = {}
    points: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for r in rows:
        kind, key = r["kind"], (str(r["topic"]), int(r["partition"]))
        if kind == "C":
            catalog[key[0]] = int(r["a"])
            if r["tid"]:
                topic_ids[key[0]] = str(r["tid"])
        elif kind == "L":
            leases[key] = (int(r["a"]), int(r["b"]))
        elif kind == "P":
            since[key] = int(r["c"])
            points.setdefault(key, []).append((int(r["a"]), int(r["b"])))
    topics: dict[tuple[str, int], TopicLog] = {}
    offsets_leases = 0
    for key, (log_start, next_offset) in leases.items():
        if key[0] == OFFSETS_TOPIC:
            offsets_leases = max(offsets_leases, key[1] + 1)
            continue
        topics[key] = TopicLog(
            log_start=log_start,
            log_end=next_offset,
            last_segment=since.get(key, log_start),
            timeline=tuple(sorted(points.get(key, []))),
        )
    num_partitions = offsets_partitions or catalog.get(OFFSETS_TOPIC) or offsets_leases
    ctx = Context(
        now_ms=now_ms,
        window=window,
        retention_ms=retention_ms,
        num_partitions=num_partitions,
        topics=topics,
        catalog=catalog,
        pieces="row",
        topic_ids=topic_ids,
    )
    return ctx, {"topic_partitions": len(topics), "offsets_leases": offsets_leases}
