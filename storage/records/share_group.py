"""Records of KIP-932 share groups in ``__consumer_offsets``, byte-compatible with Kafka.

How this works
--------------
Kafka 4.2+ keeps a share group as six record types in the offsets topic (type 9, the 4.0
``ShareGroupPartitionMetadata``, is gone):

====  ==========================================  =========================================
type  key (group id, ...)                         value
====  ==========================================  =========================================
10    ShareGroupMemberMetadataKey                 a member's rack, client, subscription
11    ShareGroupMetadataKey                       group epoch + subscribed-topics hash
12    ShareGroupTargetAssignmentMetadataKey       the target assignment's epoch
13    ShareGroupTargetAssignmentMemberKey         a member's target partitions
14    ShareGroupCurrentMemberAssignmentKey        a member's epoch and assigned partitions
15    ShareGroupStatePartitionMetadataKey         initializing/initialized/deleting topics
====  ==========================================  =========================================

The codecs are generated from Kafka 4.4's schemas into
``storage.records.messages.share_group``; the values here *are* those generated dataclasses
(re-exported), the keys are NamedTuples carrying their record type (as the consumer-group
keys do, so two keys of one group never compare equal). Framing as every coordinator
record: a key is the int16 record type and the non-flexible key struct; a value is int16
version 0 and the flexible value struct. Decoding reads a newer value version with the
version-0 layout, as Kafka's generated readers do; anything that does not parse raises
``OffsetsFormatError``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NamedTuple, TypeAlias

from storage.records.errors import OffsetsFormatError, parse_body
from storage.records.messages import share_group as gen
from storage.records.messages.share_group import (
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataValue,
    TopicInfo,
    TopicPartitionsInfo,
)
from storage.records.messages.share_group import TopicPartition as ShareTargetPartitions
from storage.records.messages.share_group import TopicPartitions as ShareAssignedPartitions

__all__ = [
    "SHARE_GROUP_RECORD_TYPES",
    "ShareAssignedPartitions",
    "ShareGroupCurrentMemberAssignmentKey",
    "ShareGroupCurrentMemberAssignmentValue",
    "ShareGroupKey",
    "ShareGroupMemberMetadataKey",
    "ShareGroupMemberMetadataValue",
    "ShareGroupMetadataKey",
    "ShareGroupMetadataValue",
    "ShareGroupStatePartitionMetadataKey",
    "ShareGroupStatePartitionMetadataValue",
    "ShareGroupTargetAssignmentMemberKey",
    "ShareGroupTargetAssignmentMemberValue",
    "ShareGroupTargetAssignmentMetadataKey",
    "ShareGroupTargetAssignmentMetadataValue",
    "ShareGroupValue",
    "ShareTargetPartitions",
    "TopicInfo",
    "TopicPartitionsInfo",
    "decode_share_group_key",
    "decode_share_group_value",
    "encode_share_group_key",
    "encode_share_group_value",
]

_I16 = struct.Struct(">h")

SHARE_GROUP_RECORD_TYPES = frozenset({10, 11, 12, 13, 14, 15})


class ShareGroupMemberMetadataKey(NamedTuple):
    group: str
    member_id: str
    version: int = 10


class ShareGroupMetadataKey(NamedTuple):
    group: str
    version: int = 11


class ShareGroupTargetAssignmentMetadataKey(NamedTuple):
    group: str
    version: int = 12


class ShareGroupTargetAssignmentMemberKey(NamedTuple):
    group: str
    member_id: str
    version: int = 13


class ShareGroupCurrentMemberAssignmentKey(NamedTuple):
    group: str
    member_id: str
    version: int = 14


class ShareGroupStatePartitionMetadataKey(NamedTuple):
    group: str
    version: int = 15


ShareGroupKey: TypeAlias = (
    ShareGroupMemberMetadataKey
    | ShareGroupMetadataKey
    | ShareGroupTargetAssignmentMetadataKey
    | ShareGroupTargetAssignmentMemberKey
    | ShareGroupCurrentMemberAssignmentKey
    | ShareGroupStatePartitionMetadataKey
)

ShareGroupValue: TypeAlias = (
    ShareGroupMemberMetadataValue
    | ShareGroupMetadataValue
    | ShareGroupTargetAssignmentMetadataValue
    | ShareGroupTargetAssignmentMemberValue
    | ShareGroupCurrentMemberAssignmentValue
    | ShareGroupStatePartitionMetadataValue
)

# record type -> (key class, generated key class, key codecs, value codecs, value class)
_Codec = tuple[
    type,
    Callable[..., Any],
    dict[int, Any],
    dict[int, Any],
    dict[int, Any],
    dict[int, Any],
    type,
]
_TYPES: dict[int, _Codec] = {
    10: (
        ShareGroupMemberMetadataKey,
        gen.ShareGroupMemberMetadataKey,
        gen.SHARE_GROUP_MEMBER_METADATA_KEY_ENCODERS,
        gen.SHARE_GROUP_MEMBER_METADATA_KEY_DECODERS,
        gen.SHARE_GROUP_MEMBER_METADATA_VALUE_ENCODERS,
        gen.SHARE_GROUP_MEMBER_METADATA_VALUE_DECODERS,
        ShareGroupMemberMetadataValue,
    ),
    11: (
        ShareGroupMetadataKey,
        gen.ShareGroupMetadataKey,
        gen.SHARE_GROUP_METADATA_KEY_ENCODERS,
        gen.SHARE_GROUP_METADATA_KEY_DECODERS,
        gen.SHARE_GROUP_METADATA_VALUE_ENCODERS,
        gen.SHARE_GROUP_METADATA_VALUE_DECODERS,
        ShareGroupMetadataValue,
    ),
    12: (
        ShareGroupTargetAssignmentMetadataKey,
        gen.ShareGroupTargetAssignmentMetadataKey,
        gen.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_ENCODERS,
        gen.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_DECODERS,
        gen.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE_ENCODERS,
        gen.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE_DECODERS,
        ShareGroupTargetAssignmentMetadataValue,
    ),
    13: (
        ShareGroupTargetAssignmentMemberKey,
        gen.ShareGroupTargetAssignmentMemberKey,
        gen.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_ENCODERS,
        gen.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_DECODERS,
        gen.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE_ENCODERS,
        gen.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE_DECODERS,
        ShareGroupTargetAssignmentMemberValue,
    ),
    14: (
        ShareGroupCurrentMemberAssignmentKey,
        gen.ShareGroupCurrentMemberAssignmentKey,
        gen.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_ENCODERS,
        gen.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_DECODERS,
        gen.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE_ENCODERS,
        gen.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE_DECODERS,
        ShareGroupCurrentMemberAssignmentValue,
    ),
    15: (
        ShareGroupStatePartitionMetadataKey,
        gen.ShareGroupStatePartitionMetadataKey,
        gen.SHARE_GROUP_STATE_PARTITION_METADATA_KEY_ENCODERS,
        gen.SHARE_GROUP_STATE_PARTITION_METADATA_KEY_DECODERS,
        gen.SHARE_GROUP_STATE_PARTITION_METADATA_VALUE_ENCODERS,
        gen.SHARE_GROUP_STATE_PARTITION_METADATA_VALUE_DECODERS,
        ShareGroupStatePartitionMetadataValue,
    ),
}
_VALUE_TYPE: dict[type, int] = {codec[6]: rtype for rtype, codec in _TYPES.items()}


def encode_share_group_key(key: ShareGroupKey) -> bytes:
    """Key bytes: int16 record type + the non-flexible key struct."""
    rtype = key.version
    codec = _TYPES[rtype]
    out = bytearray(_I16.pack(rtype))
    try:
        codec[2][0](codec[1](*key[:-1]), out)
    except struct.error:
        longest = max(len(s.encode()) for s in key if isinstance(s, str))
        raise ValueError(f"string of {longest} bytes does not fit an int16 length") from None
    return bytes(out)


def decode_share_group_key(data: bytes) -> ShareGroupKey:
    """Decode a key of record type 10-15 (``storage.records.keys.decode_key`` calls this)."""
    if len(data) < 2:
        raise OffsetsFormatError("key shorter than its record type")
    (rtype,) = _I16.unpack_from(data, 0)
    codec = _TYPES.get(rtype)
    if codec is None:
        raise OffsetsFormatError(f"record type {rtype} is not a share group record")
    k = parse_body(codec[3][0], data, f"a key of record type {rtype}", utf8_errors_are_corrupt=True)
    if rtype in (10, 13, 14):
        return codec[0](k.group_id, k.member_id, rtype)  # type: ignore[no-any-return]
    return codec[0](k.group_id, rtype)  # type: ignore[no-any-return]


def encode_share_group_value(value: ShareGroupValue) -> bytes:
    """Value bytes: int16 version 0 + the flexible value struct, as Kafka writes them."""
    rtype = _VALUE_TYPE.get(type(value))
    if rtype is None:
        raise TypeError(f"not a share group value: {type(value).__name__}")
    out = bytearray(b"\x00\x00")
    _TYPES[rtype][4][0](value, out)
    return bytes(out)


def decode_share_group_value(key: ShareGroupKey, data: bytes) -> ShareGroupValue:
    """Decode the value of ``key``'s record type (any version, read with version 0's layout)."""
    if len(data) < 2:
        raise OffsetsFormatError("value shorter than its version field")
    (version,) = _I16.unpack_from(data, 0)
    if version < 0:
        raise OffsetsFormatError(f"negative value version {version}")
    rtype = key.version
    return parse_body(  # type: ignore[no-any-return]
        _TYPES[rtype][5][0],
        data,
        f"a value of record type {rtype}",
        utf8_errors_are_corrupt=True,
    )
