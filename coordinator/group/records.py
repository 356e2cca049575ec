"""Every record the group coordinator writes, built in one place (Kafka's GroupCoordinatorRecordHelpers).

How this works: each function returns one record (or the tombstones of one thing) for
the offsets log, and the managers call them; none changes any state.

* Offsets and classic groups: ``offset_commit_record(s)``/``offset_commit_tombstone`` and
  ``group_metadata_record``/``empty_group_metadata_record``/``group_metadata_tombstone``
  return a ``Record`` -- (offsets partition, key bytes, value bytes or None) -- ready to
  append.  Every value is encoded before anything changes, so a record that cannot be
  serialized fails the operation with the state untouched.
* Consumer groups (KIP-848): the builders return a ``TypedRecord``, (key, value) objects of
  ``storage.records``; ``consumer/replay.py``'s ``apply_all`` encodes them and
  applies each to the group, as the replay of the log at start-up does.  A conversion
  between group types writes a classic group's record among them, already encoded
  (``classic_group_tombstone``).

Reading the records back is the other half: the shard's ``replay`` switches on the key's
type and hands each record to its manager.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from coordinator.group.classic.group import ClassicGroup
from coordinator.group.consumer.group import ConsumerGroup, ResolvedRegex
from coordinator.group.consumer.member import Assignment, ConsumerGroupMember
from coordinator.group.types import Record
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
    MemberMetadata,
    TopicPartitions,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)

__all__ = [
    "OffsetEntry",
    "TypedRecord",
    "classic_group_tombstone",
    "consumer_group_metadata",
    "consumer_group_tombstones",
    "current_assignment",
    "decode_end_txn_marker",
    "empty_group_metadata_record",
    "end_txn_marker_record",
    "group_metadata_record",
    "group_metadata_tombstone",
    "legacy_partition_metadata_tombstone",
    "member_removed",
    "member_subscription",
    "offset_commit_record",
    "offset_commit_records",
    "offset_commit_tombstone",
    "regex",
    "target_member",
    "target_metadata",
]

TypedRecord = tuple[Any, Any]
"""(key, value): a key of storage.records and its value (None: a tombstone),
or already-encoded (key bytes, value bytes) of another group type's record."""


# ------------------------------------------------------------ offsets


@dataclass(slots=True)
class OffsetEntry:
    """A committed offset as the offsets manager holds it: its OffsetCommit record's value."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None


def offset_commit_record(
    partition: int, group_id: str, topic: str, partition_index: int, entry: OffsetEntry
) -> Record:
    """A committed offset (v3, or v1 when it carries an expire timestamp)."""
    return (
        partition,
        encode_offset_commit_key(group_id, topic, partition_index),
        encode_offset_commit_value(
            entry.offset,
            entry.metadata,
            entry.commit_timestamp_ms,
            leader_epoch=entry.leader_epoch,
            expire_timestamp=entry.expire_timestamp_ms,
        ),
    )


def offset_commit_records(
    partition: int, group_id: str, commits: list[tuple[tuple[str, int], OffsetEntry]]
) -> list[Record]:
    """The records of one OffsetCommit, in order: one call a request on the hot path."""
    key, value = encode_offset_commit_key, encode_offset_commit_value
    out: list[Record] = []
    for (topic, index), e in commits:
        out.append(
            (
                partition,
                key(group_id, topic, index),
                value(
                    e.offset,
                    e.metadata,
                    e.commit_timestamp_ms,
                    leader_epoch=e.leader_epoch,
                    expire_timestamp=e.expire_timestamp_ms,
                ),
            )
        )
    return out


def offset_commit_tombstone(
    partition: int, group_id: str, topic: str, partition_index: int
) -> Record:
    return (partition, encode_offset_commit_key(group_id, topic, partition_index), None)


# ------------------------------------------------------------ transaction markers

# Kafka's control records: the key is (version 0, ControlRecordType: 0 ABORT, 1 COMMIT),
# the value of either EndTransactionMarker (version 0, coordinator epoch).
_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")
CONTROL_ABORT = 0
CONTROL_COMMIT = 1


def end_txn_marker_record(partition: int, commit: bool, coordinator_epoch: int) -> Record:
    """The one record of a COMMIT/ABORT control batch (Kafka's EndTransactionMarker)."""
    return (
        partition,
        _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT),
        _MARKER_VALUE.pack(0, coordinator_epoch),
    )


def decode_end_txn_marker(key: bytes | None, value: bytes | None) -> tuple[bool, int] | None:
    """(commit, coordinator epoch) of a control record; None for another control type
    (Kafka skips those). Raises ValueError when it does not parse."""
    if key is None or len(key) < 4:
        raise ValueError("control record without a valid key")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise ValueError(f"control record key version {version}")
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    if value is None or len(value) < 6:
        raise ValueError("end transaction marker without a valid value")
    _, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    return kind == CONTROL_COMMIT, coordinator_epoch


# ------------------------------------------------------------ classic groups


def group_metadata_record(
    partition: int, group: ClassicGroup, assignment: dict[str, bytes] | None = None
) -> Record:
    """The group as it is (``assignment``: each member's, instead of the stored one)."""
    members = [
        MemberMetadata(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout=m.rebalance_timeout_ms,
            session_timeout=m.session_timeout_ms,
            subscription=m.metadata(group.protocol_name),
            assignment=(m.assignment if assignment is None else assignment.get(m.member_id, b"")),
        )
        for m in group.members.values()
    ]
    value = encode_group_metadata_value(
        protocol_type=group.protocol_type or "",
        generation=group.generation,
        protocol=group.protocol_name,
        leader=group.leader_id,
        current_state_timestamp=(
            -1 if group.state_timestamp_ms is None else group.state_timestamp_ms
        ),
        members=members,
    )
    return (partition, encode_group_metadata_key(group.group_id), value)


def empty_group_metadata_record(partition: int, group: ClassicGroup, now_ms: int) -> Record:
    """What Kafka writes to make a freshly created group exist in the log."""
    value = encode_group_metadata_value(
        protocol_type="",
        generation=0,
        protocol=None,
        leader=None,
        current_state_timestamp=(
            now_ms if group.state_timestamp_ms is None else group.state_timestamp_ms
        ),
        members=[],
    )
    return (partition, encode_group_metadata_key(group.group_id), value)


def group_metadata_tombstone(partition: int, group_id: str) -> Record:
    return (partition, encode_group_metadata_key(group_id), None)


def classic_group_tombstone(group_id: str) -> TypedRecord:
    """A classic group's tombstone among a consumer group's records (a conversion)."""
    return encode_group_metadata_key(group_id), None


# ------------------------------------------------------------ consumer groups (KIP-848)


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


def consumer_group_metadata(gid: str, epoch: int, metadata_hash: int) -> TypedRecord:
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


def consumer_group_tombstones(group: ConsumerGroup) -> list[TypedRecord]:
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
