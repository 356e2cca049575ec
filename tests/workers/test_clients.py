"""Real clients against a 2-worker kgc: consumer groups on either worker, data on both.

A topic created through worker 0 has partitions led by both workers: librdkafka
(confluent-kafka) and kafka-python produce to every partition and read every record back in
consumer groups, one group coordinated by worker 0 and one by worker 1 per client; the
offsets each group commits are what the group reads back (a new consumer of the group,
through its coordinator), and ``kgc groups list/describe`` finds every group on its worker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.workerskit import Workers, group_on

from coordinator.placement import worker_of

pytestmark = pytest.mark.integration

TOPIC = "shared-data"
PARTITIONS = 6
RECORDS = 120


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    proc = Workers(tmp_path_factory.mktemp("clients") / "data")
    proc.start()
    proc.wait_loaded()
    # Created through worker 0 with librdkafka's admin client; led by both workers.
    admin = AdminClient({"bootstrap.servers": proc.bootstrap_of(0)})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(10)
    proc.wait_topic(TOPIC, PARTITIONS)
    assert {worker_of(TOPIC, p, 2) for p in range(PARTITIONS)} == {0, 1}
    producer = Producer({"bootstrap.servers": proc.bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(TOPIC, value=b"r%04d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    yield proc
    if proc.alive():
        assert proc.stop() == 0


def _consume_all(group: str, bootstrap: str) -> set[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        c.subscribe([TOPIC])
        got: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(got) < RECORDS:
            assert time.monotonic() < deadline, f"read {len(got)} of {RECORDS}"
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            value = m.value()
            assert value is not None
            got.add(value)
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def _committed(group: str, bootstrap: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=15)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in tps}


@pytest.mark.parametrize("worker", [0, 1])
def test_confluent_group_on_each_worker_commits_and_reads_back(node: Workers, worker: int) -> None:
    group = group_on(worker, 2, "confluent")
    # Bootstrapped at the other worker: the client finds its coordinator by FindCoordinator.
    bootstrap = node.bootstrap_of(1 - worker)
    assert _consume_all(group, bootstrap) == {b"r%04d" % i for i in range(RECORDS)}
    per_partition = RECORDS // PARTITIONS
    assert _committed(group, bootstrap) == dict.fromkeys(range(PARTITIONS), per_partition)


@pytest.mark.parametrize("worker", [0, 1])
def test_kafka_python_group_on_each_worker_commits_and_reads_back(
    node: Workers, worker: int
) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata
    from kafka import TopicPartition as KTP

    group = group_on(worker, 2, "kafka-python")
    consumer = KafkaConsumer(
        TOPIC,
        bootstrap_servers=node.bootstrap_of(1 - worker),
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        got: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(got) < RECORDS:
            assert time.monotonic() < deadline, f"read {len(got)} of {RECORDS}"
            for records in consumer.poll(timeout_ms=500).values():
                got.update(r.value for r in records)
        assert got == {b"r%04d" % i for i in range(RECORDS)}
        consumer.commit({KTP(TOPIC, 0): OffsetAndMetadata(7, "seven", -1)})
        consumer.commit()  # every partition's position
    finally:
        consumer.close()
    reader = KafkaConsumer(bootstrap_servers=node.bootstrap, group_id=group)
    try:
        committed = {p: reader.committed(KTP(TOPIC, p)) for p in range(PARTITIONS)}
    finally:
        reader.close()
    assert committed == dict.fromkeys(range(PARTITIONS), RECORDS // PARTITIONS)


def test_kgc_groups_list_and_describe_find_every_workers_groups(node: Workers) -> None:
    groups = [group_on(w, 2, "cli") for w in (0, 1)]
    for g in groups:
        _consume_all(g, node.bootstrap)

    def kgc(*args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "coordinator", *args, "--bootstrap-server", node.bootstrap],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    listed = {g["group"] for g in json.loads(kgc("groups", "list", "--output", "json"))}
    assert set(groups) <= listed
    for g in groups:
        described = json.loads(kgc("groups", "describe", g, "--output", "json"))
        # Offsets from the group's coordinator, log ends from each partition's leader.
        assert {
            (o["topic"], o["partition"], o["current_offset"], o["log_end_offset"])
            for o in described["offsets"]
        } == {(TOPIC, p, RECORDS // PARTITIONS, RECORDS // PARTITIONS) for p in range(PARTITIONS)}
        assert described["total_lag"] == 0
