"""Helpers for KIP-848 consumer-group tests with real librdkafka consumers (group.protocol=consumer).

How this works: each ``Member`` is a confluent-kafka ``Consumer`` polled on its own thread. Its
rebalance callbacks (incremental under the consumer protocol) append to one shared, ordered
``OwnershipLog``: an assign is logged when the client takes partitions, a revoke when it gives
them up, before it acknowledges the revocation to kgc. Because the coordinator only hands a
partition to a new owner after the old owner acknowledged, the log is in causal order, and
replaying it finds any moment a partition was owned twice -- not just the moments a test
happened to sample. Records the member consumes are kept as (topic, partition, offset, value).

``describe`` sends a raw ConsumerGroupDescribe (the admin client does not expose member
epochs); ``start_kgc`` starts ``kgc serve`` with short heartbeat intervals so hand-overs take
fractions of a second.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from coordinator.tools.client import Connection
from protocol.messages import consumer_group_describe as cgd
from support.kgc_process import KgcProcess

TP = tuple[str, int]

HEARTBEAT_ARGS = (
    "--group-consumer-min-heartbeat-interval-ms",
    "100",
    "--group-consumer-heartbeat-interval-ms",
    "250",
)


def start_kgc(tmp_path: Path, *extra: str) -> KgcProcess:
    """A loaded ``kgc serve`` whose consumer groups heartbeat every 250 ms."""
    kgc = KgcProcess(tmp_path / "data", *HEARTBEAT_ARGS, *extra)
    kgc.start()
    kgc.wait_loaded()
    return kgc


def wait_until(
    predicate: Callable[[], bool],
    timeout: float = 30.0,
    what: str = "condition",
    detail: Callable[[], object] | None = None,
) -> None:
    """Poll ``predicate`` until it holds or the deadline passes (then fail, with ``detail``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    extra = f": {detail()}" if detail is not None else ""
    raise AssertionError(f"timed out after {timeout} s waiting for {what}{extra}")


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()])
    for f in futures.values():
        f.result(timeout=20)


def produce(
    bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str = ""
) -> set[tuple[str, int, int, bytes]]:
    """Produce ``per_partition`` records to each partition; the (topic, partition, offset, value)s."""
    delivered: set[tuple[str, int, int, bytes]] = set()
    failures: list[Any] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            failures.append(err)
        else:
            delivered.add((msg.topic(), msg.partition(), msg.offset(), msg.value()))

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, f"{tag}{part}-{i}".encode(), partition=part, on_delivery=on_delivery)
    assert p.flush(20) == 0, "records left unsent"
    assert not failures, failures
    assert len(delivered) == partitions * per_partition
    return delivered


@dataclass
class OwnershipLog:
    """Every member's assign/revoke events, in the order they happened (one lock for all)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    events: list[tuple[str, str, frozenset[TP]]] = field(default_factory=list)

    def mark(self) -> int:
        with self.lock:
            return len(self.events)

    def since(self, mark: int) -> list[tuple[str, str, frozenset[TP]]]:
        with self.lock:
            return list(self.events[mark:])

    def snapshot(self, members: Iterable[Member]) -> dict[str, set[TP]]:
        """Every member's partitions at one moment (the callbacks change them under this lock)."""
        with self.lock:
            return {m.name: m.partitions() for m in members}

    def double_ownership(self) -> list[str]:
        """Replays the log: each time a partition was assigned while another member owned it."""
        owner: dict[TP, str] = {}
        problems: list[str] = []
        with self.lock:
            events = list(self.events)
        for i, (member, kind, tps) in enumerate(events):
            for tp in sorted(tps):
                if kind == "assign":
                    held = owner.get(tp)
                    if held is not None and held != member:
                        problems.append(
                            f"event {i}: {tp} assigned to {member} while {held} owns it"
                        )
                    owner[tp] = member
                elif owner.get(tp) == member:
                    del owner[tp]
        return problems


class Member:
    """A librdkafka consumer in a KIP-848 group, polled on its own thread."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: list[str],
        log: OwnershipLog,
        name: str,
        **conf: Any,
    ) -> None:
        self.name = name
        self.log = log
        self.lock = threading.Lock()
        self.owned: set[TP] = set()
        self.consumed: list[tuple[str, int, int, bytes]] = []
        self.errors: list[KafkaError] = []
        self.running = True
        self.calls: queue.SimpleQueue[tuple[Callable[[Consumer], Any], Future[Any]]] = (
            queue.SimpleQueue()
        )
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "client.id": name,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "error_cb": self._on_error,
                **conf,
            }
        )
        self.consumer.subscribe(
            topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    # The callbacks run on the polling thread (or in close()); confluent-kafka applies the
    # incremental assign/unassign itself after each returns.
    def _change(self, kind: str, partitions: list[TopicPartition]) -> None:
        tps = frozenset((p.topic, p.partition) for p in partitions)
        if not tps:
            return  # librdkafka also calls back with nothing to assign or revoke
        # Under the log's lock, so a snapshot of every member's set is one consistent cut.
        with self.log.lock:
            with self.lock:
                self.owned = self.owned | tps if kind == "assign" else self.owned - tps
            self.log.events.append((self.name, kind, tps))

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._change("assign", partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._change("revoke", partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._change("lost", partitions)

    def _on_error(self, err: KafkaError) -> None:
        with self.lock:
            self.errors.append(err)

    def _run(self) -> None:
        while self.running:
            while not self.calls.empty():
                fn, fut = self.calls.get()
                try:
                    fut.set_result(fn(self.consumer))
                except Exception as e:  # handed to the caller
                    fut.set_exception(e)
            msg = self.consumer.poll(0.05)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                with self.lock:
                    self.errors.append(err)
                continue
            topic, part, offset, value = msg.topic(), msg.partition(), msg.offset(), msg.value()
            assert topic is not None and part is not None and offset is not None
            with self.lock:
                self.consumed.append((topic, part, offset, value or b""))

    def partitions(self, topic: str | None = None) -> set[TP]:
        with self.lock:
            return {tp for tp in self.owned if topic is None or tp[0] == topic}

    def partition_ids(self, topic: str) -> set[int]:
        return {p for t, p in self.partitions(topic)}

    def records(self) -> list[tuple[str, int, int, bytes]]:
        with self.lock:
            return list(self.consumed)

    def fatal_errors(self) -> list[KafkaError]:
        with self.lock:
            return [e for e in self.errors if e.fatal()]

    def member_id(self) -> str:
        # From the polling thread: memberid() called beside a running poll() hangs.
        return str(self.on_poll_thread(lambda c: c.memberid()))

    def stop_polling(self) -> None:
        self.running = False
        self.thread.join(10)
        assert not self.thread.is_alive(), f"{self.name} poll thread did not stop"

    def on_poll_thread(self, fn: Callable[[Consumer], Any], timeout: float = 30.0) -> Any:
        """Run ``fn(consumer)`` between two polls (librdkafka calls stay on one thread)."""
        fut: Future[Any] = Future()
        self.calls.put((fn, fut))
        return fut.result(timeout)

    def commit(self) -> list[TopicPartition]:
        """A synchronous commit of the consumed positions; the committed TopicPartitions."""
        result: list[TopicPartition] = self.on_poll_thread(lambda c: c.commit(asynchronous=False))
        return result

    def close(self) -> None:
        if self.running:
            self.stop_polling()
        self.consumer.close()


def owned_twice(layout: dict[str, set[TP]]) -> set[TP]:
    """The partitions more than one member of a snapshot owns."""
    seen: set[TP] = set()
    twice: set[TP] = set()
    for tps in layout.values():
        twice |= seen & tps
        seen |= tps
    return twice


def settled(layout: dict[str, set[TP]], want: set[TP]) -> bool:
    """Every partition in ``want`` owned by exactly one member and nothing else owned."""
    sets = list(layout.values())
    return sum(map(len, sets)) == len(want) and set().union(*sets) == want


def describe(bootstrap: str, group: str) -> cgd.DescribedGroup:
    """ConsumerGroupDescribe v1 of one group (kgc is its own coordinator)."""
    with Connection.to(bootstrap) as c:
        resp = c.call(cgd.API_KEY, 1, cgd.Request(group_ids=[group]))
    g: cgd.DescribedGroup = resp.groups[0]
    return g


def described_assignment(g: cgd.DescribedGroup) -> dict[str, set[TP]]:
    """member id -> the partitions kgc says it owns now."""
    return {
        m.member_id: {
            (t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions
        }
        for m in g.members
    }
