"""Magic 0/1 message sets to and from v2 batches, checked against kafka-python's own codec.

How this works: kafka-python 3.0.12 still carries an independent implementation of the
legacy format (``kafka.record.legacy_records``: builder and reader, gzip/snappy/lz4 with the
magic-0 LZ4 quirk); message sets it builds are up-converted here, and what
``down_convert`` writes must read back through it with valid CRCs, the right offsets,
timestamps, keys and values.
"""

from __future__ import annotations

import struct

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder  # type: ignore[import-untyped]
from kafka.record.memory_records import MemoryRecords  # type: ignore[import-untyped]

from coordinator.dataplane.legacy import (
    MessageSetError,
    compress_batch,
    down_convert,
    fetch_magic,
    iter_messages,
    offsets_before,
    up_convert,
)
from protocol.errors import ErrorCode
from storage.record_batch import (
    ATTR_LOG_APPEND_TIME,
    Record,
    decode_records,
    encode_batch,
    parse_header,
    set_base_offset,
    verify_crc,
)

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}
T0 = 1_700_000_000_000


def legacy_set(magic: int, codec: int, n: int = 3, base_offset: int = 0) -> bytes:
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i in range(n):
        # Old producers number the messages of a request 0.. (or not at all).
        b.append(base_offset + i, T0 + i, f"k{i}".encode(), f"value-{i}".encode() * 10)
    return bytes(b.build())


def read_back(data: bytes) -> list[tuple[int, int, int, bytes | None, bytes | None]]:
    """(magic, offset, timestamp, key, value) of every record kafka-python reads."""
    out = []
    mr = MemoryRecords(data)
    while True:
        batch = mr.next_batch()
        if batch is None:
            return out
        assert batch.validate_crc()
        for r in batch:
            assert r.validate_crc()
            out.append((batch.magic, r.offset, r.timestamp, r.key, r.value))


@pytest.mark.parametrize("codec", list(CODECS), ids=str)
@pytest.mark.parametrize("magic", [0, 1])
def test_up_convert_gives_one_v2_batch_with_the_producers_codec(magic: int, codec: str) -> None:
    batch = up_convert(legacy_set(magic, CODECS[codec]), log_append_time_topic=False)
    h = parse_header(batch)
    assert h.base_offset == 0 and h.magic == 2 and h.compression == CODECS[codec]
    assert h.records_count == 3 and h.last_offset_delta == 2
    assert h.producer_id == -1
    assert verify_crc(batch, 0, len(batch))
    recs = decode_records(batch)
    assert [(r.offset_delta, r.key, r.value) for r in recs] == [
        (i, f"k{i}".encode(), f"value-{i}".encode() * 10) for i in range(3)
    ]
    stamps = [h.base_timestamp + r.timestamp_delta for r in recs]
    if magic == 0:
        assert stamps == [-1, -1, -1] and h.max_timestamp == -1  # magic 0 has no timestamps
    else:
        assert stamps == [T0, T0 + 1, T0 + 2] and h.max_timestamp == T0 + 2
    # kafka-python reads the v2 batch too.
    assert [(m, o, k) for m, o, _, k, _ in read_back(batch)] == [
        (2, i, f"k{i}".encode()) for i in range(3)
    ]


def test_up_convert_rejects_what_kafka_rejects() -> None:
    good = legacy_set(1, 0)
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # last value byte of the last message: its CRC no longer matches
    with pytest.raises(MessageSetError) as e:
        up_convert(bytes(corrupt), False)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(MessageSetError) as e:
        up_convert(legacy_set(0, 0, 1) + legacy_set(1, 0, 1), False)
    assert e.value.code == ErrorCode.INVALID_RECORD  # magic changes within the set
    with pytest.raises(MessageSetError) as e:
        up_convert(legacy_set(1, 1) + legacy_set(1, 1), False)
    assert e.value.code == ErrorCode.INVALID_RECORD  # two compressed wrappers
    # Nothing complete: appended nothing, no error (Kafka's validBytes <= 0).
    assert up_convert(b"", False) == b""
    assert up_convert(good[:20], False) == b""
    # A trailing partial message is left out as Kafka's iterator leaves it.
    assert parse_header(up_convert(good + good[:30], False)).records_count == 3


def test_up_convert_refuses_producer_log_append_time_on_log_append_time_topic() -> None:
    one = bytearray(legacy_set(1, 0, 1))
    one[17] |= 0x08  # attributes of the message: LogAppendTime
    struct.pack_into(">I", one, 12, __import__("zlib").crc32(bytes(one[16:])))
    with pytest.raises(MessageSetError) as e:
        up_convert(bytes(one), log_append_time_topic=True)
    assert e.value.code == ErrorCode.INVALID_TIMESTAMP
    # On a CreateTime topic a timestamped message is accepted (its timestamp is checked).
    assert parse_header(up_convert(bytes(one), log_append_time_topic=False)).records_count == 1


def v2_batches(codec: int, *, append_time: bool = False) -> bytes:
    """Two stored batches at offsets 10-12 and 13-14 (with a header to be dropped)."""
    out = b""
    for base, n in ((10, 3), (13, 2)):
        recs = [
            Record(i, i, f"k{base + i}".encode(), f"v{base + i}".encode(), (("h", b"x"),))
            for i in range(n)
        ]
        b = encode_batch(0, recs, timestamp_ms=T0 + base)
        if codec:
            b = compress_batch(b, codec)
        if append_time:
            a = bytearray(b)
            struct.pack_into(">h", a, 21, struct.unpack_from(">h", a, 21)[0] | ATTR_LOG_APPEND_TIME)
            struct.pack_into(">q", a, 35, T0 + 999)
            b = bytes(a)
        out += set_base_offset(b, base)
    return out


@pytest.mark.parametrize("codec", list(CODECS), ids=str)
@pytest.mark.parametrize("magic", [0, 1])
def test_down_convert_reads_back_in_kafka_python(magic: int, codec: str) -> None:
    data = v2_batches(CODECS[codec])
    got = read_back(down_convert(data, magic, first_offset=10))
    want_ts = (lambda o: T0 + o) if magic else (lambda o: None)  # magic 0: no timestamp
    # offsets 10..14: batch base timestamps T0+10 / T0+13 plus deltas 0.. give T0 + offset
    assert got == [
        (magic, o, want_ts(o), f"k{o}".encode(), f"v{o}".encode()) for o in range(10, 15)
    ]
    if CODECS[codec]:
        # One wrapper per batch, with the batch's codec and the last offset.
        wrappers = list(iter_messages(down_convert(data, magic, 10)))
        assert [(w.offset, w.codec) for w in wrappers] == [(12, CODECS[codec]), (14, CODECS[codec])]


def test_down_convert_uncompressed_starts_at_the_fetch_offset() -> None:
    got = read_back(down_convert(v2_batches(0), 1, first_offset=11))
    assert [o for _, o, _, _, _ in got] == [11, 12, 13, 14]
    # A compressed batch goes whole, as Kafka sends it (the client skips what it did not ask).
    got = read_back(down_convert(v2_batches(1), 1, first_offset=11))
    assert [o for _, o, _, _, _ in got] == [10, 11, 12, 13, 14]


def test_down_convert_log_append_time() -> None:
    for codec in (0, 1):
        got = read_back(down_convert(v2_batches(codec, append_time=True), 1, 10))
        assert {ts for _, _, ts, _, _ in got} == {T0 + 999}
        first = next(iter_messages(down_convert(v2_batches(codec, append_time=True), 1, 10)))
        assert first.log_append_time


def test_down_convert_refuses_zstd() -> None:
    b = bytearray(encode_batch(0, [(b"k", b"v")], timestamp_ms=T0))
    struct.pack_into(">h", b, 21, 4)  # zstd: refused before its records are read
    with pytest.raises(MessageSetError) as e:
        down_convert(bytes(b), 1, 0)
    assert e.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_fetch_magic() -> None:
    assert [fetch_magic(v) for v in range(6)] == [0, 0, 1, 1, 2, 2]


def test_round_trip_old_producer_to_old_consumer() -> None:
    for magic in (0, 1):
        for codec in CODECS.values():
            stored = set_base_offset(up_convert(legacy_set(magic, codec, 4), False), 100)
            got = read_back(down_convert(stored, magic, 100))
            assert [(o, k, v) for _, o, _, k, v in got] == [
                (100 + i, f"k{i}".encode(), f"value-{i}".encode() * 10) for i in range(4)
            ]


def test_list_offsets_v0_offsets_before() -> None:
    """UnifiedLog.legacyFetchOffsetsBefore over segments (base, size, modified) at 0, 100, 200
    with log end 250, and Partition's high-watermark cut for consumers."""
    segs = [(0, 10, 1_000), (100, 10, 2_000), (200, 10, 3_000)]

    def before(ts: int, n: int, hw: int = 250, consumer: bool = True) -> list[int]:
        return offsets_before(segs, 0, 250, 9_000, ts, n, hw, consumer)

    assert before(-1, 1) == [250]  # latest: the log end
    assert before(-1, 10) == [250, 200, 100, 0]
    assert before(-2, 1) == [0]  # earliest: the log start
    assert before(-2, 10) == [0]
    assert before(2_500, 10) == [100, 0]  # segments modified at or before the time
    assert before(2_000, 1) == [100]
    assert before(999, 10) == []  # nothing that old
    assert before(-1, 10, hw=220) == [220, 200, 100, 0]  # never past the high watermark
    assert before(-1, 10, hw=220, consumer=False) == [250, 200, 100, 0]  # replicas see all
    # The log start cuts the first segment's base; an empty active segment is no point.
    assert offsets_before([(0, 10, 1_000), (100, 0, 2_000)], 40, 100, 9_000, -1, 5, 100, True) == [
        100,
        40,
    ]
