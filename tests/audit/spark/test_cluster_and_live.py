"""The audit through spark-submit on a local standalone cluster, and on a real kgc's log.

How this works: the standalone test starts a Spark master and one worker bound to 127.0.0.1
with ``spark-daemon.sh`` from the pyspark package (pip's pyspark has no start-master.sh),
submits ``coordinator/audit/__main__.py`` with ``spark-submit --master spark://...`` and stops
both daemons afterwards. The live test commits offsets to a running ``kgc serve`` with
kafka-python in simple-group mode (assign + commit, generation -1), stops the server cleanly
and audits its data directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from support.logbuilder import DataDir

import coordinator.audit
from coordinator.audit.job import AuditOptions, run_audit

pytestmark = pytest.mark.spark

NOW = 1_700_000_000_000


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _daemon(env: dict[str, str], action: str, cls: str, *args: str) -> None:
    script = _spark_home() / "sbin" / "spark-daemon.sh"
    subprocess.run(
        ["bash", str(script), action, cls, "1", *args],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )


# slow: a whole `kgc audit` (or spark-submit) run in its own JVM, 90-110 s loaded; CI runs
# it in `scripts/test -m slow`.
@pytest.mark.long
@pytest.mark.slow
def test_spark_submit_on_standalone_cluster(tmp_path: Path) -> None:
    root = tmp_path / "data"
    dd = DataDir(root, 2)
    dd.topic("orders", 1, {0: 200}, ts=NOW - 9000)
    dd.group("g1", 1, 1, NOW - 8500)
    for i in range(3):
        dd.commit("g1", "orders", 0, 50 * (i + 1), NOW - 8000 + i * 1000)
    dd.close()

    port, ui, wui = _free_port(), _free_port(), _free_port()
    home = str(_spark_home())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_GATEWAY", "SPARK_"))}
    env.update(
        SPARK_HOME=home,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(tmp_path / "logs"),
        SPARK_PID_DIR=str(tmp_path / "pids"),
        SPARK_WORKER_DIR=str(tmp_path / "work"),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        TZ="UTC",
    )
    master = f"spark://127.0.0.1:{port}"
    _daemon(
        env,
        "start",
        "org.apache.spark.deploy.master.Master",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--webui-port",
        str(ui),
    )
    try:
        _daemon(
            env,
            "start",
            "org.apache.spark.deploy.worker.Worker",
            master,
            "--host",
            "127.0.0.1",
            "--webui-port",
            str(wui),
            "--cores",
            "2",
            "--memory",
            "1g",
        )
        deadline = time.monotonic() + 60
        while True:  # wait until the worker has registered with the master
            try:
                state = json.load(urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2))
                if state.get("aliveworkers", 0) >= 1:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "standalone worker did not register"
            time.sleep(0.5)
        main_py = Path(coordinator.audit.__file__).parent / "__main__.py"
        out = tmp_path / "out"
        proc = subprocess.run(
            [
                str(Path(home) / "bin" / "spark-submit"),
                "--master",
                master,
                "--conf",
                "spark.ui.enabled=false",
                "--conf",
                "spark.sql.shuffle.partitions=2",
                "--conf",
                "spark.driver.host=127.0.0.1",
                str(main_py),
                "--log-dir",
                str(root),
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
        assert summary["records"] == 4 and summary["findings"]["total"] == 0
        assert summary["partitions"] == 1 and summary["total_lag"] == 50
        # the work ran on the cluster's executor, not in the driver
        assert any((tmp_path / "logs").glob("*Worker*.out"))
    finally:
        _daemon(env, "stop", "org.apache.spark.deploy.worker.Worker")
        _daemon(env, "stop", "org.apache.spark.deploy.master.Master")


@pytest.mark.long
def test_audit_of_a_running_kgc_log(spark: Any, kgc: Any) -> None:
    import kafka  # a dev dependency: its absence is an error, not a skip
    from kafka.structs import OffsetAndMetadata, TopicPartition

    producer = kafka.KafkaProducer(bootstrap_servers=kgc.bootstrap, acks="all", linger_ms=5)
    for i in range(10):
        producer.send("audited", value=b"v%d" % i, partition=0)
    producer.flush(10)
    producer.close()
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=kgc.bootstrap, group_id="simple", enable_auto_commit=False
    )
    tp = TopicPartition("audited", 0)
    consumer.assign([tp])
    try:
        # A failed commit is a failure of the server under test, never a reason to skip.
        for offset in (3, 7):
            consumer.commit({tp: OffsetAndMetadata(offset, "", -1)})
    finally:
        consumer.close()
    assert kgc.stop() == 0

    result = run_audit(spark, AuditOptions(str(kgc.data_dir), now_ms=int(time.time() * 1000)))
    try:
        rows = result.partitions.collect()
        assert [
            (
                r["group"],
                r["topic"],
                r["partition"],
                r["committed_offset"],
                r["log_end_offset"],
                r["lag"],
                r["commit_count"],
            )
            for r in rows
        ] == [("simple", "audited", 0, 7, 10, 3, 2)]
        checks = {(r["severity"], r["check"]) for r in result.findings.collect()}
        # a simple (assign-mode) consumer writes offsets but no group metadata: info only
        assert checks <= {("info", "offsets_without_group")}, checks
        assert result.stats["offsets_partitions"] >= 1
    finally:
        result.release()
