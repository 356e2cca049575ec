"""``kgc groups`` and ``kgc offsets`` against a real ``kgc serve`` with real consumer groups.

Consumers are aiokafka (its default roundrobin assignor) and confluent-kafka. The live-group walk
runs the CLI in process (``support.clikit``'s ``call_cli``) in a thread, so the consumers keep
heartbeating on the test's event loop meanwhile; the confluent group and the commit-only group
run it as a subprocess (``run_cli``), the entry point itself, for ``kgc groups`` and ``kgc offsets``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from support.clikit import Run, call_cli, run_cli
from support.groupkit import async_wait_until
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration

TOPIC = "orders"
PARTITIONS = 4
PER_PARTITION = 10
OFFSET_COLUMNS = [
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
    "STATUS",
]


async def acli(kgc: KgcProcess, *args: str) -> Run:
    return await asyncio.to_thread(call_cli, *args, "--bootstrap-server", kgc.bootstrap)


async def fill_topic(kgc: KgcProcess) -> int:
    """Create ``orders`` and write PER_PARTITION records to each partition; returns the midpoint time."""
    r = await acli(kgc, "topics", "create", TOPIC, "--partitions", str(PARTITIONS))
    assert r.code == 0, r
    producer = AIOKafkaProducer(bootstrap_servers=kgc.bootstrap)
    await producer.start()
    try:
        base = int(time.time() * 1000) - 100_000
        for i in range(PER_PARTITION):
            for p in range(PARTITIONS):
                await producer.send_and_wait(TOPIC, b"x", partition=p, timestamp_ms=base + i * 1000)
    finally:
        await producer.stop()
    return base + (PER_PARTITION // 2) * 1000  # records 5..9 are at or after this


def consumer(kgc: KgcProcess, group: str, client_id: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        TOPIC,
        bootstrap_servers=kgc.bootstrap,
        group_id=group,
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=10000,
        heartbeat_interval_ms=300,
    )


# Slow (21 s in CI as ~30 subprocesses; in process, 6 s on a loaded machine where those took
# 152 s): test_describe_a_confluent_group describes a live group, test_cli_parity.py resets in
# every mode, test_command_config.py deletes offsets and the group.
@pytest.mark.slow
async def test_describe_reset_delete_a_live_group(kgc: KgcProcess) -> None:
    midpoint_ms = await fill_topic(kgc)
    members = [consumer(kgc, "billing", f"billing-{i}") for i in range(2)]
    for m in members:
        await m.start()
    try:
        await async_wait_until(
            lambda: (
                all(m.assignment() for m in members)
                and sum(len(m.assignment()) for m in members) == PARTITIONS
            ),
            what="2 consumers sharing 4 partitions",
        )
        # Commit 3 on every partition (from whichever member owns it).
        for m in members:
            await m.commit({tp: OffsetAndMetadata(3, "") for tp in m.assignment()})

        listed = (await acli(kgc, "groups", "list", "--output", "json")).json()
        assert {
            "group": "billing",
            "type": "classic",
            "state": "Stable",
            "protocol_type": "consumer",
        } in listed
        assert "billing" in [
            g["group"]
            for g in (
                await acli(kgc, "groups", "list", "--state", "stable", "--output", "json")
            ).json()
        ]
        assert "billing" not in [
            g["group"]
            for g in (
                await acli(kgc, "groups", "list", "--state", "Empty", "--output", "json")
            ).json()
        ]

        # Offsets view: one row per partition, lag = 10 - 3, owned by a live member.
        table = await acli(kgc, "groups", "describe", "billing")
        assert table.code == 0, table
        lines = table.out.splitlines()
        assert lines[0].split() == OFFSET_COLUMNS
        print("\n" + table.out)
        desc = (await acli(kgc, "groups", "describe", "billing", "--output", "json")).json()
        rows = desc["offsets"]
        assert [(r["topic"], r["partition"]) for r in rows] == [
            (TOPIC, p) for p in range(PARTITIONS)
        ]
        assert all(
            r["current_offset"] == 3
            and r["log_end_offset"] == PER_PARTITION
            and r["lag"] == PER_PARTITION - 3
            for r in rows
        ), rows
        member_ids = {
            m._coordinator.member_id for m in members
        }  # the ids aiokafka got from JoinGroup
        assert {r["consumer_id"] for r in rows} == member_ids
        assert {r["client_id"] for r in rows} == {"billing-0", "billing-1"}

        # Members view: assignment bytes decoded into partition counts.
        mem = (
            await acli(kgc, "groups", "describe", "billing", "--members", "--output", "json")
        ).json()["members"]
        assert {m["consumer_id"] for m in mem} == member_ids
        assert sorted(m["num_partitions"] for m in mem) == [2, 2]
        assert all(m["host"] and m["group_instance_id"] is None for m in mem)
        members_table = await acli(kgc, "groups", "describe", "billing", "--members")
        assert members_table.out.splitlines()[0].split()[:6] == [
            "GROUP",
            "CONSUMER-ID",
            "GROUP-INSTANCE-ID",
            "HOST",
            "CLIENT-ID",
            "#PARTITIONS",
        ]

        # State view.
        state = (
            await acli(kgc, "groups", "describe", "billing", "--state", "--output", "json")
        ).json()["state"]
        assert state["state"] == "Stable" and state["num_members"] == 2
        assert state["assignment_strategy"] == "roundrobin"  # aiokafka's default assignor
        assert state["coordinator"] == f"127.0.0.1:{kgc.port} (0)"

        # An active group's offsets cannot be reset, nor the group deleted.
        refused = await acli(
            kgc, "offsets", "reset", "billing", "--topic", TOPIC, "--to-earliest", "--execute"
        )
        refused.assert_clean_error(1)
        assert "active members" in refused.err and "Stable" in refused.err
        (await acli(kgc, "groups", "delete", "billing")).assert_clean_error(1)
    finally:
        for m in members:
            await m.stop()

    await async_wait_until(
        lambda: (
            call_cli(
                "groups",
                "describe",
                "billing",
                "--state",
                "--output",
                "json",
                "--bootstrap-server",
                kgc.bootstrap,
            ).json()["state"]["state"]
            == "Empty"
        ),
        what="group Empty after the consumers left",
    )

    async def committed() -> dict[int, int | None]:
        rows = (await acli(kgc, "groups", "describe", "billing", "--output", "json")).json()[
            "offsets"
        ]
        return {r["partition"]: r["current_offset"] for r in rows}

    # Dry run by default: prints the plan, changes nothing.
    plan = await acli(
        kgc, "offsets", "reset", "billing", "--topic", TOPIC, "--to-earliest", "--output", "json"
    )
    assert plan.code == 0, plan
    assert plan.json()["executed"] is False
    assert [r["new_offset"] for r in plan.json()["offsets"]] == [0] * PARTITIONS
    assert await committed() == dict.fromkeys(range(PARTITIONS), 3)
    assert (
        "Dry run"
        in (await acli(kgc, "offsets", "reset", "billing", "--topic", TOPIC, "--to-earliest")).err
    )

    # Each scenario, executed.
    async def reset(*how: str) -> dict[int, int | None]:
        r = await acli(kgc, "offsets", "reset", "billing", *how, "--execute", "--output", "json")
        assert r.code == 0, r
        assert r.json()["executed"] is True
        return await committed()

    assert await reset("--topic", TOPIC, "--to-earliest") == dict.fromkeys(range(PARTITIONS), 0)
    assert await reset("--topic", f"{TOPIC}:1,2", "--to-latest") == {0: 0, 1: 10, 2: 10, 3: 0}
    assert await reset("--all-topics", "--to-offset", "7") == dict.fromkeys(range(PARTITIONS), 7)
    assert await reset("--topic", TOPIC, "--shift-by", "-2") == dict.fromkeys(range(PARTITIONS), 5)
    assert await reset("--topic", f"{TOPIC}:0", "--shift-by", "100") == {
        0: 10,
        1: 5,
        2: 5,
        3: 5,
    }  # clamped to the end
    assert await reset("--topic", TOPIC, "--to-offset", "-4") == dict.fromkeys(
        range(PARTITIONS), 0
    )  # clamped to the start
    iso = datetime.fromtimestamp(midpoint_ms / 1000, UTC).isoformat()
    assert await reset("--topic", TOPIC, "--to-datetime", iso) == dict.fromkeys(
        range(PARTITIONS), PER_PARTITION // 2
    )

    # A reset partition the topic does not have is an error.
    (
        await acli(kgc, "offsets", "reset", "billing", "--topic", f"{TOPIC}:9", "--to-earliest")
    ).assert_clean_error(1)

    # OffsetDelete of one partition.
    deleted = await acli(kgc, "offsets", "delete", "billing", "--topic", f"{TOPIC}:0")
    assert deleted.code == 0, deleted
    assert (await committed()) == {1: 5, 2: 5, 3: 5}

    # Delete the group; then it is gone.
    gone = await acli(kgc, "groups", "delete", "billing")
    assert gone.code == 0, gone
    missing = await acli(kgc, "groups", "describe", "billing")
    missing.assert_clean_error(1)
    assert "does not exist" in missing.err
    (await acli(kgc, "groups", "delete", "billing")).assert_clean_error(1)


def test_describe_a_confluent_group(kgc: KgcProcess) -> None:
    """librdkafka members: their assignment bytes decode too, and the group shows Stable."""
    from confluent_kafka import Consumer

    assert (
        run_cli(
            "topics", "create", "events", "--partitions", "3", "--bootstrap-server", kgc.bootstrap
        ).code
        == 0
    )
    stop = threading.Event()
    assigned: dict[int, int] = {}

    def run(i: int) -> None:
        c = Consumer(
            {
                "bootstrap.servers": kgc.bootstrap,
                "group.id": "audit-trail",
                "client.id": f"rdk-{i}",
                "enable.auto.commit": False,
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 300,
                "partition.assignment.strategy": "roundrobin",
            }
        )
        c.subscribe(["events"])
        try:
            while not stop.is_set():
                c.poll(0.1)
                assigned[i] = len(c.assignment())
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 40
        while not (len(assigned) == 2 and sum(assigned.values()) == 3 and all(assigned.values())):
            assert time.monotonic() < deadline, f"confluent consumers never settled: {assigned}"
            time.sleep(0.2)
        r = run_cli(
            "groups",
            "describe",
            "audit-trail",
            "--members",
            "--state",
            "--output",
            "json",
            "--bootstrap-server",
            kgc.bootstrap,
        )
        assert r.code == 0, r
        obj = r.json()
        assert (
            obj["state"]["state"] == "Stable"
            and obj["state"]["assignment_strategy"] == "roundrobin"
        )
        assert sorted(m["num_partitions"] for m in obj["members"]) == [1, 2]
        assert {m["client_id"] for m in obj["members"]} == {"rdk-0", "rdk-1"}
    finally:
        stop.set()
        for t in threads:
            t.join(15)


def test_commit_only_group_and_unknown_group(kgc: KgcProcess) -> None:
    """A group that only ever committed offsets (no members) can be described and reset."""
    assert (
        run_cli(
            "topics", "create", "ledger", "--partitions", "2", "--bootstrap-server", kgc.bootstrap
        ).code
        == 0
    )

    async def commit() -> None:
        c = AIOKafkaConsumer(
            bootstrap_servers=kgc.bootstrap, group_id="batch-job", enable_auto_commit=False
        )
        c.assign([TopicPartition("ledger", 0)])  # manual assignment: commits without joining
        await c.start()
        try:
            await c.commit({TopicPartition("ledger", 0): OffsetAndMetadata(0, "")})
        finally:
            await c.stop()

    asyncio.run(commit())
    rows = run_cli(
        "groups", "describe", "batch-job", "--output", "json", "--bootstrap-server", kgc.bootstrap
    ).json()["offsets"]
    assert [(r["partition"], r["current_offset"], r["consumer_id"]) for r in rows] == [(0, 0, None)]
    r = run_cli(
        "offsets",
        "reset",
        "batch-job",
        "--topic",
        "ledger",
        "--to-latest",
        "--execute",
        "--bootstrap-server",
        kgc.bootstrap,
    )
    assert r.code == 0, r
    missing = run_cli("groups", "describe", "no-such-group", "--bootstrap-server", kgc.bootstrap)
    missing.assert_clean_error(1)
    assert "does not exist" in missing.err
