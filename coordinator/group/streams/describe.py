"""StreamsGroupDescribe (KIP-1071), as Kafka's GroupMetadataManager and StreamsGroup answer it.

How this works: each group id is answered on its own: a blank id INVALID_GROUP_ID (group id
""), a partition not served its coordinator error, an id of no streams group
GROUP_ID_NOT_FOUND ("Group <id> not found." or "Group <id> is not a streams group.");
otherwise the state, the group and assignment epochs, the topology -- as configured
(decided partition counts) when it is ready, else as declared -- and every member with its
current and target tasks. v1 adds the topology description, which kgc never stores
(status NOT_STORED when asked, as Kafka without a description plugin), and the assignor's
name ("sticky").
"""

from __future__ import annotations

from coordinator.group.classic.describe import GROUP_AUTHORIZED_OPERATIONS
from coordinator.group.streams.configure import ConfiguredInternalTopic
from coordinator.group.streams.group import StreamsGroup, Tasks
from coordinator.group.streams.javaorder import (
    java_hash_order,
    java_hash_order_by,
    topic_partition_hash,
)
from coordinator.group.streams.manager import StreamsGroupManager
from coordinator.group.types import RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages import streams_group_describe as sgd
from storage.records import OFFSETS_TOPIC
from storage.records.messages.streams_group import TopicInfo

__all__ = ["describe_one", "streams_group_describe"]

ASSIGNOR_NAME = "sticky"
TOPOLOGY_DESCRIPTION_NOT_STORED = 1


def _task_ids(tasks: Tasks) -> list[sgd.TaskIds]:
    return [sgd.TaskIds(s, sorted(tasks[s])) for s in sorted(tasks)]


def _assign_ids(tasks: Tasks) -> list[sgd.AssignmentTaskIds]:
    return [sgd.AssignmentTaskIds(s, sorted(tasks[s])) for s in sorted(tasks)]


def _target_ids(tasks: Tasks) -> list[sgd.MemberAssignmentTaskIds]:
    return [sgd.MemberAssignmentTaskIds(s, sorted(tasks[s])) for s in sorted(tasks)]


def _configured_info(t: ConfiguredInternalTopic) -> sgd.TopicInfo:
    return sgd.TopicInfo(
        name=t.name,
        partitions=t.num_partitions,
        replication_factor=t.replication_factor or 0,
        topic_configs=[sgd.KeyValue(k, v) for k, v in t.configs],
    )


def _declared_info(t: TopicInfo) -> sgd.TopicInfo:
    return sgd.TopicInfo(
        name=t.name,
        partitions=t.partitions,
        replication_factor=t.replication_factor,
        topic_configs=[sgd.KeyValue(c.key, c.value) for c in t.topic_configs],
    )


def _topology(group: StreamsGroup) -> sgd.Topology:
    configured = group.configured_topology
    assert group.topology is not None
    if configured is not None and configured.is_ready and configured.subtopologies is not None:
        subs = [
            sgd.Subtopology(
                subtopology_id=sid,
                source_topics=sorted(s.source_topics),
                repartition_sink_topics=sorted(s.repartition_sink_topics),
                state_changelog_topics=[
                    _configured_info(s.state_changelog_topics[n])
                    for n in sorted(s.state_changelog_topics)
                ],
                repartition_source_topics=[
                    _as_source(_configured_info(s.repartition_source_topics[n]))
                    for n in sorted(s.repartition_source_topics)
                ],
            )
            for sid, s in configured.subtopologies.items()
        ]
        return sgd.Topology(epoch=configured.topology_epoch, subtopologies=subs)
    declared = group.topology
    return sgd.Topology(
        epoch=declared.epoch,
        subtopologies=[
            sgd.Subtopology(
                subtopology_id=sid,
                source_topics=sorted(s.source_topics),
                repartition_sink_topics=sorted(s.repartition_sink_topics),
                state_changelog_topics=sorted(
                    (_declared_info(t) for t in s.state_changelog_topics), key=lambda t: t.name
                ),
                repartition_source_topics=[
                    _as_source(i)
                    for i in sorted(
                        (_declared_info(t) for t in s.repartition_source_topics),
                        key=lambda t: t.name,
                    )
                ],
            )
            for sid, s in sorted(declared.subtopologies.items())
        ],
    )


def _as_source(t: sgd.TopicInfo) -> sgd.SubtopologyTopicInfo:
    """The same TopicInfo under the struct name the schema gives repartition sources."""
    return sgd.SubtopologyTopicInfo(
        t.name,
        t.partitions,
        t.replication_factor,
        [sgd.SubtopologyTopicInfoKeyValue(c.key, c.value) for c in t.topic_configs],
    )


def describe_one(
    mgr: StreamsGroupManager, gid: str, version: int, include_description: bool
) -> sgd.DescribedGroup:
    if not gid.strip():
        return sgd.DescribedGroup(group_id="", error_code=ErrorCode.INVALID_GROUP_ID)
    err = mgr.partitions.availability_error(gid)
    if err is not None:
        return sgd.DescribedGroup(group_id=gid, error_code=err)
    group = mgr.groups.get(gid)
    if group is None or group.topology is None:
        return sgd.DescribedGroup(
            group_id=gid,
            error_code=ErrorCode.GROUP_ID_NOT_FOUND,
            error_message=f"Group {gid} not found.",
        )
    members = []
    for m in group.members.values():
        active, standby, warmup = m.assigned_tasks()
        target = group.targets.get(m.member_id)
        offsets = group.task_offsets.get(m.member_id, {})
        end_offsets = group.task_end_offsets.get(m.member_id, {})
        members.append(
            sgd.Member(
                member_id=m.member_id,
                member_epoch=m.member_epoch,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                client_id=m.client_id,
                client_host=m.client_host,
                topology_epoch=m.topology_epoch,
                process_id=m.process_id,
                user_endpoint=None if m.user_endpoint is None else sgd.Endpoint(*m.user_endpoint),
                client_tags=[
                    sgd.MemberKeyValue(k, m.client_tags[k]) for k in java_hash_order(m.client_tags)
                ],
                task_offsets=[sgd.TaskOffset(s, p, o) for (s, p), o in sorted(offsets.items())],
                task_end_offsets=[
                    sgd.MemberTaskOffset(s, p, o) for (s, p), o in sorted(end_offsets.items())
                ],
                assignment=sgd.Assignment(
                    _task_ids(active), _assign_ids(standby), _assign_ids(warmup)
                ),
                target_assignment=sgd.MemberAssignment()
                if target is None
                else sgd.MemberAssignment(
                    _target_ids(target.active),
                    _target_ids(target.standby),
                    _target_ids(target.warmup),
                ),
            )
        )
    return sgd.DescribedGroup(
        group_id=gid,
        group_state=group.state.value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        topology=_topology(group),
        members=members,
        topology_description_status=TOPOLOGY_DESCRIPTION_NOT_STORED if include_description else 0,
        assignor_name=ASSIGNOR_NAME,
    )


def _kafka_order(mgr: StreamsGroupManager, group_ids: list[str]) -> list[str]:
    """The order Kafka answers in: blank ids first, then the ids grouped by offsets
    partition, the partitions in the order of its HashMap of TopicPartition."""
    blank = [g for g in group_ids if not g.strip()]
    by_partition: dict[int, list[str]] = {}
    for g in group_ids:
        if g.strip():
            by_partition.setdefault(mgr.partitions.partition_of(g), []).append(g)
    order = java_hash_order_by(by_partition, lambda p: topic_partition_hash(OFFSETS_TOPIC, p))
    return blank + [g for p in order for g in by_partition[p]]


def streams_group_describe(
    mgr: StreamsGroupManager,
    ctx: RequestContext,
    req: sgd.StreamsGroupDescribeRequest,
    now_ms: int,
    other_type: dict[str, str] | None = None,
) -> Result:
    out = Result()
    groups = []
    for gid in _kafka_order(mgr, req.group_ids):
        d = describe_one(mgr, gid, ctx.api_version, req.include_topology_description)
        if req.include_authorized_operations and d.error_code == ErrorCode.NO_ERROR:
            d.authorized_operations = GROUP_AUTHORIZED_OPERATIONS
        if d.error_code == ErrorCode.GROUP_ID_NOT_FOUND and other_type and gid in other_type:
            d.error_message = f"Group {gid} is not a streams group."
        groups.append(d)
    out.replies.append((ctx.reply_to, sgd.StreamsGroupDescribeResponse(groups=groups)))
    return out
