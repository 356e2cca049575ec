"""GroupContext: one test context for the pure group core, classic and consumer groups alike.

How this works
--------------
The context plays the runtime around a ``GroupShard`` (Kafka's
GroupMetadataManagerTestContext): it hands out reply handles, applies every ``Result``
(collecting replies -- asserting none is answered twice --, events and records) and
replays every record into a second, "mirror" shard as it is written, so a test can check
that the log rebuilds what the live shard holds (``assert_replay_equivalent`` for classic
groups, ``replayed()`` and ``group_state`` for consumer groups).  Time is a fake clock:

* ``sleep(ms)`` is Kafka's MockTime.sleep: the clock jumps, then every timer due by then
  fires, at the new time; it returns the fired timers' Results;
* ``advance(ms)`` walks the clock from one deadline to the next, each timer firing at its
  own deadline (what the classic tests were written against);
* ``assert_timer(key, in_ms)`` checks a timer is armed that much later than now (keys from
  ``coordinator.group.timers``).

A context is built with ``GroupContext.builder()`` (``with_config``, ``with_topic``,
``with_topic_partitions``, ``with_time``, ``with_client``, ``build``), or directly:
``GroupContext(config)`` (every topic exists, no topics image: the offsets and classic
tests) and ``GroupContext.with_topics(foo=2)`` (a topics image: the consumer group tests).
Request helpers speak both protocols: ``join``/``sync``/``heartbeat``/``leave``/``commit``/
``fetch`` for classic groups and offsets, ``consumer_group_heartbeat``/
``consumer_group_describe`` for consumer groups, whose client, ``Member``, is in
``support.consumer_member``.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from typing import Any

from coordinator.group import ClassicGroupState, GroupConfig, GroupShard, RequestContext, Result
from coordinator.group.events import GroupEvent, render
from coordinator.group.timers import Timer
from coordinator.group.topics import StaticTopics
from coordinator.group.types import TxnBatch
from protocol.errors import ErrorCode
from protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    DescribedGroup,
)
from protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from protocol.messages.join_group import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
)
from protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberIdentity
from protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from protocol.messages.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
)
from protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)
from protocol.messages.sync_group import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)

# The client the requests come from, unless a request says otherwise: (client id, host).
CLASSIC_CLIENT = ("c", "/10.0.0.1")
CONSUMER_CLIENT = ("client", "/127.0.0.1")


def subscription(*topics: str, user_data: bytes | None = None, version: int = 0) -> bytes:
    """A ConsumerProtocolSubscription (v0 prefix, optionally a v1+ tail)."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        b = t.encode()
        out += struct.pack(">h", len(b)) + b
    out += (
        struct.pack(">i", -1)
        if user_data is None
        else struct.pack(">i", len(user_data)) + user_data
    )
    if version >= 1:
        out += struct.pack(">i", 0)  # no owned partitions
    if version >= 2:
        out += struct.pack(">i", -1)
    if version >= 3:
        out += struct.pack(">h", -1)
    return out


DEFAULT_PROTOCOLS: tuple[tuple[str, bytes], ...] = (("range", subscription("t")),)


def replay_batch(
    shard: GroupShard, txn: TxnBatch | None, records: list[tuple[int, bytes, bytes | None]]
) -> None:
    """Replay one Result's records into ``shard`` as the runtime's replay reads them back."""
    if not records:
        return
    if txn is None:
        for rec in records:
            shard.replay(*rec)
        return
    shard.replay_txn_batch(
        records[0][0],
        txn.producer_id,
        txn.producer_epoch,
        txn.control,
        [(k, v) for _, k, v in records],
    )


class GroupContextBuilder:
    """Kafka's GroupMetadataManagerTestContext.Builder: what the context starts from."""

    def __init__(self) -> None:
        self._config: GroupConfig | None = None
        self._topics: StaticTopics | None = None
        self._topic_partitions: Callable[[str], int | None] | None = None
        self._now = 0
        self._client = CLASSIC_CLIENT

    def with_config(self, config: GroupConfig | None) -> GroupContextBuilder:
        self._config = config
        return self

    def with_topics(self, **topics: int) -> GroupContextBuilder:
        """A topics image holding these topics (partition counts), possibly none."""
        if self._topics is None:
            self._topics = StaticTopics()
        for name, n in topics.items():
            self._topics.add(name, n)
        return self

    def with_topic(self, name: str, partitions: int) -> GroupContextBuilder:
        return self.with_topics(**{name: partitions})

    def with_topic_partitions(self, lookup: Callable[[str], int | None]) -> GroupContextBuilder:
        """A topic's partition count, None if it does not exist (the catalog's answer)."""
        self._topic_partitions = lookup
        return self

    def with_time(self, now_ms: int) -> GroupContextBuilder:
        self._now = now_ms
        return self

    def with_client(self, client_id: str, client_host: str) -> GroupContextBuilder:
        self._client = (client_id, client_host)
        return self

    def build(self) -> GroupContext:
        return GroupContext(
            self._config,
            topics=self._topics,
            topic_partitions=self._topic_partitions,
            now=self._now,
            client=self._client,
        )


class GroupContext:
    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        topics: StaticTopics | None = None,
        topic_partitions: Callable[[str], int | None] | None = None,
        now: int = 0,
        client: tuple[str, str] = CLASSIC_CLIENT,
    ) -> None:
        # topics: the topics image (None: no image, every topic exists unless
        # topic_partitions says otherwise).
        self.config = config if config is not None else GroupConfig()
        self.now = now
        self.topics = topics
        self.topic_partitions = topic_partitions
        self.client_id, self.client_host = client
        classic_ids = itertools.count()
        consumer_ids = itertools.count(1)
        self.shard = GroupShard(
            self.config,
            member_id_suffix=lambda: f"id{next(classic_ids)}",
            topic_partitions=topic_partitions,
            topics=topics,
            consumer_member_id=lambda: f"gen-{next(consumer_ids)}",
        )
        self.mirror = GroupShard(self.config, topics=topics)
        self.mirror.mark_all_loaded(0)
        self.replies: dict[int, Any] = {}
        self.records: list[tuple[int, bytes, bytes | None]] = []
        # Where a transactional Result's records start in ``records``: (its batch, count).
        self.txn_spans: dict[int, tuple[TxnBatch, int]] = {}
        self.results: list[Result] = []
        self.events: list[GroupEvent] = []
        self._handles = itertools.count(1)
        self.apply(self.shard.mark_all_loaded(self.now))

    @staticmethod
    def builder() -> GroupContextBuilder:
        return GroupContextBuilder()

    @classmethod
    def with_topics(cls, config: GroupConfig | None = None, **topics: int) -> GroupContext:
        """The consumer group tests' context: a topics image with these topics."""
        return (
            cls.builder()
            .with_config(config)
            .with_topics(**topics)
            .with_client(*CONSUMER_CLIENT)
            .build()
        )

    # ------------------------------------------------------------ plumbing

    def ctx(self, version: int = 1, client_id: str | None = None) -> RequestContext:
        return RequestContext(
            version,
            self.client_id if client_id is None else client_id,
            self.client_host,
            next(self._handles),
        )

    def apply(self, result: Result) -> Result:
        """What the runtime does with a Result: keep its records (and replay them into the
        mirror), its replies and its events."""
        if result.txn is not None and result.records:
            self.txn_spans[len(self.records)] = (result.txn, len(result.records))
        self.records.extend(result.records)
        replay_batch(self.mirror, result.txn, result.records)
        for handle, resp in result.replies:
            assert handle not in self.replies, f"reply handle {handle} answered twice"
            self.replies[handle] = resp
        self.events.extend(result.events)
        self.results.append(result)
        return result

    @property
    def timers(self) -> dict[str, int]:
        """When each armed timer comes up (its heap entry: at or before its deadline), by key."""
        return self.shard.timers.armed()

    def event_lines(self) -> list[str]:
        return [render(e) for e in self.events]

    def sleep(self, ms: int) -> list[Result]:
        """Kafka's sleep: move the clock, then fire every timer due by now, at the new time."""
        self.now += ms
        fired: list[Result] = []
        while True:
            timer: Timer | None = self.shard.timers.pop_due(self.now)
            if timer is None:
                return fired
            fired.append(self.apply(self.shard.on_timer(timer, self.now)))

    def advance(self, ms: int) -> None:
        """Move the clock timer by timer: each fires at its own deadline."""
        target = self.now + ms
        timers = self.shard.timers
        while (deadline := timers.next_deadline()) is not None and deadline <= target:
            self.now = max(self.now, deadline)
            timer = timers.pop_due(self.now)
            if timer is not None:
                self.apply(self.shard.on_timer(timer, self.now))
        self.now = target

    def advance_until_answered(
        self, handles: list[int], step: int = 1000, limit: int = 600_000
    ) -> None:
        waited = 0
        while any(h not in self.replies for h in handles):
            assert waited < limit, "requests still parked"
            self.advance(step)
            waited += step

    def assert_timer(self, key: str, in_ms: int) -> None:
        """The timer ``key`` is armed, due ``in_ms`` from now."""
        deadline = self.shard.pending_timers().get(key)
        assert deadline is not None, f"no timer {key!r} armed"
        assert deadline - self.now == in_ms, (key, deadline - self.now, in_ms)

    def assert_no_timer(self, key: str) -> None:
        assert key not in self.shard.pending_timers(), f"timer {key!r} is armed"

    def reply(self, handle: int) -> Any:
        return self.replies.get(handle)

    def state(self, group: str) -> ClassicGroupState:
        return self.shard.groups[group].state

    def tid(self, name: str) -> bytes:
        assert self.topics is not None
        t = self.topics.topic(name)
        assert t is not None
        return t.topic_id

    def name(self, topic_id: bytes) -> str:
        assert self.topics is not None
        t = self.topics.topic_by_id(topic_id)
        assert t is not None
        return t.name

    def replayed(self) -> GroupShard:
        """A second shard loaded from every record written so far (begin, replay, complete)."""
        other = GroupShard(GroupConfig(), topics=self.topics)
        for p in range(other.config.offsets_topic_num_partitions):
            other.begin_load(p)
        i = 0
        while i < len(self.records):
            span = self.txn_spans.get(i)
            if span is None:
                other.replay(*self.records[i])
                i += 1
            else:
                replay_batch(other, span[0], self.records[i : i + span[1]])
                i += span[1]
        for p in range(other.config.offsets_topic_num_partitions):
            other.load_complete(p, self.now)
        return other

    # ------------------------------------------------------------ consumer group requests

    def consumer_group_heartbeat(
        self, req: ConsumerGroupHeartbeatRequest, version: int = 1
    ) -> ConsumerGroupHeartbeatResponse:
        ctx = self.ctx(version)
        self.apply(self.shard.consumer_group_heartbeat(ctx, req, self.now))
        reply = self.replies[ctx.reply_to]
        assert isinstance(reply, ConsumerGroupHeartbeatResponse)
        return reply

    def consumer_group_describe(self, *group_ids: str, version: int = 1) -> list[DescribedGroup]:
        ctx = self.ctx(version)
        out = self.shard.consumer_group_describe(
            ctx, ConsumerGroupDescribeRequest(group_ids=list(group_ids)), self.now
        )
        return out.replies[0][1].groups  # type: ignore[attr-defined,no-any-return]

    # ------------------------------------------------------------ requests

    def join(
        self,
        group: str,
        member_id: str = "",
        *,
        instance: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] = DEFAULT_PROTOCOLS,
        protocol_type: str = "consumer",
        session: int = 10000,
        rebalance: int = 30000,
        version: int = 9,
        client_id: str = "c",
        reason: str | None = None,
    ) -> int:
        ctx = self.ctx(version, client_id)
        req = JoinGroupRequest(
            group_id=group,
            session_timeout_ms=session,
            rebalance_timeout_ms=rebalance,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type=protocol_type,
            protocols=[JoinGroupRequestProtocol(n, m) for n, m in protocols],
            reason=reason,
        )
        self.apply(self.shard.join_group(ctx, req, self.now))
        return ctx.reply_to

    def join_new(self, group: str, **kw: Any) -> tuple[str, int]:
        """KIP-394 dance for a dynamic member: returns (member id, parked join handle)."""
        h = self.join(group, **kw)
        r = self.replies[h]
        assert isinstance(r, JoinGroupResponse)
        assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED, r
        return r.member_id, self.join(group, r.member_id, **kw)

    def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        instance: str | None = None,
        version: int = 5,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> int:
        ctx = self.ctx(version)
        req = SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type=protocol_type if version >= 5 else None,
            protocol_name=protocol_name if version >= 5 else None,
            assignments=[SyncGroupRequestAssignment(m, a) for m, a in (assignments or {}).items()],
        )
        self.apply(self.shard.sync_group(ctx, req, self.now))
        return ctx.reply_to

    def heartbeat(
        self,
        group: str,
        member_id: str,
        generation: int,
        *,
        instance: str | None = None,
        version: int = 4,
    ) -> int:
        ctx = self.ctx(version)
        req = HeartbeatRequest(group, generation, member_id, instance)
        self.apply(self.shard.heartbeat(ctx, req, self.now))
        resp = self.replies[ctx.reply_to]
        assert isinstance(resp, HeartbeatResponse)
        return resp.error_code

    def leave(
        self, group: str, *members: tuple[str, str | None], version: int = 5
    ) -> LeaveGroupResponse:
        ctx = self.ctx(version)
        if version >= 3:
            req = LeaveGroupRequest(
                group_id=group, members=[MemberIdentity(m, i) for m, i in members]
            )
        else:
            req = LeaveGroupRequest(group_id=group, member_id=members[0][0])
        self.apply(self.shard.leave_group(ctx, req, self.now))
        resp = self.replies[ctx.reply_to]
        assert isinstance(resp, LeaveGroupResponse)
        return resp

    def commit(
        self,
        group: str,
        offsets: dict[tuple[str, int], int],
        *,
        member_id: str = "",
        generation: int = -1,
        instance: str | None = None,
        metadata: str = "",
        retention: int = -1,
        version: int = 8,
    ) -> dict[tuple[str, int], int]:
        ctx = self.ctx(version)
        topics: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (t, p), o in offsets.items():
            topics.setdefault(t, []).append(
                OffsetCommitRequestPartition(p, o, committed_metadata=metadata)
            )
        req = OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=instance,
            retention_time_ms=retention,
            topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()],
        )
        self.apply(self.shard.offset_commit(ctx, req, self.now))
        resp = self.replies[ctx.reply_to]
        assert isinstance(resp, OffsetCommitResponse)
        return {
            (t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions
        }

    def fetch(
        self,
        group: str,
        partitions: dict[str, list[int]] | None,
        *,
        version: int = 7,
        require_stable: bool = False,
    ) -> OffsetFetchResponse:
        ctx = self.ctx(version)
        req = OffsetFetchRequest(
            group_id=group,
            topics=None
            if partitions is None
            else [OffsetFetchRequestTopic(t, ps) for t, ps in partitions.items()],
            require_stable=require_stable,
        )
        self.apply(self.shard.offset_fetch(ctx, req, self.now))
        resp = self.replies[ctx.reply_to]
        assert isinstance(resp, OffsetFetchResponse)
        return resp

    def committed(self, group: str, topic: str, partition: int) -> int:
        resp = self.fetch(group, {topic: [partition]})
        return resp.topics[0].partitions[0].committed_offset

    # ------------------------------------------------------------ composite

    def stable_group(self, group: str, n: int, **kw: Any) -> tuple[list[str], int]:
        """Bring ``n`` dynamic members to Stable; returns (member ids in join order, generation)."""
        handles = []
        ids = []
        for _ in range(n):
            mid, h = self.join_new(group, **kw)
            ids.append(mid)
            handles.append(h)
        self.advance_until_answered(handles)
        resps = [self.replies[h] for h in handles]
        for r in resps:
            assert isinstance(r, JoinGroupResponse) and r.error_code == 0, r
        gen = resps[0].generation_id
        leader = resps[0].leader
        self.sync_all(group, ids, gen, leader)
        assert self.state(group) is ClassicGroupState.STABLE
        return ids, gen

    def sync_all(
        self, group: str, ids: list[str], gen: int, leader: str
    ) -> dict[str, SyncGroupResponse]:
        handles = {}
        for mid in ids:
            if mid != leader:
                handles[mid] = self.sync(group, mid, gen)
        handles[leader] = self.sync(group, leader, gen, {m: m.encode() for m in ids})
        out = {}
        for mid, h in handles.items():
            r = self.replies[h]
            assert isinstance(r, SyncGroupResponse), r
            out[mid] = r
        return out

    # ------------------------------------------------------------ checks

    def assert_replay_equivalent(self) -> None:
        live, mirror = self.shard, self.mirror
        assert {g: dict(o) for g, o in live.offsets.items()} == {
            g: dict(o) for g, o in mirror.offsets.items()
        }
        assert live.pending_txn_offsets == mirror.pending_txn_offsets
        for gid, g in live.groups.items():
            if g.state not in (ClassicGroupState.STABLE, ClassicGroupState.EMPTY):
                continue
            assert gid in mirror.groups, f"group {gid} missing after replay"
            r = mirror.groups[gid]
            assert r.state is g.state, (gid, r.state, g.state)
            assert (r.generation, r.protocol_type or None, r.protocol_name, r.leader_id) == (
                g.generation,
                g.protocol_type or None,
                g.protocol_name,
                g.leader_id,
            ), gid
            if g.state is ClassicGroupState.EMPTY:
                assert r.state_timestamp_ms == g.state_timestamp_ms, gid
            assert list(r.members) == list(g.members), gid
            for mid, m in g.members.items():
                rm = r.members[mid]
                assert (
                    rm.group_instance_id,
                    rm.client_id,
                    rm.client_host,
                    rm.session_timeout_ms,
                    rm.rebalance_timeout_ms,
                    rm.assignment,
                    rm.metadata(r.protocol_name),
                ) == (
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    m.assignment,
                    m.metadata(g.protocol_name),
                ), (gid, mid)
        for gid in mirror.groups:
            if gid not in live.groups:
                raise AssertionError(f"group {gid} resurrected by replay")


def offset_delete(
    h: GroupContext, group: str, topics: dict[str, list[int]]
) -> OffsetDeleteResponse:
    ctx = h.ctx(0)
    req = OffsetDeleteRequest(
        group,
        [
            OffsetDeleteRequestTopic(t, [OffsetDeleteRequestPartition(p) for p in ps])
            for t, ps in topics.items()
        ],
    )
    h.apply(h.shard.offset_delete(ctx, req, h.now))
    r = h.reply(ctx.reply_to)
    assert isinstance(r, OffsetDeleteResponse)
    return r


def txn_commit(
    h: GroupContext, group: str, producer_id: int, offsets: dict[tuple[str, int], int]
) -> TxnOffsetCommitResponse:
    ctx = h.ctx(3)
    req = TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id=group,
        producer_id=producer_id,
        producer_epoch=0,
        generation_id=-1,
        topics=[
            TxnOffsetCommitRequestTopic(t, [TxnOffsetCommitRequestPartition(p, o)])
            for (t, p), o in offsets.items()
        ],
    )
    h.apply(h.shard.txn_offset_commit(ctx, req, h.now))
    r = h.reply(ctx.reply_to)
    assert isinstance(r, TxnOffsetCommitResponse)
    return r


def list_groups(
    cluster: GroupContext,
    version: int = 5,
    states: list[str] | None = None,
    types: list[str] | None = None,
) -> list[Any]:
    from protocol.messages.list_groups import ListGroupsRequest

    req = ListGroupsRequest(states_filter=states or [], types_filter=types or [])
    out = cluster.apply(cluster.shard.list_groups(cluster.ctx(version), req, cluster.now))
    return out.replies[0][1].groups  # type: ignore[attr-defined,no-any-return]


def delete_groups(cluster: GroupContext, *group_ids: str) -> dict[str, int]:
    from protocol.messages.delete_groups import DeleteGroupsRequest

    req = DeleteGroupsRequest(groups_names=list(group_ids))
    out = cluster.apply(cluster.shard.delete_groups(cluster.ctx(2), req, cluster.now))
    return {r.group_id: r.error_code for r in out.replies[0][1].results}  # type: ignore[attr-defined]


def describe_groups(cluster: GroupContext, *group_ids: str, version: int = 6) -> list[Any]:
    from protocol.messages.describe_groups import DescribeGroupsRequest

    req = DescribeGroupsRequest(groups=list(group_ids))
    out = cluster.shard.describe_groups(cluster.ctx(version), req, cluster.now)
    return out.replies[0][1].groups  # type: ignore[attr-defined,no-any-return]


def end_txn(
    h: GroupContext,
    group: str,
    producer_id: int,
    commit: bool,
    *,
    producer_epoch: int = 0,
    coordinator_epoch: int = 0,
) -> ErrorCode:
    """The transaction coordinator's marker for ``producer_id`` on ``group``'s offsets
    partition: applied when accepted; its error code."""
    result, err = h.shard.complete_transaction(
        h.shard.partition_of(group), producer_id, producer_epoch, coordinator_epoch, commit, h.now
    )
    h.apply(result)
    return err
