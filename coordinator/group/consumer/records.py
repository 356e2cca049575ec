"""The records of a consumer group, and how each one changes the group when applied.

How this works: the heartbeat and every other write build ``TypedRecord``s -- (key, value)
pairs of ``storage.records``, value None for a tombstone. ``apply_all``
encodes each for the offsets log and applies it to the in-memory group with ``replay``,
the same function the log's replay at start-up calls: a group's state is, by construction,
what replaying its records gives. The per-member tombstone order (current assignment,
target, member metadata) is the one Kafka's replay requires.
"""

from __future__ import annotations

from typing import Any

from coordinator.group.consumer.group import ConsumerGroup, ResolvedRegex
from coordinator.group.consumer.member import Assignment, ConsumerGroupMember, MemberState
from coordinator.group.types import Result
from storage.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicPartitions,
    encode_consumer_group_key,
    encode_consumer_group_value,
)

__all__ = [
    "TypedRecord",
    "apply_all",
    "current_assignment",
    "group_metadata",
    "group_tombstones",
    "legacy_partition_metadata_tombstone",
    "member_removed",
    "member_subscription",
    "regex",
    "replay",
    "target_member",
    "target_metadata",
]

TypedRecord = tuple[Any, Any]
"""(key, value): a key of storage.records and its value (None: a tombstone),
or already-encoded (key bytes, value bytes) of another group type's record."""


def _tps(parts: Assignment) -> list[TopicPartitions]:
    return [TopicPartitions(t, sorted(ps)) for t, ps in parts.items()]


def _tps_with_epochs(m: ConsumerGroupMember, parts: Assignment) -> list[TopicPartitions]:
    out = []
    for t, ps in parts.items():
        partitions = sorted(ps)
        epochs = []
        for p in partitions:
            e = m.epoch_of(t, p)
            assert e is not None
            epochs.append(e)
        out.append(TopicPartitions(t, partitions, epochs))
    return out


def _epochs(tps: list[TopicPartitions], default: int, into: dict[bytes, dict[int, int]]) -> None:
    """Kafka's Utils.assignmentFromTopicPartitions: a topic's recorded epochs when there is
    one per partition, else ``default`` (max(member epoch, 0)) for each of its partitions."""
    for tp in tps:
        epochs = tp.assignment_epochs
        topic = into.setdefault(tp.topic_id, {})
        if epochs is not None and len(epochs) == len(tp.partitions):
            topic.update(zip(tp.partitions, epochs, strict=True))
        else:
            topic.update(dict.fromkeys(tp.partitions, default))


def _assignment(tps: list[TopicPartitions]) -> dict[bytes, frozenset[int]]:
    out: dict[bytes, frozenset[int]] = {}
    for tp in tps:
        if tp.partitions:
            out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return out


# ------------------------------------------------------------ builders


def group_metadata(gid: str, epoch: int, metadata_hash: int) -> TypedRecord:
    return ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(epoch, metadata_hash)


def legacy_partition_metadata_tombstone(gid: str) -> TypedRecord:
    return ConsumerGroupPartitionMetadataKey(gid), None


def member_subscription(gid: str, m: ConsumerGroupMember) -> TypedRecord:
    return ConsumerGroupMemberMetadataKey(gid, m.member_id), ConsumerGroupMemberMetadataValue(
        instance_id=m.instance_id,
        rack_id=m.rack_id,
        client_id=m.client_id,
        client_host=m.client_host,
        subscribed_topic_names=sorted(m.subscribed_topic_names),
        subscribed_topic_regex=m.subscribed_topic_regex,
        rebalance_timeout_ms=m.rebalance_timeout_ms,
        server_assignor=m.server_assignor,
        classic_member_metadata=m.classic_member_metadata,
    )


def target_member(gid: str, member_id: str, parts: Assignment) -> TypedRecord:
    return (
        ConsumerGroupTargetAssignmentMemberKey(gid, member_id),
        ConsumerGroupTargetAssignmentMemberValue(_tps(parts)),
    )


def target_metadata(gid: str, epoch: int) -> TypedRecord:
    return ConsumerGroupTargetAssignmentMetadataKey(
        gid
    ), ConsumerGroupTargetAssignmentMetadataValue(epoch)


def current_assignment(gid: str, m: ConsumerGroupMember) -> TypedRecord:
    return (
        ConsumerGroupCurrentMemberAssignmentKey(gid, m.member_id),
        ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=m.member_epoch,
            previous_member_epoch=m.previous_member_epoch,
            state=int(m.state),
            assigned_partitions=_tps_with_epochs(m, m.assigned),
            partitions_pending_revocation=_tps_with_epochs(m, m.pending_revocation),
        ),
    )


def regex(gid: str, pattern: str, resolved: ResolvedRegex | None) -> TypedRecord:
    key = ConsumerGroupRegularExpressionKey(gid, pattern)
    if resolved is None:
        return key, None
    return key, ConsumerGroupRegularExpressionValue(
        topics=sorted(resolved.topics), version=resolved.version, timestamp=resolved.timestamp_ms
    )


def member_removed(gid: str, member_id: str) -> list[TypedRecord]:
    """A member's tombstones, in the order replay needs: assignment, target, metadata."""
    return [
        (ConsumerGroupCurrentMemberAssignmentKey(gid, member_id), None),
        (ConsumerGroupTargetAssignmentMemberKey(gid, member_id), None),
        (ConsumerGroupMemberMetadataKey(gid, member_id), None),
    ]


def group_tombstones(group: ConsumerGroup) -> list[TypedRecord]:
    """Every tombstone of a group, in Kafka's order (``createGroupTombstoneRecords``)."""
    gid = group.group_id
    out: list[TypedRecord] = []
    for mid in group.members:
        out.append((ConsumerGroupCurrentMemberAssignmentKey(gid, mid), None))
    for mid in group.target:
        out.append((ConsumerGroupTargetAssignmentMemberKey(gid, mid), None))
    out.append((ConsumerGroupTargetAssignmentMetadataKey(gid), None))
    for mid in group.members:
        out.append((ConsumerGroupMemberMetadataKey(gid, mid), None))
    for pattern in group.resolved_regexes:
        out.append((ConsumerGroupRegularExpressionKey(gid, pattern), None))
    out.append((ConsumerGroupPartitionMetadataKey(gid), None))
    out.append((ConsumerGroupMetadataKey(gid), None))
    return out


# ------------------------------------------------------------ applying


def apply_all(out: Result, partition: int, group: ConsumerGroup, writes: list[TypedRecord]) -> None:
    """Encode ``writes`` into ``out`` and apply them to ``group``."""
    records = out.records
    for key, value in writes:
        if isinstance(key, bytes):
            # Already encoded (a classic group's record, written in the same operation
            # by a conversion between group types): not this group's to apply.
            records.append((partition, key, value))
            continue
        records.append(
            (
                partition,
                encode_consumer_group_key(key),
                None if value is None else encode_consumer_group_value(value),
            )
        )
        apply(group, key, value)


def apply(group: ConsumerGroup, key: Any, value: Any) -> None:
    """Apply one record to its group (Kafka's GroupMetadataManager.replay overloads)."""
    if isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
        if value is None:
            if key.member_id in group.members:
                group.replay_current_assignment(key.member_id, -1, -1, MemberState.STABLE, {}, {})
        else:
            epochs: dict[bytes, dict[int, int]] = {}
            default = max(value.member_epoch, 0)
            _epochs(value.assigned_partitions, default, epochs)
            _epochs(value.partitions_pending_revocation, default, epochs)
            group.replay_current_assignment(
                key.member_id,
                value.member_epoch,
                value.previous_member_epoch,
                MemberState.of(value.state),
                _assignment(value.assigned_partitions),
                _assignment(value.partitions_pending_revocation),
                epochs,
            )
    elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        group.replay_target_member(
            key.member_id, None if value is None else _assignment(value.topic_partitions)
        )
    elif isinstance(key, ConsumerGroupMemberMetadataKey):
        if value is None:
            group.replay_member_removed(key.member_id)
        else:
            m = ConsumerGroupMember(key.member_id)
            m.instance_id = value.instance_id
            m.rack_id = value.rack_id
            m.client_id = value.client_id
            m.client_host = value.client_host
            m.subscribed_topic_names = frozenset(value.subscribed_topic_names)
            m.subscribed_topic_regex = value.subscribed_topic_regex or ""
            m.rebalance_timeout_ms = value.rebalance_timeout_ms
            m.server_assignor = value.server_assignor
            m.classic_member_metadata = value.classic_member_metadata
            group.replay_member_subscription(m)
    elif isinstance(key, ConsumerGroupMetadataKey):
        if value is not None:
            group.replay_metadata(value.epoch, value.metadata_hash)
    elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        group.replay_target_metadata(None if value is None else value.assignment_epoch)
    elif isinstance(key, ConsumerGroupRegularExpressionKey):
        group.replay_regex(
            key.regular_expression,
            None
            if value is None
            else ResolvedRegex(frozenset(value.topics), value.version, value.timestamp),
        )
    elif isinstance(key, ConsumerGroupPartitionMetadataKey):
        group.has_legacy_partition_metadata = value is not None


def replay(groups: dict[str, ConsumerGroup], key: Any, value: Any) -> None:
    """One record of the offsets log, at load: find (or make) its group and apply it."""
    gid = key.group
    group = groups.get(gid)
    if isinstance(key, ConsumerGroupMetadataKey) and value is None:
        # The group's last record: it is gone.
        groups.pop(gid, None)
        return
    if group is None:
        if value is None:
            return  # a tombstone for something already gone
        group = groups[gid] = ConsumerGroup(gid)
    apply(group, key, value)
