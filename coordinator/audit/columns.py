"""The audit's columnar decoders: many records, or many offset-commit values, at once (numpy).

How this works
--------------
``storage`` holds the scalar codec the server and the audit share (``storage.record_batch``,
``storage.records``); this module is the audit's bulk path over the same bytes, and the
only place numpy meets the record formats.  Each function reads what is regular with numpy
and hands everything else to the scalar decoder, so both agree on every input:

* ``record_columns`` walks many batches of one buffer at once and returns positions of keys
  and values instead of copies.  Record boundaries are found in lockstep -- step k reads the
  k-th record of every batch -- so the number of numpy steps is the longest batch's record
  count, not the number of records; the last few long batches are finished by a plain loop.
  Any batch that is compressed or not perfectly regular goes through ``iter_record_tuples``.
* ``key_ids`` numbers the distinct keys of those records (by a 64-bit fingerprint, checked
  word by word), so each key is decoded once.
* ``decode_offset_commit_values`` reads the classic offset-commit layouts with gathers at
  computed positions; anything else goes through ``decode_offset_commit_value``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from storage.record_batch import (
    ATTR_COMPRESSION_MASK,
    ATTRIBUTES_POS,
    BASE_TIMESTAMP_POS,
    HEADER_SIZE,
    RECORDS_COUNT_POS,
    CorruptBatchError,
    UnsupportedCompressionError,
    iter_record_tuples,
    read_varint,
)
from storage.records import OffsetsFormatError, decode_offset_commit_value

__all__ = [
    "BatchError",
    "OffsetCommitColumns",
    "RecordColumns",
    "decode_offset_commit_values",
    "key_ids",
    "record_columns",
]

# ---------------------------------------------------------------- records of many batches

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
    return np.array([(b >> 1) ^ -(b & 1) for b in range(256)], np.int64)


def _int_view(buf: bytes, dtype: str) -> NDArray[Any]:
    """Every byte offset of ``buf`` viewed as the start of an (unaligned) integer of
    ``dtype`` (">i4": big-endian int32), for gathers at arbitrary positions."""
    size = int(dtype[-1])
    return np.ndarray((max(len(buf) - size + 1, 0),), dtype, buf, strides=(1,))


def _np_varints(
    u8: NDArray[np.uint8], pos: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Zigzag varints at ``pos``: (values, positions after them, indices of those longer
    than 5 bytes).  Reads past the end of ``u8`` see its last byte; callers reject such
    records because the positions after them lie past the end of their batch.
    """
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
    slow = read_varint
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
    u8 = np.frombuffer(buf, np.uint8)
    span = np.array(spans, np.int64).reshape(-1, 2)
    start, end = span[:, 0], span[:, 1]
    attributes = _int_view(buf, ">i2")[start + ATTRIBUTES_POS]
    count = _int_view(buf, ">i4")[start + RECORDS_COUNT_POS].astype(np.int64)
    base_offset = _int_view(buf, ">i8")[start].astype(np.int64)
    base_ts = _int_view(buf, ">i8")[start + BASE_TIMESTAMP_POS].astype(np.int64)
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

    # Everything else, record by record.
    slow = np.union1d(np.flatnonzero(~walk), fast[broken]).tolist()
    extra, slow_cols, errors = _scalar_records(buf, spans, slow)
    data = buf
    if slow_cols[0]:
        data = buf + extra
        merged = [
            np.concatenate((c, np.array(s, np.int64))) for c, s in zip(cols, slow_cols, strict=True)
        ]
        order = np.argsort(merged[0], kind="stable")
        cols = [c[order] for c in merged]
    return RecordColumns(data, *cols), errors


def _scalar_records(
    buf: bytes, spans: Sequence[tuple[int, int]], batches: list[int]
) -> tuple[bytes, list[list[int]], list[tuple[int, BatchError]]]:
    """The records of ``batches`` (indices into ``spans``) read by ``iter_record_tuples``.

    Returns their keys and values (to be appended after ``buf``: their positions count from
    its end), the seven columns of ``RecordColumns`` after ``data`` as lists, and the batches
    that cannot be read, with their errors.
    """
    errors: list[tuple[int, BatchError]] = []
    extra = bytearray()
    cols: list[list[int]] = [[] for _ in range(7)]
    for i in batches:
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
            for col, v in zip(cols, row, strict=True):
                col.append(v)
    return bytes(extra), cols, errors


def _words(data: bytes, pos: NDArray[np.int64]) -> NDArray[np.uint64]:
    """The 8 bytes at each ``pos`` as a little-endian uint64; bytes past the end read as 0.

    ``data`` holds at least a batch (61 bytes) whenever there are keys to read.
    """
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


# ---------------------------------------------------------------- offset-commit values


class OffsetCommitColumns(NamedTuple):
    """Offset-commit values side by side (``decode_offset_commit_values``); no metadata."""

    offset: NDArray[np.int64]
    leader_epoch: NDArray[np.int64]
    commit_timestamp: NDArray[np.int64]
    expire_timestamp: NDArray[np.int64]
    # value index -> why it does not decode; such values read 0 in the columns
    errors: dict[int, OffsetsFormatError]


# The classic layouts, by version (v0..v3): int16 version, int64 offset, [int32 leader epoch
# (v3)], int16-length metadata, int64 commit timestamp, [int64 expire timestamp (v1)].
# Per version: where the metadata length is, and the size of everything but the metadata.
_LAYOUTS = ((10, 20), (10, 28), (10, 20), (14, 24))


def decode_offset_commit_values(
    data: bytes, starts: NDArray[np.int64], lengths: NDArray[np.int64]
) -> OffsetCommitColumns:
    """``decode_offset_commit_value`` of every ``data[start:start + length]``, as columns.

    A value is read by numpy gathers only when its version is 0..3, its length is exactly
    that layout's plus its metadata length, and its metadata is ASCII (so certainly valid
    UTF-8).  The rest -- flexible v4, unknown versions, garbage, other metadata -- goes
    through the scalar decoder: its OffsetsFormatErrors are returned in ``errors`` and
    anything else it raises (UnicodeDecodeError) propagates, as it would from a loop.
    """
    n = len(starts)
    offset = np.zeros(n, np.int64)
    epoch = np.full(n, -1, np.int64)
    ts = np.zeros(n, np.int64)
    expire = np.full(n, -1, np.int64)
    fast = np.zeros(n, np.bool_)
    rows = np.flatnonzero(lengths >= min(size for _, size in _LAYOUTS))
    if rows.size:
        # Every byte offset viewed as the start of an (unaligned) big-endian integer.
        size = len(data)
        i16 = np.ndarray((size - 1,), ">i2", data, strides=(1,))
        i32 = np.ndarray((size - 3,), ">i4", data, strides=(1,))
        i64 = np.ndarray((size - 7,), ">i8", data, strides=(1,))
        s = starts[rows]
        version = i16[s]
        if version.min() == version.max():  # the usual case: one version throughout
            by_version = [(int(version[0]), rows, s)]
        else:
            by_version = []
            for v in range(len(_LAYOUTS)):
                sel = np.flatnonzero(version == v)
                by_version.append((v, rows[sel], s[sel]))
        for v, r, vs in by_version:
            if not 0 <= v < len(_LAYOUTS) or not r.size:
                continue
            mlen_at, fixed = _LAYOUTS[v]
            mlen = i16[vs + mlen_at].astype(np.int64)
            ok = (mlen >= 0) & (lengths[r] == fixed + mlen)
            meta = np.flatnonzero(ok & (mlen > 0))
            if meta.size:
                # one index per metadata byte; a value with a byte >= 0x80 is not ASCII
                ml = mlen[meta]
                cum = np.cumsum(ml)
                at = np.repeat(vs[meta] + mlen_at + 2 - (cum - ml), ml) + np.arange(int(cum[-1]))
                high = np.frombuffer(data, np.uint8)[at] >= 0x80
                ok[meta[np.add.reduceat(high, cum - ml) > 0]] = False
            if not ok.all():
                r, vs, mlen = r[ok], vs[ok], mlen[ok]
            fast[r] = True
            offset[r] = i64[vs + 2]
            if v == 3:
                epoch[r] = i32[vs + 10]
            ts_at = vs + mlen_at + 2 + mlen
            ts[r] = i64[ts_at]
            if v == 1:
                expire[r] = i64[ts_at + 8]
    errors: dict[int, OffsetsFormatError] = {}
    for i in np.flatnonzero(~fast).tolist():
        start = int(starts[i])
        try:
            value = decode_offset_commit_value(data[start : start + int(lengths[i])])
        except OffsetsFormatError as e:
            errors[i] = e
            offset[i] = epoch[i] = ts[i] = expire[i] = 0
            continue
        offset[i] = value.offset
        epoch[i] = value.leader_epoch
        ts[i] = value.commit_timestamp
        expire[i] = value.expire_timestamp
    return OffsetCommitColumns(offset, epoch, ts, expire, errors)
