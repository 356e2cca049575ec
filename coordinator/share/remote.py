"""The share coordinator's inter-broker APIs, as a client: state partitions held by another node.

How this works: in cluster mode each ``__share_group_state`` partition is leased to one node
(``coordinator/cluster``). When a share-partition leader or the group coordinator needs a
key whose state partition another node holds, ``ShareCoordinator`` hands the call to
``RemoteShareState``, which sends Kafka's request for that one partition
(InitializeShareGroupState 83, ReadShareGroupState 84, WriteShareGroupState 85,
DeleteShareGroupState 86, ReadShareGroupStateSummary 87) to the lease holder through the
node-to-node client and reads the partition's answer back into the persister's shapes.

The same client sends a share group's dead letters to the leader of the dead-letter
partition when another node leads it (``produce``: one acks=-1 Produce, as the local
append; ``coordinator/share/dlq.py`` retries what it refuses or never answers).

Calls made in the same turn of the event loop for one holder, API and group go out as one
request (as Kafka's persister batches per node): their topics and partitions merged, the
answer handed back to each call by (topic id, partition). A key already in the batch waiting
goes into the next one, so two changes to one key never share a request.

A state partition without a live holder answers COORDINATOR_NOT_AVAILABLE; one this node
holds but has not started serving yet COORDINATOR_LOAD_IN_PROGRESS; a peer that cannot be
reached COORDINATOR_NOT_AVAILABLE. Those are the errors Kafka's persister retries
(``RETRIABLE``); ``ShareCoordinator`` retries them as Kafka's PersisterStateManager does,
looking the holder up again each time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from coordinator.share.persister import PersisterBatch, ReadResult, WriteRequest
from coordinator.share.state_shard import topic_id_bytes
from protocol.errors import ErrorCode
from protocol.messages import (
    delete_share_group_state as delete_m,
)
from protocol.messages import (
    initialize_share_group_state as init_m,
)
from protocol.messages import (
    list_offsets as offsets_m,
)
from protocol.messages import (
    produce as produce_m,
)
from protocol.messages import (
    read_share_group_state as read_m,
)
from protocol.messages import (
    read_share_group_state_summary as summary_m,
)
from protocol.messages import (
    write_share_group_state as write_m,
)

log = logging.getLogger("kgc.share")

RETRIABLE = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)


# The newest Produce version the node's own handler serves (topics by name).
PRODUCE_VERSION = 12


class PeerClient(Protocol):
    """The node-to-node Kafka client (``coordinator.cluster.peers``)."""

    async def send(self, node_id: int, api_key: int, api_version: int, request: Any) -> Any: ...


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN


def _one(response: Any, topic_id: bytes, partition: int) -> Any | None:
    """The answer for (``topic_id``, ``partition``) in a response."""
    for result in response.results:
        if bytes(result.topic_id) != topic_id:
            continue
        for p in result.partitions:
            if p.partition == partition:
                return p
    return None


@dataclass(eq=False)
class _Batch:
    """Calls waiting to go to one holder as one request of one API for one group."""

    owner: int
    module: Any
    version: int
    group_id: str
    topics: list[Any] = field(default_factory=list)  # the request's topic entries
    keys: set[tuple[bytes, int]] = field(default_factory=set)
    waiters: list[asyncio.Future[Any]] = field(default_factory=list)

    def request(self) -> Any:
        """One request: the calls' topic entries merged by topic id, in call order."""
        merged: dict[bytes, Any] = {}
        for t in self.topics:
            tid = bytes(t.topic_id)
            have = merged.get(tid)
            if have is None:
                merged[tid] = dataclasses.replace(t, partitions=list(t.partitions))
            else:
                have.partitions.extend(t.partitions)
        return self.module.Request(group_id=self.group_id, topics=list(merged.values()))


class RemoteShareState:
    """The share state of the partitions other nodes hold (module docstring)."""

    def __init__(
        self,
        peers: PeerClient,
        owner_of: Callable[[int], int | None],
        node_id: int,
        leader_of: Callable[[str, int], int | None] | None = None,
    ) -> None:
        """``owner_of(p)``: the node holding ``__share_group_state`` partition ``p`` now;
        ``leader_of(topic, p)``: the node leading a data partition (``latest``)."""
        self.peers = peers
        self.owner_of = owner_of
        self.node_id = node_id
        self.leader_of = leader_of
        # Batches filling in this turn of the loop, by (holder, API key, group).
        self._open: dict[tuple[int, int, str], _Batch] = {}
        self.sent_requests = 0  # share state requests sent (tests, metrics)

    async def latest(self, topic: str, partition: int) -> tuple[ErrorCode, int]:
        """A data partition's high watermark from its leader: ListOffsets LATEST, as Kafka's
        group coordinator asks it for a share partition's lag."""
        leader = self.leader_of(topic, partition) if self.leader_of is not None else None
        if leader is None:
            return ErrorCode.LEADER_NOT_AVAILABLE, -1
        request = offsets_m.Request(
            replica_id=-1,
            isolation_level=0,
            topics=[
                offsets_m.ListOffsetsTopic(
                    name=topic,
                    partitions=[offsets_m.ListOffsetsPartition(partition, -1, -1)],
                )
            ],
        )
        try:
            response = await self.peers.send(leader, offsets_m.API_KEY, 7, request)
        except Exception as exc:
            log.debug("ListOffsets to node %d failed: %r", leader, exc)
            return ErrorCode.LEADER_NOT_AVAILABLE, -1
        for t in response.topics:
            for p in t.partitions:
                if p.partition_index == partition:
                    return _code(p.error_code), p.offset
        return ErrorCode.UNKNOWN, -1

    async def produce(self, leader: int, request: produce_m.Request) -> produce_m.Response | str:
        """``request`` (acks=-1) answered by node ``leader``; why not when it did not answer."""
        try:
            response: produce_m.Response = await self.peers.send(
                leader, produce_m.API_KEY, PRODUCE_VERSION, request
            )
        except Exception as exc:  # unreachable, closed, timed out: the caller retries
            return f"node {leader} did not answer: {exc!r}"
        return response

    async def _send(self, batch: _Batch) -> None:
        """Send ``batch`` (once the loop turn that filled it is over) and give every call
        the response, or the ErrorCode that stands for the whole request."""
        await asyncio.sleep(0)
        if self._open.get((batch.owner, batch.module.API_KEY, batch.group_id)) is batch:
            del self._open[(batch.owner, batch.module.API_KEY, batch.group_id)]
        answer: Any
        try:
            self.sent_requests += 1
            answer = await self.peers.send(
                batch.owner, batch.module.API_KEY, batch.version, batch.request()
            )
        except Exception as exc:  # unreachable, closed, timed out: look it up again
            log.debug("share state request to node %d failed: %r", batch.owner, exc)
            answer = ErrorCode.COORDINATOR_NOT_AVAILABLE
        for fut in batch.waiters:
            if not fut.done():
                fut.set_result(answer)

    def _join(self, owner: int, module: Any, version: int, request: Any) -> asyncio.Future[Any]:
        """The call's place in the batch filling for its holder, API and group."""
        (topic,) = request.topics
        key = (bytes(topic.topic_id), topic.partitions[0].partition)
        slot = (owner, module.API_KEY, request.group_id)
        batch = self._open.get(slot)
        if batch is None or key in batch.keys:
            batch = self._open[slot] = _Batch(owner, module, version, request.group_id)
            task = asyncio.ensure_future(self._send(batch))
            task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)
        batch.topics.append(topic)
        batch.keys.add(key)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        batch.waiters.append(fut)
        return fut

    async def _partition(
        self, p: int, module: Any, version: int, request: Any, partition: int
    ) -> tuple[ErrorCode, Any]:
        owner = self.owner_of(p)
        if owner is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if owner == self.node_id:  # taken here, not loaded yet
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None
        response = await self._join(owner, module, version, request)
        if isinstance(response, ErrorCode):
            return response, None
        result = _one(response, bytes(request.topics[0].topic_id), partition)
        if result is None:
            return ErrorCode.UNKNOWN, None
        return _code(result.error_code), result

    async def initialize(
        self, p: int, group_id: str, topic_id: str, partition: int, state_epoch: int, start: int
    ) -> ErrorCode:
        request = init_m.Request(
            group_id=group_id,
            topics=[
                init_m.InitializeStateData(
                    topic_id=topic_id_bytes(topic_id),
                    partitions=[init_m.PartitionData(partition, state_epoch, start)],
                )
            ],
        )
        error, _ = await self._partition(p, init_m, 0, request, partition)
        return error

    async def read_summary(
        self, p: int, group_id: str, topic_id: str, partition: int
    ) -> tuple[ErrorCode, int, int, int, int]:
        request = summary_m.Request(
            group_id=group_id,
            topics=[
                summary_m.ReadStateSummaryData(
                    topic_id=topic_id_bytes(topic_id),
                    partitions=[summary_m.PartitionData(partition, -1)],
                )
            ],
        )
        error, r = await self._partition(p, summary_m, 1, request, partition)
        if r is None or error != ErrorCode.NO_ERROR:
            return error, -1, -1, -1, -1
        return error, r.state_epoch, r.leader_epoch, r.start_offset, r.delivery_complete_count

    async def delete(self, p: int, group_id: str, topic_id: str, partition: int) -> ErrorCode:
        request = delete_m.Request(
            group_id=group_id,
            topics=[
                delete_m.DeleteStateData(
                    topic_id=topic_id_bytes(topic_id),
                    partitions=[delete_m.PartitionData(partition)],
                )
            ],
        )
        error, _ = await self._partition(p, delete_m, 0, request, partition)
        return error

    async def read_state(
        self, p: int, group_id: str, topic_id: str, partition: int, leader_epoch: int
    ) -> ReadResult:
        request = read_m.Request(
            group_id=group_id,
            topics=[
                read_m.ReadStateData(
                    topic_id=topic_id_bytes(topic_id),
                    partitions=[read_m.PartitionData(partition, leader_epoch)],
                )
            ],
        )
        error, r = await self._partition(p, read_m, 0, request, partition)
        if r is None or error != ErrorCode.NO_ERROR:
            return ReadResult(error, -1, -1, ())
        batches = tuple(
            PersisterBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in r.state_batches
        )
        return ReadResult(error, r.state_epoch, r.start_offset, batches)

    async def write_state(
        self, p: int, group_id: str, topic_id: str, request: WriteRequest
    ) -> ErrorCode:
        message = write_m.Request(
            group_id=group_id,
            topics=[
                write_m.WriteStateData(
                    topic_id=topic_id_bytes(topic_id),
                    partitions=[
                        write_m.PartitionData(
                            request.partition,
                            request.state_epoch,
                            request.leader_epoch,
                            request.start_offset,
                            request.delivery_complete_count,
                            [write_m.StateBatch(*b) for b in request.batches],
                        )
                    ],
                )
            ],
        )
        error, _ = await self._partition(p, write_m, 1, message, request.partition)
        return error
