"""kafka-transactions.sh (TransactionsCommand) against Kafka and kgc: describe-producers on a
partition an idempotent producer wrote (DescribeProducers: epoch, last sequence and
timestamp, coordinator epoch, no open transaction), and abort of a transaction a live
producer left open (WriteTxnMarkers straight to the partition's leader)."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from support.tools_kit import Server, compare, run_pair
from support.tools_setup import BASE_TS, create_topic

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"


def produce_batches(bootstrap: str, topic: str, count: int) -> None:
    """``count`` batches of one record from one idempotent producer: sequences 0..count-1."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True})
    for i in range(count):
        p.produce(topic, value=b"v%d" % i, partition=0, timestamp=BASE_TS + i)
        assert p.flush(30) == 0


def test_describe_producers(pair: list[Server]) -> None:
    topic = "kt.txn.producers"
    for s in pair:
        create_topic(s.bootstrap, topic, 1)
        produce_batches(s.bootstrap, topic, 3)
    boot = ["--bootstrap-server", "{bootstrap}"]
    runs = run_pair(
        TRANSACTIONS, [*boot, "describe-producers", "--topic", topic, "--partition", "0"], pair
    )
    compare("tools.transactions.describe-producers", runs, stream="stderr")
    # Each server hands out producer ids in its own order (other tests ran before): the
    # table is compared without its ProducerId column.
    kafka, kgc = ([line.split()[1:] for line in r.stdout.splitlines()] for r in runs)
    assert kafka == kgc and len(kgc) == 2, runs
    assert kgc[0][0] == "ProducerEpoch" and runs[1].returncode == 0


def test_abort_of_an_open_transaction_moves_the_lso(pair: list[Server]) -> None:
    """kafka-transactions.sh abort (DescribeProducers, then WriteTxnMarkers ABORT with the
    producer's epoch and coordinator epoch, straight to the partition's leader): the
    transaction a live producer left open is aborted there, the LSO moves past it and a
    read_committed reader never sees its record."""
    from coordinator.tools.client import Connection
    from protocol.messages import list_offsets

    topic = "kt.txn.abort"

    def lso(bootstrap: str) -> int:
        req = list_offsets.Request(
            replica_id=-1,
            isolation_level=1,
            topics=[
                list_offsets.ListOffsetsTopic(
                    name=topic,
                    partitions=[list_offsets.ListOffsetsPartition(partition_index=0, timestamp=-1)],
                )
            ],
        )
        with Connection.to(bootstrap) as c:
            _, resp = c.request(list_offsets.API_KEY, req, version=7)
        offset: int = resp.topics[0].partitions[0].offset
        return offset

    producers = []
    for s in pair:
        create_topic(s.bootstrap, topic, 1)
        produce_batches(s.bootstrap, topic, 1)
        p = Producer({"bootstrap.servers": s.bootstrap, "transactional.id": f"{topic}.{s.name}"})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, value=b"hanging", partition=0, timestamp=BASE_TS)
        assert p.flush(30) == 0
        producers.append(p)  # kept open: its transaction stays undecided
        assert lso(s.bootstrap) == 1
    boot = ["--bootstrap-server", "{bootstrap}"]
    runs = run_pair(
        TRANSACTIONS,
        [*boot, "abort", "--topic", topic, "--partition", "0", "--start-offset", "1"],
        pair,
    )
    compare("tools.transactions.abort", runs)
    compare("tools.transactions.abort", runs, stream="stderr")
    for s in pair:
        assert lso(s.bootstrap) == 3  # past the ABORT marker the tool wrote at offset 2
    # The marker's timestamp is each server's clock: no line-by-line comparison here.
    for run in run_pair(
        TRANSACTIONS, [*boot, "describe-producers", "--topic", topic, "--partition", "0"], pair
    ):
        rows = [line.split() for line in run.stdout.splitlines()[1:] if line.strip()]
        assert len(rows) == 2 and all(r[-1] == "None" for r in rows), run  # none open


def test_list_and_describe_an_open_transaction(pair: list[Server]) -> None:
    """kafka-transactions.sh list (ListTransactions on every broker) and describe
    (FindCoordinator key type 1, then DescribeTransactions) of a transaction a live
    producer keeps open: the same state, epoch, timeout and partitions on both servers."""
    topic = "kt.txn.describe"
    producers = []
    for s in pair:
        create_topic(s.bootstrap, topic, 2)
        p = Producer({"bootstrap.servers": s.bootstrap, "transactional.id": topic})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, value=b"open", partition=1, timestamp=BASE_TS)
        assert p.flush(30) == 0
        producers.append(p)
    boot = ["--bootstrap-server", "{bootstrap}"]

    def rows(out: str) -> list[dict[str, str]]:
        lines = [line.split() for line in out.splitlines() if line.strip()]
        header = lines[0]
        return [dict(zip(header, line, strict=False)) for line in lines[1:]]

    listed = run_pair(TRANSACTIONS, [*boot, "list"], pair)
    ours = [[r for r in rows(run.stdout) if r.get("TransactionalId") == topic] for run in listed]
    assert all(len(o) == 1 for o in ours), listed
    assert [o[0]["TransactionState"] for o in ours] == ["Ongoing", "Ongoing"]
    described = run_pair(TRANSACTIONS, [*boot, "describe", "--transactional-id", topic], pair)
    # Producer ids and clock readings are each server's own.
    kept = ("TransactionalId", "ProducerEpoch", "TransactionState", "TransactionTimeoutMs")
    got = [
        [({k: r[k] for k in kept}, r.get("TopicPartitions")) for r in rows(run.stdout)]
        for run in described
    ]
    assert got[0] == got[1] and len(got[1]) == 1, described
    assert got[1][0][0]["TransactionState"] == "Ongoing" and got[1][0][1] == f"{topic}-1"
    for p in producers:
        p.abort_transaction(30)
