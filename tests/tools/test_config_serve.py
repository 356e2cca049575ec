"""``kgc serve --config server.properties`` with the file Kafka 4 ships for KRaft.

The file below is Kafka's config/server.properties (combined broker and controller) with its
comments left out, only the ports and the log directory changed for the test. kgc must start
from it: the broker listener bound and advertised, the controller listener not bound, the
data in ``log.dirs``, the settings that mean nothing for kgc listed once as ignored, and no
warning; then a real client produces and consumes through it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from support.kgc_process import free_port

pytestmark = pytest.mark.integration

STOCK = """\
############################# Server Basics #############################

# The role of this server. Setting this puts us in KRaft mode
process.roles=broker,controller

# The node id associated with this instance's roles
node.id=1

# List of controller endpoints used connect to the controller cluster
controller.quorum.bootstrap.servers=localhost:{controller}

############################# Socket Server Settings #############################

listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}

# Name of listener used for communication between brokers.
inter.broker.listener.name=PLAINTEXT

advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}

controller.listener.names=CONTROLLER

listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL

num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

############################# Log Basics #############################

log.dirs={log_dirs}
num.partitions=1
num.recovery.threads.per.data.dir=1

############################# Internal Topic Settings  #############################
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

############################# Log Retention Policy #############################

log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def test_kafkas_stock_server_properties_starts_kgc(tmp_path: Path) -> None:
    port, controller = free_port(), free_port()
    log_dirs = tmp_path / "kraft-combined-logs"
    props = tmp_path / "server.properties"
    props.write_text(STOCK.format(port=port, controller=controller, log_dirs=log_dirs))
    log_path = tmp_path / "kgc.log"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("KGC_")}
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "coordinator", "serve"),
                *("--config", str(props), "--metrics-port", "0"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**env, "PYTHONUNBUFFERED": "1"},
        )
    try:
        deadline = time.monotonic() + 30
        while not listening(port):
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        assert not listening(controller)  # kgc runs no controller

        p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "acks": "all"})
        for i in range(10):
            p.produce("stock", key=b"k%d" % i, value=b"v%d" % i)
        assert p.flush(30) == 0
        c = Consumer(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "group.id": "stock-readers",
                "auto.offset.reset": "earliest",
            }
        )
        try:
            c.subscribe(["stock"])
            got: list[bytes | None] = []
            deadline = time.monotonic() + 60
            while len(got) < 10:
                assert time.monotonic() < deadline, got
                for m in c.consume(10, 1.0):
                    assert m.error() is None, m.error()
                    got.append(m.value())
            assert sorted(v or b"" for v in got) == sorted(b"v%d" % i for i in range(10))
            c.commit(asynchronous=False)
        finally:
            c.close()
        assert (log_dirs / "stock-0").is_dir()  # log.dirs is the data directory
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    log = log_path.read_text()
    assert code == 0, log
    assert "Traceback" not in log, log
    assert " WARNING " not in log and " ERROR " not in log, log
    (ignored,) = [ln for ln in log.splitlines() if "Kafka settings ignored" in ln]
    for name in (
        "process.roles",
        "controller.quorum.bootstrap.servers",
        "num.network.threads",
        "num.io.threads",
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
        "num.recovery.threads.per.data.dir",
        "offsets.topic.replication.factor",
        "transaction.state.log.min.isr",
    ):
        assert name in ignored, name
    for honoured in (
        "node.id",
        "listeners",
        "log.dirs",
        "num.partitions",
        "log.retention.hours",
        "log.retention.check.interval.ms",
    ):
        assert f" {honoured}," not in ignored and not ignored.endswith(f" {honoured}")
    (effective,) = [ln for ln in log.splitlines() if "configuration (settings other" in ln]
    assert "node.id=1" in effective
    assert "log.retention.check.interval.ms=300000" in effective  # the stock file's 5 min
    assert f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}" in effective
    assert f"data.dir={log_dirs}" in effective
    assert "CONTROLLER (controller.listener.names) are not bound" in log
