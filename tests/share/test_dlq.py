"""Share groups' dead letters (KIP-1191): the ARCHIVING state of the pure share partition,
and the leader copying rejected and exhausted records to the group's dead-letter topic over
the in-memory engine -- headers, copied key and value, the topic checks (prefix, the topic's
errors.deadletterqueue.group.enable, auto-creation), archiving regardless of a failed copy,
a copy interrupted by a restart resumed from the persisted ARCHIVING state, and, in cluster
mode, a copy sent to the node leading the dead-letter partition (through the Produce codecs),
retried with the leader looked up again while that node does not answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.sharepartkit import ShareNode, acquired, client, partitions

from coordinator.catalog import TopicInfo
from coordinator.server.handler import Deferred
from coordinator.share.leader import ShareLeaderConfig
from coordinator.share.partition import ACCEPT, REJECT, RELEASE, DeadLetter, SharePartition
from coordinator.share.persister import ARCHIVED, ARCHIVING, AVAILABLE, PersisterBatch
from coordinator.share.remote import RemoteShareState
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import produce
from storage.record_batch import decode_records, iter_batches

G = "g"
LOCK = 30000
DLQ = "dlq.g"


# -- the pure share partition
def test_reject_with_dlq_goes_archiving_and_holds_spso() -> None:
    sp = SharePartition(0, dlq=True)
    sp.acquire("m1", [(0, 4)], 500, 500, 0, LOCK)
    err, changes = sp.acknowledge("m1", [(0, 1, [REJECT]), (2, 4, [ACCEPT])])
    assert err == ErrorCode.NO_ERROR
    assert changes == [PersisterBatch(0, 1, ARCHIVING, 1), PersisterBatch(2, 4, 2, 1)]
    assert sp.take_archiving() == []  # not durable yet
    sp.commit(changes)
    assert sp.start_offset == 0  # ARCHIVING is not terminal
    assert sp.take_archiving() == [DeadLetter(0, 1, 1, True)]
    assert sp.take_archiving() == []  # handed out once
    assert sp.archived(0, 1) == [PersisterBatch(0, 1, ARCHIVED, 1)]
    assert sp.start_offset == 5


def test_delivery_limit_with_dlq_goes_archiving_without_dlq_archived() -> None:
    for dlq, state in ((True, ARCHIVING), (False, ARCHIVED)):
        sp = SharePartition(0, delivery_count_limit=2, dlq=dlq)
        sp.acquire("m1", [(0, 1)], 500, 500, 0, LOCK)
        assert sp.expire(LOCK) == [PersisterBatch(0, 1, AVAILABLE, 1)]
        sp.acquire("m1", [(0, 1)], 500, 500, LOCK, LOCK)
        err, changes = sp.acknowledge("m1", [(0, 0, [RELEASE])])
        assert err == ErrorCode.NO_ERROR
        sp.commit(changes)
        assert changes == [PersisterBatch(0, 0, state, 2)]
        assert sp.release_member("m1") == [PersisterBatch(1, 1, state, 2)]
        expected = [DeadLetter(0, 1, 2, False)] if dlq else []
        assert sp.take_archiving() == expected
        assert sp.start_offset == (0 if dlq else 2)


def test_loaded_archiving_is_resumed_with_its_cause() -> None:
    sp = SharePartition(
        0,
        [PersisterBatch(0, 1, ARCHIVING, 1), PersisterBatch(2, 2, ARCHIVING, 5)],
        delivery_count_limit=5,
    )
    assert sp.take_archiving() == [DeadLetter(0, 1, 1, True), DeadLetter(2, 2, 5, False)]
    assert sp.fetch_offset() == 3  # never acquired again
    sp.archived(0, 2)
    assert sp.start_offset == 3


# -- the leader writing dead letters
@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[ShareNode]:
    n = ShareNode(tmp_path / "data", ShareLeaderConfig(delivery_count_limit=2))
    yield n
    await n.close()


async def settle(node: ShareNode) -> None:
    """Until the leader's background writes (dead letters, their archiving) are done."""
    while node.leader.background:
        await asyncio.gather(*list(node.leader.background), return_exceptions=True)


def letters(node: ShareNode, info: TopicInfo, partition: int = 0) -> list[tuple]:  # type: ignore[type-arg]
    """(offset, key, value, headers) of a topic partition's records."""
    plog, _ = node.dp.served_log(info, partition)
    assert plog is not None
    data = plog.read(0, 1 << 20)
    out = []
    for h, start, end in iter_batches(data):
        for r in decode_records(data[start:end]):
            out.append((h.base_offset + r.offset_delta, r.key, r.value, dict(r.headers)))
    return out


async def _setup(node: ShareNode, configs: dict[str, str], *, dlq_partitions: int = 1) -> TopicInfo:
    if dlq_partitions:
        node.create(DLQ, dlq_partitions, {"errors.deadletterqueue.group.enable": "true"})
    info = node.create("t", 1)
    await node.initialize(G, info, 0)
    await node.produce("t", 0, 4)
    node.group_configs.configs[G] = configs
    return info


async def test_rejected_record_copied_with_headers_then_archived(node: ShareNode) -> None:
    info = await _setup(
        node,
        {
            "errors.deadletterqueue.topic.name": DLQ,
            "errors.deadletterqueue.copy.record.enable": "true",
        },
    )
    r = await node.fetch(G, "m1", 0, [(info, 0)])
    assert acquired(r) == [(0, 3, 1)]
    acks = [(info, 0, [(0, 0, [ACCEPT]), (1, 2, [REJECT]), (3, 3, [ACCEPT])])]
    r = await node.acknowledge(G, "m1", 1, acks)
    assert r.responses[0].partitions[0].error_code == 0
    await settle(node)
    dlq = node.catalog.get(DLQ)
    assert dlq is not None
    got = letters(node, dlq)
    assert [(o, k, v) for o, k, v, _ in got] == [(0, None, b"v1"), (1, None, b"v2")]
    assert got[0][3] == {
        "__dlq.errors.topic": b"t",
        "__dlq.errors.partition": b"0",
        "__dlq.errors.offset": b"1",
        "__dlq.errors.group": G.encode(),
        "__dlq.errors.delivery.count": b"1",
        "__dlq.errors.message": b"Offset rejected by client.",
    }
    served = node.leader.loaded((G, info.topic_id, 0))
    assert served is not None and served.sp is not None
    assert served.sp.start_offset == 4  # archived after the copy
    # the archiving is durable: a restart finds nothing to resume
    await node.restart()
    r = await node.fetch(G, "m2", 0, [(info, 0)])
    await settle(node)
    assert len(letters(node, dlq)) == 2


async def test_delivery_limit_copies_headers_only_to_partition_modulo(node: ShareNode) -> None:
    node.create(DLQ, 3, {"errors.deadletterqueue.group.enable": "true"})
    info = node.create("t", 2)
    await node.initialize(G, info, 0)
    await node.produce("t", 1, 2)
    node.group_configs.configs[G] = {"errors.deadletterqueue.topic.name": DLQ}
    epoch = 0
    for count in (1, 2):
        r = await node.fetch(G, "m1", epoch, [(info, 1)] if epoch == 0 else None)
        assert acquired(r) == [(0, 1, count)]
        r = await node.acknowledge(G, "m1", epoch + 1, [(info, 1, [(0, 1, [RELEASE])])])
        epoch += 2
    await settle(node)
    dlq = node.catalog.get(DLQ)
    assert dlq is not None
    got = letters(node, dlq, 1)  # source partition 1 % 3
    assert [(k, v) for _, k, v, _ in got] == [(None, None), (None, None)]
    assert got[1][3]["__dlq.errors.offset"] == b"1"
    assert got[1][3]["__dlq.errors.delivery.count"] == b"2"
    assert got[1][3]["__dlq.errors.message"] == b"Offset delivery count exceeded the threshold."


@pytest.mark.parametrize(
    ("name", "enable", "auto_create", "written"),
    [
        (DLQ, "false", False, False),  # the topic does not allow dead letters
        ("dead.g", "true", False, False),  # no dlq. prefix
        ("dlq.new", None, False, False),  # missing, auto-creation off
        ("dlq.new", None, True, True),  # missing, auto-created
    ],
)
async def test_topic_checks_archive_regardless(
    node: ShareNode, name: str, enable: str | None, auto_create: bool, written: bool
) -> None:
    node.dlq_auto_create = auto_create
    await node.restart()
    if enable is not None:
        node.create(name, 1, {"errors.deadletterqueue.group.enable": enable})
    info = await _setup(node, {"errors.deadletterqueue.topic.name": name}, dlq_partitions=0)
    await node.fetch(G, "m1", 0, [(info, 0)])
    await node.acknowledge(G, "m1", 1, [(info, 0, [(0, 3, [REJECT])])])
    await settle(node)
    served = node.leader.loaded((G, info.topic_id, 0))
    assert served is not None and served.sp is not None and served.sp.start_offset == 4
    dlq = node.catalog.get(name)
    assert (dlq is not None and len(letters(node, dlq)) == 4) == written
    if auto_create:
        assert dlq is not None and dlq.configs == {
            "errors.deadletterqueue.group.enable": "true",
            "message.timestamp.type": "CreateTime",
        }


async def test_copy_interrupted_by_restart_is_resumed(node: ShareNode) -> None:
    info = await _setup(node, {"errors.deadletterqueue.topic.name": DLQ})
    stuck = asyncio.Event()

    async def never(*args: object) -> bool:
        stuck.set()
        await asyncio.Event().wait()
        return False

    node.leader.dead_letters.write = never  # type: ignore[method-assign,assignment]
    await node.fetch(G, "m1", 0, [(info, 0)])
    r = await node.acknowledge(G, "m1", 1, [(info, 0, [(2, 2, [REJECT])])])
    assert r.responses[0].partitions[0].error_code == 0
    await stuck.wait()
    await node.restart()  # the copy never happened; ARCHIVING is durable
    r = await node.fetch(G, "m2", 0, [(info, 0)])
    assert acquired(r) == [(0, 1, 1), (3, 3, 1)]  # never delivered again
    await settle(node)
    dlq = node.catalog.get(DLQ)
    assert dlq is not None
    assert [o for _, _, _, h in letters(node, dlq) for o in [h["__dlq.errors.offset"]]] == [b"2"]
    assert partitions(r)[0].error_code == 0


async def test_copy_finishing_after_unload_is_archived_once(node: ShareNode) -> None:
    info = await _setup(node, {"errors.deadletterqueue.topic.name": DLQ})
    release = asyncio.Event()
    write = node.leader.dead_letters.write

    async def held(*args: object) -> bool:
        await release.wait()
        return await write(*args)  # type: ignore[arg-type]

    node.leader.dead_letters.write = held  # type: ignore[method-assign,assignment]
    await node.fetch(G, "m1", 0, [(info, 0)])
    await node.acknowledge(G, "m1", 1, [(info, 0, [(0, 3, [REJECT])])])
    await node.fetch(G, "m1", -1)  # the group's last session ends: its partitions unloaded
    assert node.leader.loaded((G, info.topic_id, 0)) is None
    release.set()
    await settle(node)
    r = await node.fetch(G, "m2", 0, [(info, 0)])  # loaded again: nothing left to resume
    await settle(node)
    assert acquired(r) == []
    dlq = node.catalog.get(DLQ)
    assert dlq is not None and len(letters(node, dlq)) == 4


class ProduceWire:
    """The inter-broker client: a Produce through its codecs to the other node's data
    plane, the answer back through them; a node not in ``nodes`` does not answer."""

    def __init__(self, nodes: dict[int, ShareNode]) -> None:
        self.nodes = nodes
        self.sent: list[int] = []

    async def send(self, node_id: int, api_key: int, api_version: int, request: Any) -> Any:
        assert api_key == produce.API_KEY
        self.sent.append(node_id)
        if node_id not in self.nodes:
            raise ConnectionError(f"node {node_id} is down")
        out = bytearray()
        produce.REQUEST_ENCODERS[api_version](request, out)
        req, _ = produce.REQUEST_DECODERS[api_version](bytes(out), 0)
        header = RequestHeader(api_key, api_version, 1, "kgc-node")
        res = self.nodes[node_id].dp.produce_checked(header, req, client(1), 0, None)
        if isinstance(res, Deferred):
            res = await res
        assert isinstance(res, produce.Response)
        out = bytearray()
        produce.RESPONSE_ENCODERS[api_version](res, out)
        return produce.RESPONSE_DECODERS[api_version](bytes(out), 0)[0]


async def test_copy_goes_to_the_dead_letter_partitions_leader(
    node: ShareNode, tmp_path: Path
) -> None:
    other = ShareNode(tmp_path / "other")
    try:
        other.create(DLQ, 1, {"errors.deadletterqueue.group.enable": "true"})
        info = await _setup(node, {"errors.deadletterqueue.topic.name": DLQ})
        wire = ProduceWire({2: other})
        leaders = [3, 2]  # node 3 (gone) first, then the partition moved to node 2

        def leader_of(topic: str, partition: int) -> int:
            assert (topic, partition) == (DLQ, 0)
            return leaders.pop(0) if len(leaders) > 1 else leaders[0]

        remote = RemoteShareState(wire, lambda p: None, 1, leader_of=leader_of)
        writer = node.leader.dead_letters
        writer.remote = lambda: remote
        writer.backoff_ms = 0
        await node.fetch(G, "m1", 0, [(info, 0)])
        await node.acknowledge(G, "m1", 1, [(info, 0, [(1, 2, [REJECT])])])
        await settle(node)
        assert wire.sent == [3, 2]
        here, there = node.catalog.get(DLQ), other.catalog.get(DLQ)
        assert here is not None and there is not None
        assert letters(node, here) == []  # not appended by this node
        got = letters(other, there)
        assert [(o, h["__dlq.errors.offset"]) for o, _, _, h in got] == [(0, b"1"), (1, b"2")]
        assert got[0][3]["__dlq.errors.message"] == b"Offset rejected by client."
        served = node.leader.loaded((G, info.topic_id, 0))
        assert served is not None and served.sp is not None
        assert served.sp.archived(1, 2) == []  # archived already, after the copy
    finally:
        await other.close()


class LosingWire(ProduceWire):
    """A Produce the other node appends, but whose answer is lost the first ``lose`` times."""

    def __init__(self, nodes: dict[int, ShareNode], lose: int) -> None:
        super().__init__(nodes)
        self.lose = lose

    async def send(self, node_id: int, api_key: int, api_version: int, request: Any) -> Any:
        answer = await super().send(node_id, api_key, api_version, request)
        if self.lose > 0:
            self.lose -= 1
            raise TimeoutError("the answer was lost")
        return answer


async def test_a_copy_sent_again_after_a_lost_answer_is_written_once(
    node: ShareNode, tmp_path: Path
) -> None:
    """The writer is an idempotent producer: the leader appended the batch but its answer
    was lost; the retry carries the same producer id and sequence, so the leader answers
    it as a duplicate and the dead-letter partition holds each copy once. The next copy
    to that partition follows with the next sequence."""
    other = ShareNode(tmp_path / "other")
    try:
        other.create(DLQ, 1, {"errors.deadletterqueue.group.enable": "true"})
        info = await _setup(node, {"errors.deadletterqueue.topic.name": DLQ})
        wire = LosingWire({2: other}, lose=1)
        remote = RemoteShareState(wire, lambda p: None, 1, leader_of=lambda t, p: 2)
        writer = node.leader.dead_letters
        writer.remote = lambda: remote
        writer.backoff_ms = 0
        await node.fetch(G, "m1", 0, [(info, 0)])
        await node.acknowledge(G, "m1", 1, [(info, 0, [(1, 2, [REJECT])])])
        await settle(node)
        await node.acknowledge(G, "m1", 2, [(info, 0, [(3, 3, [REJECT])])])
        await settle(node)
        assert wire.sent == [2, 2, 2]  # the first batch twice, then the second
        there = other.catalog.get(DLQ)
        assert there is not None
        got = letters(other, there)
        assert [(o, h["__dlq.errors.offset"]) for o, _, _, h in got] == [
            (0, b"1"),
            (1, b"2"),
            (2, b"3"),
        ]
        plog, _ = other.dp.served_log(there, 0)
        assert plog is not None
        data = plog.read(0, 1 << 20)
        heads = [(h.producer_id, h.base_sequence) for h, _, _ in iter_batches(data)]
        pid = heads[0][0]
        assert pid >= 0 and heads == [(pid, 0), (pid, 2)]
    finally:
        await other.close()
