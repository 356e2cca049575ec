"""Reading for Fetch: how many bytes each partition may return, and batch validation.

How this works: a Fetch asks for several partitions with a byte limit each
(``partition_max_bytes``) and one for the whole response (``max_bytes``). As Kafka's
ReplicaManager.readFromLog does for v3+ requests, partitions are read in request order, each
with ``min(partition_max_bytes, what is left of max_bytes)``; the first partition that returns
data may return one whole batch larger than its limit (so a consumer can always make
progress), every later one only whole batches that fit. The log hands back whole batches,
never a torn one, so "does not fit" means "nothing from this partition this time".

``validate_produced`` is the per-partition check a Produce v3+ payload must pass before it is
appended: exactly one magic-2 batch, base offset 0, CRC, size, record count, no control
batch. It returns the parsed header or the Kafka error code with Kafka's message.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from protocol.errors import ErrorCode
from storage.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptBatchError,
    parse_header,
    verify_crc,
)

_LENGTH = struct.Struct(">i")
ZSTD = 4


class ReadBudget:
    """Byte accounting across the partitions of one Fetch request."""

    __slots__ = ("min_one", "remaining")

    def __init__(self, max_bytes: int) -> None:
        self.remaining = max(max_bytes, 0)
        self.min_one = True

    def read(self, partition_max_bytes: int, reader: Callable[[int], bytes]) -> bytes:
        """Call ``reader(limit)`` (returns whole batches, at least one) and trim to the budget."""
        limit = min(max(partition_max_bytes, 0), self.remaining)
        if limit <= 0 and not self.min_one:
            return b""
        data = reader(limit)
        if not data:
            return b""
        if len(data) > limit:
            if not self.min_one:
                return b""
            # Keep only the first batch: the one the consumer needs to make progress.
            (length,) = _LENGTH.unpack_from(data, 8)
            data = data[: LOG_OVERHEAD + length]
        self.min_one = False
        self.remaining = max(0, self.remaining - len(data))
        return data


def validate_produced(
    records: bytes | None, version: int, max_message_bytes: int
) -> tuple[BatchHeader | None, int, str | None]:
    """(header, error code, error message) for one partition's Produce payload."""
    if not records or len(records) < LOG_OVERHEAD:
        return (
            None,
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} must have at least one record batch per partition",
        )
    (length,) = _LENGTH.unpack_from(records, 8)
    size = LOG_OVERHEAD + length
    if len(records) < HEADER_SIZE or length <= 0 or size > len(records):
        return (
            None,
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} must have at least one record batch per partition",
        )
    if records[16] != 2:
        return (
            None,
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain record batches with magic version 2",
        )
    if size != len(records):
        return (
            None,
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain exactly one record batch per partition",
        )
    try:
        h = parse_header(records)
    except CorruptBatchError as e:
        return None, ErrorCode.CORRUPT_MESSAGE, str(e)
    if h.compression == ZSTD and version < 7:
        return (
            None,
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {version} are not allowed to use ZStandard compression",
        )
    if h.compression > ZSTD:
        return None, ErrorCode.CORRUPT_MESSAGE, f"Unknown compression type id {h.compression}"
    if h.base_offset != 0:
        return (
            None,
            ErrorCode.INVALID_RECORD,
            f"The baseOffset of the record batch should be 0, but it is {h.base_offset}",
        )
    if size > max_message_bytes:
        return (
            None,
            ErrorCode.MESSAGE_SIZE_TOO_LARGE,
            (
                f"The record batch size is {size} bytes which exceeds the maximum configured value of {max_message_bytes}."
            ),
        )
    if not verify_crc(records, 0, size):
        return None, ErrorCode.CORRUPT_MESSAGE, f"Record batch is corrupt (stored crc = {h.crc})"
    if h.records_count <= 0 or h.last_offset_delta != h.records_count - 1:
        return (
            None,
            ErrorCode.INVALID_RECORD,
            (
                f"Inner record count {h.records_count} does not match last offset delta {h.last_offset_delta}"
            ),
        )
    if h.is_control:
        return None, ErrorCode.INVALID_RECORD, "Clients are not allowed to write control records"
    return h, ErrorCode.NO_ERROR, None
