"""Spark with its own Kafka source: one local[2] SparkSession for the session, and servers.

How this works: ``scripts/ensure-jvm-deps`` resolves ``tests/jvm/spark-kafka/pom.xml``
(spark-sql-kafka-0-10 and what it needs beyond PySpark's own jars) and writes the jars' paths,
comma-separated, to ``tests/jvm/target/spark-kafka/classpath.txt``; the session gets them as
``spark.jars``. The environment is prepared as ``kgc audit`` does it (loopback binding, this
interpreter for the workers, UTC). ``spark.jars`` only counts when the JVM starts, so a session
already running without them (the audit tests' own, in a run that selects both) is stopped
first. ``bootstrap`` runs a test against kgc and once against the reference Kafka broker.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None:  # pragma: no cover
    pytest.skip("Java is not installed", allow_module_level=True)

CONNECTOR_JARS = (
    Path(__file__).resolve().parents[1] / "jvm" / "target" / "spark-kafka" / "classpath.txt"
)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from coordinator.audit.cli import prepare_environment

    if not CONNECTOR_JARS.exists():
        pytest.fail(f"{CONNECTOR_JARS} is missing: run scripts/ensure-jvm-deps")
    jars = CONNECTOR_JARS.read_text().strip()
    running = SparkContext._active_spark_context
    if running is not None and running.getConf().get("spark.jars", "") != jars:
        SparkSession.builder.getOrCreate().stop()
    prepare_environment("local[2]")
    local_dir = tempfile.mkdtemp(prefix="kgc-spark-kafka-")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kgc-spark-kafka-tests")
        .config("spark.jars", jars)
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


@pytest.fixture(params=["kgc", "kafka"])
def bootstrap(request: Any) -> str:
    server = request.getfixturevalue("kgc" if request.param == "kgc" else "kafka_broker")
    return str(server.bootstrap)
