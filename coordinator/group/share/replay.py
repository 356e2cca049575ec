"""A share group's records: built here, and applied to the group the same way at write and at replay.

How this works: the heartbeat and every other change build ``TypedRecord``s -- (key, value)
pairs of ``storage.records.share_group``, value None for a tombstone -- with the builders
below (Kafka's GroupCoordinatorRecordHelpers.newShareGroup*). ``apply_all`` encodes each for
the offsets log and applies it to the in-memory group with ``apply``, the function the
log's replay at start-up calls too (through ``replay``, which finds or makes the group), so
a group's state is by construction what replaying its records gives. A member's tombstones
go current assignment, target, member metadata (the order Kafka's replay requires); the
tombstones of a whole group are Kafka's ``ShareGroup.createGroupTombstoneRecords``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.group.records import TypedRecord
from coordinator.group.share.group import Assignment, ShareGroup, ShareMember, TopicInit, freeze
from coordinator.group.types import Result
from storage.records import (
    ShareAssignedPartitions,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    ShareTargetPartitions,
    TopicInfo,
    TopicPartitionsInfo,
    encode_share_group_key,
    encode_share_group_value,
)

__all__ = [
    "apply",
    "apply_all",
    "current_assignment",
    "group_metadata",
    "group_tombstones",
    "member_metadata",
    "member_removed",
    "replay",
    "state_partition_metadata",
    "target_member",
    "target_metadata",
]

# ------------------------------------------------------------ builders


def member_metadata(gid: str, m: ShareMember) -> TypedRecord:
    return (
        ShareGroupMemberMetadataKey(gid, m.member_id),
        ShareGroupMemberMetadataValue(
            m.rack_id, m.client_id, m.client_host, sorted(m.subscribed_topic_names)
        ),
    )


def group_metadata(gid: str, epoch: int, metadata_hash: int) -> TypedRecord:
    return ShareGroupMetadataKey(gid), ShareGroupMetadataValue(epoch, metadata_hash)


def target_metadata(gid: str, epoch: int) -> TypedRecord:
    return (
        ShareGroupTargetAssignmentMetadataKey(gid),
        ShareGroupTargetAssignmentMetadataValue(epoch),
    )


def target_member(gid: str, member_id: str, parts: Assignment) -> TypedRecord:
    return (
        ShareGroupTargetAssignmentMemberKey(gid, member_id),
        ShareGroupTargetAssignmentMemberValue(
            [ShareTargetPartitions(t, sorted(ps)) for t, ps in parts.items()]
        ),
    )


def current_assignment(gid: str, m: ShareMember) -> TypedRecord:
    return (
        ShareGroupCurrentMemberAssignmentKey(gid, m.member_id),
        ShareGroupCurrentMemberAssignmentValue(
            m.member_epoch,
            m.previous_member_epoch,
            m.state,
            [ShareAssignedPartitions(t, sorted(ps)) for t, ps in m.assigned.items()],
        ),
    )


def state_partition_metadata(
    gid: str,
    initializing: Mapping[bytes, TopicInit],
    initialized: Mapping[bytes, TopicInit],
    deleting: Mapping[bytes, str],
) -> TypedRecord:
    def infos(topics: Mapping[bytes, TopicInit]) -> list[TopicPartitionsInfo]:
        return [
            TopicPartitionsInfo(t, ti.name, sorted(ti.partitions))
            for t, ti in topics.items()
            if ti.partitions
        ]

    return (
        ShareGroupStatePartitionMetadataKey(gid),
        ShareGroupStatePartitionMetadataValue(
            infos(initializing),
            infos(initialized),
            [TopicInfo(t, name) for t, name in deleting.items()],
        ),
    )


def member_removed(gid: str, member_id: str) -> list[TypedRecord]:
    """A member's tombstones, in the order Kafka's replay requires."""
    return [
        (ShareGroupCurrentMemberAssignmentKey(gid, member_id), None),
        (ShareGroupTargetAssignmentMemberKey(gid, member_id), None),
        (ShareGroupMemberMetadataKey(gid, member_id), None),
    ]


def group_tombstones(group: ShareGroup) -> list[TypedRecord]:
    """Kafka's ShareGroup.createGroupTombstoneRecords, in its order."""
    gid = group.group_id
    out: list[TypedRecord] = []
    out.extend((ShareGroupCurrentMemberAssignmentKey(gid, m), None) for m in group.members)
    out.extend((ShareGroupTargetAssignmentMemberKey(gid, m), None) for m in group.target)
    out.append((ShareGroupTargetAssignmentMetadataKey(gid), None))
    out.extend((ShareGroupMemberMetadataKey(gid, m), None) for m in group.members)
    out.append((ShareGroupStatePartitionMetadataKey(gid), None))
    out.append((ShareGroupMetadataKey(gid), None))
    return out


# ------------------------------------------------------------ applying


def apply_all(out: Result, partition: int, group: ShareGroup, writes: list[TypedRecord]) -> None:
    """Encode every record for the log (all first: one that cannot be encoded changes
    nothing), then apply each to the group."""
    encoded = [
        (
            partition,
            encode_share_group_key(k),
            None if v is None else encode_share_group_value(v),
        )
        for k, v in writes
    ]
    out.records.extend(encoded)
    for k, v in writes:
        apply(group, k, v)


def _parts(tps: list[Any]) -> dict[bytes, frozenset[int]]:
    got: dict[bytes, set[int]] = {}
    for tp in tps:
        got.setdefault(tp.topic_id, set()).update(tp.partitions)
    return freeze(got)


def _member(group: ShareGroup, member_id: str) -> ShareMember:
    m = group.members.get(member_id)
    return ShareMember(member_id) if m is None else m.copy()


def apply(group: ShareGroup, key: Any, value: Any) -> None:
    """Apply one record of the group to it (Kafka's GroupMetadataManager.replay overloads)."""
    match key:
        case ShareGroupMemberMetadataKey(member_id=mid):
            if value is None:
                group.replay_member(None, mid)
                return
            m = _member(group, mid)
            m.rack_id = value.rack_id
            m.client_id = value.client_id
            m.client_host = value.client_host
            m.subscribed_topic_names = frozenset(value.subscribed_topic_names)
            group.replay_member(m, mid)
        case ShareGroupMetadataKey():
            if value is not None:
                group.group_epoch = value.epoch
                group.metadata_hash = value.metadata_hash
        case ShareGroupTargetAssignmentMetadataKey():
            if value is not None:
                group.assignment_epoch = value.assignment_epoch
        case ShareGroupTargetAssignmentMemberKey(member_id=mid):
            if value is None:
                group.target.pop(mid, None)
            else:
                group.target[mid] = _parts(value.topic_partitions)
        case ShareGroupCurrentMemberAssignmentKey(member_id=mid):
            if value is None:
                if mid in group.members:
                    m = _member(group, mid)
                    m.member_epoch = -1
                    m.assigned = {}
                    group.replay_member(m, mid)
                return
            m = _member(group, mid)
            m.member_epoch = value.member_epoch
            m.previous_member_epoch = value.previous_member_epoch
            m.state = value.state
            m.assigned = _parts(value.assigned_partitions)
            group.replay_member(m, mid)
        case ShareGroupStatePartitionMetadataKey():
            if value is None:
                group.initializing, group.initialized, group.deleting = {}, {}, {}
                group.initializing_since = {}
                return
            group.initializing = {
                t.topic_id: TopicInit(t.topic_name, frozenset(t.partitions))
                for t in value.initializing_topics
            }
            group.initialized = {
                t.topic_id: TopicInit(t.topic_name, frozenset(t.partitions))
                for t in value.initialized_topics
            }
            group.deleting = {t.topic_id: t.topic_name for t in value.deleting_topics}
            for t in list(group.initializing_since):
                if t not in group.initializing:
                    del group.initializing_since[t]


def replay(groups: dict[str, ShareGroup], key: Any, value: Any, now_ms: int = 0) -> None:
    """Apply a record read from the log: a value creates the group if it is missing; the
    group-metadata tombstone removes it."""
    gid = key.group
    group = groups.get(gid)
    if value is None and isinstance(key, ShareGroupMetadataKey):
        groups.pop(gid, None)
        return
    if group is None:
        if value is None:
            return
        group = groups[gid] = ShareGroup(gid)
    apply(group, key, value)
    if isinstance(key, ShareGroupStatePartitionMetadataKey):
        for t in group.initializing:
            group.initializing_since.setdefault(t, now_ms)
