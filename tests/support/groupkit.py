"""Helpers for group tests with real clients: topics, waiting, consumer subprocesses."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from confluent_kafka import Consumer

from coordinator.tools.client import Connection
from protocol.messages import create_topics, offset_commit, offset_fetch
from support.kgc_process import KgcProcess


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    with Connection.to(bootstrap) as c:
        _, resp = c.request(
            create_topics.API_KEY,
            create_topics.Request(
                topics=[
                    create_topics.CreatableTopic(
                        name=name, num_partitions=partitions, replication_factor=1
                    )
                ]
            ),
        )
        assert resp.topics[0].error_code in (0, 36), resp


def commit_offset(
    conn: Connection,
    group: str,
    topic: str,
    offset: int,
    *,
    partition: int = 0,
    metadata: str | None = None,
) -> int:
    """OffsetCommit v8 of one partition as a simple consumer (generation -1): its error code."""
    part = offset_commit.OffsetCommitRequestPartition(
        partition_index=partition, committed_offset=offset, committed_metadata=metadata
    )
    request = offset_commit.Request(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[offset_commit.OffsetCommitRequestTopic(name=topic, partitions=[part])],
    )
    resp = conn.call(offset_commit.API_KEY, 8, request)
    return int(resp.topics[0].partitions[0].error_code)


def fetch_offset(conn: Connection, group: str) -> tuple[int, int]:
    """OffsetFetch v8 of every offset of ``group``: (group error code, first offset or -1)."""
    request = offset_fetch.Request(
        groups=[offset_fetch.OffsetFetchRequestGroup(group_id=group, topics=None)]
    )
    g = conn.call(offset_fetch.API_KEY, 8, request).groups[0]
    parts = [p.committed_offset for t in g.topics for p in t.partitions]
    return int(g.error_code), (parts[0] if parts else -1)


def wait_until(
    predicate: Callable[[], bool],
    timeout: float = 30.0,
    interval: float = 0.1,
    what: str = "condition",
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


async def async_wait_until(
    predicate: Callable[[], bool | Awaitable[bool]],
    timeout: float = 30.0,
    interval: float = 0.1,
    what: str = "condition",
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ok = predicate()
        if isinstance(ok, Awaitable):
            ok = await ok
        if ok:
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


class Member:
    """A librdkafka consumer polled on its own thread, recording assignment changes."""

    def __init__(self, kgc: KgcProcess, group: str, strategy: str, **conf: Any) -> None:
        self.assigned: set[int] = set()
        self.revoked_ever: list[set[int]] = []
        self.lock = threading.Lock()
        self.running = True
        self.cooperative = strategy == "cooperative-sticky"
        self.consumer = Consumer(
            {
                "bootstrap.servers": kgc.bootstrap,
                "group.id": group,
                "partition.assignment.strategy": strategy,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                **conf,
            }
        )
        self.consumer.subscribe(["orders"], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _on_assign(self, consumer: Consumer, partitions: list[Any]) -> None:
        with self.lock:
            new = {p.partition for p in partitions}
            self.assigned = self.assigned | new if self.cooperative else new

    def _on_revoke(self, consumer: Consumer, partitions: list[Any]) -> None:
        with self.lock:
            gone = {p.partition for p in partitions}
            if gone:
                self.revoked_ever.append(gone)
            self.assigned = self.assigned - gone

    def _run(self) -> None:
        while self.running:
            self.consumer.poll(0.05)

    def partitions(self) -> set[int]:
        with self.lock:
            return set(self.assigned)

    def close(self) -> None:
        self.running = False
        self.thread.join(10)
        self.consumer.close()
