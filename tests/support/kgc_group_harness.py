"""A fake-clock driver for GroupShard.

How this works
--------------
``Harness`` plays the runtime: it hands out reply handles, collects replies
(asserting none is answered twice) and events, and on ``advance(ms)`` takes
every due timer from the shard's timer table in deadline order, feeding each
Result back in.  Every record the shard emits is also replayed into a
second, "mirror" shard; ``assert_replay_equivalent`` checks that the mirror
rebuilt the same persisted state (offsets, and groups in Stable or Empty --
the states whose last metadata record describes them fully).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.group import ClassicGroupState, GroupConfig, GroupShard, RequestContext, Result
from coordinator.group.events import GroupEvent, render
from protocol.errors import ErrorCode
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


@dataclass
class Harness:
    config: GroupConfig = field(default_factory=GroupConfig)
    now: int = 0
    # Partition count of a topic, None if it does not exist (None: every topic exists).
    topic_partitions: Callable[[str], int | None] | None = None

    def __post_init__(self) -> None:
        ids = itertools.count()
        self.shard = GroupShard(
            self.config,
            member_id_suffix=lambda: f"id{next(ids)}",
            topic_partitions=self.topic_partitions,
        )
        self.mirror = GroupShard(self.config)
        self.mirror.mark_all_loaded(0)
        self.replies: dict[int, Any] = {}
        self.records: list[tuple[int, bytes, bytes | None]] = []
        self.events: list[GroupEvent] = []
        self._handles = itertools.count(1)
        self.apply(self.shard.mark_all_loaded(self.now))

    # ------------------------------------------------------------ plumbing

    def ctx(self, version: int, client_id: str = "c") -> RequestContext:
        return RequestContext(version, client_id, "/10.0.0.1", next(self._handles))

    def apply(self, result: Result) -> Result:
        for rec in result.records:
            self.records.append(rec)
            self.mirror.replay(*rec)
        for handle, resp in result.replies:
            assert handle not in self.replies, f"reply handle {handle} answered twice"
            self.replies[handle] = resp
        self.events.extend(result.events)
        return result

    @property
    def timers(self) -> dict[str, int]:
        """When each armed timer comes up (its heap entry: at or before its deadline), by key."""
        return self.shard.timers.armed()

    def event_lines(self) -> list[str]:
        return [render(e) for e in self.events]

    def advance(self, ms: int) -> None:
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

    def reply(self, handle: int) -> Any:
        return self.replies.get(handle)

    def state(self, group: str) -> ClassicGroupState:
        return self.shard.groups[group].state

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


def offset_delete(h: Harness, group: str, topics: dict[str, list[int]]) -> OffsetDeleteResponse:
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
    h: Harness, group: str, producer_id: int, offsets: dict[tuple[str, int], int]
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
