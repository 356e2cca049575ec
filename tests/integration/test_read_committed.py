"""read_committed with real clients: a confluent-kafka transactional producer against kgc.

How this works: a real ``kgc serve`` (``KgcProcess``); librdkafka's transactional producer
commits and aborts transactions over two partitions; consumers in assign() mode read with
``isolation.level`` read_committed and read_uncommitted until end of partition (librdkafka
takes the LSO as the end under read_committed). ListOffsets LATEST is asked through the
AdminClient with each isolation level, and DescribeProducers as a raw request (librdkafka
has no admin call for it).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, IsolationLevel, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from support.dataplanekit import create_topic
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.messages import describe_producers

pytestmark = pytest.mark.integration

TIMEOUT_S = 30


def txn_producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 5,
            "transaction.timeout.ms": 60_000,
        }
    )
    p.init_transactions(TIMEOUT_S)
    return p


def read_to_end(bootstrap: str, topic: str, partitions: int, committed: bool) -> list[bytes]:
    """Every value of the topic, read with the isolation level until each partition's end;
    asserts the consumer's positions end past everything (the control batches too)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
    c.assign(tps)
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"no end of partition after {values}"
            msg = c.poll(1.0)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                at_end.add(msg.partition())
                continue
            value = msg.value()
            assert value is not None
            values.append(value)
        return values
    finally:
        c.close()


def latest(bootstrap: str, topic: str, partition: int, committed: bool) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    tp = TopicPartition(topic, partition)
    futures = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)
    offset: int = futures[tp].result(TIMEOUT_S).offset
    return offset


def test_read_committed_sees_commits_only_and_read_uncommitted_sees_all(
    kgc: KgcProcess,
) -> None:
    create_topic(kgc.bootstrap, "rc", 2)
    p = txn_producer(kgc.bootstrap, "rc-writer")
    for prefix, commit in (("c1", True), ("a1", False), ("c2", True), ("a2", False)):
        p.begin_transaction()
        for i in range(10):
            p.produce("rc", key=b"k%d" % i, value=f"{prefix}-{i}".encode(), partition=i % 2)
        if commit:
            p.commit_transaction(TIMEOUT_S)
        else:
            p.flush(TIMEOUT_S)  # the aborted records are in the log before the abort
            p.abort_transaction(TIMEOUT_S)

    committed = read_to_end(kgc.bootstrap, "rc", 2, committed=True)
    assert sorted(committed) == sorted(
        f"{prefix}-{i}".encode() for prefix in ("c1", "c2") for i in range(10)
    )
    everything = read_to_end(kgc.bootstrap, "rc", 2, committed=False)
    assert len(everything) == 40  # the aborted records too (the server filters nothing)
    # Nothing is open: the LSO is the high watermark (each partition: 20 records, 4 markers).
    for partition in (0, 1):
        assert latest(kgc.bootstrap, "rc", partition, committed=True) == 24
        assert latest(kgc.bootstrap, "rc", partition, committed=False) == 24


def test_open_transaction_pins_the_lso_for_everyone(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "pin", 1)
    plain = Producer({"bootstrap.servers": kgc.bootstrap, "acks": "all"})
    plain.produce("pin", value=b"before", partition=0)
    assert plain.flush(TIMEOUT_S) == 0
    t = txn_producer(kgc.bootstrap, "pin-writer")
    t.begin_transaction()
    t.produce("pin", value=b"in-txn", partition=0)
    assert t.flush(TIMEOUT_S) == 0  # at offset 1: the first unstable offset
    for i in range(20):
        plain.produce("pin", value=b"after-%d" % i, partition=0)
    assert plain.flush(TIMEOUT_S) == 0

    assert latest(kgc.bootstrap, "pin", 0, committed=True) == 1
    assert latest(kgc.bootstrap, "pin", 0, committed=False) == 22
    assert read_to_end(kgc.bootstrap, "pin", 1, committed=True) == [b"before"]
    with Connection.to(kgc.bootstrap) as conn:
        _, resp = conn.request(
            describe_producers.API_KEY,
            describe_producers.Request(
                topics=[describe_producers.TopicRequest(name="pin", partition_indexes=[0])]
            ),
        )
    part = resp.topics[0].partitions[0]
    assert part.error_code == 0
    open_txns = [s for s in part.active_producers if s.current_txn_start_offset >= 0]
    assert [(s.current_txn_start_offset, s.last_sequence) for s in open_txns] == [(1, 0)]

    t.commit_transaction(TIMEOUT_S)
    # EndTxn answers once PrepareCommit is durable; the marker follows (as in Kafka), so the
    # last stable offset passes it a moment after the commit.
    deadline = time.monotonic() + TIMEOUT_S
    while (stable := latest(kgc.bootstrap, "pin", 0, committed=True)) != 23:
        assert stable == 1 and time.monotonic() < deadline, stable  # then past the marker
        time.sleep(0.05)
    values = read_to_end(kgc.bootstrap, "pin", 1, committed=True)
    assert values == [b"before", b"in-txn", *(b"after-%d" % i for i in range(20))]


def test_pending_offsets_pin_the_offsets_partition_for_read_committed(kgc: KgcProcess) -> None:
    """send_offsets_to_transaction writes a transactional batch into the group's
    __consumer_offsets partition: until the commit, DescribeProducers shows its open
    transaction there and ListOffsets LATEST under read_committed stops before it."""
    from coordinator.txn.coordinator import partition_for_transactional_id

    group = "rc-offsets-group"
    offsets_partition = partition_for_transactional_id(group, 50)  # Kafka's group hash too
    create_topic(kgc.bootstrap, "rc-in", 1)
    consumer = Consumer({"bootstrap.servers": kgc.bootstrap, "group.id": group})
    t = txn_producer(kgc.bootstrap, "rc-offsets-writer")
    t.begin_transaction()
    t.produce("rc-in", value=b"x", partition=0)
    t.send_offsets_to_transaction(
        [TopicPartition("rc-in", 0, 1)], consumer.consumer_group_metadata(), TIMEOUT_S
    )
    before = latest(kgc.bootstrap, "__consumer_offsets", offsets_partition, committed=False)
    assert latest(kgc.bootstrap, "__consumer_offsets", offsets_partition, committed=True) < before
    with Connection.to(kgc.bootstrap) as conn:
        _, resp = conn.request(
            describe_producers.API_KEY,
            describe_producers.Request(
                topics=[
                    describe_producers.TopicRequest(
                        name="__consumer_offsets", partition_indexes=[offsets_partition]
                    )
                ]
            ),
        )
    part = resp.topics[0].partitions[0]
    assert part.error_code == 0
    assert [s.current_txn_start_offset >= 0 for s in part.active_producers] == [True]
    t.commit_transaction(TIMEOUT_S)
    # EndTxn answers once PrepareCommit is durable; the markers follow (as in Kafka), so
    # the last stable offset catches up with the log end a moment after the commit.
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        after = latest(kgc.bootstrap, "__consumer_offsets", offsets_partition, committed=False)
        stable = latest(kgc.bootstrap, "__consumer_offsets", offsets_partition, committed=True)
        if stable == after:
            break
        assert time.monotonic() < deadline, (stable, after)
        time.sleep(0.05)
    assert after > before  # the COMMIT marker
    consumer.close()
