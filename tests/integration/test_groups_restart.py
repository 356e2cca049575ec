"""A coordinator restart does not disturb a group whose members keep heartbeating.

The group metadata is replayed from the offsets log and the members' session timers are
re-armed after loading, so the members' next heartbeats are answered NONE: no rebalance,
no revocation, and the committed offsets are still there.
"""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from support.groupkit import async_wait_until, create_topic
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration


class Counting(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.revoked = 0
        self.assigned = 0

    async def on_partitions_revoked(self, revoked: object) -> None:
        self.revoked += 1

    async def on_partitions_assigned(self, assigned: object) -> None:
        self.assigned += 1


async def test_stable_group_survives_a_coordinator_restart(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "orders", 4)
    listeners = [Counting(), Counting()]
    members = [
        AIOKafkaConsumer(
            bootstrap_servers=kgc.bootstrap,
            group_id="steady",
            partition_assignment_strategy=(RangePartitionAssignor,),
            session_timeout_ms=10000,
            heartbeat_interval_ms=300,
            enable_auto_commit=False,
        )
        for _ in listeners
    ]
    for m, listener in zip(members, listeners, strict=True):
        m.subscribe(["orders"], listener=listener)
        await m.start()
    try:
        await async_wait_until(
            lambda: (
                sum(len(m.assignment()) for m in members) == 4
                and all(m.assignment() for m in members)
            ),
            timeout=40,
            what="the group to settle",
        )
        # Stable: every member's heartbeats are answered NONE (not REBALANCE_IN_PROGRESS).
        await async_wait_until(
            lambda: kgc.requests_total(api="Heartbeat", error="NONE") >= 2 * len(members),
            timeout=30,
            what="heartbeats of the stable group",
        )
        before = [set(m.assignment()) for m in members]
        revoked_before = [li.revoked for li in listeners]
        await members[0].commit({TopicPartition("orders", p.partition): 7 for p in before[0]})
        kgc.stop()
        kgc.start()
        # Five heartbeats per member answered by the restarted node (counted from zero): a
        # rebalance would have been signalled in those answers.
        await async_wait_until(
            lambda: kgc.requests_total(api="Heartbeat", error="NONE") >= 5 * len(members),
            timeout=30,
            what="five heartbeats per member after the restart",
        )
        assert kgc.requests_total(api="Heartbeat", error="REBALANCE_IN_PROGRESS") == 0
        assert [set(m.assignment()) for m in members] == before
        assert [li.revoked for li in listeners] == revoked_before, "a rebalance happened"
        for p in before[0]:
            assert await members[0].committed(TopicPartition("orders", p.partition)) == 7
        assert "preparing rebalance" not in kgc.log().split("kgc listening")[-1]
    finally:
        for m in members:
            await m.stop()
