"""Offset commits and classic group metadata in ``__consumer_offsets``, byte-compatible with Kafka.

How this works
--------------
Each record's key and value start with an int16 (the key's record type, the value's
version), followed by the fields of the matching schema of Kafka's group coordinator
(``protocol/schemas/records``), whose codecs are generated into
``storage.records.messages.offsets``:

* key types 0 and 1: OffsetCommitKey (group, topic, partition) -- same layout, Kafka
  writes 1; key type 2: GroupMetadataKey (group). ``storage.records.keys.decode_key`` is
  the one switch over every record type.
* OffsetCommitValue v0..v4: v1 alone carries expire_timestamp, v3 adds leader_epoch, v4 is
  flexible (compact strings, tagged fields).
* GroupMetadataValue v0..v4: v1 adds rebalance_timeout per member, v2 the
  current_state_timestamp, v3 group_instance_id, v4 is flexible.

The values callers see are the NamedTuples and dataclasses below (kgc's names and
defaults); the functions convert to and from the generated classes. Two records skip the
generated codec because they are written once per committed partition and read once per
replayed record: the offset commit key (read in ``storage.records.keys``) and the
version-3 offset commit value kgc writes; tests/storage/test_records_roundtrip.py
compares both with the generated codec over random values.

The offsets audit decodes offset-commit values many at a time with its own columnar
decoder (``coordinator.audit.columns``), which hands anything but the plain classic layouts
to ``decode_offset_commit_value`` here, so both agree on every input.

``java_string_hash`` / ``partition_for`` reproduce how Kafka maps a group id to an
offsets-topic partition, so a client's FindCoordinator answer matches where a real broker
would keep the group.
"""

from __future__ import annotations

import codecs
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from storage.records.errors import OffsetsFormatError, parse_body
from storage.records.messages import offsets as gen

__all__ = [
    "OFFSETS_TOPIC",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "OffsetsFormatError",
    "UnknownKey",
    "decode_group_metadata_key",
    "decode_group_metadata_value",
    "decode_offset_commit_value",
    "encode_group_metadata_key",
    "encode_group_metadata_value",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
    "java_string_hash",
    "partition_for",
]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


# tuple.__new__ skips the NamedTuple's Python-level __new__ on hot paths.
_new = tuple.__new__


OFFSETS_TOPIC = "__consumer_offsets"  # the log these records live in, as Kafka names it


# Keys and offset-commit values are NamedTuples rather than frozen dataclasses:
# one of each is built per replayed record, and a frozen dataclass costs ~3x
# more to construct, which alone would blow the start-up replay budget.


class OffsetCommitKey(NamedTuple):
    group: str
    topic: str
    partition: int
    version: int = 1


class GroupMetadataKey(NamedTuple):
    group: str
    version: int = 2


class UnknownKey(NamedTuple):
    version: int
    data: bytes


class OffsetCommitValue(NamedTuple):
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    expire_timestamp: int = -1
    version: int = 3


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...]
    version: int = 3


_T = TypeVar("_T")


def _parse(decoder: Callable[[bytes, int], tuple[_T, int]], data: bytes, what: str) -> _T:
    # A string that is not UTF-8 raises UnicodeDecodeError here (see storage.records.errors).
    return parse_body(decoder, data, what, utf8_errors_are_corrupt=False)


_PREFIX = tuple(_I16.pack(v) for v in range(5))


# ------------------------------------------------------------ keys


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    # One join instead of a chain of concatenations: this runs for every commit.
    g = group.encode()
    t = topic.encode()
    return b"".join((b"\x00\x01", _I16.pack(len(g)), g, _I16.pack(len(t)), t, _I32.pack(partition)))


def encode_group_metadata_key(group: str) -> bytes:
    out = bytearray(_PREFIX[2])
    gen.GROUP_METADATA_KEY_ENCODERS[0](gen.GroupMetadataKey(group), out)
    return bytes(out)


def decode_group_metadata_key(data: bytes) -> GroupMetadataKey:
    """A key of record type 2 (the caller checked the prefix)."""
    key = _parse(gen.GROUP_METADATA_KEY_DECODERS[0], data, "group metadata key")
    return GroupMetadataKey(key.group, 2)


# ------------------------------------------------------------ offset commit value


_V3_FIXED = struct.Struct(">hqih")
_V3_EMPTY = struct.Struct(">hqihq")


def encode_offset_commit_value(
    offset: int,
    metadata: str = "",
    commit_timestamp: int = -1,
    *,
    leader_epoch: int = -1,
    expire_timestamp: int | None = None,
) -> bytes:
    """Write v3, or v1 when an expire timestamp is given (v1 alone has the field).

    Version 3 is written by hand, once per committed partition: one pack of the whole value
    when the metadata is empty (the usual commit), one join otherwise.
    """
    if expire_timestamp is not None:
        out = bytearray(_PREFIX[1])
        value = gen.OffsetCommitValue(offset, -1, metadata, commit_timestamp, expire_timestamp)
        gen.OFFSET_COMMIT_VALUE_ENCODERS[1](value, out)
        return bytes(out)
    m = metadata.encode()
    if not m:
        return _V3_EMPTY.pack(3, offset, leader_epoch, 0, commit_timestamp)
    return b"".join(
        (_V3_FIXED.pack(3, offset, leader_epoch, len(m)), m, _I64.pack(commit_timestamp))
    )


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    if len(data) < 2:
        raise OffsetsFormatError("value shorter than its version field")
    (version,) = _I16.unpack_from(data, 0)
    if version == 3:
        # Fast paths for what we write ourselves (empty metadata is the norm).
        if len(data) == 24:
            _, offset, epoch, mlen, ts = _V3_EMPTY.unpack(data)
            if mlen == 0:
                return _new(OffsetCommitValue, (offset, "", ts, epoch, -1, 3))
        if len(data) >= 16:
            _, offset, epoch, mlen = _V3_FIXED.unpack_from(data, 0)
            mend = 16 + mlen
            if mlen >= 0 and mend + 8 == len(data):
                (ts,) = _I64.unpack_from(data, mend)
                return _new(OffsetCommitValue, (offset, data[16:mend].decode(), ts, epoch, -1, 3))
    decoder = gen.OFFSET_COMMIT_VALUE_DECODERS.get(version)
    if decoder is None:
        raise OffsetsFormatError(f"unknown OffsetCommitValue version {version}")
    v = _parse(decoder, data, "OffsetCommitValue")
    return OffsetCommitValue(
        v.offset, v.metadata, v.commit_timestamp, v.leader_epoch, v.expire_timestamp, version
    )


# ------------------------------------------------------------ group metadata value


def encode_group_metadata_value(
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    current_state_timestamp: int,
    members: Sequence[MemberMetadata],
) -> bytes:
    """Write version 3 (what Kafka writes for classic groups)."""
    value = gen.GroupMetadataValue(
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp,
        [
            gen.MemberMetadata(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout,
                m.session_timeout,
                m.subscription,
                m.assignment,
            )
            for m in members
        ],
    )
    out = bytearray(_PREFIX[3])
    gen.GROUP_METADATA_VALUE_ENCODERS[3](value, out)
    return bytes(out)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    if len(data) < 2:
        raise OffsetsFormatError("value shorter than its version field")
    (version,) = _I16.unpack_from(data, 0)
    decoder = gen.GROUP_METADATA_VALUE_DECODERS.get(version)
    if decoder is None:
        raise OffsetsFormatError(f"unknown GroupMetadataValue version {version}")
    v = _parse(decoder, data, "GroupMetadataValue")
    members = tuple(
        MemberMetadata(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            # v0 had no rebalance timeout; Kafka uses the session timeout.
            m.session_timeout if version < 1 else m.rebalance_timeout,
            m.session_timeout,
            m.subscription,
            m.assignment,
        )
        for m in v.members
    )
    return GroupMetadataValue(
        v.protocol_type,
        v.generation,
        v.protocol,
        v.leader,
        v.current_state_timestamp,
        members,
        version,
    )


# ------------------------------------------------------------ partitioning


# Looked up at import, not on first use: a codec's module is imported lazily, and an import
# inside a request handler (every commit hashes its group id) fails with EMFILE when
# connections hold every file descriptor.
codecs.lookup("utf-16-be")


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, wrapping at 32 bits signed."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h >= 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % n``; Utils.abs maps INT_MIN to 0."""
    h = java_string_hash(group_id)
    return (0 if h == -0x80000000 else abs(h)) % num_partitions
