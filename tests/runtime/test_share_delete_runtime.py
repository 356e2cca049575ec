"""DeleteGroups of a share group through the API table and the runtime, on the in-memory
engine: the group's topics are written *deleting* (durable) before the share coordinator
is asked to delete their state; when it refuses, the group answers that error and stays,
*deleting*, through a crash and replay; the next DeleteGroups deletes every partition of
those topics again, then the group (Kafka's deleteShareGroups)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from coordinator.group.topics import StaticTopics
from coordinator.runtime import GroupRuntime
from protocol.errors import ErrorCode
from protocol.messages import delete_groups as dg
from protocol.messages import share_group_heartbeat as sgh
from storage.interface import kafka_uuid
from storage.memory import MemoryDurability, MemoryLogs
from tests.support.runtimekit import call, started

G, MEMBER = "g", "m" * 22


class Persister:
    """The share coordinator's answers: initialize succeeds; delete refuses while
    ``refuse`` is set; every delete asked is kept."""

    def __init__(self) -> None:
        self.refuse = True
        self.deleted: list[tuple[str, str, list[int]]] = []

    async def initialize(
        self, group_id: str, topic_id: str, partitions: Sequence[int], epoch: int, start: int
    ) -> dict[int, ErrorCode]:
        return dict.fromkeys(partitions, ErrorCode.NO_ERROR)

    async def delete(
        self, group_id: str, topic_id: str, partitions: Sequence[int]
    ) -> dict[int, ErrorCode]:
        self.deleted.append((group_id, topic_id, list(partitions)))
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE if self.refuse else ErrorCode.NO_ERROR
        return dict.fromkeys(partitions, code)


def _topics() -> StaticTopics:
    topics = StaticTopics()
    topics.add("foo", 2)
    return topics


async def _heartbeat(rt: GroupRuntime, epoch: int) -> sgh.ShareGroupHeartbeatResponse:
    req = sgh.ShareGroupHeartbeatRequest(
        group_id=G, member_id=MEMBER, member_epoch=epoch, subscribed_topic_names=["foo"]
    )
    resp: sgh.ShareGroupHeartbeatResponse = await call(rt, sgh.API_KEY, 1, req)
    return resp


async def test_a_refused_share_state_delete_leaves_the_group_deleting_through_a_crash() -> None:
    topics = _topics()
    foo = topics.topic("foo")
    assert foo is not None
    logs, persister = MemoryLogs(), Persister()
    rt = await started(logs, MemoryDurability(), topics=topics)
    rt.share_persister = persister
    assert (await _heartbeat(rt, 0)).error_code == 0
    async with asyncio.timeout(5):  # the deferred initialization (share_init) writes back
        while foo.topic_id not in rt.shard.share.groups[G].initialized:
            await asyncio.sleep(0.01)
    assert (await _heartbeat(rt, -1)).member_epoch == -1
    resp = await call(rt, dg.API_KEY, 2, dg.Request(groups_names=[G]))
    assert [(r.group_id, r.error_code) for r in resp.results] == [
        (G, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    ]
    assert persister.deleted == [(G, kafka_uuid(foo.topic_id), [0, 1])]
    group = rt.shard.share.groups[G]
    assert (group.initialized, group.deleting) == ({}, {foo.topic_id: "foo"})
    # The crash: a new runtime replays the durable log.
    rt2 = await started(logs.reopen(), MemoryDurability(), topics=_topics())
    rt2.share_persister = persister
    group = rt2.shard.share.groups[G]
    assert (group.initializing, group.initialized) == ({}, {})
    assert group.deleting == {foo.topic_id: "foo"}
    persister.refuse = False
    resp = await call(rt2, dg.API_KEY, 2, dg.Request(groups_names=[G]))
    assert [(r.group_id, r.error_code) for r in resp.results] == [(G, 0)]
    assert persister.deleted[-1] == (G, kafka_uuid(foo.topic_id), [0, 1])
    assert G not in rt2.shard.share.groups
