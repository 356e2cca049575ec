"""Setting up the same state on Kafka and kgc with real clients, and waiting on it.

A topic with records of fixed keys and timestamps (``produce``), a group that consumed and
committed (``consume_and_commit``), live members polling in threads (``LiveMembers``), and
reads of what a server holds (``committed``, ``group_settled``) to wait on instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from coordinator.tools.client import Connection
from protocol.messages import (
    consumer_group_describe,
    create_topics,
    describe_groups,
    offset_fetch,
)

# Records are stamped relative to the test's start: Kafka deletes segments older than
# retention.ms (7 days) and refuses stamps more than an hour ahead.
BASE_TS = (int(time.time()) - 600) * 1000


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    with Connection.to(bootstrap) as c:
        _, resp = c.request(
            create_topics.API_KEY,
            create_topics.Request(
                topics=[
                    create_topics.CreatableTopic(
                        name=name, num_partitions=partitions, replication_factor=1
                    )
                ],
                timeout_ms=30000,
            ),
        )
        assert resp.topics[0].error_code == 0, resp


def produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    """``per_partition`` records in each partition, record i stamped BASE_TS + i seconds."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(per_partition):
        for part in range(partitions):
            p.produce(
                topic,
                key=f"k{part}-{i}".encode(),
                value=f"v{part}-{i}".encode(),
                partition=part,
                timestamp=BASE_TS + i * 1000,
            )
    assert p.flush(30) == 0


def consume_and_commit(
    bootstrap: str, group: str, protocol: str, topic: str, offsets: dict[int, int]
) -> None:
    """A consumer of ``protocol`` reads ``topic`` and commits ``offsets``, then leaves."""
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "client.id": "setup",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    c = Consumer(conf)
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(c.assignment()) < len(offsets):
            assert time.monotonic() < deadline, "no assignment"
            c.poll(0.1)
        c.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in sorted(offsets.items())],
            asynchronous=False,
        )
    finally:
        c.close()


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    with Connection.to(bootstrap) as c:
        c.negotiate()
        _, resp = c.request(
            offset_fetch.API_KEY,
            offset_fetch.Request(
                groups=[offset_fetch.OffsetFetchRequestGroup(group_id=group, topics=None)]
            ),
            version=8,  # by name (v10 names topics by id)
        )
    g = resp.groups[0]
    assert g.error_code == 0, g
    return {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions}


def wait_until(what: str, cond: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def group_settled(bootstrap: str, group: str, members: int) -> bool:
    """The group is Stable with ``members`` members, each holding its target (consumer
    groups) or an assignment (classic), or Empty when ``members`` is 0."""
    with Connection.to(bootstrap) as c:
        c.negotiate()
        _, cg = c.request(
            consumer_group_describe.API_KEY,
            consumer_group_describe.Request(group_ids=[group]),
        )
        g = cg.groups[0]
        if g.error_code == 0:
            if members == 0:
                return g.group_state == "Empty"

            def parts(tps: list) -> set[tuple[str, int]]:  # type: ignore[type-arg]
                return {(t.topic_name, p) for t in tps for p in t.partitions}

            return (
                g.group_state == "Stable"
                and len(g.members) == members
                and all(
                    m.member_epoch == g.assignment_epoch
                    and parts(m.assignment.topic_partitions)
                    == parts(m.target_assignment.topic_partitions)
                    for m in g.members
                )
            )
        _, dg = c.request(describe_groups.API_KEY, describe_groups.Request(groups=[group]))
        d = dg.groups[0]
        if members == 0:
            return d.group_state == "Empty"
        return d.group_state == "Stable" and len(d.members) == members


class LiveMembers:
    """Real consumers polling in threads until ``close``; ``member-a`` joins first and gets
    every partition before ``member-b`` joins, so both brokers end with the same split."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, bootstrap: str, group: str, protocol: str, topic: str, client_id: str) -> None:
        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": protocol,
            "client.id": client_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
        if protocol == "classic":
            conf["partition.assignment.strategy"] = "range"
        ready = threading.Event()

        def run() -> None:
            c = Consumer(conf)
            c.subscribe([topic])
            ready.set()
            while not self.stop.is_set():
                c.poll(0.1)
            c.close()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        ready.wait(10)
        self.threads.append(t)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def write_file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
