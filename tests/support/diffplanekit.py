"""Request builders of the differential data-plane scenarios (Produce, ListOffsets, batches).

How this works: the produce/fetch scenarios and the transactional ones build the same
requests by hand: ``batch`` encodes ``n`` keyed records (``k0``.. with values ``<tag>0``..)
stamped ``ts`` (years ago by default, ``TS``), optionally carrying a producer id, epoch and
base sequence; ``produce_request`` wraps one partition's records in a ProduceRequest;
``list_request`` asks ListOffsets for (partition, timestamp) pairs; ``topic_ready`` creates
a topic on one side (Kafka or kgc) and waits, untimed and not compared, until every
partition answers ListOffsets, since Kafka's replica manager takes leadership a moment
after Metadata names the leader.
"""

from __future__ import annotations

import time

from protocol.messages import list_offsets, produce
from storage.record_batch import encode_batch
from support.diffkit import Side

LIST_OFFSETS = 2
TS = 1_700_000_000_000


def batch(
    n: int, *, ts: int = TS, pid: int = -1, epoch: int = -1, seq: int = -1, tag: str = "v"
) -> bytes:
    return encode_batch(
        0,
        [(f"k{i}".encode(), f"{tag}{i}".encode()) for i in range(n)],
        timestamp_ms=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def produce_request(
    topic: str, records: bytes | None, *, partition: int = 0, acks: int = -1
) -> produce.ProduceRequest:
    return produce.ProduceRequest(
        acks=acks,
        timeout_ms=30000,
        topic_data=[
            produce.TopicProduceData(
                name=topic,
                partition_data=[produce.PartitionProduceData(index=partition, records=records)],
            )
        ],
    )


def list_request(topic: str, *parts: tuple[int, int]) -> list_offsets.ListOffsetsRequest:
    return list_offsets.ListOffsetsRequest(
        replica_id=-1,
        topics=[
            list_offsets.ListOffsetsTopic(
                name=topic,
                partitions=[
                    list_offsets.ListOffsetsPartition(partition_index=p, timestamp=t)
                    for p, t in parts
                ],
            )
        ],
    )


def topic_ready(side: Side, topic: str, partitions: int) -> None:
    """Create ``topic`` and wait until its partitions serve ListOffsets (Kafka's replica
    manager takes its leadership a moment after Metadata names the leader). No
    retention by time: the records are stamped years ago, and either server's periodic
    retention check could otherwise delete them between the two runs of a scenario."""
    side.create_topic(topic, partitions, retention_ms="-1")
    deadline = time.monotonic() + side.timeout
    while time.monotonic() < deadline:
        _, resp = side.untimed().request(
            LIST_OFFSETS, list_request(topic, *[(p, -1) for p in range(partitions)]), version=7
        )
        if all(p.error_code == 0 for t in resp.topics for p in t.partitions):
            return
        time.sleep(0.05)
    raise AssertionError(f"{side.label}: {topic} does not serve ListOffsets")
