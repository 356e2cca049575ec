"""``record_columns`` / ``key_ids`` (the audit's numpy decoders) agree with ``iter_record_tuples``.

Segments mix small batches (walked in numpy lockstep; the threshold is lowered so small
examples reach it) with long ones (finished by the scalar loop), gzip batches and batches
damaged behind a valid CRC (both read by ``iter_record_tuples``): every path must give the
same records and the same errors.
"""

from __future__ import annotations

import gzip
import struct
from unittest import mock

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.record_batch import (
    CorruptBatchError,
    Record,
    UnsupportedCompressionError,
    encode_batch,
    iter_batches,
    iter_record_tuples,
)

pytest.importorskip("numpy")

from coordinator.audit import columns
from coordinator.audit.columns import key_ids, record_columns

keys = st.sampled_from([None, b"", b"k", b"key-1", b"key-2", b"a" * 8, b"a" * 9, b"x" * 70])
vals = st.none() | st.binary(max_size=150)


def reframe(batch: bytes, *, attributes: int | None = None, body: bytes | None = None) -> bytes:
    """The batch with other attributes or records; length and CRC fixed."""
    head = bytearray(batch[:61])
    body = batch[61:] if body is None else body
    if attributes is not None:
        struct.pack_into(">h", head, 21, attributes)
    struct.pack_into(">i", head, 8, 49 + len(body))
    out = head + body
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


@st.composite
def batches(draw: st.DrawFn, base: int) -> bytes:
    n = draw(st.sampled_from([1, 1, 2, 3, 15]))
    recs = [
        Record(
            i * draw(st.sampled_from([1, 1, 7])),
            draw(st.sampled_from([0, 0, 1, -70, 2**40])),
            draw(keys),
            draw(vals),
        )
        for i in range(n)
    ]
    b = encode_batch(base, recs, timestamp_ms=1_700_000_000_000)
    how = draw(st.sampled_from(["plain"] * 8 + ["gzip", "snappy", "byte", "cut", "count"]))
    if how == "gzip":
        b = reframe(b, attributes=1, body=gzip.compress(b[61:]))
    elif how == "snappy":
        b = reframe(b, attributes=2)
    elif how == "byte":
        body = bytearray(b[61:])
        body[draw(st.integers(0, len(body) - 1))] = draw(st.integers(0, 255))
        b = reframe(b, body=bytes(body))
    elif how == "cut":
        b = reframe(b, body=b[61 : draw(st.integers(61, len(b)))])
    elif how == "count":
        count = struct.unpack_from(">i", b, 57)[0] + draw(st.sampled_from([-1, 1, 2**31 - 1 - n]))
        b = reframe(b[:57] + struct.pack(">i", count) + b[61:])
    return b


@st.composite
def segments(draw: st.DrawFn) -> bytes:
    out = b""
    for i in range(draw(st.integers(0, 12))):
        out += draw(batches(1000 * i))
    return out


def expected(buf: bytes, spans: list[tuple[int, int]]) -> tuple[list[object], list[object]]:
    recs: list[object] = []
    errors: list[object] = []
    for i, (start, end) in enumerate(spans):
        try:
            recs += [(i, *t) for t in iter_record_tuples(buf[start:end])]
        except (CorruptBatchError, UnsupportedCompressionError) as e:
            errors.append((i, type(e), str(e)))
    return recs, errors


@settings(max_examples=150, deadline=None)
@given(buf=segments())
def test_record_columns_match_iter_record_tuples(buf: bytes) -> None:
    spans = [(start, end) for _, start, end in iter_batches(buf)]
    with mock.patch.object(columns, "_LOCKSTEP_MIN", 3):
        cols, errors = record_columns(buf, spans)
    data = cols.data

    def piece(start: int, length: int) -> bytes | None:
        return None if length < 0 else data[start : start + length]

    actual = [
        (b, o, t, piece(ks, kl), piece(vs, vl))
        for b, o, t, ks, kl, vs, vl in zip(
            *(c.tolist() for c in (cols.batch, cols.offset, cols.timestamp)),
            *(c.tolist() for c in (cols.key_start, cols.key_len)),
            *(c.tolist() for c in (cols.value_start, cols.value_len)),
            strict=True,
        )
    ]
    recs, errs = expected(buf, spans)
    assert actual == recs
    assert [(i, type(e), str(e)) for i, e in errors] == errs

    # key ids: numbered by first appearance, equal exactly when the keys are equal
    ids, firsts = key_ids(cols)
    numbering: dict[bytes, int] = {}
    for rec, kid in zip(actual, ids.tolist(), strict=True):
        key = rec[3]
        assert kid == (-1 if key is None else numbering.setdefault(key, len(numbering)))
    assert [actual[r][3] for r in firsts.tolist()] == list(numbering)


def test_key_ids_survive_fingerprint_collisions(monkeypatch: pytest.MonkeyPatch) -> None:
    # With a zero multiplier every fingerprint is equal: the word check must catch it.
    monkeypatch.setattr(columns, "_FINGERPRINT_MUL", 0)
    ks = [b"b", b"a", b"b", None, b"a" * 20, b"a", b"a" * 20]
    buf = encode_batch(0, [(k, b"v") for k in ks], timestamp_ms=0)
    cols, _ = record_columns(buf, [(0, len(buf))])
    ids, firsts = key_ids(cols)
    assert ids.tolist() == [0, 1, 0, -1, 2, 1, 2]
    assert firsts.tolist() == [0, 1, 4]
