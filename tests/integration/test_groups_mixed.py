"""Other clients in groups, mixed groups, and the admin APIs seen through stock admin clients."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from support.groupkit import Member, create_topic, wait_until
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration
JS_DIR = Path(__file__).resolve().parents[1] / "js"


def test_kafka_python_consumer_joins_and_gets_assignment(kgc: KgcProcess) -> None:
    from kafka import KafkaConsumer

    create_topic(kgc.bootstrap, "orders", 4)
    c = KafkaConsumer(
        "orders",
        bootstrap_servers=kgc.bootstrap,
        group_id="kp-group",
        session_timeout_ms=10000,
        heartbeat_interval_ms=500,
        enable_auto_commit=False,
    )
    try:
        for _ in range(100):
            c.poll(timeout_ms=200)
            if c.assignment():
                break
        assert {tp.partition for tp in c.assignment()} == {0, 1, 2, 3}
    finally:
        c.close()


@pytest.mark.skipif(
    shutil.which("node") is None or not (JS_DIR / "node_modules").exists(),
    reason="kafkajs not installed (run npm ci in tests/js)",
)
def test_kafkajs_consumer_joins_and_gets_assignment(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "orders", 3)
    out = subprocess.run(
        ["node", str(JS_DIR / "consumer.js"), kgc.bootstrap, "js-group", "orders"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["isLeader"] is True
    assert result["memberId"] == result["leaderId"]
    assert sorted(result["memberAssignment"]["orders"]) == [0, 1, 2]


def test_aiokafka_and_confluent_share_one_group(kgc: KgcProcess) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor

    create_topic(kgc.bootstrap, "orders", 6)
    ck = Member(kgc, "mixed", "range")
    result: dict[str, set[int]] = {}
    stop = threading.Event()

    async def run_aiokafka() -> None:
        c = AIOKafkaConsumer(
            "orders",
            bootstrap_servers=kgc.bootstrap,
            group_id="mixed",
            partition_assignment_strategy=(RangePartitionAssignor,),
            session_timeout_ms=10000,
            heartbeat_interval_ms=500,
            enable_auto_commit=False,
        )
        await c.start()
        try:
            while not stop.is_set():
                result["aio"] = {tp.partition for tp in c.assignment()}
                await asyncio.sleep(0.1)
        finally:
            await c.stop()

    t = threading.Thread(target=lambda: asyncio.run(run_aiokafka()), daemon=True)
    t.start()
    try:
        wait_until(
            lambda: len(result.get("aio", ())) == 3 and len(ck.partitions()) == 3,
            timeout=40,
            what="the mixed group to settle",
        )
        assert result["aio"] | ck.partitions() == set(range(6))
        assert not result["aio"] & ck.partitions()
    finally:
        stop.set()
        t.join(15)
        ck.close()


def test_admin_clients_describe_list_and_delete_groups(kgc: KgcProcess) -> None:
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    create_topic(kgc.bootstrap, "orders", 2)
    member = Member(kgc, "described", "range", **{"client.id": "describe-me"})
    try:
        wait_until(lambda: len(member.partitions()) == 2, timeout=40, what="the group to settle")
        kp = KafkaAdminClient(bootstrap_servers=kgc.bootstrap)
        try:
            desc = kp.describe_groups(["described"])["described"]
            assert desc["group_state"] == "Stable"
            assert desc["protocol_type"] == "consumer"
            assert desc["protocol_data"] == "range"
            (m,) = desc["members"]
            assert m["client_id"] == "describe-me"
            assert m["client_host"] == "/127.0.0.1"  # Kafka reports InetAddress.toString()
            assert m["member_assignment"]["assigned_partitions"] == [
                {"topic": "orders", "partitions": [0, 1]}
            ]
            assert m["member_metadata"]["topics"] == ["orders"]
            listed = kp.list_groups()
            assert {
                "group_id": "described",
                "protocol_type": "consumer",
                "group_state": "Stable",
                "group_type": "classic",
            } in listed
        finally:
            kp.close()
        ck = AdminClient({"bootstrap.servers": kgc.bootstrap})
        (fut,) = ck.describe_consumer_groups(["described"]).values()
        cdesc = fut.result(timeout=15)
        assert cdesc.state == ConsumerGroupState.STABLE
        assert cdesc.partition_assignor == "range"
        (cm,) = cdesc.members
        assert cdesc.coordinator.port == kgc.port
        assert cm.client_id == "describe-me"
        assert sorted(tp.partition for tp in cm.assignment.topic_partitions) == [0, 1]
        listed = ck.list_consumer_groups().result(timeout=15)
        states = {g.group_id: g.state for g in listed.valid}
        assert states["described"] == ConsumerGroupState.STABLE
        # A live group cannot be deleted.
        (dfut,) = ck.delete_consumer_groups(["described"]).values()
        with pytest.raises(Exception, match=r"NON_EMPTY_GROUP|not empty"):
            dfut.result(timeout=15)
    finally:
        member.close()
    # Once empty, it can.
    ck = AdminClient({"bootstrap.servers": kgc.bootstrap})
    wait_until(
        lambda: (
            {g.group_id: g.state for g in ck.list_consumer_groups().result(timeout=15).valid}.get(
                "described"
            )
            == ConsumerGroupState.EMPTY
        ),
        timeout=30,
        what="the group to become Empty",
    )
    (dfut,) = ck.delete_consumer_groups(["described"]).values()
    dfut.result(timeout=15)
    assert "described" not in {
        g.group_id for g in ck.list_consumer_groups().result(timeout=15).valid
    }
