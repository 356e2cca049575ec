"""Data plane answers as Kafka 4.4 gives them (cases the differential suite found).

Produce refuses records stamped too far ahead of the broker's clock: Kafka 4's message.timestamp.after.max.ms defaults to one hour (KIP-937): a CreateTime record
whose timestamp leads the broker's clock by more is refused with INVALID_TIMESTAMP, each such
record named in record_errors with LogValidator's message. Real logs, catalog and data plane
(no sockets); the data plane's clock is fixed so the bounds in the message are known.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.apis import Parts, handlers
from coordinator.catalog import TopicCatalog
from coordinator.config import Settings
from coordinator.dataplane import DataPlane
from coordinator.node.reconcile import reconcile
from coordinator.server.handler import ClientInfo, Deferred
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import fetch, produce
from storage.local.durability import Flusher
from storage.local.manager import LogManager
from storage.record_batch import Record, encode_batch

CLIENT = ClientInfo("test", "127.0.0.1", 1, 1)
NOW = 1_800_000_000_000
HOUR = 3_600_000
LONG_MAX = 2**63 - 1


class Node:
    def __init__(self, data_dir: Path) -> None:
        self.settings = Settings(data_dir=data_dir)
        self.flusher = Flusher()
        self.logs = LogManager(data_dir, flusher=self.flusher)
        self.catalog = TopicCatalog(data_dir / "topics.json")
        reconcile(self.catalog, self.logs)
        self.logs.open_all()
        self.dp = DataPlane(self.settings, self.catalog, self.logs, self.flusher, clock=lambda: NOW)
        info = self.catalog.create("t", 1, {})
        self.dp.create_partitions(info)

    async def produce(self, batch: bytes) -> Any:
        req = produce.ProduceRequest(
            acks=-1,
            timeout_ms=1000,
            topic_data=[
                produce.TopicProduceData(
                    name="t", partition_data=[produce.PartitionProduceData(index=0, records=batch)]
                )
            ],
        )
        res = handlers(Parts(data=self.dp))[produce.API_KEY](
            RequestHeader(produce.API_KEY, 9, 1, "t"), req, CLIENT
        )
        if isinstance(res, Deferred):
            res = await res
        return res.responses[0].partition_responses[0]

    async def close(self) -> None:
        await self.dp.stop()
        await self.flusher.stop()
        self.logs.close_all()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path / "data")
    yield n
    await n.close()


def _records(*deltas: int) -> list[Record]:
    return [Record(i, d, b"k", b"v") for i, d in enumerate(deltas)]


async def test_a_record_an_hour_ahead_is_accepted(node: Node) -> None:
    r = await node.produce(encode_batch(0, _records(0, HOUR), timestamp_ms=NOW))
    assert (r.error_code, r.base_offset) == (0, 0)


async def test_records_more_than_an_hour_ahead_are_refused_each_named(node: Node) -> None:
    base = NOW + HOUR - 5
    r = await node.produce(encode_batch(0, _records(0, 10, 3, 20), timestamp_ms=base))
    bounds = f"[{NOW - LONG_MAX}, {NOW + HOUR}]"
    assert (r.error_code, r.base_offset, r.log_start_offset, r.error_message) == (
        ErrorCode.INVALID_TIMESTAMP,
        -1,
        0,
        "One or more records have been rejected due to invalid timestamp",
    )
    assert [(e.batch_index, e.batch_index_error_message) for e in r.record_errors] == [
        (
            i,
            f"Timestamp {base + d} of message with offset {i} is out of range. "
            f"The timestamp should be within {bounds}",
        )
        for i, d in ((1, 10), (3, 20))
    ]
    # Nothing of the batch was written.
    assert (await node.produce(encode_batch(0, _records(0), timestamp_ms=NOW))).base_offset == 0


@pytest.mark.parametrize("isolation", [0, 1])
async def test_fetch_of_an_unknown_topic_or_partition_has_an_empty_aborted_list(
    node: Node, isolation: int
) -> None:
    # Kafka builds these answers from the schema's defaults: an empty list, not null.
    req = fetch.FetchRequest(
        replica_id=-1,
        isolation_level=isolation,
        topics=[
            fetch.FetchTopic(topic=topic, partitions=[fetch.FetchPartition(partition=p)])
            for topic, p in (("t", 5), ("nope", 0))
        ],
    )
    res = handlers(Parts(data=node.dp))[fetch.API_KEY](
        RequestHeader(fetch.API_KEY, 12, 1, "t"), req, CLIENT
    )
    if isinstance(res, Deferred):
        res = await res
    got = [(p.error_code, p.aborted_transactions) for t in res.responses for p in t.partitions]
    assert got == [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])] * 2


async def test_a_refused_sequence_answers_the_partitions_log_start_offset(node: Node) -> None:
    # Kafka's producer-state checks run in the log's append: their answers carry the log's
    # start offset, as every append answer does.
    def idempotent(seq: int, epoch: int = 0) -> bytes:
        return encode_batch(
            0, _records(0), timestamp_ms=NOW, producer_id=7, producer_epoch=epoch, base_sequence=seq
        )

    assert (await node.produce(idempotent(0))).error_code == 0
    gap = await node.produce(idempotent(5))
    assert (gap.error_code, gap.base_offset, gap.log_start_offset) == (
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        -1,
        0,
    )
    stale = await node.produce(idempotent(1, epoch=-2))
    assert (stale.error_code, stale.log_start_offset) == (ErrorCode.INVALID_PRODUCER_EPOCH, 0)
