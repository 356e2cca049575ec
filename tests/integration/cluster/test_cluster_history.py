"""A group's history in a three-node cluster: kept in PostgreSQL's ``kgc_group_history``,
so it survives the SIGKILL of the node that wrote it and any node answers for it.

Commits (admin commits, each changing every partition's offset) go to the group's
coordinator; each acknowledged one is remembered. The coordinator is SIGKILLed; once the
group's offsets partition has moved (3 s session timeout), ``kgc offsets history`` against
another node shows every acknowledged change, in order, and a DescribeGroupHistory sent to
a node that does not coordinate the group answers from the table too (~45 s on two
cores). A one-node cluster with a 2 s retention deletes the old rows (~20 s); one with a
300 ms merge lag merges the rows of its commits into one, and answers the same (~15 s).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest
from support.clikit import run_cli
from support.clusterkit import Cluster
from support.groupkit import create_topic, wait_until

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import describe_group_history, offset_commit
from protocol.messages.offset_commit import (
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)

pytestmark = [pytest.mark.postgres, pytest.mark.integration, pytest.mark.slow]

TOPIC = "orders"
PARTITIONS = 3
GROUP = "billing"
COMMITS = 5


def commit(conn: Connection, offsets: dict[int, int]) -> None:
    req = offset_commit.Request(
        group_id=GROUP,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            OffsetCommitRequestTopic(
                name=TOPIC,
                partitions=[
                    OffsetCommitRequestPartition(partition_index=p, committed_offset=o)
                    for p, o in offsets.items()
                ],
            )
        ],
    )
    _, resp = conn.request(offset_commit.API_KEY, req, version=8)
    errors = {p.error_code for t in resp.topics for p in t.partitions}
    assert errors == {ErrorCode.NO_ERROR}, resp


def test_history_survives_the_sigkill_of_its_writer_and_any_node_reads_it(
    cluster: Cluster,
) -> None:
    create_topic(cluster.nodes[1].bootstrap, TOPIC, PARTITIONS)
    cluster.wait_topic_led(TOPIC)
    victim = cluster.coordinator_of(GROUP)
    with Connection.to(cluster.nodes[victim].bootstrap, timeout=10) as conn:
        conn.negotiate()  # ApiVersions: announced in cluster mode
        assert describe_group_history.API_KEY in conn.versions
        acked = []
        for i in range(1, COMMITS + 1):
            offsets = {p: 10 * i + p for p in range(PARTITIONS)}
            commit(conn, offsets)
            acked += [(p, o) for p, o in offsets.items()]
    cluster.kill(victim)
    new = cluster.coordinator_of(GROUP, timeout=60)
    assert new != victim
    other = next(n for n in cluster.live() if n != new)

    run = run_cli(
        "offsets", "history", GROUP, "--output", "json",
        "--bootstrap-server", cluster.nodes[other].bootstrap,
    )  # fmt: skip
    assert run.code == 0, run
    changes = run.json()
    assert [(c["partition"], c["offset"]) for c in changes] == acked
    assert all(c["admin"] and c["topic"] == TOPIC for c in changes)
    assert [c["previous_offset"] for c in changes[PARTITIONS:]] == [
        o for _p, o in acked[:-PARTITIONS]
    ]

    # A node that does not coordinate the group answers from the table as well.
    with Connection.to(cluster.nodes[other].bootstrap, timeout=10) as conn:
        _, resp = conn.request(
            describe_group_history.API_KEY,
            describe_group_history.Request(group_id=GROUP),
            version=0,
        )
    assert resp.error_code == ErrorCode.NO_ERROR, resp
    got = [(c.partition_index, c.committed_offset) for c in resp.offset_changes]
    assert got == acked
    assert resp.history_start_ms > 0 and resp.partitions == []


def test_retention_deletes_the_rows_of_old_history(tmp_path: Path, pg_url: str) -> None:
    """A node deletes its offsets partitions' rows older than offsets.history.retention.ms
    (2 s here, a pass every second); newer rows stay and are what DescribeGroupHistory
    answers."""
    with Cluster(tmp_path, pg_url, nodes=1, extra=("--offsets-history-retention-ms", "2000")) as c:
        c.start_all()
        (node,) = c.nodes.values()
        create_topic(node.bootstrap, TOPIC, PARTITIONS)
        c.wait_topic_led(TOPIC)
        with Connection.to(node.bootstrap, timeout=10) as conn:
            commit(conn, dict.fromkeys(range(PARTITIONS), 1))
            assert rows(pg_url) == 1
            wait_until(lambda: rows(pg_url) == 0, timeout=30, what="the old row deleted")
            commit(conn, dict.fromkeys(range(PARTITIONS), 2))
            _, resp = conn.request(
                describe_group_history.API_KEY,
                describe_group_history.Request(group_id=GROUP),
                version=0,
            )
        assert [c.committed_offset for c in resp.offset_changes] == [2] * PARTITIONS
        assert rows(pg_url) == 1


def test_the_node_merges_its_rows_and_answers_the_same(tmp_path: Path, pg_url: str) -> None:
    """The node holding the group's offsets partition merges its round rows older than
    offsets.history.merge.lag.ms (300 ms here) into one row; DescribeGroupHistory gives
    every change, in order, before and after."""
    extra = ("--offsets-history-merge-lag-ms", "300")
    with Cluster(tmp_path, pg_url, nodes=1, extra=extra) as c:
        c.start_all()
        (node,) = c.nodes.values()
        create_topic(node.bootstrap, TOPIC, PARTITIONS)
        c.wait_topic_led(TOPIC)
        with Connection.to(node.bootstrap, timeout=10) as conn:
            acked = []
            for i in range(1, COMMITS + 1):
                offsets = {p: 10 * i + p for p in range(PARTITIONS)}
                commit(conn, offsets)
                acked += list(offsets.items())
            # Five rows, one a commit; a run of one is not merged (the last, if the five
            # spanned more than the lag on a slow machine).
            wait_until(
                lambda: (
                    rows(pg_url, "first_written_ms IS NULL") <= 1
                    and rows(pg_url, "first_written_ms IS NOT NULL") >= 1
                ),
                timeout=30,
                what="the round rows merged",
            )
            assert rows(pg_url) <= 3
            _, resp = conn.request(
                describe_group_history.API_KEY,
                describe_group_history.Request(group_id=GROUP),
                version=0,
            )
        assert resp.error_code == ErrorCode.NO_ERROR, resp
        assert [(c.partition_index, c.committed_offset) for c in resp.offset_changes] == acked


def rows(pg_url: str, where: str = "true") -> int:
    async def count() -> int:
        conn = await asyncpg.connect(pg_url)
        try:
            sql = f"SELECT count(*) FROM kgc_group_history WHERE {where}"
            return int(await conn.fetchval(sql))
        finally:
            await conn.close()

    return asyncio.run(count())
