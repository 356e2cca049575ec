from __future__ import annotations

import dataclasses
import struct

import lz4.frame
import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.record_batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    CorruptBatchError,
    Record,
    UnsupportedCompressionError,
    decode_records,
    encode_batch,
    encode_timed_values,
    iter_batches,
    iter_record_tuples,
    lz4_frame,
    parse_header,
    set_base_offset,
    verify_crc,
)

opt_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=10), opt_bytes), max_size=3).map(tuple)


@st.composite
def record_lists(draw: st.DrawFn) -> list[Record]:
    n = draw(st.integers(1, 30))
    gaps = draw(st.lists(st.integers(1, 1000), min_size=n, max_size=n))
    deltas = []
    d = -1
    for g in gaps:
        d += g
        deltas.append(d)
    out = []
    for od in deltas:
        out.append(
            Record(
                offset_delta=od,
                timestamp_delta=draw(st.integers(-(2**40), 2**40)),
                key=draw(opt_bytes),
                value=draw(opt_bytes),
                headers=draw(headers),
            )
        )
    return out


def test_header_fields_and_properties() -> None:
    b = encode_batch(
        100,
        [(b"k1", b"v1"), (b"k2", None), (None, b"v3")],
        timestamp_ms=1_000,
        producer_id=7,
        producer_epoch=2,
        base_sequence=11,
        partition_leader_epoch=5,
        attributes=ATTR_TRANSACTIONAL,
    )
    h = parse_header(b)
    assert (h.base_offset, h.last_offset_delta, h.last_offset, h.records_count) == (100, 2, 102, 3)
    assert h.size == len(b) and h.batch_length == len(b) - 12
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 2, 11)
    assert h.partition_leader_epoch == 5 and h.magic == 2
    assert h.is_transactional and not h.is_control and h.compression == 0
    assert h.base_timestamp == h.max_timestamp == 1_000
    assert verify_crc(b, 0, len(b))


def test_roundtrip_pairs() -> None:
    pairs = [(b"a", b"1"), (None, b"2"), (b"c", None), (b"", b"")]
    b = encode_batch(0, pairs, timestamp_ms=5)
    recs = decode_records(b)
    assert [(r.key, r.value) for r in recs] == pairs
    assert [r.offset_delta for r in recs] == [0, 1, 2, 3]
    assert list(iter_record_tuples(b)) == [(i, 5, k, v) for i, (k, v) in enumerate(pairs)]


@settings(max_examples=60, deadline=None)
@given(recs=record_lists(), base=st.integers(0, 2**62), ts=st.integers(0, 2**41))
def test_roundtrip_hypothesis(recs: list[Record], base: int, ts: int) -> None:
    b = encode_batch(base, recs, timestamp_ms=ts)
    h = parse_header(b)
    assert decode_records(b) == recs
    assert h.last_offset == base + recs[-1].offset_delta
    assert h.max_timestamp == ts + max(r.timestamp_delta for r in recs)
    assert verify_crc(b, 0, len(b))
    tuples = list(iter_record_tuples(b))
    assert tuples == [(base + r.offset_delta, ts + r.timestamp_delta, r.key, r.value) for r in recs]


def test_set_base_offset_keeps_crc_valid() -> None:
    b = encode_batch(0, [(b"k", b"v")] * 3, timestamp_ms=1)
    moved = set_base_offset(bytearray(b), 12345)
    assert parse_header(moved).base_offset == 12345
    assert verify_crc(moved, 0, len(moved))
    assert moved[8:] == b[8:]


def test_crc_detects_any_flipped_byte_after_crc_field() -> None:
    b = encode_batch(0, [(b"key", b"value")], timestamp_ms=1)
    for i in range(21, len(b)):
        bad = bytearray(b)
        bad[i] ^= 0x01
        assert not verify_crc(bad, 0, len(bad)), i


def test_iter_batches_stops_at_partial_tail() -> None:
    b1 = encode_batch(0, [(b"a", b"1")], timestamp_ms=1)
    b2 = encode_batch(1, [(b"b", b"2"), (b"c", b"3")], timestamp_ms=2)
    buf = b1 + b2
    found = [(h.base_offset, s, e) for h, s, e in iter_batches(buf)]
    assert found == [(0, 0, len(b1)), (1, len(b1), len(buf))]
    for cut in range(len(b1), len(buf)):
        assert [h.base_offset for h, _, _ in iter_batches(buf[:cut])] == [0]
    assert next(iter_batches(memoryview(buf), len(b1)))[0].base_offset == 1


def test_iter_batches_rejects_bad_magic() -> None:
    b = bytearray(encode_batch(0, [(b"a", b"1")], timestamp_ms=1))
    b[16] = 1
    with pytest.raises(CorruptBatchError):
        list(iter_batches(bytes(b)))


def test_aiokafka_reads_our_batches() -> None:
    recs = [
        Record(0, 0, b"k0", b"v0", (("h1", b"x"), ("h2", None))),
        Record(1, 7, None, b"v1"),
        Record(2, 3, b"k2", None),
    ]
    b = encode_batch(
        42, recs, timestamp_ms=1_600_000_000_000, producer_id=9, producer_epoch=1, base_sequence=0
    )
    batch = DefaultRecordBatch(b)
    assert batch.validate_crc()
    assert batch.base_offset == 42 and batch.producer_id == 9
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == [
        (42, 1_600_000_000_000, b"k0", b"v0", [("h1", b"x"), ("h2", None)]),
        (43, 1_600_000_000_007, None, b"v1", []),
        (44, 1_600_000_000_003, b"k2", None, []),
    ]


@settings(max_examples=30, deadline=None)
@given(recs=record_lists())
def test_aiokafka_reads_hypothesis_batches(recs: list[Record]) -> None:
    b = encode_batch(3, recs, timestamp_ms=10**12)
    batch = DefaultRecordBatch(b)
    assert batch.validate_crc()
    got = [(r.offset, r.key, r.value, tuple(r.headers)) for r in batch]
    assert got == [(3 + r.offset_delta, r.key, r.value, r.headers) for r in recs]


def test_we_read_aiokafka_batches() -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=1000, key=b"a", value=b"1", headers=[])
    builder.append(1, timestamp=1005, key=None, value=b"2", headers=[("h", b"v")])
    builder.append(2, timestamp=999, key=b"c", value=None, headers=[])
    data = bytes(builder.build())
    [(h, start, end)] = list(iter_batches(data))
    assert (start, end) == (0, len(data)) and verify_crc(data, start, end)
    assert h.records_count == 3 and h.last_offset_delta == 2 and h.max_timestamp == 1005
    assert decode_records(data) == [
        Record(0, 0, b"a", b"1"),
        Record(1, 5, None, b"2", (("h", b"v"),)),
        Record(2, -1, b"c", None),
    ]


def test_gzip_batches_decode_and_others_raise() -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=1,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(5):
        builder.append(i, timestamp=1000 + i, key=b"k%d" % i, value=b"v" * 50, headers=[])
    data = bytes(builder.build())
    h = parse_header(data)
    assert h.compression == 1
    assert [r.key for r in decode_records(data)] == [b"k%d" % i for i in range(5)]
    bad = bytearray(data)
    struct.pack_into(">h", bad, 21, 3)  # pretend lz4
    with pytest.raises(UnsupportedCompressionError, match="lz4"):
        decode_records(bytes(bad))


def test_encode_rejects_empty_and_control_flag_roundtrips() -> None:
    with pytest.raises(ValueError):
        encode_batch(0, [], timestamp_ms=0)
    b = encode_batch(
        0,
        [(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
        timestamp_ms=0,
        attributes=ATTR_CONTROL,
    )
    assert parse_header(b).is_control


def test_large_varints_roundtrip() -> None:
    big = b"x" * 70_000  # multi-byte varint lengths
    recs = [Record(0, 2**40, big, big, (("k" * 200, big),)), Record(300, -(2**35), None, b"")]
    b = encode_batch(2**40, recs, timestamp_ms=0)
    assert decode_records(b) == recs


@given(
    st.lists(
        st.tuples(st.integers(-20_000, 20_000), st.binary(max_size=9000)), min_size=1, max_size=40
    ),
    st.integers(0, 2**40),
)
def test_timed_values_encode_as_the_general_encoder_does(
    values: list[tuple[int, bytes]], base: int
) -> None:
    """The carried history values' batch: the bytes ``encode_batch`` makes of the same
    Records (null keys, each its own time), the latest time as the batch's max."""
    t0 = 1_764_000_000_000
    timed = [(t0 + d, v) for d, v in values]
    records = [Record(i, t - t0 - values[0][0], None, v) for i, (t, v) in enumerate(timed)]
    batch = encode_timed_values(base, timed)
    assert batch == encode_batch(base, records, timestamp_ms=timed[0][0])
    h = parse_header(batch)
    assert h.base_offset == base and h.records_count == len(values)
    assert h.max_timestamp == max(t for t, _ in timed)
    # Compressed with Kafka's lz4 codec: the same records, the same header but its
    # attributes and length, a valid CRC.
    lz4 = encode_timed_values(base, timed, lz4=True)
    assert list(iter_record_tuples(lz4)) == list(iter_record_tuples(batch))
    hl = parse_header(lz4)
    assert hl.compression == 3
    assert dataclasses.replace(hl, attributes=0, batch_length=h.batch_length, crc=h.crc) == h
    ((_, start, end),) = iter_batches(lz4)
    assert verify_crc(lz4, start, end)


@given(st.one_of(st.binary(max_size=5000), st.binary(max_size=50).map(lambda b: b * 200)))
def test_an_lz4_frame_reads_back_with_the_reference_lz4(data: bytes) -> None:
    """``lz4_frame`` writes the LZ4 frame format that Kafka's lz4 codec reads: the
    reference implementation (python-lz4, the C library's frame API) gives the data back,
    compressible or not (a block that does not shrink is stored)."""
    assert lz4.frame.decompress(lz4_frame(data)) == data
