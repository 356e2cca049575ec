"""Compressed record batches as clients make them, read by kgc's decoder and its cleaner.

The batches are built by kafka-python's DefaultRecordBatchBuilder (its codecs: gzip, xerial
snappy as Kafka's Java client frames it, the LZ4 frame format, zstd), and raw snappy (what
librdkafka writes) by kafka-python's own ``snappy_encode(xerial_compatible=False)``; none
by kgc.  tests/integration/test_compression.py does the same with librdkafka's producers
against a running kgc.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any as FakeClock

import crc32c
import pytest
from kafka.codec import snappy_encode
from kafka.record.default_records import DefaultRecordBatchBuilder

from storage import record_batch
from storage.local.cleaner import LogCleaner
from storage.local.log import LogConfig, PartitionLog
from storage.record_batch import (
    HEADER_SIZE,
    CorruptBatchError,
    CorruptCompressionError,
    Record,
    UnsupportedCompressionError,
    decode_records,
    iter_record_tuples,
    parse_header,
    verify_crc,
)

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

Rec = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]


def client_batch(codec: int, records: list[Rec], base_offset: int = 0, ts: int = 1000) -> bytes:
    """A v2 batch as kafka-python's producer builds it."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 24,
    )
    for i, (key, value, headers) in enumerate(records):
        builder.append(i, timestamp=ts + i, key=key, value=value, headers=headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)  # base_offset is outside the CRC
    return bytes(data)


def reframe(batch: bytes, codec: int, body: bytes) -> bytes:
    """``batch`` with its records replaced by ``body`` under ``codec``; length and CRC redone."""
    out = bytearray(batch[:HEADER_SIZE] + body)
    attrs = struct.unpack_from(">h", out, 21)[0]
    struct.pack_into(">h", out, 21, (attrs & ~0x07) | codec)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def some_records(n: int = 40) -> list[Rec]:
    out: list[Rec] = []
    for i in range(n):
        key = None if i % 13 == 12 else b"key-%d" % (i % 9)
        value = None if i % 11 == 10 else (b"value %d " % i) * (1 + i % 50)
        headers = [("h", b"x%d" % i)] if i % 3 == 0 else []
        out.append((key, value, headers))
    return out


def expected(records: list[Rec], ts: int = 1000) -> list[Record]:
    return [
        Record(i, i, k, v, tuple((hk, hv) for hk, hv in h)) for i, (k, v, h) in enumerate(records)
    ]


@pytest.mark.parametrize("name", CODECS)
def test_client_batches_of_each_codec_decode(name: str) -> None:
    records = some_records()
    batch = client_batch(CODECS[name], records, base_offset=500)
    h = parse_header(batch)
    assert h.compression == CODECS[name]
    assert verify_crc(batch, 0, len(batch))
    assert len(batch) < sum(len(v or b"") for _, v, _ in records)  # really compressed
    assert decode_records(batch) == expected(records)
    assert list(iter_record_tuples(batch)) == [
        (500 + i, 1000 + i, k, v) for i, (k, v, _) in enumerate(records)
    ]


def test_xerial_snappy_with_many_blocks_decodes() -> None:
    # kafka-python frames snappy in 32 KiB xerial blocks, as snappy-java does: a batch
    # over 100 KiB spans several.
    records: list[Rec] = [(b"k%d" % i, bytes([65 + i % 26]) * 3000, []) for i in range(60)]
    batch = client_batch(CODECS["snappy"], records)
    assert batch[HEADER_SIZE : HEADER_SIZE + 8] == b"\x82SNAPPY\x00"
    assert decode_records(batch) == expected(records)


def test_raw_snappy_decodes() -> None:
    # librdkafka writes one raw snappy block, without xerial's framing.
    records = some_records()
    plain = client_batch(0, records)
    body = snappy_encode(plain[HEADER_SIZE:], xerial_compatible=False)
    assert body[:8] != b"\x82SNAPPY\x00"
    batch = reframe(plain, CODECS["snappy"], body)
    assert decode_records(batch) == expected(records)


@pytest.mark.parametrize("name", CODECS)
def test_corrupt_compressed_records_are_corrupt_and_unreadable(name: str) -> None:
    batch = client_batch(CODECS[name], some_records())
    body = bytearray(batch[HEADER_SIZE:])
    body[len(body) // 3 : len(body) // 3 + 8] = b"\xff" * 8
    bad = reframe(batch, CODECS[name], bytes(body[: len(body) // 2]))
    assert verify_crc(bad, 0, len(bad))  # stored as a producer sent it: its CRC holds
    with pytest.raises(CorruptCompressionError, match=name) as err:
        decode_records(bad)
    # Corrupt (the audit's finding) and unreadable (the cleaner copies it as it is).
    assert isinstance(err.value, CorruptBatchError)
    assert isinstance(err.value, UnsupportedCompressionError)


@pytest.mark.parametrize("name", CODECS)
def test_decompression_is_bounded(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    records: list[Rec] = [(b"k", b"\x00" * 200_000, [])]
    batch = client_batch(CODECS[name], records)
    assert decode_records(batch)[0].value == b"\x00" * 200_000
    monkeypatch.setattr(record_batch, "MAX_DECOMPRESSED_BYTES", 100_000)
    with pytest.raises(UnsupportedCompressionError, match="more than 100000 bytes") as err:
        decode_records(batch)
    assert not isinstance(err.value, CorruptBatchError)


def test_unknown_codec_is_unsupported() -> None:
    batch = client_batch(0, some_records(3))
    bad = reframe(batch, 5, batch[HEADER_SIZE:])
    with pytest.raises(UnsupportedCompressionError, match="cannot decode 5-compressed"):
        decode_records(bad)


CFG = LogConfig(
    cleanup_policy="compact",
    segment_bytes=2000,
    index_interval_bytes=100,
    delete_retention_ms=86_400_000,
    min_cleanable_dirty_ratio=0.01,
)


def contents(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [
        (off, k, v) for _h, data in log.iter_batches() for off, _t, k, v in iter_record_tuples(data)
    ]


@pytest.mark.parametrize("name", CODECS)
def test_cleaner_compacts_compressed_batches(name: str, tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog(tmp_path / "t-0", CFG, clock)
    written: list[tuple[bytes, bytes]] = []
    for b in range(30):
        records: list[Rec] = [
            (b"k%d" % ((b * 5 + i) % 7), b"v%d-%d" % (b, i) * 20, []) for i in range(5)
        ]
        written += [(k, v) for k, v, _ in records if k is not None and v is not None]
        log.append(client_batch(CODECS[name], records, ts=clock.now))
    # An all-surviving batch stays as the producer compressed it.
    untouched = client_batch(CODECS[name], [(b"only-once", b"x" * 100, [])], ts=clock.now)
    log.append(untouched)
    log.roll()
    log.append(client_batch(CODECS[name], [(b"tail", b"t", [])], ts=clock.now))
    assert len(log.segments) > 2
    LogCleaner(log).clean_all()
    after = contents(log)
    latest = {k: v for k, v in written}
    kept = {k: v for _o, k, v in after}
    assert {k: v for k, v in kept.items() if k in latest} == latest
    assert len(after) == len(latest) + 2  # one per key, plus only-once and the tail
    stored = [
        data
        for _h, data in log.iter_batches()
        if b"only-once" in bytes(decode_records(data)[0].key or b"")
    ]
    assert len(stored) == 1 and parse_header(stored[0]).compression == CODECS[name]
    assert stored[0][8:] == untouched[8:]  # byte for byte after the base offset


def test_cleaner_copies_a_corrupt_compressed_batch_and_goes_on(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = PartitionLog(tmp_path / "t-0", CFG, clock)
    good = client_batch(CODECS["zstd"], [(b"a", b"1", []), (b"a", b"2", [])], ts=clock.now)
    body = client_batch(CODECS["zstd"], [(b"a", b"3", [])])[HEADER_SIZE:]
    garbage = reframe(good, CODECS["zstd"], body[:-6] + b"\xff" * 6)
    log.append(good)
    log.append(garbage)
    log.append(client_batch(CODECS["zstd"], [(b"b", b"1", []), (b"b", b"2", [])], ts=clock.now))
    log.roll()
    log.append(client_batch(0, [(b"tail", b"t", [])], ts=clock.now))
    LogCleaner(log).clean_all()
    batches = [data for _h, data in log.iter_batches()]
    assert garbage[8:] in [b[8:] for b in batches]  # kept as it was
    readable = [
        (k, v) for b in batches if b[8:] != garbage[8:] for _o, _t, k, v in iter_record_tuples(b)
    ]
    assert readable == [(b"a", b"2"), (b"b", b"2"), (b"tail", b"t")]
