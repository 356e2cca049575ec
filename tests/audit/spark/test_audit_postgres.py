"""The offsets audit from PostgreSQL (``kgc audit --storage-url``) against a real server.

How this works: a data directory is written with kgc's own storage code (``logbuilder``, the
file audit's anomalies injected by ``test_audit``'s functions), then copied into a migrated
database as cluster mode keeps it: ``kgc_topic`` from ``topics.json`` (plus
``__consumer_offsets``), one ``kgc_partition`` lease per partition directory (``next_offset``
= its log end, ``log_start_offset`` from its checkpoint) and ``kgc_record_log`` rows of a few
consecutive batches each, bytes as the segment holds them.  The audit from the database must
find exactly what the file audit finds, with the same partitions and groups tables; the
checks only the database allows (gaps between rows, a row beyond ``next_offset``, an epoch
going down) are injected into the rows directly.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual
from support.auditkit import (
    FINDING_SCHEMA,
    GROUP_SCHEMA,
    N_OPARTS,
    NOW,
    OP,
    PARTITION_SCHEMA,
    Expected,
    PostClose,
    build,
    inject_commit_below_log_start,
    inject_commit_for_unknown_partition,
    inject_crc_mismatch,
    inject_offset_rewind_across_segments,
    inject_offsets_past_retention,
    inject_overlapping_segments,
    inject_truncated_batch,
    inject_wrong_partition,
)
from support.logbuilder import OFFSETS, DataDir

import coordinator.audit
from coordinator import cli
from coordinator.audit.job import AuditOptions, run_audit
from coordinator.audit.source_pg import jdbc_target, redact_url, row_checks
from storage.local.manager import parse_partition_dir
from storage.postgres.schema import migrate
from storage.record_batch import iter_batches

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

Row = tuple[str, int, int, int, int, int, int, bytes]  # a kgc_record_log row
Inject = Callable[[DataDir], tuple[Expected, PostClose | None]]


# ---------------------------------------------------------------- data directory -> database


def _segment_rows(
    topic: str, part: int, data: bytes, per_row: int, epoch: int
) -> tuple[list[Row], int]:
    """A segment's bytes as kgc_record_log rows of up to ``per_row`` batches, and its end.

    A batch that does not start after the offsets already written stays in the row before
    (a row's batches are what one write stored, in order); bytes after the last whole batch
    stay at the end of the last row, as they would be on disk.
    """
    rows: list[list[Any]] = []
    reach = -1
    end = 0
    for h, _start, end in iter_batches(data):
        cur = rows[-1] if rows else None
        if cur is None or (len(cur[7]) >= per_row and h.base_offset > reach):
            rows.append([topic, part, h.base_offset, h.last_offset, epoch, 0, -1, []])
            cur = rows[-1]
        cur[3] = max(cur[3], h.last_offset)
        cur[5] += h.records_count
        cur[6] = max(cur[6], h.max_timestamp)
        cur[7].append(data[_start:end])
        reach = max(reach, h.last_offset)
    if rows and end < len(data):
        rows[-1][7].append(data[end:])
    out = [(t, p, b, la, e, n, ts, b"".join(bs)) for t, p, b, la, e, n, ts, bs in rows]
    return out, reach + 1


async def _load(url: str, root: Path, per_row: int = 2) -> None:
    """Copy a data directory into a freshly migrated database, as cluster mode stores it."""
    conn = await asyncpg.connect(url)
    try:
        await migrate(conn)
        catalog = json.loads((root / "topics.json").read_text())
        ids: dict[str, uuid.UUID] = {}
        offsets_dirs = [d for d in root.iterdir() if d.name.startswith(OFFSETS + "-")]
        for name, n in [(t["name"], t["partitions"]) for t in catalog] + [
            (OFFSETS, len(offsets_dirs))
        ]:
            ids[name] = uuid.uuid4()
            await conn.execute(
                "INSERT INTO kgc_topic (name, topic_id, partitions, internal) "
                "VALUES ($1, $2, $3, $4)",
                name,
                ids[name],
                n,
                name == OFFSETS,
            )
        for d in sorted(root.iterdir()):
            parsed = parse_partition_dir(d.name) if d.is_dir() else None
            if parsed is None:
                continue
            topic, part = parsed
            rows: list[Row] = []
            next_offset = 0
            for seg in sorted(d.glob("*.log")):
                seg_rows, end = _segment_rows(topic, part, seg.read_bytes(), per_row, 0)
                rows += seg_rows
                next_offset = max(next_offset, end)
            ckpt = d / "log-start-offset"
            start = int(ckpt.read_text().split()[1]) if ckpt.exists() else 0
            await conn.execute(
                "INSERT INTO kgc_partition (topic, partition, topic_id, owner_node, "
                "owner_broker_epoch, epoch, next_offset, log_start_offset) "
                "VALUES ($1, $2, $3, 1, 1, 0, $4, $5)",
                topic,
                part,
                ids[topic],
                next_offset,
                start,
            )
            await conn.executemany(
                "INSERT INTO kgc_record_log (topic, partition, base_offset, last_offset, epoch, "
                "record_count, max_timestamp, batch) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                rows,
            )
    finally:
        await conn.close()


async def _sql(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for s in statements:
            await conn.execute(s)
    finally:
        await conn.close()


def pg_build(tmp_path: Path, url: str, inject: Inject | None = None) -> tuple[Path, Expected]:
    root, expected = build(tmp_path, inject)
    asyncio.run(_load(url, root))
    return root, expected


def pg_audit(spark: Any, url: str, **kw: Any) -> Any:
    return run_audit(spark, AuditOptions(storage_url=url, now_ms=NOW, **kw))


def _findings(result: Any) -> Any:
    return result.findings.select("severity", "check", "group", "topic", "partition", "log_offset")


# ---------------------------------------------------------------- same reports as from files


def test_clean_database_has_no_findings_and_correct_lag(
    spark: Any, tmp_path: Path, pg_url: str
) -> None:
    pg_build(tmp_path, pg_url)
    result = pg_audit(spark, pg_url)
    try:
        assert result.findings.count() == 0
        last = NOW - 8000 + 4 * 1500
        expected_parts = spark.createDataFrame(
            [
                ("g1", "orders", 0, 500, 500, 0, -1, last, 5, "OK", 0, OP),
                ("g1", "orders", 1, 250, 300, 50, -1, last, 5, "OK", 0, OP),
            ],
            PARTITION_SCHEMA,
        )
        assertDataFrameEqual(result.partitions.select(*expected_parts.columns), expected_parts)
        expected_groups = spark.createDataFrame(
            [("g1", "Stable", 2, 2, 50, "OK", 100.0, 3)], GROUP_SCHEMA
        )
        assertDataFrameEqual(result.groups, expected_groups)
        # 11 records in rows of two batches (one record each)
        assert result.stats["records"] == 11 and result.stats["offsets_rows"] == 6
        assert result.stats["offsets_partitions"] == N_OPARTS
    finally:
        result.release()


@pytest.mark.parametrize(
    "inject",
    [inject_crc_mismatch, inject_truncated_batch, inject_overlapping_segments],
    ids=lambda f: f.__name__.removeprefix("inject_"),
)
def test_damaged_row_is_found_as_from_files(
    spark: Any, tmp_path: Path, pg_url: str, inject: Inject
) -> None:
    """The byte-level anomalies, where rows differ from segments most: a row is decoded like a
    small segment and named like one, ``pg:<offsets partition>@<base offset>``."""
    _, expected = pg_build(tmp_path, pg_url, inject)
    if inject is inject_overlapping_segments:
        # The row at base offset 5 overlaps [4-5]; the database's log (and kgc's replay of
        # it) is in base_offset order, so its commit (500 at NOW-1000) comes before the one
        # at offset 7 (400 at NOW-3500): a rewind a replay from the database really sees,
        # where the file's replay reads the overlapping segment after the whole first one.
        expected += [
            ("warn", "commit_timestamp_backwards", "g1", "orders", 0, 7),
            ("warn", "offset_rewind", "g1", "orders", 0, 7),
        ]
    result = pg_audit(spark, pg_url)
    try:
        assertDataFrameEqual(_findings(result), spark.createDataFrame(expected, FINDING_SCHEMA))
        damage = result.findings.filter("severity = 'error'").collect()
        name = f"pg:{OFFSETS}-{OP}@" + ("5" if inject is inject_overlapping_segments else "10")
        assert [r["detail"].split()[0].rstrip(":") for r in damage] == [name], damage
    finally:
        result.release()


def test_reports_equal_the_file_audit(spark: Any, tmp_path: Path, pg_url: str) -> None:
    """The file audit's anomalies at once -- a rewind (across segments), offsets for a deleted
    topic and a missing partition, a group in the wrong partition, a commit below the log
    start (from the lease), offsets past retention: the same findings, every table the same."""
    injected = [
        inject_offset_rewind_across_segments,
        inject_wrong_partition,
        inject_commit_for_unknown_partition,
        inject_commit_below_log_start,
        inject_offsets_past_retention,
    ]

    def many(dd: DataDir) -> tuple[Expected, PostClose | None]:
        expected: Expected = []
        posts = []
        for inject in injected:
            found, post = inject(dd)
            expected += found
            posts += [post] if post is not None else []

        def post_all(root: Path) -> None:
            for post in posts:
                post(root)

        return expected, post_all

    root, expected = pg_build(tmp_path, pg_url, many)
    files = run_audit(spark, AuditOptions(str(root), now_ms=NOW))
    db = pg_audit(spark, pg_url)
    try:
        assertDataFrameEqual(_findings(db), spark.createDataFrame(expected, FINDING_SCHEMA))
        # the same rows, details too, but those of decoded rows name the row they are about
        named = F.regexp_replace("detail", r"^pg:[^ ]+@[0-9]+: ", "")
        assertDataFrameEqual(db.findings.withColumn("detail", named), files.findings)
        assertDataFrameEqual(db.partitions, files.partitions)
        assertDataFrameEqual(db.groups, files.groups)
        assert db.summary == files.summary
        unnamed = [
            {**f, "detail": re.sub(r"^pg:[^ ]+@[0-9]+: ", "", f["detail"])} for f in db.top_findings
        ]
        assert unnamed == files.top_findings and db.group_rows == files.group_rows
        assert db.stats["records"] == files.stats["records"]
    finally:
        files.release()
        db.release()


# ---------------------------------------------------------------- checks only the database has


def test_row_checks_gap_beyond_next_offset_and_epoch_regression(
    spark: Any, tmp_path: Path, pg_url: str
) -> None:
    """g1's partition holds rows [0-1] [2-3] [4-5] [6-7] [8-9] [10].  [0-1] is made to look
    rewritten by compaction (appended after the rows that follow it) and [2-3] deleted: a
    gap compaction may leave, not flagged.  [6-7] is deleted (a gap after an appended row),
    [8-9] written at a lower epoch than [4-5], next_offset says 10 while [10] exists, and an
    empty partition's lease claims offsets 0..2.  Each is one error; nothing else is flagged."""
    pg_build(tmp_path, pg_url)
    empty = (OP + 1) % N_OPARTS
    where = f"topic = '{OFFSETS}' AND partition = {OP}"
    asyncio.run(
        _sql(
            pg_url,
            f"UPDATE kgc_record_log SET append_time = append_time + interval '1 hour' "
            f"WHERE {where} AND base_offset = 0",
            f"DELETE FROM kgc_record_log WHERE {where} AND base_offset IN (2, 6)",
            f"UPDATE kgc_record_log SET epoch = CASE base_offset WHEN 8 THEN 1 ELSE 2 END "
            f"WHERE {where} AND base_offset >= 4",
            f"UPDATE kgc_partition SET next_offset = 10 WHERE {where}",
            f"UPDATE kgc_partition SET next_offset = 3 WHERE topic = '{OFFSETS}' "
            f"AND partition = {empty}",
        )
    )
    result = pg_audit(spark, pg_url)
    try:
        expected = [
            ("error", "offset_gap", None, OFFSETS, OP, 6),
            ("error", "partition_epoch_regression", None, OFFSETS, OP, 8),
            ("error", "row_beyond_next_offset", None, OFFSETS, OP, 10),
            ("error", "offset_gap", None, OFFSETS, empty, 0),
        ]
        assertDataFrameEqual(_findings(result), spark.createDataFrame(expected, FINDING_SCHEMA))
        details = {r["check"] + str(r["partition"]): r["detail"] for r in result.findings.collect()}
        assert details[f"offset_gap{OP}"] == (
            f"pg:{OFFSETS}-{OP}@8: offsets 6..7 have no row (after the previous row)"
        )
        assert details[f"partition_epoch_regression{OP}"].startswith(f"pg:{OFFSETS}-{OP}@8: ")
    finally:
        result.release()


def test_row_checks_unit() -> None:
    """row_checks alone: contiguous rows pass; each anomaly is one error finding."""
    from coordinator.audit.source_pg import _LogRow

    ok = [_LogRow(0, 1, 1, b""), _LogRow(2, 4, 1, b""), _LogRow(5, 5, 2, b"")]
    assert row_checks(3, (0, 6), ok) == []
    assert row_checks(3, (6, 6), []) == []  # retention removed everything: fine

    def checks(lease: tuple[int, int], rows: list[_LogRow]) -> list[tuple[str, int]]:
        return [(f["chk"], f["lo1"]) for f in row_checks(3, lease, rows)]

    assert checks((0, 6), [ok[0], ok[2]]) == [("offset_gap", 2)]
    assert checks((0, 9), ok) == [("offset_gap", 6)]  # rows end before next_offset
    assert checks((0, 5), ok) == [("row_beyond_next_offset", 5)]
    assert checks((0, 6), [ok[0], ok[1]._replace(epoch=0), ok[2]]) == [
        ("partition_epoch_regression", 2)
    ]
    assert checks((2, 7), []) == [("offset_gap", 2)]
    # before the first row: retention (a row straddling log_start_offset) or compaction
    assert checks((3, 6), ok[1:]) == []
    assert checks((0, 6), ok[2:]) == []
    # compaction: rows appended after the row they precede may leave gaps, and carry their
    # batches' epoch (-1: not stamped) -- but the rows from the kept one on may not
    compacted = [_LogRow(0, 0, -1, b"", 9), _LogRow(2, 2, -1, b"", 9)]
    kept = [_LogRow(4, 4, 3, b"", 5), _LogRow(5, 5, 3, b"", 6), _LogRow(7, 7, 3, b"", 7)]
    assert checks((0, 8), [*compacted, *kept]) == [("offset_gap", 6)]


def test_jdbc_target_and_redaction() -> None:
    t = jdbc_target("postgresql://kgc:s%40cret@db.example:5433/kgc?sslmode=require")
    assert t == ("jdbc:postgresql://db.example:5433/kgc?sslmode=require", "kgc", "s@cret")
    assert jdbc_target("postgres://h/db?user=u&password=p") == ("jdbc:postgresql://h/db", "u", "p")
    for bad in ("mysql://h/db", "postgresql:///db?host=/run/postgresql"):
        with pytest.raises(ValueError):
            jdbc_target(bad)
    assert redact_url("postgresql://kgc:secret@h:1/db") == "postgresql://kgc:***@h:1/db"
    assert redact_url("postgresql://kgc@h:1/db") == "postgresql://kgc@h:1/db"


# ---------------------------------------------------------------- command line


def test_cli_exit_codes_reports_and_errors(
    spark: Any, tmp_path: Path, pg_url: str, capsys: Any
) -> None:
    pg_build(tmp_path, pg_url, inject_crc_mismatch)
    out = tmp_path / "out"
    args = ["audit", "--storage-url", pg_url, "--out", str(out), "--now-ms", str(NOW)]
    assert cli.main(args) == 4  # a finding at --fail-on error
    console = capsys.readouterr().out
    assert "crc_mismatch" in console and f"kgc offsets audit of {pg_url}" in console
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_code"] == 4 and summary["storage_url"] == pg_url
    assert summary["findings"]["by_check"] == {"crc_mismatch": {"error": 1}}
    rows = spark.read.parquet(str(out / "findings")).collect()
    assert [r["check"] for r in rows] == ["crc_mismatch"]

    # nothing listening there: exit 1 with the driver's reason, and no password shown
    dead = "postgresql://kgc:hunter2@127.0.0.1:1/kgc"
    assert cli.main(["audit", "--storage-url", dead, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "cannot read postgresql://kgc:***@127.0.0.1:1/kgc" in err and "hunter2" not in err
    # --log-dir and --storage-url are one or the other
    with pytest.raises(SystemExit):
        cli.main(["audit", "--log-dir", str(tmp_path), "--storage-url", pg_url, "--out", "o"])


# slow: a whole `kgc audit` (or spark-submit) run in its own JVM, 90-110 s loaded; CI runs
# it in `scripts/test -m slow`.
@pytest.mark.long
@pytest.mark.slow
def test_spark_submit_with_storage_url(tmp_path: Path, pg_url: str) -> None:
    """``spark-submit coordinator/audit/__main__.py --storage-url``: the JVM is up before the
    audit runs, so the JDBC driver arrives by ADD JAR (no --jars, never --packages)."""
    import pyspark

    pg_build(tmp_path, pg_url)
    home = Path(pyspark.__file__).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_GATEWAY", "SPARK_"))}
    env.update(
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        TZ="UTC",
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            str(home / "bin" / "spark-submit"),
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.sql.shuffle.partitions=2",
            "--conf",
            "spark.driver.host=127.0.0.1",
            str(Path(coordinator.audit.__file__).parent / "__main__.py"),
            "--storage-url",
            pg_url,
            "--out",
            str(out),
            "--now-ms",
            str(NOW),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["records"] == 11 and summary["findings"]["total"] == 0
    assert summary["partitions"] == 2 and summary["total_lag"] == 50


# ---------------------------------------------------------------- the group history table


async def _history_rows(url: str, values: list[tuple[int, bytes]]) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.executemany(
            "INSERT INTO kgc_group_history (offsets_partition, after_offset, written_ms, epoch,"
            " value) VALUES ($1, $2, $3, 1, $4)",
            [(OP, i + 1, t, v) for i, (t, v) in enumerate(values)],
        )
    finally:
        await conn.close()


def test_group_history_from_the_table(spark: Any, tmp_path: Path, pg_url: str) -> None:
    """The cluster's kgc_group_history rows (one codec value each) give the group's lag and
    commit rate over time: g1's five commits of the baseline, each partition's offset
    against the log's end at the time."""
    from coordinator.group.records import OffsetEntry, offset_commit_record
    from coordinator.history.codec import encode
    from coordinator.history.model import OffsetChange

    pg_build(tmp_path, pg_url)
    values = []
    for i in range(5):
        ts = NOW - 8000 + i * 1500
        records = [
            offset_commit_record(OP, "g1", "orders", p, OffsetEntry(off, -1, "", ts))
            for p, off in ((0, 100 * (i + 1)), (1, 50 * (i + 1)))
        ]
        change = OffsetChange(OP, "g1", "m", "c", "/h", records, [-1, -1], [0, 0])
        values.append((ts, encode(ts, [change])))
    asyncio.run(_history_rows(pg_url, values))
    result = pg_audit(spark, pg_url)
    try:
        assert result.history is not None
        (g1,) = result.history["groups"]
        assert (g1.group, g1.partitions, g1.commits) == ("g1", 2, 10)
        # orders-0 ends at 500, orders-1 at 300: 400 + 250 after the first commit, 0 + 50
        # after the last
        assert g1.lag[0] == 650 and g1.lag[-1] == 50
        assert result.history["start_ms"] == NOW - 8000 and result.history["bad_values"] == 0
    finally:
        result.release()
