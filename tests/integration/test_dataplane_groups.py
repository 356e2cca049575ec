"""The data plane under consumer groups: members in subprocesses, commits, a SIGKILLed member.

Each member is an aiokafka consumer in its own process that prints every record it
processed as a JSON line and commits after each batch, so the test sees exactly what the
group delivered.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, TopicPartition
from support.dataplanekit import (
    JS_DIR,
    check_order,
    create_topic,
    keyed_messages,
    produce_confluent,
)
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration

PARTITIONS = 6
N = 10_000
MAX_RECORDS = 50

MEMBER = r"""
import asyncio, json, sys
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError

bootstrap, group, topic, delay = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])

class Listener(ConsumerRebalanceListener):
    async def on_partitions_revoked(self, revoked):
        pass
    async def on_partitions_assigned(self, assigned):
        print(json.dumps({"assigned": sorted(tp.partition for tp in assigned)}), flush=True)

async def main():
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                         auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=300,
                         max_poll_records=MAX_RECORDS)
    await c.start()
    c.subscribe([topic], listener=Listener())
    try:
        while True:
            batches = await c.getmany(timeout_ms=300)
            for tp, recs in batches.items():
                for r in recs:
                    print(json.dumps([tp.partition, r.offset, r.key.decode(), r.value.decode()]), flush=True)
                try:
                    await c.commit({tp: recs[-1].offset + 1})
                except KafkaError as e:
                    print(json.dumps({"commit_failed": str(e)}), flush=True)
            if batches:
                await asyncio.sleep(delay)
    finally:
        await c.stop()

asyncio.run(main())
""".replace("MAX_RECORDS", str(MAX_RECORDS))


class Member:
    def __init__(self, kgc: KgcProcess, group: str, topic: str, delay: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", MEMBER, kgc.bootstrap, group, topic, str(delay)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.records: list[tuple[int, int, str, str]] = []
        self.assigned: list[int] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            item = json.loads(line)
            if isinstance(item, list):
                self.records.append((item[0], item[1], item[2], item[3]))
            elif "assigned" in item:
                self.assigned = item["assigned"]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.thread.join(5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.thread.join(5)


def wait_for(pred: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def balanced(members: list[Member]) -> bool:
    parts = [p for m in members for p in m.assigned]
    return sorted(parts) == list(range(PARTITIONS)) and all(m.assigned for m in members)


def committed(kgc: KgcProcess, group: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": kgc.bootstrap, "group.id": group})
    try:
        return {
            tp.partition: tp.offset
            for tp in c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        }
    finally:
        c.close()


def group_records(members: list[Member]) -> list[tuple[int, int, str, str]]:
    return [r for m in members for r in m.records]


def test_three_members_consume_each_message_once_in_order(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "g1", PARTITIONS)
    members = [Member(kgc, "grp1", "g1", 0.0) for _ in range(3)]
    try:
        wait_for(lambda: balanced(members), 60, "a balanced 3-member group")
        produce_confluent(kgc.bootstrap, "g1", keyed_messages(N))
        wait_for(lambda: len(group_records(members)) >= N, 60, f"{N} records")
        wait_for(lambda: sum(committed(kgc, "grp1", "g1").values()) == N, 15, "final commits")
        for m in members:  # their output read to the end: nothing more can arrive
            m.stop()
            assert not m.thread.is_alive()
        records = group_records(members)
        assert len(records) == N, f"{len(records) - N} duplicates"
        for m in members:
            # Every member read its own partitions only, each in offset order.
            assert {p for p, *_ in m.records} <= set(m.assigned)
            for p in m.assigned:
                offsets = [o for q, o, *_ in m.records if q == p]
                assert offsets == list(range(len(offsets)))
        assert (
            sum(check_order([(p, k.encode(), v.encode()) for p, _o, k, v in records]).values()) == N
        )
    finally:
        for m in members:
            m.stop()


@pytest.mark.slow  # ~16-19 s: waits out the victim's 6 s session timeout
def test_sigkilled_member_partitions_are_taken_over_without_loss(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "g2", PARTITIONS)
    members = [Member(kgc, "grp2", "g2", 0.15) for _ in range(3)]
    try:
        wait_for(lambda: balanced(members), 60, "a balanced 3-member group")
        produce_confluent(kgc.bootstrap, "g2", keyed_messages(N))
        wait_for(lambda: len(group_records(members)) >= 3000, 60, "3000 records")
        victim = members[0]
        victim_parts = set(victim.assigned)
        victim.kill()
        survivors = members[1:]
        wait_for(
            lambda: sorted(p for m in survivors for p in m.assigned) == list(range(PARTITIONS)),
            60,
            "takeover",
        )
        wait_for(
            lambda: sum(committed(kgc, "grp2", "g2").values()) == N, 120, "everything committed"
        )
        records = group_records(members)
        by_partition: dict[int, list[int]] = {}
        for p, o, *_ in records:
            by_partition.setdefault(p, []).append(o)
        c = Consumer({"bootstrap.servers": kgc.bootstrap, "group.id": "probe"})
        ends = {
            p: c.get_watermark_offsets(TopicPartition("g2", p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
        c.close()
        for p in range(PARTITIONS):
            assert set(by_partition.get(p, [])) == set(range(ends[p])), (
                f"partition {p} lost messages"
            )
        dupes = Counter((p, o) for p, o, *_ in records)
        redelivered = {k for k, n in dupes.items() if n > 1}
        # Only what the victim processed after its last commit may come again.
        assert {p for p, _ in redelivered} <= victim_parts
        assert len(redelivered) <= MAX_RECORDS * len(victim_parts)
    finally:
        for m in members:
            m.stop()


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed")
def test_kafkajs_group_consumer_round_trip(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "jsg", PARTITIONS)
    out = subprocess.run(
        ["node", str(JS_DIR / "dataplane_produce.js"), kgc.bootstrap, "jsg", "3000"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    out = subprocess.run(
        ["node", str(JS_DIR / "dataplane_consume.js"), kgc.bootstrap, "jsg-group", "jsg", "3000"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr + kgc.log()
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(seen) == 3000
    assert len({(p, o) for p, o, _k, _v in seen}) == 3000
    assert sum(check_order([(p, k.encode(), v.encode()) for p, _o, k, v in seen]).values()) == 3000
