"""JoinGroup: admitting members, KIP-394 pending members and KIP-345 static members.

How this works
--------------
Checks run in Kafka's order: empty group id (INVALID_GROUP_ID), session
timeout bounds (INVALID_SESSION_TIMEOUT), partition not loaded / not owned,
then group logic.  A JoinGroup with an empty member id creates the group if
needed; a known member id on an unknown group is UNKNOWN_MEMBER_ID.  The
group.max.size check comes next (in PreparingRebalance it counts members
already parked, which is how the last rejoiners of an oversized group get
kicked).

* New dynamic member, v4+: gets a member id and MEMBER_ID_REQUIRED and sits
  in the pending set until it rejoins with it (or its session timeout ends).
* New member otherwise: added (``is_new``: it can be expired while parked by
  the new-member join timeout), which starts or feeds a rebalance.
* New static member whose instance id is known: replaces the old member id
  (whose parked requests get FENCED_INSTANCE_ID).  In Stable, if the
  selected protocol would not change, there is no rebalance: the metadata is
  written and the member gets the current generation (v9+: the leader is told
  ``skip_assignment``).  In CompletingRebalance it always rebalances.
* Existing member: in PreparingRebalance it is parked; in CompletingRebalance
  an unchanged rejoin is answered with the current generation; in Stable the
  leader's join always rebalances, a follower's only if its metadata changed.

A group created by this request is persisted with an empty metadata record
when nothing else is written, as Kafka does.
"""

from __future__ import annotations

from coordinator.group import records
from coordinator.group.classic.group import ClassicGroup, ClassicGroupMember, Protocol
from coordinator.group.classic.manager import ClassicGroupManager
from coordinator.group.classic.rebalance import (
    maybe_complete_join_phase,
    maybe_prepare_rebalance_or_complete_join,
    prepare_rebalance,
)
from coordinator.group.classic.state import ClassicGroupState
from coordinator.group.events import RebalanceCause, StaticMemberReplaced
from coordinator.group.timers import TimerAction, TimerKind, heartbeat_key, pending_key
from coordinator.group.types import RequestContext, Result, log_string_fits
from protocol.errors import ErrorCode
from protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from protocol.messages.sync_group import SyncGroupResponse

__all__ = ["join_group"]

_P = ClassicGroupState.PREPARING_REBALANCE
_C = ClassicGroupState.COMPLETING_REBALANCE
_S = ClassicGroupState.STABLE
_E = ClassicGroupState.EMPTY
_D = ClassicGroupState.DEAD
_MEMBER_ID_SUFFIX_BYTES = 1 + 64  # "-" and the suffix (a UUID, or a test's shorter id)


def join_group(
    m: ClassicGroupManager, ctx: RequestContext, req: JoinGroupRequest, now_ms: int
) -> Result:
    out = Result()

    def fail(code: ErrorCode, member_id: str = req.member_id) -> Result:
        out.replies.append((ctx.reply_to, JoinGroupResponse(error_code=code, member_id=member_id)))
        return out

    if not req.group_id:
        return fail(ErrorCode.INVALID_GROUP_ID)
    cfg = m.config
    if not (
        cfg.group_min_session_timeout_ms
        <= req.session_timeout_ms
        <= cfg.group_max_session_timeout_ms
    ):
        return fail(ErrorCode.INVALID_SESSION_TIMEOUT)
    err = m.partitions.availability_error(req.group_id)
    if err is not None:
        return fail(err)
    if not _fits_the_log(ctx, req):
        # What Kafka answers when the group's record cannot be serialized; refused
        # here, before anything changes, because the record may be written much later.
        return fail(ErrorCode.UNKNOWN)

    gid = req.group_id
    unknown = req.member_id == ""
    group = m.groups.get(gid)
    new_group = group is None
    if group is None:
        if not unknown:
            return fail(ErrorCode.UNKNOWN_MEMBER_ID)
        group = ClassicGroup(gid, state_timestamp_ms=now_ms)
        m.groups[gid] = group

    if not _accept_joining_member(m, group, req.member_id):
        m.remove_member(out, group, req.member_id)
        fail(ErrorCode.GROUP_MAX_SIZE_REACHED, "")
    elif unknown:
        _join_new_member(m, out, ctx, req, group, now_ms)
    else:
        _join_existing_member(m, out, ctx, req, group, now_ms)

    if new_group and not out.records:
        out.records.append(
            records.empty_group_metadata_record(
                m.partitions.partition_of(group.group_id), group, now_ms
            )
        )
    return out


# ------------------------------------------------------------ helpers


def _fits_the_log(ctx: RequestContext, req: JoinGroupRequest) -> bool:
    """Whether every string this join puts into a group metadata record fits one."""
    # A new member's id is "<instance or client id>-<suffix>" (a UUID: 36 characters).
    prefix = req.group_instance_id if req.group_instance_id is not None else ctx.client_id
    return (
        log_string_fits(req.group_id)
        and log_string_fits(req.member_id)
        and log_string_fits(req.group_instance_id)
        and log_string_fits(req.protocol_type)
        and log_string_fits(ctx.client_host)
        and log_string_fits(ctx.client_id)
        and log_string_fits(prefix, reserve=_MEMBER_ID_SUFFIX_BYTES)
        and all(log_string_fits(p.name) for p in req.protocols)
    )


def _accept_joining_member(m: ClassicGroupManager, group: ClassicGroup, member_id: str) -> bool:
    max_size = m.config.group_max_size
    if group.is_in(_E, _D):
        return True
    member = group.members.get(member_id)
    if group.is_in(_P):
        # Counting parked members (not all members) lets the last rejoiners of
        # an oversized group be turned away.
        return (member is not None and member.awaiting_join) or (group.num_awaiting_join < max_size)
    return member is not None or len(group.members) < max_size


def _protocols(req: JoinGroupRequest) -> list[Protocol]:
    return [(p.name, p.metadata) for p in req.protocols]


def _rebalance_timeout(req: JoinGroupRequest) -> int:
    # JoinGroup v0 had no rebalance timeout; Kafka uses the session timeout.
    return req.session_timeout_ms if req.rebalance_timeout_ms < 0 else req.rebalance_timeout_ms


def _join_new_member(
    m: ClassicGroupManager,
    out: Result,
    ctx: RequestContext,
    req: JoinGroupRequest,
    group: ClassicGroup,
    now_ms: int,
) -> None:
    if group.is_in(_D):
        out.replies.append(
            (ctx.reply_to, JoinGroupResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE))
        )
        return
    if not group.supports_protocols(req.protocol_type, {p.name for p in req.protocols}):
        out.replies.append(
            (ctx.reply_to, JoinGroupResponse(error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        )
        return
    instance = req.group_instance_id
    new_id = f"{instance if instance is not None else ctx.client_id}-{m.suffix()}"
    if instance is not None:
        existing = group.static_members.get(instance)
        if existing is not None:
            _replace_static_member(m, out, ctx, req, group, existing, new_id, now_ms)
        else:
            _add_member_and_rebalance(m, out, ctx, req, group, new_id, now_ms)
    elif ctx.api_version >= 4:
        group.add_pending(new_id)
        m.timers.schedule(
            out,
            pending_key(group.group_id, new_id),
            now_ms + req.session_timeout_ms,
            TimerAction(TimerKind.PENDING, group.group_id, new_id),
        )
        out.replies.append(
            (
                ctx.reply_to,
                JoinGroupResponse(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id),
            )
        )
    else:
        _add_member_and_rebalance(m, out, ctx, req, group, new_id, now_ms)


def _join_existing_member(
    m: ClassicGroupManager,
    out: Result,
    ctx: RequestContext,
    req: JoinGroupRequest,
    group: ClassicGroup,
    now_ms: int,
) -> None:
    mid = req.member_id

    def reply(resp: JoinGroupResponse) -> None:
        out.replies.append((ctx.reply_to, resp))

    if group.is_in(_D):
        reply(JoinGroupResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=mid))
        return
    if not group.supports_protocols(req.protocol_type, {p.name for p in req.protocols}):
        reply(JoinGroupResponse(error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=mid))
        return
    if group.is_pending(mid):
        if req.group_instance_id is not None:
            # Kafka raises IllegalStateException here: pending members are never static.
            reply(JoinGroupResponse(error_code=ErrorCode.UNKNOWN, member_id=mid))
            return
        _add_member_and_rebalance(m, out, ctx, req, group, mid, now_ms)
        return
    err = group.validate_member(mid, req.group_instance_id)
    if err is not None:
        reply(
            JoinGroupResponse(error_code=err, member_id=mid, protocol_type=None, protocol_name=None)
        )
        return

    member = group.members[mid]
    protocols = _protocols(req)
    if group.is_in(_P):
        _update_member_and_rebalance(
            m, out, ctx, req, group, member,
            f"member {mid} joined during PreparingRebalance{_client_reason(req)}",
            "join", now_ms,
        )  # fmt: skip
    elif group.is_in(_C):
        if member.matches(protocols):
            # A retry of a JoinGroup whose answer was lost: same generation again.
            reply(m.current_generation_response(group, mid, with_members=group.is_leader(mid)))
        else:
            _update_member_and_rebalance(
                m, out, ctx, req, group, member,
                f"member {mid} changed its metadata during CompletingRebalance{_client_reason(req)}",
                "metadata_change", now_ms,
            )  # fmt: skip
    elif group.is_in(_S):
        if group.is_leader(mid):
            # The leader rejoins to have the assignment recomputed (e.g. new partitions).
            _update_member_and_rebalance(
                m, out, ctx, req, group, member,
                f"leader {mid} rejoined{_client_reason(req)}",
                "join", now_ms,
            )  # fmt: skip
        elif not member.matches(protocols):
            _update_member_and_rebalance(
                m, out, ctx, req, group, member,
                f"member {mid} changed its metadata{_client_reason(req)}",
                "metadata_change", now_ms,
            )  # fmt: skip
        else:
            reply(m.current_generation_response(group, mid, with_members=False))
    else:
        reply(JoinGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID, member_id=mid))


def _park_join(
    out: Result, group: ClassicGroup, member: ClassicGroupMember, ctx: RequestContext
) -> None:
    """Park this JoinGroup on the member, answering a superseded one first.

    Kafka silently drops a superseded parked JoinGroup (the client gave up
    on it); answering it keeps the runtime from holding a handle forever.
    """
    if member.join_reply is not None and member.join_reply != ctx.reply_to:
        out.replies.append(
            (
                member.join_reply,
                JoinGroupResponse(
                    error_code=ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id
                ),
            )
        )
    group.set_join_reply(member, ctx.reply_to, ctx.api_version)


def _update_member_and_rebalance(
    m: ClassicGroupManager,
    out: Result,
    ctx: RequestContext,
    req: JoinGroupRequest,
    group: ClassicGroup,
    member: ClassicGroupMember,
    reason: str,
    cause: RebalanceCause,
    now_ms: int,
) -> None:
    _park_join(out, group, member, ctx)
    group.update_member(
        member,
        _protocols(req),
        _rebalance_timeout(req),
        req.session_timeout_ms,
        ctx.reply_to,
        ctx.api_version,
    )
    maybe_prepare_rebalance_or_complete_join(m, out, group, reason, cause, now_ms)


def _add_member_and_rebalance(
    m: ClassicGroupManager,
    out: Result,
    ctx: RequestContext,
    req: JoinGroupRequest,
    group: ClassicGroup,
    member_id: str,
    now_ms: int,
) -> None:
    member = ClassicGroupMember(
        member_id=member_id,
        group_instance_id=req.group_instance_id,
        client_id=ctx.client_id,
        client_host=ctx.client_host,
        rebalance_timeout_ms=_rebalance_timeout(req),
        session_timeout_ms=req.session_timeout_ms,
        protocol_type=req.protocol_type,
        protocols=_protocols(req),
        join_reply=ctx.reply_to,
        join_version=ctx.api_version,
        is_new=True,
    )
    if group.is_in(_P) and group.previous_state is _E:
        group.new_member_added = True
    group.add(member)
    m.timers.cancel(pending_key(group.group_id, member_id))
    # A parked new member cannot heartbeat, and a client that retries after a
    # request timeout would leave defunct members behind: bound the wait.
    m.reschedule_heartbeat(out, group, member, now_ms, m.config.group_new_member_join_timeout_ms)
    instance = "" if req.group_instance_id is None else f" (instance {req.group_instance_id})"
    maybe_prepare_rebalance_or_complete_join(
        m,
        out,
        group,
        f"new member {member_id}{instance} joined{_client_reason(req)}",
        "join",
        now_ms,
    )


def _replace_static_member(
    m: ClassicGroupManager,
    out: Result,
    ctx: RequestContext,
    req: JoinGroupRequest,
    group: ClassicGroup,
    old_id: str,
    new_id: str,
    now_ms: int,
) -> None:
    instance = req.group_instance_id
    assert instance is not None
    old = group.members[old_id]
    leader_before = group.leader_id
    # Fence whatever the old incarnation still has parked.
    m.reply_join(
        out,
        old,
        group,
        JoinGroupResponse(
            error_code=ErrorCode.FENCED_INSTANCE_ID,
            member_id=old_id,
            protocol_type=None,
            protocol_name=None,
        ),
    )
    m.reply_sync(
        out,
        old,
        SyncGroupResponse(
            error_code=ErrorCode.FENCED_INSTANCE_ID, protocol_type=None, protocol_name=None
        ),
    )
    member = group.replace_static_member(instance, old_id, new_id)
    m.timers.cancel(heartbeat_key(group.group_id, old_id))
    m.reschedule_heartbeat(out, group, member, now_ms)
    out.events.append(StaticMemberReplaced(group.group_id, instance, old_id, new_id))

    group.update_member(
        member,
        _protocols(req),
        _rebalance_timeout(req),
        req.session_timeout_ms,
        ctx.reply_to,
        ctx.api_version,
    )
    if group.is_in(_S):
        if (group.protocol_name or "") == group.select_protocol():
            # No rebalance: persist the new member id and hand back the current generation.
            out.records.append(
                records.group_metadata_record(m.partitions.partition_of(group.group_id), group)
            )
            if ctx.api_version >= 9:
                leader = group.is_leader(new_id)
                resp = m.current_generation_response(
                    group, new_id, with_members=leader, skip=leader
                )
            else:
                # Older clients cannot skip the assignment: naming the previous
                # leader id makes a replaced leader act as a follower and just sync.
                resp = m.current_generation_response(group, new_id, with_members=False)
                resp.leader = leader_before or ""
            m.reply_join(out, member, group, resp)
            return
        maybe_prepare_rebalance_or_complete_join(
            m,
            out,
            group,
            f"static member {instance} rejoined as {new_id} with a protocol change",
            "static_replacement",
            now_ms,
        )
    elif group.is_in(_C):
        # The leader may already be computing an assignment for the old id.
        prepare_rebalance(
            m,
            out,
            group,
            f"static member {instance} rejoined as {new_id} during CompletingRebalance",
            "static_replacement",
            now_ms,
        )
    elif group.is_in(_P):
        maybe_complete_join_phase(m, out, group, now_ms)
    else:
        raise AssertionError(f"static member replaced in unexpected state {group.state}")


def _client_reason(req: JoinGroupRequest) -> str:
    return f" (client reason: {req.reason})" if req.reason else ""
