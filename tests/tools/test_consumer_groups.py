"""``kgc groups list|describe`` on a KIP-848 consumer group, against a real ``kgc serve``.

The members are librdkafka consumers with ``group.protocol=consumer`` (ConsumerGroupHeartbeat,
server-side assignment), each polled in its own thread; the CLI runs in process
(support.clikit's ``call_cli``). kgc is started with short consumer heartbeat intervals so the
group settles within seconds. A classic group (aiokafka) lives next to it, so the type column
and filter have both kinds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from support.clikit import Run, call_cli
from support.kgc_process import KgcProcess
from support.kip848kit import CONSUMER_FLAGS, Member, wait_until

pytestmark = pytest.mark.integration

TOPIC = "payments"
PARTITIONS = 4
GROUP = "ledger-v2"


@pytest.fixture
def kgc848(tmp_path: Path) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path / "data", *CONSUMER_FLAGS)
    proc.start()
    proc.wait_loaded()
    yield proc
    if proc.alive():
        proc.stop()


def cli(kgc: KgcProcess, *args: str) -> Run:
    return call_cli(*args, "--bootstrap-server", kgc.bootstrap)


def fill_topic(kgc: KgcProcess) -> None:
    from confluent_kafka import Producer

    r = cli(kgc, "topics", "create", TOPIC, "--partitions", str(PARTITIONS))
    assert r.code == 0, r
    producer = Producer({"bootstrap.servers": kgc.bootstrap})
    for p in range(PARTITIONS):
        for _ in range(10):
            producer.produce(TOPIC, b"x", partition=p)
    assert producer.flush(20) == 0


def classic_group(kgc: KgcProcess) -> None:
    """A classic group that only committed offsets (it shows in the list as classic)."""

    async def commit() -> None:
        c = AIOKafkaConsumer(
            bootstrap_servers=kgc.bootstrap, group_id="old-style", enable_auto_commit=False
        )
        c.assign([TopicPartition(TOPIC, 0)])
        await c.start()
        try:
            await c.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(1, "")})
        finally:
            await c.stop()

    asyncio.run(commit())


def test_list_and_describe_a_consumer_protocol_group(kgc848: KgcProcess) -> None:
    kgc = kgc848
    fill_topic(kgc)
    classic_group(kgc)
    members = [
        Member(kgc, "rdk-a", group=GROUP, topic=TOPIC),
        Member(kgc, "rdk-b", instance_id="pinned-b", group=GROUP, topic=TOPIC),
    ]
    try:
        wait_until(
            lambda: (
                all(m.assigned and m.member_id for m in members)
                and sum(len(m.assigned) for m in members) == PARTITIONS
            ),
            "two consumer-protocol members sharing 4 partitions",
        )
        # Commit 4 on every partition, each through its owner (member epochs are checked).
        for m in members:
            m.committed.clear()
            m.to_commit = {p: 4 for _t, p in m.assigned}
        for m in members:
            assert m.committed.wait(20), f"{m.client_id} did not commit: {m.error!r}"

        def settled() -> dict[str, Any] | None:
            r = cli(kgc, "groups", "describe", GROUP, "--output", "json")
            assert r.code == 0, r
            obj: dict[str, Any] = r.json()
            ms = obj["members"]
            ok = (
                obj["state"]["state"] == "Stable"
                and len(ms) == 2
                and all(m["assignment"] == m["target_assignment"] for m in ms)
                and all(r["current_offset"] == 4 for r in obj["offsets"])
                and all(r["consumer_id"] for r in obj["offsets"])
            )
            return obj if ok else None

        desc = wait_until(settled, "a Stable group with its offsets committed")

        # -- list: both types, and the --type filter
        listed = cli(kgc, "groups", "list", "--output", "json").json()
        assert {
            "group": GROUP,
            "type": "consumer",
            "state": "Stable",
            "protocol_type": "consumer",
        } in listed
        assert any(g["group"] == "old-style" and g["type"] == "classic" for g in listed), listed
        only_consumer = cli(kgc, "groups", "list", "--type", "consumer", "--output", "json").json()
        assert [g["group"] for g in only_consumer] == [GROUP]
        only_classic = cli(kgc, "groups", "list", "--type", "CLASSIC", "--output", "json").json()
        assert [g["group"] for g in only_classic] == ["old-style"]
        both = cli(kgc, "groups", "list", "--type", "classic,consumer", "--output", "json").json()
        assert {g["group"] for g in both} == {GROUP, "old-style"}
        table = cli(kgc, "groups", "list")
        assert table.out.splitlines()[0].split() == ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"]
        row = next(ln.split() for ln in table.out.splitlines() if ln.startswith(GROUP))
        assert row == [GROUP, "consumer", "Stable", "consumer"]
        bad = cli(kgc, "groups", "list", "--type", "queue")
        assert bad.code == 2 and "unknown group type 'queue'" in bad.err, bad
        no_share = cli(kgc, "groups", "list", "--type", "share")  # a type, with no group here
        assert no_share.code == 0 and GROUP not in no_share.out, no_share

        # -- describe (JSON): state, epochs, assignor
        assert desc["type"] == "consumer" and desc["state_name"] == "Stable"
        state = desc["state"]
        assert state["assignment_strategy"] == "uniform"  # kgc's default server-side assignor
        assert state["group_epoch"] >= 2 and state["assignment_epoch"] == state["group_epoch"]
        assert state["num_members"] == 2
        assert state["coordinator"] == f"127.0.0.1:{kgc.port} (0)"

        # per member: ids, client, epoch, type, subscription, assigned == target
        by_client = {m["client_id"]: m for m in desc["members"]}
        assert set(by_client) == {"rdk-a", "rdk-b"}
        for mem in members:
            got = by_client[mem.client_id]
            assert got["consumer_id"] == mem.member_id
            assert got["member_type"] == "consumer"
            assert got["member_epoch"] == state["group_epoch"]
            assert got["subscription"] == TOPIC
            assert got["subscribed_topic_names"] == [TOPIC]
            assert got["subscribed_topic_regex"] is None
            assert got["host"]
            parts = sorted(p for _t, p in mem.assigned)
            assert got["assigned_partitions"] == {TOPIC: parts}
            assert got["target_partitions"] == {TOPIC: parts}
            assert got["num_partitions"] == len(parts) == 2
            assert got["assignment"] == f"{TOPIC}:{','.join(map(str, parts))}"
        assert by_client["rdk-a"]["group_instance_id"] is None
        assert by_client["rdk-b"]["group_instance_id"] == "pinned-b"

        # offsets and lag, owned by the members that hold the partitions
        owner = {p: m.member_id for m in members for _t, p in m.assigned}
        assert [
            (r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"])
            for r in desc["offsets"]
        ] == [(TOPIC, p, 4, 10, 6) for p in range(PARTITIONS)]
        assert {r["partition"]: r["consumer_id"] for r in desc["offsets"]} == owner

        # -- describe (table): the three sections with their headers and values
        text = cli(kgc, "groups", "describe", GROUP)
        assert text.code == 0, text
        blocks = [b.splitlines() for b in text.out.strip().split("\n\n")]
        assert len(blocks) == 3, text.out
        st_head, st_row = blocks[0][0], blocks[0][1]
        assert st_head.split() == [
            "GROUP",
            "COORDINATOR",
            "(ID)",
            "ASSIGNMENT-STRATEGY",
            "STATE",
            "GROUP-EPOCH",
            "ASSIGNMENT-EPOCH",
            "#MEMBERS",
        ]
        epoch = str(state["group_epoch"])
        assert st_row.split()[-5:] == ["uniform", "Stable", epoch, epoch, "2"]
        assert blocks[1][0].split() == [
            "GROUP",
            "CONSUMER-ID",
            "GROUP-INSTANCE-ID",
            "HOST",
            "CLIENT-ID",
            "MEMBER-EPOCH",
            "MEMBER-TYPE",
            "SUBSCRIPTION",
            "#PARTITIONS",
            "ASSIGNMENT",
            "TARGET-ASSIGNMENT",
        ]
        member_rows = {ln.split()[1]: ln.split() for ln in blocks[1][1:]}
        for mem in members:
            cells = member_rows[mem.member_id]
            cell = f"{TOPIC}:{','.join(str(p) for _t, p in sorted(mem.assigned))}"
            assert cells[-7:] == [mem.client_id, epoch, "consumer", TOPIC, "2", cell, cell]
        assert blocks[2][0].split() == [
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
        assert [ln.split()[1:6] for ln in blocks[2][1:-1]] == [
            [TOPIC, str(p), "4", "10", "6"] for p in range(PARTITIONS)
        ]
        assert blocks[2][-1].split() == ["TOTAL-LAG", str(6 * PARTITIONS)]

        # -- one section on request; --state of a consumer group has the epochs
        only_state = cli(kgc, "groups", "describe", GROUP, "--state", "--output", "json").json()
        assert set(only_state) == {"group", "type", "state_name", "state"}
        only_members = cli(kgc, "groups", "describe", GROUP, "--members").out.strip()
        assert "\n\n" not in only_members and "TARGET-ASSIGNMENT" in only_members

        # -- the classic group keeps its output: offsets only by default
        old = cli(kgc, "groups", "describe", "old-style", "--output", "json").json()
        assert old["type"] == "classic" and set(old) == {
            "group",
            "type",
            "state_name",
            "offsets",
            "total_lag",
        }
        assert [(r["partition"], r["current_offset"]) for r in old["offsets"]] == [(0, 1)]
    finally:
        for m in members:
            m.close()
    for m in members:
        assert m.error is None, m.error

    # Both members left: the consumer group is Empty, still described with its offsets.
    def empty() -> dict[str, Any] | None:
        obj: dict[str, Any] = cli(kgc, "groups", "describe", GROUP, "--output", "json").json()
        return obj if obj["state_name"] == "Empty" else None

    gone = wait_until(empty, "the consumer group Empty after its members left")
    assert gone["members"] == []
    assert gone["state"]["num_members"] == 0
    assert [r["current_offset"] for r in gone["offsets"]] == [4] * PARTITIONS
    assert all(r["consumer_id"] is None for r in gone["offsets"])
