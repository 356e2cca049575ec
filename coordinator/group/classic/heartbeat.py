"""Heartbeat and LeaveGroup: liveness of members and voluntary departure.

How this works
--------------
A Heartbeat from a valid member of the current generation re-arms its
session timer.  Its answer tells the member what to do: NONE in
CompletingRebalance and Stable, REBALANCE_IN_PROGRESS in PreparingRebalance
(rejoin now), UNKNOWN_MEMBER_ID if the group is Empty.  When a session timer
fires for a member that neither heartbeated nor is parked in a join/sync,
the member is removed and the group rebalances (``rebalance.py``).

LeaveGroup (v3+: a batch; v0-2: the single ``member_id``) removes each
identified member -- by member id, or by group.instance.id alone for admin
removal of static members -- each with its own error, then rebalances once.
On an unknown group v3+ answers every member UNKNOWN_MEMBER_ID (the request
NONE), v0-2 the request UNKNOWN_MEMBER_ID.
"""

from __future__ import annotations

from coordinator.group.classic.manager import ClassicGroupManager
from coordinator.group.classic.rebalance import (
    maybe_complete_join_phase,
    maybe_prepare_rebalance_or_complete_join,
)
from coordinator.group.classic.state import ClassicGroupState
from coordinator.group.types import RequestContext, Result
from protocol.errors import ErrorCode
from protocol.framing import constant
from protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from protocol.messages.leave_group import (
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    MemberResponse,
)

__all__ = ["heartbeat", "leave_group"]

_P = ClassicGroupState.PREPARING_REBALANCE
_C = ClassicGroupState.COMPLETING_REBALANCE
_S = ClassicGroupState.STABLE
_E = ClassicGroupState.EMPTY
_D = ClassicGroupState.DEAD
_OK = ErrorCode.NO_ERROR  # module constants: Enum attribute access is slow on 3.11
_REBALANCING = ErrorCode.REBALANCE_IN_PROGRESS
# Heartbeat answers are all alike: share them, and let the codec encode each once.
_RESPONSES = {code: constant(HeartbeatResponse(error_code=code)) for code in ErrorCode}


def heartbeat(
    m: ClassicGroupManager, ctx: RequestContext, req: HeartbeatRequest, now_ms: int
) -> Result:
    # The hottest request of a coordinator: one function, states compared directly, and
    # the session deadline moved in place (see ``ClassicGroupManager.reschedule_heartbeat``).
    out = Result()
    code = m.partitions.precheck(req.group_id)
    if code is None:
        group = m.groups.get(req.group_id)
        if group is None:
            code = ErrorCode.UNKNOWN_MEMBER_ID
        elif (state := group.state) is _D:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            # A dynamic member that is there needs no further validation (the usual case).
            member = group.members.get(req.member_id)
            if member is None or req.group_instance_id is not None:
                code = group.validate_member(req.member_id, req.group_instance_id)
            if code is not None:
                pass
            elif req.generation_id != group.generation:
                code = ErrorCode.ILLEGAL_GENERATION
            elif state is _E:
                code = ErrorCode.UNKNOWN_MEMBER_ID
            else:
                assert member is not None  # validate_member found it
                deadline = now_ms + member.session_timeout_ms
                timer = member.session_timer
                if timer is not None and deadline >= timer.armed_ms:
                    timer.deadline_ms = deadline
                else:
                    m.reschedule_heartbeat(out, group, member, now_ms)
                code = _REBALANCING if state is _P else _OK
    out.replies.append((ctx.reply_to, _RESPONSES[code]))
    return out


def leave_group(
    m: ClassicGroupManager, ctx: RequestContext, req: LeaveGroupRequest, now_ms: int
) -> Result:
    out = Result()
    v = ctx.api_version
    identities = req.members if v >= 3 else [MemberIdentity(member_id=req.member_id)]

    def whole(code: ErrorCode) -> Result:
        out.replies.append((ctx.reply_to, LeaveGroupResponse(error_code=code)))
        return out

    err = m.partitions.precheck(req.group_id)
    if err is not None:
        return whole(err)
    group = m.groups.get(req.group_id)
    if group is None:
        if v < 3:
            return whole(ErrorCode.UNKNOWN_MEMBER_ID)
        # Kafka's coordinator service turns the unknown group into an answer per member.
        unknown = [
            MemberResponse(
                member_id=i.member_id,
                group_instance_id=i.group_instance_id,
                error_code=ErrorCode.UNKNOWN_MEMBER_ID,
            )
            for i in identities
        ]
        out.replies.append((ctx.reply_to, LeaveGroupResponse(members=unknown)))
        return out
    if group.is_in(_D):
        return whole(ErrorCode.COORDINATOR_NOT_AVAILABLE)

    responses: list[MemberResponse] = []
    left: list[str] = []
    for ident in identities:
        code = ErrorCode.NO_ERROR
        why = f" ({ident.reason})" if ident.reason else ""
        if ident.member_id == "":
            # Admin removal of a static member by instance id alone.
            target = (
                group.static_members.get(ident.group_instance_id)
                if ident.group_instance_id is not None
                else None
            )
            if target is None:
                code = ErrorCode.UNKNOWN_MEMBER_ID
            else:
                m.remove_member(out, group, target)
                left.append(target + why)
        elif group.is_pending(ident.member_id):
            group.remove(ident.member_id)
            m.cancel_member_timers(group.group_id, ident.member_id)
            left.append(ident.member_id + why)
        else:
            err = group.validate_member(ident.member_id, ident.group_instance_id)
            if err is not None:
                code = err
            else:
                m.remove_member(out, group, ident.member_id)
                left.append(ident.member_id + why)
        responses.append(
            MemberResponse(
                member_id=ident.member_id,
                group_instance_id=ident.group_instance_id,
                error_code=code,
            )
        )

    if left:
        reason = f"members left the group: {', '.join(left)}"
        if group.is_in(_S, _C):
            maybe_prepare_rebalance_or_complete_join(m, out, group, reason, "leave", now_ms)
        elif group.is_in(_P):
            maybe_complete_join_phase(m, out, group, now_ms)

    if v >= 3:
        resp = LeaveGroupResponse(error_code=ErrorCode.NO_ERROR, members=responses)
    else:
        resp = LeaveGroupResponse(error_code=responses[0].error_code if responses else 0)
    out.replies.append((ctx.reply_to, resp))
    return out
