"""Cluster mode with two listeners per node: each listener's clients get every node's
endpoint for that listener (Metadata), and groups coordinated by the other node work over
TLS (FindCoordinator gives that node's SSL endpoint).

How this works: two ``kgc serve`` nodes on the session's PostgreSQL, each with PLAINTEXT and
SSL listeners; nodes register their advertised listeners and read the others' on every
heartbeat. Clients bootstrap from node 1 only.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from support.certkit import Pki, make_pki
from support.groupkit import create_topic, wait_until
from support.kgc_process import KgcProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
OFFSETS_PARTITIONS = 4


@pytest.fixture
def nodes(tmp_path: Path, pg_url: str) -> Iterator[tuple[list[tuple[KgcProcess, int]], Pki]]:
    pki = make_pki(tmp_path / "pki")
    procs: list[tuple[KgcProcess, int]] = []
    try:
        for node_id in (1, 2):
            port, ssl_port = free_port(), free_port()
            proc = KgcProcess(
                tmp_path / f"node-{node_id}" / "data",
                "--node-id",
                str(node_id),
                "--storage-url",
                pg_url,
                "--broker-heartbeat-interval-ms",
                "500",
                "--broker-session-timeout-ms",
                "3000",
                "--offsets-topic-num-partitions",
                str(OFFSETS_PARTITIONS),
                "--listeners",
                f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}",
                "--ssl-keystore-type",
                "PEM",
                "--ssl-keystore-location",
                str(pki.server),
                port=port,
            )
            proc.data_dir.mkdir(parents=True, exist_ok=True)
            proc.start(timeout=60)
            procs.append((proc, ssl_port))
        yield procs, pki
    finally:
        for proc, _ in procs:
            if proc.alive():
                proc.stop()


def brokers(conf: dict[str, str]) -> set[tuple[int, int]]:
    md = AdminClient(conf).list_topics(timeout=20)
    return {(b.id, b.port) for b in md.brokers.values()}


def test_each_listener_gets_every_nodes_endpoint_for_it(
    nodes: tuple[list[tuple[KgcProcess, int]], Pki],
) -> None:
    procs, pki = nodes
    (one, one_ssl), (two, two_ssl) = procs
    ssl_conf = {
        "bootstrap.servers": f"127.0.0.1:{one_ssl}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
    }
    plain_conf = {"bootstrap.servers": one.bootstrap}
    want_ssl = {(1, one_ssl), (2, two_ssl)}
    want_plain = {(1, one.port), (2, two.port)}
    wait_until(lambda: brokers(ssl_conf) == want_ssl, timeout=30, what="both SSL endpoints")
    assert brokers(plain_conf) == want_plain

    # One group coordinated by each node, used over TLS only, bootstrapped from node 1:
    # the one on node 2 is reached through the SSL endpoint FindCoordinator gives.
    by_node: dict[int, str] = {}

    def one_group_per_node() -> bool:
        group = f"g-{uuid.uuid4().hex[:8]}"
        node = _coordinator_node(one, group)
        if node in (1, 2):
            by_node.setdefault(node, group)
        return len(by_node) == 2

    wait_until(one_group_per_node, timeout=60, interval=0.05, what="a group on each node")
    topic = f"t-{uuid.uuid4().hex[:6]}"
    create_topic(one.bootstrap, topic, 2)
    producer = Producer(ssl_conf)
    for i in range(10):
        producer.produce(topic, value=b"x", partition=i % 2)
    assert producer.flush(30) == 0
    for group in by_node.values():
        consumer = Consumer(
            {
                **ssl_conf,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe([topic])
            got = 0

            def read(c: Consumer = consumer) -> bool:
                nonlocal got
                msg = c.poll(0.2)
                if msg is not None and msg.error() is None:
                    got += 1
                return got == 10

            wait_until(read, timeout=60, interval=0, what=f"group {group} read everything")
            consumer.commit(asynchronous=False)
            committed = consumer.committed([TopicPartition(topic, p) for p in (0, 1)], 20)
            assert [tp.offset for tp in committed] == [5, 5]
        finally:
            consumer.close()


def _coordinator_node(proc: KgcProcess, group: str) -> int:
    from coordinator.tools.client import Connection
    from protocol.messages import find_coordinator

    with Connection.to(proc.bootstrap) as c:
        _, resp = c.request(
            find_coordinator.API_KEY, find_coordinator.Request(key=group), version=3
        )
    return -1 if resp.error_code else int(resp.node_id)
