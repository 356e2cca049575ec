"""Records of KIP-848 consumer groups in ``__consumer_offsets``, byte-compatible with Kafka.

How this works
--------------
Kafka 4 keeps a consumer group (the "consumer" rebalance protocol) as seven record types
in the offsets topic, next to the offset commits and classic group metadata of
``storage.offsets_format``:

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

Framing (Kafka's ``CoordinatorRecordSerde``): a key is the int16 record type followed by
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
``storage.offsets_format``: without it ``ConsumerGroupMetadataKey("g")`` would equal, and
hash like, ``ConsumerGroupTargetAssignmentMetadataKey("g")``, both being tuples ``("g",)``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple, TypeAlias, overload

from protocol.primitives import uvarint
from storage.offsets_format import OffsetsFormatError

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
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

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
_GROUP_ONLY_KEYS: dict[int, type] = {
    3: ConsumerGroupMetadataKey,
    4: ConsumerGroupPartitionMetadataKey,
    6: ConsumerGroupTargetAssignmentMetadataKey,
}
_TWO_STRING_KEYS: dict[int, type] = {
    5: ConsumerGroupMemberMetadataKey,
    7: ConsumerGroupTargetAssignmentMemberKey,
    8: ConsumerGroupCurrentMemberAssignmentKey,
    16: ConsumerGroupRegularExpressionKey,
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


# ------------------------------------------------------------ writing


def _kstr(s: str) -> bytes:
    """Classic (key) string: int16 length + UTF-8."""
    b = s.encode()
    if len(b) > 0x7FFF:
        raise ValueError(f"string of {len(b)} bytes does not fit an int16 length")
    return _I16.pack(len(b)) + b


def _cbytes(b: bytes) -> bytes:
    return uvarint(len(b) + 1) + b


def _cstr(s: str) -> bytes:
    return _cbytes(s.encode())


def _cnstr(s: str | None) -> bytes:
    return b"\x00" if s is None else _cstr(s)


def _uuid(topic_id: bytes) -> bytes:
    if len(topic_id) != 16:
        raise ValueError(f"a topic id is 16 bytes, not {len(topic_id)}")
    return bytes(topic_id)


def _cstrings(items: list[str]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(_cstr(s) for s in items)


def _cint32s(items: list[int]) -> bytes:
    return uvarint(len(items) + 1) + struct.pack(f">{len(items)}i", *items)


def _topic_partitions(items: list[TopicPartitions], with_epochs: bool = False) -> bytes:
    out = bytearray(uvarint(len(items) + 1))
    for tp in items:
        out += _uuid(tp.topic_id)
        out += _cint32s(tp.partitions)
        epochs = tp.assignment_epochs
        if with_epochs and epochs is not None:
            # AssignmentEpochs, a nullable tagged array: written when not null (its default).
            if len(epochs) != len(tp.partitions):
                raise ValueError(
                    f"{len(epochs)} assignment epochs for {len(tp.partitions)} partitions"
                )
            out += _tagged([(0, _cint32s(epochs))])
        else:
            out += b"\x00"  # the struct's (empty) tagged fields
    return bytes(out)


_NO_TAGS = b"\x00"


def _tagged(fields: list[tuple[int, bytes]]) -> bytes:
    """A tagged-field section: count, then (tag, size, bytes) in ascending tag order."""
    out = bytearray(uvarint(len(fields)))
    for tag, data in fields:
        out += uvarint(tag) + uvarint(len(data)) + data
    return bytes(out)


def encode_consumer_group_key(key: ConsumerGroupKey) -> bytes:
    """Key bytes: int16 record type + the non-flexible key struct."""
    rtype = _KEY_TYPE[type(key)]
    out = _I16.pack(rtype) + _kstr(key.group)
    if isinstance(key, ConsumerGroupRegularExpressionKey):
        out += _kstr(key.regular_expression)
    elif isinstance(
        key,
        ConsumerGroupMemberMetadataKey
        | ConsumerGroupTargetAssignmentMemberKey
        | ConsumerGroupCurrentMemberAssignmentKey,
    ):
        out += _kstr(key.member_id)
    return out


def _classic_member_metadata(m: ClassicMemberMetadata) -> bytes:
    out = bytearray(_I32.pack(m.session_timeout_ms))
    out += uvarint(len(m.supported_protocols) + 1)
    for name, metadata in m.supported_protocols:
        out += _cstr(name) + _cbytes(metadata) + _NO_TAGS
    out += _NO_TAGS
    return bytes(out)


def encode_consumer_group_value(value: ConsumerGroupValue) -> bytes:
    """Value bytes: int16 version 0 + the flexible value struct, as Kafka writes them."""
    out = bytearray(_I16.pack(0))
    if isinstance(value, ConsumerGroupMetadataValue):
        out += _I32.pack(value.epoch)
        # Kafka writes a tagged int64 only when it differs from its default (0).
        tags = [(0, _I64.pack(value.metadata_hash))] if value.metadata_hash != 0 else []
        out += _tagged(tags)
    elif isinstance(value, ConsumerGroupPartitionMetadataValue):
        out += uvarint(len(value.topics) + 1)
        for t in value.topics:
            out += _uuid(t.topic_id) + _cstr(t.topic_name) + _I32.pack(t.num_partitions)
            out += uvarint(len(t.partition_metadata) + 1)
            for pm in t.partition_metadata:
                out += _I32.pack(pm.partition) + _cstrings(pm.racks) + _NO_TAGS
            out += _NO_TAGS
        out += _NO_TAGS
    elif isinstance(value, ConsumerGroupMemberMetadataValue):
        out += _cnstr(value.instance_id)
        out += _cnstr(value.rack_id)
        out += _cstr(value.client_id)
        out += _cstr(value.client_host)
        out += _cstrings(value.subscribed_topic_names)
        out += _cnstr(value.subscribed_topic_regex)
        out += _I32.pack(value.rebalance_timeout_ms)
        out += _cnstr(value.server_assignor)
        cmm = value.classic_member_metadata
        if cmm is None:
            out += _NO_TAGS  # a null tagged struct (its default) is not written
        else:
            # A nullable tagged struct: size (struct + the presence varint), then 1 = present.
            out += _tagged([(0, b"\x01" + _classic_member_metadata(cmm))])
    elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        out += _I32.pack(value.assignment_epoch) + _NO_TAGS
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        out += _topic_partitions(value.topic_partitions) + _NO_TAGS
    elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        out += _I32.pack(value.member_epoch)
        out += _I32.pack(value.previous_member_epoch)
        out += struct.pack(">b", value.state)
        out += _topic_partitions(value.assigned_partitions, with_epochs=True)
        out += _topic_partitions(value.partitions_pending_revocation, with_epochs=True)
        out += _NO_TAGS
    elif isinstance(value, ConsumerGroupRegularExpressionValue):
        out += _cstrings(value.topics)
        out += _I64.pack(value.version)
        out += _I64.pack(value.timestamp)
        out += _NO_TAGS
    else:
        raise TypeError(f"not a consumer group value: {type(value).__name__}")
    return bytes(out)


# ------------------------------------------------------------ reading


class _Reader:
    """Cursor over one key or value; every failure is an OffsetsFormatError."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes, pos: int, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def take(self, n: int) -> bytes:
        stop = self.pos + n
        if n < 0 or stop > self.end:
            raise OffsetsFormatError(f"truncated data at {self.pos} (need {n} bytes)")
        b = self.buf[self.pos : stop]
        self.pos = stop
        return b

    def i8(self) -> int:
        v: int = struct.unpack(">b", self.take(1))[0]
        return v

    def i16(self) -> int:
        v: int = _I16.unpack(self.take(2))[0]
        return v

    def i32(self) -> int:
        v: int = _I32.unpack(self.take(4))[0]
        return v

    def i64(self) -> int:
        v: int = _I64.unpack(self.take(8))[0]
        return v

    def uvarint(self) -> int:
        # Kafka's unsigned varints are at most 5 bytes (an int32).
        result = 0
        for shift in range(0, 35, 7):
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
        raise OffsetsFormatError(f"unsigned varint longer than 5 bytes at {self.pos}")

    def _utf8(self, n: int) -> str:
        start = self.pos
        try:
            return self.take(n).decode()
        except UnicodeDecodeError as e:
            raise OffsetsFormatError(f"invalid UTF-8 in a string at {start}: {e}") from None

    def kstring(self) -> str:
        """A classic (key) string: int16 length; keys have no nullable strings."""
        n = self.i16()
        if n < 0:
            raise OffsetsFormatError(f"null in a key string at {self.pos - 2}")
        return self._utf8(n)

    def cnstring(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._utf8(n)

    def cstring(self) -> str:
        at = self.pos
        s = self.cnstring()
        if s is None:
            raise OffsetsFormatError(f"null in a non-nullable string at {at}")
        return s

    def cbytes(self) -> bytes:
        n = self.uvarint() - 1
        if n < 0:
            raise OffsetsFormatError(f"null in a non-nullable bytes field at {self.pos}")
        return self.take(n)

    def carray_len(self) -> int:
        at = self.pos
        n = self.uvarint() - 1
        if n < 0:
            raise OffsetsFormatError(f"null in a non-nullable array at {at}")
        return n

    def uuid(self) -> bytes:
        return self.take(16)

    def cstrings(self) -> list[str]:
        return [self.cstring() for _ in range(self.carray_len())]

    def cint32s(self) -> list[int]:
        n = self.carray_len()
        return list(struct.unpack(f">{n}i", self.take(4 * n)))

    def topic_partitions(self, with_epochs: bool = False) -> list[TopicPartitions]:
        out: list[TopicPartitions] = []
        for _ in range(self.carray_len()):
            topic_id = self.uuid()
            partitions = self.cint32s()
            epochs: list[int] | None = None
            for tag, start, end in self.tags():
                if with_epochs and tag == 0:
                    sub = self.sub(start, end)
                    n = sub.uvarint() - 1  # a nullable compact array: 0 = null
                    if n >= 0:
                        epochs = list(struct.unpack(f">{n}i", sub.take(4 * n)))
                    sub.done("AssignmentEpochs")
            out.append(TopicPartitions(topic_id, partitions, epochs))
        return out

    def tags(self) -> list[tuple[int, int, int]]:
        """The tagged-field section: (tag, start, end) of each field, the reader past them."""
        fields: list[tuple[int, int, int]] = []
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            start = self.pos
            self.take(size)
            fields.append((tag, start, self.pos))
        return fields

    def skip_tags(self) -> None:
        self.tags()

    def sub(self, start: int, end: int) -> _Reader:
        return _Reader(self.buf, start, end)

    def done(self, what: str) -> None:
        if self.pos != self.end:
            raise OffsetsFormatError(f"{self.end - self.pos} trailing bytes in {what}")


def decode_consumer_group_key(data: bytes) -> ConsumerGroupKey:
    """Decode a key of record type 3-8 or 16 (``storage.offsets_format.decode_key`` calls this)."""
    r = _Reader(data, 0)
    rtype = r.i16()
    if rtype in _GROUP_ONLY_KEYS:
        key: ConsumerGroupKey = _GROUP_ONLY_KEYS[rtype](r.kstring(), rtype)
    elif rtype in _TWO_STRING_KEYS:
        group = r.kstring()
        key = _TWO_STRING_KEYS[rtype](group, r.kstring(), rtype)
    else:
        raise OffsetsFormatError(f"record type {rtype} is not a consumer group record")
    r.done(f"a key of record type {rtype}")
    return key


def _decode_classic_member_metadata(r: _Reader) -> ClassicMemberMetadata:
    session_timeout_ms = r.i32()
    protocols: list[tuple[str, bytes]] = []
    for _ in range(r.carray_len()):
        name = r.cstring()
        protocols.append((name, r.cbytes()))
        r.skip_tags()
    r.skip_tags()
    return ClassicMemberMetadata(session_timeout_ms, protocols)


def _decode_topic_metadata(r: _Reader) -> TopicMetadata:
    topic_id = r.uuid()
    name = r.cstring()
    num_partitions = r.i32()
    partitions: list[PartitionMetadata] = []
    for _ in range(r.carray_len()):
        pm = PartitionMetadata(r.i32(), r.cstrings())
        r.skip_tags()
        partitions.append(pm)
    r.skip_tags()
    return TopicMetadata(topic_id, name, num_partitions, partitions)


def _decode_value(rtype: int, r: _Reader) -> ConsumerGroupValue:
    value: ConsumerGroupValue
    if rtype == 3:
        epoch = r.i32()
        metadata_hash = 0
        for tag, start, end in r.tags():
            if tag == 0:
                if end - start != 8:
                    raise OffsetsFormatError(f"MetadataHash tag of {end - start} bytes, not 8")
                metadata_hash = _I64.unpack_from(r.buf, start)[0]
        return ConsumerGroupMetadataValue(epoch, metadata_hash)
    if rtype == 4:
        value = ConsumerGroupPartitionMetadataValue(
            [_decode_topic_metadata(r) for _ in range(r.carray_len())]
        )
    elif rtype == 5:
        instance_id = r.cnstring()
        rack_id = r.cnstring()
        client_id = r.cstring()
        client_host = r.cstring()
        names = r.cstrings()
        regex = r.cnstring()
        rebalance_timeout_ms = r.i32()
        server_assignor = r.cnstring()
        classic: ClassicMemberMetadata | None = None
        for tag, start, end in r.tags():
            if tag == 0:
                sub = r.sub(start, end)
                # A nullable tagged struct starts with a varint: 0 = null, else present.
                if sub.uvarint() > 0:
                    classic = _decode_classic_member_metadata(sub)
                    sub.done("ClassicMemberMetadata")
                else:
                    classic = None
        return ConsumerGroupMemberMetadataValue(
            instance_id,
            rack_id,
            client_id,
            client_host,
            names,
            regex,
            rebalance_timeout_ms,
            server_assignor,
            classic,
        )
    elif rtype == 6:
        value = ConsumerGroupTargetAssignmentMetadataValue(r.i32())
    elif rtype == 7:
        value = ConsumerGroupTargetAssignmentMemberValue(r.topic_partitions())
    elif rtype == 8:
        member_epoch = r.i32()
        previous = r.i32()
        state = r.i8()
        assigned = r.topic_partitions(with_epochs=True)
        value = ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch, previous, state, assigned, r.topic_partitions(with_epochs=True)
        )
    else:  # 16
        topics = r.cstrings()
        version = r.i64()
        value = ConsumerGroupRegularExpressionValue(topics, version, r.i64())
    r.skip_tags()
    return value


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
    r = _Reader(data, 0)
    version = r.i16()
    if version < 0:
        raise OffsetsFormatError(f"negative value version {version} for record type {rtype}")
    value = _decode_value(rtype, r)
    r.done(f"a value of record type {rtype}")
    return value
