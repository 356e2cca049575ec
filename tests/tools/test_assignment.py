"""Decoding the consumer protocol's assignment bytes (what ``groups describe --members`` shows)."""

from __future__ import annotations

import struct

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from coordinator.tools.admin import decode_assignment, encode_assignment


def test_round_trip_every_version_with_and_without_user_data() -> None:
    parts = {"orders": [0, 2, 4], "payments": [1]}
    for version in range(4):
        for user_data in (None, b"", b"\x00sticky"):
            got = decode_assignment(encode_assignment(parts, version, user_data))
            assert (got.version, got.partitions, got.user_data) == (version, parts, user_data)


def test_matches_a_real_client_encoding() -> None:
    raw = ConsumerProtocolMemberAssignment(0, [("orders", [3, 1]), ("audit", [0])], b"ud").encode()
    got = decode_assignment(raw)
    assert got.partitions == {"orders": [3, 1], "audit": [0]}
    assert got.user_data == b"ud"


def test_later_versions_fields_are_ignored_and_empty_is_empty() -> None:
    raw = (
        encode_assignment({"t": [7]}, version=5, user_data=b"x") + b"\x00\x00\x00\x00future fields"
    )
    assert decode_assignment(raw).partitions == {"t": [7]}
    assert decode_assignment(b"").partitions == {}
    no_user_data = struct.pack(">hi", 0, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">ii", 1, 9)
    assert decode_assignment(no_user_data).partitions == {"t": [9]}  # old clients omit user_data


def test_truncated_bytes_are_a_clear_error() -> None:
    with pytest.raises(ValueError, match="undecodable"):
        decode_assignment(encode_assignment({"orders": [0, 1]})[:9])
