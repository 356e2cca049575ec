"""Kafka Streams 4.4.0 with ``group.protocol=streams`` on a three-node kgc cluster whose group
coordinator is SIGKILLed.

How this works: three ``kgc serve`` nodes on one PostgreSQL (``clusterkit``, 3 s broker
sessions); one ``kgc.streams.WordCount`` instance (tests/jvm) with the streams protocol runs
the word count's four tasks. The streams group lives in the ``__consumer_offsets`` partition
of its id, served by one node: that node is killed. Its partitions move to the other nodes
after the broker session; the new coordinator replays the group's records from PostgreSQL,
so the instance's next heartbeat finds its member with the same epoch and tasks: it keeps
running (no new state, no task given up) and its committed offsets are there. Batch 1 is
committed before the kill and batch 2 produced after the move, so nothing is in flight and
every count is exact. The internal topics the coordinator created before the kill are in the
cluster's catalog, with their partition counts, and none is created again.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.clusterkit import Cluster as KgcCluster
from support.groupkit import wait_until as groupkit_wait
from support.wordcountkit import (
    ALL_TASKS,
    PARTITIONS,
    Cluster,
    StreamsInstance,
    lines_of,
    wait_until,
)

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import streams_group_describe

pytestmark = [pytest.mark.kafka, pytest.mark.integration, pytest.mark.postgres, pytest.mark.slow]

STREAMS_FLAGS = (
    "--group-streams-initial-rebalance-delay-ms",
    "0",
    "--group-streams-heartbeat-interval-ms",
    "1000",
    "--group-streams-min-heartbeat-interval-ms",
    "1000",
)

# A coordinator loading the group or not yet named by FindCoordinator: asked again.
RETRIABLE = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
}


@pytest.fixture
def nodes(tmp_path: Path, pg_url: str) -> Iterator[KgcCluster]:
    c = KgcCluster(tmp_path / "kgc", pg_url, nodes=3, extra=STREAMS_FLAGS)
    try:
        c.start_all()
        yield c
    finally:
        c.close()


def describe(nodes: KgcCluster, app: str) -> Any:
    """StreamsGroupDescribe of ``app`` at its coordinator, once it has loaded the group."""
    found: list[Any] = []

    def loaded() -> bool:
        node = nodes.coordinator_of(app)
        with Connection.to(nodes.nodes[node].bootstrap, timeout=10) as c:
            _, resp = c.request(
                streams_group_describe.API_KEY, streams_group_describe.Request(group_ids=[app])
            )
        (group,) = resp.groups
        if group.error_code in RETRIABLE:
            return False
        assert group.error_code == 0, group
        found.append(group)
        return True

    groupkit_wait(loaded, timeout=60, interval=0.1, what=f"{app} described")
    return found[-1]


def members(group: Any) -> list[tuple[str, int, dict[str, list[int]]]]:
    return [
        (
            m.member_id,
            m.member_epoch,
            {t.subtopology_id: t.partitions for t in m.assignment.active_tasks},
        )
        for m in group.members
    ]


def test_coordinator_node_killed_under_a_streams_app(
    nodes: KgcCluster, tmp_path: Path, instances: list[StreamsInstance]
) -> None:
    suffix = uuid.uuid4().hex[:8]
    app = f"cluster-{suffix}"
    cluster = Cluster(nodes.all_bootstrap, app, f"lines-{suffix}", f"counts-{suffix}")
    cluster.create_topics()
    for topic in (cluster.input, cluster.output):
        nodes.wait_topic_led(topic)
    server = (nodes.all_bootstrap, "streams")
    topics = (cluster.input, cluster.output)
    inst = StreamsInstance("a", server, app, topics, tmp_path / "a")
    instances.append(inst)
    wait_until(
        "the instance runs all tasks",
        lambda: inst.running() and inst.tasks() == ALL_TASKS,
        90,
        instances,
    )
    batch1 = Counter({"alpha": 7, "bravo": 5, "charlie": 3})
    cluster.produce(lines_of(batch1, seed=1))
    wait_until("batch 1 committed", cluster.quiesced, 60, instances)
    assert cluster.counts() == dict(batch1)
    internal = cluster.internal_topics()
    assert sorted(internal) == [f"{app}-counts-changelog", f"{app}-words-repartition"]
    assert all(n == PARTITIONS for n, _ in internal.values())
    before = describe(nodes, app)
    lines = len(inst.lines)

    # The coordinator dies; another node takes the group's offsets partition.
    victim = nodes.coordinator_of(app)
    nodes.kill(victim)
    wait_until(
        "another node coordinating the group",
        lambda: nodes.coordinator_of(app) != victim,
        60,
        instances,
    )
    after = describe(nodes, app)
    assert after.group_epoch == before.group_epoch
    assert members(after) == members(before)

    batch2 = Counter({"alpha": 2, "delta": 4, "echo": 1})
    cluster.produce(lines_of(batch2, seed=2))
    wait_until("batch 2 committed", cluster.quiesced, 90, instances)
    assert cluster.counts() == dict(batch1 + batch2)
    # The instance kept its tasks all along: no state change, no task given up.
    with inst.changed:
        since = inst.lines[lines:]
    assert not [x for x in since if x.startswith(("state ", "tasks "))], since
    assert inst.running() and inst.tasks() == ALL_TASKS
    assert members(describe(nodes, app)) == members(before)
    assert cluster.internal_topics() == internal
