"""Record formats of Kafka's ``__consumer_offsets`` topic, byte-compatible with Kafka.

How this works
--------------
Each record's key and value start with an int16 version, followed by the
fields of the matching schema in Apache Kafka's
``group-coordinator/src/main/resources/common/message/*.json``:

* key version 0 and 1: OffsetCommitKey (group, topic, partition) -- same
  layout, Kafka writes 1; key version 2: GroupMetadataKey (group).  Key
  versions (record types) 3-8 and 16 are KIP-848 consumer-group records, decoded
  by ``storage.consumer_group_format``; the others (share and streams groups)
  are returned as ``UnknownKey`` so a replay can skip them.
* OffsetCommitValue v0..v4: v1 alone carries expire_timestamp, v3 adds
  leader_epoch, v4 is a "flexible" version (compact strings, tagged fields).
* GroupMetadataValue v0..v4: v1 adds rebalance_timeout per member, v2 the
  current_state_timestamp, v3 group_instance_id, v4 is flexible.

Classic (non-flexible) encodings use int16-length strings (-1 = null), int32
length bytes and int32 array counts; flexible ones use unsigned varints of
length+1 (0 = null) and end every struct with a tagged-field section, which
we skip on decode and write empty.

The offsets audit decodes offset-commit values many at a time with its own columnar
decoder (``coordinator.audit.columns``), which hands anything but the plain classic layouts
to ``decode_offset_commit_value`` here, so both agree on every input.

``java_string_hash`` / ``partition_for`` reproduce how Kafka maps a group id
to an offsets-topic partition, so a client's FindCoordinator answer matches
where a real broker would keep the group.
"""

from __future__ import annotations

import codecs
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "OffsetsFormatError",
    "UnknownKey",
    "decode_group_metadata_value",
    "decode_key",
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


class OffsetsFormatError(ValueError):
    """Bytes that do not match any known version of the schema."""


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


# ------------------------------------------------------------ primitives


def _str(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


def _nstr(s: str | None) -> bytes:
    return b"\xff\xff" if s is None else _str(s)


def _bytes(b: bytes) -> bytes:
    return _I32.pack(len(b)) + b


class _Reader:
    """Cursor over a value; every read raises OffsetsFormatError on short data."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise OffsetsFormatError(f"truncated data at {self.pos} (need {n} bytes)")
        b = self.buf[self.pos : end]
        self.pos = end
        return b

    def i16(self) -> int:
        v: int = _I16.unpack(self._take(2))[0]
        return v

    def i32(self) -> int:
        v: int = _I32.unpack(self._take(4))[0]
        return v

    def i64(self) -> int:
        v: int = _I64.unpack(self._take(8))[0]
        return v

    def uvarint(self) -> int:
        result = 0
        shift = 0
        while True:
            b = self._take(1)[0]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7
            if shift > 35:
                raise OffsetsFormatError("unsigned varint too long")

    def nstring(self, flexible: bool) -> str | None:
        n = self.uvarint() - 1 if flexible else self.i16()
        if n < 0:
            return None
        return self._take(n).decode()

    def string(self, flexible: bool) -> str:
        s = self.nstring(flexible)
        if s is None:
            raise OffsetsFormatError(f"null in a non-nullable string at {self.pos}")
        return s

    def bytes_(self, flexible: bool) -> bytes:
        n = self.uvarint() - 1 if flexible else self.i32()
        if n < 0:
            raise OffsetsFormatError(f"null in a non-nullable bytes field at {self.pos}")
        return self._take(n)

    def array_len(self, flexible: bool) -> int:
        n = self.uvarint() - 1 if flexible else self.i32()
        if n < 0:
            raise OffsetsFormatError("null array")
        return n

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())


# ------------------------------------------------------------ keys


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    # One join instead of a chain of concatenations: this runs for every commit.
    g = group.encode()
    t = topic.encode()
    return b"".join((b"\x00\x01", _I16.pack(len(g)), g, _I16.pack(len(t)), t, _I32.pack(partition)))


def encode_group_metadata_key(group: str) -> bytes:
    return _I16.pack(2) + _str(group)


def decode_key(
    data: bytes,
) -> OffsetCommitKey | GroupMetadataKey | _cgf.ConsumerGroupKey | UnknownKey:
    if len(data) < 2:
        raise OffsetsFormatError("key shorter than its version field")
    if data[0] == 0 and data[1] <= 1:
        # Offset commit key (v0/v1): runs for nearly every record of a replay,
        # so lengths are read by indexing instead of struct calls.
        try:
            gend = 4 + ((data[2] << 8) | data[3])
            tend = gend + 2 + ((data[gend] << 8) | data[gend + 1])
        except IndexError:
            raise OffsetsFormatError("truncated offset commit key") from None
        if tend + 4 != len(data):
            raise OffsetsFormatError("offset commit key has trailing or missing bytes")
        return _new(
            OffsetCommitKey,
            (
                data[4:gend].decode(),
                data[gend + 2 : tend].decode(),
                _I32.unpack_from(data, tend)[0],
                data[1],
            ),
        )
    (version,) = _I16.unpack_from(data, 0)
    if version == 2:
        r = _Reader(data, 2)
        group = r.string(False)
        if r.pos != len(data):
            raise OffsetsFormatError("group metadata key has trailing bytes")
        return GroupMetadataKey(group, version)
    if version in _cgf.CONSUMER_GROUP_RECORD_TYPES:
        return _cgf.decode_consumer_group_key(data)
    return UnknownKey(version, bytes(data))


# ------------------------------------------------------------ offset commit value


def encode_offset_commit_value(
    offset: int,
    metadata: str = "",
    commit_timestamp: int = -1,
    *,
    leader_epoch: int = -1,
    expire_timestamp: int | None = None,
) -> bytes:
    """Write v3, or v1 when an expire timestamp is given (v1 alone has the field)."""
    if expire_timestamp is not None:
        return (
            _I16.pack(1)
            + _I64.pack(offset)
            + _str(metadata)
            + _I64.pack(commit_timestamp)
            + _I64.pack(expire_timestamp)
        )
    m = metadata.encode()
    if not m:  # the usual commit: one pack of the whole value
        return _V3_EMPTY.pack(3, offset, leader_epoch, 0, commit_timestamp)
    return b"".join(
        (_V3_FIXED.pack(3, offset, leader_epoch, len(m)), m, _I64.pack(commit_timestamp))
    )


_V3_FIXED = struct.Struct(">hqih")
_V3_EMPTY = struct.Struct(">hqihq")


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
    if not 0 <= version <= 4:
        raise OffsetsFormatError(f"unknown OffsetCommitValue version {version}")
    flexible = version >= 4
    r = _Reader(data, 2)
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string(flexible)
    ts = r.i64()
    expire = r.i64() if version == 1 else -1
    if flexible:
        r.skip_tagged_fields()
    if r.pos != len(data):
        raise OffsetsFormatError(f"{len(data) - r.pos} trailing bytes in OffsetCommitValue")
    return OffsetCommitValue(offset, metadata, ts, epoch, expire, version)


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
    out = bytearray(_I16.pack(3))
    out += _str(protocol_type)
    out += _I32.pack(generation)
    out += _nstr(protocol)
    out += _nstr(leader)
    out += _I64.pack(current_state_timestamp)
    out += _I32.pack(len(members))
    for m in members:
        out += _str(m.member_id)
        out += _nstr(m.group_instance_id)
        out += _str(m.client_id)
        out += _str(m.client_host)
        out += _I32.pack(m.rebalance_timeout)
        out += _I32.pack(m.session_timeout)
        out += _bytes(m.subscription)
        out += _bytes(m.assignment)
    return bytes(out)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    if len(data) < 2:
        raise OffsetsFormatError("value shorter than its version field")
    (version,) = _I16.unpack_from(data, 0)
    if not 0 <= version <= 4:
        raise OffsetsFormatError(f"unknown GroupMetadataValue version {version}")
    fl = version >= 4
    r = _Reader(data, 2)
    protocol_type = r.string(fl)
    generation = r.i32()
    protocol = r.nstring(fl)
    leader = r.nstring(fl)
    state_ts = r.i64() if version >= 2 else -1
    members: list[MemberMetadata] = []
    for _ in range(r.array_len(fl)):
        member_id = r.string(fl)
        instance_id = r.nstring(fl) if version >= 3 else None
        client_id = r.string(fl)
        client_host = r.string(fl)
        rebalance = r.i32() if version >= 1 else None
        session = r.i32()
        subscription = r.bytes_(fl)
        assignment = r.bytes_(fl)
        if fl:
            r.skip_tagged_fields()
        members.append(
            MemberMetadata(
                member_id,
                instance_id,
                client_id,
                client_host,
                # v0 had no rebalance timeout; Kafka uses the session timeout.
                session if rebalance is None else rebalance,
                session,
                subscription,
                assignment,
            )
        )
    if fl:
        r.skip_tagged_fields()
    if r.pos != len(data):
        raise OffsetsFormatError(f"{len(data) - r.pos} trailing bytes in GroupMetadataValue")
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, state_ts, tuple(members), version
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


# At the bottom: consumer_group_format imports OffsetsFormatError from here, so whichever
# module is imported first, the other finds what it needs (decode_key looks _cgf up late).
import storage.consumer_group_format as _cgf  # noqa: E402
