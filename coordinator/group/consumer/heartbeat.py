"""ConsumerGroupHeartbeat (KIP-848), as Kafka's GroupMetadataManager handles it.

How this works
--------------
A heartbeat that changes nothing -- a member that owns exactly its target in a group whose
target is current -- takes ``_steady_heartbeat``: it moves the session deadline and answers
the same response object again.  Every other heartbeat is handled in three steps, as in
Kafka:

1. **Validate** the request and find the group and the member (creating them on a join,
   epoch 0), checking epochs, static-membership rules and the group size. Nothing has
   changed yet, so an error (``HeartbeatError``) is just an answer.
2. **Compute** what the heartbeat changes, into a list of typed records: the member's new
   subscription (type 5), a group-epoch bump when the subscribed topics or the group's
   preferred server assignor change what should be assigned (type 3; a new group starts
   at epoch 1 without one, Kafka 4.3+), a new target assignment when the group epoch is
   ahead of it (types 7 and 6), and the member's next reconciliation step (type 8).
3. **Apply**: every record is encoded for the log and replayed into the group
   (``apply_all``), exactly as a restarted coordinator replays the log; then the soft
   state (timers, metadata refresh deadline) is updated and the answer built. The runtime
   sends the answer only once the records are durable.

Steps 2 and 3 are ``update.reconcile_member``, shared with the classic members of a
consumer group (``interop.py``).  Leaving (epoch -1) and a static member's temporary leave
(epoch -2) end in the manager's ``fence_members``.
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinator.group import records as rec
from coordinator.group.consumer import replay as cg_replay
from coordinator.group.consumer.errors import HeartbeatError
from coordinator.group.consumer.group import (
    ConsumerGroup,
)
from coordinator.group.consumer.manager import (
    LEAVE_EPOCH,
    TEMPORARY_LEAVE_EPOCH,
    ConsumerGroupManager,
)
from coordinator.group.consumer.member import ConsumerGroupMember, MemberState
from coordinator.group.consumer.update import reconcile_member
from coordinator.group.timers import (
    consumer_rebalance_key,
)
from coordinator.group.types import RequestContext, Result
from protocol.errors import ErrorCode
from protocol.framing import reusable
from protocol.messages import consumer_group_heartbeat as cgh

__all__ = ["consumer_group_heartbeat"]

_ST = MemberState.STABLE
_UNREVOKED = MemberState.UNREVOKED_PARTITIONS


def _owned(req: cgh.ConsumerGroupHeartbeatRequest) -> dict[bytes, frozenset[int]] | None:
    if req.topic_partitions is None:
        return None
    out: dict[bytes, frozenset[int]] = {}
    for tp in req.topic_partitions:
        if tp.partitions:
            out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return out


def _blank(s: str | None) -> bool:
    return s is not None and not s.strip()


def consumer_group_heartbeat(
    mgr: ConsumerGroupManager,
    ctx: RequestContext,
    req: cgh.ConsumerGroupHeartbeatRequest,
    now_ms: int,
) -> Result:
    out = Result()
    resp = _steady_heartbeat(mgr, ctx, req, now_ms)
    if resp is not None:
        out.replies.append((ctx.reply_to, resp))
        return out
    try:
        _validate(mgr, ctx.api_version, req)
        err = mgr.partitions.precheck(req.group_id)
        if err is not None:
            raise HeartbeatError(err)
        if req.member_epoch in (LEAVE_EPOCH, TEMPORARY_LEAVE_EPOCH):
            resp = _leave(mgr, out, req, now_ms)
        else:
            resp = _heartbeat(mgr, out, ctx, req, now_ms)
    except HeartbeatError as e:
        if mgr.interop is not None:
            mgr.interop.discard_pending()
        resp = cgh.ConsumerGroupHeartbeatResponse(error_code=e.code, error_message=e.message)
    out.replies.append((ctx.reply_to, resp))
    return out


def _steady_heartbeat(
    mgr: ConsumerGroupManager,
    ctx: RequestContext,
    req: cgh.ConsumerGroupHeartbeatRequest,
    now_ms: int,
) -> cgh.ConsumerGroupHeartbeatResponse | None:
    """The answer to a heartbeat that changes nothing, or None to take the full path.

    Most heartbeats come from a member that owns exactly its target, in a group whose
    target is current: they only prove the member alive. Every condition below is one
    under which the full path would validate the request, write nothing, change no state
    and answer just (member id, epoch, interval); anything else goes the full way.
    """
    group = mgr.groups.get(req.group_id)
    if group is None:
        return None
    member = group.members.get(req.member_id)
    if (
        member is None
        or req.member_epoch != member.member_epoch
        or member.state is not _ST
        or member.member_epoch != group.assignment_epoch
        or group.group_epoch != group.assignment_epoch
        or req.rebalance_timeout_ms != -1
        or req.subscribed_topic_names is not None
        or req.subscribed_topic_regex is not None
        or req.server_assignor is not None
        or req.rack_id is not None
        or req.instance_id != member.instance_id
        or member.classic_member_metadata is not None
        or ctx.client_id != member.client_id
        or ctx.client_host != member.client_host
        or group.regex_count
        or now_ms >= group.metadata_refresh_deadline_ms
        or group.group_epoch < group.metadata_refresh_epoch
        or mgr.partitions.precheck(req.group_id) is not None
    ):
        return None
    timer = group.session_timers.get(member.member_id)
    session_ms, interval_ms = mgr.group_configs.get(req.group_id, mgr.default_timeouts)
    deadline = now_ms + session_ms
    if timer is None or deadline < timer.armed_ms:
        return None
    timer.deadline_ms = deadline  # moved later in place (see timers.py)
    # The same answer object while the epoch (and the group's interval) stays: the
    # server encodes it once.
    resp = group.steady_responses.get(member.member_id)
    if (
        resp is None
        or resp.member_epoch != member.member_epoch
        or resp.heartbeat_interval_ms != interval_ms
    ):
        resp = group.steady_responses[member.member_id] = reusable(
            cgh.ConsumerGroupHeartbeatResponse(
                member_id=member.member_id,
                member_epoch=member.member_epoch,
                heartbeat_interval_ms=interval_ms,
            )
        )
    return resp


def _validate(
    mgr: ConsumerGroupManager, version: int, req: cgh.ConsumerGroupHeartbeatRequest
) -> None:
    bad = ErrorCode.INVALID_REQUEST
    epoch = req.member_epoch
    if (version >= 1 or epoch > 0 or epoch == LEAVE_EPOCH) and not req.member_id.strip():
        raise HeartbeatError(bad, "MemberId can't be empty.")
    if not req.group_id.strip():
        raise HeartbeatError(bad, "GroupId can't be empty.")
    if _blank(req.instance_id):
        raise HeartbeatError(bad, "InstanceId can't be empty.")
    if _blank(req.rack_id):
        raise HeartbeatError(bad, "RackId can't be empty.")
    if epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise HeartbeatError(bad, "RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or req.topic_partitions:
            raise HeartbeatError(bad, "TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise HeartbeatError(
                bad,
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                "when (re-)joining.",
            )
    elif epoch == TEMPORARY_LEAVE_EPOCH:
        if req.instance_id is None:
            raise HeartbeatError(bad, "InstanceId can't be null.")
    elif epoch < TEMPORARY_LEAVE_EPOCH:
        raise HeartbeatError(bad, "MemberEpoch is invalid.")
    if req.server_assignor is not None and req.server_assignor not in mgr.assignors:
        raise HeartbeatError(
            ErrorCode.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {req.server_assignor} is not supported. "
            f"Supported assignors: {', '.join(mgr.assignors)}.",
        )


def _heartbeat(
    mgr: ConsumerGroupManager,
    out: Result,
    ctx: RequestContext,
    req: cgh.ConsumerGroupHeartbeatRequest,
    now_ms: int,
) -> cgh.ConsumerGroupHeartbeatResponse:
    gid = req.group_id
    epoch = req.member_epoch
    writes: list[rec.TypedRecord] = []
    group = mgr.groups.get(gid)
    if group is None:
        other = mgr.other_group_type(gid)
        if other is not None:
            if epoch != 0 or mgr.interop is None or other != "classic":
                raise HeartbeatError(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group."
                )
            # An empty classic group is replaced; a live one is upgraded online.
            group = mgr.interop.convert_classic_group(out, writes, gid, now_ms)
        elif epoch != 0:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {gid} not found.")
        else:
            group = ConsumerGroup(gid)  # registered when its first record is applied
    member_id = req.member_id
    if len(group.members) >= mgr.config.consumer_group_max_size and (
        not member_id or member_id not in group.members
    ):
        raise HeartbeatError(
            ErrorCode.GROUP_MAX_SIZE_REACHED,
            f"The consumer group has reached its maximum capacity of "
            f"{mgr.config.consumer_group_max_size} members.",
        )
    if not member_id:
        member_id = mgr.new_member_id()
    owned = _owned(req)
    replaced: ConsumerGroupMember | None = None
    if req.instance_id is None:
        old = group.members.get(member_id)
        if old is None:
            if epoch != 0:
                raise HeartbeatError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {member_id} is not a member of group {gid}.",
                )
            old = ConsumerGroupMember(member_id)
            is_new = True
        else:
            _check_epoch(old, epoch, owned)
            is_new = False
    else:
        old, replaced, is_new = _static_member(mgr, group, member_id, req, owned)
    if replaced is not None:
        writes.extend(rec.member_removed(gid, replaced.member_id))
        # The replacement inherits the old member's target and assignment at epoch 0.
        writes.append(rec.member_subscription(gid, old))
        target_of_old = group.target.get(replaced.member_id)
        writes.append(rec.target_member(gid, member_id, target_of_old or {}))
        writes.append(rec.current_assignment(gid, old))

    updated = _updated(old, ctx, req)
    response = reconcile_member(
        mgr, out, writes, group, old, updated, replaced, is_new, owned, now_ms, "heartbeat"
    )
    member = response
    full = (
        req.rebalance_timeout_ms != -1
        and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
        and req.topic_partitions is not None
    )
    resp = cgh.ConsumerGroupHeartbeatResponse(
        member_id=member.member_id,
        member_epoch=member.member_epoch,
        heartbeat_interval_ms=mgr.group_configs.get(req.group_id, mgr.default_timeouts)[1],
    )
    if epoch == 0 or full or member.assigned != old.assigned:
        resp.assignment = cgh.Assignment(
            topic_partitions=[
                cgh.AssignmentTopicPartitions(topic_id=t, partitions=sorted(ps))
                for t, ps in member.assigned.items()
            ]
        )
    return resp


def _updated(
    old: ConsumerGroupMember, ctx: RequestContext, req: cgh.ConsumerGroupHeartbeatRequest
) -> ConsumerGroupMember:
    """The member as the request describes it (a field the request leaves out is kept)."""
    updated = old.copy()
    if req.instance_id is not None:
        updated.instance_id = req.instance_id
    if req.rack_id is not None:
        updated.rack_id = req.rack_id
    if req.rebalance_timeout_ms != -1:
        updated.rebalance_timeout_ms = req.rebalance_timeout_ms
    if req.server_assignor is not None:
        updated.server_assignor = req.server_assignor
    if req.subscribed_topic_names is not None:
        updated.subscribed_topic_names = frozenset(req.subscribed_topic_names)
    if req.subscribed_topic_regex is not None:
        updated.subscribed_topic_regex = req.subscribed_topic_regex
    updated.client_id = ctx.client_id
    updated.client_host = ctx.client_host
    updated.classic_member_metadata = None
    return updated


def _static_member(
    mgr: ConsumerGroupManager,
    group: ConsumerGroup,
    member_id: str,
    req: cgh.ConsumerGroupHeartbeatRequest,
    owned: Mapping[bytes, frozenset[int]] | None,
) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None, bool]:
    """(the member to update, the static member it replaces, whether it is new)."""
    iid = req.instance_id
    assert iid is not None
    holder = group.member_by_instance(iid)
    if req.member_epoch == 0:
        if holder is None:
            old = group.members.get(member_id)
            if old is not None:
                return old, None, False
            m = ConsumerGroupMember(member_id)
            return m, None, True
        if holder.member_id == member_id:
            return holder, None, False  # a known member rejoining (Kafka 4.2)
        if holder.member_epoch != TEMPORARY_LEAVE_EPOCH and not holder.uses_classic_protocol:
            raise HeartbeatError(
                ErrorCode.UNRELEASED_INSTANCE_ID,
                f"Static member {member_id} with instance id {iid} cannot join the group "
                f"because the instance id is owned by {holder.member_id} member.",
            )
        m = holder.copy(member_id)
        m.member_epoch = 0
        m.previous_member_epoch = 0
        m.pending_revocation = {}
        return m, holder, False
    if holder is None:
        raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {iid} is unknown.")
    if holder.member_id != member_id:
        raise HeartbeatError(
            ErrorCode.FENCED_INSTANCE_ID,
            f"Static member {member_id} with instance id {iid} was fenced by member "
            f"{holder.member_id}.",
        )
    _check_epoch(holder, req.member_epoch, owned)
    return holder, None, False


def _leave(
    mgr: ConsumerGroupManager, out: Result, req: cgh.ConsumerGroupHeartbeatRequest, now_ms: int
) -> cgh.ConsumerGroupHeartbeatResponse:
    gid = req.group_id
    group = mgr.groups.get(gid)
    if group is None:
        if mgr.other_group_type(gid) is not None:
            raise HeartbeatError(
                ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group."
            )
        raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
    iid = req.instance_id
    if iid is None:
        member = group.members.get(req.member_id)
        if member is None:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {req.member_id} is not a member of group {gid}.",
            )
        mgr.fence_members(out, group, [member], now_ms, "left the group", "left")
        return cgh.ConsumerGroupHeartbeatResponse(member_id=req.member_id, member_epoch=-1)
    holder = group.member_by_instance(iid)
    if holder is None:
        raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {iid} is unknown.")
    if holder.member_id != req.member_id:
        raise HeartbeatError(
            ErrorCode.FENCED_INSTANCE_ID,
            f"Static member {req.member_id} with instance id {iid} was fenced by member "
            f"{holder.member_id}.",
        )
    if req.member_epoch == TEMPORARY_LEAVE_EPOCH:
        m = holder.copy()
        m.member_epoch = TEMPORARY_LEAVE_EPOCH
        m.pending_revocation = {}
        cg_replay.apply_all(
            out, mgr.partitions.partition_of(gid), group, [rec.current_assignment(gid, m)]
        )
        mgr.timers.cancel(consumer_rebalance_key(gid, m.member_id))
        return cgh.ConsumerGroupHeartbeatResponse(
            member_id=holder.member_id, member_epoch=TEMPORARY_LEAVE_EPOCH
        )
    mgr.fence_members(out, group, [holder], now_ms, "left the group", "left")
    return cgh.ConsumerGroupHeartbeatResponse(member_id=req.member_id, member_epoch=-1)


def _check_epoch(
    member: ConsumerGroupMember, received: int, owned: Mapping[bytes, frozenset[int]] | None
) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid, with 4.2's rejoin at epoch 0."""
    stored = member.member_epoch
    if received == 0 or received == stored:
        return
    if received > stored:
        raise HeartbeatError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a greater member epoch ({received}) than the "
            f"one known by the group coordinator ({stored}). The member must abandon all "
            "its partitions and rejoin.",
        )
    if received == member.previous_member_epoch and owned is not None:
        assigned = member.assigned
        if all(ps <= assigned.get(t, frozenset()) for t, ps in owned.items()):
            return
    raise HeartbeatError(
        ErrorCode.FENCED_MEMBER_EPOCH,
        f"The consumer group member has a smaller member epoch ({received}) than the one "
        f"known by the group coordinator ({stored}). The member must abandon all its "
        "partitions and rejoin.",
    )
