"""Crash safety: SIGKILL a real kgc under commit load; every acknowledged commit survives.

librdkafka consumers (confluent-kafka) commit increasing offsets with metadata naming the
offset, each to its own group, synchronously, so a returned commit is an acknowledged one.
The server is SIGKILLed at random moments and restarted on the same data directory. After
each restart every (group, partition) must hold at least the offset last acknowledged
before the kill, with exactly that offset's metadata (nothing half-written), and at the
end the offsets log passes its own integrity check (every batch's CRC).
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from groupkit import create_topic
from kgc_process import KgcProcess

from coordinator.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import offset_fetch
from storage.record_batch import iter_batches, verify_crc

pytestmark = pytest.mark.integration
PARTITIONS = 4


class Committer(threading.Thread):
    def __init__(self, bootstrap: str, group: str) -> None:
        super().__init__(daemon=True)
        self.group = group
        self.acked: dict[int, int] = {}
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 200,
            }
        )

    def run(self) -> None:
        offset = 0
        while not self.stop_flag.is_set():
            offset += 1
            p = offset % PARTITIONS
            try:
                self.consumer.commit(
                    offsets=[TopicPartition("crash", p, offset, f"m{offset}")], asynchronous=False
                )
            except KafkaException:
                time.sleep(0.05)
                continue
            with self.lock:
                self.acked[p] = offset

    def snapshot(self) -> dict[int, int]:
        with self.lock:
            return dict(self.acked)

    def close(self) -> None:
        self.stop_flag.set()
        self.join(30)
        self.consumer.close()


def committed(bootstrap: str, group: str) -> dict[int, tuple[int, str | None]]:
    deadline = time.monotonic() + 30
    with Connection.to(bootstrap) as c:
        while True:
            _, resp = c.request(
                offset_fetch.API_KEY,
                offset_fetch.Request(
                    groups=[offset_fetch.OffsetFetchRequestGroup(group_id=group, topics=None)]
                ),
                version=8,
            )
            g = resp.groups[0]
            if (
                g.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                or time.monotonic() > deadline
            ):
                break
            time.sleep(0.05)
    assert g.error_code == 0, g
    return {
        p.partition_index: (p.committed_offset, p.metadata) for t in g.topics for p in t.partitions
    }


def check_log_integrity(data_dir: Path) -> int:
    batches = 0
    for seg in sorted(data_dir.glob("__consumer_offsets-*/*.log")):
        buf = seg.read_bytes()
        end = 0
        for _h, start, end in iter_batches(buf):
            assert verify_crc(buf, start, end), f"CRC mismatch in {seg} at {start}"
            batches += 1
        assert end == len(buf) or not buf, f"{seg} has {len(buf) - end} trailing bytes"
    return batches


def crash_loop(kgc: KgcProcess, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    create_topic(kgc.bootstrap, "crash", PARTITIONS)
    committers = [Committer(kgc.bootstrap, f"crash-{i}") for i in range(4)]
    for c in committers:
        c.start()
    try:
        for _ in range(kills):
            time.sleep(rng.uniform(0.3, 1.5))
            kgc.kill()
            time.sleep(0.1)
            acked = {c.group: c.snapshot() for c in committers}
            kgc.start()
            for c in committers:
                stored = committed(kgc.bootstrap, c.group)
                for p, offset in acked[c.group].items():
                    assert p in stored, f"{c.group}/{p}: acknowledged offset {offset} lost"
                    got, metadata = stored[p]
                    assert got >= offset, f"{c.group}/{p}: acknowledged {offset}, found {got}"
                    # librdkafka sends the metadata string with its C terminator; kgc stores the bytes sent.
                    assert (metadata or "").rstrip("\x00") == f"m{got}", (
                        f"{c.group}/{p}: offset {got} with metadata {metadata!r}"
                    )
        assert all(c.snapshot() for c in committers), "no commit was ever acknowledged"
    finally:
        for c in committers:
            c.close()
    kgc.stop()
    assert check_log_integrity(kgc.data_dir) > 0


def test_acknowledged_commits_survive_sigkill(kgc: KgcProcess) -> None:
    crash_loop(kgc, kills=3, seed=1)


@pytest.mark.slow
def test_acknowledged_commits_survive_twenty_sigkills(kgc: KgcProcess) -> None:
    crash_loop(kgc, kills=20, seed=2)
