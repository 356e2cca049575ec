"""Classic members inside consumer groups: JoinGroup, SyncGroup, Heartbeat and LeaveGroup.

How this works (Kafka's GroupMetadataManager ``classicGroup*ToConsumerGroup``): JoinGroup
makes a classic member a member of the consumer group: its subscription (topics, owned
partitions, rack) comes from the first protocol's ConsumerProtocolSubscription, and the
heartbeat's steps run for it (epoch bump, target, reconciliation against the partitions it
says it owns). Its JoinGroup answer carries its member epoch as the generation and no
member list (it is not a leader: the coordinator assigns). SyncGroup hands it its assigned
partitions as a ConsumerProtocolAssignment. Heartbeat answers REBALANCE_IN_PROGRESS when it
must rejoin to move on (the group epoch moved, it has partitions to revoke, or partitions
it waited for are free); it must then rejoin within its rebalance timeout (join timer), and
sync within it (sync timer), or it is fenced.  Converting a group between the two types is
``conversion.py``, which ``ClassicInterop`` extends.
"""

from __future__ import annotations

from coordinator.group import records as rec
from coordinator.group.classic import join
from coordinator.group.classic.subscription import (
    parse_subscription,
)
from coordinator.group.consumer import update as cg_update
from coordinator.group.consumer.conversion import CONSUMER_PROTOCOL_TYPE, GroupConversions
from coordinator.group.consumer.group import ConsumerGroup
from coordinator.group.consumer.member import ConsumerGroupMember, MemberState
from coordinator.group.timers import (
    TimerAction,
    TimerKind,
    consumer_classic_join_key,
    consumer_classic_sync_key,
)
from coordinator.group.types import RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from protocol.messages.leave_group import (
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberResponse,
)
from protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from storage.records import ClassicMemberMetadata

__all__ = ["ClassicInterop"]

_UNREVOKED = MemberState.UNREVOKED_PARTITIONS
_UNRELEASED = MemberState.UNRELEASED_PARTITIONS


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ClassicInterop(GroupConversions):
    # ------------------------------------------------------------ JoinGroup

    def join_group(
        self, ctx: RequestContext, req: JoinGroupRequest, group: ConsumerGroup, now_ms: int
    ) -> Result:
        out = Result()

        def answer(resp: JoinGroupResponse) -> Result:
            out.replies.append((ctx.reply_to, resp))
            return out

        cfg = self.config
        if not (
            cfg.group_min_session_timeout_ms
            <= req.session_timeout_ms
            <= cfg.group_max_session_timeout_ms
        ):
            return answer(
                JoinGroupResponse(
                    error_code=ErrorCode.INVALID_SESSION_TIMEOUT, member_id=req.member_id
                )
            )
        if group.is_empty():
            # An empty consumer group gives way to a classic one, whatever the policy.
            self.consumer.delete_group(out, group)
            out.extend(join.join_group(self.classic, ctx, req, now_ms))
            return out
        try:
            return self._join(out, ctx, req, group, now_ms)
        except _Refused as e:
            return answer(JoinGroupResponse(error_code=e.code, member_id=req.member_id))

    def _join(
        self,
        out: Result,
        ctx: RequestContext,
        req: JoinGroupRequest,
        group: ConsumerGroup,
        now_ms: int,
    ) -> Result:
        gid = group.group_id
        unknown = req.member_id == ""
        member_id = self.consumer.new_member_id() if unknown else req.member_id
        if len(group.members) >= self.config.consumer_group_max_size and (
            member_id not in group.members
        ):
            raise _Refused(ErrorCode.GROUP_MAX_SIZE_REACHED)
        _check_protocols(group, req)
        if unknown and req.group_instance_id is None and ctx.api_version >= 4:
            out.replies.append(
                (
                    ctx.reply_to,
                    JoinGroupResponse(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id),
                )
            )
            return out
        sub = parse_subscription(req.protocols[0].metadata)
        if sub is None:
            raise _Refused(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)

        iid = req.group_instance_id
        old, replaced, is_new = _joining_member(group, member_id, iid, unknown)
        writes: list[rec.TypedRecord] = []
        if replaced is not None:
            writes.extend(rec.member_removed(gid, replaced.member_id))
            writes.append(rec.member_subscription(gid, old))
            writes.append(
                rec.target_member(gid, member_id, group.target.get(replaced.member_id, {}))
            )
            writes.append(rec.current_assignment(gid, old))
        updated = old.copy()
        if iid is not None:
            updated.instance_id = iid
        if sub.rack_id is not None:
            updated.rack_id = sub.rack_id
        if req.rebalance_timeout_ms != -1:
            updated.rebalance_timeout_ms = req.rebalance_timeout_ms
        updated.subscribed_topic_names = frozenset(sub.topics)
        updated.subscribed_topic_regex = ""  # Kafka 4.2: a classic member has no regex
        updated.client_id = ctx.client_id
        updated.client_host = ctx.client_host
        updated.classic_member_metadata = ClassicMemberMetadata(
            req.session_timeout_ms, [(p.name, p.metadata) for p in req.protocols]
        )
        owned = self._to_ids(sub.owned_partitions)
        member = cg_update.reconcile_member(
            self.consumer, out, writes, group, old, updated, replaced, is_new, owned, now_ms, "join"
        )
        self.timers.cancel(consumer_classic_join_key(gid, member.member_id))
        self.consumer.schedule_session(out, gid, member.member_id, now_ms, req.session_timeout_ms)
        self.timers.schedule(
            out,
            consumer_classic_sync_key(gid, member.member_id),
            now_ms + req.rebalance_timeout_ms,
            TimerAction(TimerKind.CONSUMER_CLASSIC_SYNC, gid, member.member_id),
        )
        out.replies.append(
            (
                ctx.reply_to,
                JoinGroupResponse(
                    member_id=member.member_id,
                    generation_id=member.member_epoch,
                    protocol_type=CONSUMER_PROTOCOL_TYPE,
                    protocol_name=req.protocols[0].name,
                    leader="",
                ),
            )
        )
        return out

    # ------------------------------------------------------------ SyncGroup / Heartbeat / LeaveGroup

    def _member(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation: int
    ) -> ConsumerGroupMember:
        """The classic member a SyncGroup/Heartbeat names, at the generation it names."""
        if instance_id is None:
            m = group.members.get(member_id)
            if m is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
        else:
            m = group.member_by_instance(instance_id)
            if m is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
            if m.member_id != member_id:
                raise _Refused(ErrorCode.FENCED_INSTANCE_ID)
        if m.classic_member_metadata is None:
            raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation != m.member_epoch:
            raise _Refused(ErrorCode.ILLEGAL_GENERATION)
        return m

    def sync_group(
        self, ctx: RequestContext, req: SyncGroupRequest, group: ConsumerGroup, now_ms: int
    ) -> Result:
        out = Result()
        try:
            m = self._member(group, req.member_id, req.group_instance_id, req.generation_id)
            meta = m.classic_member_metadata
            assert meta is not None
            if (req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                req.protocol_name is not None
                and req.protocol_name != meta.supported_protocols[0][0]
            ):
                raise _Refused(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            if group.group_epoch > m.member_epoch and m.state is not _UNREVOKED:
                self._arm_join_timer(out, group, m, now_ms)
                raise _Refused(ErrorCode.REBALANCE_IN_PROGRESS)
        except _Refused as e:
            out.replies.append((ctx.reply_to, SyncGroupResponse(error_code=e.code)))
            return out
        gid = group.group_id
        self.timers.cancel(consumer_classic_sync_key(gid, m.member_id))
        self.consumer.schedule_session(out, gid, m.member_id, now_ms, meta.session_timeout_ms)
        out.replies.append(
            (
                ctx.reply_to,
                SyncGroupResponse(
                    protocol_type=req.protocol_type,
                    protocol_name=req.protocol_name,
                    assignment=self.assignment_bytes(m, m.assigned),
                ),
            )
        )
        return out

    def heartbeat(
        self, ctx: RequestContext, req: HeartbeatRequest, group: ConsumerGroup, now_ms: int
    ) -> Result:
        out = Result()
        try:
            m = self._member(group, req.member_id, req.group_instance_id, req.generation_id)
        except _Refused as e:
            out.replies.append((ctx.reply_to, HeartbeatResponse(error_code=e.code)))
            return out
        meta = m.classic_member_metadata
        assert meta is not None
        gid = group.group_id
        self.consumer.schedule_session(out, gid, m.member_id, now_ms, meta.session_timeout_ms)
        error = ErrorCode.NO_ERROR
        if (
            m.member_epoch < group.group_epoch
            or m.state is _UNREVOKED
            or (m.state is _UNRELEASED and not self._waiting_on_unreleased(group, m))
        ):
            error = ErrorCode.REBALANCE_IN_PROGRESS
            self._arm_join_timer(out, group, m, now_ms)
        out.replies.append((ctx.reply_to, HeartbeatResponse(error_code=error)))
        return out

    @staticmethod
    def _waiting_on_unreleased(group: ConsumerGroup, m: ConsumerGroupMember) -> bool:
        """Whether a target partition of ``m`` is still owned by another member."""
        target = group.target.get(m.member_id, {})
        for topic_id, ps in target.items():
            have = m.assigned.get(topic_id, frozenset())
            for p in ps:
                if p not in have and group.current_partition_epoch(topic_id, p) != -1:
                    return True
        return False

    def _arm_join_timer(
        self, out: Result, group: ConsumerGroup, m: ConsumerGroupMember, now_ms: int
    ) -> None:
        key = consumer_classic_join_key(group.group_id, m.member_id)
        if key not in self.timers:
            self.timers.schedule(
                out,
                key,
                now_ms + m.rebalance_timeout_ms,
                TimerAction(TimerKind.CONSUMER_CLASSIC_JOIN, group.group_id, m.member_id),
            )

    def leave_group(
        self, ctx: RequestContext, req: LeaveGroupRequest, group: ConsumerGroup, now_ms: int
    ) -> Result:
        out = Result()
        identities: list[tuple[str, str | None]]
        if ctx.api_version <= 2:
            identities = [(req.member_id, None)]
        else:
            identities = [(m.member_id, m.group_instance_id) for m in req.members]
        responses: list[MemberResponse] = []
        leaving: dict[str, ConsumerGroupMember] = {}
        for member_id, instance_id in identities:
            code: int = ErrorCode.NO_ERROR
            found: ConsumerGroupMember | None
            if instance_id is None:
                found = group.members.get(member_id)
                if found is None:
                    code = ErrorCode.UNKNOWN_MEMBER_ID
            else:
                found = group.member_by_instance(instance_id)
                if found is None:
                    code = ErrorCode.UNKNOWN_MEMBER_ID
                elif member_id and found.member_id != member_id:
                    code = ErrorCode.FENCED_INSTANCE_ID
                    found = None
            if found is not None:
                leaving[found.member_id] = found
            responses.append(
                MemberResponse(
                    member_id=found.member_id if found is not None else member_id,
                    group_instance_id=instance_id,
                    error_code=code,
                )
            )
        if leaving:
            self.consumer.fence_members(
                out, group, list(leaving.values()), now_ms, "left the group (LeaveGroup)", "left"
            )
        if ctx.api_version <= 2:
            code = responses[0].error_code
            out.replies.append((ctx.reply_to, LeaveGroupResponse(error_code=code)))
        else:
            out.replies.append((ctx.reply_to, LeaveGroupResponse(members=responses)))
        return out

    # ------------------------------------------------------------ timers and loading

    def on_timer(
        self,
        out: Result,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        action: TimerAction,
        now_ms: int,
    ) -> None:
        if action.kind is TimerKind.CONSUMER_CLASSIC_JOIN:
            self.consumer.fence_members(
                out,
                group,
                [member],
                now_ms,
                "did not rejoin within its rebalance timeout",
                "join_timeout",
            )
        else:
            self.consumer.fence_members(
                out,
                group,
                [member],
                now_ms,
                "did not sync within its rebalance timeout",
                "sync_timeout",
            )

    def on_loaded_member(
        self, out: Result, group: ConsumerGroup, m: ConsumerGroupMember, now_ms: int
    ) -> None:
        meta = m.classic_member_metadata
        assert meta is not None
        self.consumer.schedule_session(
            out, group.group_id, m.member_id, now_ms, meta.session_timeout_ms
        )

    def cancel_classic_timers(self, gid: str, member_id: str) -> None:
        self.timers.cancel(consumer_classic_join_key(gid, member_id))
        self.timers.cancel(consumer_classic_sync_key(gid, member_id))


def _check_protocols(group: ConsumerGroup, req: JoinGroupRequest) -> None:
    """The joining member speaks the consumer protocol, with an assignor every classic
    member of the group supports too."""
    names = [p.name for p in req.protocols]
    if req.protocol_type != CONSUMER_PROTOCOL_TYPE or not names:
        raise _Refused(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    classic_members = [m for m in group.members.values() if m.classic_member_metadata is not None]
    if classic_members:
        common = set(names)
        for m in classic_members:
            meta = m.classic_member_metadata
            assert meta is not None
            common &= {n for n, _ in meta.supported_protocols}
        if not common:
            raise _Refused(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)


def _joining_member(
    group: ConsumerGroup, member_id: str, iid: str | None, unknown: bool
) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None, bool]:
    """(the member to update, the static member it replaces, whether it is new)."""
    if iid is None:
        old = group.members.get(member_id)
        if old is None:
            return ConsumerGroupMember(member_id), None, True
        return old, None, False
    holder = group.member_by_instance(iid)
    if not unknown:
        if holder is None:
            raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
        if holder.member_id != member_id:
            raise _Refused(ErrorCode.FENCED_INSTANCE_ID)
        return holder, None, False
    if holder is None:
        return ConsumerGroupMember(member_id), None, True
    old = holder.copy(member_id)
    old.member_epoch = 0
    old.previous_member_epoch = 0
    old.pending_revocation = {}
    return old, holder, False
