"""DescribeGroups for classic groups.

How this works
--------------
As in Kafka, DescribeGroups answers an unknown group as state "Dead" with no
error; member metadata and the protocol name are filled only when Stable
(assignments always); v3+ may ask for authorized operations, which we answer
with what Kafka gives a fully authorized user on a group (READ, DELETE,
DESCRIBE).  Empty group ids are served, not rejected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.group.classic.state import ClassicGroupState
from coordinator.group.types import RequestContext, Result
from protocol.messages.describe_groups import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)

if TYPE_CHECKING:
    from coordinator.group.classic.manager import ClassicGroupManager

__all__ = ["GROUP_AUTHORIZED_OPERATIONS", "describe_groups"]

# AclOperation codes READ=3, DELETE=6, DESCRIBE=8 as a bitfield: the
# operations applicable to a group resource.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
_AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def describe_groups(
    m: ClassicGroupManager, ctx: RequestContext, req: DescribeGroupsRequest, now_ms: int
) -> Result:
    out = Result()
    ops = (
        GROUP_AUTHORIZED_OPERATIONS
        if ctx.api_version >= 3 and req.include_authorized_operations
        else _AUTHORIZED_OPERATIONS_OMITTED
    )
    described: list[DescribedGroup] = []
    for gid in req.groups:
        err = m.partitions.availability_error(gid)
        if err is not None:
            described.append(DescribedGroup(error_code=err, group_id=gid))
            continue
        group = m.groups.get(gid)
        if group is None:
            described.append(
                DescribedGroup(
                    group_id=gid,
                    group_state=ClassicGroupState.DEAD.value,
                    authorized_operations=ops,
                )
            )
            continue
        stable = group.is_in(ClassicGroupState.STABLE)
        members = [
            DescribedGroupMember(
                member_id=mem.member_id,
                group_instance_id=mem.group_instance_id,
                client_id=mem.client_id,
                client_host=mem.client_host,
                member_metadata=mem.metadata(group.protocol_name) if stable else b"",
                member_assignment=mem.assignment,
            )
            for mem in group.members.values()
        ]
        described.append(
            DescribedGroup(
                group_id=gid,
                group_state=group.state.value,
                protocol_type=group.protocol_type or "",
                protocol_data=(group.protocol_name or "") if stable else "",
                members=members,
                authorized_operations=ops,
            )
        )
    out.replies.append((ctx.reply_to, DescribeGroupsResponse(groups=described)))
    return out
