"""Shared by the crash and fault suites: load that records what was acknowledged, and checks.

``Committer`` commits increasing offsets (with metadata naming the offset) from a librdkafka
consumer, synchronously, and remembers the last acknowledged offset per partition.
``BackgroundProducer`` produces numbered values with librdkafka and remembers every value
whose delivery was acknowledged. ``committed``, ``read_all_confluent`` and
``check_log_integrity`` read back what the server kept, so a test counts the acknowledged
items that were lost.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import offset_fetch
from storage.record_batch import iter_batches, verify_crc

PARTITIONS = 4


class Committer(threading.Thread):
    """Commits offset n with metadata "m<n>" to partition n % partitions of ``topic``."""

    def __init__(
        self, bootstrap: str, group: str, topic: str = "crash", partitions: int = PARTITIONS
    ) -> None:
        super().__init__(daemon=True)
        self.group = group
        self.topic = topic
        self.partitions = partitions
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
            p = offset % self.partitions
            try:
                self.consumer.commit(
                    offsets=[TopicPartition(self.topic, p, offset, f"m{offset}")],
                    asynchronous=False,
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


def fetch_committed(bootstrap: str, group: str) -> tuple[int, dict[int, tuple[int, str | None]]]:
    """OffsetFetch of ``group`` at ``bootstrap``: its error code and the committed (offset,
    metadata) per partition (waits out loading)."""
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
    return g.error_code, {
        p.partition_index: (p.committed_offset, p.metadata) for t in g.topics for p in t.partitions
    }


def committed(bootstrap: str, group: str) -> dict[int, tuple[int, str | None]]:
    """The committed (offset, metadata) per partition of ``group`` (waits out loading)."""
    error, offsets = fetch_committed(bootstrap, group)
    assert error == 0, (group, ErrorCode(error).name)
    return offsets


def check_log_integrity(data_dir: Path, pattern: str = "__consumer_offsets-*/*.log") -> int:
    """Every batch of the matching segments passes its CRC, with no trailing bytes."""
    batches = 0
    for seg in sorted(data_dir.glob(pattern)):
        buf = seg.read_bytes()
        end = 0
        for _h, start, end in iter_batches(buf):
            assert verify_crc(buf, start, end), f"CRC mismatch in {seg} at {start}"
            batches += 1
        assert end == len(buf) or not buf, f"{seg} has {len(buf) - end} trailing bytes"
    return batches


def read_all_confluent(
    bootstrap: str, topic: str, partitions: int, timeout: float = 60.0, **conf: object
) -> list[tuple[int, bytes | None, bytes | None]]:
    """Read every partition from its start to the high watermark seen now (assign mode)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **conf,
        }
    )
    try:
        ends = {}
        for p in range(partitions):
            _lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = hi
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        pos = {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(pos[p] < ends[p] for p in pos):
            assert time.monotonic() < deadline, f"timed out at {pos} of {ends}"
            for m in c.consume(1000, 1.0):
                assert m.error() is None, m.error()
                part, offset = m.partition(), m.offset()
                assert part is not None and offset is not None
                assert offset == pos[part], (part, offset, pos[part])
                pos[part] = offset + 1
                out.append((part, m.key(), m.value()))
        return out
    finally:
        c.close()


class BackgroundProducer:
    """Produces numbered messages until stopped; remembers which ones were acknowledged."""

    def __init__(self, bootstrap: str, topic: str, **conf: object) -> None:
        self.acked: set[bytes] = set()
        self.failed: list[object] = []
        self.sent = 0
        self.stop = threading.Event()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 120_000,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 500,
                **conf,
            }
        )
        self.topic = topic
        self.thread = threading.Thread(target=self.run, daemon=True)

    def on_delivery(self, err: object, msg: object) -> None:
        if err is None:
            self.acked.add(msg.value())  # type: ignore[attr-defined]
        else:
            self.failed.append(err)

    def run(self) -> None:
        while not self.stop.is_set():
            key = f"key-{self.sent % 60}".encode()
            try:
                self.producer.produce(
                    self.topic, key=key, value=b"m-%08d" % self.sent, on_delivery=self.on_delivery
                )
                self.sent += 1
            except (BufferError, KafkaException):
                self.producer.poll(0.05)
            if self.sent % 100 == 0:
                self.producer.poll(0)
                time.sleep(0.002)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join()
        assert self.producer.flush(120) == 0


def wait_acked(bp: BackgroundProducer, n: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(bp.acked) < n:
        assert time.monotonic() < deadline, f"only {len(bp.acked)} acked"
        time.sleep(0.05)
