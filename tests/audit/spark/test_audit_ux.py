"""What a person or a script sees of ``kgc audit`` run as a command (a subprocess each).

Piped (a script): no progress lines and none of Spark's own output on stdout or stderr, only
the report; ``--format json`` writes one JSON file per report, no Spark part-directories; a
finding at ``--fail-on`` exits 4, distinct from bad usage's 2. On a terminal (stderr a pty):
one progress line per stage, and with ``--verbose`` Spark's own lines too.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.auditkit import NOW, build, inject_truncated_batch

pytestmark = pytest.mark.spark

# what a JVM started by pyspark prints on its own (start-up lines, log4j's WARN lines)
SPARK_NOISE = ("log4j", "WARN", "setLogLevel", "NativeCodeLoader", "incubator")


def audit_cmd(root: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "coordinator",
        "audit",
        "--log-dir",
        str(root),
        "--out",
        str(out),
        "--now-ms",
        str(NOW),
        *extra,
    ]


def env_with_tmp(tmp: Path) -> dict[str, str]:
    tmp.mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"}


# slow: a whole `kgc audit` (or spark-submit) run in its own JVM, 90-110 s loaded; CI runs
# it in `scripts/test -m slow`.
@pytest.mark.slow
def test_piped_run_is_quiet_and_writes_one_json_file_per_report(tmp_path: Path) -> None:
    root, _ = build(tmp_path / "bad", inject_truncated_batch)
    out = tmp_path / "out"
    (out / "findings").mkdir(parents=True)  # an earlier run's part-directory goes away
    tmp = tmp_path / "tmp"
    proc = subprocess.run(
        audit_cmd(root, out, "--format", "json"),
        capture_output=True,
        text=True,
        timeout=300,
        env=env_with_tmp(tmp),
    )
    # a finding at --fail-on (error): 4, not bad usage's 2
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stderr == "", proc.stderr  # no progress, no Spark output
    assert "kgc offsets audit of" in proc.stdout and "truncated_batch" in proc.stdout
    assert not any(n in proc.stdout for n in SPARK_NOISE), proc.stdout
    assert proc.stdout.rstrip().endswith("exit 4")

    assert sorted(p.name for p in out.iterdir()) == [
        "findings.json",
        "groups.json",
        "members.json",
        "partitions.json",
        "report.html",  # the page a person reads: lag and commit-rate charts, the findings
        "summary.json",
    ]
    assert all(p.is_file() for p in out.iterdir())
    findings = json.loads((out / "findings.json").read_text())
    assert [f["check"] for f in findings] == ["truncated_batch"]
    # every column is there, nulls included (Spark's JSON writer would drop them)
    assert set(findings[0]) >= {"severity", "group", "topic", "partition", "log_offset"}
    parts = json.loads((out / "partitions.json").read_text())
    assert sorted((p["partition"], p["lag"]) for p in parts) == [(0, 0), (1, 50)]
    assert json.loads((out / "summary.json").read_text())["exit_code"] == 4
    # the JVM's output went to a temporary file, removed after a successful run
    assert not list(tmp.glob("kgc-audit-spark-*")), list(tmp.iterdir())


def read_pty(fd: int, proc: subprocess.Popen[str], timeout: float) -> str:
    """Everything written to the pty until every writer closed it (or the process ended)."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the other side is closed
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    return b"".join(chunks).decode(errors="replace")


# slow: a whole `kgc audit` (or spark-submit) run in its own JVM, 90-110 s loaded; CI runs
# it in `scripts/test -m slow`.
@pytest.mark.slow
def test_terminal_run_shows_each_stage_and_verbose_shows_spark(tmp_path: Path) -> None:
    root, _ = build(tmp_path)
    out = tmp_path / "out"
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        audit_cmd(root, out, "--verbose"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        text=True,
        env=env_with_tmp(tmp_path / "tmp"),
    )
    os.close(slave)
    try:
        terminal = read_pty(master, proc, timeout=300)
        stdout = proc.communicate(timeout=60)[0]
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stdout[-3000:] + terminal[-3000:]
    stages = [ln.split("] ", 1)[1] for ln in terminal.splitlines() if ln.startswith("kgc audit: [")]
    assert [s.split(" ")[0] for s in stages] == [
        "starting",
        "listing",
        "job",
        "job",
        "writing",
        "done",
    ], terminal
    assert stages[2].startswith("job 1/2: topic logs") and stages[3].startswith("job 2/2"), stages
    # --verbose: Spark's own start-up lines reach the terminal
    assert "log4j" in terminal, terminal
    assert "No findings." in stdout and "kgc audit: [" not in stdout


def test_json_report_through_hadoop_filesystem(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An --out that is a Hadoop URI (hdfs://, s3a://) is written through the JVM's
    FileSystem API: the same one JSON file, here on the local file system posing as remote."""
    from coordinator.audit import cli as audit_cli

    monkeypatch.setattr(audit_cli, "_local_path", lambda path: None)
    # 20,000 rows are over a MiB: the stream gets several writes
    df = spark.createDataFrame(
        [("g", "t", i, None if i % 2 else i * 10) for i in range(20_000)],
        "`group` string, topic string, `partition` int, lag bigint",
    )
    stale = tmp_path / "findings"
    stale.mkdir()  # a Parquet run's directory of the same report
    audit_cli._write(df, f"file://{stale}", "json")
    rows = json.loads((tmp_path / "findings.json").read_text())
    assert len(rows) == 20_000 and rows[1] == {
        "group": "g",
        "topic": "t",
        "partition": 1,
        "lag": None,
    }
    assert not stale.exists()
