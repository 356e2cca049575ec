"""``__consumer_offsets`` read as a topic, in process: the real group runtime, data plane and
broker over real logs (no sockets).

What a group writes (commits, group metadata) is read back through Fetch and ListOffsets;
Metadata lists the topic as Kafka does; every write to it is refused as Kafka refuses it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support import brokernodekit

from coordinator.dataplane.offsets_topic import admin_refusal, offsets_topic_id
from coordinator.server.handler import CLOSE_CONNECTION
from protocol.errors import ErrorCode
from protocol.messages import (
    create_topics,
    delete_topics,
    fetch,
    join_group,
    list_offsets,
    metadata,
    offset_commit,
    produce,
    sync_group,
)
from storage.local.cleaner import LogCleaner
from storage.record_batch import encode_batch, iter_batches, iter_record_tuples
from storage.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    partition_for,
)

TOPIC = "__consumer_offsets"
PARTITIONS = 4  # brokernodekit.Node's offsets.topic.num.partitions


class Node(brokernodekit.Node):
    """brokernodekit's node, with a group's commits and Fetch requests of the offsets topic."""

    async def commit(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        req = offset_commit.Request(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                offset_commit.OffsetCommitRequestTopic(
                    name=topic,
                    partitions=[
                        offset_commit.OffsetCommitRequestPartition(
                            partition_index=p, committed_offset=o, committed_metadata="m"
                        )
                        for p, o in offsets.items()
                    ],
                )
            ],
        )
        resp = await self.call(offset_commit.API_KEY, 8, req)
        assert [p.error_code for t in resp.topics for p in t.partitions] == [0] * len(offsets)

    def fetch_req(
        self,
        partition: int,
        offset: int = 0,
        *,
        max_wait: int = 0,
        by_id: bool = False,
        leader_epoch: int = -1,
        isolation: int = 0,
    ) -> Any:
        return fetch.Request(
            max_wait_ms=max_wait,
            min_bytes=1,
            max_bytes=50 << 20,
            isolation_level=isolation,
            session_id=0,
            session_epoch=-1,
            topics=[
                fetch.FetchTopic(
                    topic="" if by_id else TOPIC,
                    topic_id=self.offsets.topic_id if by_id else bytes(16),
                    partitions=[
                        fetch.FetchPartition(
                            partition=partition,
                            fetch_offset=offset,
                            partition_max_bytes=1 << 20,
                            current_leader_epoch=leader_epoch,
                        )
                    ],
                )
            ],
        )

    async def fetch(self, partition: int, offset: int = 0, version: int = 12, **kw: Any) -> Any:
        resp = await self.call(fetch.API_KEY, version, self.fetch_req(partition, offset, **kw))
        return resp.responses[0].partitions[0]


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path / "data")
    await n.groups.load()
    n.catalog.create("orders", 3, {})
    n.data.create_partitions(n.catalog.get("orders"))  # type: ignore[arg-type]
    yield n
    await n.close()


def records(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for _h, start, end in iter_batches(data):
        out += [(off, k, v) for off, _ts, k, v in iter_record_tuples(data[start:end])]
    return out


def commits_in(data: bytes) -> dict[tuple[str, str, int], int]:
    """The latest committed offset per (group, topic, partition) among the records."""
    out: dict[tuple[str, str, int], int] = {}
    for _off, k, v in records(data):
        assert k is not None
        key = decode_key(k)
        if isinstance(key, OffsetCommitKey):
            if v is None:
                out.pop((key.group, key.topic, key.partition), None)
            else:
                out[(key.group, key.topic, key.partition)] = decode_offset_commit_value(v).offset
    return out


async def test_fetch_reads_the_commits_a_group_made(node: Node) -> None:
    await node.commit("g1", "orders", {0: 7})
    await node.commit("g1", "orders", {2: 9})  # a batch of its own
    p = partition_for("g1", PARTITIONS)
    for version in (4, 11, 12, 13, 17):  # by name up to 12, by topic id from 13
        got = await node.fetch(p, version=version, by_id=version >= 13)
        assert got.error_code == 0, version
        assert got.high_watermark == got.last_stable_offset == 2
        assert got.log_start_offset == 0
        assert commits_in(got.records) == {("g1", "orders", 0): 7, ("g1", "orders", 2): 9}
    for version in (0, 3):  # old clients: the batches down-converted to message sets
        got = await node.fetch(p, version=version)
        assert (got.error_code, got.high_watermark) == (0, 2) and got.records, version
    # Reading from the second batch returns it; at the high watermark, nothing.
    assert [o for o, _, _ in records((await node.fetch(p, 1)).records)] == [1]
    assert (await node.fetch(p, 2)).records == b""
    assert (await node.fetch(p, 3)).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    # read_committed: the same (no transactions in the offsets log), no aborted ones.
    committed = await node.fetch(p, isolation=1)
    assert committed.last_stable_offset == 2 and committed.aborted_transactions == []
    # Another partition holds none of it.
    other = (p + 1) % PARTITIONS
    assert (await node.fetch(other)).high_watermark == 0


async def test_group_metadata_records_are_there_too(node: Node) -> None:
    req = join_group.Request(
        group_id="gm",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[join_group.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")],
    )
    # v4+: the first join asks for a member id; the second joins (a group of one).
    first = await node.call(join_group.API_KEY, 5, req)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    req.member_id = first.member_id
    joined = await node.call(join_group.API_KEY, 5, req)
    assert joined.error_code == 0
    # The leader's assignment completes the rebalance: the group is stored (Kafka's
    # GroupMetadataValue, with the member and its assignment).
    synced = await node.call(
        sync_group.API_KEY,
        3,
        sync_group.Request(
            group_id="gm",
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            assignments=[
                sync_group.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"a")
            ],
        ),
    )
    assert synced.error_code == 0
    p = partition_for("gm", PARTITIONS)

    values = []
    for _o, k, v in records((await node.fetch(p)).records):
        assert k is not None
        if decode_key(k) == GroupMetadataKey("gm") and v is not None:
            values.append(decode_group_metadata_value(v))
    value = values[-1]  # the group as the completed rebalance left it
    assert (value.protocol_type, value.generation, value.protocol) == ("consumer", 1, "range")
    assert [(m.member_id, m.subscription, m.assignment) for m in value.members] == [
        (first.member_id, b"\x00\x01", b"a")
    ]


async def test_a_long_poll_wakes_on_a_commit(node: Node) -> None:
    p = partition_for("g2", PARTITIONS)
    task = asyncio.ensure_future(node.fetch(p, 0, max_wait=10_000))
    await asyncio.sleep(0)  # the fetch is parked, waiting for data
    assert not task.done()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await node.commit("g2", "orders", {1: 42})
    got = await asyncio.wait_for(task, 5)
    assert loop.time() - started < 5
    assert commits_in(got.records) == {("g2", "orders", 1): 42}


async def test_list_offsets(node: Node) -> None:
    await node.commit("g3", "orders", {0: 1})
    await node.commit("g3", "orders", {0: 2})
    p = partition_for("g3", PARTITIONS)

    async def offset_of(ts: int, partition: int = p) -> tuple[int, int, int]:
        req = list_offsets.Request(
            replica_id=-1,
            isolation_level=1,
            topics=[
                list_offsets.ListOffsetsTopic(
                    name=TOPIC,
                    partitions=[
                        list_offsets.ListOffsetsPartition(partition_index=partition, timestamp=ts)
                    ],
                )
            ],
        )
        r = (await node.call(list_offsets.API_KEY, 7, req)).topics[0].partitions[0]
        return r.error_code, r.offset, r.leader_epoch

    assert await offset_of(-2) == (0, 0, 0)  # earliest
    assert await offset_of(-1) == (0, 2, 0)  # latest: the high watermark
    assert await offset_of(PARTITIONS, partition=PARTITIONS) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        -1,
        -1,
    )


async def test_compaction_of_the_offsets_log_is_what_is_read(node: Node) -> None:
    p = partition_for("g4", PARTITIONS)
    for i in range(10):
        await node.commit("g4", "orders", {0: i})
    plog = node.groups.partitions[p]
    plog.roll()  # the cleaner takes rolled segments only
    LogCleaner(plog).clean_all()
    got = await node.fetch(p)
    # One record per key is left, at its own offset; the high watermark did not move.
    assert [o for o, _, _ in records(got.records)] == [9]
    assert got.high_watermark == 10
    assert commits_in(got.records) == {("g4", "orders", 0): 9}


async def test_produce_is_refused_as_kafka_refuses_it(node: Node) -> None:
    batch = encode_batch(0, [(b"k", b"v")], timestamp_ms=1)

    def req(partition: int, acks: int = -1) -> Any:
        return produce.Request(
            acks=acks,
            timeout_ms=1000,
            topic_data=[
                produce.TopicProduceData(
                    name=TOPIC,
                    partition_data=[produce.PartitionProduceData(index=partition, records=batch)],
                )
            ],
        )

    before = node.groups.partitions[0].log_end_offset
    for version in (2, 3, 9):
        resp = await node.call(produce.API_KEY, version, req(0))
        r = resp.responses[0].partition_responses[0]
        # Kafka's INVALID_TOPIC_EXCEPTION, without a message (ReplicaManager's append).
        assert (r.error_code, r.error_message, r.base_offset) == (
            ErrorCode.INVALID_TOPIC,
            None,
            -1,
        ), version
    r = (await node.call(produce.API_KEY, 9, req(PARTITIONS))).responses[0].partition_responses[0]
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # acks=0: a failed produce closes the connection, as for any topic.
    assert await node.call(produce.API_KEY, 9, req(0, acks=0)) is CLOSE_CONNECTION
    assert node.groups.partitions[0].log_end_offset == before


async def test_metadata_lists_it_as_an_internal_topic(node: Node) -> None:
    resp = await node.call(metadata.API_KEY, 12, metadata.Request(topics=None))
    by_name = {t.name: t for t in resp.topics}
    assert set(by_name) == {"orders", TOPIC}  # all topics, the internal one too
    t = by_name[TOPIC]
    assert t.is_internal and not by_name["orders"].is_internal
    assert t.topic_id == node.offsets.topic_id == offsets_topic_id(node.settings.cluster_id)
    assert [p.partition_index for p in t.partitions] == list(range(PARTITIONS))
    assert {(p.leader_id, p.error_code) for p in t.partitions} == {(node.settings.node_id, 0)}
    # v0 with an empty list means all topics as well.
    v0 = await node.call(metadata.API_KEY, 0, metadata.Request(topics=[]))
    assert TOPIC in {t.name for t in v0.topics}
    # By id (v12).
    by_id = await node.call(
        metadata.API_KEY,
        12,
        metadata.Request(topics=[metadata.MetadataRequestTopic(name=None, topic_id=t.topic_id)]),
    )
    assert [(x.name, x.is_internal, x.error_code) for x in by_id.topics] == [(TOPIC, True, 0)]


async def test_the_topic_id_is_stable_across_restarts(tmp_path: Path) -> None:
    ids = []
    for _ in range(2):
        n = Node(tmp_path / "data")
        await n.groups.load()
        resp = await n.call(
            metadata.API_KEY,
            12,
            metadata.Request(topics=[metadata.MetadataRequestTopic(name=TOPIC)]),
        )
        ids.append(resp.topics[0].topic_id)
        await n.close()
    assert ids[0] == ids[1] != bytes(16)
    assert offsets_topic_id("other-cluster") != ids[0]


async def test_create_and_delete_are_refused(node: Node) -> None:
    created = await node.call(
        create_topics.API_KEY,
        7,
        create_topics.Request(
            topics=[
                create_topics.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1)
            ],
            timeout_ms=1000,
        ),
    )
    assert created.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    code, message = admin_refusal("delete_topic")
    deleted = await node.call(
        delete_topics.API_KEY, 5, delete_topics.Request(topic_names=[TOPIC], timeout_ms=1000)
    )
    assert [(r.name, r.error_code, r.error_message) for r in deleted.responses] == [
        (TOPIC, code, message)
    ]
    by_id = await node.call(
        delete_topics.API_KEY,
        6,
        delete_topics.Request(
            topics=[delete_topics.DeleteTopicState(name=None, topic_id=node.offsets.topic_id)],
            timeout_ms=1000,
        ),
    )
    assert [(r.name, r.error_code) for r in by_id.responses] == [(TOPIC, code)]
    # Still there, still read.
    await node.commit("g5", "orders", {0: 3})
    assert (await node.fetch(partition_for("g5", PARTITIONS))).high_watermark == 1


async def test_fetch_errors(node: Node) -> None:
    assert (await node.fetch(PARTITIONS)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (await node.fetch(0, leader_epoch=1)).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert (await node.fetch(0, leader_epoch=0)).error_code == 0
    # Other internal names are still not served.
    req = node.fetch_req(0)
    req.topics[0].topic = "__transaction_state"
    resp = await node.call(fetch.API_KEY, 12, req)
    assert resp.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
