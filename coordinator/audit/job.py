"""The Spark side of the audit: list, decode on the executors, stitch, check, report.

How this works
--------------
1. *List* (one cheap job): ``binaryFile`` over explicit globs of the data directory, selecting
   only ``path`` and ``length`` so no content is read.  Spark's file sources skip names that
   start with ``_`` or ``.`` in recursive lookups, hence globs rather than ``recursiveFileLookup``
   (``__consumer_offsets-N`` would vanish).  From the names alone the driver learns the offsets
   partition count, which topic segment is the last of its partition and the lowest segment base
   of each partition.  No file is opened on the driver, so HDFS/S3 URIs work the same way.
2. *Decode* (one job, one task per file): every offsets segment, the last segment of every topic
   partition, the ``log-start-offset`` checkpoints and ``topics.json`` go through
   ``binaryFile`` + ``mapInArrow(decode.decode_batches)``; the decoder combines per segment (see
   ``decode``) and the small result is cached.
3. *Stitch and check* with DataFrame operations: per key, segments ordered by base offset give
   the cross-segment checks (a rewind or timestamp/epoch regression at a segment boundary,
   tombstones with no earlier record, overlapping segments), the last segment gives the live
   committed offset, and joins with the topic logs give lag and log-start/log-end checks.
   Burrow's rules are evaluated with SQL higher-order functions over the last ``window``
   commits, with the lag at each commit estimated from the topic's time line.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from coordinator.audit.decode import (
    CATALOG_NAME,
    CHECKPOINT_NAME,
    OFFSETS_TOPIC,
    SPARK_SCHEMA,
    classify_path,
    decode_batches,
)
from coordinator.audit.stitch import OUT_SPARK_SCHEMA, Context, TopicLog, stitch_table

__all__ = [
    "SEVERITY_ORDER",
    "STATUS_ORDER",
    "AuditError",
    "AuditOptions",
    "AuditResult",
    "run_audit",
]

STATUS_ORDER = ["OK", "WARN", "STALL", "STOP", "REWIND"]
SEVERITY_ORDER = ["info", "warn", "error"]
_KEY = ["grp", "topic", "part"]

FINDINGS_COLUMNS = [
    "severity",
    "check",
    "group",
    "topic",
    "partition",
    "log_offset",
    "detail",
    "offsets_partition",
]
_FINDINGS_DDL = (
    "severity string, `check` string, `group` string, topic string, `partition` int, "
    "log_offset bigint, detail string, offsets_partition int"
)
PARTITION_COLUMNS = [
    "group",
    "topic",
    "partition",
    "committed_offset",
    "log_end_offset",
    "lag",
    "leader_epoch",
    "last_commit_ms",
    "commit_count",
    "status",
    "log_start_offset",
    "offsets_partition",
    "first_commit_ms",
    "record_offset",
]
_STATUS_RANK_SQL = (
    "CASE status WHEN 'OK' THEN 0 WHEN 'WARN' THEN 1 WHEN 'STALL' THEN 2 "
    "WHEN 'STOP' THEN 3 WHEN 'REWIND' THEN 4 END"
)


class AuditError(Exception):
    """The audit cannot run (nothing to read, bad arguments)."""


@dataclass(frozen=True, slots=True)
class AuditOptions:
    log_dir: str
    window: int = 10
    now_ms: int = 0
    retention_minutes: int = 10080
    clock_skew_ms: int = 60_000
    offsets_partitions: int | None = None


@dataclass(slots=True)
class AuditResult:
    partitions: DataFrame
    groups: DataFrame
    findings: DataFrame
    stats: dict[str, Any] = field(default_factory=dict)
    cached: list[DataFrame] = field(default_factory=list)

    def release(self) -> None:
        """Drop the cached intermediate data (a later audit must decode afresh)."""
        for df in self.cached:
            df.unpersist()
        self.cached.clear()


def _root(log_dir: str) -> str:
    root = log_dir.rstrip("/")
    if "://" not in root and not root.startswith("file:"):
        root = os.path.abspath(root)
    return root


def _list_files(spark: SparkSession, root: str) -> list[tuple[str, int]]:
    """Glob the data directory through Hadoop's FileSystem API (names and sizes, no reads)."""
    jvm: Any = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    found: list[tuple[str, int]] = []
    for pattern in (f"{root}/{CATALOG_NAME}", f"{root}/*/*.log", f"{root}/*/{CHECKPOINT_NAME}"):
        path = jvm.org.apache.hadoop.fs.Path(pattern)
        statuses = path.getFileSystem(conf).globStatus(path)
        for st in statuses or []:
            if st.isFile():
                found.append((str(st.getPath().toString()), int(st.getLen())))
    if not found:
        raise AuditError(f"no log segments under {root}")
    return found


def _offsets_dirs(spark: SparkSession, root: str) -> set[int]:
    """Partition numbers of every ``__consumer_offsets-N`` directory (even without segments)."""
    jvm: Any = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{root}/{OFFSETS_TOPIC}-*")
    parts: set[int] = set()
    for st in (
        path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).globStatus(path) or []
    ):
        suffix = str(st.getPath().getName()).rpartition("-")[2]
        if st.isDirectory() and suffix.isdigit():
            parts.add(int(suffix))
    return parts


def run_audit(spark: SparkSession, opts: AuditOptions) -> AuditResult:
    """Build the three report DataFrames (lazy apart from the cached decode)."""
    t0 = time.perf_counter()
    if opts.window < 1:
        raise AuditError("--window must be at least 1")
    root = _root(opts.log_dir)
    files = _list_files(spark, root)
    t_list = time.perf_counter()

    offsets_parts: set[int] = set()
    topic_segs: dict[tuple[str, int], list[tuple[int, str]]] = {}
    to_read: list[str] = []
    has_catalog = False
    for path, _length in files:
        kind, topic, part, seg = classify_path(path)
        if kind == "catalog":
            has_catalog = True
            to_read.append(path)
        elif kind == "checkpoint":
            if topic != OFFSETS_TOPIC:
                to_read.append(path)
        elif kind == "log":
            assert topic is not None and part is not None and seg is not None
            if topic == OFFSETS_TOPIC:
                offsets_parts.add(part)
                to_read.append(path)
            else:
                topic_segs.setdefault((topic, part), []).append((seg, path))
    if not offsets_parts:
        raise AuditError(f"no {OFFSETS_TOPIC}-N/*.log segments under {root}")
    # Kafka's partition_for needs the partition count: every offsets directory counts, with or
    # without segment files.
    num_partitions = opts.offsets_partitions or (
        max(offsets_parts | _offsets_dirs(spark, root)) + 1
    )
    first_seg_rows = []
    for (topic, part), segs in sorted(topic_segs.items()):
        segs.sort()
        to_read.append(segs[-1][1])
        first_seg_rows.append((topic, part, segs[0][0], len(segs)))

    spark.conf.set("spark.sql.files.openCostInBytes", str(1 << 40))  # one file per task
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(1 << 30))
    decoder = functools.partial(
        decode_batches,
        window=opts.window,
        num_partitions=num_partitions,
        future_limit_ms=opts.now_ms + opts.clock_skew_ms,
    )
    decoded = (
        spark.read.format("binaryFile")
        .load(to_read)
        .select("path", "content")
        .mapInArrow(decoder, SPARK_SCHEMA)
    ).persist()

    kcol = F.col("kind")
    # The first action decodes every file (and caches the combined rows); it brings back the
    # few rows the driver needs: topic-log figures, the catalog and per-segment totals.
    info_rows = (
        decoded.filter(kcol.isin("T", "P", "C", "L", "S"))
        .select("kind", "topic", "part", "seg", "lo2", "ts1", "off1", "n", "n2", "size")
        .collect()
    )
    t_decode = time.perf_counter()
    seg_rows = [r for r in info_rows if r["kind"] == "S"]
    ctx = _context(info_rows, first_seg_rows, has_catalog, opts, num_partitions)

    def stitch(table: Any) -> Any:
        return stitch_table(table, ctx)

    stitched = (
        decoded.filter(kcol.isin("S", "K", "W", "G"))
        .groupBy("opart")
        .applyInArrow(stitch, OUT_SPARK_SCHEMA)
        .persist()
    )
    # Materialize once: the report queries run concurrently and would each stitch otherwise.
    n_out = stitched.count()
    t_stitch = time.perf_counter()

    # A key present in two offsets partitions (wrong_partition) counts once: prefer the
    # partition Kafka would use, then the most recent commit.
    prefer = (F.col("offsets_partition") == F.col("expected_partition")).desc()
    w_pick = Window.partitionBy("group", "topic", "partition").orderBy(
        prefer, F.col("last_commit_ms").desc()
    )
    partitions = (
        stitched.filter(kcol == "P")
        .withColumn("_rk", F.row_number().over(w_pick))
        .filter("_rk = 1")
        .select(*PARTITION_COLUMNS)
        .persist()
    )
    w_gpick = Window.partitionBy("group").orderBy(prefer, F.col("offsets_partition"))
    meta = (
        stitched.filter(kcol == "G")
        .withColumn("_rk", F.row_number().over(w_gpick))
        .filter("_rk = 1")
        .select("group", "state", "members", "generation", "offsets_partition", "log_offset")
    )
    per_group = partitions.groupBy("group").agg(
        F.count("*").alias("partitions"),
        F.sum("lag").alias("total_lag"),
        F.max(F.expr(_STATUS_RANK_SQL)).alias("worst_rank"),
        F.sum("commit_count").alias("commits"),
        F.min("first_commit_ms").alias("t0"),
        F.max("last_commit_ms").alias("t1"),
        F.min("record_offset").alias("lo"),
        F.first("offsets_partition").alias("opart"),
    )
    joined = meta.join(per_group, "group", "full_outer").persist()
    groups = (
        joined.select(
            "group",
            F.coalesce(F.col("state"), F.lit("NoMetadata")).alias("state"),
            F.coalesce(F.col("members"), F.lit(0)).alias("members"),
            F.coalesce(F.col("partitions"), F.lit(0)).cast("int").alias("partitions"),
            F.coalesce(F.col("total_lag"), F.lit(0)).cast("bigint").alias("total_lag"),
            F.element_at(
                F.array(*[F.lit(s) for s in STATUS_ORDER]), F.col("worst_rank").cast("int") + 1
            ).alias("worst_status"),
            F.when(
                F.col("t1") > F.col("t0"),
                F.round(F.col("commits") * 60000.0 / (F.col("t1") - F.col("t0")), 3),
            ).alias("commits_per_min"),
            "generation",
        )
        .coalesce(1)
        .sortWithinPartitions("group")
    )

    lifecycle = joined.filter(
        (F.col("partitions").isNotNull() & (F.col("state").isNull() | (F.col("state") == "Dead")))
        | (F.col("partitions").isNull() & (F.col("state") != "Dead"))
    ).select(
        F.when(F.col("state") == "Dead", F.lit("warn")).otherwise(F.lit("info")).alias("severity"),
        F.when(F.col("partitions").isNull(), F.lit("group_without_offsets"))
        .otherwise(F.lit("offsets_without_group"))
        .alias("check"),
        "group",
        F.lit(None).cast("string").alias("topic"),
        F.lit(None).cast("int").alias("partition"),
        F.coalesce(F.col("lo"), F.col("log_offset")).alias("log_offset"),
        F.when(
            F.col("partitions").isNull(),
            F.format_string(
                "group is %s with %d members but has no committed offsets", "state", "members"
            ),
        )
        .when(
            F.col("state").isNull(),
            F.format_string(
                "%d committed partitions, no group metadata (simple consumer?)", "partitions"
            ),
        )
        .otherwise(
            F.format_string("%d committed partitions outlive the deleted group", "partitions")
        )
        .alias("detail"),
        F.coalesce(F.col("opart"), F.col("offsets_partition")).alias("offsets_partition"),
    )
    from_decode = decoded.filter(kcol == "F").select(
        F.col("severity"),
        F.col("chk").alias("check"),
        F.col("grp").alias("group"),
        # a finding about the log itself (no group) points at the offsets-log partition
        F.when(F.col("grp").isNull() & F.col("topic").isNull(), F.lit(OFFSETS_TOPIC))
        .otherwise(F.col("topic"))
        .alias("topic"),
        F.when(F.col("grp").isNull() & F.col("topic").isNull(), F.col("opart"))
        .otherwise(F.col("part"))
        .alias("partition"),
        F.col("lo1").alias("log_offset"),
        F.col("detail"),
        F.col("opart").alias("offsets_partition"),
    )
    parts_f = [
        from_decode,
        stitched.filter(kcol == "F").select(*FINDINGS_COLUMNS),
        lifecycle,
    ]
    if not has_catalog:
        parts_f.append(
            spark.createDataFrame(
                [
                    (
                        "info",
                        "no_topic_catalog",
                        None,
                        None,
                        None,
                        None,
                        f"{CATALOG_NAME} not found under {root}: commit_for_unknown_partition not checked",
                        None,
                    )
                ],
                _FINDINGS_DDL,
            )
        )
    sev_rank = (
        F.when(F.col("severity") == "error", 2).when(F.col("severity") == "warn", 1).otherwise(0)
    )
    findings = (
        functools.reduce(lambda a, b: a.unionByName(b), parts_f)
        # small tables: one sorted partition, without orderBy's range-sampling job
        .coalesce(1)
        .sortWithinPartitions(sev_rank.desc(), "check", "group", "topic", "partition", "log_offset")
        .persist()
    )
    partitions_out = (
        partitions.drop("record_offset", "first_commit_ms")
        .coalesce(1)
        .sortWithinPartitions("group", "topic", "partition")
    )
    t_end = time.perf_counter()
    stats: dict[str, Any] = {
        "log_dir": root,
        "offsets_partitions": num_partitions,
        "offsets_segments": len(seg_rows),  # non-empty ones: Spark skips empty files
        "records": sum(int(r["n"] or 0) for r in seg_rows),
        "batches": sum(int(r["n2"] or 0) for r in seg_rows),
        "bytes": sum(int(r["size"] or 0) for r in seg_rows),
        "topic_partitions": len(first_seg_rows),
        "files_listed": len(files),
        "catalog": has_catalog,
        "report_rows": n_out,
        "now_ms": opts.now_ms,
        "window": opts.window,
        "retention_minutes": opts.retention_minutes,
        "seconds": {
            "list": round(t_list - t0, 3),
            "decode": round(t_decode - t_list, 3),
            "stitch": round(t_stitch - t_decode, 3),
            "plan": round(t_end - t_stitch, 3),
        },
    }
    return AuditResult(
        partitions_out, groups, findings, stats, [decoded, stitched, partitions, joined, findings]
    )


def _context(
    info_rows: list[Any],
    first_seg_rows: list[tuple[str, int, int, int]],
    has_catalog: bool,
    opts: AuditOptions,
    num_partitions: int,
) -> Context:
    """Topic-log figures for the stitch step (small: one entry per topic partition)."""
    ends: dict[tuple[str, int], tuple[int, int]] = {}
    points: dict[tuple[str, int], list[tuple[int, int]]] = {}
    ckpt: dict[tuple[str, int], int] = {}
    catalog: dict[str, int] = {}
    for r in info_rows:
        key = (r["topic"], r["part"])
        if r["kind"] == "T":
            ends[key] = (int(r["lo2"]), int(r["seg"]))
        elif r["kind"] == "P":
            points.setdefault(key, []).append((int(r["ts1"]), int(r["off1"])))
        elif r["kind"] == "L":
            ckpt[key] = max(ckpt.get(key, 0), int(r["off1"]))
        elif r["kind"] == "C":
            catalog[r["topic"]] = int(r["n"])
    topics: dict[tuple[str, int], TopicLog] = {}
    for topic, part, first_seg, _n in first_seg_rows:
        key = (topic, part)
        end, last_seg = ends.get(key, (None, first_seg))
        topics[key] = TopicLog(
            log_start=max(first_seg, ckpt.get(key, 0)),
            log_end=end,
            last_segment=last_seg,
            timeline=tuple(sorted(points.get(key, []))),
        )
    return Context(
        now_ms=opts.now_ms,
        window=opts.window,
        retention_ms=opts.retention_minutes * 60_000,
        num_partitions=num_partitions,
        topics=topics,
        catalog=catalog if has_catalog else None,
    )
