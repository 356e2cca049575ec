"""``kgc audit`` / ``python -m coordinator.audit``: arguments, Spark session, reports, exit code.

How this works: ``main`` parses the arguments (the same ones ``kgc audit`` registers through
``add_arguments``). ``run`` first checks what it can without Spark, so a mistake costs no JVM
start: a ``--log-dir`` on this machine that does not exist is bad usage (exit 2, well under a
second). Then it checks that pyspark is importable (it is the optional ``kgc[audit]``
extra), prepares the environment for a local Spark (loopback binding, this interpreter for the
Python workers, UTC, no stray ``SPARK_HOME``) unless it runs under ``spark-submit``, builds or
reuses the SparkSession (with PostgreSQL's JDBC driver in ``spark.jars`` for ``--storage-url``),
runs ``job.run_audit`` on a data directory (``--log-dir``) or a cluster's database
(``--storage-url``), writes ``partitions``, ``groups``, ``findings`` and ``members`` (the
KIP-848 consumer groups' members) under ``--out`` (Parquet directories, or one JSON file each
with ``--format json``) plus ``summary.json`` and ``report.html`` (one self-contained page:
lag and commit rate per group over the kept history, and the findings; ``html_report``), prints a console summary and returns an exit
code from ``tools.exits``: 0 clean, 4 findings at or above ``--fail-on``, 1 the audit could
not run, 2 bad usage.

What the user sees: on a terminal, one progress line per stage on stderr (none when stderr is
not a terminal, nor with ``--quiet``). The JVM that a local Spark starts gets its own stdout
and stderr pointed at a log file, so Spark's start-up lines, log4j warnings and executor noise
stay off the terminal (``--verbose`` leaves them there, at log level WARN); the file is named
in the error line when the audit fails and removed when it succeeds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import urlparse

from coordinator.tools.exits import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from coordinator.audit.job import AuditResult

__all__ = [
    "DESCRIPTION",
    "INSTALL_HINT",
    "Progress",
    "add_arguments",
    "main",
    "prepare_environment",
    "run",
    "spark_session",
]

DESCRIPTION = (
    "Audit a kgc data directory's (or a cluster database's) __consumer_offsets log with "
    "Apache Spark: lag, Burrow status and integrity/lifecycle findings as Parquet or JSON "
    "tables. Exit status: 0 clean, 4 findings at or above --fail-on, 1 the audit could not "
    "run, 2 bad usage."
)
INSTALL_HINT = "kgc audit needs PySpark (and Java 17+): pip install 'kgc[audit]'"
# as source_pg.DEFAULT_JDBC_JAR (not imported: that module needs numpy, this one must not)
DEFAULT_JDBC_JAR = "/usr/share/java/postgresql.jar"
_SEVERITIES = ["info", "warn", "error"]
HTML_REPORT = "report.html"  # the page a person looks at (``html_report``)


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--log-dir", help="kgc data directory (local path or a Hadoop URI)")
    source.add_argument(
        "--storage-url",
        help="a cluster's database, postgresql://user:pass@host:port/db (read over JDBC)",
    )
    p.add_argument(
        "--jdbc-jar",
        default=DEFAULT_JDBC_JAR,
        help="PostgreSQL's JDBC driver for --storage-url (Debian's libpostgresql-jdbc-java)",
    )
    p.add_argument("--out", required=True, help="directory for the reports (replaced if present)")
    p.add_argument(
        "--format",
        choices=["parquet", "json"],
        default="parquet",
        help="parquet: a directory per report; json: one JSON file per report (an array of "
        "objects, every column present)",
    )
    p.add_argument(
        "--master",
        default=None,
        help="Spark master (default local[2]; under spark-submit the submitted one)",
    )
    p.add_argument(
        "--window", type=_positive, default=10, help="commits per partition for Burrow's rules"
    )
    p.add_argument(
        "--fail-on",
        choices=[*_SEVERITIES, "none"],
        default="error",
        help="exit 4 when a finding has this severity or worse (default error)",
    )
    p.add_argument("--now-ms", type=int, default=None, help="audit time (default: now)")
    p.add_argument(
        "--retention-minutes",
        type=int,
        default=10080,
        help="offsets.retention.minutes for offsets_past_retention",
    )
    p.add_argument(
        "--clock-skew-ms",
        type=int,
        default=60_000,
        help="allowance before a commit timestamp counts as in the future",
    )
    p.add_argument(
        "--offsets-partitions",
        type=int,
        default=None,
        help="offsets topic partition count (default: inferred from the directories)",
    )
    p.add_argument("--top", type=int, default=20, help="findings shown on the console")
    p.add_argument("--quiet", action="store_true", help="no console report and no progress lines")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="leave Spark's own output (start-up lines, log4j warnings) on the terminal",
    )


def _under_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ


def prepare_environment(master: str | None) -> None:
    """Environment for a Spark launched from this process (not needed under spark-submit)."""
    os.environ["TZ"] = "UTC"
    if hasattr(time, "tzset"):
        time.tzset()
    if _under_spark_submit():
        return
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.pop("SPARK_HOME", None)  # use the pip package's jars, not a stray install
    if master is None or master.startswith("local"):
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if "JAVA_HOME" not in os.environ:
        java = shutil.which("java")
        if java:
            os.environ["JAVA_HOME"] = str(Path(os.path.realpath(java)).parent.parent)


@contextlib.contextmanager
def jvm_output_to(path: str | None) -> Iterator[None]:
    """While the block runs, file descriptors 1 and 2 point at ``path``: a JVM that Spark
    launches then inherits them and writes its start-up lines, log4j output and its Python
    workers' stderr there for its whole life, while this process's own streams are restored
    afterwards. ``None`` leaves everything as it is (``--verbose``)."""
    if path is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (*saved, fd):
            os.close(f)


def quiet_python_side() -> None:
    """pyspark's Python warnings and py4j's logger stay off the terminal (not ``--verbose``)."""
    warnings.filterwarnings("ignore", module=r"pyspark(\.|$)")
    warnings.filterwarnings("ignore", module=r"py4j(\.|$)")
    logging.getLogger("py4j").setLevel(logging.ERROR)


def spark_session(
    master: str | None = None,
    app_name: str = "kgc-audit",
    jars: list[str] | None = None,
    *,
    log_level: str = "ERROR",
) -> SparkSession:
    from pyspark.sql import SparkSession

    prepare_environment(master)
    builder = SparkSession.builder.appName(app_name)
    if jars:  # only where this call starts the JVM; else job.run_audit adds it (ADD JAR)
        builder = builder.config("spark.jars", ",".join(jars))
    local = master is None or master.startswith("local")
    if master is not None or not _under_spark_submit():
        builder = builder.master(master or "local[2]")
    builder = builder.config("spark.sql.session.timeZone", "UTC").config(
        "spark.sql.execution.arrow.pyspark.enabled", "true"
    )
    if local and not _under_spark_submit():
        builder = (
            builder.config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            # Adaptive execution re-plans after every stage: on one machine, shuffling a few
            # thousand summary rows, that costs more than it can save.
            .config("spark.sql.adaptive.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.ui.showConsoleProgress", "false")
        )
    spark = builder.getOrCreate()
    if not _under_spark_submit():  # under spark-submit the user's log4j settings rule
        spark.sparkContext.setLogLevel(log_level)
    return spark


def _write(df: Any, path: str, fmt: str) -> None:
    """One report: ``<name>.json``, or the Parquet directory ``<name>``; the other form of the
    same report from an earlier run is removed, so ``--out`` holds one copy of each."""
    if fmt == "json":
        _remove(path)
        _write_text(f"{path}.json", _json_chunks(df))
    else:
        _remove(f"{path}.json")
        df.coalesce(1).write.mode("overwrite").parquet(path)


def _is_local(path: str) -> bool:
    return "://" not in path and not path.startswith("file:")


def _local_path(path: str) -> str | None:
    """The file-system path of a plain path or a ``file:`` URI; None for other URIs."""
    if _is_local(path):
        return path
    u = urlparse(path)
    return u.path if u.scheme == "file" else None


def _hadoop_fs(path: str) -> tuple[Any, Any]:
    """(FileSystem, Path) of a Hadoop URI, through the running session's JVM."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    jvm: Any = spark.sparkContext._jvm
    target = jvm.org.apache.hadoop.fs.Path(path)
    return target.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), target


def _remove(path: str) -> None:
    local = _local_path(path)
    if local is None:
        fs, target = _hadoop_fs(path)
        fs.delete(target, True)
    elif os.path.isdir(local):
        shutil.rmtree(local)
    elif os.path.lexists(local):
        os.unlink(local)


def _json_chunks(df: Any) -> Iterator[str]:
    """A report as one JSON array, one object per line, every column present (Spark's own
    JSON writer drops null fields), streamed from the executors a partition at a time."""
    first = True
    yield "["
    for row in df.toLocalIterator():
        yield ("\n" if first else ",\n") + json.dumps(
            row.asDict(recursive=True), default=str, ensure_ascii=False
        )
        first = False
    yield "\n]\n"


def _write_text(path: str, chunks: Iterable[str]) -> None:
    """One file at ``path``: a local path directly (renamed into place, so a reader never
    sees half of it), a Hadoop URI through the JVM's FileSystem API a MiB per call."""
    local = _local_path(path)
    if local is not None:
        _remove(local)  # e.g. summary.json as a directory, from an older kgc
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        tmp = f"{local}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(tmp, local)
        return
    fs, target = _hadoop_fs(path)
    fs.delete(target, True)
    stream = fs.create(target, True)
    try:
        buf = bytearray()
        for chunk in chunks:
            buf += chunk.encode()
            if len(buf) >= 1 << 20:
                stream.write(bytes(buf))
                buf.clear()
        stream.write(bytes(buf))
    finally:
        stream.close()


def write_reports(result: AuditResult, out: str, fmt: str, summary: dict[str, Any]) -> None:
    """The tables (written concurrently: small, latency-bound jobs) and summary.json."""
    base = out.rstrip("/")
    names = ["partitions", "groups", "findings"] + (
        ["members"] if result.members is not None else []
    )
    with ThreadPoolExecutor(len(names)) as pool:
        for f in [
            pool.submit(_write, getattr(result, name), f"{base}/{name}", fmt) for name in names
        ]:
            f.result()
    text = json.dumps(summary, indent=2, sort_keys=True, default=str)
    _write_text(f"{base}/summary.json", [text, "\n"])
    from coordinator.audit.html_report import render

    _write_text(f"{base}/{HTML_REPORT}", [render(result.history, result.top_findings, summary)])


def build_summary(
    result: AuditResult, fail_on: str
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """Summary figures from what the job collected (no further Spark query)."""
    by_check = result.summary["findings"]
    by_sev = dict.fromkeys(_SEVERITIES, 0)
    for counts in by_check.values():
        for sev, n in counts.items():
            by_sev[sev] = by_sev.get(sev, 0) + n
    status = {st: n for st, (n, _lag) in result.summary["status"].items()}
    threshold = _SEVERITIES.index(fail_on) if fail_on in _SEVERITIES else len(_SEVERITIES)
    failing = sum(by_sev.get(s, 0) for s in _SEVERITIES[threshold:])
    summary = {
        **result.stats,
        "findings": {"total": sum(by_sev.values()), "by_severity": by_sev, "by_check": by_check},
        "groups": len(result.group_rows),
        "partitions": sum(status.values()),
        "total_lag": sum(lag for _n, lag in result.summary["status"].values()),
        "status": status,
        "fail_on": fail_on,
        "failing_findings": failing,
        "top_findings": result.top_findings,
        "consumer_groups": consumer_group_section(result),
    }
    return summary, result.top_findings, result.group_rows


def consumer_group_section(result: AuditResult) -> list[dict[str, Any]]:
    """Per live KIP-848 consumer group: epochs, members (epochs, assigned, pending and target
    partitions, subscription) and the anomalies of its assignments."""
    section: dict[str, dict[str, Any]] = {
        g: {"group": g, **info, "members": [], "anomalies": []}
        for g, info in sorted(result.consumer_groups.items())
        if info["state"] != "Dead"
    }
    for m in result.member_rows:
        if m["group"] in section:
            section[m["group"]]["members"].append(
                {k: v for k, v in m.items() if k not in ("group", "offsets_partition")}
            )
    for f in result.consumer_findings:
        if f["group"] in section:
            section[f["group"]]["anomalies"].append(
                {k: f[k] for k in ("severity", "check", "topic", "partition", "detail")}
            )
    return list(section.values())


def render_console(
    summary: dict[str, Any], top_rows: list[dict[str, Any]], groups: list[dict[str, Any]]
) -> str:
    """Plain-text report (rich is used for colour when it is installed and stdout is a tty)."""
    pieces = (
        f"{summary['offsets_rows']} rows"
        if "offsets_rows" in summary
        else f"{summary['offsets_segments']} segments"
    )
    lines = [
        f"kgc offsets audit of {summary['source']}",
        f"  {summary['records']:,} records in {pieces} of "
        f"{summary['offsets_partitions']} offsets partitions; {summary['topic_partitions']} topic "
        f"partitions; {summary['groups']} groups, {summary['partitions']} committed partitions, "
        f"total lag {summary['total_lag']:,}",
        "  findings: "
        + ", ".join(f"{k}={v}" for k, v in summary["findings"]["by_severity"].items())
        + "   status: "
        + ", ".join(
            f"{k}={v}" for k, v in sorted(summary["status"].items(), key=lambda kv: str(kv[0]))
        ),
        "",
    ]

    def table(headers: list[str], rows: list[list[str]]) -> list[str]:
        widths = [
            max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
            for i, h in enumerate(headers)
        ]
        out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
        out.append("  ".join("-" * w for w in widths))
        out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        return out

    def s(v: Any) -> str:
        return "" if v is None else str(v)

    if top_rows:
        lines.append(f"Top findings ({len(top_rows)} of {summary['findings']['total']}):")
        lines += table(
            ["severity", "check", "group", "topic", "partition", "log_offset", "detail"],
            [
                [
                    s(r["severity"]),
                    s(r["check"]),
                    s(r["group"]),
                    s(r["topic"]),
                    s(r["partition"]),
                    s(r["log_offset"]),
                    s(r["detail"])[:90],
                ]
                for r in top_rows
            ],
        )
    else:
        lines.append("No findings.")
    lines.append("")
    lines.append("Groups:")
    lines += table(
        ["group", "state", "members", "partitions", "total_lag", "worst_status", "commits/min"],
        [
            [
                s(g["group"]),
                s(g["state"]),
                s(g["members"]),
                s(g["partitions"]),
                s(g["total_lag"]),
                s(g["worst_status"]),
                s(g["commits_per_min"]),
            ]
            for g in groups[:50]
        ],
    )
    if len(groups) > 50:
        lines.append(f"... and {len(groups) - 50} more groups (see the groups table)")
    lines += _consumer_group_lines(summary.get("consumer_groups", []), table, s)
    return "\n".join(lines)


def _consumer_group_lines(
    cgs: list[dict[str, Any]],
    table: Callable[[list[str], list[list[str]]], list[str]],
    s: Callable[[Any], str],
    limit: int = 50,
) -> list[str]:
    """The console's consumer-group section: a line per member, then the anomalies."""
    if not cgs:
        return []
    rows: list[list[str]] = []
    anomalies: list[list[str]] = []
    for cg in cgs:
        head = [s(cg["group"]), s(cg["state"]), s(cg["group_epoch"]), s(cg["assignment_epoch"])]
        for m in cg["members"] or [{}]:
            rows.append(
                [
                    *head,
                    s(m.get("member_id")),
                    s(m.get("member_epoch")),
                    s(m.get("member_state")),
                    s(m.get("assigned"))[:40],
                    s(m.get("pending"))[:30],
                    s(m.get("target"))[:40],
                ]
            )
        anomalies += [
            [s(a["severity"]), s(a["check"]), s(cg["group"]), s(a["detail"])[:100]]
            for a in cg["anomalies"]
        ]
    lines = ["", "Consumer groups (KIP-848):"]
    lines += table(
        [
            "group",
            "state",
            "epoch",
            "target_epoch",
            "member",
            "member_epoch",
            "member_state",
            "assigned",
            "pending",
            "target",
        ],
        rows[:limit],
    )
    if len(rows) > limit:
        lines.append(f"... and {len(rows) - limit} more members (see the members table)")
    if anomalies:
        lines.append("")
        lines.append(f"Consumer group anomalies ({len(anomalies)}):")
        lines += table(["severity", "check", "group", "detail"], anomalies[:limit])
    return lines


class Progress:
    """One line per stage on stderr with the time since the start, only when stderr is a
    terminal: a pipe or a file gets none, so scripts see only the report and errors."""

    def __init__(self, enabled: bool, stream: IO[str] | None = None) -> None:
        self.enabled = enabled
        self.stream = stream
        self.t0 = time.perf_counter()

    @classmethod
    def on_terminal(cls, quiet: bool) -> Progress:
        return cls(not quiet and sys.stderr.isatty())

    def __call__(self, text: str) -> None:
        if self.enabled:
            print(
                f"kgc audit: [{time.perf_counter() - self.t0:6.1f} s] {text}",
                file=self.stream or sys.stderr,
                flush=True,
            )


def _usage_problem(args: argparse.Namespace) -> str | None:
    """What can be refused before pyspark is imported and a JVM started."""
    if args.log_dir:
        local = _local_path(args.log_dir)
        if local is not None and not os.path.isdir(local):
            why = "is not a directory" if os.path.exists(local) else "does not exist"
            return f"--log-dir {args.log_dir} {why}"
    return None


def _spark_log() -> str | None:
    """A file for the output of the JVM this run starts (None under spark-submit: the JVM
    is already up, its output is where spark-submit put it)."""
    if _under_spark_submit():
        return None
    fd, path = tempfile.mkstemp(prefix="kgc-audit-spark-", suffix=".log")
    os.close(fd)
    return path


def _keep_log(path: str | None) -> str:
    """On failure: the Spark log's name for the error line, if it holds anything."""
    if path is None or not os.path.exists(path):
        return ""
    if os.path.getsize(path) == 0:
        os.unlink(path)
        return ""
    return f" (Spark's output: {path})"


def run(args: argparse.Namespace) -> int:
    problem = _usage_problem(args)
    if problem is not None:
        print(f"kgc audit: error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return EXIT_ERROR
    from coordinator.audit.job import AuditError, AuditOptions, run_audit

    verbose = bool(getattr(args, "verbose", False))
    if not verbose:
        quiet_python_side()
    progress = Progress.on_terminal(args.quiet)
    now_ms = args.now_ms if args.now_ms is not None else time.time_ns() // 1_000_000
    opts = AuditOptions(
        log_dir=args.log_dir or "",
        storage_url=args.storage_url,
        jdbc_jar=args.jdbc_jar,
        window=args.window,
        now_ms=now_ms,
        retention_minutes=args.retention_minutes,
        clock_skew_ms=args.clock_skew_ms,
        offsets_partitions=args.offsets_partitions,
        top=args.top,
        progress=progress,
    )
    t0 = time.perf_counter()
    log_path = None if verbose else _spark_log()
    try:
        jars = [args.jdbc_jar] if args.storage_url and os.path.exists(args.jdbc_jar) else None
        progress(f"starting Spark ({args.master or 'local[2]'})")
        with jvm_output_to(log_path):
            spark = spark_session(args.master, jars=jars, log_level="WARN" if verbose else "ERROR")
        result = run_audit(spark, opts)
        summary, top_rows, groups = build_summary(result, args.fail_on)
        code = EXIT_FINDINGS if summary["failing_findings"] else EXIT_OK
        summary["exit_code"] = code
        summary["seconds"]["total"] = round(time.perf_counter() - t0, 3)
        progress(f"writing the reports ({args.format}) to {args.out}")
        write_reports(result, args.out, args.format, summary)
        result.release()
    except AuditError as e:
        print(f"kgc audit: {e}{_keep_log(log_path)}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:  # Spark errors arrive as Py4J / Analysis exceptions
        first = str(e).splitlines()[0] if str(e) else ""
        print(
            f"kgc audit failed: {type(e).__name__}: {first}{_keep_log(log_path)}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    if log_path is not None:
        with contextlib.suppress(OSError):
            os.unlink(log_path)  # the JVM may keep writing to it: the name goes, not the file
    progress(f"done in {time.perf_counter() - t0:.1f} s")
    if not args.quiet:
        print(render_console(summary, top_rows, groups))
        print(
            f"\nreports: {args.out} ({args.format}), the page {args.out.rstrip('/')}/{HTML_REPORT};"
            f" exit {code}"
        )
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kgc audit", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))
