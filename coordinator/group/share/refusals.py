"""What the other group APIs answer on a share group's id, in their own shapes (Kafka 4.4).

How this works: the shard routes a classic or offsets API aimed at a share group here
instead of to its manager. OffsetCommit, TxnOffsetCommit and OffsetDelete answer
GROUP_ID_NOT_FOUND as their whole-request error (the group is not a consumer group);
SyncGroup and Heartbeat UNKNOWN_MEMBER_ID; LeaveGroup v3+ names each member
UNKNOWN_MEMBER_ID and succeeds, before v3 it fails as a whole; JoinGroup answers
INCONSISTENT_GROUP_PROTOCOL without a member id.
"""

from __future__ import annotations

from typing import Any

from protocol.error_responses import error_response
from protocol.errors import ErrorCode
from protocol.messages.heartbeat import HeartbeatResponse
from protocol.messages.join_group import JoinGroupResponse
from protocol.messages.leave_group import LeaveGroupResponse, MemberResponse
from protocol.messages.sync_group import SyncGroupResponse

__all__ = ["classic_refusal", "offsets_refusal"]


def offsets_refusal(api_key: int, version: int, req: Any) -> Any:
    return error_response(api_key, version, req, ErrorCode.GROUP_ID_NOT_FOUND)


def classic_refusal(name: str, version: int, req: Any) -> Any:
    """The answer of ``name`` (join_group, sync_group, heartbeat, leave_group)."""
    unknown = ErrorCode.UNKNOWN_MEMBER_ID
    if name == "join_group":
        return JoinGroupResponse(error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id="")
    if name == "sync_group":
        return SyncGroupResponse(error_code=unknown)
    if name == "heartbeat":
        return HeartbeatResponse(error_code=unknown)
    if version < 3:
        return LeaveGroupResponse(error_code=unknown)
    members = [
        MemberResponse(
            member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=unknown
        )
        for m in req.members
    ]
    return LeaveGroupResponse(members=members)
