"""A KIP-848 consumer group on a three-node cluster survives the loss of its coordinator.

Two librdkafka members (group.protocol=consumer) share a topic; the node coordinating the
group is SIGKILLed; another node takes the group's offsets partition from PostgreSQL and
must continue the group where it was: the same member ids at the same epochs, each still
owning its partitions (a restarted coordinator does not reassign), and nothing owned twice
at any time. About 20 s.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.clusterkit import Cluster
from support.consumer848kit import Member, OwnershipLog, described_assignment, settled
from support.groupkit import create_topic, wait_until

from coordinator.tools.client import Connection
from protocol.messages import consumer_group_describe as cgd

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

FAST = (
    "--group-consumer-min-heartbeat-interval-ms",
    "100",
    "--group-consumer-heartbeat-interval-ms",
    "250",
)
TOPIC = "kip848"
PARTITIONS = 4


def describe(cluster: Cluster, group: str) -> cgd.DescribedGroup:
    node = cluster.coordinator_of(group)
    with Connection.to(cluster.nodes[node].bootstrap) as c:
        resp = c.call(cgd.API_KEY, 1, cgd.Request(group_ids=[group]))
    g: cgd.DescribedGroup = resp.groups[0]
    return g


# Slow (8 s): test_cluster_failover.py's SIGKILL of the coordinator moves a group to another
# node; test_consumer_groups_confluent.py's sigkill restart keeps a KIP-848 group.
@pytest.mark.slow
def test_consumer_group_continues_on_another_node_after_a_sigkill(
    tmp_path: Path, pg_url: str
) -> None:
    cluster = Cluster(tmp_path, pg_url, nodes=3, extra=FAST)
    try:
        cluster.start_all()
        create_topic(cluster.nodes[min(cluster.live())].bootstrap, TOPIC, PARTITIONS)
        cluster.wait_topic_led(TOPIC)
        group = "g848-cluster"
        log = OwnershipLog()
        members = [
            Member(
                cluster.all_bootstrap, group, [TOPIC], log, f"m{i}", **{"socket.timeout.ms": 4000}
            )
            for i in range(2)
        ]
        want = {(TOPIC, p) for p in range(PARTITIONS)}
        try:
            wait_until(lambda: settled(log.snapshot(members), want), timeout=60, what="a 2/2 split")
            wait_until(
                lambda: describe(cluster, group).group_state == "Stable",
                timeout=30,
                what="the coordinator seeing the group Stable",
            )
            before = describe(cluster, group)
            layout = described_assignment(before)
            epochs = {m.member_id: m.member_epoch for m in before.members}
            victim = cluster.coordinator_of(group)
            cluster.kill(victim)
            killed = time.monotonic()

            def continued() -> bool:
                try:
                    g = describe(cluster, group)
                except Exception:
                    return False
                return (
                    g.error_code == 0
                    and {m.member_id: m.member_epoch for m in g.members} == epochs
                    and described_assignment(g) == layout
                )

            wait_until(continued, timeout=60, what="the group continued on another node")
            took = time.monotonic() - killed
            assert cluster.coordinator_of(group) != victim
            # The members keep heartbeating to the new coordinator and own what they owned.
            wait_until(lambda: settled(log.snapshot(members), want), timeout=30, what="owned")
            assert all(not m.fatal_errors() for m in members)
            print(f"\nconsumer group continued {took * 1000:.0f} ms after node {victim} died")
        finally:
            for m in members:
                m.close()
        assert not log.double_ownership()
    finally:
        cluster.close()
