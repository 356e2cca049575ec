"""Transactions with real clients against a real ``kgc serve``: confluent-kafka's
transactional producer and read_committed consumers (librdkafka speaks the TV1 protocol).

A committed transaction is visible to read_committed, an aborted one is not (but is to
read_uncommitted), a second producer with the same transactional.id fences the first, the
server aborts a transaction past its timeout, DescribeTransactions/ListTransactions report
the coordinator's state, and a transaction committed before a SIGKILL stays committed.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from support.dataplanekit import create_topic
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import describe_transactions, list_transactions

pytestmark = pytest.mark.integration

TOPIC = "txn"


def producer(kgc: KgcProcess, txn_id: str, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": kgc.bootstrap, "transactional.id": txn_id, **extra})


def read(
    kgc: KgcProcess, isolation: str, partitions: int = 2, expect: int | None = None
) -> list[bytes]:
    """Every value in the topic under ``isolation``, read until the end offsets."""
    c = Consumer(
        {
            "bootstrap.servers": kgc.bootstrap,
            "group.id": f"reader-{isolation}-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        eof: set[int] = set()
        deadline = time.monotonic() + 30
        while len(eof) < partitions and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    eof.add(m.partition())
                    if expect is not None and len(values) < expect:
                        eof.discard(m.partition())
                continue
            eof.discard(m.partition())
            values.append(m.value())
        return values
    finally:
        c.close()


def test_commit_is_visible_and_abort_is_not(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, TOPIC, 2)
    p = producer(kgc, "t-commit")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(TOPIC, value=b"c%d" % i, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(TOPIC, value=b"a%d" % i, partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(TOPIC, value=b"last", partition=0)
    p.commit_transaction(30)
    committed = read(kgc, "read_committed", expect=11)
    assert sorted(committed) == sorted([b"c%d" % i for i in range(10)] + [b"last"])
    everything = read(kgc, "read_uncommitted", expect=16)
    assert len(everything) == 16


def test_a_new_producer_with_the_same_id_fences_the_old_one(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, TOPIC, 2)
    a = producer(kgc, "zombie")
    a.init_transactions(30)
    a.begin_transaction()
    a.produce(TOPIC, value=b"zombie", partition=0)
    a.flush(30)
    b = producer(kgc, "zombie")
    b.init_transactions(30)  # aborts a's transaction, then bumps the epoch again
    with pytest.raises(KafkaException) as err:
        a.produce(TOPIC, value=b"zombie2", partition=0)
        a.commit_transaction(30)
    assert err.value.args[0].fatal() or "fenced" in str(err.value).lower()
    b.begin_transaction()
    b.produce(TOPIC, value=b"ok", partition=1)
    b.commit_transaction(30)
    assert read(kgc, "read_committed", expect=1) == [b"ok"]


def test_describe_and_list_transactions(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, TOPIC, 2)
    p = producer(kgc, "described")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(TOPIC, value=b"x", partition=1)
    p.flush(30)
    with Connection.to(kgc.bootstrap) as c:
        _, d = c.request(
            describe_transactions.API_KEY,
            describe_transactions.Request(transactional_ids=["described", "nobody"]),
        )
        st, missing = d.transaction_states
        assert (st.error_code, st.transaction_state, st.producer_epoch) == (0, "Ongoing", 0)
        assert [(t.topic, t.partitions) for t in st.topics] == [(TOPIC, [1])]
        assert st.transaction_timeout_ms == 60000 and st.transaction_start_time_ms > 0
        assert missing.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        _, lt = c.request(
            list_transactions.API_KEY, list_transactions.Request(state_filters=["Ongoing"])
        )
        assert [(x.transactional_id, x.transaction_state) for x in lt.transaction_states] == [
            ("described", "Ongoing")
        ]
        p.abort_transaction(30)
        # The abort is answered once PrepareAbort is durable; CompleteAbort follows the
        # markers.
        deadline = time.monotonic() + 20
        state = ""
        while state != "CompleteAbort" and time.monotonic() < deadline:
            _, d = c.request(
                describe_transactions.API_KEY,
                describe_transactions.Request(transactional_ids=["described"]),
            )
            state = d.transaction_states[0].transaction_state
            if state != "CompleteAbort":
                time.sleep(0.05)
        assert state == "CompleteAbort"


def test_timed_out_transaction_is_aborted_by_the_server(tmp_path: Path) -> None:
    kgc = KgcProcess(
        tmp_path / "data",
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
        "200",
    )
    kgc.start()
    try:
        create_topic(kgc.bootstrap, TOPIC, 2)
        p = producer(kgc, "slow", **{"transaction.timeout.ms": 1000})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(TOPIC, value=b"late", partition=0)
        p.flush(30)
        # The server aborts it once 1 s has passed since the first add; the producer
        # learns at its commit that it was fenced.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if read(kgc, "read_committed", partitions=1) == [] and _lso_moved(kgc):
                break
            time.sleep(0.2)
        with pytest.raises(KafkaException):
            p.commit_transaction(10)
        assert read(kgc, "read_committed") == []
        q = producer(kgc, "slow")
        q.init_transactions(30)
        q.begin_transaction()
        q.produce(TOPIC, value=b"next", partition=0)
        q.commit_transaction(30)
        assert read(kgc, "read_committed", expect=1) == [b"next"]
    finally:
        kgc.stop()


def _lso_moved(kgc: KgcProcess) -> bool:
    """The partition's last stable offset passed the aborted data (its marker is in)."""
    c = Consumer(
        {
            "bootstrap.servers": kgc.bootstrap,
            "group.id": "lso",
            "isolation.level": "read_committed",
        }
    )
    try:
        _, high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        return bool(high >= 2)  # one record and its ABORT marker
    finally:
        c.close()


def test_committed_transaction_survives_sigkill(tmp_path: Path) -> None:
    kgc = KgcProcess(tmp_path / "data")
    kgc.start()
    try:
        create_topic(kgc.bootstrap, TOPIC, 2)
        p = producer(kgc, "durable")
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(20):
            p.produce(TOPIC, value=b"d%d" % i, partition=i % 2)
        p.commit_transaction(30)
        kgc.kill()
        kgc.start()
        assert len(read(kgc, "read_committed", expect=20)) == 20
        q = producer(kgc, "durable")
        q.init_transactions(30)  # the restarted coordinator knows the id: epoch 1
        q.begin_transaction()
        q.produce(TOPIC, value=b"after", partition=0)
        q.commit_transaction(30)
        assert len(read(kgc, "read_committed", expect=21)) == 21
    finally:
        kgc.stop()
