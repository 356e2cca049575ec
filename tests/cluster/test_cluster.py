"""Cluster membership and partition leases: several ``Cluster`` objects on one PostgreSQL.

Heartbeat 100 ms, session 600 ms; the callbacks record every acquisition and release
(``nodekit``), and the ledger fails a test if a partition was ever acquired at an epoch
not above every earlier one or if one node ran two transitions of a partition at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest
from support.groupkit import async_wait_until
from support.jepsen.proxy import BLACKHOLE, PASS, FaultProxy
from support.nodekit import OFFSETS, Ledger, Node, lease_rows, owners, settled

from coordinator.cluster import NodeIdInUseError
from storage.postgres import catalog, registry, schema

pytestmark = pytest.mark.postgres

TOPIC = "orders"
KEYS = {(TOPIC, p) for p in range(12)} | {(OFFSETS, p) for p in range(6)}


class Nodes:
    """Makes nodes for one test; whatever is still running at the end is aborted."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ledger = Ledger()
        self.made: list[Node] = []

    def new(self, node_id: int, **kw: int) -> Node:
        node = Node(self.url, node_id, self.ledger, **kw)
        self.made.append(node)
        return node

    async def start(self, *ids: int, **kw: int) -> list[Node]:
        nodes = [self.new(i, **kw) for i in ids]
        for n in nodes:
            await n.cluster.start()
        return nodes


@pytest.fixture
async def nodes(pg_url: str) -> AsyncIterator[Nodes]:
    conn = await asyncpg.connect(pg_url)
    try:
        await schema.migrate(conn)
        await catalog.create_topic(conn, TOPIC, uuid.uuid4(), 12, {"cleanup.policy": "delete"})
    finally:
        await conn.close()
    made = Nodes(pg_url)
    yield made
    for n in made.made:
        await n.cluster.abort()
    assert made.ledger.errors == []


async def wait_settled(
    group: list[Node], keys: set[tuple[str, int]] = KEYS, timeout: float = 15
) -> None:
    """Every partition served once, and nothing moved during two more beats of every node."""
    deadline = time.monotonic() + timeout
    while True:
        left = max(deadline - time.monotonic(), 0.1)
        await async_wait_until(lambda: settled(group, keys), left, 0.02, "ownership to settle")
        snapshot = owners(group)
        passes = {n.node_id: n.cluster.passes for n in group}

        def two_more(passes: dict[int, int] = passes) -> bool:
            return all(n.cluster.passes >= passes[n.node_id] + 2 for n in group)

        await async_wait_until(
            two_more,
            max(deadline - time.monotonic(), 0.1),
            0.02,
            "two more heartbeats",
        )
        if settled(group, keys) and owners(group) == snapshot:
            return


async def wait(predicate: Callable[[], bool], what: str, timeout: float = 15) -> None:
    await async_wait_until(predicate, timeout, 0.01, what)


async def test_three_nodes_own_every_partition_once_spread_evenly(nodes: Nodes) -> None:
    group = await nodes.start(1, 2, 3)
    await wait_settled(group)
    counts = Counter(owners(group).values())
    assert sorted(counts) == [1, 2, 3]
    assert all(4 <= c <= 8 for c in counts.values()), counts
    rows = await lease_rows(nodes.url)
    assert set(rows) == KEYS
    held = owners(group)
    for key, row in rows.items():
        assert row["owner_node"] == held[key]
        assert row["epoch"] >= 1
    # Every node's view agrees on the owner and the leader epoch (after one more beat).
    for n in group:
        await n.cluster.refresh()
    for n in group:
        assert [x.node_id for x in n.cluster.nodes()] == [1, 2, 3]
        for key in KEYS:
            owner = n.cluster.owner(*key)
            assert owner is not None and owner.node_id == held[key], (
                n.node_id,
                key,
                n.cluster._leases.get(key),
                n.cluster._live_epochs,
            )
            assert n.cluster.leader_epoch(*key) == rows[key]["epoch"]
            assert n.cluster.owns(*key) == (held[key] == n.node_id)


async def test_graceful_stop_hands_over_within_two_heartbeats(nodes: Nodes) -> None:
    # A long session (3 s) makes "no session-timeout wait" unmistakable.
    group = await nodes.start(1, 2, 3, session_timeout_ms=3000)
    await wait_settled(group)
    first, rest = group[0], group[1:]
    moved = {k for k, o in owners(group).items() if o == 1}
    before = await lease_rows(nodes.url)
    passes = {n.node_id: n.cluster.passes for n in rest}

    stopping = time.monotonic()
    await first.cluster.stop()
    assert {k for _, k in first.released} >= moved  # it unloaded what it served
    await wait_settled(rest)

    after = await lease_rows(nodes.url)
    for key in moved:
        assert after[key]["owner_node"] in (2, 3)
        assert after[key]["epoch"] > before[key]["epoch"]
        taker = rest[after[key]["owner_node"] - 2]
        # Claimed in the first or second pass after the stop began, well inside 3 s.
        claimed_in = taker.acquired_in_pass[(*key, after[key]["epoch"])]
        assert claimed_in - passes[taker.node_id] <= 2, (key, claimed_in, passes)
        took = max(t for t, x in taker.acquired if (x.topic, x.partition) == key) - stopping
        assert took < 3.0, f"{key} taken over after {took:.2f} s: waited for the session"
    row = await _node_row(nodes.url, 1)
    assert row["shutting_down"]


async def test_crashed_node_is_taken_over_after_the_session_timeout_not_before(
    nodes: Nodes,
) -> None:
    group = await nodes.start(1, 2, 3)
    await wait_settled(group)
    victim, rest = group[0], group[1:]
    orphaned = {k for k, o in owners(group).items() if o == 1}
    passes = {n.node_id: n.cluster.passes for n in rest}

    crashed = time.monotonic()
    await victim.cluster.abort()  # no release, no shutting_down: peers see silence
    await wait_settled(rest)
    taken = min(t for n in rest for t, lease in n.acquired if t > crashed)

    # Its last heartbeat was sent at most one interval (100 ms) before the crash, so
    # its session cannot expire earlier than 600 - 100 ms after it; peers kept beating.
    assert taken - crashed >= 0.5 - 0.02, f"taken over {taken - crashed:.3f} s after the crash"
    assert all(n.cluster.passes - passes[n.node_id] >= 4 for n in rest)
    assert taken - crashed < 0.6 + 2.0
    rows = await lease_rows(nodes.url)
    assert {k for k in orphaned if rows[k]["owner_node"] in (2, 3)} == orphaned
    assert (await _node_row(nodes.url, 1))["fenced"]


async def test_expired_owner_cannot_claim_back_or_match_its_old_epoch(nodes: Nodes) -> None:
    group = await nodes.start(1, 2)
    await wait_settled(group)
    victim = group[0]
    old_be = victim.cluster.broker_epoch
    mine = {k: victim.cluster.leader_epoch(*k) for k in victim.cluster.owned()}
    await victim.cluster.abort()
    await wait_settled(group[1:])

    conn = await asyncpg.connect(nodes.url)
    try:
        for (topic, p), epoch in mine.items():
            assert await registry.claim(conn, 1, old_be, topic, p, 600) is None
            assert not await registry.release(conn, 1, old_be, topic, p, epoch)
            # The lease row moved on: owner, broker epoch and epoch all differ, so a write
            # conditional on the old lease (the journal's fence) matches no row.
            stale = await conn.fetchval(
                "SELECT count(*) FROM kgc_partition WHERE topic = $1 AND partition = $2 "
                "AND owner_node = 1 AND owner_broker_epoch = $3 AND epoch = $4",
                topic,
                p,
                old_be,
                epoch,
            )
            assert stale == 0
        rows = await lease_rows(nodes.url)
        for key, epoch in mine.items():
            assert rows[key]["owner_node"] == 2
            assert rows[key]["epoch"] > epoch
        # Its heartbeat is refused too: it must register again (a new broker epoch).
        assert await registry.heartbeat(conn, 1, old_be, 600) is None
    finally:
        await conn.close()


async def test_same_node_id_refused_while_live_allowed_after_it_died(nodes: Nodes) -> None:
    (first,) = await nodes.start(1)
    other = Node(nodes.url, 1, nodes.ledger)
    other.cluster.port += 1  # the same node.id at another address: refused at once
    began = time.monotonic()
    with pytest.raises(NodeIdInUseError):
        await other.cluster.start()
    assert time.monotonic() - began < 0.5
    twin = nodes.new(1)  # at the same address: waits out a session, then refused (live)
    began = time.monotonic()
    with pytest.raises(NodeIdInUseError):
        await twin.cluster.start()
    assert time.monotonic() - began >= 0.6  # session_timeout_ms 600
    await first.cluster.abort()  # killed: its session runs out
    aborted = time.monotonic()
    # Restarted at once at the same address (kill -9, then a supervisor's restart): it
    # waits until its predecessor's session expired and registers, instead of exiting.
    await twin.cluster.start()
    assert time.monotonic() - aborted >= 0.3
    assert twin.cluster.broker_epoch == first.cluster.broker_epoch + 1
    await wait_settled([twin])  # and it took over everything its predecessor held


async def test_adding_a_node_moves_about_one_nth_only_to_it(nodes: Nodes) -> None:
    group = await nodes.start(1, 2, 3)
    await wait_settled(group)
    before = owners(group)
    epochs = {k: group[0].cluster.leader_epoch(*k) for k in KEYS}
    (newcomer,) = await nodes.start(4)
    group.append(newcomer)
    await wait_settled(group)
    # The old nodes may still be a beat behind on the newcomer's claims: wait until
    # the newcomer's quota (18 // 4) is reached, then compare.
    await wait(lambda: len(newcomer.cluster.owned()) >= 4, "the newcomer to fill its quota")
    await wait_settled(group)
    after = owners(group)
    moved = {k for k in KEYS if after[k] != before[k]}
    assert moved and all(after[k] == 4 for k in moved), (before, after)
    assert 3 <= len(moved) <= 6  # about 18 / 4
    assert Counter(after.values())[4] == len(moved)
    rows = await lease_rows(nodes.url)
    for k in moved:
        assert rows[k]["epoch"] > epochs[k]
    for k in KEYS - moved:
        assert rows[k]["epoch"] == epochs[k]  # untouched partitions kept their epoch


async def test_catalog_changes_reach_the_other_node_within_a_heartbeat(nodes: Nodes) -> None:
    group = await nodes.start(1, 2)
    await wait_settled(group)
    other = group[1]
    conn = await asyncpg.connect(nodes.url)
    try:
        v0 = await catalog.change_version(conn)
        passes = other.cluster.passes
        await catalog.create_topic(conn, "events", uuid.uuid4(), 4, {"retention.ms": "1000"})
        await wait(lambda: len(other.catalog_changes) == 1, "on_catalog_change")
        assert other.cluster.passes - passes <= 2
        assert await catalog.change_version(conn) == v0 + 1
        keys = KEYS | {("events", p) for p in range(4)}
        await wait_settled(group, keys)
        topics = {t.name: t for t in await catalog.list_topics(conn)}
        assert topics["events"].partitions == 4
        assert topics["events"].configs == {"retention.ms": "1000"}
        assert topics[OFFSETS].internal and topics[OFFSETS].partitions == 6
        with pytest.raises(catalog.TopicExistsError):
            await catalog.create_topic(conn, "events", uuid.uuid4(), 1, {})

        served = {k: n for n in group for k in n.cluster.owned() if k[0] == "events"}
        passes = other.cluster.passes
        assert await catalog.delete_topic(conn, "events")
        assert not await catalog.delete_topic(conn, "events")
        assert not await catalog.delete_topic(conn, OFFSETS)  # internal: never deleted
        await wait(lambda: len(other.catalog_changes) == 2, "on_catalog_change after delete")
        assert other.cluster.passes - passes <= 2
        await wait_settled(group)  # the deleted topic's partitions are no longer served
        for key, n in served.items():
            assert key in {k for _, k in n.released}
        assert await conn.fetchval("SELECT count(*) FROM kgc_partition WHERE topic = 'events'") == 0
    finally:
        await conn.close()


async def test_offsets_topic_partition_count_must_agree(nodes: Nodes) -> None:
    await nodes.start(1)
    odd = nodes.new(2, offsets_partitions=7)
    with pytest.raises(catalog.OffsetsTopicMismatchError, match=r"offsets\.topic\.num\.partitions"):
        await odd.cluster.start()


async def test_database_outage_stops_serving_then_recovers(
    nodes: Nodes, pg_server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kgc.cluster")
    (node,) = await nodes.start(1)
    await wait_settled([node])
    epochs = {k: node.cluster.leader_epoch(*k) for k in KEYS}
    passes = node.cluster.passes
    pg_server.stop("fast")
    try:
        # The local lease deadline: everything is released locally after the session.
        await wait(lambda: not node.cluster.owned() and node.idle(), "stop serving")
        assert {k for _, k in node.released} == KEYS
        # Keep failing for a few more heartbeats: one log line for the whole outage.
        await async_wait_until(
            lambda: (
                node.cluster._outage_since is not None
                and time.monotonic() - node.released[-1][0] > 0.5
            ),
            10,
            0.05,
            "more failed heartbeats",
        )
    finally:
        pg_server.start()
    await wait_settled([node], timeout=30)
    assert node.cluster.passes > passes
    rows = await lease_rows(nodes.url)
    for k in KEYS:  # re-claimed with new epochs: whatever the old self sent is fenced
        assert rows[k]["epoch"] > epochs[k]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("database unreachable" in m for m in messages) == 1, messages
    assert sum("database reachable again" in m for m in messages) == 1, messages


async def _node_row(url: str, node_id: int) -> asyncpg.Record:
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow("SELECT * FROM kgc_node WHERE node_id = $1", node_id)
    finally:
        await conn.close()
    assert row is not None
    return row


async def test_a_fenced_node_stops_serving_registers_again_and_reclaims(
    nodes: Nodes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kgc.cluster")
    (node,) = await nodes.start(1)
    await wait_settled([node])
    be = node.cluster.broker_epoch
    epochs = {k: node.cluster.leader_epoch(*k) for k in KEYS}
    conn = await asyncpg.connect(nodes.url)
    try:
        await conn.execute("UPDATE kgc_node SET fenced = true WHERE node_id = 1")
    finally:
        await conn.close()
    await wait(lambda: node.cluster.broker_epoch == be + 1, "a new registration")
    await wait_settled([node])
    assert {k for _, k in node.released} == KEYS  # it stopped serving before re-claiming
    for k in KEYS:
        assert node.cluster.leader_epoch(*k) > epochs[k]
    assert any("node 1 was fenced" in r.getMessage() for r in caplog.records)


async def test_start_tries_a_failing_database_again(nodes: Nodes) -> None:
    # The database answers nothing at first (a loaded machine, a database restarting): the
    # first connect times out, and start-up tries again instead of giving up.
    target = nodes.url.split("@", 1)[1].split("/", 1)[0]
    host, port = target.rsplit(":", 1)
    proxy = await FaultProxy(host, int(port)).start()
    try:
        proxy.set_mode(BLACKHOLE)
        node = nodes.new(1)
        node.cluster.url = nodes.url.replace(target, f"127.0.0.1:{proxy.port}")
        starting = asyncio.create_task(node.cluster.start())
        await proxy.wait_accepted(2, timeout=10)  # the first attempt timed out: a second
        assert not starting.done()
        proxy.set_mode(PASS)
        await asyncio.wait_for(starting, 30)
        assert node.cluster.broker_epoch == 1
        await wait_settled([node])
    finally:
        await proxy.close()
