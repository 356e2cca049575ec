"""Transactional offsets with a real client: confluent-kafka's ``send_offsets_to_transaction``
against a real ``kgc serve``.

A committed transaction's offsets are what OffsetFetch answers; an aborted one's never are;
while a transaction with offsets is open, a ``require_stable`` OffsetFetch (what read_committed
consumers send) answers UNSTABLE_OFFSET_COMMIT for its partitions and the last committed
offsets otherwise; offsets pending across a SIGKILL of kgc are still pending after the
restart (replayed from the offsets log) and become visible when the producer commits.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.groupkit import create_topic, wait_until
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import offset_fetch

pytestmark = pytest.mark.integration

TIMEOUT = 30.0


def producer(kgc: KgcProcess, transactional_id: str) -> Any:
    p = Producer(
        {
            "bootstrap.servers": kgc.bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 60000,
        }
    )
    p.init_transactions(TIMEOUT)
    return p


def group_metadata(kgc: KgcProcess, group: str) -> tuple[Any, Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": kgc.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    return consumer, consumer.consumer_group_metadata()


def fetch(
    kgc: KgcProcess, group: str, topic: str, *, require_stable: bool
) -> list[tuple[int, int]]:
    """OffsetFetch v7 of partitions 0 and 1: (error code, offset) of each."""
    req = offset_fetch.Request(
        group_id=group,
        topics=[offset_fetch.OffsetFetchRequestTopic(topic, [0, 1])],
        require_stable=require_stable,
    )
    with Connection.to(kgc.bootstrap) as c:
        resp = c.call(offset_fetch.API_KEY, 7, req)
    if resp.error_code:  # the group's own error (a partition still loading): no topics
        return [(int(resp.error_code), -1)] * 2
    return [(int(p.error_code), p.committed_offset) for p in resp.topics[0].partitions]


def send_offsets(p: Any, meta: Any, topic: str, offsets: dict[int, int]) -> None:
    p.begin_transaction()
    p.send_offsets_to_transaction(
        [TopicPartition(topic, part, off) for part, off in offsets.items()], meta, TIMEOUT
    )


def test_committed_offsets_are_visible_and_aborted_ones_are_not(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "eos-in", 2)
    consumer, meta = group_metadata(kgc, "eos")
    p = producer(kgc, "eos-tx")
    try:
        send_offsets(p, meta, "eos-in", {0: 5, 1: 7})
        p.commit_transaction(TIMEOUT)
        assert fetch(kgc, "eos", "eos-in", require_stable=True) == [(0, 5), (0, 7)]
        got = consumer.committed([TopicPartition("eos-in", 0)], TIMEOUT)
        assert got[0].offset == 5

        send_offsets(p, meta, "eos-in", {0: 9})
        # Open: partition 0 is unstable for a read_committed fetch, partition 1 is not;
        # a plain fetch answers the last committed offsets.
        unstable = fetch(kgc, "eos", "eos-in", require_stable=True)
        assert unstable == [(ErrorCode.UNSTABLE_OFFSET_COMMIT, -1), (0, 7)]
        assert fetch(kgc, "eos", "eos-in", require_stable=False) == [(0, 5), (0, 7)]
        p.abort_transaction(TIMEOUT)
        assert fetch(kgc, "eos", "eos-in", require_stable=True) == [(0, 5), (0, 7)]
    finally:
        consumer.close()


def test_pending_offsets_survive_a_sigkill_and_commit_after_it(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "eos-kill", 2)
    consumer, meta = group_metadata(kgc, "eos-kill-g")
    p = producer(kgc, "eos-kill-tx")
    try:
        send_offsets(p, meta, "eos-kill", {0: 3})
        p.commit_transaction(TIMEOUT)
        send_offsets(p, meta, "eos-kill", {0: 11, 1: 12})
        assert fetch(kgc, "eos-kill-g", "eos-kill", require_stable=True)[0][0] == 88
        kgc.kill()
        kgc.start()
        # Replayed from the offsets log: still pending, not lost and not committed.
        wait_until(
            lambda: fetch(kgc, "eos-kill-g", "eos-kill", require_stable=False)[0] == (0, 3),
            timeout=TIMEOUT,
            what="the offsets partition to load",
        )
        stable = fetch(kgc, "eos-kill-g", "eos-kill", require_stable=True)
        assert stable == [
            (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1),
            (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1),
        ]
        p.commit_transaction(TIMEOUT)
        assert fetch(kgc, "eos-kill-g", "eos-kill", require_stable=True) == [(0, 11), (0, 12)]
        kgc.kill()
        kgc.start()
        wait_until(
            lambda: fetch(kgc, "eos-kill-g", "eos-kill", require_stable=True) == [(0, 11), (0, 12)],
            timeout=TIMEOUT,
            what="the committed offsets after a second kill",
        )
    finally:
        consumer.close()
