"""Spark's own Kafka source (spark-sql-kafka-0-10) reading topics from kgc.

How this works: the session fixture (conftest.py) starts local Spark with the connector's
jars; records of known partition, offset, key, value, timestamp and headers are produced with
confluent-kafka. The batch test reads them with ``spark.read.format("kafka")`` between offsets
given as earliest/latest, as explicit offsets per partition, and by timestamp (the connector
lists offsets through its admin client), and after DeleteRecords, where asking below the log
start is data loss (an error, or skipped with ``failOnDataLoss=false``). The stream test runs ``readStream`` with a checkpoint
directory in ``trigger(availableNow=True)`` runs, a few records per micro-batch: each run ends
when it has read what was there, more is produced (also into a partition added in between),
and the next run must continue exactly where the last stopped -- every record once, at the
partition and offset it was written to, none missing. Each test runs against kgc and once
against the reference Kafka broker.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

pytestmark = [pytest.mark.kafka, pytest.mark.integration, pytest.mark.spark]

BASE_TS = 1_700_000_000_000

Record = tuple[int, int, str | None, str, int, list[tuple[str, bytes]]]


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """A topic that keeps its records whatever their timestamps: BASE_TS is years old, and a
    broker's retention check (every 5 minutes) would delete them under the 7-day default."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})
    for future in admin.create_topics([new]).values():
        future.result()


def produce(bootstrap: str, topic: str, records: list[tuple[int, str | None, str, int]]) -> None:
    """(partition, key, value, timestamp) in order; each record gets the header h=<value>."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for partition, key, value, ts in records:
        producer.produce(
            topic,
            key=None if key is None else key.encode(),
            value=value.encode(),
            partition=partition,
            timestamp=ts,
            headers=[("h", value.encode())],
        )
    assert producer.flush(30) == 0


def kafka_options(bootstrap: str, topic: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}


def rows_of(df: Any) -> list[Record]:
    """(partition, offset, key, value, timestamp ms, headers) of each row, sorted."""
    picked = df.selectExpr(
        "partition",
        "offset",
        "CAST(key AS STRING) AS key",
        "CAST(value AS STRING) AS value",
        "unix_millis(timestamp) AS ts",
        "timestampType",
        "headers",
    ).collect()
    assert {r.timestampType for r in picked} <= {0}  # CreateTime, as produced
    return sorted(
        (
            r.partition,
            r.offset,
            r.key,
            r.value,
            r.ts,
            [(h.key, bytes(h.value)) for h in r.headers or []],
        )
        for r in picked
    )


def test_batch_read_between_offsets(spark: Any, bootstrap: str) -> None:
    topic = f"spark-batch-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 3)
    # Five records a partition, at offsets 0-4, 10 ms apart; offset 2 has no key.
    expected: dict[tuple[int, int], Record] = {}
    for p in range(3):
        for i in range(5):
            key, value = None if i == 2 else f"k{p}-{i}", f"v{p}-{i}"
            expected[p, i] = (
                p,
                i,
                key,
                value,
                BASE_TS + 1000 * p + 10 * i,
                [("h", value.encode())],
            )
    produce(bootstrap, topic, [(r[0], r[2], r[3], r[4]) for r in expected.values()])

    def read(**options: str) -> list[Record]:
        reader = spark.read.format("kafka").option("includeHeaders", "true")
        return rows_of(reader.options(**kafka_options(bootstrap, topic), **options).load())

    everything = read(startingOffsets="earliest", endingOffsets="latest")
    assert everything == sorted(expected.values())

    # Explicit offsets per partition: -2 is earliest, -1 latest; the end is exclusive.
    between = read(
        startingOffsets=json.dumps({topic: {"0": 1, "1": -2, "2": 3}}),
        endingOffsets=json.dumps({topic: {"0": 4, "1": 2, "2": -1}}),
    )
    wanted = [(0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (2, 3), (2, 4)]
    assert between == [expected[k] for k in wanted]

    # By timestamp: from the first record at or after each time, to the first after another.
    by_time = read(
        startingOffsetsByTimestamp=json.dumps(
            {topic: {"0": BASE_TS + 15, "1": BASE_TS + 1000, "2": BASE_TS + 2040}}
        ),
        endingOffsetsByTimestamp=json.dumps(
            {topic: {"0": BASE_TS + 30, "1": BASE_TS + 1001, "2": BASE_TS + 9999}}
        ),
    )
    wanted = [(0, 2), (1, 0), (2, 4)]
    assert by_time == [expected[k] for k in wanted]

    # Records deleted below offset 2 of partition 0: earliest starts there; asking for an
    # offset below it is data loss, an error unless failOnDataLoss is off (then skipped).
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 2)]).values():
        future.result()
    remaining = sorted(v for k, v in expected.items() if k[0] != 0 or k[1] >= 2)
    assert read(startingOffsets="earliest", endingOffsets="latest") == remaining
    below = json.dumps({topic: {"0": 0, "1": -2, "2": -2}})
    skipped = read(startingOffsets=below, endingOffsets="latest", failOnDataLoss="false")
    assert skipped == remaining
    with pytest.raises(Exception, match="Some data may have been lost"):
        read(startingOffsets=below, endingOffsets="latest")


def test_stream_resumes_from_its_checkpoint(spark: Any, bootstrap: str, tmp_path: Path) -> None:
    topic = f"spark-stream-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 2)
    checkpoint = tmp_path / "checkpoint"
    seen: list[tuple[int, int, int, str]] = []  # (batch id, partition, offset, value)

    def collect(df: Any, batch_id: int) -> None:
        for r in df.selectExpr("partition", "offset", "CAST(value AS STRING) AS value").collect():
            seen.append((batch_id, r.partition, r.offset, r.value))

    def run() -> list[tuple[int, int, int, str]]:
        """One availableNow run: the rows it delivered."""
        before = len(seen)
        query = (
            spark.readStream.format("kafka")
            .options(**kafka_options(bootstrap, topic))
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "4")
            .load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120), "the availableNow run did not end"
        assert query.exception() is None
        return seen[before:]

    ends = [0, 0, 0]  # where the next record of each partition lands

    def batch(name: str, count: int, partitions: int) -> dict[str, tuple[int, int]]:
        """Produce ``count`` records round-robin; each value's (partition, offset)."""
        placed = {}
        for i in range(count):
            placed[f"{name}{i}"] = (i % partitions, ends[i % partitions])
            ends[i % partitions] += 1
        produce(bootstrap, topic, [(p, None, v, BASE_TS) for v, (p, _) in placed.items()])
        return placed

    def delivered(rows: list[tuple[int, int, int, str]]) -> dict[str, tuple[int, int]]:
        values = [value for _, _, _, value in rows]
        assert len(values) == len(set(values)), f"a record delivered twice: {sorted(values)}"
        return {value: (partition, offset) for _, partition, offset, value in rows}

    first = batch("a", 10, partitions=2)
    run1 = run()
    assert delivered(run1) == first
    assert len({b for b, *_ in run1}) >= 3  # at most 4 offsets a micro-batch

    assert run() == []  # nothing new: nothing again

    # More records, also in a partition added meanwhile: the stream reads that one from its start.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_partitions([NewPartitions(topic, 3)]).values():
        future.result()
    second = batch("b", 8, partitions=3)
    run3 = run()
    assert delivered(run3) == second
    assert min(b for b, *_ in run3) > max(b for b, *_ in run1)
