"""The three-node cluster's transaction helpers (test_cluster_transactions*.py).

How this works: ``txn_coordinator`` asks the live nodes FindCoordinator (key type 1) until
one names a live node; ``pick_txn_id`` draws transactional ids until one is coordinated away
from some leader of the topic; ``spread_topic`` creates a ``PARTITIONS``-partition topic and
waits until every node agrees on its leaders; ``read_committed`` reads every partition with
a read_committed confluent-kafka consumer until the values it must see came (or fails).
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from coordinator.tools.client import Connection
from protocol.messages import find_coordinator
from support.clusterkit import Cluster
from support.groupkit import create_topic, wait_until

PARTITIONS = 6
TXN_PARTITIONS = 6


def txn_coordinator(cluster: Cluster, txn_id: str, timeout: float = 30.0) -> int:
    """The live node FindCoordinator(key type 1) names for ``txn_id``."""
    found: list[int] = []

    def ready() -> bool:
        for n in cluster.live():
            try:
                with Connection.to(cluster.nodes[n].bootstrap, timeout=2) as c:
                    _, resp = c.request(
                        find_coordinator.API_KEY,
                        find_coordinator.Request(key_type=1, coordinator_keys=[txn_id]),
                        version=4,
                    )
            except OSError:
                continue
            (coord,) = resp.coordinators
            if coord.error_code == 0 and coord.node_id in cluster.live():
                found.append(coord.node_id)
                return True
        return False

    wait_until(ready, timeout=timeout, interval=0.1, what=f"the coordinator of {txn_id}")
    return found[-1]


def pick_txn_id(cluster: Cluster, leaders: dict[int, int]) -> tuple[str, int, int]:
    """A transactional id whose coordinator does not lead every partition of the topic:
    (the id, its coordinator, a partition leader on another node)."""
    for i in range(200):
        txn_id = f"txn-{i}-{uuid.uuid4().hex[:6]}"
        coordinator = txn_coordinator(cluster, txn_id)
        others = [n for n in leaders.values() if n != coordinator]
        if others:
            return txn_id, coordinator, others[0]
    raise AssertionError(f"no transactional id coordinated away from the leaders {leaders}")


def read_committed(
    cluster: Cluster, topic: str, until: set[str], timeout: float = 60.0
) -> set[str]:
    """Every value a read_committed consumer sees in ``topic`` once all of ``until`` came."""
    c = Consumer(
        {
            "bootstrap.servers": cluster.all_bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "socket.timeout.ms": 4000,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    try:
        while not until <= seen and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                if m.error() is None and m.value() is not None:
                    seen.add(m.value().decode())
    finally:
        c.close()
    assert until <= seen, f"missing after {timeout} s: {sorted(until - seen)[:10]}"
    return seen


def spread_topic(cluster: Cluster) -> tuple[str, dict[int, int]]:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.nodes[min(cluster.live())].bootstrap, topic, PARTITIONS)
    return topic, cluster.wait_topic_led(topic)
