"""Consumer-group (KIP-848) records: golden bytes built field by field from Kafka's schemas
(ConsumerGroup*Key.json / *Value.json), round trips, and malformed input."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.records import (
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    OffsetsFormatError,
    PartitionMetadata,
    TopicMetadata,
    TopicPartitions,
    UnknownKey,
    decode_consumer_group_key,
    decode_consumer_group_value,
    decode_key,
    encode_consumer_group_key,
    encode_consumer_group_value,
)


def i8(n: int) -> bytes:
    return struct.pack(">b", n)


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


def s16(s: str) -> bytes:
    """Classic (key) string: int16 length + UTF-8."""
    b = s.encode()
    return i16(len(b)) + b


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def cstr(s: str | None) -> bytes:
    """Compact string: uvarint(length + 1), 0 = null."""
    if s is None:
        return b"\x00"
    b = s.encode()
    return uvarint(len(b) + 1) + b


def cbytes(b: bytes) -> bytes:
    return uvarint(len(b) + 1) + b


def carray(n: int) -> bytes:
    """Compact array count: uvarint(n + 1)."""
    return uvarint(n + 1)


NO_TAGS = b"\x00"
V0 = i16(0)
TID_A = bytes(range(16))
TID_B = bytes(range(100, 116))


# ---------------------------------------------------------------- keys


KEY_CASES: list[tuple[ConsumerGroupKey, bytes]] = [
    (ConsumerGroupMetadataKey("grp"), i16(3) + s16("grp")),
    (ConsumerGroupPartitionMetadataKey("grp"), i16(4) + s16("grp")),
    (ConsumerGroupMemberMetadataKey("grp", "m-1"), i16(5) + s16("grp") + s16("m-1")),
    (ConsumerGroupTargetAssignmentMetadataKey("grp"), i16(6) + s16("grp")),
    (ConsumerGroupTargetAssignmentMemberKey("grp", "m-1"), i16(7) + s16("grp") + s16("m-1")),
    (ConsumerGroupCurrentMemberAssignmentKey("grp", "m-1"), i16(8) + s16("grp") + s16("m-1")),
    (ConsumerGroupRegularExpressionKey("grp", "orders.*"), i16(16) + s16("grp") + s16("orders.*")),
]


@pytest.mark.parametrize(("key", "expected"), KEY_CASES, ids=lambda v: type(v).__name__)
def test_key_golden_bytes(key: ConsumerGroupKey, expected: bytes) -> None:
    assert encode_consumer_group_key(key) == expected
    assert decode_consumer_group_key(expected) == key
    # The offsets topic's generic key decoder hands types 3-8 and 16 to this module.
    assert decode_key(expected) == key
    assert type(decode_key(expected)) is type(key)


def test_keys_of_different_types_are_not_equal() -> None:
    # Plain ("g",) tuples would make the group-level keys of types 3, 4 and 6 collide.
    keys = {
        ConsumerGroupMetadataKey("g"),
        ConsumerGroupPartitionMetadataKey("g"),
        ConsumerGroupTargetAssignmentMetadataKey("g"),
    }
    assert len(keys) == 3
    target: tuple[object, ...] = ConsumerGroupTargetAssignmentMemberKey("g", "m")
    assert target != ConsumerGroupCurrentMemberAssignmentKey("g", "m")


# 10-15 are share groups (tests/group/share), 17 and 19-23 streams groups
# (tests/group/streams/test_streams_records.py); 18 was removed before Kafka 4.1.
@pytest.mark.parametrize("rtype", [9, 18, 100])
def test_other_record_types_stay_unknown(rtype: int) -> None:
    k = i16(rtype) + s16("grp") + s16("m")
    assert decode_key(k) == UnknownKey(rtype, k)


def test_unicode_key_lengths_are_bytes() -> None:
    k = encode_consumer_group_key(ConsumerGroupMemberMetadataKey("grüppe-😀", "mé"))
    assert k == i16(5) + i16(len("grüppe-😀".encode())) + "grüppe-😀".encode() + s16("mé")
    assert decode_key(k) == ConsumerGroupMemberMetadataKey("grüppe-😀", "mé")


@pytest.mark.parametrize(
    "data",
    [
        i16(3),  # group missing
        i16(3) + i16(5) + b"ab",  # group truncated
        i16(3) + s16("g") + b"x",  # trailing byte
        i16(5) + s16("g"),  # member id missing
        i16(16) + s16("g") + i16(-1),  # null regular expression
        i16(3) + i16(-1),  # null group
        i16(3) + i16(2) + b"\xff\xfe",  # not UTF-8
    ],
)
def test_malformed_keys(data: bytes) -> None:
    with pytest.raises(OffsetsFormatError):
        decode_key(data)


# ---------------------------------------------------------------- values, golden bytes


def test_group_metadata_value_bytes() -> None:
    expected = V0 + i32(42) + NO_TAGS
    v = ConsumerGroupMetadataValue(42)
    assert encode_consumer_group_value(v) == expected
    assert decode_consumer_group_value(ConsumerGroupMetadataKey("g"), expected) == v


def test_group_metadata_value_hash_is_tag_0_when_non_zero() -> None:
    h = -0x123456789ABCDEF
    expected = V0 + i32(7) + uvarint(1) + uvarint(0) + uvarint(8) + i64(h)
    v = ConsumerGroupMetadataValue(7, h)
    assert encode_consumer_group_value(v) == expected
    assert decode_consumer_group_value(ConsumerGroupMetadataKey("g"), expected) == v
    # A zero hash is the default: Kafka does not write the tag.
    assert encode_consumer_group_value(ConsumerGroupMetadataValue(7, 0)) == V0 + i32(7) + NO_TAGS


def test_partition_metadata_value_bytes() -> None:
    expected = (
        V0
        + carray(1)  # Topics
        + TID_A  # TopicId
        + cstr("orders")  # TopicName
        + i32(2)  # NumPartitions
        + carray(2)  # PartitionMetadata
        + i32(0)
        + carray(2)
        + cstr("r1")
        + cstr("r2")
        + NO_TAGS  # Partition 0, Racks [r1, r2]
        + i32(1)
        + carray(0)
        + NO_TAGS  # Partition 1, Racks []
        + NO_TAGS  # TopicMetadata's tags
        + NO_TAGS  # the value's tags
    )
    v = ConsumerGroupPartitionMetadataValue(
        [
            TopicMetadata(
                TID_A, "orders", 2, [PartitionMetadata(0, ["r1", "r2"]), PartitionMetadata(1, [])]
            )
        ]
    )
    assert encode_consumer_group_value(v) == expected
    assert decode_consumer_group_value(ConsumerGroupPartitionMetadataKey("g"), expected) == v


def test_member_metadata_value_bytes() -> None:
    expected = (
        V0
        + cstr("instance-1")  # InstanceId
        + cstr(None)  # RackId (null)
        + cstr("client")  # ClientId
        + cstr("/10.0.0.1")  # ClientHost
        + carray(2)
        + cstr("a")
        + cstr("b")  # SubscribedTopicNames
        + cstr("")  # SubscribedTopicRegex
        + i32(300000)  # RebalanceTimeoutMs
        + cstr("uniform")  # ServerAssignor
        + NO_TAGS  # ClassicMemberMetadata null: not written
    )
    v = ConsumerGroupMemberMetadataValue(
        "instance-1", None, "client", "/10.0.0.1", ["a", "b"], "", 300000, "uniform"
    )
    assert encode_consumer_group_value(v) == expected
    assert decode_consumer_group_value(ConsumerGroupMemberMetadataKey("g", "m"), expected) == v


def test_member_metadata_value_with_classic_member_metadata() -> None:
    struct_bytes = (
        i32(45000)  # SessionTimeoutMs
        + carray(2)  # SupportedProtocols
        + cstr("range")
        + cbytes(b"\x00\x01meta")
        + NO_TAGS
        + cstr("cooperative-sticky")
        + cbytes(b"")
        + NO_TAGS
        + NO_TAGS  # ClassicMemberMetadata's own tags
    )
    # A nullable tagged struct: size counts the presence varint (1) before the struct.
    tag = uvarint(0) + uvarint(len(struct_bytes) + 1) + uvarint(1) + struct_bytes
    expected = (
        V0
        + cstr(None)
        + cstr(None)
        + cstr("c")
        + cstr("/h")
        + carray(0)
        + cstr(None)
        + i32(-1)
        + cstr(None)
        + uvarint(1)
        + tag
    )
    v = ConsumerGroupMemberMetadataValue(
        None,
        None,
        "c",
        "/h",
        [],
        None,
        -1,
        None,
        ClassicMemberMetadata(45000, [("range", b"\x00\x01meta"), ("cooperative-sticky", b"")]),
    )
    assert encode_consumer_group_value(v) == expected
    assert decode_consumer_group_value(ConsumerGroupMemberMetadataKey("g", "m"), expected) == v


def test_member_metadata_value_tag_marked_null_decodes_as_none() -> None:
    # Kafka's reader treats a leading varint 0 inside the tag as "null".
    data = (
        V0
        + cstr(None)
        + cstr(None)
        + cstr("c")
        + cstr("/h")
        + carray(0)
        + cstr(None)
        + i32(-1)
        + cstr(None)
        + uvarint(1)
        + uvarint(0)
        + uvarint(1)
        + uvarint(0)
    )
    v = decode_consumer_group_value(ConsumerGroupMemberMetadataKey("g", "m"), data)
    assert v.classic_member_metadata is None


def test_target_assignment_metadata_value_bytes() -> None:
    expected = V0 + i32(9) + NO_TAGS
    v = ConsumerGroupTargetAssignmentMetadataValue(9)
    assert encode_consumer_group_value(v) == expected
    assert decode_consumer_group_value(ConsumerGroupTargetAssignmentMetadataKey("g"), expected) == v


def topic_partitions_bytes(tid: bytes, parts: list[int]) -> bytes:
    return tid + carray(len(parts)) + b"".join(i32(p) for p in parts) + NO_TAGS


def test_target_assignment_member_value_bytes() -> None:
    expected = (
        V0
        + carray(2)
        + topic_partitions_bytes(TID_A, [0, 2, 4])
        + topic_partitions_bytes(TID_B, [])
        + NO_TAGS
    )
    v = ConsumerGroupTargetAssignmentMemberValue(
        [TopicPartitions(TID_A, [0, 2, 4]), TopicPartitions(TID_B, [])]
    )
    assert encode_consumer_group_value(v) == expected
    assert (
        decode_consumer_group_value(ConsumerGroupTargetAssignmentMemberKey("g", "m"), expected) == v
    )


# A current-assignment value as Kafka 4.4 wrote it (read off the reference broker's
# __consumer_offsets): member epoch 2, previous 0, STABLE, partitions 0 and 1 of one topic,
# both assigned at epoch 2 -- AssignmentEpochs, tag 0 of the TopicPartitions struct.
KAFKA44_CURRENT_ASSIGNMENT = bytes.fromhex(
    "0000"  # value version 0
    "00000002"  # MemberEpoch
    "00000000"  # PreviousMemberEpoch
    "00"  # State (STABLE)
    "02"  # AssignedPartitions: one topic
    "d8e0f5cb104b4a8e9362f4c94a656028"  # TopicId
    "030000000000000001"  # Partitions [0, 1]
    "010009030000000200000002"  # one tagged field: tag 0, 9 bytes, AssignmentEpochs [2, 2]
    "01"  # PartitionsPendingRevocation: none
    "00"  # no tagged fields
)


def test_current_member_assignment_with_assignment_epochs_as_kafka_44_writes_it() -> None:
    tid = bytes.fromhex("d8e0f5cb104b4a8e9362f4c94a656028")
    v = ConsumerGroupCurrentMemberAssignmentValue(
        2, 0, 0, [TopicPartitions(tid, [0, 1], [2, 2])], []
    )
    key = ConsumerGroupCurrentMemberAssignmentKey("g", "m")
    assert decode_consumer_group_value(key, KAFKA44_CURRENT_ASSIGNMENT) == v
    assert encode_consumer_group_value(v) == KAFKA44_CURRENT_ASSIGNMENT
    # Pending revocation carries them too; a null AssignmentEpochs is not written.
    w = ConsumerGroupCurrentMemberAssignmentValue(
        3, 2, 1, [TopicPartitions(TID_A, [1], [3])], [TopicPartitions(TID_B, [4], None)]
    )
    data = encode_consumer_group_value(w)
    assert data.endswith(topic_partitions_bytes(TID_B, [4]) + NO_TAGS)
    assert decode_consumer_group_value(key, data) == w
    # Epochs that do not match the partitions are not encoded.
    with pytest.raises(ValueError):
        encode_consumer_group_value(
            ConsumerGroupCurrentMemberAssignmentValue(
                1, 0, 0, [TopicPartitions(TID_A, [1], [1, 2])], []
            )
        )


def test_current_member_assignment_value_bytes() -> None:
    expected = (
        V0
        + i32(12)  # MemberEpoch
        + i32(11)  # PreviousMemberEpoch
        + i8(1)  # State (UNREVOKED_PARTITIONS)
        + carray(1)
        + topic_partitions_bytes(TID_A, [1])  # AssignedPartitions
        + carray(1)
        + topic_partitions_bytes(TID_B, [3, 5])  # PartitionsPendingRevocation
        + NO_TAGS
    )
    v = ConsumerGroupCurrentMemberAssignmentValue(
        12, 11, 1, [TopicPartitions(TID_A, [1])], [TopicPartitions(TID_B, [3, 5])]
    )
    assert encode_consumer_group_value(v) == expected
    assert (
        decode_consumer_group_value(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), expected)
        == v
    )
    # State is an int8: 127 (UNKNOWN) and negative bytes survive.
    for state in (127, -1):
        w = ConsumerGroupCurrentMemberAssignmentValue(1, 0, state, [], [])
        data = encode_consumer_group_value(w)
        assert data[10:11] == i8(state)
        assert (
            decode_consumer_group_value(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), data)
            == w
        )


def test_regular_expression_value_bytes() -> None:
    expected = (
        V0
        + carray(2)
        + cstr("orders-1")
        + cstr("orders-2")
        + i64(1234)
        + i64(1700000000000)
        + NO_TAGS
    )
    v = ConsumerGroupRegularExpressionValue(["orders-1", "orders-2"], 1234, 1700000000000)
    assert encode_consumer_group_value(v) == expected
    assert (
        decode_consumer_group_value(ConsumerGroupRegularExpressionKey("g", "orders.*"), expected)
        == v
    )


def test_long_strings_use_multi_byte_varints() -> None:
    name = "t" * 200  # length + 1 = 201 needs two varint bytes
    data = encode_consumer_group_value(ConsumerGroupRegularExpressionValue([name], 0, 0))
    assert data[2:3] == b"\x02" and data[3:5] == bytes([201 & 0x7F | 0x80, 201 >> 7])
    assert decode_consumer_group_value(
        ConsumerGroupRegularExpressionKey("g", "r"), data
    ) == ConsumerGroupRegularExpressionValue([name], 0, 0)


# ---------------------------------------------------------------- tolerance


def test_unknown_tags_are_skipped() -> None:
    # Tag 0 (MetadataHash) plus tags 1 and 7 a newer writer might add.
    data = (
        V0
        + i32(3)
        + uvarint(3)
        + uvarint(0)
        + uvarint(8)
        + i64(99)
        + uvarint(1)
        + uvarint(2)
        + b"zz"
        + uvarint(7)
        + uvarint(0)
    )
    assert decode_consumer_group_value(
        ConsumerGroupMetadataKey("g"), data
    ) == ConsumerGroupMetadataValue(3, 99)
    # Unknown tags inside nested structs too.
    data = (
        V0
        + carray(1)
        + TID_A
        + carray(1)
        + i32(4)
        + uvarint(1)
        + uvarint(5)
        + uvarint(1)
        + b"q"
        + NO_TAGS
    )
    assert decode_consumer_group_value(
        ConsumerGroupTargetAssignmentMemberKey("g", "m"), data
    ) == ConsumerGroupTargetAssignmentMemberValue([TopicPartitions(TID_A, [4])])


def test_newer_value_version_is_read_with_the_v0_layout() -> None:
    data = i16(1) + i32(5) + uvarint(1) + uvarint(3) + uvarint(1) + b"n"
    assert decode_consumer_group_value(
        ConsumerGroupTargetAssignmentMetadataKey("g"), data
    ) == ConsumerGroupTargetAssignmentMetadataValue(5)


# ---------------------------------------------------------------- malformed values


MEMBER_KEY = ConsumerGroupMemberMetadataKey("g", "m")


@pytest.mark.parametrize(
    ("key", "data"),
    [
        (ConsumerGroupMetadataKey("g"), b"\x00"),  # shorter than the version
        (ConsumerGroupMetadataKey("g"), i16(-1) + i32(1) + NO_TAGS),  # negative version
        (ConsumerGroupMetadataKey("g"), V0 + i32(1)),  # tagged section missing
        (ConsumerGroupMetadataKey("g"), V0 + i32(1) + NO_TAGS + b"x"),  # trailing byte
        (
            ConsumerGroupMetadataKey("g"),
            V0 + i32(1) + uvarint(1) + uvarint(0) + uvarint(4) + i32(1),
        ),
        (
            ConsumerGroupMetadataKey("g"),
            V0 + i32(1) + uvarint(1) + uvarint(0) + uvarint(9) + i64(1),
        ),
        (ConsumerGroupMetadataKey("g"), V0 + i32(1) + b"\xff\xff\xff\xff\xff\x01"),  # long varint
        (MEMBER_KEY, V0 + cstr(None) + cstr(None) + cstr(None)),  # null ClientId
        (MEMBER_KEY, V0 + cstr(None) + cstr(None) + b"\x03\xff\xfe"),  # not UTF-8
        (ConsumerGroupTargetAssignmentMemberKey("g", "m"), V0 + b"\x00" + NO_TAGS),  # null array
        (
            ConsumerGroupTargetAssignmentMemberKey("g", "m"),
            V0 + carray(1) + TID_A[:10],
        ),  # short uuid
        (
            ConsumerGroupTargetAssignmentMemberKey("g", "m"),
            V0 + carray(1) + TID_A + carray(3) + i32(1),  # partitions truncated
        ),
    ],
)
def test_malformed_values(key: ConsumerGroupKey, data: bytes) -> None:
    with pytest.raises(OffsetsFormatError):
        decode_consumer_group_value(key, data)


def test_classic_member_metadata_tag_must_hold_exactly_the_struct() -> None:
    good = encode_consumer_group_value(
        ConsumerGroupMemberMetadataValue(
            None, None, "c", "h", [], None, -1, None, ClassicMemberMetadata(1, [])
        )
    )
    # ... + tags count 1, tag 0, size 4, presence 1, i32, carray(0), NO_TAGS; grow the size.
    size_at = len(good) - 8
    assert good[size_at] == 7
    bad = good[:size_at] + bytes([8]) + good[size_at + 1 :] + b"\x00"
    with pytest.raises(OffsetsFormatError):
        decode_consumer_group_value(MEMBER_KEY, bad)


# ---------------------------------------------------------------- round trips

i32s = st.integers(-(2**31), 2**31 - 1)
i64s = st.integers(-(2**63), 2**63 - 1)
texts = st.text(max_size=20)
ntexts = st.none() | texts
uuids = st.binary(min_size=16, max_size=16)
tps = st.lists(st.builds(TopicPartitions, uuids, st.lists(i32s, max_size=5), st.none()), max_size=4)


@st.composite
def _tps_with_epochs(draw: st.DrawFn) -> TopicPartitions:
    """A current-assignment TopicPartitions: AssignmentEpochs absent or one per partition."""
    partitions = draw(st.lists(i32s, max_size=5))
    epochs = draw(st.none() | st.lists(i32s, min_size=len(partitions), max_size=len(partitions)))
    return TopicPartitions(draw(uuids), partitions, epochs)


tps8 = st.lists(_tps_with_epochs(), max_size=4)

KEYS: st.SearchStrategy[ConsumerGroupKey] = st.one_of(
    st.builds(lambda g: ConsumerGroupMetadataKey(g), texts),
    st.builds(lambda g: ConsumerGroupPartitionMetadataKey(g), texts),
    st.builds(lambda g, m: ConsumerGroupMemberMetadataKey(g, m), texts, texts),
    st.builds(lambda g: ConsumerGroupTargetAssignmentMetadataKey(g), texts),
    st.builds(lambda g, m: ConsumerGroupTargetAssignmentMemberKey(g, m), texts, texts),
    st.builds(lambda g, m: ConsumerGroupCurrentMemberAssignmentKey(g, m), texts, texts),
    st.builds(lambda g, m: ConsumerGroupRegularExpressionKey(g, m), texts, texts),
)

KEY_FOR_VALUE: dict[type, ConsumerGroupKey] = {
    ConsumerGroupMetadataValue: ConsumerGroupMetadataKey("g"),
    ConsumerGroupPartitionMetadataValue: ConsumerGroupPartitionMetadataKey("g"),
    ConsumerGroupMemberMetadataValue: MEMBER_KEY,
    ConsumerGroupTargetAssignmentMetadataValue: ConsumerGroupTargetAssignmentMetadataKey("g"),
    ConsumerGroupTargetAssignmentMemberValue: ConsumerGroupTargetAssignmentMemberKey("g", "m"),
    ConsumerGroupCurrentMemberAssignmentValue: ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
    ConsumerGroupRegularExpressionValue: ConsumerGroupRegularExpressionKey("g", "r"),
}

VALUES: st.SearchStrategy[ConsumerGroupValue] = st.one_of(
    st.builds(ConsumerGroupMetadataValue, i32s, i64s),
    st.builds(
        ConsumerGroupPartitionMetadataValue,
        st.lists(
            st.builds(
                TopicMetadata,
                uuids,
                texts,
                i32s,
                st.lists(
                    st.builds(PartitionMetadata, i32s, st.lists(texts, max_size=3)), max_size=3
                ),
            ),
            max_size=3,
        ),
    ),
    st.builds(
        ConsumerGroupMemberMetadataValue,
        ntexts,
        ntexts,
        texts,
        texts,
        st.lists(texts, max_size=4),
        ntexts,
        i32s,
        ntexts,
        st.none()
        | st.builds(
            ClassicMemberMetadata,
            i32s,
            st.lists(st.tuples(texts, st.binary(max_size=200)), max_size=3),
        ),
    ),
    st.builds(ConsumerGroupTargetAssignmentMetadataValue, i32s),
    st.builds(ConsumerGroupTargetAssignmentMemberValue, tps),
    st.builds(
        ConsumerGroupCurrentMemberAssignmentValue,
        i32s,
        i32s,
        st.integers(-128, 127),
        tps8,
        tps8,
    ),
    st.builds(ConsumerGroupRegularExpressionValue, st.lists(texts, max_size=4), i64s, i64s),
)


@given(KEYS)
def test_key_round_trip(key: ConsumerGroupKey) -> None:
    data = encode_consumer_group_key(key)
    assert decode_key(data) == key
    assert decode_consumer_group_key(data) == key


@given(VALUES)
@settings(max_examples=300)
def test_value_round_trip(value: ConsumerGroupValue) -> None:
    key = KEY_FOR_VALUE[type(value)]
    data = encode_consumer_group_value(value)
    assert data[:2] == V0
    assert decode_consumer_group_value(key, data) == value


@given(VALUES, st.data())
@settings(max_examples=300)
def test_damaged_values_raise_only_offsets_format_error(
    value: ConsumerGroupValue, data: st.DataObject
) -> None:
    key = KEY_FOR_VALUE[type(value)]
    good = encode_consumer_group_value(value)
    cut = data.draw(st.integers(0, len(good) - 1))
    with pytest.raises(OffsetsFormatError):
        decode_consumer_group_value(key, good[:cut])  # every proper prefix is incomplete
    # A byte flipped somewhere: either still decodes (to some value) or OffsetsFormatError.
    at = data.draw(st.integers(0, len(good) - 1))
    flipped = good[:at] + bytes([good[at] ^ data.draw(st.integers(1, 255))]) + good[at + 1 :]
    with contextlib.suppress(OffsetsFormatError):
        decode_consumer_group_value(key, flipped)


@given(st.sampled_from([3, 4, 5, 6, 7, 8, 16]), st.binary(max_size=40))
def test_random_key_bodies_raise_only_offsets_format_error(rtype: int, body: bytes) -> None:
    try:
        key = decode_consumer_group_key(i16(rtype) + body)
    except OffsetsFormatError:
        with pytest.raises(OffsetsFormatError):
            decode_key(i16(rtype) + body)
        return
    assert decode_key(i16(rtype) + body) == key
    assert encode_consumer_group_key(key) == i16(rtype) + body
