"""The data plane in cluster mode: only partitions handed over by ``acquire`` are served.

A node taking a lease over creates the partition's log and fills it from the database before
the log is journaled there; a produce reaching that log in between would be acknowledged
without the database (found by the PostgreSQL-outage cluster test: acknowledged records lost
when the take-over then failed). These run the real data plane in process.
"""

from __future__ import annotations

from pathlib import Path

from coordinator.apis import Parts, handlers
from coordinator.apis.topics import Broker
from coordinator.catalog import TopicCatalog, TopicInfo
from coordinator.config import Settings
from coordinator.dataplane import DataPlane
from coordinator.node.assemble import group_core
from coordinator.placement import NodeAddress
from coordinator.server.handler import ClientInfo, Deferred
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import fetch, metadata, produce
from storage.local.durability import Flusher
from storage.local.manager import LogManager
from storage.record_batch import encode_batch

CLIENT = ClientInfo("test", "127.0.0.1", 1, 1)


def node(tmp_path: Path) -> tuple[DataPlane, LogManager, TopicInfo]:
    settings = Settings(data_dir=tmp_path, storage_url="postgresql://kgc@127.0.0.1:1/kgc")
    flusher = Flusher()
    logs = LogManager(tmp_path, flusher=flusher)
    catalog = TopicCatalog(None)
    info = TopicInfo("t", b"\x01" * 16, 2)
    catalog.install([info])
    return DataPlane(settings, catalog, logs, flusher, hosted=False), logs, info


async def produce_one(dp: DataPlane, partition: int) -> produce.PartitionProduceResponse:
    req = produce.Request(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            produce.TopicProduceData(
                name="t",
                partition_data=[
                    produce.PartitionProduceData(
                        index=partition,
                        records=encode_batch(0, [(None, b"v")], timestamp_ms=0),
                    )
                ],
            )
        ],
    )
    res = handlers(Parts(data=dp))[produce.API_KEY](
        RequestHeader(produce.API_KEY, 9, 1, "t"), req, CLIENT
    )
    if isinstance(res, Deferred):
        res = await res
    return res.responses[0].partition_responses[0]


async def test_a_log_being_taken_over_is_not_served(tmp_path: Path) -> None:
    dp, logs, info = node(tmp_path)
    plog = logs.fresh("t", 0, dp.log_config(info), info.topic_id)  # loading, not acquired
    pr = await produce_one(dp, 0)
    assert pr.error_code == ErrorCode.NOT_LEADER_FOR_PARTITION
    assert plog.log_end_offset == 0  # nothing was appended, so nothing acknowledged
    fetched = handlers(Parts(data=dp))[fetch.API_KEY](
        RequestHeader(fetch.API_KEY, 12, 2, "t"),
        fetch.Request(
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 20,
            topics=[
                fetch.FetchTopic(
                    topic="t",
                    partitions=[
                        fetch.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024)
                    ],
                )
            ],
        ),
        CLIENT,
    )
    assert not isinstance(fetched, Deferred)
    assert fetched.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_FOR_PARTITION


async def test_acquire_serves_and_release_stops(tmp_path: Path) -> None:
    dp, logs, info = node(tmp_path)
    plog = logs.fresh("t", 1, dp.log_config(info), info.topic_id)
    dp.acquire(info, plog, leader_epoch=3)
    dp.release(plog)
    assert (await produce_one(dp, 1)).error_code == ErrorCode.NOT_LEADER_FOR_PARTITION
    # A partition the topic does not have is unknown, not led elsewhere.
    assert (await produce_one(dp, 2)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class LoadingPlacement:
    """Cluster placement as a node sees it while taking a lease over: it holds the lease of
    every partition (``owner`` is this node) but serves only those in ``serving``."""

    def __init__(self, me: NodeAddress) -> None:
        self.me = me
        self.serving: set[tuple[str, int]] = set()
        self.version = 0

    def nodes(self) -> list[NodeAddress]:
        return [self.me]

    def owner(self, topic: str, partition: int) -> NodeAddress:
        return self.me

    def leader_epoch(self, topic: str, partition: int) -> int:
        return 7

    def serves(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.serving


async def test_metadata_names_no_leader_while_this_node_is_still_loading(tmp_path: Path) -> None:
    """Found by the two-node DeleteRecords test: right after a hand-over, the new holder's
    Metadata named itself leader while its log was still filling from the database, and an
    admin ListOffsets sent there got NOT_LEADER_OR_FOLLOWER (which librdkafka's admin does
    not retry). Kafka names a leader only once it serves the partition; until then the
    partition is LEADER_NOT_AVAILABLE, which every client retries."""
    dp, logs, _ = node(tmp_path)
    settings = dp.settings
    flusher = dp.flusher
    _, _, groups = group_core(settings, dp.catalog, logs, flusher, hosted=False)
    placement = LoadingPlacement(NodeAddress(settings.node_id, "127.0.0.1", 9092))
    broker = Broker(
        settings, dp.catalog, logs, groups, dp, advertised_port=9092, placement=placement
    )

    async def leaders() -> list[tuple[int, int, int]]:
        req = metadata.Request(topics=[metadata.MetadataRequestTopic(name="t")])
        res = handlers(Parts(broker=broker))[metadata.API_KEY](
            RequestHeader(metadata.API_KEY, 12, 3, "t"), req, CLIENT
        )
        if isinstance(res, Deferred):
            res = await res
        assert not isinstance(res, bytes)
        (topic,) = res.topics
        return [(p.error_code, p.leader_id, p.leader_epoch) for p in topic.partitions]

    loading = (ErrorCode.LEADER_NOT_AVAILABLE, -1, -1)
    assert await leaders() == [loading, loading]
    placement.serving.add(("t", 1))
    placement.version += 1
    assert await leaders() == [loading, (0, settings.node_id, 7)]


async def test_markers_reach_only_the_leader_and_a_new_leader_knows_open_transactions(
    tmp_path: Path,
) -> None:
    """A partition taken over is replayed whole (no note of where its transactional data
    starts travels with it), so its open transaction pins the LSO and the marker the
    coordinator sends to the new leader closes it; a node not leading it refuses the
    marker, and the coordinator retries elsewhere."""
    from coordinator.dataplane.transactions import marker_batch
    from storage.record_batch import ATTR_TRANSACTIONAL

    dp, logs, info = node(tmp_path)
    code = await dp.txn.write_marker("t", 0, 7, 0, 0, True)
    assert code == ErrorCode.NOT_LEADER_FOR_PARTITION
    plog = logs.fresh("t", 0, dp.log_config(info), info.topic_id)
    # What the database holds from the previous leader: an aborted transaction of producer
    # 8, then producer 7's transaction, still open, behind plain data.
    for batch in (
        encode_batch(
            0,
            [(b"k", b"a")],
            timestamp_ms=0,
            producer_id=8,
            producer_epoch=0,
            base_sequence=0,
            attributes=ATTR_TRANSACTIONAL,
        ),
        marker_batch(8, 0, 3, False, 0),
        encode_batch(
            0,
            [(b"k", b"b")],
            timestamp_ms=0,
            producer_id=7,
            producer_epoch=0,
            base_sequence=0,
            attributes=ATTR_TRANSACTIONAL,
        ),
        encode_batch(0, [(b"k", b"c")], timestamp_ms=0),
    ):
        plog.append(batch, 4)
    plog.flush()
    dp.acquire(info, plog, leader_epoch=5)
    assert dp.txn.last_stable_offset(plog) == 2
    assert [(a.producer_id, a.first_offset) for a in dp.producers[plog].txns.aborted] == [(8, 0)]
    # A zombie coordinator (older epoch than the one producer 8's marker carried) is fenced.
    assert await dp.txn.write_marker("t", 0, 8, 0, 2, True) == (
        ErrorCode.TRANSACTION_COORDINATOR_FENCED
    )
    assert await dp.txn.write_marker("t", 0, 7, 0, 3, True) == ErrorCode.NO_ERROR
    assert dp.txn.last_stable_offset(plog) == plog.log_end_offset == 5
    await dp.stop()
    logs.close_all()
