"""Compressed batches from librdkafka's producers, read inside a running kgc.

confluent-kafka produces with each ``compression.type`` (librdkafka writes raw snappy, the
LZ4 frame format, gzip and zstd). kgc must look inside those batches where it reads records
itself: the cleaner of a compacted topic keeps the latest record per key, and ListOffsets
finds a timestamp (offsets_for_times) and the largest timestamp (OffsetSpec.max_timestamp)
at the exact record inside a batch, not at the batch's edge.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.messages import create_topics
from storage.record_batch import HEADER_SIZE, iter_batches, parse_header

pytestmark = pytest.mark.integration

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
KEYS = 40


@pytest.fixture(scope="module")
def kgc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KgcProcess]:
    proc = KgcProcess(
        tmp_path_factory.mktemp("compression") / "data", "--log-cleaner-backoff-ms", "100"
    )
    proc.start()
    yield proc
    proc.stop()


def create_topic(bootstrap: str, name: str, configs: dict[str, str] | None = None) -> None:
    with Connection.to(bootstrap) as c:
        topic = create_topics.CreatableTopic(name=name, num_partitions=1, replication_factor=1)
        topic.configs = [
            create_topics.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()
        ]
        _, resp = c.request(create_topics.API_KEY, create_topics.Request(topics=[topic]))
        assert resp.topics[0].error_code == 0, resp


def produce(bootstrap: str, topic: str, codec: str, msgs: list[tuple[bytes, bytes, int]]) -> None:
    errors: list[object] = []
    p = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all", "compression.type": codec}
    )
    for key, value, ts in msgs:
        p.produce(
            topic,
            key=key,
            value=value,
            timestamp=ts,
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
    assert p.flush(30) == 0
    assert not errors, errors[:5]


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of partition 0 from its start to the high watermark."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        _lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while not out or out[-1][0] < hi - 1:
            assert time.monotonic() < deadline, f"read up to {out[-1:]} of {hi}"
            for m in c.consume(1000, 1.0):
                assert m.error() is None, m.error()
                offset = m.offset()
                assert offset is not None
                out.append((offset, m.key(), m.value()))
        return out
    finally:
        c.close()


def stored_batches(kgc: KgcProcess, topic: str) -> list[bytes]:
    out = []
    for path in sorted((kgc.data_dir / f"{topic}-0").glob("*.log")):
        data = path.read_bytes()
        out += [data[start:end] for _h, start, end in iter_batches(data)]
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_compacted_topic_of_compressed_batches_keeps_latest_per_key(
    kgc: KgcProcess, codec: str
) -> None:
    topic = f"compact-{codec}"
    # 1 KiB segments: every few batches roll one, so the cleaner has many to clean.
    create_topic(
        kgc.bootstrap,
        topic,
        {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"},
    )
    now = int(time.time() * 1000)
    msgs = [(b"key-%d" % (i % KEYS), b"%d:" % i + b"v" * 300, now + i) for i in range(2000)]
    produce(kgc.bootstrap, topic, codec, msgs)
    # A tail of batches larger than a segment (one message each, distinct keys) rolls the
    # segments holding the keyed data, which the cleaner only takes once rolled.
    for t in range(3):
        produce(kgc.bootstrap, topic, codec, [(b"tail-%d" % t, b"%d" % t * 1500, now + 3000)])
    tail_start = len(msgs)
    latest = {k: v for k, v, _ts in msgs}
    assert len(latest) == KEYS

    deadline = time.monotonic() + 60
    while True:
        records = read_all(kgc.bootstrap, topic)
        keyed = [(k, v) for off, k, v in records if off < tail_start]
        if len(keyed) == KEYS:
            break
        assert time.monotonic() < deadline, f"{len(keyed)} records of {KEYS} keys left"
        time.sleep(0.2)
    assert dict(keyed) == latest
    assert [k for _o, k, _v in records if _o >= tail_start] == [b"tail-0", b"tail-1", b"tail-2"]
    # The tail is stored as librdkafka compressed it (snappy: one raw block, no xerial
    # framing), so the batches the cleaner read were of that codec.
    tail = stored_batches(kgc, topic)[-3:]
    assert [parse_header(b).compression for b in tail] == [CODECS[codec]] * 3
    if codec == "snappy":
        assert all(b[HEADER_SIZE : HEADER_SIZE + 8] != b"\x82SNAPPY\x00" for b in tail)


@pytest.mark.parametrize("codec", CODECS)
def test_list_offsets_finds_records_inside_compressed_batches(kgc: KgcProcess, codec: str) -> None:
    topic = f"times-{codec}"
    create_topic(kgc.bootstrap, topic)
    base = 1_700_000_000_000
    # Timestamps base + 10 * i, except one record in the middle holding the largest.
    msgs = [(b"k%d" % i, b"v" * 100, base + 10 * i) for i in range(600)]
    msgs[333] = (b"k333", b"v" * 100, base + 10_000_000)
    produce(kgc.bootstrap, topic, codec, msgs)
    assert len(stored_batches(kgc, topic)) < 100  # batches of several records each

    c = Consumer({"bootstrap.servers": kgc.bootstrap, "group.id": "unused"})
    try:
        # The first record at or after the time: record i, or for times after record 333's
        # predecessors, record 333 itself (its timestamp is past all of them).
        for i, expected in ((1, 1), (57, 57), (332, 332), (401, 333)):
            (tp,) = c.offsets_for_times([TopicPartition(topic, 0, base + 10 * i - 5)], timeout=10)
            assert tp.offset == expected, (i, tp)
    finally:
        c.close()
    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
    futures = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.max_timestamp()})
    result = futures[TopicPartition(topic, 0)].result(timeout=10)
    assert (result.offset, result.timestamp) == (333, base + 10_000_000)
