from __future__ import annotations

import struct

import pytest

from storage.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsFormatError,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    java_string_hash,
    partition_for,
)


def s16(s: str) -> bytes:
    """Classic string: int16 length + UTF-8."""
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def cstr(s: str | None) -> bytes:
    """Compact (flexible) string: uvarint(length + 1), 0 = null; short strings only."""
    if s is None:
        return b"\x00"
    b = s.encode()
    assert len(b) < 127
    return bytes([len(b) + 1]) + b


# ---------------------------------------------------------------- keys


def test_offset_commit_key_bytes() -> None:
    expected = (
        struct.pack(">h", 1)  # key version 1 (OffsetCommitKey)
        + s16("group-1")  # group
        + s16("orders")  # topic
        + struct.pack(">i", 7)  # partition
    )
    assert encode_offset_commit_key("group-1", "orders", 7) == expected
    assert decode_key(expected) == OffsetCommitKey("group-1", "orders", 7, 1)


def test_offset_commit_key_v0_decodes() -> None:
    data = struct.pack(">h", 0) + s16("g") + s16("t") + struct.pack(">i", 0)
    assert decode_key(data) == OffsetCommitKey("g", "t", 0, 0)


def test_group_metadata_key_bytes() -> None:
    expected = struct.pack(">h", 2) + s16("my-group")  # version 2, group
    assert encode_group_metadata_key("my-group") == expected
    assert decode_key(expected) == GroupMetadataKey("my-group")


def test_unknown_and_bad_keys() -> None:
    k = struct.pack(">h", 100) + b"whatever"
    assert decode_key(k) == UnknownKey(100, k)
    with pytest.raises(OffsetsFormatError):
        decode_key(b"\x00")
    with pytest.raises(OffsetsFormatError):
        decode_key(struct.pack(">h", 1) + s16("g"))  # topic and partition missing
    with pytest.raises(OffsetsFormatError):
        decode_key(encode_offset_commit_key("g", "t", 1) + b"x")


def test_unicode_key_lengths_are_bytes() -> None:
    k = encode_offset_commit_key("grüppe-😀", "tópic", 1)
    assert struct.unpack_from(">h", k, 2)[0] == len("grüppe-😀".encode())
    assert decode_key(k) == OffsetCommitKey("grüppe-😀", "tópic", 1)


# ---------------------------------------------------------------- offset commit value


def test_offset_commit_value_v3_bytes() -> None:
    expected = (
        struct.pack(">h", 3)  # version
        + struct.pack(">q", 1234)  # offset
        + struct.pack(">i", 5)  # leader_epoch (v3+)
        + s16("meta")  # metadata
        + struct.pack(">q", 1_700_000_000_000)  # commit_timestamp
    )
    assert encode_offset_commit_value(1234, "meta", 1_700_000_000_000, leader_epoch=5) == expected
    assert decode_offset_commit_value(expected) == OffsetCommitValue(
        1234, "meta", 1_700_000_000_000, 5, -1, 3
    )


def test_offset_commit_value_v1_when_expiring() -> None:
    expected = (
        struct.pack(">h", 1)  # version
        + struct.pack(">q", 9)  # offset
        + s16("")  # metadata
        + struct.pack(">q", 100)  # commit_timestamp
        + struct.pack(">q", 200)  # expire_timestamp (v1 only)
    )
    assert encode_offset_commit_value(9, "", 100, expire_timestamp=200) == expected
    assert decode_offset_commit_value(expected) == OffsetCommitValue(9, "", 100, -1, 200, 1)


def test_offset_commit_value_v0_and_v2() -> None:
    body = struct.pack(">q", 5) + s16("m") + struct.pack(">q", 77)  # offset, metadata, commit ts
    assert decode_offset_commit_value(struct.pack(">h", 0) + body) == OffsetCommitValue(
        5, "m", 77, -1, -1, 0
    )
    assert decode_offset_commit_value(struct.pack(">h", 2) + body) == OffsetCommitValue(
        5, "m", 77, -1, -1, 2
    )


def test_offset_commit_value_v4_flexible_with_tagged_fields() -> None:
    data = (
        struct.pack(">h", 4)  # version 4: flexible
        + struct.pack(">q", 42)  # offset
        + struct.pack(">i", 3)  # leader_epoch
        + cstr("meta")  # metadata: compact string
        + struct.pack(">q", 1000)  # commit_timestamp
        + b"\x01"  # one tagged field
        + b"\x05"  # tag 5 (unknown to us: skipped)
        + b"\x02"  # size 2
        + b"\xaa\xbb"  # tag data
    )
    assert decode_offset_commit_value(data) == OffsetCommitValue(42, "meta", 1000, 3, -1, 4)
    assert decode_offset_commit_value(data[:-5] + b"\x00").offset == 42  # no tagged fields


def test_offset_commit_value_errors() -> None:
    with pytest.raises(OffsetsFormatError):
        decode_offset_commit_value(struct.pack(">h", 9) + b"\x00" * 20)
    good = encode_offset_commit_value(1, "m", 2)
    with pytest.raises(OffsetsFormatError):
        decode_offset_commit_value(good[:-1])
    with pytest.raises(OffsetsFormatError):
        decode_offset_commit_value(
            encode_offset_commit_value(1, "m", 2, expire_timestamp=3) + b"\x00"
        )


# ---------------------------------------------------------------- group metadata value


MEMBERS = (
    MemberMetadata(
        "m-1", "inst-1", "client-a", "/10.0.0.1", 60_000, 10_000, b"\x00\x01sub", b"\x00\x02as"
    ),
    MemberMetadata("m-2", None, "client-b", "/10.0.0.2", 30_000, 45_000, b"", b""),
)


def member_v3(m: MemberMetadata) -> bytes:
    return (
        s16(m.member_id)  # member_id
        + (
            b"\xff\xff" if m.group_instance_id is None else s16(m.group_instance_id)
        )  # group_instance_id (v3+)
        + s16(m.client_id)  # client_id
        + s16(m.client_host)  # client_host
        + struct.pack(">i", m.rebalance_timeout)  # rebalance_timeout (v1+)
        + struct.pack(">i", m.session_timeout)  # session_timeout
        + struct.pack(">i", len(m.subscription))
        + m.subscription  # subscription bytes
        + struct.pack(">i", len(m.assignment))
        + m.assignment  # assignment bytes
    )


def test_group_metadata_value_v3_bytes() -> None:
    expected = (
        struct.pack(">h", 3)  # version
        + s16("consumer")  # protocol_type
        + struct.pack(">i", 4)  # generation
        + s16("range")  # protocol (nullable)
        + s16("m-1")  # leader (nullable)
        + struct.pack(">q", 1_700_000_000_123)  # current_state_timestamp (v2+)
        + struct.pack(">i", 2)  # members array length
        + member_v3(MEMBERS[0])
        + member_v3(MEMBERS[1])
    )
    got = encode_group_metadata_value("consumer", 4, "range", "m-1", 1_700_000_000_123, MEMBERS)
    assert got == expected
    assert decode_group_metadata_value(expected) == GroupMetadataValue(
        "consumer", 4, "range", "m-1", 1_700_000_000_123, MEMBERS, 3
    )


def test_group_metadata_value_empty_group_nulls() -> None:
    expected = (
        struct.pack(">h", 3)
        + s16("consumer")  # protocol_type
        + struct.pack(">i", 0)  # generation
        + b"\xff\xff"  # protocol: null
        + b"\xff\xff"  # leader: null
        + struct.pack(">q", -1)  # current_state_timestamp
        + struct.pack(">i", 0)  # no members
    )
    assert encode_group_metadata_value("consumer", 0, None, None, -1, ()) == expected
    assert decode_group_metadata_value(expected).members == ()


def test_group_metadata_value_v0_v1_v2() -> None:
    m = MEMBERS[0]
    member_v0 = (
        s16(m.member_id)
        + s16(m.client_id)
        + s16(m.client_host)
        + struct.pack(">i", m.session_timeout)  # no rebalance timeout in v0
        + struct.pack(">i", len(m.subscription))
        + m.subscription
        + struct.pack(">i", len(m.assignment))
        + m.assignment
    )
    head = s16("consumer") + struct.pack(">i", 1) + s16("range") + s16("m-1")
    v0 = struct.pack(">h", 0) + head + struct.pack(">i", 1) + member_v0
    got = decode_group_metadata_value(v0)
    assert got.version == 0 and got.current_state_timestamp == -1
    # v0 has no rebalance timeout: Kafka falls back to the session timeout.
    assert got.members[0].rebalance_timeout == m.session_timeout
    assert got.members[0].group_instance_id is None

    member_v1 = (
        s16(m.member_id)
        + s16(m.client_id)
        + s16(m.client_host)
        + struct.pack(">i", m.rebalance_timeout)
        + struct.pack(">i", m.session_timeout)
        + struct.pack(">i", len(m.subscription))
        + m.subscription
        + struct.pack(">i", len(m.assignment))
        + m.assignment
    )
    v1 = struct.pack(">h", 1) + head + struct.pack(">i", 1) + member_v1
    assert decode_group_metadata_value(v1).members[0].rebalance_timeout == m.rebalance_timeout
    v2 = struct.pack(">h", 2) + head + struct.pack(">q", 55) + struct.pack(">i", 1) + member_v1
    got2 = decode_group_metadata_value(v2)
    assert got2.current_state_timestamp == 55 and got2.members[0].client_host == m.client_host


def test_group_metadata_value_v4_flexible() -> None:
    m = MEMBERS[0]
    data = (
        struct.pack(">h", 4)  # version 4
        + cstr("consumer")  # protocol_type
        + struct.pack(">i", 9)  # generation
        + cstr(None)  # protocol: null
        + cstr("m-1")  # leader
        + struct.pack(">q", 77)  # current_state_timestamp
        + b"\x02"  # compact array: 1 member
        + cstr(m.member_id)
        + cstr(m.group_instance_id)
        + cstr(m.client_id)
        + cstr(m.client_host)
        + struct.pack(">i", m.rebalance_timeout)
        + struct.pack(">i", m.session_timeout)
        + bytes([len(m.subscription) + 1])
        + m.subscription  # compact bytes
        + bytes([len(m.assignment) + 1])
        + m.assignment
        + b"\x00"  # member tagged fields
        + b"\x01\x00\x01\xff"  # group tagged fields: one, tag 0, 1 byte
    )
    assert decode_group_metadata_value(data) == GroupMetadataValue(
        "consumer", 9, None, "m-1", 77, (m,), 4
    )


# ---------------------------------------------------------------- hashing


@pytest.mark.parametrize(
    ("s", "h"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Hello World", -862545276),
        ("polygenelubricants", -(2**31)),
        ("GydZG_", -(2**31)),
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # surrogate pair, not the code point
        ("é", 233),
    ],
)
def test_java_string_hash(s: str, h: int) -> None:
    assert java_string_hash(s) == h


def test_partition_for() -> None:
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("Hello World", 50) == 862545276 % 50
    assert all(0 <= partition_for(f"g{i}", 7) < 7 for i in range(100))
