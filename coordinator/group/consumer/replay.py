"""How each record of a consumer group changes the group when applied (Kafka's replay overloads).

How this works: the heartbeat and every other write build ``TypedRecord``s with the
builders of ``coordinator/group/records.py`` -- (key, value) pairs of
``storage.records``, value None for a tombstone. ``apply_all`` encodes each
for the offsets log and applies it to the in-memory group with ``apply``, the function the
log's replay at start-up calls too (through ``replay``, which finds or makes the group):
a group's state is, by construction, what replaying its records gives. The per-member
tombstone order (current assignment, target, member metadata) is the one Kafka's replay
requires.
"""

from __future__ import annotations

from typing import Any

from coordinator.group.consumer.group import ConsumerGroup, ResolvedRegex
from coordinator.group.consumer.member import ConsumerGroupMember, MemberState
from coordinator.group.records import TypedRecord
from coordinator.group.types import Result
from storage.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    TopicPartitions,
    encode_consumer_group_key,
    encode_consumer_group_value,
)

__all__ = ["apply", "apply_all", "replay"]


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
