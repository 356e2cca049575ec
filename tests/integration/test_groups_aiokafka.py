"""aiokafka consumer groups against a real kgc: assignment, takeover, eviction."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from support.groupkit import async_wait_until, create_topic
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration
TOPIC_PARTITIONS = 6


def consumer(kgc: KgcProcess, group: str, assignor: type, **kw: object) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        "orders",
        bootstrap_servers=kgc.bootstrap,
        group_id=group,
        partition_assignment_strategy=(assignor,),
        session_timeout_ms=kw.pop("session_timeout_ms", 10000),
        heartbeat_interval_ms=kw.pop("heartbeat_interval_ms", 500),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **kw,
    )


def partitions_of(c: AIOKafkaConsumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def settled(consumers: list[AIOKafkaConsumer]) -> bool:
    sets = [partitions_of(c) for c in consumers]
    union = set().union(*sets)
    return (
        union == set(range(TOPIC_PARTITIONS))
        and sum(len(s) for s in sets) == TOPIC_PARTITIONS
        and all(sets)
    )


@pytest.mark.parametrize(
    "assignor", [RangePartitionAssignor, RoundRobinPartitionAssignor, StickyPartitionAssignor]
)
async def test_three_consumers_share_partitions_then_two_take_over(
    kgc: KgcProcess, assignor: type
) -> None:
    create_topic(kgc.bootstrap, "orders", TOPIC_PARTITIONS)
    group = f"g-{assignor.name}"
    members = [consumer(kgc, group, assignor) for _ in range(3)]
    for m in members:
        await m.start()
    try:
        await async_wait_until(
            lambda: settled(members),
            timeout=40,
            what="3 members with disjoint, covering assignments",
        )
        sets = [partitions_of(m) for m in members]
        assert all(len(s) == 2 for s in sets), sets  # 6 partitions over 3 members, every assignor
        leaving = members.pop()
        await leaving.stop()  # sends LeaveGroup: the others rebalance without waiting for a timeout
        started = time.monotonic()
        await async_wait_until(lambda: settled(members), timeout=30, what="2 members taking over")
        assert time.monotonic() - started < 10
        assert sorted(len(partitions_of(m)) for m in members) == [3, 3]
    finally:
        for m in members:
            await m.stop()


KILLABLE = textwrap.dedent(
    """
    import asyncio, sys
    from aiokafka import AIOKafkaConsumer
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    async def main():
        c = AIOKafkaConsumer("orders", bootstrap_servers=sys.argv[1], group_id=sys.argv[2],
                             partition_assignment_strategy=(RangePartitionAssignor,),
                             session_timeout_ms=6000, heartbeat_interval_ms=500, enable_auto_commit=False)
        await c.start()
        while True:
            if c.assignment():
                print("ASSIGNED", sorted(tp.partition for tp in c.assignment()), flush=True)
            await asyncio.sleep(0.2)
    asyncio.run(main())
    """
)


async def test_sigkilled_member_is_evicted_after_its_session_timeout(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "orders", TOPIC_PARTITIONS)
    survivor = consumer(kgc, "g-kill", RangePartitionAssignor)
    await survivor.start()
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLABLE, kgc.bootstrap, "g-kill"], stdout=subprocess.PIPE, text=True
    )
    try:
        await async_wait_until(
            lambda: len(partitions_of(survivor)) == 3, timeout=40, what="the group of two to settle"
        )
        proc.kill()
        proc.wait()
        killed_at = time.monotonic()
        await async_wait_until(
            lambda: len(partitions_of(survivor)) == 6,
            timeout=30,
            what="the survivor to take every partition",
        )
        waited = time.monotonic() - killed_at
        # Evicted by the session timeout (6 s), not before, and promptly after.
        assert 4.0 < waited < 20.0, waited
    finally:
        if proc.poll() is None:
            proc.kill()
        await survivor.stop()
