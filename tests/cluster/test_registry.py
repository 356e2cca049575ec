"""The registry's SQL against a real PostgreSQL: registration, heartbeats, claims, fencing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from storage.postgres import catalog, registry, schema
from storage.postgres.registry import NodeIdInUseError

pytestmark = pytest.mark.postgres

SESSION = 600


@pytest.fixture
async def conn(pg_url: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(pg_url)
    await schema.migrate(c)
    await catalog.ensure_offsets_topic(c, 2)
    yield c
    await c.close()


async def reg(conn: asyncpg.Connection, node_id: int, inc: uuid.UUID | None = None) -> int:
    return await registry.register(
        conn, node_id, inc or uuid.uuid4(), "h", 9000 + node_id, "PLAINTEXT://h:9", None, SESSION
    )


async def age(conn: asyncpg.Connection, node_id: int) -> None:
    """Make a node's last heartbeat an hour old (its session expired)."""
    await conn.execute(
        "UPDATE kgc_node SET last_heartbeat = clock_timestamp() - interval '1 hour' "
        "WHERE node_id = $1",
        node_id,
    )


async def test_register_bumps_the_broker_epoch_and_refuses_a_live_twin(
    conn: asyncpg.Connection,
) -> None:
    me = uuid.uuid4()
    assert await reg(conn, 1, me) == 1
    assert await reg(conn, 1, me) == 2  # the same process registering again
    with pytest.raises(NodeIdInUseError, match=r"node\.id 1 is in use"):
        await reg(conn, 1)
    assert await registry.mark_shutting_down(conn, 1, 2)
    assert await reg(conn, 1) == 3  # a clean stop frees the id at once
    await age(conn, 1)
    assert await reg(conn, 1) == 4  # so does an expired session
    row = await conn.fetchrow("SELECT fenced, shutting_down FROM kgc_node WHERE node_id = 1")
    assert not row["fenced"] and not row["shutting_down"]


async def test_heartbeat_reads_nodes_leases_and_version_or_says_fenced(
    conn: asyncpg.Connection,
) -> None:
    be1 = await reg(conn, 1)
    await reg(conn, 2)
    await age(conn, 2)
    await catalog.create_topic(conn, "t", uuid.uuid4(), 1, {})
    got = await registry.claim(conn, 1, be1, "t", 0, SESSION)
    assert got is not None and got.epoch == 1

    view = await registry.heartbeat(conn, 1, be1, SESSION)
    assert view is not None and view.broker_epoch == be1
    assert [(n.node_id, n.live, n.expired) for n in view.nodes] == [
        (1, True, False),
        (2, False, True),
    ]
    assert {(x.topic, x.partition, x.owner_node, x.epoch) for x in view.leases} == {
        ("__consumer_offsets", 0, None, 0),
        ("__consumer_offsets", 1, None, 0),
        ("t", 0, 1, 1),
    }
    assert view.change_version == 1
    assert await registry.heartbeat(conn, 1, be1 + 1, SESSION) is None  # not my epoch
    assert await registry.fence_expired(conn, SESSION) == [(2, 1)]
    assert await registry.fence_expired(conn, SESSION) == []
    assert await registry.heartbeat(conn, 2, 1, SESSION) is None  # fenced: register again


async def test_claim_only_from_a_gone_owner_and_release_only_my_epoch(
    conn: asyncpg.Connection,
) -> None:
    inc = uuid.uuid4()
    a, b = await reg(conn, 1, inc), await reg(conn, 2)
    lease = await registry.claim(conn, 1, a, "__consumer_offsets", 0, SESSION)
    assert lease is not None and lease.epoch == 1
    assert await registry.claim(conn, 2, b, "__consumer_offsets", 0, SESSION) is None  # live
    assert not await registry.release(conn, 1, a, "__consumer_offsets", 0, 7)  # wrong epoch
    assert not await registry.release(conn, 2, b, "__consumer_offsets", 0, 1)  # not the owner
    assert await registry.release(conn, 1, a, "__consumer_offsets", 0, 1)
    again = await registry.claim(conn, 2, b, "__consumer_offsets", 0, SESSION)
    assert again is not None and again.epoch == 2
    # A stopping owner's partitions may be claimed at once; a stopping node claims nothing.
    assert await registry.mark_shutting_down(conn, 2, b)
    assert await registry.claim(conn, 2, b, "__consumer_offsets", 1, SESSION) is None
    took = await registry.claim(conn, 1, a, "__consumer_offsets", 0, SESSION)
    assert took is not None and took.epoch == 3
    # An older registration of the claimer is taken over too (a restarted node).
    a2 = await reg(conn, 1, inc)
    mine = await registry.claim(conn, 1, a2, "__consumer_offsets", 0, SESSION)
    assert mine is not None and mine.epoch == 4


async def test_concurrent_claims_one_winner(pg_url: str, conn: asyncpg.Connection) -> None:
    others = [await asyncpg.connect(pg_url) for _ in range(4)]
    try:
        epochs = [await reg(conn, n) for n in range(1, 5)]
        got = await asyncio.gather(
            *(
                registry.claim_many(
                    c, n, e, [("__consumer_offsets", 0), ("__consumer_offsets", 1)], SESSION
                )
                for c, n, e in zip(others, range(1, 5), epochs, strict=True)
            )
        )
        winners = [lease for leases in got for lease in leases]
        assert sorted((x.partition, x.epoch) for x in winners) == [(0, 1), (1, 1)]
    finally:
        for c in others:
            await c.close()


async def test_a_claim_waits_for_a_writer_and_sees_its_round(
    pg_url: str, conn: asyncpg.Connection
) -> None:
    a, b = await reg(conn, 1), await reg(conn, 2)
    assert await registry.claim(conn, 1, a, "__consumer_offsets", 0, SESSION) is not None
    await age(conn, 1)
    writer = await asyncpg.connect(pg_url)
    claimer = await asyncpg.connect(pg_url)
    try:
        tx = writer.transaction()
        await tx.start()
        # The old owner's round, fenced on its lease, is in flight (row locked).
        assert (
            await writer.execute(
                "UPDATE kgc_partition SET next_offset = 10 WHERE topic = '__consumer_offsets' "
                "AND partition = 0 AND owner_node = 1 AND owner_broker_epoch = $1 AND epoch = 1",
                a,
            )
            == "UPDATE 1"
        )
        claim = asyncio.create_task(
            registry.claim(claimer, 2, b, "__consumer_offsets", 0, SESSION, lock_timeout_ms=5000)
        )
        done, _ = await asyncio.wait({claim}, timeout=0.3)
        assert not done  # waiting on the writer's row lock
        await tx.commit()
        lease = await claim
        assert lease is not None and lease.epoch == 2 and lease.next_offset == 10
    finally:
        await writer.close()
        await claimer.close()


async def test_a_claim_gives_up_after_its_lock_timeout(
    pg_url: str, conn: asyncpg.Connection
) -> None:
    a, b = await reg(conn, 1), await reg(conn, 2)
    assert await registry.claim(conn, 1, a, "__consumer_offsets", 0, SESSION) is not None
    await age(conn, 1)
    writer = await asyncpg.connect(pg_url)
    try:
        async with writer.transaction():
            await writer.execute(
                "SELECT 1 FROM kgc_partition WHERE topic = '__consumer_offsets' "
                "AND partition = 0 FOR UPDATE"
            )
            with pytest.raises(asyncpg.LockNotAvailableError):
                await registry.claim(conn, 2, b, "__consumer_offsets", 0, SESSION, 200)
    finally:
        await writer.close()
    row = await conn.fetchrow(
        "SELECT owner_node, epoch FROM kgc_partition WHERE topic = '__consumer_offsets' "
        "AND partition = 0"
    )
    assert (row["owner_node"], row["epoch"]) == (1, 1)


async def test_offsets_topic_is_created_once_and_checked(conn: asyncpg.Connection) -> None:
    await catalog.ensure_offsets_topic(conn, 2)  # again: nothing changes
    topics = await catalog.list_topics(conn)
    assert [(t.name, t.partitions, t.internal) for t in topics] == [("__consumer_offsets", 2, True)]
    with pytest.raises(catalog.OffsetsTopicMismatchError):
        await catalog.ensure_offsets_topic(conn, 3)
    assert await catalog.change_version(conn) == 0


async def test_create_partitions_adds_unowned_leases(conn: asyncpg.Connection) -> None:
    await catalog.create_topic(conn, "t", uuid.uuid4(), 2, {})
    await catalog.create_partitions(conn, "t", 5)
    rows = await conn.fetch(
        "SELECT partition, owner_node, epoch FROM kgc_partition WHERE topic='t'"
    )
    assert sorted((r["partition"], r["owner_node"], r["epoch"]) for r in rows) == [
        (p, None, 0) for p in range(5)
    ]
    with pytest.raises(ValueError):
        await catalog.create_partitions(conn, "t", 5)
    with pytest.raises(catalog.UnknownTopicError):
        await catalog.create_partitions(conn, "nope", 5)
    assert await catalog.change_version(conn) == 2


async def test_concurrent_catalog_changes_get_distinct_versions(
    pg_url: str, conn: asyncpg.Connection
) -> None:
    conns = [await asyncpg.connect(pg_url) for _ in range(4)]
    try:
        await asyncio.gather(
            *(catalog.create_topic(c, f"t{i}", uuid.uuid4(), 1, {}) for i, c in enumerate(conns))
        )
    finally:
        for c in conns:
            await c.close()
    versions = await conn.fetch("SELECT version FROM kgc_cluster_change ORDER BY version")
    assert [r["version"] for r in versions] == [1, 2, 3, 4]
