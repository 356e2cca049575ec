"""The audit's third job: each group's lag and commit rate over time, from its kept history.

How this works: kgc keeps every change of a group's committed offsets in the log
``__kgc_group_history`` (``docs/history.md``; ``coordinator/history/codec.py`` is the value
format), in cluster mode in the table ``kgc_group_history`` (one such value a row). The
segments go through ``binaryFile`` and ``mapInArrow(decode_history)`` like the offsets log's,
the table's rows through the JDBC source and ``decode_history_values``: every value's offset
changes become a row (group, topic, partition, time, offset, commits: the change itself plus the unchanged
commits it carries, counted at the change's time). Spark sums the commits and keeps the
last offset of each (group, topic, partition, time bucket); the driver gets those few rows
back and ``series`` builds, per group and bucket, the commit rate (commits per minute) and
the lag: for each partition the log end offset at the bucket's end
(``stitch.TopicLog.end_at``, from the time line of the partition's newest segment) less its
last committed offset by then, summed over the group's partitions. The window is the
retained history's: from its first entry to the audit's time, in ``BUCKETS`` equal steps.

A value that does not decode is counted (``bad_values``), not fatal: the rest of the
history still draws. Values are read as written, so an admin's deletes end a partition's
line (its lag is not counted after it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from coordinator.history.codec import HistoryFormatError, decode
from coordinator.history.model import DELETED, HISTORY_TOPIC, OffsetHistoryEntry
from storage.record_batch import (
    CorruptBatchError,
    UnsupportedCompressionError,
    decode_records,
    iter_batches,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from coordinator.audit.stitch import TopicLog

__all__ = [
    "BUCKETS",
    "HISTORY_SCHEMA",
    "HISTORY_SQL",
    "HISTORY_TOPIC",
    "SPARK_SCHEMA",
    "GroupSeries",
    "decode_history",
    "decode_history_values",
    "from_segments",
    "from_table",
    "group_history",
    "history_rows",
    "series",
    "value_rows",
]

BUCKETS = 120
HISTORY_SCHEMA = pa.schema(
    [
        ("group", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("time_ms", pa.int64()),
        ("offset", pa.int64()),
        ("commits", pa.int64()),
    ]
)
SPARK_SCHEMA = (
    "group string, topic string, partition int, time_ms bigint, offset bigint, commits bigint"
)
# the cluster's history: one codec value a row (``docs/history.md``, schema version 3; a
# merged row's value, version 4, holds several turns and decodes the same way)
HISTORY_SQL = "(SELECT value FROM kgc_group_history) kgc_history_rows"
_BAD = "__bad_value__"  # a row counting a value (or batch) that did not decode


@dataclass(slots=True)
class GroupSeries:
    """One group's charts: bucket end times, lag and commits per minute at each."""

    group: str
    times_ms: list[int] = field(default_factory=list)
    lag: list[int | None] = field(default_factory=list)
    commit_rate: list[float] = field(default_factory=list)
    partitions: int = 0
    commits: int = 0


Row = tuple[str, str, int, int, int, int]


def value_rows(value: bytes) -> Iterator[Row]:
    """(group, topic, partition, time_ms, offset, commits) of every offset change in one
    history value; one that does not decode gives one ``_BAD`` row."""
    try:
        entries = decode(value)
    except HistoryFormatError:
        yield (_BAD, "", 0, 0, 0, 0)
        return
    for e in entries:
        if isinstance(e, OffsetHistoryEntry):
            yield (e.group_id, e.topic, e.partition, e.timestamp_ms, e.offset, 1 + e.unchanged)


def history_rows(content: bytes) -> Iterator[Row]:
    """``value_rows`` of every record of one history segment; a batch that does not decode
    gives one ``_BAD`` row."""
    try:
        for _h, start, end in iter_batches(content):
            try:
                records = decode_records(content[start:end])
            except (CorruptBatchError, UnsupportedCompressionError):
                yield (_BAD, "", 0, 0, 0, 0)
                continue
            for r in records:
                if r.value is not None:
                    yield from value_rows(r.value)
    except CorruptBatchError:
        yield (_BAD, "", 0, 0, 0, 0)


def _arrow(rows: list[Row]) -> pa.RecordBatch:
    cols = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(cols, HISTORY_SCHEMA, strict=True)],
        schema=HISTORY_SCHEMA,
    )


def decode_history(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function of segments: binaryFile batches in, ``HISTORY_SCHEMA``
    batches out."""
    for batch in batches:
        contents = batch.column("content")
        for i in range(batch.num_rows):
            rows = list(history_rows(contents[i].as_py() or b""))
            if rows:
                yield _arrow(rows)


def decode_history_values(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function of the cluster's table: batches of its ``value`` column
    (one codec value a row) in, ``HISTORY_SCHEMA`` batches out."""
    for batch in batches:
        rows = [r for v in batch.column("value").to_pylist() if v for r in value_rows(v)]
        if rows:
            yield _arrow(rows)


def series(
    rows: list[tuple[str, str, int, int, int, int]],
    topics: dict[tuple[str, int], TopicLog],
    start_ms: int,
    end_ms: int,
    buckets: int = BUCKETS,
) -> list[GroupSeries]:
    """Per group, its lag and commit rate in ``buckets`` steps from ``start_ms`` to
    ``end_ms``, from rows (group, topic, partition, bucket, last offset, commits) of the
    bucketed history (bucket i ends at ``start_ms + (i + 1) * step``)."""
    step = max(1, -(-(end_ms - start_ms) // buckets))
    per_group: dict[str, dict[tuple[str, int], dict[int, tuple[int, int]]]] = {}
    for group, topic, part, bucket, offset, commits in rows:
        per_group.setdefault(group, {}).setdefault((topic, part), {})[bucket] = (offset, commits)
    out = []
    minutes = step / 60_000
    for group in sorted(per_group):
        tps = per_group[group]
        s = GroupSeries(group, partitions=len(tps))
        committed: dict[tuple[str, int], int] = {}
        for b in range(buckets):
            t_end = start_ms + (b + 1) * step
            commits = 0
            for tp, by_bucket in tps.items():
                if b in by_bucket:
                    offset, n = by_bucket[b]
                    commits += n
                    if offset == DELETED:
                        committed.pop(tp, None)
                    else:
                        committed[tp] = offset
            lag = _lag(committed, topics, t_end)
            s.times_ms.append(min(t_end, end_ms))
            s.lag.append(lag)
            s.commit_rate.append(round(commits / minutes, 3))
            s.commits += commits
        out.append(s)
    return out


def _lag(
    committed: dict[tuple[str, int], int], topics: dict[tuple[str, int], TopicLog], at_ms: int
) -> int | None:
    """The summed lag of the committed offsets at ``at_ms``; None where none is known, or
    where a partition's log end then is not: before the time line of its newest segment
    when older segments precede it (their records' times are not read), so the chart has a
    gap there rather than a lag counted against a later log end."""
    total = None
    for tp, offset in committed.items():
        log = topics.get(tp)
        if log is None:
            continue
        if log.timeline and at_ms < log.timeline[0][0] and log.last_segment > log.log_start:
            return None
        total = (total or 0) + max(0, log.end_at(at_ms) - offset)
    return total


def from_segments(spark: SparkSession, paths: list[str]) -> DataFrame:
    """The rows of the history segments ``paths`` (a data directory's)."""
    spark.conf.set("spark.sql.files.openCostInBytes", "0")
    return (
        spark.read.format("binaryFile")
        .load(paths)
        .select("path", "content")
        .mapInArrow(decode_history, SPARK_SCHEMA)
    )


def from_table(rows: DataFrame) -> DataFrame:
    """The rows of the cluster's table ``kgc_group_history`` (read as ``HISTORY_SQL``)."""
    return rows.select("value").mapInArrow(decode_history_values, SPARK_SCHEMA)


def group_history(
    decoded: DataFrame, topics: dict[tuple[str, int], TopicLog], now_ms: int
) -> dict[str, Any]:
    """Job 3: the history's rows (``from_segments``, ``from_table``) bucketed by Spark, the
    series built on the driver. Returns ``{start_ms, end_ms, step_ms, groups, bad_values}``."""
    from pyspark.sql import functions as F

    decoded = decoded.cache()
    try:
        good = F.col("group") != _BAD
        first = decoded.agg(  # one job: where the window starts, and what did not decode
            F.min(F.when(good, F.col("time_ms"))).alias("start"),
            F.count(F.when(good, 1)).alias("n"),
            F.count(F.when(~good, 1)).alias("bad"),
        ).collect()[0]
        bad = int(first["bad"])
        if not first["n"]:
            return {"start_ms": now_ms, "end_ms": now_ms, "step_ms": 0, "groups": [],
                    "bad_values": bad}  # fmt: skip
        start = int(first["start"])
        end = max(now_ms, start + 1)
        step = max(1, -(-(end - start) // BUCKETS))
        bucketed = (
            decoded.where(F.col("group") != _BAD)
            .withColumn(
                "bucket", F.least(F.lit(BUCKETS - 1), F.floor((F.col("time_ms") - start) / step))
            )
            .groupBy("group", "topic", "partition", "bucket")
            .agg(
                F.max_by("offset", F.struct("time_ms")).alias("offset"),
                F.sum("commits").alias("commits"),
            )
            .collect()
        )
    finally:
        decoded.unpersist()
    rows = [
        (r["group"], r["topic"], int(r["partition"]), int(r["bucket"]), int(r["offset"]),
         int(r["commits"]))
        for r in bucketed
    ]  # fmt: skip
    return {
        "start_ms": start,
        "end_ms": end,
        "step_ms": step,
        "groups": series(rows, topics, start, end),
        "bad_values": bad,
    }
