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

Compressed batches (attributes bits 0-2: 1 gzip, 2 snappy, 3 lz4, 4 zstd) hold the
records after the header compressed as one stream; ``_records_payload`` decompresses them
with cramjam before the record loop, so compaction, the time index, ListOffsets and the
audit read batches of any client.  Kafka's formats: gzip is one or more gzip members; lz4
is the LZ4 frame format; zstd is zstd frames; snappy is either xerial's block framing (what
Kafka's Java clients write: an 8-byte magic, two int32 versions, then int32-length-prefixed
raw snappy blocks) or one raw snappy block (what librdkafka writes).  A batch may expand to
at most ``MAX_DECOMPRESSED_BYTES`` (a bound against decompression bombs: Kafka streams
records out of a batch, kgc holds one batch's records in memory); a larger one is reported
as ``UnsupportedCompressionError``, compressed bytes that do not decode as
``CorruptCompressionError`` (both a corrupt batch and an unsupported one), and callers
treat either as a batch they cannot look inside.

The offsets audit reads many batches at once with its own columnar decoder
(``coordinator.audit.columns``); it builds on what is public here (``iter_record_tuples`` for
any batch it does not walk itself, ``read_varint`` and the header field positions), so both
agree on every input, while ``storage`` keeps to the server's own dependencies.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TypeVar

import cramjam
import crc32c as _crc32c
import xxhash

__all__ = [
    "ATTRIBUTES_POS",
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_LOG_APPEND_TIME",
    "ATTR_TRANSACTIONAL",
    "BASE_TIMESTAMP_POS",
    "CODEC_NAMES",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "LZ4_MAGIC",
    "MAX_DECOMPRESSED_BYTES",
    "RECORDS_COUNT_POS",
    "BatchHeader",
    "CorruptBatchError",
    "CorruptCompressionError",
    "Record",
    "UnsupportedCompressionError",
    "decode_records",
    "decompress_records",
    "encode_batch",
    "encode_timed_values",
    "iter_batches",
    "iter_record_tuples",
    "key_values",
    "lz4_frame",
    "lz4_header_checksum",
    "parse_header",
    "read_varint",
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
# Where header fields are, from the batch's start (as Kafka's DefaultRecordBatch names them).
ATTRIBUTES_POS = 21
BASE_TIMESTAMP_POS = 27
RECORDS_COUNT_POS = 57

ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
# KIP-534: base_timestamp carries the tombstone delete horizon once the
# cleaner has processed the batch.
ATTR_DELETE_HORIZON = 0x40

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_EPOCH_POS = 12  # partition_leader_epoch, after base_offset and batch_length

_crc = _crc32c.crc32c


_C = TypeVar("_C", bound=type)


def _python_class(cls: _C) -> _C:
    """Keeps a class a plain Python class in the optional mypyc build (setup.py).

    mypyc compiles a class with any decorator it does not know as an ordinary class; the
    errors below need that: a native class has one base, and a plain class (two bases)
    cannot derive from a native one.
    """
    return cls


@_python_class
class CorruptBatchError(ValueError):
    """The bytes cannot be a valid v2 batch (bad magic, length or CRC)."""


@_python_class
class UnsupportedCompressionError(ValueError):
    """The batch uses a codec this module cannot decompress."""


@_python_class
class CorruptCompressionError(CorruptBatchError, UnsupportedCompressionError):
    """The batch's compressed records do not decompress.

    Corrupt, and, to callers that keep what they cannot read (the cleaner copies such a
    batch as it is), unreadable like a batch of an unknown codec: its CRC covers the
    compressed bytes, so a producer can store it, and it must not stop compaction.
    """


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


def set_base_offset(
    batch: bytes | bytearray | memoryview, base_offset: int, leader_epoch: int | None = None
) -> bytes:
    """Return the batch with ``base_offset`` replaced, and ``partition_leader_epoch`` when
    ``leader_epoch`` is given (what a leader stamps on append); the CRC stays valid."""
    view = memoryview(batch)
    if leader_epoch is None:
        return _I64.pack(base_offset) + bytes(view[8:])
    return b"".join(
        (
            _I64.pack(base_offset),
            view[8:_EPOCH_POS],
            _I32.pack(leader_epoch),
            view[_EPOCH_POS + 4 :],
        )
    )


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
    if type(records[0]) is tuple:
        batch = _encode_pairs(
            base_offset,
            records,  # type: ignore[arg-type]
            timestamp_ms,
            producer_id,
            producer_epoch,
            base_sequence,
            partition_leader_epoch,
            attributes,
        )
        if batch is not None:
            return batch
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


_PREFIX = struct.Struct(">qiibI")  # the header up to and including the CRC
_TAIL = struct.Struct(">hiqqqhii")  # the rest of the header: what the CRC covers first


def _encode_pairs(
    base_offset: int,
    records: Sequence[tuple[bytes | None, bytes | None]],
    timestamp_ms: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    partition_leader_epoch: int,
    attributes: int,
) -> bytes | None:
    """``encode_batch`` of (key, value) pairs (the offsets log's and most appends): the same
    bytes, built as one list of parts joined once, the CRC run over the header's tail and
    then the body (crc32c continues), so nothing is copied to be checksummed."""
    parts: list[bytes] = []
    append = parts.append
    varint = _varint
    size = 0
    i = -1
    for i, rec in enumerate(records):
        if type(rec) is not tuple:
            return None  # a Record among the pairs: the general encoder takes them all
        key, value = rec
        at = len(parts)
        append(b"")  # the record's length, known below
        delta = varint(i)
        append(b"\x00\x00")  # attributes 0, timestamp delta 0 (zigzag)
        append(delta)
        n = 3 + len(delta)  # those, the offset delta and the header count
        if key is None:
            append(b"\x01")  # zigzag(-1)
            n += 1
        else:
            kl = varint(len(key))
            append(kl)
            append(key)
            n += len(kl) + len(key)
        if value is None:
            append(b"\x01")
            n += 1
        else:
            vl = varint(len(value))
            append(vl)
            append(value)
            n += len(vl) + len(value)
        append(b"\x00")  # no headers
        head = parts[at] = varint(n)
        size += len(head) + n
    body = b"".join(parts)
    tail = _TAIL.pack(
        attributes,
        i,
        timestamp_ms,
        timestamp_ms,
        producer_id,
        producer_epoch,
        base_sequence,
        i + 1,
    )
    crc = _crc(body, _crc(tail))
    batch_length = HEADER_SIZE - LOG_OVERHEAD + size
    return b"".join(
        (_PREFIX.pack(base_offset, batch_length, partition_leader_epoch, 2, crc), tail, body)
    )


_TIMED_VARINTS: list[bytes] = []  # zigzag varints of 0..8191, built on first use


def encode_timed_values(
    base_offset: int, values: Sequence[tuple[int, bytes]], lz4: bool = False
) -> bytes:
    """A v2 batch of ``values`` ((timestamp, value) pairs, null keys, no headers) at
    consecutive offsets from ``base_offset``, each record with its own time (the delta from
    the first's; the batch's max timestamp is the latest): many appends' values stored as
    one batch later (the group history's carried values). Uncompressed, the same bytes as
    ``encode_batch`` of the matching Records, at a fraction of its steps a record (their
    lengths and deltas, mostly under 8192, are looked up, not computed); with ``lz4`` the
    records compressed as Kafka's lz4 codec does (``lz4_frame``)."""
    table = _TIMED_VARINTS
    if not table:
        table += [_zigzag_varint(i) for i in range(8192)]
    parts: list[bytes] = []
    append = parts.append
    join = b"".join
    size = 0
    first = values[0][0]
    latest = first
    i = -1
    for i, (ts, value) in enumerate(values):
        if ts > latest:
            latest = ts
        d = ts - first
        v = len(value)
        head = join(
            (
                b"\x00",
                table[d] if 0 <= d < 8192 else _zigzag_varint(d),
                table[i] if i < 8192 else _zigzag_varint(i),
                b"\x01",
                table[v] if v < 8192 else _zigzag_varint(v),
            )
        )
        n = len(head) + v + 1
        length = table[n] if n < 8192 else _zigzag_varint(n)
        append(length)
        append(head)
        append(value)
        append(b"\x00")  # no headers
        size += len(length) + n
    body = join(parts)
    attributes = 0
    if lz4:
        body = lz4_frame(body)
        size = len(body)
        attributes = _CODEC_LZ4
    tail = _TAIL.pack(attributes, i, first, latest, -1, -1, -1, i + 1)
    crc = _crc(body, _crc(tail))
    batch_length = HEADER_SIZE - LOG_OVERHEAD + size
    return join((_PREFIX.pack(base_offset, batch_length, -1, 2, crc), tail, body))


# An LZ4 frame (the lz4 frame format, Kafka's lz4 codec since magic 1): magic, a descriptor
# (FLG: version 01, independent blocks, no checksums or content size; BD: the largest block)
# and its checksum (the second byte of its xxHash32), each block's length (the top bit set:
# stored as is) and bytes, then an end mark.
LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG = 0x60
_LZ4_BD = {64 << 10: 0x40, 256 << 10: 0x50, 1 << 20: 0x60, 4 << 20: 0x70}
_LZ4_STORED = 0x80000000
_U32LE = struct.Struct("<I")
_CODEC_LZ4 = 3  # CODEC_NAMES


def lz4_header_checksum(descriptor: bytes) -> int:
    return (xxhash.xxh32_intdigest(descriptor) >> 8) & 0xFF


def lz4_frame(data: bytes, *, block_max: int = 4 << 20, broken_checksum: bool = False) -> bytes:
    """``data`` as an LZ4 frame of blocks of at most ``block_max`` bytes (64 KiB, 256 KiB,
    1 MiB or 4 MiB), each compressed alone: what Kafka's readers and ``decompress_records``
    read. Kafka's Java writer (KafkaLZ4BlockOutputStream) uses 64 KiB blocks; the default, one
    block up to 4 MiB, is one LZ4 call for a history batch. ``broken_checksum``: the header
    checksum over the magic number too, as magic 0 message sets had it (KAFKA-3160)."""
    head = LZ4_MAGIC + bytes((_LZ4_FLG, _LZ4_BD[block_max]))
    parts = [head, bytes((lz4_header_checksum(head if broken_checksum else head[4:]),))]
    for at in range(0, len(data), block_max):
        chunk = data[at : at + block_max]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) < len(chunk):
            parts += (_U32LE.pack(len(block)), block)
        else:
            parts += (_U32LE.pack(len(chunk) | _LZ4_STORED), chunk)
    parts.append(b"\x00\x00\x00\x00")  # end mark
    return b"".join(parts)


# ---------------------------------------------------------------- decoding


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint at ``pos`` and the position after it (any length up to 64 bits)."""
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


# Kafka's compression type ids (CompressionType.java).
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
# The most one batch's records may take decompressed.  Kafka has no such limit because it
# streams records out of a compressed batch; kgc decompresses a batch whole, and a few
# kilobytes of zstd or gzip can claim gigabytes.  256 MiB is far above what a batch of at
# most message.max.bytes compresses from in practice (ratios of 10-50 for text).
MAX_DECOMPRESSED_BYTES = 256 << 20
# xerial snappy-java's stream header (SnappyCodec.MAGIC_HEADER), then two int32 versions.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16
_STREAM_CODECS: dict[int, ModuleType] = {1: cramjam.gzip, 3: cramjam.lz4, 4: cramjam.zstd}
# cramjam's message when decompress_into's output buffer is full (Rust's io::WriteZero).
_BUFFER_FULL = "failed to write whole buffer"


def decompress_records(codec: int, data: bytes | bytearray | memoryview, where: int = 0) -> bytes:
    """The records of a batch compressed with ``codec`` (the bytes after its header).

    ``where`` (the batch's base offset) only names the batch in errors.
    """
    name = CODEC_NAMES.get(codec, str(codec))
    try:
        if codec == 2:
            return _snappy(data, name, where)
        module = _STREAM_CODECS.get(codec)
        if module is None:
            raise UnsupportedCompressionError(
                f"cannot decode {name}-compressed batch at offset {where}"
            )
        # Decompress into a bounded buffer, growing it while it is too small: the bound
        # holds without trusting sizes the stream declares.
        size = min(MAX_DECOMPRESSED_BYTES, 8 * len(data) + 4096)
        while True:
            out = bytearray(size)
            try:
                n = module.decompress_into(data, out)
            except cramjam.DecompressionError as exc:
                if _BUFFER_FULL not in str(exc):
                    raise
                if size >= MAX_DECOMPRESSED_BYTES:
                    raise _too_large(name, where) from None
                size = min(MAX_DECOMPRESSED_BYTES, size * 4)
                continue
            del out[n:]
            return bytes(out)
    except cramjam.DecompressionError as exc:
        raise CorruptCompressionError(
            f"cannot decompress {name}-compressed batch at offset {where}: {exc}"
        ) from None


def _snappy(data: bytes | bytearray | memoryview, name: str, where: int) -> bytes:
    """Kafka's snappy: xerial's framing (Java clients) or one raw block (librdkafka)."""
    view = memoryview(data)
    if bytes(view[: len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
        if cramjam.snappy.decompress_raw_len(view) > MAX_DECOMPRESSED_BYTES:
            raise _too_large(name, where)
        return bytes(cramjam.snappy.decompress_raw(view))
    blocks = []
    total = 0
    pos = _XERIAL_HEADER_SIZE
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptCompressionError(
                f"truncated snappy block length in batch at offset {where}"
            )
        (length,) = _U32.unpack_from(view, pos)
        block = view[pos + 4 : pos + 4 + length]
        if len(block) != length:
            raise CorruptCompressionError(f"truncated snappy block in batch at offset {where}")
        total += cramjam.snappy.decompress_raw_len(block)
        if total > MAX_DECOMPRESSED_BYTES:
            raise _too_large(name, where)
        blocks.append(cramjam.snappy.decompress_raw(block))
        pos += 4 + length
    return b"".join(bytes(b) for b in blocks)


def _too_large(name: str, where: int) -> UnsupportedCompressionError:
    return UnsupportedCompressionError(
        f"cannot decode {name}-compressed batch at offset {where}: its records take more "
        f"than {MAX_DECOMPRESSED_BYTES} bytes decompressed"
    )


def _records_payload(batch: bytes | bytearray | memoryview) -> tuple[BatchHeader, bytes]:
    h = parse_header(batch, 0)
    end = h.size
    if len(batch) < end:
        raise CorruptBatchError(f"batch truncated: have {len(batch)} of {end} bytes")
    codec = h.compression
    if codec == 0:
        return h, bytes(batch[:end])
    records = decompress_records(codec, memoryview(batch)[HEADER_SIZE:end], h.base_offset)
    return h, bytes(batch[:HEADER_SIZE]) + records


def iter_record_tuples(
    batch: bytes | bytearray | memoryview,
) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """Yield (offset, timestamp, key, value) absolute values, headers skipped."""
    h, buf = _records_payload(batch)
    base_offset = h.base_offset
    base_ts = h.base_timestamp
    pos = HEADER_SIZE
    slow = read_varint
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


def key_values(batch: bytes | bytearray | memoryview) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record of a batch, in order; offsets, timestamps and headers
    skipped.

    What a replay of the offsets log needs, as one list per batch: no generator frame per
    record and no absolute offset or timestamp computed. Reads exactly what
    ``iter_record_tuples`` reads, with the same errors (``CorruptBatchError`` for records
    running past the batch), so both agree on every batch.
    """
    h, buf = _records_payload(batch)
    pos = HEADER_SIZE
    slow = read_varint
    out: list[tuple[bytes | None, bytes | None]] = []
    append = out.append
    try:
        for _ in range(h.records_count):
            b = buf[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                v = (b & 0x7F) | (buf[pos + 1] << 7)
                length = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                length, pos = slow(buf, pos)
            rec_end = pos + length
            # attributes (1 byte), then the timestamp and offset deltas: read only to skip
            # them (a one-byte varint is the usual case for both).
            if buf[pos + 1] < 0x80:
                pos += 2
            else:
                _, pos = slow(buf, pos + 1)
            if buf[pos] < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:  # offset deltas 64..8191
                pos += 2
            else:
                _, pos = slow(buf, pos)
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
            append((key, None if vlen < 0 else buf[pos : pos + vlen]))
            pos = rec_end
    except IndexError:
        raise CorruptBatchError(f"record data truncated in batch at {h.base_offset}") from None
    return out


def decode_records(batch: bytes | bytearray | memoryview) -> list[Record]:
    """Decode every record of a batch, compressed or not."""
    h, buf = _records_payload(batch)
    pos = HEADER_SIZE
    slow = read_varint
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
