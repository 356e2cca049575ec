"""DescribeGroups for classic groups.

How this works
--------------
As in Kafka (GroupMetadataManager.describeGroups), a group that is not a
classic group is answered as state "Dead": with no error before v6, and from
v6 (KIP-1043) with GROUP_ID_NOT_FOUND and a message -- "Group X not found."
when there is no group, "Group X is not a classic group." when the id names a
group of another type (the caller says which through ``non_classic``; a
consumer group is described by ConsumerGroupDescribe).  Member metadata and
the protocol name are filled only when Stable (assignments always); v3+ may
ask for authorized operations, which we answer with what Kafka gives a fully
authorized user on a group (READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS,
ALTER_CONFIGS) -- on answers without an error only, as Kafka's KafkaApis
does.  Empty group ids are served, not rejected.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.group.classic.manager import ClassicGroupManager
from coordinator.group.classic.state import ClassicGroupState
from coordinator.group.types import RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages.describe_groups import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)

__all__ = [
    "GROUP_AUTHORIZED_OPERATIONS",
    "describe_groups",
    "group_not_found",
    "not_a_classic_group",
]

# AclOperation codes READ=3, DELETE=6, DESCRIBE=8, DESCRIBE_CONFIGS=10, ALTER_CONFIGS=11
# as a bitfield: the operations applicable to a group resource (Kafka 4 added the two
# config operations with group configs, KIP-848).
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
_AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def _dead(group_id: str, api_version: int, ops: int, message: str) -> DescribedGroup:
    if api_version >= 6:
        # KIP-1043; authorized operations are only reported on answers without error.
        return DescribedGroup(
            group_id=group_id,
            group_state=ClassicGroupState.DEAD.value,
            error_code=ErrorCode.GROUP_ID_NOT_FOUND,
            error_message=message,
        )
    return DescribedGroup(
        group_id=group_id, group_state=ClassicGroupState.DEAD.value, authorized_operations=ops
    )


def _ops(api_version: int, include_authorized_operations: bool) -> int:
    if api_version >= 3 and include_authorized_operations:
        return GROUP_AUTHORIZED_OPERATIONS
    return _AUTHORIZED_OPERATIONS_OMITTED


def group_not_found(
    group_id: str, api_version: int, include_authorized_operations: bool = False
) -> DescribedGroup:
    """DescribeGroups' answer for an id that names no group at all."""
    return _dead(
        group_id,
        api_version,
        _ops(api_version, include_authorized_operations),
        f"Group {group_id} not found.",
    )


def not_a_classic_group(
    group_id: str, api_version: int, include_authorized_operations: bool = False
) -> DescribedGroup:
    """DescribeGroups' answer for an id that names a group of another type (a consumer
    group): Dead, and on v6+ GROUP_ID_NOT_FOUND "Group X is not a classic group."."""
    return _dead(
        group_id,
        api_version,
        _ops(api_version, include_authorized_operations),
        f"Group {group_id} is not a classic group.",
    )


def describe_groups(
    m: ClassicGroupManager,
    ctx: RequestContext,
    req: DescribeGroupsRequest,
    now_ms: int,
    *,
    non_classic: Callable[[str], bool] | None = None,
) -> Result:
    """Describe ``req.groups``; ``non_classic(group_id)``: True when the id names a group
    of another type, answered as ``not_a_classic_group``."""
    out = Result()
    v = ctx.api_version
    ops = _ops(v, req.include_authorized_operations)
    described: list[DescribedGroup] = []
    for gid in req.groups:
        err = m.partitions.availability_error(gid)
        if err is not None:
            described.append(DescribedGroup(error_code=err, group_id=gid))
            continue
        group = m.groups.get(gid)
        if group is None:
            if non_classic is not None and non_classic(gid):
                described.append(_dead(gid, v, ops, f"Group {gid} is not a classic group."))
            else:
                described.append(_dead(gid, v, ops, f"Group {gid} not found."))
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
