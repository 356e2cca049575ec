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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from coordinator.server.handler import ClientInfo, Deferred, HandlerResult
from coordinator.share.coordinator import ShareCoordinator
from coordinator.share.persister import PersisterBatch, WriteRequest
from coordinator.share.state_shard import topic_id_str
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import delete_share_group_state as delete_m
from protocol.messages import initialize_share_group_state as init_m
from protocol.messages import read_share_group_state as read_m
from protocol.messages import read_share_group_state_summary as summary_m
from protocol.messages import write_share_group_state as write_m

# Errors.NOT_COORDINATOR.message(), what Kafka's runtime answers for a partition not its own.
NOT_COORDINATOR_MESSAGE = "This is not the correct coordinator."


def _valid(req: Any) -> bool:
    """Kafka answers an empty response to no topics, a topic without partitions, or an
    empty group id."""
    return bool(req.group_id) and bool(req.topics) and all(t.partitions for t in req.topics)


class ShareStateApis:
    """The five handlers over this node's share coordinator (module docstring)."""

    def __init__(self, state: ShareCoordinator) -> None:
        self.state = state

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
            got = await self.state.initialize(
                req.group_id, tid, [pd.partition], pd.state_epoch, pd.start_offset
            )
            return _plain(init_m.PartitionResult, pd, got[pd.partition], None)

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
            return read_m.PartitionResult(pd.partition, int(e), m, -1, -1, [])

        async def answer(tid: str, pd: Any) -> Any:
            r = await self.state.read_state(req.group_id, tid, pd.partition, pd.leader_epoch)
            if r.error != ErrorCode.NO_ERROR:
                return refused(pd, r.error, None)
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
            request = WriteRequest(
                pd.partition,
                pd.state_epoch,
                pd.leader_epoch,
                pd.start_offset,
                pd.delivery_complete_count,
                [PersisterBatch(*_batch(b)) for b in pd.state_batches],
            )
            error = await self.state.write_state(req.group_id, tid, request)
            return _plain(write_m.PartitionResult, pd, error, None)

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
            got = await self.state.delete(req.group_id, tid, [pd.partition])
            return _plain(delete_m.PartitionResult, pd, got[pd.partition], None)

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
            return summary_m.PartitionResult(pd.partition, int(e), m, -1, -1, -1, -1)

        async def answer(tid: str, pd: Any) -> Any:
            got = await self.state.read_summaries(req.group_id, tid, [pd.partition])
            error, state_epoch, leader_epoch, start, complete = got[pd.partition]
            if error != ErrorCode.NO_ERROR:
                return refused(pd, error, None)
            return summary_m.PartitionResult(
                pd.partition, 0, None, state_epoch, leader_epoch, start, complete
            )

        results = await self._each(req, answer, refused, summary_m.ReadStateSummaryResult)
        return summary_m.Response(results=results)


def _plain(cls: Any, pd: Any, error: ErrorCode, message: str | None) -> Any:
    return cls(partition=pd.partition, error_code=int(error), error_message=message)


def _batch(b: Any) -> tuple[int, int, int, int]:
    return b.first_offset, b.last_offset, b.delivery_state, b.delivery_count
