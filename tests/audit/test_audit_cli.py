"""``kgc audit``'s refusals that need no Spark: a missing log directory is bad usage (exit 2)
reported in well under a second, before pyspark is imported or a JVM started."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


def kgc_audit(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "coordinator", "audit", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return proc, time.monotonic() - t0


@pytest.mark.parametrize(
    ("where", "why"), [("missing", "does not exist"), ("a-file", "is not a directory")]
)
def test_unusable_log_dir_fails_at_once_as_bad_usage(tmp_path: Path, where: str, why: str) -> None:
    (tmp_path / "a-file").write_text("not a data directory")
    log_dir = tmp_path / where
    proc, seconds = kgc_audit("--log-dir", str(log_dir), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc
    assert proc.stderr.strip() == f"kgc audit: error: --log-dir {log_dir} {why}", proc.stderr
    assert proc.stdout == ""
    assert seconds < 1.0, f"took {seconds:.2f} s"
    assert not (tmp_path / "out").exists()
    # the same through a file: URI
    proc, _ = kgc_audit("--log-dir", f"file://{log_dir}", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and why in proc.stderr, proc


def test_bad_arguments_are_exit_2_too(tmp_path: Path) -> None:
    for args in (
        ["--log-dir", str(tmp_path), "--out", str(tmp_path / "o"), "--window", "0"],
        ["--log-dir", str(tmp_path), "--out", str(tmp_path / "o"), "--format", "csv"],
        ["--out", str(tmp_path / "o")],  # no source
    ):
        proc, _ = kgc_audit(*args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc
