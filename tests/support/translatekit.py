"""What the ``kgc offsets translate`` tests share: the same records written to two clusters,
each copy starting at its own offset, and a group's offsets committed on one of them.

Records carry explicit timestamps, keys, values and headers, as a mirror copies them; the
target gets records of its own first (other contents, earlier times) so every copy sits at
a later offset there, and the source drops its first records (DeleteRecords), so its log
starts later too.
"""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.records_to_delete import RecordsToDelete

from support.clikit import Run, call_cli

PARTITIONS = 3
SHARED = 20  # records both clusters hold, per partition
OWN = 7  # records only the second cluster holds, before the shared ones
DELETED = 5  # records the first cluster drops from the start of each partition
BASE_MS = int(time.time() * 1000) - 3_600_000  # an hour ago: both copies keep these times


def shared_record(p: int, i: int) -> tuple[bytes, bytes, int, list[tuple[str, bytes]]]:
    """Record ``i`` of partition ``p``; every third value repeats (same value, other key),
    so a match needs the key and the neighbours, not the value alone."""
    value = b"tick" if i % 3 == 0 else f"v{p}-{i}".encode()
    return f"k{p}-{i}".encode(), value, BASE_MS + 1000 * i, [("src", b"orders")]


async def _produce(bootstrap: str, topic: str, own: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    try:
        for p in range(PARTITIONS):
            for i in range(own):  # the cluster's own, older records
                await producer.send_and_wait(
                    topic, b"own", key=b"own", partition=p, timestamp_ms=BASE_MS - 60_000 + i
                )
            for i in range(SHARED):
                key, value, ts, headers = shared_record(p, i)
                await producer.send_and_wait(
                    topic, value, key=key, partition=p, timestamp_ms=ts, headers=headers
                )
    finally:
        await producer.stop()


async def _delete_first(bootstrap: str, topic: str, count: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        low = await admin.delete_records(
            {TopicPartition(topic, p): RecordsToDelete(count) for p in range(PARTITIONS)}
        )
        assert all(v == count for v in low.values()), low
    finally:
        await admin.close()


def write_copies(first: str, second: str, topic: str) -> None:
    """``first`` holds shared records 5..19 at offsets 5..19, ``second`` records 0..19 at
    offsets 7..26 after 7 of its own."""
    asyncio.run(_produce(first, topic, 0))
    asyncio.run(_delete_first(first, topic, DELETED))
    asyncio.run(_produce(second, topic, OWN))


def cli(bootstrap: str, *args: str) -> Run:
    """``kgc *args`` against ``bootstrap``, in process (``support.clikit.call_cli``)."""
    return call_cli(*args, "--bootstrap-server", bootstrap)


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit ``offsets`` (partition -> offset) for ``group`` as an admin, via kgc's tool."""
    from coordinator.tools.admin import Admin

    with Admin(bootstrap) as admin:
        admin.commit_offsets(group, {(topic, p): off for p, off in offsets.items()})


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    from coordinator.tools.admin import Admin

    with Admin(bootstrap) as admin:
        return {tp: off for tp, (off, _m) in admin.committed_offsets(group).items()}


def wait_group_served(bootstrap: str, group: str, timeout: float = 60.0) -> None:
    """Wait until ``group``'s coordinator serves it: Kafka creates and loads its offsets
    topic on the first FindCoordinator and answers NOT_COORDINATOR meanwhile."""
    from coordinator.tools.admin import Admin, AdminError

    deadline = time.monotonic() + timeout
    while True:
        try:
            with Admin(bootstrap) as admin:
                admin.describe_group(group)
            return
        except AdminError as exc:
            if "COORDINATOR" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(0.1)
