"""Produce payload validation and Fetch byte budgeting."""

from __future__ import annotations

import struct

from coordinator.dataplane.reads import ReadBudget, validate_produced
from protocol.errors import ErrorCode
from storage.record_batch import ATTR_CONTROL, encode_batch


def batch(n: int = 3, size: int = 10, **kw: int) -> bytes:
    return encode_batch(0, [(b"k", b"x" * size)] * n, timestamp_ms=1000, **kw)


def test_valid_batch() -> None:
    h, err, _ = validate_produced(batch(), 9, 1 << 20)
    assert err == 0 and h is not None and h.records_count == 3


def test_invalid_payloads() -> None:
    b = batch()
    assert validate_produced(None, 9, 1 << 20)[1] == ErrorCode.INVALID_RECORD
    assert validate_produced(b"", 9, 1 << 20)[1] == ErrorCode.INVALID_RECORD
    assert validate_produced(b[:-1], 9, 1 << 20)[1] == ErrorCode.INVALID_RECORD
    assert validate_produced(b + b, 9, 1 << 20)[1] == ErrorCode.INVALID_RECORD
    magic1 = b[:16] + b"\x01" + b[17:]
    assert validate_produced(magic1, 9, 1 << 20)[1] == ErrorCode.INVALID_RECORD
    corrupt = b[:-1] + bytes([b[-1] ^ 1])
    assert validate_produced(corrupt, 9, 1 << 20)[1] == ErrorCode.CORRUPT_MESSAGE
    assert validate_produced(b, 9, len(b) - 1)[1] == ErrorCode.MESSAGE_SIZE_TOO_LARGE
    nonzero_base = struct.pack(">q", 5) + b[8:]
    assert validate_produced(nonzero_base, 9, 1 << 20)[1] == ErrorCode.INVALID_RECORD
    control = batch(attributes=ATTR_CONTROL)
    assert validate_produced(control, 9, 1 << 20)[1] == ErrorCode.INVALID_RECORD


def test_zstd_needs_v7() -> None:
    b = bytearray(batch())
    struct.pack_into(">h", b, 21, 4)  # zstd attribute; CRC is checked after the version rule
    assert validate_produced(bytes(b), 6, 1 << 20)[1] == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def reader_of(batches: list[bytes]):  # type: ignore[no-untyped-def]
    """A log read: whole batches from the first, at least one, then as many as fit."""

    def read(limit: int) -> bytes:
        out = batches[0]
        for b in batches[1:]:
            if len(out) + len(b) > limit:
                break
            out += b
        return out

    return read


def test_first_partition_may_exceed_its_limit_by_one_batch() -> None:
    big = batch(n=1, size=5000)
    small = batch(n=1, size=10)
    budget = ReadBudget(max_bytes=100_000)
    data = budget.read(1000, reader_of([big, small]))
    assert data == big  # one oversized batch, nothing after it
    # Later partitions only get whole batches that fit.
    assert budget.read(1000, reader_of([big])) == b""
    assert budget.read(1000, reader_of([small, small])) == small + small


def test_response_max_bytes_bounds_later_partitions() -> None:
    b = batch(n=1, size=900)
    budget = ReadBudget(max_bytes=2 * len(b) + 10)
    assert budget.read(10_000, reader_of([b, b, b])) == b + b
    assert budget.remaining == 10
    assert budget.read(10_000, reader_of([b])) == b""


def test_zero_max_bytes_still_returns_first_batch() -> None:
    b = batch(n=1, size=100)
    budget = ReadBudget(max_bytes=0)
    assert budget.read(10_000, reader_of([b, b])) == b
    assert budget.read(10_000, reader_of([b])) == b""
