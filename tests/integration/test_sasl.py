"""SASL_PLAINTEXT against a real ``kgc serve`` with real clients.

How this works: kgc listens on PLAINTEXT and SASL_PLAINTEXT at once, with PLAIN (users from
a JAAS line) and SCRAM-SHA-512 (a user added offline with ``kgc users add``, as an operator
adds the first admin). confluent-kafka produces and consumes with a group over the SASL
listener only, with each mechanism; kafka-python consumes with SCRAM-SHA-512. A wrong
password and an unknown user are refused (the client reports an authentication failure)
while the server keeps serving the others.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from support.groupkit import create_topic
from support.kgc_process import KgcProcess, free_port

pytestmark = pytest.mark.integration
MESSAGES = 20
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


class SaslKgc:
    def __init__(self, proc: KgcProcess, sasl_port: int) -> None:
        self.proc = proc
        self.sasl = f"127.0.0.1:{sasl_port}"


@pytest.fixture(scope="module")
def kgc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslKgc]:
    data = tmp_path_factory.mktemp("sasl") / "data"
    subprocess.run(
        [sys.executable, "-m", "coordinator", "users", "add", "--data-dir", str(data),
         "--mechanism", "SCRAM-SHA-512", "--password", "bob-secret", "bob"],
        check=True,
    )  # fmt: skip
    port, sasl_port = free_port(), free_port()
    proc = KgcProcess(
        data,
        "--listeners",
        f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "--sasl-enabled-mechanisms",
        "PLAIN,SCRAM-SHA-512",
        "--sasl-jaas-config",
        JAAS,
        port=port,
    )
    proc.start()
    try:
        yield SaslKgc(proc, sasl_port)
    finally:
        proc.stop()


def sasl_conf(kgc: SaslKgc, mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": kgc.sasl,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [("PLAIN", "alice", "alice-secret"), ("SCRAM-SHA-512", "bob", "bob-secret")],
)
def test_confluent_group_over_sasl(kgc: SaslKgc, mechanism: str, user: str, password: str) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(kgc.proc.bootstrap, topic, 2)
    conf = sasl_conf(kgc, mechanism, user, password)
    producer = Producer(conf)
    for i in range(MESSAGES):
        producer.produce(topic, value=f"m{i}".encode())
    assert producer.flush(20) == 0
    consumer = Consumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.subscribe([topic])
    seen: list[bytes] = []
    try:
        for _ in range(300):
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            seen.append(msg.value() or b"")
            if len(seen) == MESSAGES:
                break
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(seen) == sorted(f"m{i}".encode() for i in range(MESSAGES))


def test_kafka_python_scram_consumer(kgc: SaslKgc) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(kgc.proc.bootstrap, topic, 1)
    common: dict[str, Any] = {
        "bootstrap_servers": kgc.sasl,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "bob",
        "sasl_plain_password": "bob-secret",
    }
    producer = KafkaProducer(**common)
    for i in range(MESSAGES):
        producer.send(topic, f"k{i}".encode())
    producer.flush(20)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        group_id=f"g-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        consumer_timeout_ms=10000,
        **common,
    )
    try:
        got = [m.value for _, m in zip(range(MESSAGES), consumer, strict=False)]
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"k{i}".encode() for i in range(MESSAGES))


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [
        ("PLAIN", "alice", "wrong"),
        ("PLAIN", "mallory", "alice-secret"),
        ("SCRAM-SHA-512", "bob", "wrong"),
        ("SCRAM-SHA-512", "mallory", "bob-secret"),
    ],
)
def test_bad_credentials_refused_and_others_still_served(
    kgc: SaslKgc, mechanism: str, user: str, password: str
) -> None:
    errors: list[Any] = []
    conf: dict[str, Any] = sasl_conf(kgc, mechanism, user, password)
    conf["error_cb"] = errors.append
    admin = AdminClient(conf)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    for _ in range(50):  # error callbacks are served by poll()
        if errors:
            break
        admin.poll(0.1)
    assert any("Authentication failed" in str(e) or "SASL" in str(e) for e in errors), errors
    ok = AdminClient(sasl_conf(kgc, "SCRAM-SHA-512", "bob", "bob-secret"))
    assert ok.list_topics(timeout=10).brokers
