"""The share coordinator's inter-broker APIs, served: what other nodes ask of the state partitions here.

How this works: InitializeShareGroupState (83), ReadShareGroupState (84),
WriteShareGroupState (85), DeleteShareGroupState (86) and ReadShareGroupStateSummary (87)
carry one group and any number of (topic id, partition) keys. As in Kafka's
ShareCoordinatorService, a request naming no topic, a topic naming no partition, or an empty
group id gets an empty answer; every key is then answered on its own: by this node's
``ShareCoordinator`` when the key's ``__share_group_state`` partition is held here
(answered once what it changed is durable), else NOT_COORDINATOR, which sends the caller
to look the holder up again. Only keys held here are handed to the coordinator, so a
request is never forwarded on to a third node.

As Kafka's ShareCoordinatorShard, a key whose topic (or partition) the catalog does not know
is UNKNOWN_TOPIC_OR_PARTITION: at once for delete and summary, after the state's own checks
(uninitialized, fenced epochs) for initialize, read and write. Errors carry Kafka's
messages; an error's other fields are the schema's defaults, as Kafka's error answers; a
summary of a key without state is state epoch 0, leader epoch 0, start offset -1, delivery
complete count -1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from coordinator.server.handler import ClientInfo, Deferred, HandlerResult
from coordinator.share.coordinator import ShareCoordinator
from coordinator.share.persister import PersisterBatch, WriteRequest
from coordinator.share.state_shard import topic_id_bytes, topic_id_str
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import delete_share_group_state as delete_m
from protocol.messages import initialize_share_group_state as init_m
from protocol.messages import read_share_group_state as read_m
from protocol.messages import read_share_group_state_summary as summary_m
from protocol.messages import write_share_group_state as write_m

# Errors.NOT_COORDINATOR.message(), what Kafka's runtime answers for a partition not its own.
NOT_COORDINATOR_MESSAGE = "This is not the correct coordinator."
# Kafka's messages for the shard's errors (Errors.message(), or the shard's own text).
MESSAGES: Mapping[ErrorCode, str] = {
    ErrorCode.NOT_COORDINATOR: NOT_COORDINATOR_MESSAGE,
    ErrorCode.FENCED_LEADER_EPOCH: "The leader epoch in the request is older than the epoch "
    "on the broker.",
    ErrorCode.FENCED_STATE_EPOCH: "The coordinator rejected the request because the state "
    "epoch did not match.",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
}
UNINITIALIZED = "{} operation on uninitialized share partition not allowed."


def _message(error: ErrorCode, operation: str) -> str | None:
    if error == ErrorCode.INVALID_REQUEST:
        return UNINITIALIZED.format(operation)
    return MESSAGES.get(error)


def _valid(req: Any) -> bool:
    """Kafka answers an empty response to no topics, a topic without partitions, or an
    empty group id."""
    return bool(req.group_id) and bool(req.topics) and all(t.partitions for t in req.topics)


class ShareStateApis:
    """The five handlers over this node's share coordinator (module docstring)."""

    def __init__(
        self, state: ShareCoordinator, partitions_of: Callable[[bytes], int | None] | None = None
    ) -> None:
        self.state = state
        # A topic's partition count by id (the catalog), None for a topic not known.
        self.partitions_of = partitions_of

    def _unknown(self, topic_id: str, partition: int) -> bool:
        if self.partitions_of is None:
            return False
        n = self.partitions_of(topic_id_bytes(topic_id))
        return n is None or not 0 <= partition < n

    def _unknown_after(
        self, group_id: str, topic_id: str, pd: Any, *, leader: bool, state: bool
    ) -> bool:
        """The topic is unknown and the state's own checks, which Kafka's shard runs first,
        pass: the key is initialized (read, write) and the epochs given are not fenced."""
        if not self._unknown(topic_id, pd.partition):
            return False
        s = self.state.summary(group_id, topic_id, pd.partition)
        if s is None:
            return not leader  # uninitialized: read and write answer that first
        state_epoch, leader_epoch = s[0], s[1]
        if state and pd.state_epoch != -1 and pd.state_epoch < state_epoch:
            return False
        return not (leader and pd.leader_epoch != -1 and pd.leader_epoch < leader_epoch)

    def _held(self, group_id: str, topic_id: str, partition: int) -> bool:
        return self.state.holds(self.state.partition_of(group_id, topic_id, partition))

    async def _each(
        self,
        req: Any,
        answer: Callable[[str, Any], Awaitable[Any]],
        refused: Callable[[Any, ErrorCode, str | None], Any],
        result: Callable[..., Any],
    ) -> list[Any]:
        """The per-topic results: ``answer(topic id, partition data)`` for every key held
        here, ``refused`` (NOT_COORDINATOR) for the others, in the request's order."""

        async def one(topic_id: str, pd: Any) -> Any:
            if not self._held(req.group_id, topic_id, pd.partition):
                return refused(pd, ErrorCode.NOT_COORDINATOR, NOT_COORDINATOR_MESSAGE)
            return await answer(topic_id, pd)

        out = []
        for t in req.topics:
            tid = topic_id_str(t.topic_id)
            parts = await asyncio.gather(*(one(tid, pd) for pd in t.partitions))
            out.append(result(topic_id=t.topic_id, partitions=list(parts)))
        return out

    # -- InitializeShareGroupState
    def initialize_share_group_state(
        self, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        return Deferred.task(self._initialize(req))

    async def _initialize(self, req: Any) -> Any:
        if not _valid(req):
            return init_m.Response()

        async def answer(tid: str, pd: Any) -> Any:
            if self._unknown_after(req.group_id, tid, pd, leader=False, state=True):
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                got = await self.state.initialize(
                    req.group_id, tid, [pd.partition], pd.state_epoch, pd.start_offset
                )
                error = got[pd.partition]
            return _plain(init_m.PartitionResult, pd, error, _message(error, "Initialize"))

        results = await self._each(
            req,
            answer,
            lambda pd, e, m: _plain(init_m.PartitionResult, pd, e, m),
            init_m.InitializeStateResult,
        )
        return init_m.Response(results=results)

    # -- ReadShareGroupState
    def read_share_group_state(
        self, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        return Deferred.task(self._read(req))

    async def _read(self, req: Any) -> Any:
        if not _valid(req):
            return read_m.Response()

        def refused(pd: Any, e: ErrorCode, m: str | None) -> Any:
            return read_m.PartitionResult(pd.partition, int(e), m)

        async def answer(tid: str, pd: Any) -> Any:
            if self._unknown_after(req.group_id, tid, pd, leader=True, state=False):
                e = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                return refused(pd, e, _message(e, "Read"))
            r = await self.state.read_state(req.group_id, tid, pd.partition, pd.leader_epoch)
            if r.error != ErrorCode.NO_ERROR:
                return refused(pd, r.error, _message(r.error, "Read"))
            batches = [read_m.StateBatch(*b) for b in r.batches]
            return read_m.PartitionResult(
                pd.partition, 0, None, r.state_epoch, r.start_offset, batches
            )

        results = await self._each(req, answer, refused, read_m.ReadStateResult)
        return read_m.Response(results=results)

    # -- WriteShareGroupState
    def write_share_group_state(
        self, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        return Deferred.task(self._write(req))

    async def _write(self, req: Any) -> Any:
        if not _valid(req):
            return write_m.Response()

        async def answer(tid: str, pd: Any) -> Any:
            if self._unknown_after(req.group_id, tid, pd, leader=True, state=True):
                e = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                return _plain(write_m.PartitionResult, pd, e, _message(e, "Write"))
            request = WriteRequest(
                pd.partition,
                pd.state_epoch,
                pd.leader_epoch,
                pd.start_offset,
                pd.delivery_complete_count,
                [PersisterBatch(*_batch(b)) for b in pd.state_batches],
            )
            error = await self.state.write_state(req.group_id, tid, request)
            return _plain(write_m.PartitionResult, pd, error, _message(error, "Write"))

        results = await self._each(
            req,
            answer,
            lambda pd, e, m: _plain(write_m.PartitionResult, pd, e, m),
            write_m.WriteStateResult,
        )
        return write_m.Response(results=results)

    # -- DeleteShareGroupState
    def delete_share_group_state(
        self, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        return Deferred.task(self._delete(req))

    async def _delete(self, req: Any) -> Any:
        if not _valid(req):
            return delete_m.Response()

        async def answer(tid: str, pd: Any) -> Any:
            if self._unknown(tid, pd.partition):
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                error = (await self.state.delete(req.group_id, tid, [pd.partition]))[pd.partition]
            return _plain(delete_m.PartitionResult, pd, error, _message(error, "Delete"))

        results = await self._each(
            req,
            answer,
            lambda pd, e, m: _plain(delete_m.PartitionResult, pd, e, m),
            delete_m.DeleteStateResult,
        )
        return delete_m.Response(results=results)

    # -- ReadShareGroupStateSummary
    def read_share_group_state_summary(
        self, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        return Deferred.task(self._summary(req))

    async def _summary(self, req: Any) -> Any:
        if not _valid(req):
            return summary_m.Response()

        def refused(pd: Any, e: ErrorCode, m: str | None) -> Any:
            return summary_m.PartitionResult(pd.partition, int(e), m)

        async def answer(tid: str, pd: Any) -> Any:
            if self._unknown(tid, pd.partition):
                e = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                return refused(pd, e, _message(e, "Read summary"))
            got = await self.state.read_summaries(req.group_id, tid, [pd.partition])
            error, state_epoch, leader_epoch, start, complete = got[pd.partition]
            if error != ErrorCode.NO_ERROR:
                return refused(pd, error, _message(error, "Read summary"))
            if state_epoch == -1:  # no state: Kafka's answer for a key it does not have
                state_epoch, leader_epoch, start, complete = 0, 0, -1, -1
            return summary_m.PartitionResult(
                pd.partition, 0, None, state_epoch, leader_epoch, start, complete
            )

        results = await self._each(req, answer, refused, summary_m.ReadStateSummaryResult)
        return summary_m.Response(results=results)


def _plain(cls: Any, pd: Any, error: ErrorCode, message: str | None) -> Any:
    return cls(partition=pd.partition, error_code=int(error), error_message=message)


def _batch(b: Any) -> tuple[int, int, int, int]:
    return b.first_offset, b.last_offset, b.delivery_state, b.delivery_count
