"""Producer ids in cluster mode: blocks from the database's one counter, never shared."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from coordinator.dataplane.producers import ClusterProducerIds
from storage.postgres.catalog import take_producer_ids
from storage.postgres.schema import migrate

pytestmark = pytest.mark.postgres


async def test_two_nodes_never_hand_out_the_same_id(pg_url: str) -> None:
    conn = await asyncpg.connect(pg_url)
    await migrate(conn)
    lock = asyncio.Lock()

    async def take(block: int, floor: int) -> int:
        async with lock:  # one test connection shared by both "nodes"
            return await take_producer_ids(conn, block, floor)

    a, b = ClusterProducerIds(take, block=10), ClusterProducerIds(take, block=10)
    ids = [await (a if i % 3 else b).allocate() for i in range(100)]
    assert len(set(ids)) == 100
    # An id seen in a log (a producer from before) is never handed out again.
    b.ensure_above(5000)
    assert await b.allocate() > 5000
    assert await a.allocate() not in ids
    await conn.close()
