"""The PostgreSQL credential store against a real server: shared by nodes, versioned."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from coordinator.security import CredentialStore
from coordinator.security.credentials import PgCredentialStore, ScramChange, scram_credential
from storage.postgres.schema import migrate

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pool(pg_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await asyncpg.create_pool(pg_url, min_size=1, max_size=4)
    async with p.acquire() as conn:
        await migrate(conn)
    yield p
    await p.close()


async def test_two_nodes_share_credentials_through_the_change_version(
    pool: asyncpg.Pool,
) -> None:
    a, b = PgCredentialStore(pool), PgCredentialStore(pool)
    _: CredentialStore = a
    await a.refresh()
    await b.refresh()
    assert a.users() == {} and b.users() == {}
    alice = scram_credential("SCRAM-SHA-512", "alice-secret")
    assert await a.alter([ScramChange("alice", alice.mechanism, alice)]) == set()
    assert a.get("alice", "SCRAM-SHA-512") == alice  # the writer knows at once
    assert b.get("alice", "SCRAM-SHA-512") is None  # the other node: at its next refresh
    await b.refresh()
    assert b.get("alice", "SCRAM-SHA-512") == alice
    async with pool.acquire() as conn:
        kinds = [r["kind"] for r in await conn.fetch("SELECT kind FROM kgc_cluster_change")]
        stored = await conn.fetchrow("SELECT * FROM kgc_scram_credential")
    assert kinds == ["scram"]
    assert bytes(stored["stored_key"]) == alice.stored_key
    assert "alice-secret" not in repr(dict(stored))


async def test_refresh_skips_reading_rows_when_the_version_did_not_move(
    pool: asyncpg.Pool,
) -> None:
    a = PgCredentialStore(pool)
    alice = scram_credential("SCRAM-SHA-512", "x")
    await a.alter([ScramChange("alice", alice.mechanism, alice)])
    version = a.version
    assert version > 0
    # A row changed behind the store's back (no version bump) is not re-read...
    async with pool.acquire() as conn:
        await conn.execute("UPDATE kgc_scram_credential SET iterations = 9999")
    await a.refresh()
    assert a.get("alice", "SCRAM-SHA-512") == alice
    # ... a catalog change of another kind does not re-read it either ...
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO kgc_cluster_change (version, kind, key) VALUES ($1, 'acl', 'x')",
            version + 1,
        )
    await a.refresh()
    assert a.version == version
    # ... a 'scram' change does.
    bob = scram_credential("SCRAM-SHA-256", "y")
    await a.alter([ScramChange("bob", bob.mechanism, bob)])
    assert a.version > version
    got = a.get("alice", "SCRAM-SHA-512")
    assert got is not None and got.iterations == 9999


async def test_upsert_replaces_delete_reports_missing_and_bumps_only_on_change(
    pool: asyncpg.Pool,
) -> None:
    a = PgCredentialStore(pool)
    old = scram_credential("SCRAM-SHA-512", "old")
    new = scram_credential("SCRAM-SHA-512", "new", iterations=8192)
    await a.alter([ScramChange("alice", old.mechanism, old)])
    await a.alter([ScramChange("alice", new.mechanism, new)])
    assert a.users() == {"alice": [new]}
    missing = await a.alter(
        [ScramChange("alice", "SCRAM-SHA-256"), ScramChange("nobody", "SCRAM-SHA-512")]
    )
    assert missing == {0, 1}
    async with pool.acquire() as conn:
        versions = await conn.fetchval("SELECT count(*) FROM kgc_cluster_change")
    assert versions == 2  # the no-op deletion bumped nothing
    assert await a.alter([ScramChange("alice", "SCRAM-SHA-512")]) == set()
    assert a.users() == {}


async def test_concurrent_changes_from_two_nodes_all_land(pool: asyncpg.Pool) -> None:
    nodes = [PgCredentialStore(pool) for _ in range(2)]
    creds = {f"u{i}": scram_credential("SCRAM-SHA-256", str(i)) for i in range(8)}
    await asyncio.gather(
        *(
            nodes[i % 2].alter([ScramChange(u, c.mechanism, c)])
            for i, (u, c) in enumerate(creds.items())
        )
    )
    for node in nodes:
        await node.refresh()
        assert {u: cs[0] for u, cs in node.users().items()} == creds
    async with pool.acquire() as conn:
        versions = [r[0] for r in await conn.fetch("SELECT version FROM kgc_cluster_change")]
    assert sorted(versions) == list(range(1, 9))  # dense: every change has its own
