"""The share state in cluster mode, in process: two nodes' share coordinators, each holding
some ``__share_group_state`` partitions (as their leases give them), reaching each other
through the inter-broker APIs (every request and answer through the generated codecs);
a state partition moving from one node to the other with its log; the leader-epoch and
state-epoch fencing of Kafka's ShareCoordinatorShard across that move."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from coordinator.catalog import TopicCatalog
from coordinator.config import Settings
from coordinator.dataplane import DataPlane
from coordinator.server.handler import Deferred
from coordinator.share.admin import ShareAdmin
from coordinator.share.coordinator import ShareCoordinator
from coordinator.share.leader import ShareLeaderConfig
from coordinator.share.partition import ACCEPT
from coordinator.share.persister import ACKNOWLEDGED, AVAILABLE, PersisterBatch, WriteRequest
from coordinator.share.remote import RemoteShareState
from coordinator.share.state_apis import ShareStateApis
from coordinator.share.state_shard import SHARE_STATE_TOPIC, topic_id_str
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import BY_KEY
from protocol.messages import describe_share_group_offsets as dsgo
from protocol.messages import read_share_group_state as read_m
from storage.interface import LogConfig
from storage.memory import MemoryDurability, MemoryLogs
from tests.support.sharepartkit import ShareNode, acquired, client, partitions

B = PersisterBatch
TOPIC = topic_id_str(bytes(range(16)))
N = 4  # state partitions


class Wire:
    """The PeerClient of every node: the request through its codec to the other node's
    handler, the answer back through its codec; a node that is down raises."""

    def __init__(self) -> None:
        self.nodes: dict[int, ShareStateApis] = {}
        self.down: set[int] = set()
        self.sent: list[tuple[int, int]] = []

    async def send(self, node_id: int, api_key: int, api_version: int, request: Any) -> Any:
        if node_id in self.down or node_id not in self.nodes:
            raise ConnectionError(f"node {node_id} is down")
        self.sent.append((node_id, api_key))
        m = BY_KEY[api_key]
        out = bytearray()
        m.REQUEST_ENCODERS[api_version](request, out)
        req, _ = m.REQUEST_DECODERS[api_version](bytes(out), 0)
        apis = self.nodes[node_id]
        handler = getattr(apis, _HANDLERS[api_key])
        header = RequestHeader(api_key, api_version, 1, "kgc-node")
        resp = await handler(header, req, client(1))
        out = bytearray()
        m.RESPONSE_ENCODERS[api_version](resp, out)
        return m.RESPONSE_DECODERS[api_version](bytes(out), 0)[0]


_HANDLERS = {
    83: "initialize_share_group_state",
    84: "read_share_group_state",
    85: "write_share_group_state",
    86: "delete_share_group_state",
    87: "read_share_group_state_summary",
}


class Cluster:
    """Two nodes over one set of logs (the database), each state partition leased to one."""

    def __init__(self) -> None:
        self.logs = MemoryLogs()
        self.wire = Wire()
        self.owner: dict[int, int] = {}
        self.node: dict[int, ShareCoordinator] = {}
        for node_id in (1, 2):
            sc = ShareCoordinator(
                self.logs,
                MemoryDurability(),
                num_partitions=N,
                updates_per_snapshot=3,
                log_config=LogConfig(),
                hosted=False,
            )
            sc.remote = RemoteShareState(self.wire, self.owner.get, node_id)
            sc.retry_backoff_ms = sc.retry_backoff_max_ms = 1
            self.node[node_id] = sc
            self.wire.nodes[node_id] = ShareStateApis(sc)

    async def lease(self, p: int, node_id: int) -> None:
        """``p``'s lease to ``node_id``: its old holder stops, the new one loads the log."""
        old = self.owner.get(p)
        if old is not None:
            self.node[old].release(p)
        self.owner[p] = node_id
        plog = self.logs.get_or_create(SHARE_STATE_TOPIC, p, LogConfig())
        await self.node[node_id].acquire(p, plog)

    def state_partition(self, partition: int) -> int:
        return self.node[1].partition_of("g", TOPIC, partition)


async def test_a_key_held_by_another_node_is_served_there_through_the_apis() -> None:
    c = Cluster()
    p = c.state_partition(0)
    await c.lease(p, 2)
    assert await c.node[1].initialize("g", TOPIC, [0], 1, 10) == {0: ErrorCode.NO_ERROR}
    assert (2, 83) in c.wire.sent
    # Node 2 holds it: its own calls stay local and see what node 1 wrote.
    assert await c.node[2].read_summary("g", TOPIC, [0]) == {0: (ErrorCode.NO_ERROR, 1, 10)}
    write = WriteRequest(0, 1, 3, 10, -1, [B(10, 14, ACKNOWLEDGED, 1), B(15, 19, AVAILABLE, 2)])
    assert await c.node[1].write_state("g", TOPIC, write) == ErrorCode.NO_ERROR
    got = await c.node[1].read_state("g", TOPIC, 0, 3)
    assert got.error == ErrorCode.NO_ERROR
    assert (got.state_epoch, got.start_offset) == (1, 10)
    assert got.batches == (B(10, 14, ACKNOWLEDGED, 1), B(15, 19, AVAILABLE, 2))
    full = await c.node[1].read_summaries("g", TOPIC, [0])
    assert full[0][:4] == (ErrorCode.NO_ERROR, 1, 3, 10)
    assert await c.node[1].delete("g", TOPIC, [0]) == {0: ErrorCode.NO_ERROR}
    assert await c.node[2].read_summary("g", TOPIC, [0]) == {0: (ErrorCode.NO_ERROR, -1, -1)}


async def test_an_older_leader_is_fenced_across_nodes() -> None:
    """testWriteStateLeaderEpochFenced / state epoch: the new share-partition leader read
    with its leader epoch; the old leader's write with its older one is refused, as is a
    write at an older state epoch, whichever node sends it."""
    c = Cluster()
    p = c.state_partition(0)
    await c.lease(p, 1)
    assert await c.node[2].initialize("g", TOPIC, [0], 2, 0) == {0: ErrorCode.NO_ERROR}
    assert (await c.node[2].read_state("g", TOPIC, 0, 4)).error == ErrorCode.NO_ERROR
    # The data partition moved: its new leader reads at leader epoch 5.
    assert (await c.node[1].read_state("g", TOPIC, 0, 5)).error == ErrorCode.NO_ERROR
    old = WriteRequest(0, 2, 4, -1, -1, [B(0, 4, ACKNOWLEDGED, 1)])
    assert await c.node[2].write_state("g", TOPIC, old) == ErrorCode.FENCED_LEADER_EPOCH
    assert (await c.node[2].read_state("g", TOPIC, 0, 4)).error == ErrorCode.FENCED_LEADER_EPOCH
    stale = WriteRequest(0, 1, 5, -1, -1, [B(0, 4, ACKNOWLEDGED, 1)])
    assert await c.node[2].write_state("g", TOPIC, stale) == ErrorCode.FENCED_STATE_EPOCH
    # Nothing fenced reached the state: the new leader still reads no batches.
    got = await c.node[1].read_state("g", TOPIC, 0, 5)
    assert got.error == ErrorCode.NO_ERROR and got.batches == ()


async def test_a_state_partition_moves_with_its_lease_and_is_rebuilt_by_replay() -> None:
    c = Cluster()
    p = c.state_partition(1)
    await c.lease(p, 1)
    assert await c.node[1].initialize("g", TOPIC, [1], 1, 0) == {1: ErrorCode.NO_ERROR}
    for i in range(5):  # updates and, every third, a snapshot
        w = WriteRequest(1, 1, 7, -1, -1, [B(i, i, ACKNOWLEDGED, 1)])
        assert await c.node[1].write_state("g", TOPIC, w) == ErrorCode.NO_ERROR
    before = await c.node[1].read_state("g", TOPIC, 1, 7)
    await c.lease(p, 2)
    # The old holder answers NOT_COORDINATOR to requests for it, and sends its own calls on.
    req = read_m.Request(
        group_id="g",
        topics=[
            read_m.ReadStateData(topic_id=bytes(range(16)), partitions=[read_m.PartitionData(1, 7)])
        ],
    )
    header = RequestHeader(84, 0, 1, "kgc-node")
    refused = await c.wire.nodes[1].read_share_group_state(header, req, client(1))
    assert refused.results[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
    assert await c.node[1].read_state("g", TOPIC, 1, 7) == before
    assert await c.node[2].read_state("g", TOPIC, 1, 7) == before
    assert before.batches == (B(0, 4, ACKNOWLEDGED, 1),)


async def test_retriable_errors_are_retried_until_the_holder_answers() -> None:
    """No holder yet (a failover): Kafka's persister retries; the holder appears meanwhile."""
    c = Cluster()
    p = c.state_partition(2)
    sc = c.node[1]
    sc.retry_attempts = 50
    leased: list[asyncio.Task[None]] = []
    asyncio.get_running_loop().call_later(
        0.02, lambda: leased.append(asyncio.ensure_future(c.lease(p, 2)))
    )
    assert await sc.initialize("g", TOPIC, [2], 1, 0) == {2: ErrorCode.NO_ERROR}
    assert leased and (2, 83) in c.wire.sent
    # Given up after the attempts: the last retriable error is the answer.
    q = c.state_partition(3)
    sc.retry_attempts = 3
    c.owner[q] = 2
    c.wire.down.add(2)
    assert await sc.initialize("g", TOPIC, [3], 1, 0) == {3: ErrorCode.COORDINATOR_NOT_AVAILABLE}
    c.owner[q] = 1  # leased here but not loaded yet
    assert await sc.initialize("g", TOPIC, [3], 1, 0) == {3: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


async def test_empty_requests_get_empty_answers_as_kafka() -> None:
    c = Cluster()
    header = RequestHeader(84, 0, 1, "kgc-node")
    apis = c.wire.nodes[1]
    for req in (
        read_m.Request(group_id="g", topics=[]),
        read_m.Request(
            group_id="", topics=[read_m.ReadStateData(partitions=[read_m.PartitionData()])]
        ),
        read_m.Request(group_id="g", topics=[read_m.ReadStateData(partitions=[])]),
    ):
        assert (await apis.read_share_group_state(header, req, client(1))).results == []


async def test_describe_share_group_offsets_asks_the_state_holder_and_the_leader(
    tmp_path: Path,
) -> None:
    """DescribeShareGroupOffsets at a group coordinator that neither holds the key's state
    partition nor leads the data partition: the summary comes from the state holder
    (ReadShareGroupStateSummary), the lag from the leader's high watermark."""
    c = Cluster()
    settings = Settings(data_dir=tmp_path)
    catalog = TopicCatalog(tmp_path / "topics.json")
    info = catalog.create("t", 2, {})
    tid = topic_id_str(info.topic_id)
    data = DataPlane(settings, catalog, MemoryLogs(), MemoryDurability(), hosted=False)
    asked: list[tuple[str, int]] = []

    async def latest(topic: str, partition: int) -> tuple[ErrorCode, int]:
        asked.append((topic, partition))
        return (
            (ErrorCode.NO_ERROR, 100)
            if partition == 0
            else (ErrorCode.NOT_LEADER_FOR_PARTITION, -1)
        )

    for q in (0, 1):
        await c.lease(c.node[1].partition_of("g", tid, q), 2)
    assert await c.node[1].initialize("g", tid, [0, 1], 1, 10) == {0: 0, 1: 0}
    w = WriteRequest(0, 1, 0, 10, 5, [B(10, 14, ACKNOWLEDGED, 1)])
    assert await c.node[1].write_state("g", tid, w) == ErrorCode.NO_ERROR
    admin = ShareAdmin(c.node[1], data, catalog, latest=latest)
    req = dsgo.Request(
        groups=[
            dsgo.DescribeShareGroupOffsetsRequestGroup(
                group_id="g",
                topics=[
                    dsgo.DescribeShareGroupOffsetsRequestTopic(topic_name="t", partitions=[0, 1])
                ],
            )
        ]
    )
    res = admin.describe_share_group_offsets(None, RequestHeader(90, 1, 1, "c"), req, client(1))
    assert isinstance(res, Deferred)
    (topic,) = (await res).groups[0].topics
    p0, p1 = topic.partitions
    assert (p0.start_offset, p0.lag, p0.error_code) == (10, 100 - 10 - 5, 0)
    # The leader could not answer: the partition carries its error, the lag unknown.
    assert (p1.start_offset, p1.lag, p1.error_code) == (10, -1, ErrorCode.NOT_LEADER_FOR_PARTITION)
    assert asked == [("t", 0), ("t", 1)]


async def test_pruning_bounds_the_replay_of_a_moved_partition() -> None:
    """The holder's pruning moves the state partition's log start below its snapshots; the
    next holder replays from there to the same state."""
    c = Cluster()
    p = c.state_partition(0)
    await c.lease(p, 1)
    assert await c.node[2].initialize("g", TOPIC, [0], 1, 0) == {0: ErrorCode.NO_ERROR}
    for i in range(8):
        w = WriteRequest(0, 1, 2, i, -1, [B(i, i, ACKNOWLEDGED, 1)])
        assert await c.node[2].write_state("g", TOPIC, w) == ErrorCode.NO_ERROR
    before = await c.node[2].read_state("g", TOPIC, 0, 2)
    await c.node[2].prune()  # holds nothing: nothing to prune there
    await c.node[1].prune()
    plog = c.logs.get(SHARE_STATE_TOPIC, p)
    assert plog is not None and plog.log_start_offset > 0
    await c.lease(p, 2)
    assert await c.node[1].read_state("g", TOPIC, 0, 2) == before


async def test_a_lost_data_lease_drops_the_share_partition_at_once(tmp_path: Path) -> None:
    """Cluster mode: the data partition's lease goes while a fetch waits on it and another
    member holds records. The share partition is dropped at once (not at the next fetch):
    the waiting fetch answers NOT_LEADER_OR_FOLLOWER now, the lock timer stops, and the
    lease's next holder reads the persisted state, where the held records are available."""
    node = ShareNode(tmp_path / "data", ShareLeaderConfig(record_lock_duration_ms=60000))
    try:
        info = node.create("t", 1)
        await node.initialize("g", info, 0)
        await node.produce("t", 0, 10)
        plog = node.logs.get("t", 0)
        assert plog is not None
        node.dp.hosted = False  # the lease holder of t-0, at leader epoch 3
        node.dp.acquire(info, plog, 3)
        r = await node.fetch("g", "a", 0, [(info, 0)])
        assert acquired(r) == [(0, 9, 1)]
        r = await node.fetch("g", "a", 1, acks=[(info, 0, [(0, 1, [ACCEPT])])])
        assert partitions(r)[0].acknowledge_error_code == 0
        key = ("g", info.topic_id, 0)
        entry = node.leader.served[key]
        assert entry.timer is not None
        waiting = asyncio.ensure_future(
            node.fetch("g", "b", 0, [(info, 0)], max_wait_ms=30000, conn=2)
        )
        await asyncio.sleep(0)
        while not entry.waiters:  # parked on the share partition
            await asyncio.sleep(0.001)
        node.dp.release(plog)  # the lease went
        assert key not in node.leader.served and entry.fenced and entry.timer is None
        r = await asyncio.wait_for(waiting, 5)
        p = partitions(r)[0]
        assert (p.error_code, p.acquired_records) == (ErrorCode.NOT_LEADER_FOR_PARTITION, [])
        # Not led here now: a new fetch is refused the same way.
        r = await node.fetch("g", "b", 1, conn=2)
        assert partitions(r)[0].error_code == ErrorCode.NOT_LEADER_FOR_PARTITION
        # The lease back (the next holder, epoch 4): what "a" held goes to "b" at once, not
        # after a's lock; its acquisition was never persisted, so its count starts again.
        node.dp.acquire(info, plog, 4)
        r = await node.fetch("g", "b", 2, conn=2)
        assert acquired(r) == [(2, 9, 1)]
        assert node.leader.served[key].leader_epoch == 4
    finally:
        await node.close()


async def test_calls_to_one_holder_in_one_turn_go_as_one_request() -> None:
    """As Kafka's persister batches per node: the keys of one group whose state partitions
    node 2 holds, asked for together, reach it as one request per API with every answer
    back in its place; a key asked twice in one turn goes in a second request."""
    c = Cluster()
    for p in range(N):
        await c.lease(p, 2)
    node = c.node[1]
    before = len(c.wire.sent)
    parts = list(range(8))
    got = await node.initialize("g", TOPIC, parts, 1, 10)
    assert got == {q: ErrorCode.NO_ERROR for q in parts}
    assert c.wire.sent[before:] == [(2, 83)]
    writes = [
        node.write_state(
            "g", TOPIC, WriteRequest(q, 1, 3, -1, -1, [B(10, 10 + q, ACKNOWLEDGED, 1)])
        )
        for q in parts
    ]
    assert await asyncio.gather(*writes) == [ErrorCode.NO_ERROR] * 8
    assert c.wire.sent[before + 1 :] == [(2, 85)]
    summaries = await node.read_summaries("g", TOPIC, parts)
    assert [summaries[q][:4] for q in parts] == [(ErrorCode.NO_ERROR, 1, 3, 10)] * 8
    reads = await asyncio.gather(*(node.read_state("g", TOPIC, q, 3) for q in parts))
    assert [r.batches for r in reads] == [(B(10, 10 + q, ACKNOWLEDGED, 1),) for q in parts]
    assert c.wire.sent[before + 2 :] == [(2, 87), (2, 84)]
    # The same key twice in one turn: two requests, applied in order.
    twice = [
        node.write_state("g", TOPIC, WriteRequest(0, 1, 3, -1, -1, [B(11, 11, ACKNOWLEDGED, 1)])),
        node.write_state("g", TOPIC, WriteRequest(0, 1, 3, -1, -1, [B(12, 12, ACKNOWLEDGED, 1)])),
    ]
    assert await asyncio.gather(*twice) == [ErrorCode.NO_ERROR] * 2
    assert c.wire.sent[before + 4 :] == [(2, 85), (2, 85)]
    got_read = await node.read_state("g", TOPIC, 0, 3)
    assert got_read.batches == (B(10, 12, ACKNOWLEDGED, 1),)
    # A holder that cannot be reached fails every call of the batch alike.
    c.wire.down.add(2)
    node.retry_attempts = 1
    got = await node.initialize("g", TOPIC, [0, 1], 2, 10)
    assert got == {0: ErrorCode.COORDINATOR_NOT_AVAILABLE, 1: ErrorCode.COORDINATOR_NOT_AVAILABLE}
