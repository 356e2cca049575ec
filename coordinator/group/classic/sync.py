"""SyncGroup: collecting the leader's assignment and handing it out.

How this works
--------------
Errors, in Kafka's order: unknown or Empty group -> UNKNOWN_MEMBER_ID; Dead ->
COORDINATOR_NOT_AVAILABLE; static fencing / unknown member; wrong
generation -> ILLEGAL_GENERATION; v5+ protocol type/name that differ from the
group's -> INCONSISTENT_GROUP_PROTOCOL; PreparingRebalance ->
REBALANCE_IN_PROGRESS.

In CompletingRebalance every SyncGroup is parked.  When the leader's
arrives, members it left out get an empty assignment, the group metadata
record (with all assignments) is emitted, every parked SyncGroup is answered
in the same Result -- so none is released before the record is durable --
and the group becomes Stable.  In Stable a SyncGroup is answered with the
member's current assignment.
"""

from __future__ import annotations

from coordinator.group import records
from coordinator.group.classic.manager import ClassicGroupManager
from coordinator.group.classic.rebalance import (
    remove_pending_sync_member,
    set_and_propagate_assignment,
)
from coordinator.group.classic.state import ClassicGroupState
from coordinator.group.events import GroupStable
from coordinator.group.types import RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse

__all__ = ["sync_group"]

_P = ClassicGroupState.PREPARING_REBALANCE
_C = ClassicGroupState.COMPLETING_REBALANCE
_S = ClassicGroupState.STABLE
_E = ClassicGroupState.EMPTY
_D = ClassicGroupState.DEAD


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


def sync_group(
    m: ClassicGroupManager, ctx: RequestContext, req: SyncGroupRequest, now_ms: int
) -> Result:
    out = Result()

    def fail(code: ErrorCode) -> Result:
        out.replies.append((ctx.reply_to, SyncGroupResponse(error_code=code)))
        return out

    err = m.partitions.precheck(req.group_id)
    if err is not None:
        return fail(err)
    group = m.groups.get(req.group_id)
    if group is None or group.is_in(_E):
        return fail(ErrorCode.UNKNOWN_MEMBER_ID)
    if group.is_in(_D):
        return fail(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    err = group.validate_member(req.member_id, req.group_instance_id)
    if err is not None:
        return fail(err)
    if req.generation_id != group.generation:
        return fail(ErrorCode.ILLEGAL_GENERATION)
    if _inconsistent(req.protocol_type, group.protocol_type) or _inconsistent(
        req.protocol_name, group.protocol_name
    ):
        return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    if group.is_in(_P):
        return fail(ErrorCode.REBALANCE_IN_PROGRESS)

    member = group.members[req.member_id]
    if group.is_in(_S):
        remove_pending_sync_member(m, group, member.member_id)
        out.replies.append(
            (
                ctx.reply_to,
                SyncGroupResponse(
                    error_code=ErrorCode.NO_ERROR,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    assignment=member.assignment,
                ),
            )
        )
        return out

    # CompletingRebalance: park until the leader's assignment is persisted.
    if member.sync_reply is not None and member.sync_reply != ctx.reply_to:
        # Kafka drops a superseded parked SyncGroup; we answer it instead.
        out.replies.append(
            (member.sync_reply, SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS))
        )
    member.sync_reply = ctx.reply_to
    member.sync_version = ctx.api_version
    remove_pending_sync_member(m, group, member.member_id)
    if not group.is_leader(member.member_id):
        return out

    assignment = {a.member_id: a.assignment for a in req.assignments}
    missing = [mid for mid in group.members if mid not in assignment]
    for mid in missing:
        assignment[mid] = b""
    # Written before the transition, like Kafka: the record's state timestamp
    # is when the group entered CompletingRebalance.
    out.records.append(
        records.group_metadata_record(m.partitions.partition_of(group.group_id), group, assignment)
    )
    set_and_propagate_assignment(m, out, group, assignment, now_ms)
    group.transition_to(_S, now_ms)
    out.events.append(
        GroupStable(
            group.group_id, group.generation, member.member_id, len(group.members), tuple(missing)
        )
    )
    return out
