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

A state partition without a live holder answers COORDINATOR_NOT_AVAILABLE; one this node
holds but has not started serving yet COORDINATOR_LOAD_IN_PROGRESS; a peer that cannot be
reached COORDINATOR_NOT_AVAILABLE. Those are the errors Kafka's persister retries
(``RETRIABLE``); ``ShareCoordinator`` retries them as Kafka's PersisterStateManager does,
looking the holder up again each time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
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


def _one(response: Any, partition: int) -> Any | None:
    """The answer for ``partition`` in a response of one topic."""
    for result in response.results:
        for p in result.partitions:
            if p.partition == partition:
                return p
    return None


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

    async def _send(self, p: int, module: Any, version: int, request: Any) -> Any:
        """The response, or the ErrorCode that stands for the whole request."""
        owner = self.owner_of(p)
        if owner is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if owner == self.node_id:  # taken here, not loaded yet
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        try:
            return await self.peers.send(owner, module.API_KEY, version, request)
        except Exception as exc:  # unreachable, closed, timed out: look it up again
            log.debug("share state request to node %d failed: %r", owner, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE

    async def _partition(
        self, p: int, module: Any, version: int, request: Any, partition: int
    ) -> tuple[ErrorCode, Any]:
        response = await self._send(p, module, version, request)
        if isinstance(response, ErrorCode):
            return response, None
        result = _one(response, partition)
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
