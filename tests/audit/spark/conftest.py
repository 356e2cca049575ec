"""Spark fixtures for the audit tests: one local[2] SparkSession for the whole session.

How this works: the environment is prepared as ``kgc audit`` does it (loopback binding, this
interpreter for the workers, UTC, no stray SPARK_HOME); the session has no UI, two shuffle
partitions and a temporary ``spark.local.dir``. ``kgc audit`` run in-process afterwards
reuses it through ``getOrCreate``. Everything here is skipped when pyspark or Java is missing.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None:  # pragma: no cover
    pytest.skip("Java is not installed", allow_module_level=True)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from coordinator.audit.cli import prepare_environment

    prepare_environment("local[2]")
    local_dir = tempfile.mkdtemp(prefix="kgc-spark-")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kgc-audit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", local_dir)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    shutil.rmtree(local_dir, ignore_errors=True)
