"""What clients older than Kafka 0.11 need: magic 0/1 message sets, ListOffsets v0.

How this works
--------------
Clients older than Kafka 0.11 speak message sets: a run of ``offset int64, size int32,
message`` entries where a message is ``crc int32 (CRC-32 of what follows), magic int8,
attributes int8, [timestamp int64 on magic 1], key bytes, value bytes``. Attribute bits 0-2
are the codec (gzip 1, snappy 2, lz4 3), bit 3 on magic 1 says LogAppendTime. A compressed
set is one *wrapper* message whose value is the compressed inner set; the wrapper carries
the offset of the last inner message, and inner offsets are absolute on magic 0 and
relative (0, 1, ...) on magic 1.

kgc stores only v2 record batches, as Kafka 3.x does with message format 3.0:

* ``up_convert`` (Produce v0-2): LogValidator's conversion -- every message is checked (the
  wrapper's and each inner message's CRC, one magic throughout, one wrapper when compressed,
  no compressed inner message) and the records become one v2 batch with base offset 0,
  compressed with the producer's codec (kgc keeps the producer's compression), magic 0
  records with no timestamp (-1). Offsets are reassigned by the log, as Kafka does for old
  clients whose inner offsets were wrong.
* ``down_convert`` (Fetch v0-3, magic 0 for v0-1 and 1 for v2-3): RecordsUtil.downConvert --
  control batches are dropped, zstd cannot be converted (UNSUPPORTED_COMPRESSION_TYPE),
  headers are dropped, an uncompressed batch becomes one message per record starting at the
  fetch offset, a compressed one a wrapper with the batch's codec, LogAppendTime batches
  stamp every message with the batch's append time.

ListOffsets v0 answers ``offsets_before`` (UnifiedLog.legacyFetchOffsetsBefore): up to
``max_num_offsets`` segment base offsets, newest first, of the segments last modified at or
before the timestamp, the log end counting as one more "segment" modified now; -1 (latest)
starts from the log end, -2 (earliest) from the log start; a consumer never gets an offset
past the high watermark (Partition.legacyFetchOffsetsForTimestamp).

The legacy codecs are Kafka's: gzip, snappy in xerial's framing (snappy-java's
SnappyOutputStream), lz4 as Kafka's KafkaLZ4BlockOutputStream writes it (64 KiB independent
blocks), whose frame header checksum was computed wrongly for magic 0 (KAFKA-3160): written
so for magic 0 and repaired before decoding.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import cramjam
import crc32c as _crc32c

from protocol.errors import ErrorCode
from storage.interface import PartitionLog
from storage.record_batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_LOG_APPEND_TIME,
    HEADER_SIZE,
    LZ4_MAGIC,
    CorruptBatchError,
    Record,
    UnsupportedCompressionError,
    decode_records,
    decompress_records,
    encode_batch,
    iter_batches,
    lz4_frame,
    lz4_header_checksum,
)

MAGIC_V0 = 0
MAGIC_V1 = 1
NO_TIMESTAMP = -1
GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
TIMESTAMP_TYPE_MASK = 0x08  # LegacyRecord's: LogAppendTime on magic 1

_ENTRY = struct.Struct(">qi")  # offset, message size
_V0_HEAD = struct.Struct(">Ibb")  # crc, magic, attributes
_V1_HEAD = struct.Struct(">Ibbq")  # crc, magic, attributes, timestamp
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_LOG_OVERHEAD = 12
# LegacyRecord.RECORD_OVERHEAD_V0 / V1: a message with null key and value.
_OVERHEAD = {MAGIC_V0: 14, MAGIC_V1: 22}

_XERIAL_HEADER = b"\x82SNAPPY\x00" + _I32.pack(1) + _I32.pack(1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
_LZ4_BLOCK = 64 * 1024  # KafkaLZ4BlockOutputStream's blocks


class MessageSetError(ValueError):
    """A message set Kafka would refuse, with the error code and message it answers."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class LegacyMessage:
    offset: int
    magic: int
    attributes: int
    timestamp: int  # NO_TIMESTAMP on magic 0
    key: bytes | None
    value: bytes | None
    crc: int
    valid: bool  # the stored CRC matches

    @property
    def codec(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        return self.magic > MAGIC_V0 and bool(self.attributes & TIMESTAMP_TYPE_MASK)


# ---------------------------------------------------------------- reading


def _bytes_at(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise MessageSetError(ErrorCode.CORRUPT_MESSAGE, "Record is truncated")
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > end:
        raise MessageSetError(ErrorCode.CORRUPT_MESSAGE, "Record is truncated")
    return buf[pos : pos + n], pos + n


def _message(buf: bytes, offset: int, start: int, end: int) -> LegacyMessage:
    """The message in ``buf[start:end]`` (after its offset and size)."""
    magic = buf[start + 4]
    if magic > MAGIC_V1:
        raise MessageSetError(ErrorCode.CORRUPT_MESSAGE, f"Invalid magic found in record: {magic}")
    if end - start < _OVERHEAD[magic]:
        raise MessageSetError(
            ErrorCode.CORRUPT_MESSAGE,
            f"Record size {end - start} is less than the minimum record overhead "
            f"({_OVERHEAD[magic]})",
        )
    if magic == MAGIC_V0:
        crc, _, attributes = _V0_HEAD.unpack_from(buf, start)
        timestamp, pos = NO_TIMESTAMP, start + _V0_HEAD.size
    else:
        crc, _, attributes, timestamp = _V1_HEAD.unpack_from(buf, start)
        pos = start + _V1_HEAD.size
    key, pos = _bytes_at(buf, pos, end)
    value, pos = _bytes_at(buf, pos, end)
    valid = zlib.crc32(memoryview(buf)[start + 4 : end]) == crc
    return LegacyMessage(offset, magic, attributes & 0xFF, timestamp, key, value, crc, valid)


def iter_messages(buf: bytes) -> Iterator[LegacyMessage]:
    """The shallow entries of a message set; a partial entry at the end is not one (Kafka's
    ByteBufferLogInputStream stops there)."""
    pos, n = 0, len(buf)
    while n - pos >= _LOG_OVERHEAD + 5:
        offset, size = _ENTRY.unpack_from(buf, pos)
        start = pos + _LOG_OVERHEAD
        if size < _OVERHEAD[MAGIC_V0]:
            raise MessageSetError(
                ErrorCode.CORRUPT_MESSAGE,
                f"Record size {size} is less than the minimum record overhead "
                f"({_OVERHEAD[MAGIC_V0]})",
            )
        if start + size > n:
            return
        yield _message(buf, offset, start, start + size)
        pos = start + size


def decompress(codec: int, data: bytes, magic: int) -> bytes:
    """A wrapper message's value, decompressed."""
    if codec == LZ4:
        data = _lz4_fix_header(data)
    try:
        return decompress_records(codec, data)
    except (UnsupportedCompressionError, CorruptBatchError) as e:
        raise MessageSetError(ErrorCode.CORRUPT_MESSAGE, str(e)) from None
    except ValueError as e:  # cramjam's errors for malformed input
        raise MessageSetError(ErrorCode.CORRUPT_MESSAGE, f"cannot decompress: {e}") from None


def inner_messages(wrapper: LegacyMessage) -> list[LegacyMessage]:
    """The messages of a compressed wrapper, with absolute offsets and effective timestamps
    (AbstractLegacyRecordBatch's deep iterator)."""
    if wrapper.value is None:
        raise MessageSetError(
            ErrorCode.CORRUPT_MESSAGE, "Found invalid compressed record set with null value"
        )
    data = decompress(wrapper.codec, wrapper.value, wrapper.magic)
    inner: list[LegacyMessage] = []
    pos, n = 0, len(data)
    while pos < n:
        if n - pos < _LOG_OVERHEAD:
            raise MessageSetError(ErrorCode.CORRUPT_MESSAGE, "Truncated inner record")
        offset, size = _ENTRY.unpack_from(data, pos)
        start = pos + _LOG_OVERHEAD
        if size < _OVERHEAD[MAGIC_V0] or start + size > n:
            raise MessageSetError(ErrorCode.CORRUPT_MESSAGE, "Truncated inner record")
        inner.append(_message(data, offset, start, start + size))
        pos = start + size
    if not inner:
        raise MessageSetError(
            ErrorCode.CORRUPT_MESSAGE, "Found invalid compressed record set with no inner records"
        )
    out = []
    last_relative = inner[-1].offset
    for m in inner:
        offset = m.offset
        if wrapper.magic > MAGIC_V0:
            # Relative inner offsets: the wrapper holds the absolute offset of the last one.
            offset = wrapper.offset - last_relative + m.offset
        ts = m.timestamp
        if wrapper.log_append_time:
            ts = wrapper.timestamp
        out.append(LegacyMessage(offset, m.magic, m.attributes, ts, m.key, m.value, m.crc, m.valid))
    return out


# ---------------------------------------------------------------- Produce v0-2


def up_convert(records: bytes, log_append_time_topic: bool) -> bytes:
    """One v2 batch (base offset 0) holding the records of a Produce v0-2 message set.

    Returns b"" for a set with no complete message (Kafka appends nothing and answers
    without error); raises MessageSetError with the code Kafka answers for a bad one.
    """
    shallow = list(iter_messages(records))
    if not shallow:
        return b""
    first = shallow[0]
    codec = 0
    for m in shallow:
        if m.magic != first.magic:
            raise MessageSetError(
                ErrorCode.INVALID_RECORD,
                f"Batch magic {m.magic} is not the same as the first batch's magic byte "
                f"{first.magic}",
            )
        if not m.valid:
            raise MessageSetError(
                ErrorCode.CORRUPT_MESSAGE, f"Record is corrupt (stored crc = {m.crc})"
            )
        if m.codec:
            codec = m.codec
    if codec == ZSTD or codec > ZSTD:
        raise MessageSetError(ErrorCode.CORRUPT_MESSAGE, f"Unknown compression type id {codec}")
    if codec and len(shallow) > 1:
        raise MessageSetError(
            ErrorCode.INVALID_RECORD, "Compressed outer record has more than one batch"
        )
    messages = shallow if not codec else inner_messages(first)
    for i, m in enumerate(messages):
        if codec:
            if m.codec:
                raise MessageSetError(
                    ErrorCode.INVALID_RECORD,
                    f"Compressed outer record should not have an inner record with a "
                    f"compression attribute set (record {i})",
                )
            if m.magic != first.magic:
                raise MessageSetError(
                    ErrorCode.INVALID_RECORD,
                    f"Record {i}'s magic does not match outer magic {first.magic}",
                )
            if not m.valid:
                raise MessageSetError(
                    ErrorCode.CORRUPT_MESSAGE, f"Record is corrupt (stored crc = {m.crc})"
                )
        # LogValidator.validateTimestamp: a producer may not claim LogAppendTime, unless
        # its CreateTime topic gets a timestamp to check anyway.
        if (first.log_append_time if codec else m.log_append_time) and (
            log_append_time_topic or m.timestamp == NO_TIMESTAMP
        ):
            raise MessageSetError(
                ErrorCode.INVALID_TIMESTAMP,
                "Invalid timestamp type in message. Producer should not set timestamp type to "
                "LogAppendTime.",
            )
    base_ts = messages[0].timestamp
    batch = encode_batch(
        0,
        [Record(i, m.timestamp - base_ts, m.key, m.value) for i, m in enumerate(messages)],
        timestamp_ms=base_ts,
    )
    return compress_batch(batch, codec) if codec else batch


def compress_batch(batch: bytes, codec: int) -> bytes:
    """An uncompressed v2 batch with its records compressed by ``codec`` (new length, CRC)."""
    body = _compress(codec, batch[HEADER_SIZE:], magic=2)
    out = bytearray(batch[:HEADER_SIZE]) + body
    _I32.pack_into(out, 8, len(out) - _LOG_OVERHEAD)
    attrs = struct.unpack_from(">h", out, 21)[0]
    struct.pack_into(">h", out, 21, attrs | codec)
    _U32.pack_into(out, 17, _crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)


def produce_batch(
    records: bytes | None, log_append_time_topic: bool
) -> tuple[bytes | None, ErrorCode, str | None]:
    """(the v2 batch to append, error code, error message) for a Produce v0-2 partition;
    no batch and no error when the set holds no complete message."""
    if records and len(records) > 16 and records[16] == 2:
        return records, ErrorCode.NO_ERROR, None  # already a v2 batch: validated as one
    try:
        batch = up_convert(records or b"", log_append_time_topic)
    except MessageSetError as e:
        return None, e.code, str(e)
    return batch or None, ErrorCode.NO_ERROR, None


# ---------------------------------------------------------------- Fetch v0-3


def fetch_magic(fetch_version: int) -> int:
    """The message format a Fetch version reads: magic 0 for v0-1, 1 for v2-3 (2 from v4)."""
    return MAGIC_V0 if fetch_version <= 1 else MAGIC_V1 if fetch_version <= 3 else 2


def fetch_records(data: bytes, fetch_version: int, fetch_offset: int) -> tuple[bytes, ErrorCode]:
    """A Fetch v0-3 partition's records in the format its version reads, or the error."""
    try:
        return down_convert(data, fetch_magic(fetch_version), fetch_offset), ErrorCode.NO_ERROR
    except MessageSetError as e:
        return b"", e.code


def down_convert(data: bytes, magic: int, first_offset: int) -> bytes:
    """Stored v2 batches as a magic 0/1 message set (RecordsUtil.downConvert).

    Raises MessageSetError(UNSUPPORTED_COMPRESSION_TYPE) for a zstd batch.
    """
    out = bytearray()
    for h, start, end in iter_batches(data):
        if h.is_control:
            continue
        codec = h.compression
        if codec == ZSTD:
            raise MessageSetError(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                "Down-conversion of zstandard-compressed batches is not supported",
            )
        append_time = bool(h.attributes & ATTR_LOG_APPEND_TIME)
        recs = [
            (h.base_offset + r.offset_delta, h.base_timestamp + r.timestamp_delta, r.key, r.value)
            for r in decode_records(data[start:end])
            if codec or h.base_offset + r.offset_delta >= first_offset
        ]
        if not recs:
            continue
        ts_attr = TIMESTAMP_TYPE_MASK if append_time and magic > MAGIC_V0 else 0
        if append_time:
            recs = [(o, h.max_timestamp, k, v) for o, _, k, v in recs]
        if not codec:
            for offset, ts, key, value in recs:
                _write_entry(out, offset, magic, ts_attr, ts, key, value)
            continue
        base = recs[0][0]
        inner = bytearray()
        for offset, ts, key, value in recs:
            _write_entry(
                inner, offset - base if magic > MAGIC_V0 else offset, magic, ts_attr, ts, key, value
            )
        wrapper_ts = h.max_timestamp if append_time else max(r[1] for r in recs)
        _write_entry(
            out,
            recs[-1][0],
            magic,
            ts_attr | codec,
            wrapper_ts,
            None,
            _compress(codec, bytes(inner), magic),
        )
    return bytes(out)


def _write_entry(
    out: bytearray,
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
) -> None:
    body = bytearray()
    body.append(magic)
    body.append(attributes)
    if magic > MAGIC_V0:
        body += struct.pack(">q", timestamp)
    for b in (key, value):
        if b is None:
            body += b"\xff\xff\xff\xff"
        else:
            body += _I32.pack(len(b))
            body += b
    out += _ENTRY.pack(offset, len(body) + 4)
    out += _U32.pack(zlib.crc32(body))
    out += body


# ---------------------------------------------------------------- ListOffsets v0


def offsets_before(
    segments: Sequence[tuple[int, int, int]],
    log_start_offset: int,
    log_end_offset: int,
    now_ms: int,
    timestamp: int,
    max_num_offsets: int,
    high_watermark: int,
    from_consumer: bool,
) -> list[int]:
    """ListOffsets v0's offsets; ``segments``: (base offset, size, last modified ms), oldest
    first."""
    points = [(max(base, log_start_offset), modified) for base, _, modified in segments]
    if segments and segments[-1][1] > 0:
        points.append((log_end_offset, now_ms))
    if timestamp == -1:  # latest
        start = len(points) - 1
    elif timestamp == -2:  # earliest
        start = 0
    else:
        start = len(points) - 1
        while start >= 0 and points[start][1] > timestamp:
            start -= 1
    n = max(0, min(max_num_offsets, start + 1))
    offsets = sorted((points[start - j][0] for j in range(n)), reverse=True)
    if from_consumer and any(o > high_watermark for o in offsets):
        offsets = [high_watermark] + [o for o in offsets if o <= high_watermark]
    return offsets


def list_offsets_v0(
    plog: PartitionLog,
    timestamp: int,
    max_num_offsets: int,
    high_watermark: int,
    now_ms: int,
    from_consumer: bool,
) -> tuple[ErrorCode, list[int]]:
    """(error code, offsets) answering one ListOffsets v0 partition."""
    if timestamp < -2:
        # v0 knows only -1 (latest) and -2 (earliest) among the special timestamps.
        return ErrorCode.UNSUPPORTED_VERSION, []
    try:
        points = plog.segment_points()
    except OSError:
        return ErrorCode.KAFKA_STORAGE_ERROR, []
    offsets = offsets_before(
        points,
        plog.log_start_offset,
        plog.log_end_offset,
        now_ms,
        timestamp,
        max_num_offsets,
        high_watermark,
        from_consumer,
    )
    return ErrorCode.NO_ERROR, offsets


# ---------------------------------------------------------------- codecs


def _compress(codec: int, data: bytes, magic: int) -> bytes:
    if codec == GZIP:
        return gzip.compress(data)
    if codec == SNAPPY:
        out = bytearray(_XERIAL_HEADER)
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
            out += _I32.pack(len(block))
            out += block
        return bytes(out)
    if codec == LZ4:
        return lz4_frame(data, block_max=_LZ4_BLOCK, broken_checksum=magic == MAGIC_V0)
    raise MessageSetError(
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"cannot compress with codec {codec}"
    )


def _lz4_fix_header(data: bytes) -> bytes:
    """The frame with a correct header checksum, whichever way its writer computed it."""
    if len(data) < 7 or data[:4] != LZ4_MAGIC:
        return data
    flg = data[4]
    end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(data) <= end:
        return data
    hc = lz4_header_checksum(data[4:end])
    if data[end] == hc:
        return data
    return data[:end] + bytes((hc,)) + data[end + 1 :]
