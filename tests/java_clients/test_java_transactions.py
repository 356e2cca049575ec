"""KafkaProducer 4.4.0's transactions against kgc (the TV1 protocol: kgc does not finalize
transaction.version): committed transactions visible to a read_committed KafkaConsumer and
aborted ones not, offsets committed with sendOffsetsToTransaction, and a producer fenced by
a second one with the same transactional.id (ProducerFencedException)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.javakit import Clients
from support.kgc_process import KgcProcess

from coordinator.tools.admin import Admin

pytestmark = [pytest.mark.kafka, pytest.mark.integration]


def test_java_transactions_commit_abort_and_offsets(
    kgc: KgcProcess, clients: Clients, topic_maker: Callable[..., None]
) -> None:
    topic = "ledger"
    topic_maker(kgc.bootstrap, topic, 1)
    args = ["--bootstrap", kgc.bootstrap, "--topic", topic, "--transactional-id", "java-txn"]
    args += ["--txns", "6", "--count", "5", "--abort-every", "3", "--group", "ledger-app"]
    c = clients.start("kgc.clients.Transact", args)
    assert c.wait_exit(120) == 0, c.describe()
    txns = c.of("txn")
    assert [t["committed"] for t in txns] == [True, True, False, True, True, False]
    reader = clients.consumer(
        kgc.bootstrap,
        "ledger-reader",
        topics=[topic],
        max_records=20,
        properties={"isolation.level": "read_committed"},
    )
    assert reader.wait_exit() == 0, reader.describe()
    values = sorted(r["value"] for r in reader.of("record"))
    expect = sorted(f"t{t}-{i}" for t in (0, 1, 3, 4) for i in range(5))
    assert values == expect
    # The offsets of the last committed transaction (index 4: offset 5) are the group's;
    # the aborted sixth one's (6) never became visible.
    with Admin(kgc.bootstrap) as admin:
        offsets = admin.committed_offsets("ledger-app")
    assert {tp: o for tp, (o, _) in offsets.items()} == {(topic, 0): 5}


def test_java_producer_fenced_by_a_new_instance(
    kgc: KgcProcess, clients: Clients, topic_maker: Callable[..., None]
) -> None:
    topic = "fenced"
    topic_maker(kgc.bootstrap, topic, 1)
    args = ["--bootstrap", kgc.bootstrap, "--topic", topic, "--transactional-id", "java-zombie"]
    args += ["--txns", "2", "--count", "3", "--fence", "true"]
    c = clients.start("kgc.clients.Transact", args)
    assert c.wait_exit(120) == 0, c.describe()
    assert [e["error"] for e in c.of("fenced")] == ["ProducerFencedException"]
    assert [t["committed"] for t in c.of("txn")] == [True]
    reader = clients.consumer(
        kgc.bootstrap,
        "fenced-reader",
        topics=[topic],
        max_records=3,
        properties={"isolation.level": "read_committed"},
    )
    assert reader.wait_exit() == 0, reader.describe()
    assert sorted(r["value"] for r in reader.of("record")) == ["t0-0", "t0-1", "t0-2"]
