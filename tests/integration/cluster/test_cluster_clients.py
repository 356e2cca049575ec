"""A three-node cluster serves stock clients, and a fourth node takes a share of the work.

Three groups (confluent-kafka, aiokafka, kafkajs) whose coordinators sit on different
nodes consume one produced topic end to end, committing as they go; each must see every
record and leave its committed offsets at the end of every partition. Then a node joins
and Metadata must show it leading partitions. About 40 s in all.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading

import pytest
from support.clusterkit import Cluster, GroupMember, Ledger, groups_on_distinct_nodes
from support.crashkit import committed
from support.dataplanekit import JS_DIR, keyed_messages, produce_confluent
from support.groupkit import create_topic, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

TOPIC = "orders"
PARTITIONS = 6
N = 3000


def end_offsets(cluster: Cluster, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ends"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        c.close()


def consume_aiokafka(bootstrap: str, group: str, topic: str, n: int) -> set[tuple[int, int]]:
    """An aiokafka group member that commits after every batch until it has seen n records."""
    from aiokafka import AIOKafkaConsumer

    seen: set[tuple[int, int]] = set()

    async def run() -> None:
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=10000,
            heartbeat_interval_ms=500,
        )
        await c.start()
        try:
            async with asyncio.timeout(90):
                while len(seen) < n:
                    batches = await c.getmany(timeout_ms=300)
                    for tp, recs in batches.items():
                        seen.update((tp.partition, r.offset) for r in recs)
                        await c.commit({tp: recs[-1].offset + 1})
        finally:
            await c.stop()

    asyncio.run(run())
    return seen


@pytest.mark.skipif(
    shutil.which("node") is None or not (JS_DIR / "node_modules").exists(),
    reason="kafkajs not installed (run npm ci in tests/js)",
)
def test_three_nodes_serve_confluent_aiokafka_and_kafkajs_groups(cluster: Cluster) -> None:
    create_topic(cluster.nodes[1].bootstrap, TOPIC, PARTITIONS)
    leaders = cluster.wait_topic_led(TOPIC)
    produce_confluent(cluster.bootstrap, TOPIC, keyed_messages(N))
    ends = end_offsets(cluster, TOPIC, PARTITIONS)
    assert sum(ends.values()) == N

    g_conf, g_aio, g_js = groups_on_distinct_nodes(cluster, 3, "mixed")
    coordinators = {g: cluster.coordinator_of(g) for g in (g_conf, g_aio, g_js)}
    print(f"\ncoordinators {coordinators}, topic leaders {leaders}")
    assert len(set(coordinators.values())) >= 2, coordinators

    results: dict[str, set[tuple[int, int]]] = {}
    failures: list[BaseException] = []

    def aio() -> None:
        try:
            results["aiokafka"] = consume_aiokafka(cluster.bootstrap, g_aio, TOPIC, N)
        except BaseException as exc:
            failures.append(exc)

    aio_thread = threading.Thread(target=aio, daemon=True)
    aio_thread.start()
    # The script takes one bootstrap broker; kafkajs finds the others through Metadata.
    js_bootstrap = cluster.nodes[1].bootstrap
    js = subprocess.Popen(
        ["node", str(JS_DIR / "dataplane_consume.js"), js_bootstrap, g_js, TOPIC, str(N)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ledger = Ledger()
    member = GroupMember(cluster.bootstrap, g_conf, TOPIC, ledger, batch=200, pace=0)
    member.start()
    try:
        wait_until(
            lambda: ledger.distinct_consumed() >= N, timeout=90, what="confluent to read all"
        )
        wait_until(lambda: ledger.snapshot() == ends, timeout=30, what="confluent's last commits")
    finally:
        member.close()
    js_out, js_err = js.communicate(timeout=120)
    aio_thread.join(120)
    assert not failures, failures
    assert js.returncode == 0, js_err

    js_seen = {(p, o) for p, o, _k, _v in json.loads(js_out.strip().splitlines()[-1])}
    everything = {(p, o) for p, end in ends.items() for o in range(end)}
    assert {(p, o) for p, offs in ledger.consumed.items() for o in offs} == everything
    assert results["aiokafka"] == everything
    assert js_seen == everything
    assert not ledger.rewinds

    # Each group's committed offsets, asked of its own coordinator, are the log ends.
    for group in (g_conf, g_aio, g_js):
        node = cluster.coordinator_of(group)
        got = committed(cluster.nodes[node].bootstrap, group)
        assert {p: o for p, (o, _m) in got.items()} == ends, (group, got, ends)


def test_a_fourth_node_takes_partitions(cluster: Cluster) -> None:
    create_topic(cluster.nodes[1].bootstrap, "spread", 24)
    before = cluster.wait_topic_led("spread")
    offsets_before = cluster.offsets_leaders()
    assert set(offsets_before.values()) == {1, 2, 3}, offsets_before

    new = cluster.add_node()
    assert new == 4

    def leads_some() -> bool:
        return 4 in cluster.wait_topic_led("spread").values()

    wait_until(leads_some, timeout=30, what="node 4 to lead partitions of 'spread'")
    after = cluster.wait_topic_led("spread")
    offsets_after = cluster.offsets_leaders()
    moved = sorted(p for p in after if after[p] != before[p])
    print(
        f"\ntopic partitions led by node 4: {sorted(p for p, n in after.items() if n == 4)}; "
        f"offsets partitions: {sorted(p for p, n in offsets_after.items() if n == 4)}"
    )
    print(f"topic partitions that changed leader: {moved}")
    assert 4 in offsets_after.values(), offsets_after
    assert cluster.brokers() == {1, 2, 3, 4}
