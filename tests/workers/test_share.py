"""Share groups on a 2-worker kgc with real clients (confluent-kafka's ShareConsumer).

Each worker leads its share of the topic's partitions (the share-partition leader is the
data partition's worker) and holds the ``__share_group_state`` partitions p % 2; the group
is chosen so that some share partition's state is kept by the other worker than its
leader, reached through the share coordinator's inter-broker APIs. Two ShareConsumers read
every record of a first half, accepting each and confirming with ``commit_sync``; worker 1
is SIGKILLed and restarted by the supervisor, a second half produced; every record is
delivered, and none acknowledged before the kill is delivered again (worker 1's share
partitions start from the state kept before the kill, not from the earliest offset); the
group's worker describes every partition's share offsets (DescribeShareGroupOffsets).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from support.groupkit import create_topic
from support.workerskit import Workers

from coordinator.placement import worker_of
from coordinator.share.state_shard import partition_for, topic_id_str
from coordinator.tools.client import Connection
from protocol.messages import describe_share_group_offsets as dsgo
from protocol.messages import find_coordinator, metadata
from storage.records import OFFSETS_TOPIC
from storage.records import partition_for as offsets_partition_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "sqw"
PARTITIONS = 4
RECORDS = 200
DEADLINE_S = 60.0


@pytest.fixture()
def node(tmp_path: Any) -> Iterator[Workers]:
    proc = Workers(tmp_path / "data")
    proc.start()
    proc.wait_loaded()
    yield proc
    if proc.alive():
        assert proc.stop() == 0


def topic_id(node: Workers) -> bytes:
    with Connection.to(node.bootstrap) as c:
        _, resp = c.request(
            metadata.API_KEY,
            metadata.Request(topics=[metadata.MetadataRequestTopic(name=TOPIC)]),
        )
    return bytes(resp.topics[0].topic_id)


def state_worker(node: Workers, group: str, tid: bytes, partition: int, asked: int) -> int:
    """FindCoordinator key type 2, asked of worker ``asked``: the worker holding the share
    partition's state."""
    key = f"{group}:{topic_id_str(tid)}:{partition}"
    req = find_coordinator.Request(key_type=2, coordinator_keys=[key])
    with Connection.to(node.bootstrap_of(asked)) as c:
        (coord,) = c.request(find_coordinator.API_KEY, req, version=6)[1].coordinators
    assert coord.error_code == 0
    return int(coord.node_id)


def place(node: Workers, tid: bytes) -> str:
    """A group some share partition of which keeps its state on another worker than its
    leader (and the state of every partition where FindCoordinator says, from either)."""
    for i in range(100):
        group = f"sq-{i}"
        holders = [
            worker_of("__share_group_state", partition_for(group, topic_id_str(tid), p, 50), 2)
            for p in range(PARTITIONS)
        ]
        if any(holders[p] != worker_of(TOPIC, p, 2) for p in range(PARTITIONS)):
            for p in range(PARTITIONS):
                assert state_worker(node, group, tid, p, 0) == holders[p]
                assert state_worker(node, group, tid, p, 1) == holders[p]
            return group
    raise AssertionError("no group keeps a state away from its leader")


def earliest(node: Workers, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    entry = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(timeout=30)


def share_consumer(node: Workers, group: str) -> ShareConsumer:
    c = ShareConsumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "fetch.wait.max.ms": 100,
            "socket.timeout.ms": 4000,  # a killed worker's requests fail over soon
        }
    )
    c.subscribe([TOPIC])
    return c


Record = tuple[int, int]  # (partition, offset)


def read_round(consumers: list[ShareConsumer], acked: set[Record], seen: list[Record]) -> None:
    """One poll of each consumer: every record accepted, and counted as acknowledged once
    ``commit_sync`` confirms its partition."""
    for c in consumers:
        msgs = [m for m in (c.poll(0.2) or []) if m.error() is None]
        for m in msgs:
            seen.append((m.partition(), m.offset()))
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        if not msgs:
            continue
        try:
            results = c.commit_sync(30)
        except Exception:  # the commit's answer was lost: its records may come again
            continue
        confirmed = {tp.partition for tp, error in results.items() if error is None}
        acked.update((m.partition(), m.offset()) for m in msgs if m.partition() in confirmed)


def test_every_record_delivered_and_none_acknowledged_again_after_a_worker_sigkill(
    node: Workers,
) -> None:
    create_topic(node.bootstrap, TOPIC, PARTITIONS)
    node.wait_topic(TOPIC, PARTITIONS)
    assert {worker_of(TOPIC, p, 2) for p in range(PARTITIONS)} == {0, 1}
    group = place(node, topic_id(node))
    earliest(node, group)
    producer = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 5})

    def produce(first: int, last: int) -> set[Record]:
        for i in range(first, last):
            producer.produce(TOPIC, value=b"v%d" % i, partition=i % PARTITIONS)
        assert producer.flush(30) == 0
        return {(i % PARTITIONS, i // PARTITIONS) for i in range(first, last)}

    first_half = produce(0, RECORDS // 2)
    consumers = [share_consumer(node, group), share_consumer(node, group)]
    acked: set[Record] = set()
    before: list[Record] = []
    try:
        end = time.monotonic() + DEADLINE_S
        while acked != first_half:
            assert time.monotonic() < end, f"never acknowledged: {sorted(first_half - acked)}"
            read_round(consumers, acked, before)
        acked_before = set(acked)
        node.kill_worker(1)
        # The second half goes to both workers' partitions too; worker 1's share
        # partitions start again from the state kept (by either worker) before the kill.
        everything = first_half | produce(RECORDS // 2, RECORDS)
        after: list[Record] = []
        end = time.monotonic() + DEADLINE_S
        while acked != everything:
            assert time.monotonic() < end, f"never acknowledged: {sorted(everything - acked)}"
            read_round(consumers, acked, after)
    finally:
        for c in consumers:
            c.close()
    again = acked_before & set(after)
    assert not again, f"acknowledged before the kill, delivered again: {sorted(again)}"
    assert set(before) | set(after) == everything
    # The group's worker reports every partition's offsets, its state and its data on
    # either worker: at least the first half is behind the start offset (the persisted
    # start offset trails the last acknowledgement by one write, as Kafka's).
    per_partition = RECORDS // PARTITIONS
    offsets = described(node, group)
    assert set(offsets) == set(range(PARTITIONS))
    for error, start, lag in offsets.values():
        assert error == 0 and per_partition // 2 <= start <= per_partition, offsets
        assert lag == per_partition - start, offsets


def described(node: Workers, group: str) -> dict[int, tuple[int, int, int]]:
    """DescribeShareGroupOffsets v1 at the group's worker: (error, start offset, lag) by
    partition."""
    req = dsgo.Request(
        groups=[
            dsgo.DescribeShareGroupOffsetsRequestGroup(
                group_id=group,
                topics=[
                    dsgo.DescribeShareGroupOffsetsRequestTopic(
                        topic_name=TOPIC, partitions=list(range(PARTITIONS))
                    )
                ],
            )
        ]
    )
    worker = worker_of(OFFSETS_TOPIC, offsets_partition_for(group, 50), 2)
    with Connection.to(node.bootstrap_of(worker)) as c:
        (t,) = c.request(dsgo.API_KEY, req, version=1)[1].groups[0].topics
    return {p.partition_index: (p.error_code, p.start_offset, p.lag) for p in t.partitions}
