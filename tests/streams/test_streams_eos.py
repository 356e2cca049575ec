"""Kafka Streams 4.4.0 with ``processing.guarantee=exactly_once_v2`` against kgc: a word count
through the SIGKILL of one of its two instances and of kgc itself counts every word exactly once.

How this works: two JVMs run ``kgc.streams.WordCount`` (tests/jvm) under one application id,
exactly-once v2, under transaction.version 1 or 2 (TV2: the Java producer's EndTxn v5 bumps
the epoch of every transaction), with the group protocol of the test's parameter (``streams``: kgc creates the
repartition and changelog topics and assigns the tasks; ``classic``: the instances do). Each
commit of a stream thread is one transaction of its producer: the output records, the
repartition records, the changelog records and the consumed offsets (TxnOffsetCommit) commit
or abort together. The record cache is off, so every input word gives one output record
``word -> its new count``, and the output's partition is the word's, so a read_committed
reader sees each word's counts in order.

What exactly-once means here, checked exactly: for every word, the committed output is the
sequence 1, 2, ..., n with n the word's number of occurrences in the input -- a count
processed twice (a replayed input record, a repartition record read twice, a changelog
restored past what was committed) would repeat a number, a lost one would skip one.

The scenario: batch 1 with both instances running; batch 2, and as soon as its first counts
are visible one instance (one that counts, so a store moves) is SIGKILLed -- its open
transaction is aborted by kgc when ``transaction.timeout.ms`` (Streams' 10 s under EOS) runs
out, and the survivor takes its tasks and restores their stores from the changelog; batch 3,
and as soon as its first counts are visible kgc is SIGKILLed and started again on the same
data, with the survivor's transaction open. The input is produced before each kill (durable
once acknowledged), so the input itself is exact.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.kgc_process import KgcProcess
from support.wordcountkit import (
    ALL_TASKS,
    PARTITIONS,
    StreamsInstance,
    lines_of,
    wait_until,
)

pytestmark = [pytest.mark.kafka, pytest.mark.integration, pytest.mark.slow]

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


class Output:
    """A read_committed reader of the whole output topic: every word's counts, in order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "unused",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                # Connection refusals while kgc restarts are expected: not logged.
                "log_level": 2,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.seen: dict[str, list[int]] = {}

    def poll(self) -> dict[str, list[int]]:
        for msg in self.consumer.consume(1000, 0.2):
            if msg.error() is not None:
                continue  # transport errors while kgc restarts; the reader carries on
            value = msg.value()
            assert value is not None
            self.seen.setdefault(msg.key().decode(), []).append(int.from_bytes(value, "big"))
        return self.seen

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture(params=[1, 2], ids=["tv1", "tv2"])
def kgc_eos(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KgcProcess]:
    """kgc with short streams-group sessions and one-second heartbeats (the survivor takes a
    dead instance's tasks within seconds), and timed-out transactions looked for every
    second (the dead instance's open transaction is aborted soon after its 10 s run out);
    transaction.version unfinalized (the producers speak TV1) or finalized at 2 (TV2: an
    epoch per transaction, the partitions added by kgc itself)."""
    proc = KgcProcess(
        tmp_path / "data",
        "--transaction-version",
        str(request.param),
        "--group-streams-initial-rebalance-delay-ms",
        "200",
        "--group-streams-min-session-timeout-ms",
        "6000",
        "--group-streams-session-timeout-ms",
        "6000",
        "--group-streams-min-heartbeat-interval-ms",
        "1000",
        "--group-streams-heartbeat-interval-ms",
        "1000",
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
        "1000",
    )
    proc.start()
    yield proc
    if proc.alive():
        proc.stop()


@pytest.mark.parametrize("protocol", ["streams", "classic"])
def test_word_count_exactly_once_through_kills(
    kgc_eos: KgcProcess, tmp_path: Path, protocol: str
) -> None:
    kgc = kgc_eos
    app = f"eos-{protocol}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
    for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in ("in", "out")]).values():
        f.result()
    producer = Producer(
        {"bootstrap.servers": kgc.bootstrap, "enable.idempotence": True, "log_level": 2}
    )

    def produce(words: Counter[str], seed: int) -> None:
        for i, line in enumerate(lines_of(words, seed)):
            producer.produce("in", value=line.encode(), partition=i % PARTITIONS)
        assert producer.flush(30) == 0

    insts: list[StreamsInstance] = []
    output = Output(kgc.bootstrap, "out")
    try:
        for name in ("a", "b"):
            server = (kgc.bootstrap, protocol)
            state = tmp_path / name
            insts.append(
                StreamsInstance(name, server, app, ("in", "out"), state, "exactly_once_v2")
            )
        wait_until(
            "both instances running with two tasks each",
            lambda: (
                all(i.running() and len(i.tasks()) == 2 for i in insts)
                and insts[0].tasks() | insts[1].tasks() == ALL_TASKS
            ),
            120,
            insts,
        )
        expected: Counter[str] = Counter()

        def caught_up() -> bool:
            seen = output.poll()
            return all(len(seen.get(w, [])) >= n for w, n in expected.items())

        batch1 = Counter({w: 20 + i for i, w in enumerate(WORDS)})
        produce(batch1, seed=1)
        expected += batch1
        wait_until("batch 1 counted", caught_up, 60, insts)

        # One instance dies mid-batch: the one with a counting task (sub-topology 1).
        victim, survivor = sorted(insts, key=lambda i: -sum(t[0] == "1" for t in i.tasks()))
        batch2 = Counter({w: 600 + i for i, w in enumerate(WORDS)})
        produce(batch2, seed=2)
        started = sum(len(v) for v in output.poll().values())
        wait_until(
            "batch 2 being counted",
            lambda: sum(len(v) for v in output.poll().values()) > started,
            60,
            insts,
            poll=0.05,  # the kill is to land mid-batch
        )
        victim.kill()
        expected += batch2
        wait_until(
            "the survivor running all four tasks",
            lambda: survivor.running() and survivor.tasks() == ALL_TASKS,
            120,
            [survivor],
        )
        wait_until("batch 2 counted", caught_up, 120, [survivor])

        # The protocol the producers spoke in batches 1 and 2, as kgc counted it (the counters
        # start again with kgc's restart below).
        tv2 = kgc.extra[kgc.extra.index("--transaction-version") + 1] == "2"
        assert (kgc.requests_total(api="EndTxn", version="5") > 0) == tv2
        assert (kgc.requests_total(api="AddPartitionsToTxn") > 0) == (not tv2)

        # kgc dies mid-batch, with the survivor's transaction open.
        batch3 = Counter({w: 600 + i for i, w in enumerate(WORDS)})
        produce(batch3, seed=3)
        started = sum(len(v) for v in output.poll().values())
        wait_until(
            "batch 3 being counted",
            lambda: sum(len(v) for v in output.poll().values()) > started,
            60,
            [survivor],
            poll=0.05,
        )
        # Killed before the whole batch is visible: the kill lands mid-batch.
        assert sum(len(v) for v in output.poll().values()) < started + sum(batch3.values())
        kgc.kill()
        kgc.start()
        expected += batch3
        wait_until("batch 3 counted", caught_up, 180, [survivor])

        seen = output.poll()
        assert set(seen) == set(expected)
        for w, n in expected.items():
            assert seen[w] == list(range(1, n + 1)), (w, n, seen[w][:5], len(seen[w]))
    finally:
        output.close()
        for i in insts:
            i.stop()
