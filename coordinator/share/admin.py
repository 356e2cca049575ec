"""DescribeShareGroupOffsets (90): each share partition's start offset and lag, as Kafka.

How this works (Kafka's GroupCoordinatorService.describeShareGroupOffsets and
KafkaApis.handleDescribeShareGroupOffsetsRequest): per group, DESCRIBE on the group is
required (else GROUP_AUTHORIZATION_FAILED for that group). The group's existence is not
checked:

* ``Topics = null`` means every *initialized* partition of the group's state-partition
  metadata (``initialized``, the group coordinator's view; an unknown group has none);
  topics without DESCRIBE are left out;
* named topics: one without DESCRIBE answers each partition with a zero topic id, start
  offset -1, lag -1 and TOPIC_AUTHORIZATION_FAILED; an unknown topic a zero topic id and
  start offset -1 with no error; a known one reads the share state's summary, where a
  partition never initialized answers start offset -1, leader epoch 0, lag -1.

Lag (v1) is the high watermark minus the start offset minus the delivery complete count
(terminal offsets at or past the start), -1 when either is unknown.

In cluster mode a key's state may be kept by another node (read through
ReadShareGroupStateSummary, ``ShareStateStore.read_summaries``) and its data partition led by
another (its high watermark asked of the leader, ``latest``: ListOffsets LATEST); the answer
then waits for those.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from coordinator.catalog import TopicCatalog
from coordinator.dataplane import DataPlane
from coordinator.dataplane.reads import high_watermark
from coordinator.group.share import offsets_admin
from coordinator.group.share.group import TopicInit
from coordinator.group.share.offsets_admin import OffsetsStep
from coordinator.security.acl import AclOperation, ResourceType
from coordinator.server.handler import ClientInfo, Deferred, HandlerResult
from coordinator.share.persister import ShareStateStore
from coordinator.share.requests import Allowed
from coordinator.share.state_shard import topic_id_str
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import alter_share_group_offsets as asgo
from protocol.messages import delete_share_group_offsets as dsgo_del
from protocol.messages import describe_share_group_offsets as dsgo

if TYPE_CHECKING:
    from coordinator.group.share.manager import ShareGroupManager
    from coordinator.group.types import Result
    from coordinator.runtime import GroupRuntime

ZERO_ID = b"\x00" * 16

# group id -> topic id -> (topic name, initialized partitions); {} for an unknown group.
Initialized = Callable[[str], Mapping[bytes, tuple[str, frozenset[int]]]]


# (topic, partition) -> (error, its latest offset) from the partition's leader (cluster mode).
LatestOffset = Callable[[str, int], Awaitable[tuple[ErrorCode, int]]]
# What a DescribeShareGroupOffsets answer waits for: asks of other nodes.
Later = list[Callable[[], Awaitable[None]]]


def _no_groups(group_id: str) -> Mapping[bytes, tuple[str, frozenset[int]]]:
    return {}


class ShareAdmin:
    """The share offsets admin APIs over the share state and the group coordinator."""

    def __init__(
        self,
        state: ShareStateStore,
        data: DataPlane,
        catalog: TopicCatalog,
        initialized: Initialized = _no_groups,
        groups: GroupRuntime | None = None,
        latest: LatestOffset | None = None,
    ) -> None:
        """``groups``: the group coordinator, whose share groups AlterShareGroupOffsets and
        DeleteShareGroupOffsets change (their records in ``__consumer_offsets``);
        ``latest``: cluster mode, a data partition's high watermark from its leader."""
        self.latest = latest
        self.state = state
        self.data = data
        self.catalog = catalog
        self.initialized = initialized
        self.groups = groups

    def _partition(
        self, group_id: str, topic_id: bytes, partition: int, version: int, later: Later
    ) -> Any:
        out = dsgo.DescribeShareGroupOffsetsResponsePartition(partition_index=partition)
        tid = topic_id_str(topic_id)
        if self.state.held_elsewhere(group_id, tid, partition):
            later.append(lambda: self._from_holder(out, group_id, topic_id, partition))
            return out
        ask = self._summarized(
            out, topic_id, partition, self.state.summary(group_id, tid, partition)
        )
        if ask is not None:
            later.append(lambda: self._lag_from_leader(out, ask[0], partition, ask[1]))
        return out

    def _summarized(
        self, out: Any, topic_id: bytes, partition: int, summary: tuple[int, int, int, int] | None
    ) -> tuple[str, int] | None:
        """Fills ``out`` from the summary; (topic, start + complete) when the lag needs the
        data partition's leader, another node (cluster mode)."""
        if summary is None:
            out.start_offset, out.leader_epoch, out.lag = -1, 0, -1
            return None
        _, leader_epoch, start, complete = summary
        out.start_offset, out.leader_epoch = start, max(leader_epoch, 0)
        if start == -1 or complete == -1:
            out.lag = -1
            return None
        info = self.catalog.by_id.get(topic_id)
        plog, error = (None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if info is not None:
            plog, error = self.data.served_log(info, partition)
        if plog is not None:
            out.lag = high_watermark(plog) - start - complete
            return None
        out.lag = -1
        if info is not None and error == ErrorCode.NOT_LEADER_FOR_PARTITION and self.latest:
            return info.name, start + complete
        out.error_code = error
        return None

    async def _from_holder(self, out: Any, group_id: str, topic_id: bytes, partition: int) -> None:
        """Cluster mode: the summary from the node holding the key's state partition."""
        got = await self.state.read_summaries(group_id, topic_id_str(topic_id), [partition])
        error, state_epoch, leader_epoch, start, complete = got[partition]
        if error != ErrorCode.NO_ERROR:
            out.start_offset, out.leader_epoch, out.lag, out.error_code = -1, 0, -1, error
            return
        summary = None if state_epoch == -1 else (state_epoch, leader_epoch, start, complete)
        ask = self._summarized(out, topic_id, partition, summary)
        if ask is not None:
            await self._lag_from_leader(out, ask[0], partition, ask[1])

    async def _lag_from_leader(self, out: Any, topic: str, partition: int, done: int) -> None:
        """Cluster mode: the high watermark asked of the data partition's leader (Kafka's
        ListOffsets LATEST); the partition carries the error when that fails."""
        assert self.latest is not None
        error, latest = await self.latest(topic, partition)
        if error != ErrorCode.NO_ERROR:
            out.error_code = error
        else:
            out.lag = latest - done

    def describe_share_group_offsets(
        self, allowed: Allowed, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        version = header.api_version
        groups = []
        later: Later = []
        for g in req.groups:
            out = dsgo.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id)
            groups.append(out)
            if allowed is not None and not allowed(
                client, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id
            ):
                out.error_code = ErrorCode.GROUP_AUTHORIZATION_FAILED
                continue
            if g.topics is None:
                for topic_id, (name, parts) in sorted(
                    self.initialized(g.group_id).items(), key=lambda kv: kv[1][0]
                ):
                    if allowed is not None and not allowed(
                        client, AclOperation.DESCRIBE, ResourceType.TOPIC, name
                    ):
                        continue
                    out.topics.append(
                        dsgo.DescribeShareGroupOffsetsResponseTopic(
                            topic_name=name,
                            topic_id=topic_id,
                            partitions=[
                                self._partition(g.group_id, topic_id, p, version, later)
                                for p in sorted(parts)
                            ],
                        )
                    )
                continue
            for t in g.topics:
                topic = dsgo.DescribeShareGroupOffsetsResponseTopic(topic_name=t.topic_name)
                out.topics.append(topic)
                denied = allowed is not None and not allowed(
                    client, AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic_name
                )
                info = self.catalog.get(t.topic_name)
                for p in t.partitions:
                    if denied or info is None:
                        topic.partitions.append(
                            dsgo.DescribeShareGroupOffsetsResponsePartition(
                                partition_index=p,
                                start_offset=-1,
                                lag=-1,
                                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED if denied else 0,
                            )
                        )
                        continue
                    topic.topic_id = info.topic_id
                    topic.partitions.append(
                        self._partition(g.group_id, info.topic_id, p, version, later)
                    )
        if not later:
            return dsgo.Response(groups=groups)
        return Deferred.task(self._asked(groups, later))

    @staticmethod
    async def _asked(groups: list[Any], later: Later) -> Any:
        """The answer once what other nodes were asked came back (cluster mode)."""
        await asyncio.gather(*(ask() for ask in later))
        return dsgo.Response(groups=groups)

    # -- AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92)
    async def _group_step(
        self,
        header: RequestHeader,
        req: Any,
        client: ClientInfo,
        fn: Callable[[ShareGroupManager, int, int], Result],
    ) -> OffsetsStep:
        """One step on the group coordinator, answered once its records are durable."""
        groups = self.groups
        assert groups is not None
        shard = groups.shard

        def method(ctx: Any, body: Any, now_ms: int) -> Result:
            return fn(shard.share, ctx.reply_to, now_ms)

        res = groups.call(method, header, req, client)
        if isinstance(res, Deferred):
            res = await res
        if isinstance(res, OffsetsStep):
            return res
        return OffsetsStep(ErrorCode.UNKNOWN, None, None)  # the step raised (logged)

    def alter_share_group_offsets(
        self, allowed: Allowed, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        return Deferred.task(self._alter(allowed, header, req, client))

    async def _alter(
        self, allowed: Allowed, header: RequestHeader, req: Any, client: ClientInfo
    ) -> Any:
        gid = req.group_id
        if allowed is not None and not allowed(client, AclOperation.READ, ResourceType.GROUP, gid):
            return asgo.Response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        if not gid:
            return asgo.Response(error_code=ErrorCode.INVALID_GROUP_ID)
        responses: list[Any] = []
        valid: dict[bytes, tuple[str, dict[int, int]]] = {}
        for t in req.topics:
            out = asgo.AlterShareGroupOffsetsResponseTopic(topic_name=t.topic_name)
            responses.append(out)
            denied = allowed is not None and not allowed(
                client, AclOperation.READ, ResourceType.TOPIC, t.topic_name
            )
            info = None if denied else self.catalog.get(t.topic_name)
            if info is not None:
                out.topic_id = info.topic_id
            for p in t.partitions:
                if denied:
                    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif info is None or not 0 <= p.partition_index < info.num_partitions:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    code = ErrorCode.NO_ERROR
                    valid.setdefault(info.topic_id, (info.name, {}))[1][p.partition_index] = (
                        p.start_offset
                    )
                out.partitions.append(
                    asgo.AlterShareGroupOffsetsResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                )
        topics = {t: TopicInit(name, frozenset(parts)) for t, (name, parts) in valid.items()}
        step = await self._group_step(
            header, req, client, lambda m, h, _now: offsets_admin.alter_begin(m, h, gid, topics)
        )
        if step.error != ErrorCode.NO_ERROR:
            return asgo.Response(error_code=step.error, error_message=step.message)
        done: dict[bytes, list[int]] = {}
        failed: dict[bytes, list[int]] = {}
        codes: dict[tuple[bytes, int], ErrorCode] = {}
        for t, (_, parts) in valid.items():
            by_start: dict[int, list[int]] = {}
            for p, start in parts.items():
                by_start.setdefault(start, []).append(p)
            for start, ps in by_start.items():
                result = await self.state.initialize(gid, topic_id_str(t), ps, step.value, start)
                for p in ps:
                    code = result.get(p, ErrorCode.UNKNOWN)
                    (done if code == ErrorCode.NO_ERROR else failed).setdefault(t, []).append(p)
                    codes[(t, p)] = code
        await self._group_step(
            header,
            req,
            client,
            lambda m, h, now: offsets_admin.state_initialized(m, h, gid, done, failed, now),
        )
        for out in responses:
            for pd in out.partitions:
                code = codes.get((out.topic_id, pd.partition_index), ErrorCode.NO_ERROR)
                if pd.error_code == ErrorCode.NO_ERROR:
                    pd.error_code = code
        return asgo.Response(responses=responses)

    def delete_share_group_offsets(
        self, allowed: Allowed, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        return Deferred.task(self._delete(allowed, header, req, client))

    async def _delete(
        self, allowed: Allowed, header: RequestHeader, req: Any, client: ClientInfo
    ) -> Any:
        gid = req.group_id
        if allowed is not None and not allowed(
            client, AclOperation.DELETE, ResourceType.GROUP, gid
        ):
            return dsgo_del.Response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        if not gid:
            return dsgo_del.Response(error_code=ErrorCode.INVALID_GROUP_ID)
        responses: list[Any] = []
        named: dict[bytes, str] = {}
        for t in req.topics:
            out = dsgo_del.DeleteShareGroupOffsetsResponseTopic(topic_name=t.topic_name)
            responses.append(out)
            if allowed is not None and not allowed(
                client, AclOperation.READ, ResourceType.TOPIC, t.topic_name
            ):
                out.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            info = self.catalog.get(t.topic_name)
            if info is None:
                out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            out.topic_id = info.topic_id
            named[info.topic_id] = info.name
        step = await self._group_step(
            header, req, client, lambda m, h, _now: offsets_admin.delete_begin(m, h, gid, named)
        )
        if step.error != ErrorCode.NO_ERROR:
            return dsgo_del.Response(error_code=step.error, error_message=step.message)
        done: list[bytes] = []
        for out in responses:
            todo = step.value.get(out.topic_id) if out.topic_id in named else None
            if todo is None:
                continue
            if isinstance(todo, tuple):
                out.error_code, out.error_message = todo
                continue
            result = await self.state.delete(gid, topic_id_str(out.topic_id), todo)
            bad = [c for c in result.values() if c != ErrorCode.NO_ERROR]
            if bad:
                out.error_code = bad[0]
            else:
                done.append(out.topic_id)
        await self._group_step(
            header, req, client, lambda m, h, _now: offsets_admin.offsets_deleted(m, h, gid, done)
        )
        return dsgo_del.Response(responses=responses)
