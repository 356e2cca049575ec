"""Kafka RecordBatch v2 (magic 2): the unit we store on disk and send on the wire.

How this works
--------------
A batch is a fixed 61-byte big-endian header followed by ``records_count``
records.  The CRC32C in the header covers everything from ``attributes`` to
the end of the batch, so the two fields in front of it (``base_offset`` and
``batch_length``) plus ``partition_leader_epoch`` can be rewritten without
re-hashing: that is how a producer's batch gets its offsets assigned and is
then stored exactly as sent.

Each record is varint framed (zigzag, as protobuf's sint): length, attributes
(int8, unused), timestamp delta, offset delta, key, value and headers, where a
length of -1 means null.  Offsets and timestamps of records are deltas from the
batch's ``base_offset`` / ``base_timestamp``.

Decoding is a hot path (replaying the offsets log at start-up), so the record
loop inlines the single-byte varint case and avoids per-field function calls.
``iter_record_tuples`` skips building dataclasses for callers that only need
(offset, timestamp, key, value).

``record_columns`` is the columnar variant for bulk readers (the offsets audit): it walks
many batches of one buffer at once with numpy and returns positions of keys and values
instead of copies.  Record boundaries are found in lockstep -- step k reads the k-th record
of every batch -- so the number of numpy steps is the longest batch's record count, not the
number of records; the last few long batches are finished by a plain loop.  Any batch that
is compressed or not perfectly regular goes through ``iter_record_tuples`` instead, so both
agree on every input.  numpy is imported only there: the server does not depend on it.
"""

from __future__ import annotations

import functools
import gzip
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import crc32c as _crc32c

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_LOG_APPEND_TIME",
    "ATTR_TRANSACTIONAL",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "BatchHeader",
    "CorruptBatchError",
    "Record",
    "RecordColumns",
    "UnsupportedCompressionError",
    "decode_records",
    "encode_batch",
    "iter_batches",
    "iter_record_tuples",
    "key_ids",
    "parse_header",
    "record_columns",
    "set_base_offset",
    "verify_crc",
]

# base_offset, batch_length, partition_leader_epoch, magic, crc, attributes,
# last_offset_delta, base_timestamp, max_timestamp, producer_id,
# producer_epoch, base_sequence, records_count
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
# base_offset + batch_length: the part of a batch not counted in batch_length.
LOG_OVERHEAD = 12
_CRC_START = 21  # attributes onwards are covered by the CRC
_CRC_POS = 17
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_ATTR_POS = 21
_BASE_TIMESTAMP_POS = 27
_RECORDS_COUNT_POS = 57

ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
# KIP-534: base_timestamp carries the tombstone delete horizon once the
# cleaner has processed the batch.
ATTR_DELETE_HORIZON = 0x40

_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")

_crc = _crc32c.crc32c


class CorruptBatchError(ValueError):
    """The bytes cannot be a valid v2 batch (bad magic, length or CRC)."""


class UnsupportedCompressionError(ValueError):
    """The batch uses a codec this module cannot decompress."""


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a batch; offsets and timestamps relative to the batch."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.attributes & ATTR_DELETE_HORIZON else None


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``pos``; raise CorruptBatchError if implausible."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptBatchError(f"need {HEADER_SIZE} bytes for a batch header at {pos}")
    h = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if h.magic != 2:
        raise CorruptBatchError(f"unsupported magic {h.magic} at position {pos}")
    if h.batch_length < _MIN_BATCH_LENGTH:
        raise CorruptBatchError(f"batch length {h.batch_length} too small at position {pos}")
    return h


def iter_batches(
    buf: bytes | bytearray | memoryview, pos: int = 0
) -> Iterator[tuple[BatchHeader, int, int]]:
    """Yield (header, start, end) per complete batch; stop quietly at a partial tail.

    A header that cannot be valid (wrong magic, too short) raises
    CorruptBatchError: that is damage, not a tail still being written.
    """
    n = len(buf)
    unpack = _HEADER.unpack_from
    while n - pos >= HEADER_SIZE:
        fields = unpack(buf, pos)
        length = fields[1]
        if fields[3] != 2 or length < _MIN_BATCH_LENGTH:
            raise CorruptBatchError(
                f"bad batch at position {pos}: magic={fields[3]} length={length}"
            )
        end = pos + LOG_OVERHEAD + length
        if end > n:
            return
        yield BatchHeader(*fields), pos, end
        pos = end


def verify_crc(buf: bytes | bytearray | memoryview, start: int, end: int) -> bool:
    if end - start < HEADER_SIZE:
        return False
    (stored,) = _U32.unpack_from(buf, start + _CRC_POS)
    return bool(_crc(memoryview(buf)[start + _CRC_START : end]) == stored)


def set_base_offset(batch: bytes | bytearray | memoryview, base_offset: int) -> bytes:
    """Return the batch with ``base_offset`` replaced; the CRC stays valid."""
    return _I64.pack(base_offset) + bytes(memoryview(batch)[8:])


# ---------------------------------------------------------------- encoding


def _zigzag_varint(value: int) -> bytes:
    v = (value << 1) ^ (value >> 63)
    if v < 0x80:
        return bytes((v,))
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_SMALL_VARINT = [_zigzag_varint(i) for i in range(-1, 64)]


def _varint(value: int) -> bytes:
    if -1 <= value < 64:
        return _SMALL_VARINT[value + 1]
    return _zigzag_varint(value)


def _encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
) -> None:
    body = bytearray(b"\x00")  # record attributes: unused in v2
    body += _varint(timestamp_delta)
    body += _varint(offset_delta)
    if key is None:
        body += b"\x01"  # zigzag(-1)
    else:
        body += _varint(len(key))
        body += key
    if value is None:
        body += b"\x01"
    else:
        body += _varint(len(value))
        body += value
    body += _varint(len(headers))
    for hkey, hval in headers:
        hk = hkey.encode()
        body += _varint(len(hk))
        body += hk
        if hval is None:
            body += b"\x01"
        else:
            body += _varint(len(hval))
            body += hval
    out += _varint(len(body))
    out += body


def encode_batch(
    base_offset: int,
    records: Sequence[tuple[bytes | None, bytes | None]] | Sequence[Record],
    *,
    timestamp_ms: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    attributes: int = 0,
) -> bytes:
    """Build an uncompressed v2 batch.

    ``records`` are either (key, value) pairs, which get consecutive offset
    deltas and the batch timestamp, or Record objects used as given.
    ``timestamp_ms`` is the batch base timestamp.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    if attributes & ATTR_COMPRESSION_MASK:
        raise UnsupportedCompressionError("encode_batch only writes uncompressed batches")
    body = bytearray()
    max_delta = 0
    last_offset_delta = 0
    for i, rec in enumerate(records):
        if isinstance(rec, Record):
            _encode_record(
                body, rec.offset_delta, rec.timestamp_delta, rec.key, rec.value, rec.headers
            )
            if i == 0 or rec.timestamp_delta > max_delta:
                max_delta = rec.timestamp_delta
            last_offset_delta = rec.offset_delta
        else:
            pair: tuple[bytes | None, bytes | None] = rec  # type: ignore[assignment]
            _encode_record(body, i, 0, pair[0], pair[1], ())
            last_offset_delta = i
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(body)
    header = bytearray(
        _HEADER.pack(
            base_offset,
            batch_length,
            partition_leader_epoch,
            2,
            0,
            attributes,
            last_offset_delta,
            timestamp_ms,
            timestamp_ms + max_delta,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    )
    header += body
    crc = _crc(memoryview(header)[_CRC_START:])
    _U32.pack_into(header, _CRC_POS, crc)
    return bytes(header)


# ---------------------------------------------------------------- decoding


def _slow_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptBatchError("varint too long")


def _records_payload(batch: bytes | bytearray | memoryview) -> tuple[BatchHeader, bytes]:
    h = parse_header(batch, 0)
    end = h.size
    if len(batch) < end:
        raise CorruptBatchError(f"batch truncated: have {len(batch)} of {end} bytes")
    codec = h.compression
    if codec == 0:
        return h, bytes(batch[:end])
    if codec == 1:
        return h, bytes(batch[:HEADER_SIZE]) + gzip.decompress(bytes(batch[HEADER_SIZE:end]))
    names = {2: "snappy", 3: "lz4", 4: "zstd"}
    raise UnsupportedCompressionError(
        f"cannot decode {names.get(codec, str(codec))}-compressed batch at offset {h.base_offset}"
    )


def iter_record_tuples(
    batch: bytes | bytearray | memoryview,
) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """Yield (offset, timestamp, key, value) absolute values, headers skipped."""
    h, buf = _records_payload(batch)
    base_offset = h.base_offset
    base_ts = h.base_timestamp
    pos = HEADER_SIZE
    slow = _slow_varint
    try:
        for _ in range(h.records_count):
            b = buf[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                # Two-byte lengths (64..8191-byte records) are the common case.
                v = (b & 0x7F) | (buf[pos + 1] << 7)
                length = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                length, pos = slow(buf, pos)
            rec_end = pos + length
            pos += 1  # attributes
            b = buf[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = slow(buf, pos)
            b = buf[pos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                off_delta, pos = slow(buf, pos)
            b = buf[pos]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                klen, pos = slow(buf, pos)
            if klen < 0:
                key = None
            else:
                key = buf[pos : pos + klen]
                pos += klen
            b = buf[pos]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                vlen, pos = slow(buf, pos)
            value = None if vlen < 0 else buf[pos : pos + vlen]
            yield base_offset + off_delta, base_ts + ts_delta, key, value
            pos = rec_end
    except IndexError:
        raise CorruptBatchError(f"record data truncated in batch at {base_offset}") from None


def decode_records(batch: bytes | bytearray | memoryview) -> list[Record]:
    """Decode every record of an uncompressed (or gzip) batch."""
    h, buf = _records_payload(batch)
    pos = HEADER_SIZE
    slow = _slow_varint
    out: list[Record] = []
    append = out.append
    try:
        for _ in range(h.records_count):
            b = buf[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                # Two-byte lengths (64..8191-byte records) are the common case.
                v = (b & 0x7F) | (buf[pos + 1] << 7)
                length = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                length, pos = slow(buf, pos)
            rec_end = pos + length
            pos += 1
            b = buf[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = slow(buf, pos)
            b = buf[pos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                off_delta, pos = slow(buf, pos)
            b = buf[pos]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                klen, pos = slow(buf, pos)
            if klen < 0:
                key = None
            else:
                key = buf[pos : pos + klen]
                pos += klen
            b = buf[pos]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                vlen, pos = slow(buf, pos)
            if vlen < 0:
                value = None
            else:
                value = buf[pos : pos + vlen]
                pos += vlen
            b = buf[pos]
            if b == 0:
                headers: tuple[tuple[str, bytes | None], ...] = ()
                pos += 1
            else:
                nh, pos = slow(buf, pos)
                hl: list[tuple[str, bytes | None]] = []
                for _h in range(nh):
                    hklen, pos = slow(buf, pos)
                    hkey = buf[pos : pos + hklen].decode()
                    pos += hklen
                    hvlen, pos = slow(buf, pos)
                    if hvlen < 0:
                        hl.append((hkey, None))
                    else:
                        hl.append((hkey, buf[pos : pos + hvlen]))
                        pos += hvlen
                headers = tuple(hl)
            if pos != rec_end:
                raise CorruptBatchError(
                    f"record length mismatch in batch at {h.base_offset}: {pos} != {rec_end}"
                )
            append(Record(off_delta, ts_delta, key, value, headers))
    except IndexError:
        raise CorruptBatchError(f"record data truncated in batch at {h.base_offset}") from None
    return out


# ---------------------------------------------------------------- columnar decoding

# Below this many batches still being walked, one numpy step costs more than reading their
# records one at a time.
_LOCKSTEP_MIN = 64
# numpy decodes varints of up to 5 bytes (35 bits, far inside int64).  Longer ones are legal
# but never needed for the lengths and deltas of a sane batch: their batch is read by
# ``iter_record_tuples`` instead.
_NP_VARINT_SHIFT = 35
# Bases this far from zero could overflow int64 once a 35-bit delta is added.
_NP_BASE_LIMIT = 1 << 62
# _WORD_MASK[n] keeps the first n bytes of a little-endian 8-byte word.
_WORD_MASK = [(1 << (8 * n)) - 1 for n in range(9)]
_FINGERPRINT_MUL = 0x9E3779B97F4A7C15  # odd, well mixed (2**64 / golden ratio)


class RecordColumns(NamedTuple):
    """Records of many batches as parallel numpy arrays, in file order (``record_columns``)."""

    data: bytes  # what key_start / value_start index: the buffer, plus any decompressed records
    batch: NDArray[np.int64]  # the record's batch, as an index into the spans passed in
    offset: NDArray[np.int64]
    timestamp: NDArray[np.int64]
    key_start: NDArray[np.int64]
    key_len: NDArray[np.int64]  # -1: null key
    value_start: NDArray[np.int64]
    value_len: NDArray[np.int64]  # -1: null value (a tombstone)


BatchError = CorruptBatchError | UnsupportedCompressionError


@functools.cache
def _zigzag_table() -> NDArray[np.int64]:
    """The value of each one-byte varint, by its byte (entries >= 0x80 are unused)."""
    import numpy as np

    return np.array([(b >> 1) ^ -(b & 1) for b in range(256)], np.int64)


def _int_view(buf: bytes, dtype: str) -> NDArray[Any]:
    """Every byte offset of ``buf`` viewed as the start of an (unaligned) integer of
    ``dtype`` (">i4": big-endian int32), for gathers at arbitrary positions."""
    import numpy as np

    size = int(dtype[-1])
    return np.ndarray((max(len(buf) - size + 1, 0),), dtype, buf, strides=(1,))


def _np_varints(
    u8: NDArray[np.uint8], pos: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Zigzag varints at ``pos``: (values, positions after them, indices of those longer
    than 5 bytes).  Reads past the end of ``u8`` see its last byte; callers reject such
    records because the positions after them lie past the end of their batch.
    """
    import numpy as np

    b = u8[np.minimum(pos, len(u8) - 1)]
    cont = np.flatnonzero(b >= 0x80)
    if not cont.size:  # all one byte, the usual case
        return _zigzag_table()[b], pos + 1, cont
    raw = (b & 0x7F).astype(np.int64)
    after = pos + 1
    shift = 7
    while cont.size and shift < _NP_VARINT_SHIFT:
        b = u8[np.minimum(after[cont], len(u8) - 1)]
        raw[cont] |= (b & 0x7F).astype(np.int64) << shift
        after[cont] += 1
        cont = cont[b >= 0x80]
        shift += 7
    return (raw >> 1) ^ -(raw & 1), after, cont


def _record_bodies(
    buf: bytes,
    u8: NDArray[np.uint8],
    first: NDArray[np.int64],
    end: NDArray[np.int64],
    count: NDArray[np.int64],
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Where each record's body (after its length) starts, batch after batch; and which
    batches are broken (a record length that is negative, too long or past the batch end).

    ``first`` is where each batch's first record starts.  Record k of every batch is read in
    the same numpy step; once fewer than _LOCKSTEP_MIN batches are left, a loop finishes them.
    """
    import numpy as np

    out_at = np.zeros(len(count), np.int64)  # index of each batch's first record in the output
    np.cumsum(count[:-1], out=out_at[1:])
    body = np.zeros(int(count.sum()), np.int64)
    broken = np.zeros(len(count), np.bool_)
    live = np.flatnonzero(count > 0)
    pos = first[live]
    live_end, live_count, live_out = end[live], count[live], out_at[live]
    k = 0
    while live.size >= _LOCKSTEP_MIN:
        length, after, too_long = _np_varints(u8, pos)
        body[live_out + k] = after
        pos = after + length
        bad = (length < 0) | (pos > live_end)
        bad[too_long] = True
        k += 1
        more = ~bad & (live_count > k)
        if not more.all():
            broken[live[bad]] = True
            live, pos = live[more], pos[more]
            live_end, live_count, live_out = live_end[more], live_count[more], live_out[more]
    slow = _slow_varint
    for i, p in zip(live.tolist(), pos.tolist(), strict=True):
        e = int(end[i])
        starts: list[int] = []
        try:
            for _ in range(k, int(count[i])):
                b = buf[p]
                if b < 0x80:
                    size = (b >> 1) ^ -(b & 1)
                    p += 1
                else:
                    size, p = slow(buf, p)
                if size < 0 or p + size > e:
                    raise CorruptBatchError
                starts.append(p)
                p += size
        except (IndexError, CorruptBatchError):
            broken[i] = True
            continue
        at = int(out_at[i]) + k
        body[at : at + len(starts)] = starts
    return body, broken


def record_columns(
    buf: bytes, spans: Sequence[tuple[int, int]]
) -> tuple[RecordColumns, list[tuple[int, BatchError]]]:
    """The records of the batches ``buf[start:end]`` for (start, end) in ``spans``, in order.

    The same records as ``iter_record_tuples`` gives for each span (headers skipped).  Spans
    must be whole batches, as ``iter_batches`` yields them; CRCs are not checked here.  A
    batch whose records cannot be read contributes none: it is returned with its error,
    as (index in ``spans``, error).
    """
    import numpy as np

    u8 = np.frombuffer(buf, np.uint8)
    span = np.array(spans, np.int64).reshape(-1, 2)
    start, end = span[:, 0], span[:, 1]
    attributes = _int_view(buf, ">i2")[start + _ATTR_POS]
    count = _int_view(buf, ">i4")[start + _RECORDS_COUNT_POS].astype(np.int64)
    base_offset = _int_view(buf, ">i8")[start].astype(np.int64)
    base_ts = _int_view(buf, ">i8")[start + _BASE_TIMESTAMP_POS].astype(np.int64)
    # What numpy walks: uncompressed, a plausible record count (each record takes at least
    # a byte), and bases that leave room for the deltas.
    walk = (
        ((attributes & ATTR_COMPRESSION_MASK) == 0)
        & (count >= 0)
        & (count <= end - start - HEADER_SIZE)
        & (base_offset > -_NP_BASE_LIMIT)
        & (base_offset < _NP_BASE_LIMIT)
        & (base_ts > -_NP_BASE_LIMIT)
        & (base_ts < _NP_BASE_LIMIT)
    )
    fast = np.flatnonzero(walk)
    count, end = count[fast], end[fast]
    body, broken = _record_bodies(buf, u8, start[fast] + HEADER_SIZE, end, count)

    # Every field of every record at once; a record that reads past its batch (or has a
    # varint numpy does not take) marks its batch for the scalar path.
    rec_fast = np.repeat(np.arange(len(fast)), count)
    ts_delta, p, long1 = _np_varints(u8, body + 1)  # + 1: record attributes
    off_delta, p, long2 = _np_varints(u8, p)
    key_len, key_start, long3 = _np_varints(u8, p)
    key_len = np.maximum(key_len, -1)
    value_len, value_start, long4 = _np_varints(u8, key_start + np.maximum(key_len, 0))
    value_len = np.maximum(value_len, -1)
    past_end = value_start + np.maximum(value_len, 0) > end[rec_fast]
    for bad in (long1, long2, long3, long4, np.flatnonzero(past_end)):
        broken[rec_fast[bad]] = True
    cols = [
        fast[rec_fast],
        base_offset[fast][rec_fast] + off_delta,
        base_ts[fast][rec_fast] + ts_delta,
        key_start,
        key_len,
        value_start,
        value_len,
    ]
    if broken.any():
        ok = ~broken[rec_fast]
        cols = [c[ok] for c in cols]

    # Everything else, record by record; keys and values are appended after the buffer.
    slow = np.union1d(np.flatnonzero(~walk), fast[broken]).tolist()
    errors: list[tuple[int, BatchError]] = []
    extra = bytearray()
    slow_cols: list[list[int]] = [[] for _ in cols]
    for i in slow:
        try:
            tuples = list(iter_record_tuples(buf[spans[i][0] : spans[i][1]]))
        except (CorruptBatchError, UnsupportedCompressionError) as e:
            errors.append((i, e))
            continue
        for offset, ts, key, value in tuples:
            row = [i, offset, ts, -1, -1, -1, -1]
            if key is not None:
                row[3:5] = len(buf) + len(extra), len(key)
                extra += key
            if value is not None:
                row[5:7] = len(buf) + len(extra), len(value)
                extra += value
            for col, v in zip(slow_cols, row, strict=True):
                col.append(v)
    data = buf
    if slow_cols[0]:
        data = buf + bytes(extra)
        merged = [
            np.concatenate((c, np.array(s, np.int64))) for c, s in zip(cols, slow_cols, strict=True)
        ]
        order = np.argsort(merged[0], kind="stable")
        cols = [c[order] for c in merged]
    return RecordColumns(data, *cols), errors


def _words(data: bytes, pos: NDArray[np.int64]) -> NDArray[np.uint64]:
    """The 8 bytes at each ``pos`` as a little-endian uint64; bytes past the end read as 0.

    ``data`` holds at least a batch (61 bytes) whenever there are keys to read.
    """
    import numpy as np

    words: NDArray[np.uint64] = _int_view(data, "<u8")
    last = len(words) - 1
    if not pos.size or pos.max() <= last:
        return words[pos]
    at = np.minimum(pos, last)  # near the end: read the last word, shift the extra bytes out
    shifted: NDArray[np.uint64] = words[at] >> (np.minimum(pos - at, 7) * 8).astype(np.uint64)
    return shifted


def key_ids(cols: RecordColumns) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Number the records' distinct keys in order of first appearance.

    Returns each record's key id (-1 for a null key) and, per id, the index of the first
    record with that key.  Keys are grouped by a 64-bit fingerprint of their length and
    8-byte words; then every record's words are compared with its id's first record, so a
    fingerprint collision cannot merge two keys (it falls back to a dict of bytes).
    """
    import numpy as np

    ids = np.full(len(cols.key_len), -1, np.int64)
    rows = np.flatnonzero(cols.key_len >= 0)
    if not rows.size:
        return ids, np.zeros(0, np.int64)
    start = cols.key_start[rows]
    length = cols.key_len[rows]
    # Word j of a key is read at min(8j, length - 8): the last word is the key's last 8
    # bytes (overlapping the one before), so no masking is needed and, with the length,
    # equal words mean equal keys.  Keys under 8 bytes are read from their start and masked.
    short = np.flatnonzero(length < 8)
    shortest = int(length.min())
    mul = np.uint64(_FINGERPRINT_MUL)
    h = length.astype(np.uint64) * mul
    words: list[NDArray[np.uint64]] = []
    for at in range(0, int(length.max()), 8):
        w = _words(cols.data, start + (at if shortest >= at + 8 else np.minimum(at, length - 8)))
        if short.size:
            mask = np.array(_WORD_MASK, np.uint64)[length[short]]
            w[short] = _words(cols.data, start[short]) & mask
        words.append(w)
        h = (h ^ w) * mul
        h ^= h >> np.uint64(32)  # so high bits reach the low ones the next product mixes

    perm = np.argsort(h)
    sh = h[perm]
    new_run = np.concatenate(([True], sh[1:] != sh[:-1]))
    run_start = np.flatnonzero(new_run)
    run_first = np.minimum.reduceat(perm, run_start)  # first record of each fingerprint
    new_id = np.empty(len(run_first), np.int64)
    new_id[np.argsort(run_first)] = np.arange(len(run_first))
    run_id = np.empty(len(h), np.int64)
    run_id[perm] = new_id[np.cumsum(new_run) - 1]
    firsts = np.sort(run_first)
    rep = firsts[run_id]
    same = bool((length == length[rep]).all()) and all(bool((w == w[rep]).all()) for w in words)
    if same:
        ids[rows] = run_id
        return ids, rows[firsts]
    seen: dict[bytes, int] = {}
    first_rows: list[int] = []
    data = cols.data
    for r, s, n in zip(rows.tolist(), start.tolist(), length.tolist(), strict=True):
        kid = seen.setdefault(data[s : s + n], len(seen))
        if kid == len(first_rows):
            first_rows.append(r)
        ids[r] = kid
    return ids, np.array(first_rows, np.int64)
