"""The PostgreSQL ACL store: kgc_acl shared by nodes; a change through one store reaches
another within a second (NOTIFY wakes it; the version poll catches what NOTIFY misses)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from coordinator.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from coordinator.security.acl_store import PgAclStore
from storage.postgres.schema import migrate

pytestmark = pytest.mark.postgres

READ_ORDERS = AclBinding(
    ResourceType.TOPIC,
    "orders",
    PatternType.LITERAL,
    "User:alice",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)
GROUP_PREFIX = AclBinding(
    ResourceType.GROUP,
    "team-",
    PatternType.PREFIXED,
    "User:alice",
    "10.0.0.1",
    AclOperation.ALL,
    AclPermissionType.ALLOW,
)


async def test_pg_store_shares_acls_between_nodes(pg_url: str) -> None:
    pools = [await asyncpg.create_pool(pg_url, min_size=1, max_size=2) for _ in range(2)]
    async with pools[0].acquire() as conn:
        await migrate(conn)
    one, two = PgAclStore(pools[0]), PgAclStore(pools[1], poll_interval_ms=60_000)
    try:
        await one.start(pg_url)
        await two.start(pg_url)  # polls once a minute: only the NOTIFY can wake it in time
        changed = asyncio.Event()
        two.on_change.append(lambda _b: changed.set())
        await one.create([READ_ORDERS, GROUP_PREFIX])
        assert one.bindings == {READ_ORDERS, GROUP_PREFIX}
        await asyncio.wait_for(changed.wait(), 1.0)
        assert two.bindings == {READ_ORDERS, GROUP_PREFIX}

        async with pools[0].acquire() as conn:
            kinds = await conn.fetch("SELECT kind FROM kgc_cluster_change ORDER BY version")
            rows = await conn.fetch("SELECT resource_type, pattern_type, operation FROM kgc_acl")
        assert [r["kind"] for r in kinds] == ["acl"]
        # Kafka's codes in the table.
        assert {tuple(r) for r in rows} == {(2, 3, 3), (3, 4, 2)}

        # A change that changes nothing adds no version row (deleting: the contract suite,
        # tests/storage/test_metadata_contract.py).
        assert await two.delete([AclBindingFilter(principal="User:nobody")]) == [[]]
        await one.create([READ_ORDERS])  # exists: nothing new
        async with pools[0].acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM kgc_cluster_change") == 1
    finally:
        await one.close()
        await two.close()
        for pool in pools:
            await pool.close()


async def test_pg_store_poll_catches_a_change_without_notify(pg_url: str) -> None:
    pool = await asyncpg.create_pool(pg_url, min_size=1, max_size=2)
    async with pool.acquire() as conn:
        await migrate(conn)
    store = PgAclStore(pool, poll_interval_ms=100)
    try:
        await store.start()  # no LISTEN
        changed = asyncio.Event()
        store.on_change.append(lambda _b: changed.set())
        # Another node's change, straight in the database (no NOTIFY).
        async with pool.acquire() as conn:
            await conn.execute(
                "INSERT INTO kgc_acl VALUES (3, 'g', 3, 'User:alice', '*', 3, 3);"
                "INSERT INTO kgc_cluster_change (version, kind, key) VALUES (1, 'acl', 'x')"
            )
        await asyncio.wait_for(changed.wait(), 1.0)
        assert store.bindings == {
            AclBinding(
                ResourceType.GROUP,
                "g",
                PatternType.LITERAL,
                "User:alice",
                "*",
                AclOperation.READ,
                AclPermissionType.ALLOW,
            )
        }
    finally:
        await store.close()
        await pool.close()
