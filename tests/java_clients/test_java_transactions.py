"""KafkaProducer 4.4.0's transactions against kgc (the TV1 protocol: kgc does not finalize
transaction.version): committed transactions visible to a read_committed KafkaConsumer and
aborted ones not, offsets committed with sendOffsetsToTransaction, and a producer fenced by
a second one with the same transactional.id (ProducerFencedException)."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.javakit import Clients
from support.kgc_process import KgcProcess

from coordinator.tools.admin import Admin

pytestmark = [pytest.mark.kafka, pytest.mark.integration]


@pytest.fixture(params=[1, 2], ids=["tv1", "tv2"])
def kgc(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KgcProcess]:
    """kgc with transaction.version unfinalized (the client speaks the TV1 protocol) or
    finalized at 2 (the Java 4.4 client's TV2: EndTxn v5, an epoch per transaction, no
    AddPartitionsToTxn / AddOffsetsToTxn); timed-out transactions looked for every second."""
    proc = KgcProcess(
        tmp_path / "data",
        "--transaction-version",
        str(request.param),
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
        "1000",
    )
    proc.start()
    yield proc
    if proc.alive():
        proc.stop()


def assert_protocol(kgc: KgcProcess) -> None:
    """What the client spoke, as kgc counted it: TV2's EndTxn v5 and no client adds, or
    TV1's EndTxn v<5 after AddPartitionsToTxn."""
    tv2 = (
        "--transaction-version" in kgc.extra
        and kgc.extra[kgc.extra.index("--transaction-version") + 1] == "2"
    )
    v5 = kgc.requests_total(api="EndTxn", version="5")
    adds = kgc.requests_total(api="AddPartitionsToTxn")
    if tv2:
        assert v5 > 0 and adds == 0, (v5, adds)
    else:
        assert v5 == 0 and adds > 0, (v5, adds)


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
    assert_protocol(kgc)


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
    assert_protocol(kgc)


@pytest.fixture(params=["kgc", "kgc-tv2", "kafka"])
def server(request: pytest.FixtureRequest) -> tuple[str, str]:
    """The scenario's server and bootstrap: kgc (transaction.version unfinalized, or 2; its
    timed-out transactions looked for every second), or the reference broker (which
    finalizes transaction.version 2; Kafka's default ten seconds)."""
    if request.param == "kafka":
        return "kafka", str(request.getfixturevalue("kafka_broker").bootstrap)
    tmp = request.getfixturevalue("tmp_path")
    proc = KgcProcess(
        tmp / "data",
        "--transaction-version",
        "2" if request.param == "kgc-tv2" else "1",
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
        "1000",
    )
    proc.start()
    request.addfinalizer(proc.stop)
    return request.param, proc.bootstrap


def _stable(bootstrap: str, topic: str, partition: int) -> bool:
    """No open transaction on the partition: its last stable offset is its log end."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "isolation.level": "read_committed"}
    )
    try:
        lso = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)[1]
    finally:
        consumer.close()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)[1]
    finally:
        consumer.close()
    return bool(lso == end)


def test_java_require_stable_during_an_open_transaction(
    server: tuple[str, str], clients: Clients, topic_maker: Callable[..., None]
) -> None:
    """A read_committed KafkaConsumer's committed() (OffsetFetch with require_stable) while the
    producer's offsets are pending gets UNSTABLE_OFFSET_COMMIT, which the client retries until
    its timeout; once the transaction commits it sees the offset."""
    _, bootstrap = server
    topic = f"stable-{uuid.uuid4().hex[:6]}"
    topic_maker(bootstrap, topic, 1)
    args = ["--bootstrap", bootstrap, "--topic", topic, "--transactional-id", f"{topic}-txn"]
    args += ["--txns", "2", "--count", "3", "--group", f"{topic}-app", "--check-stable", "true"]
    c = clients.start("kgc.clients.Transact", args)
    assert c.wait_exit(120) == 0, c.describe()
    [open_] = c.of("stable-open")
    assert open_.get("error") == "org.apache.kafka.common.errors.TimeoutException", open_
    [after] = c.of("stable-after")
    assert after.get("offset") == 2, after


def test_java_transaction_timed_out_by_the_server(
    server: tuple[str, str], clients: Clients, topic_maker: Callable[..., None]
) -> None:
    """transaction.timeout.ms 2000 and a transaction left open: the server aborts it (its
    records never reach read_committed, its offsets never commit) and the producer's late
    commit fails."""
    kind, bootstrap = server
    topic = f"timeout-{uuid.uuid4().hex[:6]}"
    group = f"{topic}-app"
    topic_maker(bootstrap, topic, 1)
    args = ["--bootstrap", bootstrap, "--topic", topic, "--transactional-id", f"{topic}-txn"]
    args += ["--txns", "2", "--count", "3", "--group", group, "--stall", "true"]
    args += ["--property", "transaction.timeout.ms=2000"]
    c = clients.start("kgc.clients.Transact", args)
    c.wait_event("stalled", timeout=60)
    deadline = time.monotonic() + 30
    while not _stable(bootstrap, topic, 0):
        assert time.monotonic() < deadline, "the open transaction was never aborted"
        time.sleep(0.2)
    c.send("commit")
    assert c.wait_exit(60) == 0, c.describe()
    [late] = c.of("stall-commit")
    # The abort fenced the producer's epoch. Under TV1 (Kafka's
    # TransactionsTest.testFencingOnTransactionExpiration) its EndTxn is refused with
    # PRODUCER_FENCED; under TV2 (the reference broker finalizes transaction.version 2) the
    # abort bumped the epoch once, so EndTxn v5 reads as a retry of the other result:
    # INVALID_TXN_STATE.
    fenced = "ProducerFencedException" if kind == "kgc" else "InvalidTxnStateException"
    assert late.get("error") == f"org.apache.kafka.common.errors.{fenced}", late
    reader = clients.consumer(
        bootstrap,
        f"{topic}-reader",
        topics=[topic],
        max_records=3,
        properties={"isolation.level": "read_committed"},
    )
    assert reader.wait_exit() == 0, reader.describe()
    assert sorted(r["value"] for r in reader.of("record")) == ["t0-0", "t0-1", "t0-2"]
    with Admin(bootstrap) as admin:
        offsets = admin.committed_offsets(group)
    assert {tp: o for tp, (o, _) in offsets.items()} == {(topic, 0): 1}


@pytest.mark.slow
def test_java_consume_transform_produce_exactly_once_through_a_kgc_sigkill(
    kgc: KgcProcess, clients: Clients, topic_maker: Callable[..., None]
) -> None:
    """kgc.clients.Pipeline copies ``in`` to ``out`` in transactions that also commit its
    input positions (sendOffsetsToTransaction); kgc is SIGKILLed once a third of the input
    is done and started again on the same data. Every input is in ``out`` exactly once under
    read_committed, and the group's offsets are the end of ``in``."""
    n, partitions = 3000, 3
    topic_maker(kgc.bootstrap, "in", partitions)
    topic_maker(kgc.bootstrap, "out", partitions)
    producer = Producer({"bootstrap.servers": kgc.bootstrap, "enable.idempotence": True})
    for i in range(n):
        producer.produce("in", key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0
    args = ["--bootstrap", kgc.bootstrap, "--input", "in", "--output", "out"]
    args += ["--group", "pipeline", "--transactional-id", "pipeline-1"]
    c = clients.start("kgc.clients.Pipeline", args)
    c.wait_for(lambda e: e.get("committed", 0) >= n // 3, timeout=120)
    kgc.kill()
    kgc.start()
    reader = Consumer(
        {
            "bootstrap.servers": kgc.bootstrap,
            "group.id": "unused",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "log_level": 2,
        }
    )
    reader.assign([TopicPartition("out", p, 0) for p in range(partitions)])
    seen: Counter[str] = Counter()
    deadline = time.monotonic() + 120
    try:
        while sum(seen.values()) < n:
            assert time.monotonic() < deadline, (sum(seen.values()), c.describe())
            for m in reader.consume(500, 0.5):
                if m.error() is None:
                    seen[m.value().decode()] += 1
        c.send("stop")
        assert c.wait_exit(60) == 0, c.describe()
        for m in reader.consume(10_000, 2.0):  # anything written twice would show here
            if m.error() is None:
                seen[m.value().decode()] += 1
    finally:
        reader.close()
    assert seen == Counter(f"v{i}" for i in range(n))
    with Admin(kgc.bootstrap) as admin:
        offsets = admin.committed_offsets("pipeline")
    assert {tp: o for tp, (o, _) in offsets.items()} == {("in", p): n // 3 for p in range(3)}
    assert_protocol(kgc)
