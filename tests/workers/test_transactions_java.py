"""TV2 transactions on a 2-worker kgc with the Java client (KafkaProducer 4.4).

With ``transaction.version`` 2 the Java client sends no AddPartitionsToTxn or
AddOffsetsToTxn: the partition's worker adds it with AddPartitionsToTxn v5 to the worker
coordinating the transactional id, the group's worker adds ``__consumer_offsets`` the same
way from TxnOffsetCommit v5, and every EndTxn (v5) bumps the epoch. The partition, the id
and the group are each on the other worker than the id's coordinator. Committed
transactions are read by read_committed, aborted ones are not, and a transaction left open
while its coordinator's worker is SIGKILLed (the supervisor restarts it) commits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from support.groupkit import create_topic
from support.javakit import Clients
from support.workerskit import Workers, group_on, partition_on, txn_id_on

from coordinator.tools.admin import Admin

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.kafka]

TOPIC = "txj"
PARTITIONS = 4


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Workers]:
    proc = Workers(tmp_path / "data", "--transaction-version", "2")
    proc.start()
    proc.wait_loaded()
    yield proc
    if proc.alive():
        assert proc.stop() == 0


@pytest.fixture
def clients() -> Iterator[Clients]:
    c = Clients()
    yield c
    c.close()


def read_committed(node: Workers, until: set[str], timeout: float = 60.0) -> set[str]:
    """Every value a read_committed consumer sees once all of ``until`` came."""
    c = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    seen: set[str] = set()
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + timeout
        while not until <= seen:
            assert time.monotonic() < deadline, f"read {sorted(seen)}"
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                seen.add((m.value() or b"").decode())
        until_quiet = time.monotonic() + 1.0  # nothing aborted arrives late either
        while time.monotonic() < until_quiet:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                seen.add((m.value() or b"").decode())
    finally:
        c.close()
    return seen


def requests(node: Workers, worker: int, **labels: str) -> float:
    """``kgc_requests_total`` of worker ``worker`` (its metrics at metrics.port + i)."""
    port = node.metrics_port
    node.metrics_port = port + worker
    try:
        return node.requests_total(**labels)
    finally:
        node.metrics_port = port


def test_java_tv2_transactions_across_workers_through_a_coordinator_sigkill(
    node: Workers, clients: Clients
) -> None:
    create_topic(node.bootstrap, TOPIC, PARTITIONS)
    node.wait_topic(TOPIC, PARTITIONS)
    coordinator, other = 1, 0
    txn_id = txn_id_on(coordinator, 2, "java-tv2")
    partition = partition_on(TOPIC, PARTITIONS, other, 2)
    group = group_on(other, 2, "java-tv2-g")
    # t0 committed, t1 aborted, t2 left open (records and offsets sent) until told.
    args = ["--bootstrap", node.bootstrap, "--topic", TOPIC, "--partition", str(partition)]
    args += ["--transactional-id", txn_id, "--txns", "3", "--count", "5", "--abort-every", "2"]
    args += ["--group", group, "--stall", "true", "--property", "transaction.timeout.ms=60000"]
    c = clients.start("kgc.clients.Transact", args)
    c.wait_event("stalled", timeout=120)
    assert [t["committed"] for t in c.of("txn")] == [True, False]
    # The protocol spoken: TV2's EndTxn and the other worker's adds, no client add at all.
    assert requests(node, coordinator, api="EndTxn", version="5") >= 2
    assert requests(node, coordinator, api="AddPartitionsToTxn", version="5") >= 2
    client_adds = sum(
        requests(node, w, api="AddPartitionsToTxn", version=str(v))
        + requests(node, w, api="AddOffsetsToTxn")
        for w in (0, 1)
        for v in range(4)
    )
    assert client_adds == 0
    node.kill_worker(coordinator)
    c.send("commit")
    assert c.wait_exit(120) == 0, c.describe()
    [late] = c.of("stall-commit")
    assert late.get("ok") is True, late
    committed = {f"t{t}-{i}" for t in (0, 2) for i in range(5)}
    assert read_committed(node, committed) == committed  # nothing of the aborted t1
    with Admin(node.bootstrap_of(other)) as admin:
        offsets = admin.committed_offsets(group)
    assert {tp: o for tp, (o, _) in offsets.items()} == {(TOPIC, partition): 3}
