"""kafka-transactions.sh describe-producers (TransactionsCommand) against Kafka and kgc: the
producer state of a partition an idempotent producer wrote, as the tool prints it from
DescribeProducers (epoch, last sequence and timestamp, coordinator epoch, no open
transaction)."""

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
    compare("tools.transactions.describe-producers", runs)
    compare("tools.transactions.describe-producers", runs, stream="stderr")
    assert "ProducerId" in runs[1].stdout and runs[1].returncode == 0
