"""DataPlane handlers in process: real logs and flusher, no sockets.

The ``node`` fixture runs each test on both engines, the in-memory one (storage/memory.py)
and the local disk; the tests about the disk itself (a restart, segments, deleted
directories) build a ``Node`` on the local engine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.groupkit import async_wait_until
from support.planenodekit import CLIENT, Node, batch, values_of

from coordinator.server.handler import NO_RESPONSE, Deferred
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import fetch, init_producer_id, list_offsets
from storage.memory import MemoryDurability
from storage.record_batch import (
    ATTR_TRANSACTIONAL,
    encode_batch,
    iter_batches,
    verify_crc,
)


@pytest.fixture(params=["memory", "local"])
async def node(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path / "data", engine=request.param)
    yield n
    await n.close()


@pytest.fixture
async def disk_node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path / "data")
    yield n
    await n.close()


async def test_produce_then_fetch(node: Node) -> None:
    node.create("t", 2)
    r = await node.produce("t", 1, batch([b"a", b"b"]))
    assert (r.error_code, r.base_offset, r.log_start_offset, r.log_append_time_ms) == (0, 0, 0, -1)
    r = await node.produce("t", 1, batch([b"c"]))
    assert r.base_offset == 2
    resp = await node.call(fetch.API_KEY, 12, node.fetch_req("t", [(0, 0), (1, 1)]))
    p0, p1 = resp.responses[0].partitions
    assert (p0.error_code, p0.high_watermark, p0.records) == (0, 0, b"")
    assert (p1.error_code, p1.high_watermark, p1.last_stable_offset, p1.log_start_offset) == (
        0,
        3,
        3,
        0,
    )
    # From the batch holding offset 1: the client skips offset 0 itself.
    assert values_of(p1.records) == [b"a", b"b", b"c"]
    assert resp.session_id == 0


async def test_appended_batches_carry_the_leader_epoch(node: Node) -> None:
    """Kafka's leader stamps its epoch into every batch it appends (partitionLeaderEpoch,
    outside the CRC); producers send -1. Consumers take a record's leader epoch from it
    and commit it with their offsets (KIP-320), so a batch kept as sent made every
    franz-go commit carry leader epoch -1 where Kafka's carry 0."""
    info = node.create("t", 2)
    assert (await node.produce("t", 0, batch([b"a", b"b"]))).error_code == 0
    # In cluster mode the epoch is the partition's lease epoch.
    plog = node.logs.get("t", 1)
    assert plog is not None
    node.dp.acquire(info, plog, 7)
    assert (await node.produce("t", 1, batch([b"c"]))).error_code == 0
    resp = await node.call(fetch.API_KEY, 12, node.fetch_req("t", [(0, 0), (1, 0)]))
    parts = resp.responses[0].partitions
    epochs = [[h.partition_leader_epoch for h, _s, _e in iter_batches(p.records)] for p in parts]
    assert epochs == [[0], [7]]
    assert all(verify_crc(p.records, s, e) for p in parts for _h, s, e in iter_batches(p.records))
    assert values_of(resp.responses[0].partitions[0].records) == [b"a", b"b"]


async def test_acks_zero_has_no_response(node: Node) -> None:
    node.create("t", 1)
    assert await node.produce("t", 0, batch([b"a"]), acks=0) is NO_RESPONSE
    assert node.logs.get("t", 0).log_end_offset == 1  # type: ignore[union-attr]


async def test_produce_errors(node: Node) -> None:
    node.create("t", 1, {"max.message.bytes": "200"})
    assert (
        await node.produce("nope", 0, batch([b"a"]))
    ).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (
        await node.produce("t", 1, batch([b"a"]))
    ).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (
        await node.produce("t", 0, batch([b"x" * 300]))
    ).error_code == ErrorCode.MESSAGE_SIZE_TOO_LARGE
    assert (
        await node.produce("t", 0, batch([b"a"]), acks=2)
    ).error_code == ErrorCode.INVALID_REQUIRED_ACKS
    txn = batch([b"a"], pid=1, epoch=0, seq=0, attributes=ATTR_TRANSACTIONAL)
    assert (
        await node.produce("t", 0, txn)
    ).error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
async def test_a_compacted_topic_refuses_records_without_a_key_as_kafka_does(
    node: Node, policy: str
) -> None:
    """Kafka's LogValidator refuses a batch holding a record without a key when the topic
    is compacted (it could never be compacted away): INVALID_RECORD, each keyless record's
    index in record_errors, nothing appended. kgc used to store it."""
    node.create("t", 1, {"cleanup.policy": policy})
    now = int(time.time() * 1000)
    keyless = encode_batch(
        0, [(b"k", b"a"), (None, b"b"), (b"k2", b"c"), (None, b"d")], timestamp_ms=now
    )
    r = await node.produce("t", 0, keyless, version=11)
    why = "Compacted topic cannot accept message without key in topic partition t-0"
    assert (r.error_code, r.base_offset, r.log_start_offset) == (ErrorCode.INVALID_RECORD, -1, 0)
    assert [(e.batch_index, e.batch_index_error_message) for e in r.record_errors] == [
        (1, why),
        (3, why),
    ]
    assert r.error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{why}'), "
        f"RecordError(batchIndex=3, message='{why}')]"
    )
    assert node.logs.get("t", 0).log_end_offset == 0  # type: ignore[union-attr]
    keyed = encode_batch(0, [(b"k", b"a"), (b"k", None)], timestamp_ms=now)
    assert (await node.produce("t", 0, keyed, version=11)).error_code == 0


async def test_idempotent_retry_gets_original_offset(node: Node) -> None:
    node.create("t", 1)
    init = await node.call(
        init_producer_id.API_KEY,
        4,
        init_producer_id.Request(transactional_id=None, transaction_timeout_ms=1000),
    )
    assert init.error_code == 0 and init.producer_epoch == 0
    pid = init.producer_id
    b0 = batch([b"a", b"b"], pid=pid, epoch=0, seq=0)
    b1 = batch([b"c"], pid=pid, epoch=0, seq=2)
    assert (await node.produce("t", 0, b0)).base_offset == 0
    assert (await node.produce("t", 0, b1)).base_offset == 2
    again = await node.produce("t", 0, b0)
    assert (again.error_code, again.base_offset) == (0, 0)
    assert node.logs.get("t", 0).log_end_offset == 3  # type: ignore[union-attr]
    gap = await node.produce("t", 0, batch([b"d"], pid=pid, epoch=0, seq=5))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # A second InitProducerId gives a different id.
    init2 = await node.call(
        init_producer_id.API_KEY,
        4,
        init_producer_id.Request(transactional_id=None, transaction_timeout_ms=1000),
    )
    assert init2.producer_id != pid
    txn = await node.call(
        init_producer_id.API_KEY,
        4,
        init_producer_id.Request(transactional_id="tx", transaction_timeout_ms=1000),
    )
    assert txn.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE


async def test_producer_state_survives_restart(tmp_path: Path) -> None:
    n = Node(tmp_path / "data")
    n.create("t", 1)
    b0 = batch([b"a"], pid=42, epoch=0, seq=0)
    await n.produce("t", 0, b0)
    await n.close()
    n2 = Node(tmp_path / "data")
    try:
        r = await n2.produce("t", 0, b0)
        assert (r.error_code, r.base_offset) == (0, 0)
        assert n2.logs.get("t", 0).log_end_offset == 1  # type: ignore[union-attr]
        init = await n2.call(
            init_producer_id.API_KEY, 4, init_producer_id.Request(transactional_id=None)
        )
        assert init.producer_id > 42
    finally:
        await n2.close()


async def test_long_poll_is_woken_by_produce(node: Node) -> None:
    node.create("t", 1)
    req = node.fetch_req("t", [(0, 0)], max_wait=5000)
    res = node.h[fetch.API_KEY](RequestHeader(fetch.API_KEY, 12, 1, "c"), req, CLIENT)
    assert isinstance(res, Deferred)
    task = res.future
    plog = node.logs.get("t", 0)
    await async_wait_until(lambda: plog in node.dp.waiters, 5, 0.005, "the fetch to park")
    assert not task.done()
    start = time.monotonic()
    await node.produce("t", 0, batch([b"hello"]))
    resp = await asyncio.wait_for(task, 2)
    assert time.monotonic() - start < 1
    assert values_of(resp.responses[0].partitions[0].records) == [b"hello"]


async def test_long_poll_times_out_empty(node: Node) -> None:
    node.create("t", 1)
    start = time.monotonic()
    resp = await node.call(fetch.API_KEY, 12, node.fetch_req("t", [(0, 0)], max_wait=200))
    assert 0.15 < time.monotonic() - start < 1.5
    assert resp.responses[0].partitions[0].records == b""


async def test_fetch_errors(node: Node) -> None:
    info = node.create("t", 1)
    await node.produce("t", 0, batch([b"a"]))
    resp = await node.call(fetch.API_KEY, 12, node.fetch_req("t", [(0, 5), (3, 0)]))
    oor, unknown = resp.responses[0].partitions
    assert (oor.error_code, oor.high_watermark) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    by_id = fetch.Request(
        max_wait_ms=0,
        min_bytes=1,
        session_epoch=-1,
        topics=[
            fetch.FetchTopic(
                topic_id=info.topic_id,
                partitions=[
                    fetch.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
                ],
            ),
            fetch.FetchTopic(
                topic_id=b"\x01" * 16,
                partitions=[
                    fetch.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
                ],
            ),
        ],
    )
    resp = await node.call(fetch.API_KEY, 13, by_id)
    known, unknown_id = resp.responses
    assert values_of(known.partitions[0].records) == [b"a"]
    assert unknown_id.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    incremental = node.fetch_req("t", [(0, 0)])
    incremental.session_id, incremental.session_epoch = 12, 3
    resp = await node.call(fetch.API_KEY, 12, incremental)
    assert resp.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


async def test_fetch_size_limits(node: Node) -> None:
    node.create("t", 2)
    for _ in range(5):
        await node.produce("t", 0, batch([b"x" * 1000]))
        await node.produce("t", 1, batch([b"y" * 1000]))
    one = len(batch([b"x" * 1000]))
    # partition limit smaller than one batch: still one batch from the first partition, none from the second
    resp = await node.call(fetch.API_KEY, 12, node.fetch_req("t", [(0, 0), (1, 0)], part_max=10))
    p0, p1 = resp.responses[0].partitions
    assert len(p0.records) == one and p1.records == b""
    # response limit of 3 batches: 3 from partition 0, none left for partition 1
    resp = await node.call(
        fetch.API_KEY, 12, node.fetch_req("t", [(0, 0), (1, 0)], max_bytes=3 * one)
    )
    p0, p1 = resp.responses[0].partitions
    assert len(p0.records) == 3 * one and p1.records == b""


async def test_list_offsets(node: Node) -> None:
    node.create("t", 1)
    await node.produce("t", 0, batch([b"a", b"b"], ts=1000))
    await node.produce("t", 0, batch([b"c"], ts=5000))
    await node.produce("t", 0, batch([b"d"], ts=3000))

    async def lookup(ts: int) -> tuple[int, int, int]:
        req = list_offsets.Request(
            replica_id=-1,
            topics=[
                list_offsets.ListOffsetsTopic(
                    name="t",
                    partitions=[list_offsets.ListOffsetsPartition(partition_index=0, timestamp=ts)],
                )
            ],
        )
        r = (await node.call(list_offsets.API_KEY, 8, req)).topics[0].partitions[0]
        return r.error_code, r.offset, r.timestamp

    assert await lookup(-2) == (0, 0, -1)
    assert await lookup(-1) == (0, 4, -1)
    assert await lookup(-3) == (0, 2, 5000)
    assert await lookup(2000) == (0, 2, 5000)
    assert await lookup(1000) == (0, 0, 1000)
    assert await lookup(9000) == (0, -1, -1)


async def test_list_offsets_latest_is_the_high_watermark(node: Node) -> None:
    # Fetch serves only what is durable (the high watermark); ListOffsets "latest" and
    # timestamp lookups must not point past it, or a consumer would wait at an offset
    # that a failed fsync may still cut back.
    node.create("t", 1)
    await node.produce("t", 0, batch([b"a", b"b"], ts=1000))
    plog = node.logs.get("t", 0)
    assert plog is not None
    plog.append(batch([b"c"], ts=5000))  # in the page cache, not yet fsynced

    req = list_offsets.Request(
        replica_id=-1,
        topics=[
            list_offsets.ListOffsetsTopic(
                name="t",
                partitions=[
                    list_offsets.ListOffsetsPartition(partition_index=0, timestamp=ts)
                    for ts in (-1, 4000, -3)
                ],
            )
        ],
    )
    latest, by_time, max_ts = (await node.call(list_offsets.API_KEY, 8, req)).topics[0].partitions
    assert (latest.offset, by_time.offset, max_ts.offset) == (2, -1, -1)
    plog.flush()
    latest, by_time, max_ts = (await node.call(list_offsets.API_KEY, 8, req)).topics[0].partitions
    assert (latest.offset, by_time.offset, max_ts.offset) == (3, 2, 2)


async def test_log_append_time_topic(node: Node) -> None:
    node.create("t", 1, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    r = await node.produce("t", 0, batch([b"a"], ts=1))
    assert r.error_code == 0 and r.log_append_time_ms >= before
    resp = await node.call(fetch.API_KEY, 12, node.fetch_req("t", [(0, 0)]))
    records = resp.responses[0].partitions[0].records
    ((h, _s, _e),) = list(iter_batches(records))
    assert h.max_timestamp == r.log_append_time_ms and h.attributes & 0x08


async def test_retention_advances_log_start(disk_node: Node) -> None:
    node = disk_node
    node.create("t", 1, {"segment.bytes": "1024", "retention.bytes": "2048"})
    for i in range(40):
        await node.produce("t", 0, batch([b"x" * 200], pid=9, epoch=0, seq=i))
    plog = node.logs.get("t", 0)
    assert plog is not None and plog.segment_count > 4
    assert node.dp.run_retention() > 0
    assert plog.log_start_offset > 0
    resp = await node.call(fetch.API_KEY, 12, node.fetch_req("t", [(0, 0)]))
    assert resp.responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE


async def test_delete_topic_removes_data_and_wakes_fetches(disk_node: Node) -> None:
    node = disk_node
    info = node.create("t", 1)
    await node.produce("t", 0, batch([b"a"]))
    task = asyncio.ensure_future(
        node.call(fetch.API_KEY, 12, node.fetch_req("t", [(0, 1)], max_wait=5000))
    )
    plog = node.logs.get("t", 0)
    await async_wait_until(lambda: plog in node.dp.waiters, 5, 0.005, "the fetch to park")
    node.catalog.delete("t")
    node.dp.delete_topic(info)
    resp = await asyncio.wait_for(task, 2)
    assert resp.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert not (node.logs.data_dir / "t-0").exists()


async def test_a_failed_round_answers_storage_error_and_the_offset_is_reused(
    tmp_path: Path,
) -> None:
    n = Node(tmp_path / "data", engine="memory")
    try:
        n.create("t", 1)
        assert (await n.produce("t", 0, batch([b"a"]))).base_offset == 0
        assert isinstance(n.flusher, MemoryDurability)
        n.flusher.failing = OSError(5, "Input/output error")
        r = await n.produce("t", 0, batch([b"lost"]))
        assert r.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        plog = n.logs.get("t", 0)
        assert plog is not None and plog.log_end_offset == plog.durable_end == 1
        n.flusher.failing = None
        r = await n.produce("t", 0, batch([b"b"]))
        assert (r.error_code, r.base_offset) == (0, 1)
        resp = await n.call(fetch.API_KEY, 12, n.fetch_req("t", [(0, 0)]))
        assert values_of(resp.responses[0].partitions[0].records) == [b"a", b"b"]
    finally:
        await n.close()
