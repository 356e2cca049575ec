"""The audit's ``decode_offset_commit_values`` (numpy) agrees with storage's scalar decoder.

Values of every version (and damaged ones) are packed into one buffer at random gaps; every
value must decode to the scalar decoder's fields, or be reported with the scalar decoder's
OffsetsFormatError.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.primitives import uvarint
from storage.records import OffsetsFormatError, decode_offset_commit_value

pytest.importorskip("numpy")

import numpy as np

from coordinator.audit.columns import decode_offset_commit_values

i64 = st.integers(-(2**63), 2**63 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
metadata = st.sampled_from(["", "", "", "range", "é→", "x" * 300]) | st.text(max_size=20)


@st.composite
def values(draw: st.DrawFn) -> bytes:
    """One value: a well-formed v0..v4 encoding, maybe damaged, or garbage."""
    version = draw(st.integers(0, 4))
    offset, ts, expire, epoch = draw(i64), draw(i64), draw(i64), draw(i32)
    meta = draw(metadata).encode()
    if version == 4:
        v = (
            struct.pack(">hqi", 4, offset, epoch)
            + uvarint(len(meta) + 1)
            + meta
            + struct.pack(">q", ts)
            + b"\x00"  # no tagged fields
        )
    else:
        v = struct.pack(">hq", version, offset)
        if version == 3:
            v += struct.pack(">i", epoch)
        v += struct.pack(">h", len(meta)) + meta + struct.pack(">q", ts)
        if version == 1:
            v += struct.pack(">q", expire)
    damage = draw(st.sampled_from(["none"] * 6 + ["cut", "extend", "version", "mlen", "bytes"]))
    if damage == "cut":
        v = v[: draw(st.integers(0, len(v) - 1))]
    elif damage == "extend":
        v += draw(st.binary(min_size=1, max_size=9))
    elif damage == "version":
        v = struct.pack(">h", draw(st.integers(-(2**15), 2**15 - 1))) + v[2:]
    elif damage == "mlen" and version < 4:
        at = 14 if version == 3 else 10
        v = v[:at] + struct.pack(">h", draw(st.integers(-(2**15), 2**15 - 1))) + v[at + 2 :]
    elif damage == "bytes":
        v = draw(st.binary(max_size=40))
    return v


def scalar(v: bytes) -> tuple[int, int, int, int] | str:
    try:
        d = decode_offset_commit_value(v)
    except OffsetsFormatError as e:
        return f"error: {e}"
    return d.offset, d.leader_epoch, d.commit_timestamp, d.expire_timestamp


@settings(max_examples=300, deadline=None)
@given(
    vals=st.lists(values(), max_size=40),
    gaps=st.lists(st.binary(max_size=5), min_size=41, max_size=41),
)
def test_columnar_matches_scalar(vals: list[bytes], gaps: list[bytes]) -> None:
    data = bytearray()
    starts = []
    for v, gap in zip(vals, gaps, strict=False):
        data += gap
        starts.append(len(data))
        data += v
    data += gaps[-1]
    lengths = [len(v) for v in vals]

    expected: list[tuple[int, int, int, int] | str] = []
    try:
        expected = [scalar(v) for v in vals]
    except UnicodeDecodeError:
        # metadata that is not UTF-8: the scalar decoder raises, so must the columnar one
        with pytest.raises(UnicodeDecodeError):
            decode_offset_commit_values(
                bytes(data), np.array(starts, np.int64), np.array(lengths, np.int64)
            )
        return
    cols = decode_offset_commit_values(
        bytes(data), np.array(starts, np.int64), np.array(lengths, np.int64)
    )
    actual: list[tuple[int, int, int, int] | str] = [
        f"error: {cols.errors[i]}"
        if i in cols.errors
        else (
            int(cols.offset[i]),
            int(cols.leader_epoch[i]),
            int(cols.commit_timestamp[i]),
            int(cols.expire_timestamp[i]),
        )
        for i in range(len(vals))
    ]
    assert actual == expected


def test_each_version_by_hand() -> None:
    v0 = struct.pack(">hqh", 0, 7, 0) + struct.pack(">q", 100)
    v1 = struct.pack(">hqh", 1, 8, 2) + b"ab" + struct.pack(">qq", 200, 300)
    v2 = struct.pack(">hqh", 2, 9, 0) + struct.pack(">q", 400)
    v3 = struct.pack(">hqih", 3, 10, 5, 0) + struct.pack(">q", 500)
    v4 = struct.pack(">hqi", 4, 11, 6) + b"\x01" + struct.pack(">q", 600) + b"\x00"
    bad = struct.pack(">h", 9) + bytes(22)
    vals = [v0, v1, v2, v3, v4, bad]
    data = b"".join(vals)
    starts = np.cumsum([0] + [len(v) for v in vals[:-1]])
    cols = decode_offset_commit_values(data, starts, np.array([len(v) for v in vals]))
    assert cols.offset[:5].tolist() == [7, 8, 9, 10, 11]
    assert cols.leader_epoch[:5].tolist() == [-1, -1, -1, 5, 6]
    assert cols.commit_timestamp[:5].tolist() == [100, 200, 400, 500, 600]
    assert cols.expire_timestamp[:5].tolist() == [-1, 300, -1, -1, -1]
    assert list(cols.errors) == [5]
    assert "unknown OffsetCommitValue version 9" in str(cols.errors[5])


def test_metadata_that_is_not_utf8_raises_like_the_scalar_decoder() -> None:
    good = struct.pack(">hqih", 3, 1, 0, 0) + struct.pack(">q", 5)
    bad = struct.pack(">hqih", 3, 1, 0, 2) + b"\xff\xfe" + struct.pack(">q", 5)
    with pytest.raises(UnicodeDecodeError):
        decode_offset_commit_value(bad)
    with pytest.raises(UnicodeDecodeError):
        decode_offset_commit_values(good + bad, np.array([0, 24]), np.array([24, 26]))
