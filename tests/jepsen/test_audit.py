"""The fencing audit against planted rows of a real PostgreSQL's ``kgc_record_log``."""

from __future__ import annotations

import uuid

import asyncpg
import pytest
from support.jepsen.audit import audit

from storage.postgres import schema

pytestmark = pytest.mark.postgres


async def _plant(url: str, rows: list[tuple[int, int, int]], current: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        await schema.migrate(conn)
        await conn.execute(
            "INSERT INTO kgc_partition (topic, partition, topic_id, epoch) VALUES ('t', 0, $1, $2)",
            uuid.uuid4(),
            current,
        )
        for base, last, epoch in rows:
            await conn.execute(
                "INSERT INTO kgc_record_log (topic, partition, base_offset, last_offset, epoch,"
                " record_count, max_timestamp, batch) VALUES ('t', 0, $1, $2, $3, 1, 0, '')",
                base,
                last,
                epoch,
            )
    finally:
        await conn.close()


async def test_a_fenced_log_passes(pg_url: str) -> None:
    await _plant(pg_url, [(0, 4, 1), (5, 5, 1), (9, 12, 2), (13, 13, 4)], current=4)
    assert await audit(pg_url) == ([], 4)


@pytest.mark.parametrize(
    ("rows", "kind"),
    [
        ([(0, 4, 2), (5, 9, 1)], "epoch-back"),  # a deposed writer appended after the next
        ([(0, 4, 1), (3, 6, 2)], "overlap"),  # two writers gave out offsets 3 and 4
        ([(0, 4, 5)], "epoch-ahead"),
    ],
)
async def test_planted_fencing_failures_are_caught(
    pg_url: str, rows: list[tuple[int, int, int]], kind: str
) -> None:
    await _plant(pg_url, rows, current=2)
    found, _ = await audit(pg_url)
    assert [a.split()[0] for a in found] == [kind]
