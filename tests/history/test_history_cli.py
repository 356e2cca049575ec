"""``kgc offsets history|restore|undo`` and ``kgc groups history`` against a real ``kgc serve``
with a real consumer group (aiokafka), through kgc's DescribeGroupHistory.

The CLI runs in process (support.clikit's ``call_cli``) in a thread so the consumer keeps
heartbeating meanwhile; the transaction test runs it as a subprocess, the entry point itself.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata
from support.clikit import Run, call_cli, run_cli
from support.groupkit import async_wait_until
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration

TOPIC = "orders"
PARTITIONS = 3
PER_PARTITION = 10


async def acli(kgc: KgcProcess, *args: str) -> Run:
    return await asyncio.to_thread(call_cli, *args, "--bootstrap-server", kgc.bootstrap)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


async def fill(kgc: KgcProcess) -> None:
    r = await acli(kgc, "topics", "create", TOPIC, "--partitions", str(PARTITIONS))
    assert r.code == 0, r
    producer = AIOKafkaProducer(bootstrap_servers=kgc.bootstrap)
    await producer.start()
    try:
        for _ in range(PER_PARTITION):
            for p in range(PARTITIONS):
                await producer.send_and_wait(TOPIC, b"x", partition=p)
    finally:
        await producer.stop()


async def committed(kgc: KgcProcess, group: str) -> dict[int, int]:
    desc = (await acli(kgc, "groups", "describe", group, "--output", "json")).json()
    return {r["partition"]: r["current_offset"] for r in desc["offsets"]}


async def test_history_restore_undo_on_a_real_group(kgc: KgcProcess) -> None:
    await fill(kgc)
    member = AIOKafkaConsumer(
        TOPIC,
        bootstrap_servers=kgc.bootstrap,
        group_id="billing",
        client_id="billing-0",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        heartbeat_interval_ms=300,
    )
    await member.start()
    try:
        await async_wait_until(
            lambda: len(member.assignment()) == PARTITIONS, what="the member owns every partition"
        )
        member_id = member._coordinator.member_id
        await member.commit({tp: OffsetAndMetadata(3, "") for tp in member.assignment()})
        await member.commit({tp: OffsetAndMetadata(3, "") for tp in member.assignment()})
        between = int(time.time() * 1000)
        await asyncio.sleep(0.05)  # the next commit's turn is stamped strictly later
        await member.commit({tp: OffsetAndMetadata(6, "") for tp in member.assignment()})

        # A group with an active member is neither restored nor undone; nothing changes.
        refused = await acli(
            kgc, "offsets", "restore", "billing", "--as-of", iso(between), "--execute"
        )
        refused.assert_clean_error(1)
        assert "no active members" in refused.err
        assert await committed(kgc, "billing") == dict.fromkeys(range(PARTITIONS), 6)
    finally:
        await member.stop()

    changes = (await acli(kgc, "offsets", "history", "billing", "--output", "json")).json()
    # oldest first; one commit's partitions share its time, in the order the client sent them
    assert changes == sorted(changes, key=lambda c: c["timestamp_ms"])
    changes.sort(key=lambda c: (c["timestamp_ms"], c["partition"]))
    assert [(c["partition"], c["offset"]) for c in changes] == [(p, 3) for p in range(3)] + [
        (p, 6) for p in range(3)
    ]
    for c in changes:
        assert c["member_id"] == member_id and c["client_id"] == "billing-0"
        assert c["topic"] == TOPIC and c["timestamp_ms"] > 0 and not c["admin"]
    assert [c["unchanged_commits"] for c in changes[3:]] == [1, 1, 1]  # the repeated 3
    assert [c["previous_offset"] for c in changes[3:]] == [3, 3, 3]
    table = await acli(kgc, "offsets", "history", "billing", "--topic", f"{TOPIC}:1")
    assert table.code == 0 and len(table.out.splitlines()) == 3, table  # header + 2 changes
    print("\n" + table.out)

    membership = (await acli(kgc, "groups", "history", "billing", "--output", "json")).json()
    kinds = [m["kind"] for m in membership]
    assert kinds[:3] == ["rebalance_started", "generation_completed", "stable"], kinds
    started = membership[0]
    assert started["cause"] == "join" and started["member_id"] == member_id
    assert membership[2]["members"] == 1 and membership[2]["generation"] == 1
    assert membership[2]["duration_ms"] >= 0
    assert "leave" in [m["cause"] for m in membership]  # the member left at stop()
    print((await acli(kgc, "groups", "history", "billing")).out)

    # Restore to a time between the two commits: the earlier one.
    plan = (
        await acli(
            kgc, "offsets", "restore", "billing", "--as-of", iso(between), "--output", "json"
        )
    ).json()
    assert plan["executed"] is False
    assert [(o["partition"], o["current_offset"], o["new_offset"]) for o in plan["offsets"]] == [
        (p, 6, 3) for p in range(PARTITIONS)
    ]
    assert await committed(kgc, "billing") == dict.fromkeys(range(PARTITIONS), 6)  # dry run
    done = await acli(kgc, "offsets", "restore", "billing", "--as-of", iso(between), "--execute")
    assert done.code == 0, done
    assert await committed(kgc, "billing") == dict.fromkeys(range(PARTITIONS), 3)

    # Undo a reset: the offsets before it come back.
    r = await acli(kgc, "offsets", "reset", "billing", "--topic", TOPIC, "--to-latest", "--execute")
    assert r.code == 0, r
    assert await committed(kgc, "billing") == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
    undo = await acli(kgc, "offsets", "undo", "billing", "--execute", "--output", "json")
    assert undo.code == 0, undo
    assert [o["new_offset"] for o in undo.json()["offsets"]] == [3] * PARTITIONS
    assert await committed(kgc, "billing") == dict.fromkeys(range(PARTITIONS), 3)
    admin = (await acli(kgc, "offsets", "history", "billing", "--output", "json")).json()
    assert [c["admin"] for c in admin][-9:] == [True] * 9  # restore, reset, undo

    # History survives SIGKILL (what was acknowledged was durable).
    kgc.kill()
    kgc.start()
    after = (await acli(kgc, "offsets", "history", "billing", "--output", "json")).json()
    assert after == admin


async def test_bad_input_is_one_line_and_changes_nothing(kgc: KgcProcess) -> None:
    await fill(kgc)
    unknown = await acli(kgc, "offsets", "history", "nobody")
    unknown.assert_clean_error(1)
    assert "does not exist" in unknown.err
    unknown = await acli(kgc, "groups", "history", "nobody")
    unknown.assert_clean_error(1)
    r = await acli(kgc, "offsets", "reset", "g", "--topic", TOPIC, "--to-offset", "4", "--execute")
    assert r.code == 0, r
    early = await acli(
        kgc, "offsets", "restore", "g", "--as-of", "2001-01-01T00:00:00Z", "--execute"
    )
    early.assert_clean_error(1)
    assert "before the history kept" in early.err
    nothing = await acli(kgc, "offsets", "undo", "nobody", "--execute")
    nothing.assert_clean_error(1)
    bad = await acli(kgc, "offsets", "restore", "g", "--as-of", "yesterday")
    assert bad.code == 2 and "bad date-time 'yesterday'" in bad.err.splitlines()[-1], bad
    assert await committed(kgc, "g") == dict.fromkeys(range(PARTITIONS), 4)


@pytest.mark.slow
def test_a_transactions_offsets_are_kept_and_not_undone(kgc: KgcProcess) -> None:
    """A confluent-kafka transaction's offsets (send_offsets_to_transaction), made the
    group's by the COMMIT marker, are in the history as the transaction's, not an admin's:
    undo has nothing to undo. (Expired offsets are kept alike: tests/history/test_core.py;
    the retention is a minute at least, too long for this suite.)"""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CTopicPartition

    assert run_cli("topics", "create", TOPIC, "--bootstrap-server", kgc.bootstrap).code == 0
    producer = Producer({"bootstrap.servers": kgc.bootstrap, "transactional.id": "tx-hist"})
    producer.init_transactions(30)
    group = Consumer({"bootstrap.servers": kgc.bootstrap, "group.id": "ledger"})
    try:
        producer.begin_transaction()
        producer.produce(TOPIC, b"x", partition=0)
        producer.send_offsets_to_transaction(
            [CTopicPartition(TOPIC, 0, 7)], group.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)
    finally:
        group.close()
    history = run_cli("offsets", "history", "ledger", "--output", "json",
                      "--bootstrap-server", kgc.bootstrap)  # fmt: skip
    (change,) = history.json()
    assert (change["offset"], change["admin"], change["member_id"]) == (7, False, "")
    assert change["client_id"].startswith("(transaction) ")
    undo = run_cli("offsets", "undo", "ledger", "--bootstrap-server", kgc.bootstrap)
    undo.assert_clean_error(1)
    assert "no admin change" in undo.err
