"""Leader hints (KIP-951) in NOT_LEADER_OR_FOLLOWER answers, at the API layer.

A node of a two-worker placement (``WorkerPlacement``: worker 1 leads what this node does
not) runs the real data plane and API table: Produce v10+ and Fetch v16+ refused for the
other worker's partition name it in ``CurrentLeader`` and ``NodeEndpoints`` (as the
request's listener reaches it), older versions do not; a partition without a leader is
hinted (-1, -1) with no endpoint. The share APIs' hints are checked on answers in the shape
the share partitions give (their refusal comes from the share leader, not the placement).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from coordinator.apis import Parts, handlers
from coordinator.apis.leaders import TopicNames, hinted
from coordinator.apis.topics import Broker
from coordinator.catalog import TopicCatalog, TopicInfo
from coordinator.config import Settings
from coordinator.dataplane import DataPlane
from coordinator.node.assemble import group_core
from coordinator.placement import NodeAddress, WorkerPlacement, worker_of
from coordinator.server.handler import ClientInfo, Deferred, HandlerResult
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader, encode_body
from protocol.messages import fetch, produce, share_acknowledge, share_fetch
from storage.local.durability import Flusher
from storage.local.manager import LogManager
from storage.record_batch import encode_batch

CLIENT = ClientInfo("test", "127.0.0.1", 1, 1)
TOPIC_ID = b"\x02" * 16
ME = NodeAddress(0, "w0.example", 9092, "r0", (("PLAINTEXT", "w0.example", 9092),))
OTHER = NodeAddress(
    1,
    "w1.example",
    9093,
    "r1",
    (("PLAINTEXT", "w1.example", 9093), ("INTERNAL", "10.0.0.2", 19093)),
)
NOT_LEADER = ErrorCode.NOT_LEADER_FOR_PARTITION


def partition_of(worker: int) -> int:
    return next(p for p in range(8) if worker_of("t", p, 2) == worker)


def node(tmp_path: Path, placement: Any) -> Parts:
    settings = Settings(data_dir=tmp_path, storage_url="postgresql://kgc@127.0.0.1:1/kgc")
    flusher = Flusher()
    logs = LogManager(tmp_path, flusher=flusher)
    catalog = TopicCatalog(None)
    info = TopicInfo("t", TOPIC_ID, 8)
    catalog.install([info])
    dp = DataPlane(settings, catalog, logs, flusher, hosted=False)
    mine = partition_of(0)
    dp.acquire(info, logs.fresh("t", mine, dp.log_config(info), TOPIC_ID), leader_epoch=0)
    _, _, groups = group_core(settings, catalog, logs, flusher, hosted=False)
    broker = Broker(settings, catalog, logs, groups, dp, advertised_port=9092, placement=placement)
    return Parts(data=dp, broker=broker)


async def call(parts: Parts, key: int, version: int, req: Any, client: ClientInfo = CLIENT) -> Any:
    res = handlers(parts)[key](RequestHeader(key, version, 1, "t"), req, client)
    if isinstance(res, Deferred):
        res = await res
    return wire(res, key, version)


MODULES: dict[int, Any] = {m.API_KEY: m for m in (produce, fetch, share_fetch, share_acknowledge)}


def wire(res: Any, key: int, version: int) -> Any:
    """The answer as a client decodes it at ``version`` (the hints are on the wire)."""
    decoded, _ = MODULES[key].RESPONSE_DECODERS[version](encode_body(key, version, res), 0)
    return decoded


def produce_request(partition: int) -> produce.Request:
    batch = encode_batch(0, [(None, b"v")], timestamp_ms=0)
    data = [produce.PartitionProduceData(index=partition, records=batch)]
    return produce.Request(
        acks=-1,
        timeout_ms=1000,
        topic_data=[produce.TopicProduceData(name="t", partition_data=data)],
    )


def fetch_request(partition: int) -> fetch.Request:
    part = fetch.FetchPartition(partition=partition, fetch_offset=0, partition_max_bytes=1024)
    return fetch.Request(
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[fetch.FetchTopic(topic="t", topic_id=TOPIC_ID, partitions=[part])],
    )


async def test_produce_v10_names_the_other_workers_leader_and_endpoint(tmp_path: Path) -> None:
    parts = node(tmp_path, WorkerPlacement([ME, OTHER]))
    theirs = partition_of(1)
    res = await call(parts, produce.API_KEY, 12, produce_request(theirs))
    (pr,) = res.responses[0].partition_responses
    assert pr.error_code == NOT_LEADER
    assert (pr.current_leader.leader_id, pr.current_leader.leader_epoch) == (1, 0)
    assert res.node_endpoints == [produce.NodeEndpoint(1, "w1.example", 9093, "r1")]
    # The request's listener picks the address given.
    internal = ClientInfo("test", "127.0.0.1", 1, 1, listener="INTERNAL")
    res = await call(parts, produce.API_KEY, 10, produce_request(theirs), internal)
    assert res.node_endpoints == [produce.NodeEndpoint(1, "10.0.0.2", 19093, "r1")]


async def test_produce_before_v10_and_its_own_partitions_have_no_hint(tmp_path: Path) -> None:
    parts = node(tmp_path, WorkerPlacement([ME, OTHER]))
    res = await call(parts, produce.API_KEY, 9, produce_request(partition_of(1)))
    (pr,) = res.responses[0].partition_responses
    assert pr.error_code == NOT_LEADER
    assert pr.current_leader == produce.LeaderIdAndEpoch(-1, -1)
    assert res.node_endpoints == []
    res = await call(parts, produce.API_KEY, 12, produce_request(partition_of(0)))
    (pr,) = res.responses[0].partition_responses
    assert pr.error_code == ErrorCode.NO_ERROR
    assert pr.current_leader == produce.LeaderIdAndEpoch(-1, -1)
    assert res.node_endpoints == []


async def test_fetch_v16_by_topic_id_names_the_leader(tmp_path: Path) -> None:
    parts = node(tmp_path, WorkerPlacement([ME, OTHER]))
    theirs = partition_of(1)
    res = await call(parts, fetch.API_KEY, 17, fetch_request(theirs))
    (pd,) = res.responses[0].partitions
    assert pd.error_code == NOT_LEADER
    assert (pd.current_leader.leader_id, pd.current_leader.leader_epoch) == (1, 0)
    assert res.node_endpoints == [fetch.NodeEndpoint(1, "w1.example", 9093, "r1")]
    res = await call(parts, fetch.API_KEY, 15, fetch_request(theirs))
    (pd,) = res.responses[0].partitions
    assert pd.error_code == NOT_LEADER
    assert pd.current_leader == fetch.LeaderIdAndEpoch(-1, -1)
    assert res.node_endpoints == []


async def test_a_deferred_answer_is_hinted_before_the_transport_reads_it(tmp_path: Path) -> None:
    """acks=-1 naming a partition of each worker: the answer waits for this worker's fsync
    (a Deferred), and the other's partition is hinted in it by the time a callback added
    after the handler returned -- as the connection adds its own -- reads it."""
    parts = node(tmp_path, WorkerPlacement([ME, OTHER]))
    mine, theirs = partition_of(0), partition_of(1)
    req = produce_request(mine)
    req.topic_data[0].partition_data += produce_request(theirs).topic_data[0].partition_data
    res = handlers(parts)[produce.API_KEY](RequestHeader(produce.API_KEY, 12, 1, "t"), req, CLIENT)
    assert type(res) is Deferred
    seen: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    res.future.add_done_callback(lambda f: seen.set_result(wire(f.result(), produce.API_KEY, 12)))
    got = await seen
    by_index = {p.index: p for p in got.responses[0].partition_responses}
    assert by_index[mine].error_code == ErrorCode.NO_ERROR
    assert by_index[mine].current_leader == produce.LeaderIdAndEpoch(-1, -1)
    assert by_index[theirs].error_code == NOT_LEADER
    assert by_index[theirs].current_leader == produce.LeaderIdAndEpoch(1, 0)
    assert got.node_endpoints == [produce.NodeEndpoint(1, "w1.example", 9093, "r1")]


async def test_a_deferred_answer_cancelled_is_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The connection closed before the fsync: the answer's future is cancelled and the
    hints' callback does nothing (no error from it in the loop's log)."""
    parts = node(tmp_path, WorkerPlacement([ME, OTHER]))
    header = RequestHeader(produce.API_KEY, 12, 1, "t")
    res = handlers(parts)[produce.API_KEY](header, produce_request(partition_of(0)), CLIENT)
    assert type(res) is Deferred
    res.future.cancel()
    with pytest.raises(asyncio.CancelledError):
        await res.future
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


class Leaderless:
    """Cluster mode while no live node holds a partition's lease."""

    version = 0

    def nodes(self) -> list[NodeAddress]:
        return [ME, OTHER]

    def owner(self, topic: str, partition: int) -> NodeAddress | None:
        return ME if worker_of(topic, partition, 2) == 0 else None

    def leader_epoch(self, topic: str, partition: int) -> int:
        return 4

    def serves(self, topic: str, partition: int) -> bool:
        return self.owner(topic, partition) is ME


async def test_a_partition_without_a_leader_is_hinted_minus_one(tmp_path: Path) -> None:
    parts = node(tmp_path, Leaderless())
    res = await call(parts, produce.API_KEY, 12, produce_request(partition_of(1)))
    (pr,) = res.responses[0].partition_responses
    assert pr.error_code == NOT_LEADER
    assert pr.current_leader == produce.LeaderIdAndEpoch(-1, -1)
    assert res.node_endpoints == []


def share_hinted(key: int, answer: Any, tmp_path: Path) -> HandlerResult:
    parts = node(tmp_path, WorkerPlacement([ME, OTHER]))
    assert parts.broker is not None
    names = TopicNames(parts.broker.catalog, parts.broker.offsets_topic_id)
    handler = hinted(key, lambda h, r, c: answer, parts.broker.placement, names)
    return handler(RequestHeader(key, 1, 1, "t"), None, CLIENT)


def test_share_fetch_and_acknowledge_hint_not_leader_and_fenced(tmp_path: Path) -> None:
    theirs, mine = partition_of(1), partition_of(0)
    sf = share_fetch
    answer = sf.Response(
        responses=[
            sf.ShareFetchableTopicResponse(
                topic_id=TOPIC_ID,
                partitions=[
                    sf.PartitionData(partition_index=theirs, error_code=NOT_LEADER),
                    sf.PartitionData(
                        partition_index=mine, error_code=ErrorCode.FENCED_LEADER_EPOCH
                    ),
                    sf.PartitionData(partition_index=7, error_code=ErrorCode.NO_ERROR),
                ],
            )
        ]
    )
    res = wire(share_hinted(sf.API_KEY, answer, tmp_path), sf.API_KEY, 1)
    got = [
        (p.current_leader.leader_id, p.current_leader.leader_epoch)
        for p in res.responses[0].partitions
    ]
    assert got == [(1, 0), (0, 0), (0, 0)]  # the last untouched: the schema's default
    assert res.node_endpoints == [
        sf.NodeEndpoint(0, "w0.example", 9092, "r0"),
        sf.NodeEndpoint(1, "w1.example", 9093, "r1"),
    ]
    sa = share_acknowledge
    answer2 = sa.Response(
        responses=[
            sa.ShareAcknowledgeTopicResponse(
                topic_id=b"\x09" * 16,  # a topic deleted meanwhile: no leader known
                partitions=[sa.PartitionData(partition_index=0, error_code=NOT_LEADER)],
            )
        ]
    )
    res2 = wire(share_hinted(sa.API_KEY, answer2, tmp_path / "2"), sa.API_KEY, 1)
    assert res2.responses[0].partitions[0].current_leader == sa.LeaderIdAndEpoch(-1, -1)
    assert res2.node_endpoints == []
