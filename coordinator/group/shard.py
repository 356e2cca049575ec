"""GroupShard: the pure group coordinator of one node, and the façade its runtime calls.

How this works
--------------
The shard is a thin façade over Kafka's split of the coordinator:

* ``ClassicGroupManager`` (``classic/manager.py``) owns the classic groups; each
  classic API is a function in ``classic/``: JoinGroup ``classic/join.py``, SyncGroup
  ``classic/sync.py``, Heartbeat and LeaveGroup ``classic/heartbeat.py``,
  DescribeGroups ``classic/describe.py``; the rebalance engine is
  ``classic/rebalance.py``.
* ``ConsumerGroupManager`` (``consumer/manager.py``) owns the consumer groups of KIP-848:
  ConsumerGroupHeartbeat ``consumer/heartbeat.py`` and ConsumerGroupDescribe
  ``consumer/describe.py``. A group id names one group of one type:
  the shard routes the classic APIs aimed at a consumer group (and back) as Kafka does.
* ``ShareGroupManager`` (``share/manager.py``) owns the share groups of KIP-932:
  ShareGroupHeartbeat ``share/heartbeat.py`` and ShareGroupDescribe ``share/describe.py``.
  The other group APIs aimed at a share group's id get Kafka's errors here.
* ``OffsetMetadataManager`` (``offsets/``) owns committed offsets: OffsetCommit,
  TxnOffsetCommit, OffsetFetch, OffsetDelete, retention.
* The shard itself owns what they share -- the load status of each offsets-log partition
  (``partitions.py``), the one timer table and every timer key (``timers.py``) -- and does
  what spans both: ListGroups and DeleteGroups, the periodic offset expiration (which
  deletes groups left without offsets), replaying the log into the managers (one switch on
  the record's key type; every record is built by ``records.py``), and partition
  load/unload.

Each API is an attribute named after it (``shard.join_group(ctx, req, now_ms)``...),
bound at construction straight to the function that handles it, so a request costs no
extra call on its way in.  Nothing here performs I/O or reads a clock: every method
takes ``now_ms`` and returns a ``Result`` (records to append, replies to release once
those are durable, the earliest new timer deadline, typed events).  Timers come back
through ``timers.pop_due(now_ms)`` and ``on_timer``.  Because everything is a function
of its inputs, a test can drive the shard with a fake clock and replay its records into a
second shard to check they rebuild the same state.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from coordinator.group import records as rec
from coordinator.group.classic import describe, heartbeat, join, rebalance, sync
from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.manager import ClassicGroupManager
from coordinator.group.classic.state import ClassicGroupState
from coordinator.group.consumer import describe as cg_describe
from coordinator.group.consumer import heartbeat as cg_heartbeat
from coordinator.group.consumer.interop import ClassicInterop
from coordinator.group.consumer.manager import ConsumerGroupManager
from coordinator.group.events import GroupDeleted, OffsetsExpired, PartitionLoaded
from coordinator.group.offsets import (
    OffsetEntry,
    OffsetGroup,
    OffsetMetadataManager,
    TopicPartition,
    commit,
    delete,
    fetch,
    txn,
)
from coordinator.group.partitions import Partitions, PartitionStatus
from coordinator.group.records import decode_end_txn_marker
from coordinator.group.share import describe as share_describe
from coordinator.group.share import heartbeat as share_heartbeat
from coordinator.group.share.heartbeat import SHARE
from coordinator.group.share.manager import ShareGroupManager
from coordinator.group.share.refusals import classic_refusal, offsets_refusal
from coordinator.group.streams import describe as sg_describe
from coordinator.group.streams import heartbeat as sg_heartbeat
from coordinator.group.streams.configure import ConfiguredTopology
from coordinator.group.streams.manager import StreamsGroupManager
from coordinator.group.timers import EXPIRE_OFFSETS_KEY, Timer, TimerAction, TimerKind, Timers
from coordinator.group.topics import TopicsImage
from coordinator.group.types import GroupConfig, RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from protocol.messages.delete_groups import (
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
)
from protocol.messages.describe_groups import DescribedGroup, DescribeGroupsRequest
from protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from protocol.messages.list_groups import ListedGroup, ListGroupsRequest, ListGroupsResponse
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_delete import OffsetDeleteRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.messages.share_group_describe import ShareGroupDescribeRequest
from protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest
from protocol.messages.streams_group_describe import StreamsGroupDescribeRequest
from protocol.messages.streams_group_heartbeat import StreamsGroupHeartbeatRequest
from protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
from storage.records import (
    ConsumerGroupMetadataKey,
    GroupMetadataKey,
    OffsetCommitKey,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMetadataKey,
    UnknownKey,
    decode_consumer_group_value,
    decode_key,
    decode_share_group_value,
)
from storage.records.streams_group import StreamsGroupKey, decode_streams_group_value

__all__ = ["GroupConfig", "GroupShard", "RequestContext", "Result"]

CLASSIC = "classic"  # the group types ListGroups v5 reports
CONSUMER = "consumer"
STREAMS = "streams"
_STREAMS_TIMERS = frozenset(
    {TimerKind.STREAMS_SESSION, TimerKind.STREAMS_REBALANCE, TimerKind.STREAMS_INITIAL_DELAY}
)
_CONSUMER_TIMERS = frozenset(
    {
        TimerKind.CONSUMER_SESSION,
        TimerKind.CONSUMER_REBALANCE,
        TimerKind.CONSUMER_REGEX,
        TimerKind.CONSUMER_CLASSIC_JOIN,
        TimerKind.CONSUMER_CLASSIC_SYNC,
    }
)

_UNKNOWN_MEMBER: dict[str, Callable[[], object]] = {
    "sync_group": lambda: SyncGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID),
    "heartbeat": lambda: HeartbeatResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID),
    "leave_group": lambda: LeaveGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID),
}

_E = ClassicGroupState.EMPTY
_D = ClassicGroupState.DEAD


class GroupShard:
    # The APIs, each bound to the function that handles it (see ``__init__``).
    join_group: Callable[[RequestContext, JoinGroupRequest, int], Result]
    sync_group: Callable[[RequestContext, SyncGroupRequest, int], Result]
    heartbeat: Callable[[RequestContext, HeartbeatRequest, int], Result]
    leave_group: Callable[[RequestContext, LeaveGroupRequest, int], Result]
    describe_groups: Callable[[RequestContext, DescribeGroupsRequest, int], Result]
    offset_commit: Callable[[RequestContext, OffsetCommitRequest, int], Result]
    txn_offset_commit: Callable[[RequestContext, TxnOffsetCommitRequest, int], Result]
    offset_fetch: Callable[[RequestContext, OffsetFetchRequest, int], Result]
    offset_delete: Callable[[RequestContext, OffsetDeleteRequest, int], Result]
    consumer_group_heartbeat: Callable[[RequestContext, ConsumerGroupHeartbeatRequest, int], Result]
    consumer_group_describe: Callable[[RequestContext, ConsumerGroupDescribeRequest, int], Result]
    share_group_heartbeat: Callable[[RequestContext, ShareGroupHeartbeatRequest, int], Result]
    share_group_describe: Callable[[RequestContext, ShareGroupDescribeRequest, int], Result]

    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        member_id_suffix: Callable[[], str] | None = None,
        topic_partitions: Callable[[str], int | None] | None = None,
        topics: TopicsImage | None = None,
        consumer_member_id: Callable[[], str] | None = None,
    ) -> None:
        # topic_partitions: partition count of a topic, None if it does not exist (the topic
        # catalog's answer; offsets of unknown partitions are refused). None: all exist.
        self.config = config if config is not None else GroupConfig()
        self.partitions = Partitions(self.config.offsets_topic_num_partitions)
        self.timers = Timers()
        self.classic = ClassicGroupManager(
            self.config, self.partitions, self.timers, member_id_suffix=member_id_suffix
        )
        extra = {} if consumer_member_id is None else {"member_id": consumer_member_id}
        self.consumer = ConsumerGroupManager(
            self.config,
            self.partitions,
            self.timers,
            topics=topics,
            other_group_type=self._classic_type,
            **extra,
        )
        self.consumer.interop = ClassicInterop(self.consumer, self.classic)
        self.streams = StreamsGroupManager(self.config, self.partitions, self.timers, topics=topics)
        self.share = ShareGroupManager(
            self.config,
            self.partitions,
            self.timers,
            topics=topics,
            other_group_type=self._non_share_type,
        )
        # The configured topology of the last streams heartbeat that found internal topics
        # missing, for the API layer to create them (read right after the call).
        self.streams_topics_to_create: ConfiguredTopology | None = None
        self.offset_manager = OffsetMetadataManager(
            self.config,
            self.partitions,
            self.classic,
            topic_partitions=topic_partitions,
            topics=topics,  # OffsetCommit/OffsetFetch v10 name topics by id
            find_group=self.find_group,
        )
        # What the shard holds, for the runtime, metrics and tests (the managers' own maps).
        self.groups: dict[str, ClassicGroup] = self.classic.groups
        self.offsets: dict[str, dict[TopicPartition, OffsetEntry]] = self.offset_manager.offsets
        self.pending_txn_offsets = self.offset_manager.pending_txn_offsets
        self.rebalances = self.classic.rebalances
        self.partition_of = self.partitions.partition_of
        self.groups_snapshot = self.classic.groups_snapshot

        classic, offsets = self.classic, self.offset_manager
        # The classic APIs are functions of the manager, bound here (a partial of a compiled
        # function binds under mypyc, where a function set as a class attribute would not).
        self._classic_join = partial(join.join_group, classic)
        self._classic_describe = partial(describe.describe_groups, classic)
        self.join_group = self._join_group  # classic/join.py, unless a consumer group
        # A classic member of a consumer group is served by consumer/interop.py.
        self.sync_group = self._routed(partial(sync.sync_group, classic), "sync_group")
        self.heartbeat = self._routed(partial(heartbeat.heartbeat, classic), "heartbeat")
        self.leave_group = self._routed(partial(heartbeat.leave_group, classic), "leave_group")
        self.describe_groups = self._describe_groups  # classic/describe.py
        consumer = self.consumer
        self.consumer_group_heartbeat = partial(cg_heartbeat.consumer_group_heartbeat, consumer)
        self.consumer_group_describe = partial(cg_describe.consumer_group_describe, consumer)
        self.share_group_heartbeat = partial(share_heartbeat.share_group_heartbeat, self.share)
        self.share_group_describe = partial(share_describe.share_group_describe, self.share)
        # offsets/commit.py, txn.py, fetch.py, delete.py; a share group has no committed
        # offsets: committing or deleting them is GROUP_ID_NOT_FOUND (Kafka 4.4), fetching
        # finds none.
        self.offset_commit = self._not_share(partial(commit.offset_commit, offsets), 8)
        self.txn_offset_commit = self._not_share(partial(txn.txn_offset_commit, offsets), 28)
        self.offset_fetch = partial(fetch.offset_fetch, offsets)
        self.offset_delete = self._not_share(partial(delete.offset_delete, offsets), 47)

    # ------------------------------------------------------------ routing between group types

    def find_group(self, group_id: str) -> OffsetGroup | None:
        """The group of either type with this id (offsets are shared by both)."""
        group = self.consumer.groups.get(group_id)
        if group is not None:
            return group
        sgroup = self.streams.groups.get(group_id)
        if sgroup is not None:
            return sgroup
        return self.groups.get(group_id)

    def streams_group_heartbeat(
        self, ctx: RequestContext, req: StreamsGroupHeartbeatRequest, now_ms: int
    ) -> Result:
        """StreamsGroupHeartbeat (streams/heartbeat.py); an Empty classic group of the id is
        replaced by the new streams group (its tombstone first), as Kafka converts it."""
        gid = req.group_id
        others: dict[str, tuple[str, bool]] = {}
        if gid in self.consumer.groups:
            others[gid] = (CONSUMER, self.consumer.groups[gid].is_empty())
        if gid in self.share.groups:
            others[gid] = (SHARE, self.share.groups[gid].is_empty())
        classic = self.groups.get(gid)
        if classic is not None and not classic.is_in(_D):
            others[gid] = (CLASSIC, classic.is_in(_E))
        existed = gid in self.streams.groups
        out, self.streams_topics_to_create = sg_heartbeat.streams_group_heartbeat(
            self.streams, ctx, req, now_ms, others
        )
        if not existed and gid in self.streams.groups and classic is not None:
            partition = self.partitions.partition_of(gid)
            out.records.insert(0, rec.group_metadata_tombstone(partition, gid))
            self.groups.pop(gid, None)
        return out

    def streams_group_describe(
        self, ctx: RequestContext, req: StreamsGroupDescribeRequest, now_ms: int
    ) -> Result:
        """StreamsGroupDescribe (streams/describe.py); an id of another type says so."""
        others = {
            g: CONSUMER
            if g in self.consumer.groups
            else SHARE
            if g in self.share.groups
            else CLASSIC
            for g in req.group_ids
            if g in self.consumer.groups
            or g in self.share.groups
            or (g in self.groups and not self.groups[g].is_in(_D))
        }
        return sg_describe.streams_group_describe(self.streams, ctx, req, now_ms, others)

    def _classic_type(self, group_id: str) -> str | None:
        """The type of a non-consumer group with this id, for the consumer group APIs."""
        if group_id in self.streams.groups:
            return STREAMS
        if group_id in self.share.groups:
            return SHARE
        group = self.groups.get(group_id)
        return CLASSIC if group is not None and not group.is_in(_D) else None

    def _non_share_type(self, group_id: str) -> str | None:
        """The type of a non-share group with this id, for the share group APIs."""
        if group_id in self.consumer.groups:
            return CONSUMER
        if group_id in self.streams.groups:
            return STREAMS
        group = self.groups.get(group_id)
        return CLASSIC if group is not None and not group.is_in(_D) else None

    def _not_share(self, api: Callable[..., Result], api_key: int) -> Callable[..., Result]:
        """An offsets API that answers GROUP_ID_NOT_FOUND, in its own shape, on a share
        group's id (Kafka: the group is not a consumer group)."""
        share_groups = self.share.groups

        def checked(ctx: RequestContext, req: Any, now_ms: int) -> Result:
            if req.group_id in share_groups and self.partitions.precheck(req.group_id) is None:
                out = Result()
                out.replies.append((ctx.reply_to, offsets_refusal(api_key, ctx.api_version, req)))
                return out
            return api(ctx, req, now_ms)

        return checked

    def _join_group(self, ctx: RequestContext, req: JoinGroupRequest, now_ms: int) -> Result:
        """JoinGroup: into a consumer group when one has the id, else the classic path."""
        if req.group_id in self.share.groups and self.partitions.precheck(req.group_id) is None:
            out = Result()
            out.replies.append((ctx.reply_to, classic_refusal("join_group", 0, req)))
            return out
        sgroup = self.streams.groups.get(req.group_id)
        if sgroup is not None and self.partitions.precheck(req.group_id) is None:
            if not sgroup.is_empty():
                # Kafka: a classic member cannot join a live streams group.
                out = Result()
                out.replies.append(
                    (
                        ctx.reply_to,
                        JoinGroupResponse(
                            error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=""
                        ),
                    )
                )
                return out
            # An empty streams group is replaced by the classic group (offline downgrade).
            out = Result()
            self.streams.delete_group(out, sgroup)
            out.extend(self._classic_join(ctx, req, now_ms))
            return out
        cgroup = self.consumer.groups.get(req.group_id)
        if cgroup is None or self.partitions.precheck(req.group_id) is not None:
            return self._classic_join(ctx, req, now_ms)
        return self.consumer.interop.join_group(ctx, req, cgroup, now_ms)  # type: ignore[no-any-return]

    def _routed(self, classic_api: Callable[..., Result], name: str) -> Callable[..., Result]:
        """A classic API that a consumer group's classic members reach through interop."""
        consumer_groups = self.consumer.groups

        share_groups = self.share.groups

        def api(ctx: RequestContext, req: Any, now_ms: int) -> Result:
            if req.group_id in share_groups and self.partitions.precheck(req.group_id) is None:
                # A share group has no classic members (share/refusals.py).
                out = Result()
                resp = classic_refusal(name, ctx.api_version, req)
                out.replies.append((ctx.reply_to, resp))
                return out
            if (
                req.group_id in self.streams.groups
                and self.partitions.precheck(req.group_id) is None
            ):
                # SyncGroup, Heartbeat and LeaveGroup know no member of a streams group.
                out = Result()
                out.replies.append((ctx.reply_to, _UNKNOWN_MEMBER[name]()))
                return out
            cgroup = consumer_groups.get(req.group_id)
            if cgroup is None or self.partitions.precheck(req.group_id) is not None:
                return classic_api(ctx, req, now_ms)
            return getattr(self.consumer.interop, name)(ctx, req, cgroup, now_ms)  # type: ignore[no-any-return]

        return api

    def _describe_groups(
        self, ctx: RequestContext, req: DescribeGroupsRequest, now_ms: int
    ) -> Result:
        """DescribeGroups: a consumer, streams or share group is not a classic group (Dead;
        v6 also an error)."""
        out = self._classic_describe(ctx, req, now_ms)
        consumer: dict[str, Any] = {
            **self.consumer.groups,
            **self.streams.groups,
            **self.share.groups,
        }
        if not consumer:
            return out
        for _, resp in out.replies:
            described = getattr(resp, "groups", [])
            for i, d in enumerate(described):
                # v6 answers an id the classic side does not know with GROUP_ID_NOT_FOUND
                # already; a consumer group's answer names the reason instead.
                if d.group_id in consumer and d.error_code in (
                    ErrorCode.NO_ERROR,
                    ErrorCode.GROUP_ID_NOT_FOUND,
                ):
                    described[i] = DescribedGroup(
                        group_id=d.group_id,
                        group_state=ClassicGroupState.DEAD.value,
                        error_code=ErrorCode.GROUP_ID_NOT_FOUND
                        if ctx.api_version >= 6
                        else ErrorCode.NO_ERROR,
                        error_message=f"Group {d.group_id} is not a classic group."
                        if ctx.api_version >= 6
                        else None,
                        authorized_operations=d.authorized_operations,
                    )
        return out

    # ------------------------------------------------------------ APIs over all groups

    def list_groups(self, ctx: RequestContext, req: ListGroupsRequest, now_ms: int) -> Result:
        """Every group of the loaded partitions; v4 filters on state, v5 on group type.

        Filters are case-insensitive; a partition still loading makes the answer
        COORDINATOR_LOAD_IN_PROGRESS (with the groups that are served).
        """
        out = Result()
        v = ctx.api_version
        states = {s.lower() for s in req.states_filter} if v >= 4 else set()
        types = {t.lower() for t in req.types_filter} if v >= 5 else set()
        error = ErrorCode.NO_ERROR
        if self.partitions.any_loading():
            error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        listed: list[ListedGroup] = []
        if not types or CONSUMER in types:
            for cg in self.consumer.groups.values():
                if self.partitions.availability_error(cg.group_id) is not None:
                    continue
                state = cg.state.value
                if states and state.lower() not in states:
                    continue
                listed.append(
                    ListedGroup(
                        group_id=cg.group_id,
                        protocol_type=CONSUMER,
                        group_state=state,
                        group_type=CONSUMER,
                    )
                )
        if not types or STREAMS in types:
            for sg in self.streams.groups.values():
                if self.partitions.availability_error(sg.group_id) is not None:
                    continue
                sstate = sg.state
                # Kafka lower-cases the filter and compares it with not_ready, so a
                # filter of "NotReady" matches nothing.
                if states and sstate.lower not in states:
                    continue
                listed.append(
                    ListedGroup(
                        group_id=sg.group_id,
                        protocol_type=STREAMS,
                        group_state=sstate.value,
                        group_type=STREAMS,
                    )
                )
        if not types or SHARE in types:
            for shg in self.share.groups.values():
                if self.partitions.availability_error(shg.group_id) is not None:
                    continue
                state = shg.state.value
                if states and state.lower() not in states:
                    continue
                listed.append(
                    ListedGroup(
                        group_id=shg.group_id,
                        protocol_type=SHARE,
                        group_state=state,
                        group_type=SHARE,
                    )
                )
        if not types or CLASSIC in types:
            for g in self.groups.values():
                if self.partitions.availability_error(g.group_id) is not None:
                    continue
                if states and g.state.value.lower() not in states:
                    continue
                listed.append(
                    ListedGroup(
                        group_id=g.group_id,
                        protocol_type=g.protocol_type or "",
                        group_state=g.state.value,
                        group_type=CLASSIC,
                    )
                )
        out.replies.append((ctx.reply_to, ListGroupsResponse(error_code=error, groups=listed)))
        return out

    def delete_groups(self, ctx: RequestContext, req: DeleteGroupsRequest, now_ms: int) -> Result:
        """Refuse non-Empty (NON_EMPTY_GROUP) and unknown groups (GROUP_ID_NOT_FOUND);
        otherwise tombstone every offset and then the group metadata."""
        out = Result()
        results: list[DeletableGroupResult] = []
        for gid in req.groups_names:
            err = self.partitions.availability_error(gid)
            group = self.groups.get(gid)
            shgroup = self.share.groups.get(gid)
            if err is None and shgroup is not None:
                # Its share-partitions' state was deleted first (the API layer asks the
                # share coordinator: Kafka's deleteShareGroups).
                if not shgroup.is_empty():
                    err = ErrorCode.NON_EMPTY_GROUP
                else:
                    self.share.delete_group(out, shgroup)
                    out.events.append(GroupDeleted(gid))
                results.append(
                    DeletableGroupResult(
                        group_id=gid, error_code=ErrorCode.NO_ERROR if err is None else err
                    )
                )
                continue
            # A consumer or streams group: deleted when Empty, with its offsets.
            typed: tuple[Any, Callable[[Result, Any], None]] | None = None
            if gid in self.streams.groups:
                typed = (self.streams.groups[gid], self.streams.delete_group)
            elif gid in self.consumer.groups:
                typed = (self.consumer.groups[gid], self.consumer.delete_group)
            if err is None and typed is not None:
                newer, delete_typed = typed
                if not newer.is_empty():
                    err = ErrorCode.NON_EMPTY_GROUP
                else:
                    self.offset_manager.delete_all_offsets(out, gid)
                    delete_typed(out, newer)
                    out.events.append(GroupDeleted(gid))
                results.append(
                    DeletableGroupResult(
                        group_id=gid, error_code=ErrorCode.NO_ERROR if err is None else err
                    )
                )
                continue
            if err is None:
                if group is None or group.is_in(_D):
                    err = ErrorCode.GROUP_ID_NOT_FOUND
                elif not group.is_in(_E):
                    err = ErrorCode.NON_EMPTY_GROUP
            if err is None and group is not None:
                self._delete_group(out, group, now_ms)
                out.events.append(GroupDeleted(gid))
            results.append(
                DeletableGroupResult(
                    group_id=gid, error_code=ErrorCode.NO_ERROR if err is None else err
                )
            )
        out.replies.append((ctx.reply_to, DeleteGroupsResponse(results=results)))
        return out

    def _delete_group(self, out: Result, group: ClassicGroup, now_ms: int) -> None:
        self.offset_manager.delete_all_offsets(out, group.group_id)
        self.classic.delete_group(out, group, now_ms)

    # ------------------------------------------------------------ outside events

    def complete_transaction(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> tuple[Result, ErrorCode]:
        """A transaction marker for offsets partition ``partition`` (offsets/txn.py)."""
        return txn.complete_transaction(
            self.offset_manager, partition, producer_id, producer_epoch, coordinator_epoch, commit
        )

    def topic_deleted(self, topic: str, now_ms: int) -> Result:
        """Tombstone every group's offsets of a deleted topic (Kafka's onPartitionsDeleted)."""
        return self.offset_manager.topic_deleted(topic, now_ms)

    # ------------------------------------------------------------ timers

    def on_timer(self, timer: Timer, now_ms: int) -> Result:
        """Act on a timer that came due (taken from ``timers.pop_due``)."""
        out = Result()
        action = timer.action
        if action.kind is TimerKind.EXPIRE_OFFSETS:
            self._expire_offsets(out, now_ms)
        elif action.kind in _CONSUMER_TIMERS:
            self.consumer.on_timer(out, action, now_ms)
        elif action.kind in _STREAMS_TIMERS:
            self.streams.on_timer(out, action, now_ms)
        elif action.kind is TimerKind.SHARE_SESSION:
            self.share.on_timer(out, action, now_ms)
        else:
            rebalance.on_timer(self.classic, out, action, now_ms)
        return out

    def pending_timers(self) -> dict[str, int]:
        """Deadline of every armed timer, by key (for tests and diagnostics)."""
        return self.timers.deadlines()

    def _arm_expiration(self, out: Result, now_ms: int) -> None:
        self.timers.schedule(
            out,
            EXPIRE_OFFSETS_KEY,
            now_ms + self.config.offsets_retention_check_interval_ms,
            TimerAction(TimerKind.EXPIRE_OFFSETS),
        )

    def _expire_offsets(self, out: Result, now_ms: int) -> None:
        """Kafka's cleanupGroupMetadata: expire offsets, then delete groups left without any."""
        expired_total = 0
        deleted: list[str] = []
        for gid in list(self.groups):
            if self.partitions.availability_error(gid) is not None:
                continue
            before = len(out.records)
            all_gone = self.offset_manager.cleanup_expired_offsets(out, gid, now_ms)
            expired_total += len(out.records) - before
            group = self.groups[gid]
            if all_gone and group.is_in(_E):
                self._delete_group(out, group, now_ms)
                deleted.append(gid)
        typed: tuple[tuple[dict[str, Any], Callable[[Result, Any], None]], ...] = (
            (self.consumer.groups, self.consumer.delete_group),
            (self.streams.groups, self.streams.delete_group),
        )
        for groups, delete_typed in typed:
            for gid in list(groups):
                if self.partitions.availability_error(gid) is not None:
                    continue
                before = len(out.records)
                all_gone = self.offset_manager.cleanup_expired_offsets(out, gid, now_ms)
                expired_total += len(out.records) - before
                if all_gone and groups[gid].is_empty():
                    delete_typed(out, groups[gid])
                    deleted.append(gid)
        if expired_total or deleted:
            out.events.append(OffsetsExpired(expired_total, tuple(deleted)))
        self._arm_expiration(out, now_ms)

    # ------------------------------------------------------------ loading

    def begin_load(self, partition: int) -> None:
        """This node becomes coordinator of ``partition``: its log is about to be replayed."""
        self._forget_partition(partition)
        self.partitions[partition] = PartitionStatus.LOADING

    def replay(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Apply one record of the offsets log, in log order: one switch on its key's type."""
        k = decode_key(key)
        match k:
            case OffsetCommitKey():
                self.offset_manager.replay(k, value)
            case GroupMetadataKey():
                self.classic.replay(k.group, value)
                if value is None:
                    self._keep_offsets_reachable(k.group)
            case UnknownKey():
                pass  # a record type kgc does not know: nothing to do
            case (
                ShareGroupMemberMetadataKey()
                | ShareGroupMetadataKey()
                | ShareGroupTargetAssignmentMetadataKey()
                | ShareGroupTargetAssignmentMemberKey()
                | ShareGroupCurrentMemberAssignmentKey()
                | ShareGroupStatePartitionMetadataKey()
            ):
                self.share.replay(k, None if value is None else decode_share_group_value(k, value))
            case StreamsGroupKey():
                if value is None:
                    self.streams.replay(k, None)
                    self._keep_offsets_reachable(k.group)
                else:
                    # A streams group replaces the offsets-only classic group of its id.
                    self.groups.pop(k.group, None)
                    self.streams.replay(k, decode_streams_group_value(k.rtype, value))
            case ConsumerGroupMetadataKey():
                if value is None:
                    self.consumer.replay(k, None)
                    self._keep_offsets_reachable(k.group)
                else:
                    # A consumer group replaces the offsets-only classic group of its id.
                    self.groups.pop(k.group, None)
                    self.consumer.replay(k, decode_consumer_group_value(k, value))
            case _:  # the other consumer group records
                self.consumer.replay(
                    k, None if value is None else decode_consumer_group_value(k, value)
                )

    def replay_txn_batch(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        control: bool,
        records: list[tuple[bytes | None, bytes | None]],
    ) -> None:
        """Apply a transactional batch of the offsets log: a control batch ends the
        producer's transaction there (COMMIT/ABORT); the offsets of any other are pending
        until it does (Kafka's CoordinatorLoaderImpl passes each batch's producer id)."""
        offsets = self.offset_manager
        if control:
            for key, value in records:
                marker = decode_end_txn_marker(key, value)
                if marker is not None:
                    commit, coordinator_epoch = marker
                    offsets.end_txn(
                        partition, producer_id, producer_epoch, coordinator_epoch, commit
                    )
            return
        for key, value in records:
            if key is None:
                continue
            k = decode_key(key)
            if isinstance(k, OffsetCommitKey):
                offsets.replay_pending(producer_id, producer_epoch, k, value)
            else:
                self.replay(partition, key, value)

    def _keep_offsets_reachable(self, gid: str) -> None:
        """A group's metadata is gone but its offsets outlived it: a classic group holds them."""
        if (
            gid in self.offsets
            and gid not in self.groups
            and gid not in self.consumer.groups
            and gid not in self.streams.groups
        ):
            self.classic.get_or_create_group(gid)

    def topics_changed(self, names: list[str], created: bool, now_ms: int) -> Result:
        """Topics were created, grew or were deleted (Kafka's onNewMetadataImage)."""
        self.consumer.topics_changed(names, created, now_ms)
        self.streams.topics_changed(names)
        return self.share.topics_changed(names, now_ms)

    def share_state_initialized(
        self,
        group_id: str,
        done: dict[bytes, list[int]],
        failed: dict[bytes, list[int]],
        now_ms: int,
    ) -> Result:
        """The share coordinator answered an initialization (``ShareStateInitializing``)."""
        return self.share.state_initialized(group_id, done, failed, now_ms)

    def load_complete(self, partition: int, now_ms: int) -> Result:
        """The partition is replayed: serve it, re-arming the timers (they are not persisted)."""
        out = Result()
        self.partitions[partition] = PartitionStatus.LOADED
        loaded = rebalance.on_loaded(self.classic, out, partition, now_ms)
        loaded += self.consumer.on_loaded(out, partition, now_ms)
        loaded += self.streams.on_loaded(out, partition, now_ms)
        loaded += self.share.on_loaded(out, partition, now_ms)
        if EXPIRE_OFFSETS_KEY not in self.timers:
            self._arm_expiration(out, now_ms)
        out.events.append(PartitionLoaded(partition, loaded))
        return out

    def fail_load(self, partition: int) -> None:
        """The partition's log cannot be replayed: forget it; its groups get NOT_COORDINATOR."""
        self._forget_partition(partition)
        self.partitions[partition] = PartitionStatus.FAILED

    def mark_all_loaded(self, now_ms: int = 0) -> Result:
        """Own and load every offsets partition at once (tests, single-node setups)."""
        out = Result()
        for p in range(self.config.offsets_topic_num_partitions):
            out.extend(self.load_complete(p, now_ms))
        return out

    def unload(self, partition: int, now_ms: int) -> Result:
        """Stop coordinating a partition: parked requests get NOT_COORDINATOR."""
        out = Result()
        self.classic.on_unload(out, partition, now_ms)
        self._forget_partition(partition)
        return out

    def _forget_partition(self, partition: int) -> None:
        self.partitions.pop(partition, None)
        self.consumer.forget_partition(partition)
        self.offset_manager.forget_partition(partition)
        self.streams.forget_partition(partition)
        self.share.forget_partition(partition)
        partition_of = self.partitions.partition_of
        for gid in [g for g in self.groups if partition_of(g) == partition]:
            del self.groups[gid]
            self.offset_manager.forget(gid)
        for gid in [g for g in self.offsets if partition_of(g) == partition]:
            del self.offsets[gid]
        for gid in [g for g in self.pending_txn_offsets if partition_of(g) == partition]:
            self.offset_manager.forget(gid)
