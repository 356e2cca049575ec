"""Four real client libraries authenticate with SCRAM-SHA-512 over SASL_SSL and run a group.

How this works: ``certkit`` makes a throwaway CA and a server certificate for 127.0.0.1;
``kgc users add`` stores a SCRAM-SHA-512 credential for ``carol`` before start-up (as an
operator adds the first user); kgc listens on PLAINTEXT and SASL_SSL at once. Each client —
confluent-kafka (librdkafka), aiokafka, kafka-python and kafkajs (node, ``tests/js``'s
node_modules) — is given only the SASL_SSL address, trusts only the test CA, and
produces N records, consumes all N in a consumer group and commits. The SASL_SSL listener
closes any connection that sends a request before authenticating, so every answer the
clients get proves the TLS + SCRAM exchange worked; Metadata and FindCoordinator must name
the SASL_SSL endpoint or the client would speak TLS to the plaintext port. The committed
offsets are then read back (through SASL_SSL too) and must cover every record.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.certkit import Pki, make_pki
from support.groupkit import wait_until
from support.kgc_process import KgcProcess, free_port

pytestmark = pytest.mark.integration
PARTITIONS = 3
MESSAGES = 30
USER, PASSWORD = "carol", "carol-secret"
JS_DIR = Path(__file__).resolve().parents[1] / "js"


class SecureKgc:
    def __init__(self, proc: KgcProcess, sasl_ssl_port: int, pki: Pki) -> None:
        self.proc = proc
        self.port = sasl_ssl_port
        self.pki = pki

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def kgc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKgc]:
    base = tmp_path_factory.mktemp("sasl-ssl")
    pki = make_pki(base / "pki")
    data = base / "data"
    subprocess.run(
        [sys.executable, "-m", "coordinator", "users", "add", "--data-dir", str(data),
         "--mechanism", "SCRAM-SHA-512", "--password", PASSWORD, USER],
        check=True,
    )  # fmt: skip
    port, sasl_ssl_port = free_port(), free_port()
    proc = KgcProcess(
        data,
        "--listeners",
        f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_ssl_port}",
        "--ssl-keystore-type",
        "PEM",
        "--ssl-keystore-location",
        str(pki.server),
        "--sasl-enabled-mechanisms",
        "SCRAM-SHA-512",
        port=port,
    )
    proc.start()
    try:
        yield SecureKgc(proc, sasl_ssl_port, pki)
    finally:
        proc.stop()


def confluent_conf(kgc: SecureKgc) -> dict[str, Any]:
    return {
        "bootstrap.servers": kgc.bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(kgc.pki.ca),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": PASSWORD,
    }


def new_topic(kgc: SecureKgc) -> str:
    """A topic made through the SASL_SSL listener (CreateTopics as carol)."""
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(confluent_conf(kgc))
    md = admin.list_topics(timeout=20)
    # Clients of the SASL_SSL listener are given its endpoint, not the PLAINTEXT one.
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", kgc.port)]
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(20)
    return topic


def committed(kgc: SecureKgc, group: str, topic: str) -> list[int]:
    """The group's committed offsets per partition, read with a fresh SASL_SSL client."""
    c = Consumer({**confluent_conf(kgc), "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=20)
    finally:
        c.close()
    return [tp.offset for tp in sorted(tps, key=lambda tp: tp.partition)]


def payloads() -> list[bytes]:
    return [f"v{i}".encode() for i in range(MESSAGES)]


def test_confluent_kafka(kgc: SecureKgc) -> None:
    topic, group = new_topic(kgc), f"g-ck-{uuid.uuid4().hex[:6]}"
    producer = Producer(confluent_conf(kgc))
    for i, value in enumerate(payloads()):
        producer.produce(topic, value=value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            **confluent_conf(kgc),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    seen: list[bytes] = []
    try:
        consumer.subscribe([topic])

        def consumed() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.value() or b"")
            return len(seen) >= MESSAGES

        wait_until(consumed, timeout=60, interval=0, what="confluent-kafka consumed everything")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(seen) == sorted(payloads())
    assert committed(kgc, group, topic) == [MESSAGES // PARTITIONS] * PARTITIONS


def test_aiokafka(kgc: SecureKgc) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic, group = new_topic(kgc), f"g-aio-{uuid.uuid4().hex[:6]}"

    async def run() -> list[bytes]:
        ctx: ssl.SSLContext = create_ssl_context(cafile=str(kgc.pki.ca))
        common: dict[str, Any] = {
            "bootstrap_servers": kgc.bootstrap,
            "security_protocol": "SASL_SSL",
            "ssl_context": ctx,
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": USER,
            "sasl_plain_password": PASSWORD,
        }
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i, value in enumerate(payloads()):
                await producer.send_and_wait(topic, value, partition=i % PARTITIONS)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **common,
        )
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(60):
                async for msg in consumer:
                    got.append(msg.value or b"")
                    if len(got) >= MESSAGES:
                        break
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    seen = asyncio.run(run())
    assert sorted(seen) == sorted(payloads())
    assert committed(kgc, group, topic) == [MESSAGES // PARTITIONS] * PARTITIONS


def test_kafka_python(kgc: SecureKgc) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic, group = new_topic(kgc), f"g-kp-{uuid.uuid4().hex[:6]}"
    common: dict[str, Any] = {
        "bootstrap_servers": kgc.bootstrap,
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(kgc.pki.ca),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": USER,
        "sasl_plain_password": PASSWORD,
    }
    producer = KafkaProducer(**common)
    try:
        for i, value in enumerate(payloads()):
            producer.send(topic, value, partition=i % PARTITIONS)
        producer.flush(30)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=30000,
        **common,
    )
    try:
        seen = [m.value for _, m in zip(range(MESSAGES), consumer, strict=False)]
        consumer.commit()
    finally:
        consumer.close()
    assert sorted(seen) == sorted(payloads())
    assert committed(kgc, group, topic) == [MESSAGES // PARTITIONS] * PARTITIONS


# kafkajs: produce N, consume N in a group (committing as it goes, and on disconnect),
# print what it consumed as one JSON line. Run from tests/js so require() finds kafkajs.
KAFKAJS = r"""
const fs = require("fs");
const { Kafka, logLevel } = require("kafkajs");
async function main() {
  const [bootstrap, ca, user, password, topic, group, partitions, count] = process.argv.slice(1);
  const n = parseInt(count, 10), parts = parseInt(partitions, 10);
  const kafka = new Kafka({
    clientId: "kgc-js-sasl-ssl", brokers: [bootstrap], logLevel: logLevel.ERROR,
    ssl: { ca: [fs.readFileSync(ca, "utf8")] },
    sasl: { mechanism: "scram-sha-512", username: user, password },
  });
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  const messages = [];
  for (let i = 0; i < n; i++) messages.push({ partition: i % parts, value: `v${i}` });
  await producer.send({ topic, messages, acks: -1 });
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 500 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const seen = [];
  let done;
  const finished = new Promise((resolve) => { done = resolve; });
  await consumer.run({
    eachMessage: async ({ message }) => {
      seen.push(message.value.toString());
      if (seen.length >= n) done();
    },
  });
  const timer = setTimeout(() => done(), 60000);
  await finished;
  clearTimeout(timer);
  await consumer.disconnect();
  console.log(JSON.stringify(seen));
}
main().catch((err) => { console.error(err); process.exit(1); });
"""


def test_kafkajs(kgc: SecureKgc) -> None:
    assert (JS_DIR / "node_modules" / "kafkajs").is_dir(), "run `npm ci` in tests/js"
    topic, group = new_topic(kgc), f"g-js-{uuid.uuid4().hex[:6]}"
    out = subprocess.run(
        ["node", "-e", KAFKAJS, kgc.bootstrap, str(kgc.pki.ca), USER, PASSWORD, topic, group,
         str(PARTITIONS), str(MESSAGES)],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr + kgc.proc.log()
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(seen) == sorted(p.decode() for p in payloads())
    # kafkajs commits resolved offsets after each batch and once more on disconnect.
    assert committed(kgc, group, topic) == [MESSAGES // PARTITIONS] * PARTITIONS
