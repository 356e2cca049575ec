"""Classic and consumer-protocol librdkafka members in one group (KIP-848's online migration).

Every consumer polls on its own thread, as an application would; the test waits on the
assignments they report and on what ConsumerGroupDescribe says, never on fixed sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.groupkit import create_topic, wait_until
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration

FAST = (
    "--group-consumer-min-heartbeat-interval-ms",
    "100",
    "--group-consumer-heartbeat-interval-ms",
    "250",
    "--group-initial-rebalance-delay-ms",
    "0",
)


@pytest.fixture
def kgc848(tmp_path: Path) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path / "data", *FAST)
    proc.start()
    proc.wait_loaded()
    yield proc
    if proc.alive():
        proc.stop()


class Polling:
    """A confluent-kafka consumer polled on its own thread."""

    def __init__(self, kgc: KgcProcess, group: str, topic: str, **conf: Any) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": kgc.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                **conf,
            }
        )
        self.consumer.subscribe([topic])
        self.lock = threading.Lock()
        self.owned: set[int] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.05)
            with self.lock:
                self.owned = {tp.partition for tp in self.consumer.assignment()}

    def partitions(self) -> set[int]:
        with self.lock:
            return set(self.owned)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.consumer.close()


def classic(
    kgc: KgcProcess, group: str, topic: str, strategy: str = "cooperative-sticky"
) -> Polling:
    return Polling(
        kgc,
        group,
        topic,
        **{
            "group.protocol": "classic",
            "partition.assignment.strategy": strategy,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
        },
    )


def consumer(kgc: KgcProcess, group: str, topic: str) -> Polling:
    return Polling(kgc, group, topic, **{"group.protocol": "consumer"})


def describe(kgc: KgcProcess, group: str) -> Any:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})  # kept alive until answered
    return admin.describe_consumer_groups([group])[group].result(timeout=10)


def disjoint_cover(members: list[Polling], n: int, sizes: list[int]) -> bool:
    owned = [m.partitions() for m in members]
    union: set[int] = set().union(*owned)
    return (
        sorted(len(o) for o in owned) == sorted(sizes)
        and union == set(range(n))
        and sum(len(o) for o in owned) == n
    )


def test_classic_and_consumer_members_share_one_consumer_group(kgc848: KgcProcess) -> None:
    from confluent_kafka import ConsumerGroupType

    create_topic(kgc848.bootstrap, "mixed", 4)
    a = consumer(kgc848, "g-mixed", "mixed")
    b = classic(kgc848, "g-mixed", "mixed")
    try:
        wait_until(lambda: disjoint_cover([a, b], 4, [2, 2]), what="a 2/2 split")
        d = describe(kgc848, "g-mixed")
        assert d.type == ConsumerGroupType.CONSUMER
        assert len(d.members) == 2
        b.close()
        wait_until(lambda: a.partitions() == {0, 1, 2, 3}, what="the consumer member taking all")
    finally:
        a.close()


def test_live_classic_group_is_upgraded_and_downgraded(kgc848: KgcProcess) -> None:
    """Kafka upgrades a live classic group only when no member's assignment carries user
    data (an "unsupported custom assignor" otherwise). librdkafka's cooperative-sticky puts
    its state there, so, as against Kafka, the classic members here use range."""
    from confluent_kafka import ConsumerGroupType

    create_topic(kgc848.bootstrap, "mig", 6)
    b1 = classic(kgc848, "g-mig", "mig", "range")
    b2 = classic(kgc848, "g-mig", "mig", "range")
    try:
        wait_until(lambda: disjoint_cover([b1, b2], 6, [3, 3]), what="the classic group's split")
        assert describe(kgc848, "g-mig").type == ConsumerGroupType.CLASSIC
        a = consumer(kgc848, "g-mig", "mig")
        wait_until(
            lambda: describe(kgc848, "g-mig").type == ConsumerGroupType.CONSUMER,
            what="the upgrade",
        )
        wait_until(lambda: disjoint_cover([a, b1, b2], 6, [2, 2, 2]), what="a 2/2/2 split")
        a.close()
        wait_until(
            lambda: describe(kgc848, "g-mig").type == ConsumerGroupType.CLASSIC,
            what="the downgrade",
        )
        wait_until(lambda: disjoint_cover([b1, b2], 6, [3, 3]), what="the classic split again")
    finally:
        b1.close()
        b2.close()
