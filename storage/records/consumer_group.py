"""Records of KIP-848 consumer groups in ``__consumer_offsets``, byte-compatible with Kafka.

How this works
--------------
Kafka 4 keeps a consumer group (the "consumer" rebalance protocol) as seven record types
in the offsets topic, next to the offset commits and classic group metadata of
``storage.records.offsets``:

====  ========================================  ==============================
type  key (group id, ...)                       value
====  ========================================  ==============================
3     ConsumerGroupMetadataKey                  group epoch (+ metadata hash)
4     ConsumerGroupPartitionMetadataKey         subscribed topics' metadata (4.0, legacy)
5     ConsumerGroupMemberMetadataKey            a member's subscription
6     ConsumerGroupTargetAssignmentMetadataKey  the target assignment's epoch
7     ConsumerGroupTargetAssignmentMemberKey    a member's target partitions
8     ConsumerGroupCurrentMemberAssignmentKey   a member's epoch, state, owned partitions
16    ConsumerGroupRegularExpressionKey         a resolved subscription regex
====  ========================================  ==============================

The codecs are generated from Kafka's schemas into ``storage.records.messages.consumer_group``;
this module converts between them and the types below (kgc's names, tuples where replay
builds many). Framing (Kafka's ``CoordinatorRecordSerde``): a key is the int16 record type followed by
the key struct, which is *not* flexible (int16-length strings); a value is an int16
version followed by the value struct, which is flexible from version 0: compact strings,
arrays and bytes (unsigned varint of length + 1, 0 = null), uuids as 16 raw bytes, and a
tagged-field section closing every struct, nested ones included.  A tombstone (null
value) is the caller's business; this module only sees value bytes.

Three fields are tagged (written only when they differ from their default, as Kafka's
generated writers do): MetadataHash (int64, tag 0 of type 3, written when non-zero),
ClassicMemberMetadata (a nullable struct, tag 0 of type 5, written when not null, framed
as size + 1, a varint 1 meaning "present", then the struct) and AssignmentEpochs (a
nullable int32 array, tag 0 of each TopicPartitions of type 8, Kafka 4.3+ (KIP-1251): the
epoch at which each partition was assigned; written when not null, which kgc's are).

Decoding skips unknown tags, and reads a value version newer than 0 with the version-0
layout (every field is "0+" and flexible), the way Kafka's generated readers do; anything
that does not parse raises ``OffsetsFormatError`` and nothing else.  Encoders write value
version 0.

Keys carry a trailing ``version`` field (the record type, defaulted) like the keys of
``storage.records.offsets``: without it ``ConsumerGroupMetadataKey("g")`` would equal, and
hash like, ``ConsumerGroupTargetAssignmentMetadataKey("g")``, both being tuples ``("g",)``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, TypeAlias, TypeVar, overload

from storage.records.errors import OffsetsFormatError, parse_body
from storage.records.messages import consumer_group as gen

__all__ = [
    "ClassicMemberMetadata",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupKey",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupRegularExpressionKey",
    "ConsumerGroupRegularExpressionValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "ConsumerGroupValue",
    "PartitionMetadata",
    "TopicMetadata",
    "TopicPartitions",
    "decode_consumer_group_key",
    "decode_consumer_group_value",
    "encode_consumer_group_key",
    "encode_consumer_group_value",
]

_I16 = struct.Struct(">h")

# The record types this module handles (the leading int16 of a key).
CONSUMER_GROUP_RECORD_TYPES = frozenset({3, 4, 5, 6, 7, 8, 16})


# ------------------------------------------------------------ keys


class ConsumerGroupMetadataKey(NamedTuple):
    group: str
    version: int = 3


class ConsumerGroupPartitionMetadataKey(NamedTuple):
    group: str
    version: int = 4


class ConsumerGroupMemberMetadataKey(NamedTuple):
    group: str
    member_id: str
    version: int = 5


class ConsumerGroupTargetAssignmentMetadataKey(NamedTuple):
    group: str
    version: int = 6


class ConsumerGroupTargetAssignmentMemberKey(NamedTuple):
    group: str
    member_id: str
    version: int = 7


class ConsumerGroupCurrentMemberAssignmentKey(NamedTuple):
    group: str
    member_id: str
    version: int = 8


class ConsumerGroupRegularExpressionKey(NamedTuple):
    group: str
    regular_expression: str
    version: int = 16


ConsumerGroupKey: TypeAlias = (
    ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
)

# Record type of each key class; the second string field's presence follows from the type.
_KEY_TYPE: dict[type, int] = {
    ConsumerGroupMetadataKey: 3,
    ConsumerGroupPartitionMetadataKey: 4,
    ConsumerGroupMemberMetadataKey: 5,
    ConsumerGroupTargetAssignmentMetadataKey: 6,
    ConsumerGroupTargetAssignmentMemberKey: 7,
    ConsumerGroupCurrentMemberAssignmentKey: 8,
    ConsumerGroupRegularExpressionKey: 16,
}
# ------------------------------------------------------------ values


class TopicPartitions(NamedTuple):
    """Partitions of one topic, named by its 16-byte topic id (the schemas' TopicPartitions).

    ``assignment_epochs``: only in the current-assignment record (type 8), Kafka 4.3+'s
    tagged field 0 (KIP-1251): the epoch at which each partition was assigned to the member,
    aligned with ``partitions``; None when not written (records of Kafka 4.2 and before).
    """

    topic_id: bytes
    partitions: list[int]
    assignment_epochs: list[int] | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0  # tagged (tag 0), Kafka 4.1+; 0 = not written


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    racks: list[str]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: bytes
    topic_name: str
    num_partitions: int
    partition_metadata: list[PartitionMetadata]


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    """Written by Kafka 4.0 only; 4.1 replaces it by the metadata hash and tombstones it."""

    topics: list[TopicMetadata]


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member using the classic protocol inside a consumer group also needs."""

    session_timeout_ms: int
    supported_protocols: list[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None  # tagged (tag 0)


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: list[TopicPartitions]


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: (
        int  # MemberState: 0 STABLE, 1 UNREVOKED_PARTITIONS, 2 UNRELEASED_PARTITIONS, 127 UNKNOWN
    )
    assigned_partitions: list[TopicPartitions]
    partitions_pending_revocation: list[TopicPartitions]


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    topics: list[str]
    version: int  # offset of the metadata image the regex was resolved against
    timestamp: int  # ms


ConsumerGroupValue: TypeAlias = (
    ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
    | ConsumerGroupRegularExpressionValue
)


# ------------------------------------------------------------ codec helpers


_T = TypeVar("_T")


def _run(decoder: Callable[[bytes, int], tuple[_T, int]], data: bytes, what: str) -> _T:
    return parse_body(decoder, data, what, utf8_errors_are_corrupt=True)


def _uuid(topic_id: bytes) -> bytes:
    if len(topic_id) != 16:
        raise ValueError(f"a topic id is 16 bytes, not {len(topic_id)}")
    return bytes(topic_id)


# ------------------------------------------------------------ keys


def encode_consumer_group_key(key: ConsumerGroupKey) -> bytes:
    """Key bytes: int16 record type + the non-flexible key struct."""
    out = bytearray(_I16.pack(_KEY_TYPE[type(key)]))
    try:
        if isinstance(key, ConsumerGroupMetadataKey):
            k3 = gen.ConsumerGroupMetadataKey(key.group)
            gen.CONSUMER_GROUP_METADATA_KEY_ENCODERS[0](k3, out)
        elif isinstance(key, ConsumerGroupPartitionMetadataKey):
            k4 = gen.ConsumerGroupPartitionMetadataKey(key.group)
            gen.CONSUMER_GROUP_PARTITION_METADATA_KEY_ENCODERS[0](k4, out)
        elif isinstance(key, ConsumerGroupMemberMetadataKey):
            k5 = gen.ConsumerGroupMemberMetadataKey(key.group, key.member_id)
            gen.CONSUMER_GROUP_MEMBER_METADATA_KEY_ENCODERS[0](k5, out)
        elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
            k6 = gen.ConsumerGroupTargetAssignmentMetadataKey(key.group)
            gen.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_ENCODERS[0](k6, out)
        elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
            k7 = gen.ConsumerGroupTargetAssignmentMemberKey(key.group, key.member_id)
            gen.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_ENCODERS[0](k7, out)
        elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
            k8 = gen.ConsumerGroupCurrentMemberAssignmentKey(key.group, key.member_id)
            gen.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_ENCODERS[0](k8, out)
        else:
            k16 = gen.ConsumerGroupRegularExpressionKey(key.group, key.regular_expression)
            gen.CONSUMER_GROUP_REGULAR_EXPRESSION_KEY_ENCODERS[0](k16, out)
    except struct.error:
        # A key string's int16 length overflowed.
        longest = max(len(s.encode()) for s in key if isinstance(s, str))
        raise ValueError(f"string of {longest} bytes does not fit an int16 length") from None
    return bytes(out)


def decode_consumer_group_key(data: bytes) -> ConsumerGroupKey:
    """Decode a key of record type 3-8 or 16 (``storage.records.keys.decode_key`` calls this)."""
    if len(data) < 2:
        raise OffsetsFormatError("key shorter than its record type")
    (rtype,) = _I16.unpack_from(data, 0)
    what = f"a key of record type {rtype}"
    if rtype == 3:
        k3 = _run(gen.CONSUMER_GROUP_METADATA_KEY_DECODERS[0], data, what)
        return ConsumerGroupMetadataKey(k3.group_id, rtype)
    if rtype == 4:
        k4 = _run(gen.CONSUMER_GROUP_PARTITION_METADATA_KEY_DECODERS[0], data, what)
        return ConsumerGroupPartitionMetadataKey(k4.group_id, rtype)
    if rtype == 5:
        k5 = _run(gen.CONSUMER_GROUP_MEMBER_METADATA_KEY_DECODERS[0], data, what)
        return ConsumerGroupMemberMetadataKey(k5.group_id, k5.member_id, rtype)
    if rtype == 6:
        k6 = _run(gen.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_DECODERS[0], data, what)
        return ConsumerGroupTargetAssignmentMetadataKey(k6.group_id, rtype)
    if rtype == 7:
        k7 = _run(gen.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_DECODERS[0], data, what)
        return ConsumerGroupTargetAssignmentMemberKey(k7.group_id, k7.member_id, rtype)
    if rtype == 8:
        k8 = _run(gen.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_DECODERS[0], data, what)
        return ConsumerGroupCurrentMemberAssignmentKey(k8.group_id, k8.member_id, rtype)
    if rtype == 16:
        k16 = _run(gen.CONSUMER_GROUP_REGULAR_EXPRESSION_KEY_DECODERS[0], data, what)
        return ConsumerGroupRegularExpressionKey(k16.group_id, k16.regular_expression, rtype)
    raise OffsetsFormatError(f"record type {rtype} is not a consumer group record")


# ------------------------------------------------------------ values: writing


def _target_partitions(items: list[TopicPartitions]) -> list[gen.TopicPartition]:
    return [gen.TopicPartition(_uuid(tp.topic_id), tp.partitions) for tp in items]


def _current_partitions(
    items: list[TopicPartitions],
) -> list[gen.TopicPartitions]:
    out = []
    for tp in items:
        epochs = tp.assignment_epochs
        if epochs is not None and len(epochs) != len(tp.partitions):
            raise ValueError(f"{len(epochs)} assignment epochs for {len(tp.partitions)} partitions")
        out.append(gen.TopicPartitions(_uuid(tp.topic_id), tp.partitions, epochs))
    return out


def _member_value(value: ConsumerGroupMemberMetadataValue) -> gen.ConsumerGroupMemberMetadataValue:
    cmm = value.classic_member_metadata
    classic = None
    if cmm is not None:
        protocols = [gen.ClassicProtocol(name, meta) for name, meta in cmm.supported_protocols]
        classic = gen.ClassicMemberMetadata(cmm.session_timeout_ms, protocols)
    return gen.ConsumerGroupMemberMetadataValue(
        value.instance_id,
        value.rack_id,
        value.client_id,
        value.client_host,
        value.subscribed_topic_names,
        value.subscribed_topic_regex,
        value.rebalance_timeout_ms,
        value.server_assignor,
        classic,
    )


def encode_consumer_group_value(value: ConsumerGroupValue) -> bytes:
    """Value bytes: int16 version 0 + the flexible value struct, as Kafka writes them.

    Tagged fields are written only when they differ from their default (the generated
    encoders), as Kafka's do: a zero metadata hash, a null classic member metadata and null
    assignment epochs are left out.
    """
    out = bytearray(b"\x00\x00")
    if isinstance(value, ConsumerGroupMetadataValue):
        v3 = gen.ConsumerGroupMetadataValue(value.epoch, value.metadata_hash)
        gen.CONSUMER_GROUP_METADATA_VALUE_ENCODERS[0](v3, out)
    elif isinstance(value, ConsumerGroupPartitionMetadataValue):
        topics = [
            gen.TopicMetadata(
                _uuid(t.topic_id),
                t.topic_name,
                t.num_partitions,
                [gen.PartitionMetadata(pm.partition, pm.racks) for pm in t.partition_metadata],
            )
            for t in value.topics
        ]
        v4 = gen.ConsumerGroupPartitionMetadataValue(topics)
        gen.CONSUMER_GROUP_PARTITION_METADATA_VALUE_ENCODERS[0](v4, out)
    elif isinstance(value, ConsumerGroupMemberMetadataValue):
        gen.CONSUMER_GROUP_MEMBER_METADATA_VALUE_ENCODERS[0](_member_value(value), out)
    elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        v6 = gen.ConsumerGroupTargetAssignmentMetadataValue(value.assignment_epoch)
        gen.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE_ENCODERS[0](v6, out)
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        v7 = gen.ConsumerGroupTargetAssignmentMemberValue(
            _target_partitions(value.topic_partitions)
        )
        gen.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE_ENCODERS[0](v7, out)
    elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        v8 = gen.ConsumerGroupCurrentMemberAssignmentValue(
            value.member_epoch,
            value.previous_member_epoch,
            value.state,
            _current_partitions(value.assigned_partitions),
            _current_partitions(value.partitions_pending_revocation),
        )
        gen.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE_ENCODERS[0](v8, out)
    elif isinstance(value, ConsumerGroupRegularExpressionValue):
        v16 = gen.ConsumerGroupRegularExpressionValue(value.topics, value.version, value.timestamp)
        gen.CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE_ENCODERS[0](v16, out)
    else:
        raise TypeError(f"not a consumer group value: {type(value).__name__}")
    return bytes(out)


# ------------------------------------------------------------ values: reading


def _member_from(v: gen.ConsumerGroupMemberMetadataValue) -> ConsumerGroupMemberMetadataValue:
    cmm = v.classic_member_metadata
    classic = None
    if cmm is not None:
        protocols = [(p.name, p.metadata) for p in cmm.supported_protocols]
        classic = ClassicMemberMetadata(cmm.session_timeout_ms, protocols)
    return ConsumerGroupMemberMetadataValue(
        v.instance_id,
        v.rack_id,
        v.client_id,
        v.client_host,
        v.subscribed_topic_names,
        v.subscribed_topic_regex,
        v.rebalance_timeout_ms,
        v.server_assignor,
        classic,
    )


def _decode_value(rtype: int, data: bytes) -> ConsumerGroupValue:
    """One switch on the record type; ``data`` is read with the version-0 layout."""
    what = f"a value of record type {rtype}"
    if rtype == 3:
        v3 = _run(gen.CONSUMER_GROUP_METADATA_VALUE_DECODERS[0], data, what)
        return ConsumerGroupMetadataValue(v3.epoch, v3.metadata_hash)
    if rtype == 4:
        v4 = _run(gen.CONSUMER_GROUP_PARTITION_METADATA_VALUE_DECODERS[0], data, what)
        return ConsumerGroupPartitionMetadataValue(
            [
                TopicMetadata(
                    t.topic_id,
                    t.topic_name,
                    t.num_partitions,
                    [PartitionMetadata(pm.partition, pm.racks) for pm in t.partition_metadata],
                )
                for t in v4.topics
            ]
        )
    if rtype == 5:
        v5 = _run(gen.CONSUMER_GROUP_MEMBER_METADATA_VALUE_DECODERS[0], data, what)
        return _member_from(v5)
    if rtype == 6:
        v6 = _run(gen.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE_DECODERS[0], data, what)
        return ConsumerGroupTargetAssignmentMetadataValue(v6.assignment_epoch)
    if rtype == 7:
        v7 = _run(gen.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE_DECODERS[0], data, what)
        return ConsumerGroupTargetAssignmentMemberValue(
            [TopicPartitions(tp.topic_id, tp.partitions) for tp in v7.topic_partitions]
        )
    if rtype == 8:
        v8 = _run(gen.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE_DECODERS[0], data, what)
        return ConsumerGroupCurrentMemberAssignmentValue(
            v8.member_epoch,
            v8.previous_member_epoch,
            v8.state,
            [
                TopicPartitions(tp.topic_id, tp.partitions, tp.assignment_epochs)
                for tp in v8.assigned_partitions
            ],
            [
                TopicPartitions(tp.topic_id, tp.partitions, tp.assignment_epochs)
                for tp in v8.partitions_pending_revocation
            ],
        )
    v16 = _run(gen.CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE_DECODERS[0], data, what)
    return ConsumerGroupRegularExpressionValue(v16.topics, v16.version, v16.timestamp)


@overload
def decode_consumer_group_value(
    key: ConsumerGroupMetadataKey, data: bytes
) -> ConsumerGroupMetadataValue: ...


@overload
def decode_consumer_group_value(
    key: ConsumerGroupPartitionMetadataKey, data: bytes
) -> ConsumerGroupPartitionMetadataValue: ...


@overload
def decode_consumer_group_value(
    key: ConsumerGroupMemberMetadataKey, data: bytes
) -> ConsumerGroupMemberMetadataValue: ...


@overload
def decode_consumer_group_value(
    key: ConsumerGroupTargetAssignmentMetadataKey, data: bytes
) -> ConsumerGroupTargetAssignmentMetadataValue: ...


@overload
def decode_consumer_group_value(
    key: ConsumerGroupTargetAssignmentMemberKey, data: bytes
) -> ConsumerGroupTargetAssignmentMemberValue: ...


@overload
def decode_consumer_group_value(
    key: ConsumerGroupCurrentMemberAssignmentKey, data: bytes
) -> ConsumerGroupCurrentMemberAssignmentValue: ...


@overload
def decode_consumer_group_value(
    key: ConsumerGroupRegularExpressionKey, data: bytes
) -> ConsumerGroupRegularExpressionValue: ...


@overload
def decode_consumer_group_value(key: ConsumerGroupKey, data: bytes) -> ConsumerGroupValue: ...


def decode_consumer_group_value(key: ConsumerGroupKey, data: bytes) -> ConsumerGroupValue:
    """Decode the (non-null) value of ``key``'s record type.

    Version 0 is what Kafka 4.0 and 4.1 write; a newer version is read with the same
    layout (new fields would be tagged), as Kafka's generated readers do.
    """
    rtype = _KEY_TYPE.get(type(key))
    if rtype is None:
        raise TypeError(f"not a consumer group key: {type(key).__name__}")
    if len(data) < 2:
        raise OffsetsFormatError(f"truncated data at 0 (need 2 bytes) for record type {rtype}")
    (version,) = _I16.unpack_from(data, 0)
    if version < 0:
        raise OffsetsFormatError(f"negative value version {version} for record type {rtype}")
    return _decode_value(rtype, data)
