"""Stock clients bootstrap against a real ``kgc serve``: metadata, topic admin."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration
JS_DIR = Path(__file__).resolve().parents[1] / "js"


async def test_aiokafka_client_bootstraps(kgc: KgcProcess) -> None:
    from aiokafka.client import AIOKafkaClient

    client = AIOKafkaClient(bootstrap_servers=kgc.bootstrap)
    await client.bootstrap()
    try:
        brokers = client.cluster.brokers()
        assert [(b.nodeId, b.host, b.port) for b in brokers] == [(0, "127.0.0.1", kgc.port)]
        assert client.cluster.controller is not None
    finally:
        await client.close()


def test_kafka_python_admin_creates_and_lists_topics(kgc: KgcProcess) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=kgc.bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic("kp-orders", num_partitions=6, replication_factor=1)])
        assert "kp-orders" in admin.list_topics()
        described = admin.describe_topics(["kp-orders"])
        assert len(described[0]["partitions"]) == 6
    finally:
        admin.close()


def test_confluent_admin_creates_and_lists_topics(kgc: KgcProcess) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
    futures = admin.create_topics([NewTopic("ck-orders", num_partitions=4, replication_factor=1)])
    futures["ck-orders"].result(timeout=15)
    md = admin.list_topics(timeout=10)
    assert "ck-orders" in md.topics
    assert len(md.topics["ck-orders"].partitions) == 4
    assert md.brokers[0].port == kgc.port
    # Creating it again fails the way Kafka fails it.
    again = admin.create_topics([NewTopic("ck-orders", num_partitions=4, replication_factor=1)])
    with pytest.raises(Exception, match="already exists"):
        again["ck-orders"].result(timeout=15)


@pytest.mark.skipif(
    shutil.which("node") is None or not (JS_DIR / "node_modules").exists(),
    reason="kafkajs not installed (run npm ci in tests/js)",
)
def test_kafkajs_admin_creates_and_lists_topics(kgc: KgcProcess) -> None:
    out = subprocess.run(
        ["node", str(JS_DIR / "admin.js"), kgc.bootstrap, "js-orders", "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["created"] is True
    assert "js-orders" in result["topics"]
    assert result["partitions"] == 3


def test_topics_survive_restart(kgc: KgcProcess) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
    admin.create_topics([NewTopic("durable-topic", num_partitions=2, replication_factor=1)])[
        "durable-topic"
    ].result(timeout=15)
    kgc.stop()
    kgc.start()
    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
    md = admin.list_topics(timeout=10)
    assert len(md.topics["durable-topic"].partitions) == 2
