"""ConsumerGroupDescribe: each group's epochs, members, their assignments and targets.

How this works: a group is described from the manager's state alone, topics named through
the topics image (a topic missing from it is left out, as Kafka does); an id naming a
classic group answers GROUP_ID_NOT_FOUND with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from coordinator.group.consumer.manager import (
    ConsumerGroupManager,
)
from coordinator.group.consumer.member import (
    ConsumerGroupMember,
)
from coordinator.group.types import RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages import consumer_group_describe as cgd

__all__ = ["consumer_group_describe", "describe_one"]


def consumer_group_describe(
    mgr: ConsumerGroupManager,
    ctx: RequestContext,
    req: cgd.ConsumerGroupDescribeRequest,
    now_ms: int,
) -> Result:
    out = Result()
    groups: list[cgd.DescribedGroup] = []
    for gid in req.group_ids:
        groups.append(describe_one(mgr, gid, ctx.api_version))
    out.replies.append((ctx.reply_to, cgd.ConsumerGroupDescribeResponse(groups=groups)))
    return out


def describe_one(mgr: ConsumerGroupManager, gid: str, version: int) -> cgd.DescribedGroup:
    if not gid:
        return cgd.DescribedGroup(group_id="", error_code=ErrorCode.INVALID_GROUP_ID)
    err = mgr.partitions.availability_error(gid)
    if err is not None:
        return cgd.DescribedGroup(group_id=gid, error_code=err)
    group = mgr.groups.get(gid)
    if group is None:
        msg = (
            f"Group {gid} is not a consumer group."
            if mgr.other_group_type(gid) is not None
            else f"Group {gid} not found."
        )
        return cgd.DescribedGroup(
            group_id=gid, error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=msg
        )
    members = []
    for m in group.members.values():
        members.append(
            cgd.Member(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=sorted(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex,
                # What the member holds: pending revocation included (Kafka 4.4).
                assignment=cgd.Assignment(
                    topic_partitions=_named(mgr, _held(m), cgd.TopicPartitions)
                ),
                target_assignment=cgd.MemberAssignment(
                    topic_partitions=_named(
                        mgr, group.target.get(m.member_id, {}), cgd.MemberAssignmentTopicPartitions
                    )
                ),
                member_type=(0 if m.uses_classic_protocol else 1) if version >= 1 else -1,
            )
        )
    return cgd.DescribedGroup(
        group_id=gid,
        group_state=group.state.value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=group.preferred_assignor(mgr.default_assignor),
        members=members,
    )


def _named(mgr: ConsumerGroupManager, parts: Mapping[bytes, Iterable[int]], cls: Any) -> list[Any]:
    """``parts`` by topic, named; a list of partitions keeps its order, a set is sorted."""
    out = []
    for topic_id, ps in parts.items():
        t = mgr.topics.topic_by_id(topic_id)
        if t is None:
            continue  # Kafka leaves out topics missing from its metadata image
        partitions = ps if isinstance(ps, list) else sorted(ps)
        out.append(cls(topic_id=topic_id, topic_name=t.name, partitions=partitions))
    return out


def _held(m: ConsumerGroupMember) -> dict[bytes, list[int]]:
    """The partitions ``m`` holds, per topic: assigned, then those it has yet to give back
    (the order of Kafka's accumulateTopicPartitions)."""
    held = {topic_id: sorted(ps) for topic_id, ps in m.assigned.items()}
    for topic_id, ps in m.pending_revocation.items():
        held.setdefault(topic_id, []).extend(sorted(ps))
    return held
