"""ShareGroupDescribe: each share group's epochs, members and their assignments.

How this works: a group is described from the manager's state alone (what its durable
records say), topics named through the topics image (a topic missing from it is left out,
as Kafka does). An empty id answers INVALID_GROUP_ID; an unknown id, or one naming a group
of another type, GROUP_ID_NOT_FOUND with Kafka's message; a partition this node does not
serve, its coordinator error with the message of Kafka's exception.
"""

from __future__ import annotations

from coordinator.group.share.assignor import NAME as ASSIGNOR
from coordinator.group.share.manager import ShareGroupManager
from coordinator.group.types import RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages import share_group_describe as sgd

__all__ = ["describe_one", "share_group_describe"]

# The messages of Kafka's exceptions for these codes (ShareGroupDescribe carries them).
_MESSAGES = {
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: (
        "The coordinator is loading and hence can't process requests."
    ),
}


def share_group_describe(
    mgr: ShareGroupManager,
    ctx: RequestContext,
    req: sgd.ShareGroupDescribeRequest,
    now_ms: int,
) -> Result:
    out = Result()
    groups = [describe_one(mgr, gid) for gid in req.group_ids]
    out.replies.append((ctx.reply_to, sgd.ShareGroupDescribeResponse(groups=groups)))
    return out


def describe_one(mgr: ShareGroupManager, gid: str) -> sgd.DescribedGroup:
    if not gid:
        return sgd.DescribedGroup(group_id="", error_code=ErrorCode.INVALID_GROUP_ID)
    err = mgr.partitions.availability_error(gid)
    if err is not None:
        return sgd.DescribedGroup(group_id=gid, error_code=err, error_message=_MESSAGES.get(err))
    group = mgr.groups.get(gid)
    if group is None:
        msg = (
            f"Group {gid} is not a share group."
            if mgr.other_group_type(gid) is not None
            else f"Group {gid} not found."
        )
        return sgd.DescribedGroup(
            group_id=gid, error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=msg
        )
    members = []
    for m in group.members.values():
        assigned = []
        for topic_id, ps in m.assigned.items():
            t = mgr.topics.topic_by_id(topic_id)
            if t is None:
                continue  # Kafka leaves out topics missing from its metadata image
            assigned.append(
                sgd.TopicPartitions(topic_id=topic_id, topic_name=t.name, partitions=sorted(ps))
            )
        members.append(
            sgd.Member(
                member_id=m.member_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=sorted(m.subscribed_topic_names),
                assignment=sgd.Assignment(topic_partitions=assigned),
            )
        )
    return sgd.DescribedGroup(
        group_id=gid,
        group_state=group.state.value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=ASSIGNOR,
        members=members,
    )
