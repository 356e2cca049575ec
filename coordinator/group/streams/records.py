"""The records of a streams group, built and applied in one place (Kafka's StreamsCoordinatorRecordHelpers and replay).

How this works: the builders return ``(StreamsGroupKey, value)`` pairs (value None: a
tombstone) of ``storage.records.streams_group``; ``apply_all`` encodes each for the log
and applies it to the in-memory group with ``apply``, the function the log's replay at
start-up calls too: a group's state is, by construction, what replaying its records
gives. Task lists are written sorted by subtopology id, partitions ascending, active
lists with their per-task assignment epochs (the ``AssignmentEpochs`` tag).

Orders Kafka writes and its replay expects: a member leaves with current assignment (22),
target (21), metadata (19) tombstones, then the group record (17); a group is deleted
with every member's 22, every 21, the 20, every 19, then 17 and 23.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from coordinator.group.streams.group import (
    Active,
    MemberState,
    StreamsGroup,
    StreamsGroupMember,
    Tasks,
    TasksTuple,
)
from coordinator.group.streams.topology import StreamsTopology
from coordinator.group.types import Result
from storage.records.messages import streams_group as gen
from storage.records.streams_group import (
    STREAMS_CURRENT_ASSIGNMENT,
    STREAMS_GROUP_METADATA,
    STREAMS_MEMBER_METADATA,
    STREAMS_TARGET_MEMBER,
    STREAMS_TARGET_METADATA,
    STREAMS_TOPOLOGY,
    StreamsGroupKey,
    encode_streams_group_key,
    encode_streams_group_value,
)

__all__ = [
    "StreamsRecord",
    "apply",
    "apply_all",
    "current_assignment",
    "group_metadata",
    "group_tombstones",
    "member_metadata",
    "member_removed",
    "target_member",
    "target_metadata",
    "topology",
]

StreamsRecord = tuple[StreamsGroupKey, Any]


def group_metadata(
    gid: str, epoch: int, metadata_hash: int, validated_epoch: int, configs: dict[str, str]
) -> StreamsRecord:
    return (
        StreamsGroupKey(STREAMS_GROUP_METADATA, gid),
        gen.StreamsGroupMetadataValue(
            epoch=epoch,
            metadata_hash=metadata_hash,
            validated_topology_epoch=validated_epoch,
            last_assignment_configs=[
                gen.LastAssignmentConfig(key=k, value=configs[k]) for k in sorted(configs)
            ],
        ),
    )


def member_metadata(gid: str, m: StreamsGroupMember) -> StreamsRecord:
    return (
        StreamsGroupKey(STREAMS_MEMBER_METADATA, gid, m.member_id),
        gen.StreamsGroupMemberMetadataValue(
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            topology_epoch=m.topology_epoch,
            process_id=m.process_id,
            user_endpoint=None
            if m.user_endpoint is None
            else gen.Endpoint(host=m.user_endpoint[0], port=m.user_endpoint[1]),
            client_tags=[
                gen.KeyValue(key=k, value=m.client_tags[k]) for k in sorted(m.client_tags)
            ],
        ),
    )


def topology(gid: str, t: StreamsTopology) -> StreamsRecord:
    return StreamsGroupKey(STREAMS_TOPOLOGY, gid), t.record


def target_metadata(gid: str, epoch: int, timestamp_ms: int) -> StreamsRecord:
    return (
        StreamsGroupKey(STREAMS_TARGET_METADATA, gid),
        gen.StreamsGroupTargetAssignmentMetadataValue(
            assignment_epoch=epoch, assignment_timestamp=timestamp_ms
        ),
    )


def _task_ids(tasks: Tasks) -> list[gen.TaskIds]:
    return [gen.TaskIds(s, sorted(tasks[s])) for s in sorted(tasks) if tasks[s]]


def target_member(gid: str, member_id: str, t: TasksTuple) -> StreamsRecord:
    return (
        StreamsGroupKey(STREAMS_TARGET_MEMBER, gid, member_id),
        gen.StreamsGroupTargetAssignmentMemberValue(
            active_tasks=_task_ids(t.active),
            standby_tasks=_task_ids(t.standby),
            warmup_tasks=_task_ids(t.warmup),
        ),
    )


def _with_epochs(tasks: Active) -> list[gen.StreamsGroupCurrentMemberAssignmentValueTaskIds]:
    out = []
    for s in sorted(tasks):
        parts = sorted(tasks[s])
        if parts:
            out.append(
                gen.StreamsGroupCurrentMemberAssignmentValueTaskIds(
                    s, parts, [tasks[s][p] for p in parts]
                )
            )
    return out


def _plain(tasks: Tasks) -> list[gen.StreamsGroupCurrentMemberAssignmentValueTaskIds]:
    return [
        gen.StreamsGroupCurrentMemberAssignmentValueTaskIds(s, sorted(tasks[s]))
        for s in sorted(tasks)
        if tasks[s]
    ]


def current_assignment(gid: str, m: StreamsGroupMember) -> StreamsRecord:
    return (
        StreamsGroupKey(STREAMS_CURRENT_ASSIGNMENT, gid, m.member_id),
        gen.StreamsGroupCurrentMemberAssignmentValue(
            member_epoch=m.member_epoch,
            previous_member_epoch=m.previous_member_epoch,
            state=m.state,
            active_tasks=_with_epochs(m.active),
            standby_tasks=_plain(m.standby),
            warmup_tasks=_plain(m.warmup),
            active_tasks_pending_revocation=_with_epochs(m.pending_active),
            standby_tasks_pending_revocation=_plain(m.pending_standby),
            warmup_tasks_pending_revocation=_plain(m.pending_warmup),
        ),
    )


def member_removed(gid: str, member_id: str) -> list[StreamsRecord]:
    """A member's tombstones, in the order Kafka's replay requires."""
    return [
        (StreamsGroupKey(STREAMS_CURRENT_ASSIGNMENT, gid, member_id), None),
        (StreamsGroupKey(STREAMS_TARGET_MEMBER, gid, member_id), None),
        (StreamsGroupKey(STREAMS_MEMBER_METADATA, gid, member_id), None),
    ]


def group_tombstones(group: StreamsGroup) -> list[StreamsRecord]:
    gid = group.group_id
    out: list[StreamsRecord] = []
    out += [(StreamsGroupKey(STREAMS_CURRENT_ASSIGNMENT, gid, m), None) for m in group.members]
    out += [(StreamsGroupKey(STREAMS_TARGET_MEMBER, gid, m), None) for m in group.targets]
    out.append((StreamsGroupKey(STREAMS_TARGET_METADATA, gid), None))
    out += [(StreamsGroupKey(STREAMS_MEMBER_METADATA, gid, m), None) for m in group.members]
    out.append((StreamsGroupKey(STREAMS_GROUP_METADATA, gid), None))
    out.append((StreamsGroupKey(STREAMS_TOPOLOGY, gid), None))
    return out


# ------------------------------------------------------------ applying


def _tasks(items: list[Any]) -> Tasks:
    out: dict[str, frozenset[int]] = {}
    for t in items:
        if t.partitions:
            out[t.subtopology_id] = out.get(t.subtopology_id, frozenset()) | frozenset(t.partitions)
    return out


def _active(items: list[Any], default: int) -> Active:
    """Per-task epochs from the tag when it has one per partition, else ``default``."""
    out: dict[str, dict[int, int]] = {}
    for t in items:
        epochs = t.assignment_epochs
        into = out.setdefault(t.subtopology_id, {})
        if epochs is not None and len(epochs) == len(t.partitions):
            into.update(zip(t.partitions, epochs, strict=True))
        else:
            into.update(dict.fromkeys(t.partitions, default))
    return {s: ps for s, ps in out.items() if ps}


def _member(group: StreamsGroup, member_id: str) -> StreamsGroupMember:
    m = group.members.get(member_id)
    return m if m is not None else StreamsGroupMember(member_id)


def apply(group: StreamsGroup, key: StreamsGroupKey, value: Any) -> bool:
    """Apply one record to ``group``; False when it removed the whole group (17 tombstone)."""
    rtype = key.rtype
    if rtype == STREAMS_GROUP_METADATA:
        if value is None:
            return False
        group.group_epoch = value.epoch
        group.metadata_hash = value.metadata_hash
        group.validated_topology_epoch = value.validated_topology_epoch
        group.last_assignment_configs = {
            c.key: c.value for c in value.last_assignment_configs or ()
        }
    elif rtype == STREAMS_MEMBER_METADATA:
        if value is None:
            group.remove_member(key.member_id)
        else:
            old = _member(group, key.member_id)
            ep = value.user_endpoint
            group.put_member(
                StreamsGroupMember(
                    key.member_id,
                    old.member_epoch,
                    old.previous_member_epoch,
                    old.state,
                    value.instance_id,
                    value.rack_id,
                    value.client_id,
                    value.client_host,
                    value.rebalance_timeout_ms,
                    value.topology_epoch,
                    value.process_id,
                    None if ep is None else (ep.host, ep.port),
                    {t.key: t.value for t in value.client_tags},
                    old.active,
                    old.standby,
                    old.warmup,
                    old.pending_active,
                    old.pending_standby,
                    old.pending_warmup,
                )
            )
    elif rtype == STREAMS_TARGET_METADATA:
        if value is None:
            group.assignment_epoch = -1
            group.assignment_timestamp_ms = 0
        else:
            group.assignment_epoch = value.assignment_epoch
            group.assignment_timestamp_ms = value.assignment_timestamp
    elif rtype == STREAMS_TARGET_MEMBER:
        if value is None:
            group.targets.pop(key.member_id, None)
        else:
            group.targets[key.member_id] = TasksTuple(
                _tasks(value.active_tasks), _tasks(value.standby_tasks), _tasks(value.warmup_tasks)
            )
    elif rtype == STREAMS_CURRENT_ASSIGNMENT:
        old = _member(group, key.member_id)
        if value is None:
            # The member stays until its metadata tombstone, with no epoch and no tasks.
            if key.member_id in group.members:
                group.put_member(
                    dataclasses.replace(
                        old,
                        member_epoch=-1,
                        previous_member_epoch=-1,
                        state=MemberState.STABLE,
                        active={},
                        standby={},
                        warmup={},
                        pending_active={},
                        pending_standby={},
                        pending_warmup={},
                    )
                )
        else:
            e = value.member_epoch
            group.put_member(
                dataclasses.replace(
                    old,
                    member_epoch=e,
                    previous_member_epoch=value.previous_member_epoch,
                    state=MemberState.of(value.state),
                    active=_active(value.active_tasks, e),
                    standby=_tasks(value.standby_tasks),
                    warmup=_tasks(value.warmup_tasks),
                    pending_active=_active(value.active_tasks_pending_revocation, e),
                    pending_standby=_tasks(value.standby_tasks_pending_revocation),
                    pending_warmup=_tasks(value.warmup_tasks_pending_revocation),
                )
            )
    elif rtype == STREAMS_TOPOLOGY:
        group.topology = None if value is None else StreamsTopology(value)
        group.configured_topology = None
    return True


def apply_all(
    out: Result, partition: int, group: StreamsGroup, writes: list[StreamsRecord]
) -> None:
    """Encode every record (all first: one that cannot be written changes nothing), then apply."""
    encoded = [
        (
            partition,
            encode_streams_group_key(k),
            None if v is None else encode_streams_group_value(k.rtype, v),
        )
        for k, v in writes
    ]
    out.records.extend(encoded)
    for k, v in writes:
        apply(group, k, v)
