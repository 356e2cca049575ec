"""Records of KIP-1071 streams groups in ``__consumer_offsets``, byte-compatible with Kafka.

How this works: Kafka keeps a streams group as six record types next to the offset commits:

====  ========================================  ==========================================
type  key (group id, ...)                       value
====  ========================================  ==========================================
17    StreamsGroupMetadata                      group epoch, metadata hash, validated
                                                topology epoch, last assignment configs
19    StreamsGroupMemberMetadata (+ member)     a member's process, endpoint, tags...
20    StreamsGroupTargetAssignmentMetadata      the target assignment's epoch (+ time)
21    StreamsGroupTargetAssignmentMember (+ m)  a member's target tasks
22    StreamsGroupCurrentMemberAssignment (+ m) a member's epochs, state, tasks
23    StreamsGroupTopology                      the topology the members declared
====  ========================================  ==========================================

(type 18 was removed before Kafka 4.1; an unknown type is skipped by the replay.) The
codecs are generated from Kafka's schemas into ``storage.records.messages.streams_group``;
values are those generated dataclasses as they are. A key is ``StreamsGroupKey`` (record
type, group id, member id or ""). Framing is the consumer groups': int16 record type + the
non-flexible key struct; int16 value version 0 + the flexible value struct.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from storage.records.errors import OffsetsFormatError, parse_body
from storage.records.messages import streams_group as gen

__all__ = [
    "STREAMS_CURRENT_ASSIGNMENT",
    "STREAMS_GROUP_METADATA",
    "STREAMS_GROUP_RECORD_TYPES",
    "STREAMS_MEMBER_METADATA",
    "STREAMS_TARGET_MEMBER",
    "STREAMS_TARGET_METADATA",
    "STREAMS_TOPOLOGY",
    "StreamsGroupKey",
    "decode_streams_group_key",
    "decode_streams_group_value",
    "encode_streams_group_key",
    "encode_streams_group_value",
]

STREAMS_GROUP_METADATA = 17
STREAMS_MEMBER_METADATA = 19
STREAMS_TARGET_METADATA = 20
STREAMS_TARGET_MEMBER = 21
STREAMS_CURRENT_ASSIGNMENT = 22
STREAMS_TOPOLOGY = 23
STREAMS_GROUP_RECORD_TYPES = frozenset(gen.RECORD_TYPES)

_I16 = struct.Struct(">h")
_WITH_MEMBER = frozenset(
    {STREAMS_MEMBER_METADATA, STREAMS_TARGET_MEMBER, STREAMS_CURRENT_ASSIGNMENT}
)


class StreamsGroupKey(NamedTuple):
    rtype: int
    group: str
    member_id: str = ""


_KEYS: dict[int, tuple[Any, Callable[..., Any], Callable[..., Any]]] = {
    STREAMS_GROUP_METADATA: (
        gen.StreamsGroupMetadataKey,
        gen.STREAMS_GROUP_METADATA_KEY_ENCODERS[0],
        gen.STREAMS_GROUP_METADATA_KEY_DECODERS[0],
    ),
    STREAMS_MEMBER_METADATA: (
        gen.StreamsGroupMemberMetadataKey,
        gen.STREAMS_GROUP_MEMBER_METADATA_KEY_ENCODERS[0],
        gen.STREAMS_GROUP_MEMBER_METADATA_KEY_DECODERS[0],
    ),
    STREAMS_TARGET_METADATA: (
        gen.StreamsGroupTargetAssignmentMetadataKey,
        gen.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_ENCODERS[0],
        gen.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_DECODERS[0],
    ),
    STREAMS_TARGET_MEMBER: (
        gen.StreamsGroupTargetAssignmentMemberKey,
        gen.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_ENCODERS[0],
        gen.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_DECODERS[0],
    ),
    STREAMS_CURRENT_ASSIGNMENT: (
        gen.StreamsGroupCurrentMemberAssignmentKey,
        gen.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_ENCODERS[0],
        gen.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_DECODERS[0],
    ),
    STREAMS_TOPOLOGY: (
        gen.StreamsGroupTopologyKey,
        gen.STREAMS_GROUP_TOPOLOGY_KEY_ENCODERS[0],
        gen.STREAMS_GROUP_TOPOLOGY_KEY_DECODERS[0],
    ),
}

_VALUES: dict[int, tuple[type, Callable[..., Any], Callable[..., Any]]] = {
    STREAMS_GROUP_METADATA: (
        gen.StreamsGroupMetadataValue,
        gen.STREAMS_GROUP_METADATA_VALUE_ENCODERS[0],
        gen.STREAMS_GROUP_METADATA_VALUE_DECODERS[0],
    ),
    STREAMS_MEMBER_METADATA: (
        gen.StreamsGroupMemberMetadataValue,
        gen.STREAMS_GROUP_MEMBER_METADATA_VALUE_ENCODERS[0],
        gen.STREAMS_GROUP_MEMBER_METADATA_VALUE_DECODERS[0],
    ),
    STREAMS_TARGET_METADATA: (
        gen.StreamsGroupTargetAssignmentMetadataValue,
        gen.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE_ENCODERS[0],
        gen.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE_DECODERS[0],
    ),
    STREAMS_TARGET_MEMBER: (
        gen.StreamsGroupTargetAssignmentMemberValue,
        gen.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE_ENCODERS[0],
        gen.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE_DECODERS[0],
    ),
    STREAMS_CURRENT_ASSIGNMENT: (
        gen.StreamsGroupCurrentMemberAssignmentValue,
        gen.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE_ENCODERS[0],
        gen.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE_DECODERS[0],
    ),
    STREAMS_TOPOLOGY: (
        gen.StreamsGroupTopologyValue,
        gen.STREAMS_GROUP_TOPOLOGY_VALUE_ENCODERS[0],
        gen.STREAMS_GROUP_TOPOLOGY_VALUE_DECODERS[0],
    ),
}


def encode_streams_group_key(key: StreamsGroupKey) -> bytes:
    """Key bytes: int16 record type + the non-flexible key struct."""
    cls, enc, _ = _KEYS[key.rtype]
    out = bytearray(_I16.pack(key.rtype))
    k = cls(key.group, key.member_id) if key.rtype in _WITH_MEMBER else cls(key.group)
    try:
        enc(k, out)
    except struct.error:
        raise ValueError("a key string does not fit an int16 length") from None
    return bytes(out)


def decode_streams_group_key(data: bytes) -> StreamsGroupKey:
    (rtype,) = _I16.unpack_from(data, 0)
    entry = _KEYS.get(rtype)
    if entry is None:
        raise OffsetsFormatError(f"record type {rtype} is not a streams group record")
    k = parse_body(entry[2], data, f"a key of record type {rtype}", utf8_errors_are_corrupt=True)
    return StreamsGroupKey(rtype, k.group_id, getattr(k, "member_id", ""))


def encode_streams_group_value(rtype: int, value: Any) -> bytes:
    """Value bytes: int16 version 0 + the flexible value struct (tagged fields at defaults left out)."""
    cls, enc, _ = _VALUES[rtype]
    if not isinstance(value, cls):
        raise TypeError(f"record type {rtype} takes {cls.__name__}, not {type(value).__name__}")
    out = bytearray(b"\x00\x00")
    try:
        enc(value, out)
    except struct.error:
        raise ValueError("a value string does not fit its length field") from None
    return bytes(out)


def decode_streams_group_value(rtype: int, data: bytes) -> Any:
    """The generated value dataclass of ``rtype``; a newer version is read with version 0's layout."""
    if len(data) < 2:
        raise OffsetsFormatError("value shorter than its version field")
    _, _, dec = _VALUES[rtype]
    return parse_body(dec, data, f"a value of record type {rtype}", utf8_errors_are_corrupt=True)
