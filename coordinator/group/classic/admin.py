"""DescribeGroups, ListGroups and DeleteGroups.

How this works
--------------
These read (or, for DeleteGroups, tombstone) whole groups.  As in Kafka:

* DescribeGroups answers an unknown group as state "Dead" with no error;
  member metadata and the protocol name are filled only when Stable
  (assignments always); v3+ may ask for authorized operations, which we
  answer with what Kafka gives a fully authorized user on a group (READ,
  DELETE, DESCRIBE).  Empty group ids are served, not rejected.
* ListGroups lists every group of the loaded partitions, v4 filtering on
  state and v5 on group type (all our groups are "classic"); filters are
  case-insensitive.  A partition still loading makes the answer
  COORDINATOR_LOAD_IN_PROGRESS.
* DeleteGroups refuses non-Empty groups (NON_EMPTY_GROUP) and unknown ones
  (GROUP_ID_NOT_FOUND); otherwise it tombstones every offset and then the
  group metadata.
"""

from __future__ import annotations

from coordinator.group.base import PartitionStatus
from coordinator.group.classic.state import GroupState
from coordinator.group.offsets import OffsetsMixin
from coordinator.group.types import RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages.delete_groups import (
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
)
from protocol.messages.describe_groups import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from protocol.messages.list_groups import ListedGroup, ListGroupsRequest, ListGroupsResponse

__all__ = ["GROUP_AUTHORIZED_OPERATIONS", "AdminMixin"]

# AclOperation codes READ=3, DELETE=6, DESCRIBE=8 as a bitfield: the
# operations applicable to a group resource.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
_AUTHORIZED_OPERATIONS_OMITTED = -2147483648
GROUP_TYPE = "classic"


class AdminMixin(OffsetsMixin):
    def describe_groups(
        self, ctx: RequestContext, req: DescribeGroupsRequest, now_ms: int
    ) -> Result:
        out = Result()
        ops = (
            GROUP_AUTHORIZED_OPERATIONS
            if ctx.api_version >= 3 and req.include_authorized_operations
            else _AUTHORIZED_OPERATIONS_OMITTED
        )
        described: list[DescribedGroup] = []
        for gid in req.groups:
            err = self._availability_error(gid)
            if err is not None:
                described.append(DescribedGroup(error_code=err, group_id=gid))
                continue
            group = self.groups.get(gid)
            if group is None:
                described.append(
                    DescribedGroup(
                        group_id=gid,
                        group_state=GroupState.DEAD.value,
                        authorized_operations=ops,
                    )
                )
                continue
            stable = group.is_in(GroupState.STABLE)
            members = [
                DescribedGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata(group.protocol_name) if stable else b"",
                    member_assignment=m.assignment,
                )
                for m in group.members.values()
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

    def list_groups(self, ctx: RequestContext, req: ListGroupsRequest, now_ms: int) -> Result:
        out = Result()
        v = ctx.api_version
        states = {s.lower() for s in req.states_filter} if v >= 4 else set()
        types = {t.lower() for t in req.types_filter} if v >= 5 else set()
        error = ErrorCode.NO_ERROR
        if any(s is PartitionStatus.LOADING for s in self.partitions.values()):
            error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        listed: list[ListedGroup] = []
        if not types or GROUP_TYPE in types:
            for g in self.groups.values():
                if self._availability_error(g.group_id) is not None:
                    continue
                if states and g.state.value.lower() not in states:
                    continue
                listed.append(
                    ListedGroup(
                        group_id=g.group_id,
                        protocol_type=g.protocol_type or "",
                        group_state=g.state.value,
                        group_type=GROUP_TYPE,
                    )
                )
        out.replies.append((ctx.reply_to, ListGroupsResponse(error_code=error, groups=listed)))
        return out

    def delete_groups(self, ctx: RequestContext, req: DeleteGroupsRequest, now_ms: int) -> Result:
        out = Result()
        results: list[DeletableGroupResult] = []
        for gid in req.groups_names:
            err = self._availability_error(gid)
            group = self.groups.get(gid)
            if err is None:
                if group is None or group.is_in(GroupState.DEAD):
                    err = ErrorCode.GROUP_ID_NOT_FOUND
                elif not group.is_in(GroupState.EMPTY):
                    err = ErrorCode.NON_EMPTY_GROUP
            if err is None and group is not None:
                self._delete_group(out, group, now_ms)
                out.events.append(f"group {gid} deleted")
            results.append(
                DeletableGroupResult(
                    group_id=gid, error_code=ErrorCode.NO_ERROR if err is None else err
                )
            )
        out.replies.append((ctx.reply_to, DeleteGroupsResponse(results=results)))
        return out
