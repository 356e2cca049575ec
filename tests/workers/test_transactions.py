"""Transactions on a 2-worker kgc with a real client (confluent-kafka).

Each worker coordinates the transactional ids of its ``__transaction_state`` partitions
(p % 2) and leads its share of the data and offsets partitions, so one transaction spans
both: the coordinator's markers reach the other worker's partitions, and that worker's
AddPartitionsToTxn verification reaches the coordinator, over the inter-broker client. A
read_committed consumer sees a committed transaction's records on both workers' partitions
and never an aborted one's; ``send_offsets_to_transaction`` commits offsets in a group the
other worker coordinates. A worker SIGKILLed mid-transaction is restarted by the
supervisor and the transaction commits: its coordinator replays its state, or its
partitions take the markers once back. A whole node killed mid-transaction and restarted
with another worker count (the supervisor replays every journal first) commits it too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.groupkit import create_topic
from support.workerskit import (
    TXN_STATE_PARTITIONS,
    Workers,
    free_ports,
    group_on,
    kill_node,
    txn_id_on,
    wait_for,
)

from coordinator.placement import worker_of
from coordinator.txn.coordinator import partition_for_transactional_id
from coordinator.txn.records import TRANSACTION_STATE_TOPIC

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "txw"
PARTITIONS = 4
TIMEOUT = 60.0  # a loaded machine: a restart and a reload fit well within it


def state_worker(transactional_id: str, workers: int) -> int:
    p = partition_for_transactional_id(transactional_id, TXN_STATE_PARTITIONS)
    return worker_of(TRANSACTION_STATE_TOPIC, p, workers)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    proc = Workers(tmp_path_factory.mktemp("txn") / "data")
    proc.start()
    proc.wait_loaded()
    create_topic(proc.bootstrap, TOPIC, PARTITIONS)
    proc.wait_topic(TOPIC, PARTITIONS)
    assert {worker_of(TOPIC, p, 2) for p in range(PARTITIONS)} == {0, 1}
    yield proc
    if proc.alive():
        assert proc.stop() == 0


def producer(node: Workers, transactional_id: str) -> Any:
    p = Producer(
        {
            "bootstrap.servers": node.bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 60000,
        }
    )
    p.init_transactions(TIMEOUT)
    return p


def produce_all(p: Any, tag: str) -> list[bytes]:
    """One record to every partition (both workers'), delivered."""
    values = [f"{tag}-{part}".encode() for part in range(PARTITIONS)]
    for part, value in enumerate(values):
        p.produce(TOPIC, value=value, partition=part)
    assert p.flush(TIMEOUT) == 0
    return values


def read_committed(node: Workers, until: set[bytes]) -> set[bytes]:
    """Every record a read_committed consumer reads up to the last stable offsets, once
    ``until`` were all read."""
    c = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    got: set[bytes] = set()
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + TIMEOUT
        eof: set[int] = set()
        while not (until <= got and len(eof) == PARTITIONS):
            assert time.monotonic() < deadline, f"read {sorted(got)}, waiting for {until - got}"
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == -191:  # _PARTITION_EOF: up to the LSO for now
                    eof.add(m.partition())
                    continue
                raise AssertionError(m.error())
            eof.discard(m.partition())
            value = m.value()
            assert value is not None
            got.add(value)
    finally:
        c.close()
    return got


def test_commit_is_visible_and_abort_is_not_across_both_workers(node: Workers) -> None:
    for coordinator in (0, 1):
        p = producer(node, txn_id_on(coordinator, 2, "tx"))
        p.begin_transaction()
        aborted = produce_all(p, f"abort{coordinator}")
        p.abort_transaction(TIMEOUT)
        p.begin_transaction()
        committed = produce_all(p, f"commit{coordinator}")
        p.commit_transaction(TIMEOUT)
        got = read_committed(node, set(committed))
        assert set(committed) <= got
        assert not set(aborted) & got


def test_offsets_sent_to_a_transaction_commit_in_the_other_workers_group(
    node: Workers,
) -> None:
    tid = txn_id_on(0, 2, "eos")
    group = group_on(1, 2, "eos-g")  # coordinated by the other worker
    consumer = Consumer(
        {"bootstrap.servers": node.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    meta = consumer.consumer_group_metadata()
    p = producer(node, tid)
    try:
        tps = [TopicPartition(TOPIC, part, 10 + part) for part in range(PARTITIONS)]
        p.begin_transaction()
        produce_all(p, "eos-a")
        p.send_offsets_to_transaction(tps, meta, TIMEOUT)
        p.abort_transaction(TIMEOUT)
        got = consumer.committed([TopicPartition(TOPIC, part) for part in range(PARTITIONS)], 15)
        assert [tp.offset for tp in got] == [-1001] * PARTITIONS
        p.begin_transaction()
        produce_all(p, "eos-c")
        p.send_offsets_to_transaction(tps, meta, TIMEOUT)
        p.commit_transaction(TIMEOUT)
        want = [10 + part for part in range(PARTITIONS)]

        def offsets_committed() -> bool:
            got = consumer.committed(
                [TopicPartition(TOPIC, part) for part in range(PARTITIONS)], 15
            )
            return [tp.offset for tp in got] == want

        # EndTxn answers once PrepareCommit is durable; the offsets follow the markers.
        wait_for("the transaction's offsets", offsets_committed, TIMEOUT)
    finally:
        consumer.close()


@pytest.mark.parametrize("killed", ["coordinator", "other"])
def test_a_worker_sigkilled_mid_transaction_is_restarted_and_the_transaction_commits(
    node: Workers, killed: str
) -> None:
    tid = txn_id_on(1, 2, f"kill-{killed}")
    victim = 1 if killed == "coordinator" else 0
    p = producer(node, tid)
    p.begin_transaction()
    values = produce_all(p, f"kill-{killed}")
    node.kill_worker(victim)
    node.wait_worker_loaded(victim, TIMEOUT)
    p.commit_transaction(TIMEOUT)
    assert set(values) <= read_committed(node, set(values))


def test_a_killed_node_restarted_with_another_worker_count_finishes_the_transaction(
    tmp_path: Path,
) -> None:
    """The whole node killed mid-transaction (no clean stop), restarted with 3 workers:
    the supervisor replays every journal, the id's new coordinator (another
    ``__transaction_state`` owner) loads its state and the transaction commits."""
    data = tmp_path / "data"
    two = Workers(data, port=free_ports(3))
    two.start()
    two.wait_loaded()
    create_topic(two.bootstrap, TOPIC, PARTITIONS)
    two.wait_topic(TOPIC, PARTITIONS)
    # Coordinated by worker 1 of 2, then by another worker of 3.
    tid = next(
        f"node-kill-{i}"
        for i in range(1000)
        if [state_worker(f"node-kill-{i}", n) for n in (2, 3)] in ([1, 0], [1, 2])
    )
    p = producer(two, tid)
    p.begin_transaction()
    values = produce_all(p, "node-kill")
    kill_node(two, 2)
    three = Workers(data, workers=3, port=two.port)  # the producer's bootstrap address
    three.start()
    try:
        three.wait_loaded()
        assert "replaying every journal" in three.log()
        p.commit_transaction(TIMEOUT)
        assert set(values) <= read_committed(three, set(values))
    finally:
        assert three.stop() == 0
