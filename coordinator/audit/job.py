"""The Spark side of the audit: list, decode on the executors, stitch and report, write.

How this works
--------------
1. *List* (driver, no job): Hadoop's ``FileSystem.globStatus`` over explicit globs of the
   data directory, names and sizes only.  Spark's file sources skip names that start with
   ``_`` or ``.`` in recursive lookups, hence globs (``__consumer_offsets-N`` would vanish).
   From the names alone the driver learns the offsets partition count, which topic segment is
   the last of its partition and the lowest segment base of each partition.  No file is opened
   on the driver, so HDFS/S3 URIs work the same way.
2. *Topic logs* (job 1, small): the last segment of every topic partition, the
   ``log-start-offset`` checkpoints and ``topics.json`` go through ``binaryFile`` +
   ``mapInArrow(decode.decode_batches)``; the few rows that come back (log start/end and a
   time line per partition, the catalog) become the ``stitch.Context`` that lag needs.
3. *Offsets log* (job 2): every offsets segment is decoded the same way, one task per file,
   into per-(segment, key) summaries (consumer-group records included: the last record of
   each key per segment).  They are shuffled by the offsets partition Kafka would
   store the group in (so all of a group's rows meet, even ones stored in the wrong partition)
   and ``stitch.report_table`` turns each share into final rows of the three reports plus one
   summary row.  The result is cached; the action brings back only the summary rows, the
   group rows, the consumer groups' member rows and their assignment findings, and each
   task's top findings.
4. *Write*: the four tables (partitions, groups, findings, members) are filters of the
   cached result (see ``cli.write_reports``).

From PostgreSQL (``--storage-url``, cluster mode; ``source_pg``), steps 1-2 are one small JDBC
query (catalog, leases, time lines from row columns) and step 3 reads the offsets partitions'
rows with the JDBC source, partitioned by ``partition``, decoded by
``source_pg.decode_pg_batches`` (the same decoder, a row as a small segment, plus the row
checks); the shuffle, ``stitch.report_table`` and the writes are the same.

Two jobs before the writes, because every Spark job costs a fixed ~0.1-0.3 s here: the
report logic lives in ``stitch`` (plain Python, unit-testable) rather than in SQL stages.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from coordinator.audit.consumer_groups import CONSUMER_GROUP_CHECKS
from coordinator.audit.decode import (
    CATALOG_NAME,
    CHECKPOINT_NAME,
    OFFSETS_TOPIC,
    SPARK_SCHEMA,
    classify_path,
    decode_batches,
)
from coordinator.audit.history import (
    HISTORY_SQL,
    HISTORY_TOPIC,
    from_segments,
    from_table,
    group_history,
)
from coordinator.audit.source_pg import (
    CONTEXT_SQL,
    DEFAULT_JDBC_JAR,
    OFFSETS_SQL,
    decode_pg_batches,
    jdbc_target,
    pg_context,
    redact_url,
)
from coordinator.audit.stitch import (
    OUT_SPARK_SCHEMA,
    SEVERITY_ORDER,
    STATUS_ORDER,
    Context,
    TopicLog,
    decoded_finding,
    finding_sort_key,
    report_table,
)

__all__ = [
    "SEVERITY_ORDER",
    "STATUS_ORDER",
    "AuditError",
    "AuditOptions",
    "AuditResult",
    "run_audit",
]

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
]
# the consumer groups' (KIP-848) members: one row per member of a live group
MEMBER_COLUMNS = [
    "group",
    "member_id",
    "instance_id",
    "client_id",
    "client_host",
    "member_epoch",
    "previous_member_epoch",
    "member_state",
    "generation",
    "assignment_epoch",
    "assigned",
    "pending",
    "target",
    "subscribed",
    "offsets_partition",
]
GROUP_COLUMNS = [
    "group",
    "state",
    "members",
    "partitions",
    "total_lag",
    "worst_status",
    "commits_per_min",
    "generation",
]


class AuditError(Exception):
    """The audit cannot run (nothing to read, bad arguments)."""


@dataclass(frozen=True, slots=True)
class AuditOptions:
    log_dir: str = ""  # a data directory, or:
    storage_url: str | None = None  # a cluster's postgresql:// URL (the JDBC source)
    window: int = 10
    now_ms: int = 0
    retention_minutes: int = 10080
    clock_skew_ms: int = 60_000
    offsets_partitions: int | None = None
    top: int = 20  # findings brought back for the console
    jdbc_jar: str = DEFAULT_JDBC_JAR  # PostgreSQL's JDBC driver, if the session lacks it
    # called with a line at the start of each stage (``kgc audit`` shows them on a terminal)
    progress: Callable[[str], None] | None = None

    def stage(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)


@dataclass(slots=True)
class AuditResult:
    partitions: DataFrame
    groups: DataFrame
    findings: DataFrame
    stats: dict[str, Any]
    # collected by the job: finding counts by check and severity, partitions by status
    summary: dict[str, Any]
    top_findings: list[dict[str, Any]]
    group_rows: list[dict[str, Any]]
    cached: list[DataFrame] = field(default_factory=list)
    # consumer groups (KIP-848): the members table, and what the driver collected of it
    members: DataFrame | None = None
    member_rows: list[dict[str, Any]] = field(default_factory=list)
    # group name -> (group epoch, target assignment epoch) of every live consumer group
    consumer_groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the consumer-group checks' findings (all of them, for the consumer-group report)
    consumer_findings: list[dict[str, Any]] = field(default_factory=list)
    # each group's lag and commit rate over the kept history (``history.group_history``);
    # None where the data directory keeps none
    history: dict[str, Any] | None = None

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
    """Run the audit's two Spark jobs; the report DataFrames read the cached result.

    The steps: list the data directory and plan from the names alone (``_plan``); job 1, the
    topic logs' figures that lag needs (``_topic_context``); job 2, decode, stitch and report
    every offsets segment, cached (``_offsets_report``); then the driver's own findings, what
    the console needs from the collected rows, and the three report tables over the cache.
    """
    t0 = time.perf_counter()
    if opts.window < 1:
        raise AuditError("--window must be at least 1")
    if opts.storage_url:
        return _run_pg_audit(spark, opts, t0)
    if not opts.log_dir:
        raise AuditError("give a data directory (--log-dir) or a database (--storage-url)")
    root = _root(opts.log_dir)
    opts.stage(f"listing {root}")
    files = _list_files(spark, root)
    t_list = time.perf_counter()
    plan = _plan(spark, root, files, opts.offsets_partitions)
    decoder = functools.partial(
        decode_batches,
        window=opts.window,
        num_partitions=plan.num_partitions,
        future_limit_ms=opts.now_ms + opts.clock_skew_ms,
    )

    opts.stage(
        f"job 1/2: topic logs ({len(plan.first_seg_rows)} topic partitions, "
        f"{len(plan.topic_files)} files)"
    )
    topic_rows, ctx = _topic_context(spark, decoder, plan, opts)
    t_topics = time.perf_counter()
    opts.stage(
        f"job 2/2: offsets log ({len(plan.offsets_files)} segments of "
        f"{plan.num_partitions} partitions)"
    )
    final, collected = _offsets_report(spark, decoder, plan, ctx, opts.top)
    t_offsets = time.perf_counter()

    history = None
    if plan.history_files:
        opts.stage(f"job 3/3: group history ({len(plan.history_files)} segments)")
        history = group_history(from_segments(spark, plan.history_files), ctx.topics, opts.now_ms)
    t_history = time.perf_counter()

    driver_findings = _driver_findings(topic_rows, plan.has_catalog, root)
    result = _finish(spark, final, collected, driver_findings, opts.top)
    result.history = history
    summary = result.summary
    t_end = time.perf_counter()
    result.stats = {
        "source": root,
        "log_dir": root,
        "offsets_partitions": plan.num_partitions,
        "offsets_segments": summary.pop("segments"),  # non-empty ones: Spark skips empty files
        "records": summary.pop("records"),
        "batches": summary.pop("batches"),
        "bytes": summary.pop("bytes"),
        "topic_partitions": len(plan.first_seg_rows),
        "files_listed": len(files),
        "catalog": plan.has_catalog,
        "now_ms": opts.now_ms,
        "window": opts.window,
        "retention_minutes": opts.retention_minutes,
        "seconds": {
            "list": round(t_list - t0, 3),
            "topics": round(t_topics - t_list, 3),
            "offsets": round(t_offsets - t_topics, 3),
            "history": round(t_history - t_offsets, 3),
            "plan": round(t_end - t_history, 3),
        },
    }
    return result


def _finish(
    spark: SparkSession,
    final: DataFrame,
    collected: list[Any],
    driver_findings: list[dict[str, Any]],
    top: int,
) -> AuditResult:
    """The result from the cached report rows and what was collected of them (stats empty)."""
    summary = _merge_summaries(
        [json.loads(r["detail"]) for r in collected if r["kind"] == "Z"], driver_findings
    )
    top_findings = sorted(
        [r.asDict() for r in collected if r["kind"] == "F"] + driver_findings,
        key=finding_sort_key,
    )[:top]
    group_rows = sorted(
        ({c: r[c] for c in GROUP_COLUMNS} for r in collected if r["kind"] == "G"),
        key=lambda g: str(g["group"]),
    )
    consumer_groups = {
        r["group"]: {"state": r["state"], "group_epoch": r["generation"]}
        | {"assignment_epoch": r["assignment_epoch"], "members": r["members"]}
        for r in collected
        if r["kind"] == "G" and r["group_type"] == "consumer"
    }
    member_rows = sorted(
        ({c: r[c] for c in MEMBER_COLUMNS} for r in collected if r["kind"] == "M"),
        key=lambda m: (str(m["group"]), str(m["member_id"])),
    )
    consumer_findings = sorted(
        (
            {c: r[c] for c in FINDINGS_COLUMNS}
            for r in collected
            if r["kind"] == "F" and r["check"] in CONSUMER_GROUP_CHECKS
        ),
        key=finding_sort_key,
    )
    partitions, groups, findings = _report_tables(spark, final, driver_findings)
    members = (
        final.filter(F.col("kind") == "M")
        .select(*MEMBER_COLUMNS)
        .coalesce(1)
        .sortWithinPartitions("group", "member_id")
    )
    return AuditResult(
        partitions,
        groups,
        findings,
        {},
        summary,
        top_findings,
        group_rows,
        [final],
        members=members,
        member_rows=member_rows,
        consumer_groups=consumer_groups,
        consumer_findings=consumer_findings,
    )


def _ensure_jdbc_driver(spark: SparkSession, jar: str) -> None:
    """Make PostgreSQL's JDBC driver loadable: a session started by ``kgc audit`` has it in
    ``spark.jars``; any other (tests, spark-submit without ``--jars``) gets it by ``ADD JAR``,
    which reaches the driver's class loader and the executors.  Never ``--packages``."""
    jvm: Any = spark.sparkContext._jvm
    try:  # already there (spark.jars, spark-submit --jars, an earlier ADD JAR)?
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName("org.postgresql.Driver", False, loader)
        return
    except Exception:  # Py4JJavaError: ClassNotFoundException
        pass
    if "://" not in jar and not os.path.exists(jar):
        raise AuditError(
            f"PostgreSQL's JDBC driver is not at {jar}: install Debian's libpostgresql-jdbc-java "
            "(scripts/ensure-postgres does) or give --jdbc-jar"
        )
    spark.sql(f"ADD JAR '{jar}'")


def _jdbc_error(e: Exception) -> str:
    """The Java exception's own line of a Py4J error (its first line says only 'o123.load')."""
    lines = str(e).splitlines()
    for line in lines:
        if "Exception:" in line and ("PSQL" in line or "SQL" in line or "java." in line):
            return line.strip()
    return lines[0] if lines else type(e).__name__


def _run_pg_audit(spark: SparkSession, opts: AuditOptions, t0: float) -> AuditResult:
    """The audit of a cluster's database: one small query for the context (catalog, leases,
    time lines), then the offsets rows through the JDBC source, decoded and reported like
    segments (see ``source_pg``)."""
    assert opts.storage_url is not None
    shown = redact_url(opts.storage_url)
    try:
        target = jdbc_target(opts.storage_url)
    except ValueError as e:
        raise AuditError(str(e)) from None
    _ensure_jdbc_driver(spark, opts.jdbc_jar)

    def reader() -> Any:
        r = (
            spark.read.format("jdbc")
            .option("url", target.url)
            .option("driver", "org.postgresql.Driver")
            .option("fetchsize", "1000")
        )
        if target.user is not None:
            r = r.option("user", target.user)
        if target.password is not None:
            r = r.option("password", target.password)
        return r

    opts.stage(f"job 1/2: catalog, leases and time lines from {shown}")
    try:
        context_rows = reader().option("query", CONTEXT_SQL).load().collect()
    except Exception as e:
        raise AuditError(f"cannot read {shown}: {_jdbc_error(e)}") from None
    t_topics = time.perf_counter()
    ctx, counts = pg_context(
        context_rows,
        now_ms=opts.now_ms,
        window=opts.window,
        retention_ms=opts.retention_minutes * 60_000,
        offsets_partitions=opts.offsets_partitions,
    )
    if ctx.num_partitions < 1 or not counts["offsets_leases"]:
        raise AuditError(f"no {OFFSETS_TOPIC} partitions in {shown}")
    decoder = functools.partial(
        decode_pg_batches,
        window=opts.window,
        num_partitions=ctx.num_partitions,
        future_limit_ms=opts.now_ms + opts.clock_skew_ms,
    )
    # one range of offsets partitions per task, about two tasks per core
    tasks = max(1, min(counts["offsets_leases"], 2 * spark.sparkContext.defaultParallelism))
    opts.stage(f"job 2/2: offsets rows of {counts['offsets_leases']} partitions ({tasks} tasks)")
    decoded = (
        reader()
        .option("dbtable", OFFSETS_SQL)
        .option("partitionColumn", "partition")
        .option("lowerBound", "0")
        .option("upperBound", str(max(counts["offsets_leases"], 1)))
        .option("numPartitions", str(tasks))
        .load()
        .mapInArrow(decoder, SPARK_SCHEMA)
    )
    final, collected = _report(decoded, ctx, opts.top)
    t_offsets = time.perf_counter()
    opts.stage(f"job 3/3: group history from {shown}")
    try:
        history_rows = reader().option("dbtable", HISTORY_SQL).load()
    except Exception:  # a database older than schema 3 has no history table
        history = None
    else:
        history = group_history(from_table(history_rows), ctx.topics, opts.now_ms)
    t_history = time.perf_counter()
    result = _finish(spark, final, collected, [], opts.top)
    result.history = history
    summary = result.summary
    t_end = time.perf_counter()
    result.stats = {
        "source": shown,
        "storage_url": shown,
        "offsets_partitions": ctx.num_partitions,
        "offsets_rows": summary.pop("segments"),  # rows of kgc_record_log
        "records": summary.pop("records"),
        "batches": summary.pop("batches"),
        "bytes": summary.pop("bytes"),
        "topic_partitions": counts["topic_partitions"],
        "catalog": True,
        "now_ms": opts.now_ms,
        "window": opts.window,
        "retention_minutes": opts.retention_minutes,
        "seconds": {
            "topics": round(t_topics - t0, 3),
            "offsets": round(t_offsets - t_topics, 3),
            "history": round(t_history - t_offsets, 3),
            "plan": round(t_end - t_history, 3),
        },
    }
    return result


@dataclass(slots=True)
class _Plan:
    """What the driver learns from the listed names alone (no file is opened)."""

    num_partitions: int  # of the offsets topic, as Kafka's partition_for needs it
    offsets_files: list[str]  # every offsets segment
    # the last segment of each topic partition, the checkpoints and topics.json
    topic_files: list[str]
    # (topic, partition, base of its first segment, number of segments)
    first_seg_rows: list[tuple[str, int, int, int]]
    has_catalog: bool
    # the segments of the group history log (``__kgc_group_history``), job 3's input
    history_files: list[str] = field(default_factory=list)


def _plan(
    spark: SparkSession, root: str, files: list[tuple[str, int]], offsets_partitions: int | None
) -> _Plan:
    """Sort the listed files into the two jobs' inputs; infer the offsets partition count."""
    offsets_parts: set[int] = set()
    offsets_files: list[str] = []
    topic_segs: dict[tuple[str, int], list[tuple[int, str]]] = {}
    topic_files: list[str] = []
    has_catalog = False
    history_files: list[str] = []
    for path, _length in files:
        kind, topic, part, seg = classify_path(path)
        if kind == "catalog":
            has_catalog = True
            topic_files.append(path)
        elif kind == "checkpoint":
            if topic != OFFSETS_TOPIC:
                topic_files.append(path)
        elif kind == "log":
            assert topic is not None and part is not None and seg is not None
            if topic == OFFSETS_TOPIC:
                offsets_parts.add(part)
                offsets_files.append(path)
            elif topic == HISTORY_TOPIC:
                history_files.append(path)
            else:
                topic_segs.setdefault((topic, part), []).append((seg, path))
    if not offsets_parts:
        raise AuditError(f"no {OFFSETS_TOPIC}-N/*.log segments under {root}")
    # Kafka's partition_for needs the partition count: every offsets directory counts, with or
    # without segment files.
    num_partitions = offsets_partitions or (max(offsets_parts | _offsets_dirs(spark, root)) + 1)
    first_seg_rows = []
    for (topic, part), segs in sorted(topic_segs.items()):
        segs.sort()
        topic_files.append(segs[-1][1])
        first_seg_rows.append((topic, part, segs[0][0], len(segs)))
    return _Plan(
        num_partitions, offsets_files, topic_files, first_seg_rows, has_catalog, history_files
    )


Decoder = Callable[[Iterator[Any]], Iterator[Any]]  # decode_batches with its options bound


def _decode(spark: SparkSession, decoder: Decoder, paths: list[str], open_cost: int) -> DataFrame:
    """The decoder's rows (``decode.SPARK_SCHEMA``) of the files ``paths``."""
    # Spark packs files into a task until their sizes plus open_cost each reach the split
    # size; the splits are planned when an action runs, so set this just before it.
    spark.conf.set("spark.sql.files.openCostInBytes", str(open_cost))
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(1 << 30))
    return (
        spark.read.format("binaryFile")
        .load(paths)
        .select("path", "content")
        .mapInArrow(decoder, SPARK_SCHEMA)
    )


def _topic_context(
    spark: SparkSession, decoder: Decoder, plan: _Plan, opts: AuditOptions
) -> tuple[list[Any], Context]:
    """Job 1: the topic logs' figures (log start/end, time lines, catalog) that lag needs, as
    the decoded rows and the stitch's Context.  Only headers are read there, so small files
    share a task (a task costs ~50-100 ms)."""
    topic_files = plan.topic_files
    topic_rows = _decode(spark, decoder, topic_files, 0).collect() if topic_files else []
    ctx = _context(topic_rows, plan.first_seg_rows, plan.has_catalog, opts, plan.num_partitions)
    return topic_rows, ctx


def _offsets_report(
    spark: SparkSession, decoder: Decoder, plan: _Plan, ctx: Context, top: int
) -> tuple[DataFrame, list[Any]]:
    """Job 2: decode every offsets segment (one task each), route each group's rows to the
    task of the offsets partition Kafka would store it in, stitch and report there.

    Returns the result, cached for the writes, and the rows the driver needs from it: the
    summary rows, the group rows and each task's top findings.
    """

    # one task per segment: decoding is the heavy part
    return _report(_decode(spark, decoder, plan.offsets_files, 1 << 40), ctx, top)


def _report(decoded: DataFrame, ctx: Context, top: int) -> tuple[DataFrame, list[Any]]:
    """Route each group's decoded rows to one task, stitch and report there (cached), and
    collect what the driver needs: the summary rows, the group rows and the top findings."""

    def report(table: Any) -> Any:
        return report_table(table, ctx, top)

    final = (
        decoded.drop("src", "tsmax", "ptype")  # not needed by the stitch: less to shuffle
        .groupBy(F.coalesce(F.col("expected"), F.col("opart")).alias("route"))
        .applyInArrow(report, OUT_SPARK_SCHEMA)
        .persist()
    )
    kcol = F.col("kind")
    consumer_checks = (kcol == "F") & F.col("check").isin(*CONSUMER_GROUP_CHECKS)
    collected = final.filter(
        (kcol == "Z") | (kcol == "G") | (kcol == "M") | F.col("top") | consumer_checks
    ).collect()
    return final, collected


def _driver_findings(topic_rows: list[Any], has_catalog: bool, root: str) -> list[dict[str, Any]]:
    """Findings of the topic logs (job 1) and of a missing catalog, as findings-table rows."""
    found = [decoded_finding(r.asDict()) for r in topic_rows if r["kind"] == "F"]
    if not has_catalog:
        found.append(
            {
                "severity": "info",
                "check": "no_topic_catalog",
                "group": None,
                "topic": None,
                "partition": None,
                "log_offset": None,
                "detail": f"{CATALOG_NAME} not found under {root}: "
                "commit_for_unknown_partition not checked",
                "offsets_partition": None,
            }
        )
    return found


def _report_tables(
    spark: SparkSession, final: DataFrame, driver_findings: list[dict[str, Any]]
) -> tuple[DataFrame, DataFrame, DataFrame]:
    """The partitions, groups and findings tables: filters of the cached result, sorted."""
    kcol = F.col("kind")
    findings = final.filter(kcol == "F").select(*FINDINGS_COLUMNS)
    if driver_findings:
        findings = findings.unionByName(
            spark.createDataFrame(
                [tuple(f[c] for c in FINDINGS_COLUMNS) for f in driver_findings], _FINDINGS_DDL
            )
        )
    sev_rank = (
        F.when(F.col("severity") == "error", 2).when(F.col("severity") == "warn", 1).otherwise(0)
    )
    # small tables: one sorted partition each, without orderBy's range-sampling job
    findings = findings.coalesce(1).sortWithinPartitions(
        sev_rank.desc(), "check", "group", "topic", "partition", "log_offset"
    )
    partitions = (
        final.filter(kcol == "P")
        .select(*PARTITION_COLUMNS)
        .coalesce(1)
        .sortWithinPartitions("group", "topic", "partition")
    )
    groups = (
        final.filter(kcol == "G").select(*GROUP_COLUMNS).coalesce(1).sortWithinPartitions("group")
    )
    return partitions, groups, findings


def _merge_summaries(
    parts: list[dict[str, Any]], driver_findings: list[dict[str, Any]]
) -> dict[str, Any]:
    """Add up the per-task summary rows (finding counts, statuses, segment totals)."""
    findings: dict[str, dict[str, int]] = {}
    status: dict[str, list[int]] = {}
    totals = dict.fromkeys(("segments", "records", "batches", "bytes"), 0)
    for p in parts:
        for check, by_sev in p["findings"].items():
            for sev, n in by_sev.items():
                findings.setdefault(check, {})[sev] = findings.get(check, {}).get(sev, 0) + n
        for st, (n, lag) in p["status"].items():
            acc = status.setdefault(st, [0, 0])
            acc[0] += n
            acc[1] += lag
        for k in totals:
            totals[k] += p.get(k, 0)
    for f in driver_findings:
        by_sev = findings.setdefault(f["check"], {})
        by_sev[f["severity"]] = by_sev.get(f["severity"], 0) + 1
    return {"findings": findings, "status": status, **totals}


def _context(
    topic_rows: list[Any],
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
    topic_ids: dict[str, str] = {}
    for r in topic_rows:
        key = (r["topic"], r["part"])
        if r["kind"] == "T":
            ends[key] = (int(r["lo2"]), int(r["seg"]))
        elif r["kind"] == "P":
            points.setdefault(key, []).append((int(r["ts1"]), int(r["off1"])))
        elif r["kind"] == "L":
            ckpt[key] = max(ckpt.get(key, 0), int(r["off1"]))
        elif r["kind"] == "C":
            catalog[r["topic"]] = int(r["n"])
            if r["detail"]:
                topic_ids[r["topic"]] = str(r["detail"]).lower()
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
        topic_ids=topic_ids,
    )
