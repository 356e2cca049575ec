"""KafkaProducer 4.4.0 against kgc: idempotent batches in every compression type, read back by
a KafkaConsumer and found stored as sent; a keyed stream into a compacted topic."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from support.javakit import Clients, Event
from support.kafkaserver import KafkaServer
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.messages import fetch
from storage.record_batch import iter_batches

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _batches(bootstrap: str, topic: str, partition: int) -> list[tuple[int, int, int, int]]:
    """(base offset, records, compression codec, producer id) of each stored batch."""
    req = fetch.Request(
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=0,
        session_epoch=-1,
        topics=[
            fetch.FetchTopic(
                topic=topic,
                partitions=[
                    fetch.FetchPartition(
                        partition=partition, fetch_offset=0, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )
    with Connection.to(bootstrap) as conn:
        resp = conn.call(fetch.API_KEY, 12, req)
    data = bytes(resp.responses[0].partitions[0].records or b"")
    return [
        (h.base_offset, h.records_count, h.compression, h.producer_id)
        for h, _, _ in iter_batches(data)
    ]


def _records(events: list[Event]) -> list[tuple[int, int, str | None, str]]:
    return sorted((e["partition"], e["offset"], e["key"], e["value"]) for e in events)


def test_idempotent_producer_in_each_compression_type_reads_back_as_sent(
    kgc: KgcProcess, clients: Clients, topic_maker: Callable[..., None], tmp_path: Path
) -> None:
    topic = "payments"
    topic_maker(kgc.bootstrap, topic, 3)
    keys = [f"account-{i}" for i in range(9)]
    acks = clients.produce(kgc.bootstrap, topic, 30, compression=list(CODECS), keys=keys)
    assert len(acks) == 150
    # Per partition, the acknowledged offsets are 0..n-1: nothing lost, nothing twice.
    per_partition = Counter(a["partition"] for a in acks)
    for p, n in per_partition.items():
        assert sorted(a["offset"] for a in acks if a["partition"] == p) == list(range(n))

    # The client.properties file (--config) reaches the consumer: here its static instance id.
    config = tmp_path / "reader.properties"
    config.write_text("group.instance.id=reader-from-file\nfetch.min.bytes=1\n")
    with_file = Clients(config)
    try:
        reader = with_file.consumer(
            kgc.bootstrap, "payments-reader", topics=[topic], max_records=150
        )
        assert reader.wait_exit() == 0, reader.describe()
    finally:
        with_file.close()
    assert reader.of("assigned")[0]["instance_id"] == "reader-from-file"
    assert _records(reader.of("record")) == _records(acks)

    # Stored as produced: one idempotent producer (its own id) per type, its codec kept.
    seen: dict[int, set[int]] = {}
    for p in per_partition:
        for base, count, codec, producer_id in _batches(kgc.bootstrap, topic, p):
            assert producer_id >= 0, "an idempotent producer's batch without its producer id"
            seen.setdefault(codec, set()).add(producer_id)
            in_batch = [
                a for a in acks if a["partition"] == p and base <= a["offset"] < base + count
            ]
            assert {CODECS[a["codec"]] for a in in_batch} == {codec}
    assert set(seen) == set(CODECS.values())
    assert len(set().union(*seen.values())) == len(CODECS)


def test_keyed_stream_into_a_compacted_topic_reads_back_with_keys_values_offsets(
    kgc: KgcProcess, kafka_broker: KafkaServer, clients: Clients, topic_maker: Callable[..., None]
) -> None:
    topic = "balances"
    topic_maker(kgc.bootstrap, topic, 2, **{"cleanup.policy": "compact"})
    keys = [f"user-{i}" for i in range(7)]
    acks = clients.produce(kgc.bootstrap, topic, 40, keys=keys)
    reader = clients.consumer(kgc.bootstrap, "balances-reader", topics=[topic], max_records=40)
    assert reader.wait_exit() == 0, reader.describe()
    got = _records(reader.of("record"))
    assert got == _records(acks)
    # A key always lands in one partition, and the last value of each key is its newest.
    assert all(len({p for p, _, k2, _ in got if k2 == k}) == 1 for k in keys)
    latest = {k: v for _, _, k, v in sorted(got, key=lambda r: r[1])}
    assert latest == {
        k: f"v-none-{max(i for i in range(40) if i % 7 == keys.index(k))}" for k in keys
    }

    # A record without a key is refused by a compacted topic, by kgc as by Kafka.
    refused = {}
    for name, boot in (("kgc", kgc.bootstrap), ("kafka", kafka_broker.bootstrap)):
        t = f"compacted-{name}-keyless"
        topic_maker(boot, t, 1, **{"cleanup.policy": "compact"})
        nacks = clients.produce(boot, t, 1, expect_ok=False)
        refused[name] = sorted({n["error"] for n in nacks})
    assert refused["kgc"] == refused["kafka"] == ["org.apache.kafka.common.InvalidRecordException"]
