"""Reads over a log's segment files that go past the offset index.

How this works: ``PartitionLog.read`` finds a batch through the segment's index; the four
reads here walk whole segment files instead, each for one caller that needs more than one
batch (they sit behind ``PartitionLog``'s methods of the same names, so the layers above
never see a segment):

* ``verified_batches``: every batch from the log start, its CRC checked (loading an
  offsets partition: a flipped bit must not become a wrong offset). A batch that fails, or
  one overrunning its file anywhere but at the log's tail, raises ``CorruptLogError``
  naming the file and position; the log is not marked (the caller decides).
* ``recent_batch_headers``: the headers of the newest whole segments, about ``scan_bytes``
  (at least the active one): the producer state rebuilt at start-up or after a cut-back.
* ``offset_for_max_timestamp``: the record with the largest timestamp (ListOffsets
  ``MAX_TIMESTAMP``, KIP-734), found from the segments' max timestamps.
* ``segment_points``: (base offset, size, last modified) per segment, ListOffsets v0.

The retention arithmetic (``expired_prefix``, ``oversize_prefix``) sits here too: which
oldest segments retention.ms and retention.bytes let go, from their sizes and timestamps.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Sequence

from storage.interface import CorruptLogError
from storage.local.segment import CorruptSegmentError, LogSegment
from storage.record_batch import (
    ATTR_LOG_APPEND_TIME,
    BatchHeader,
    UnsupportedCompressionError,
    iter_record_tuples,
)

__all__ = [
    "expired_prefix",
    "largest_timestamp",
    "offset_for_max_timestamp",
    "oversize_prefix",
    "recent_batch_headers",
    "segment_points",
    "verified_batches",
]


def verified_batches(
    segments: Sequence[LogSegment], start: int
) -> Iterator[tuple[BatchHeader, bytes]]:
    """(header, bytes) of every batch from ``start``, each checked against its CRC."""
    for seg in segments:
        if seg.next_offset <= start:
            continue
        pos = seg.position_for(max(start, seg.base_offset))
        if pos is None:
            continue
        end = pos
        try:
            for h, at, data in seg.walk(pos, verify=True, with_data=True):
                assert data is not None
                end = at + h.size
                yield h, data
        except CorruptSegmentError as exc:
            raise CorruptLogError(
                errno.EIO,
                f"{exc.damage.reason} in {seg.log_path} at position {exc.damage.position}",
            ) from None
        if end < seg.size:
            # The walk stops quietly at what looks like a partial batch; only the
            # log's tail may be one (recovery trims it), never the middle of a file.
            raise CorruptLogError(
                errno.EIO, f"batch overrunning the file in {seg.log_path} at position {end}"
            )


def recent_batch_headers(segments: Sequence[LogSegment], scan_bytes: int) -> Iterator[BatchHeader]:
    """Headers of the newest segments that fit in ``scan_bytes`` (the active one always)."""
    first = len(segments) - 1
    size = segments[-1].size
    while first > 0 and size + segments[first - 1].size <= scan_bytes:
        first -= 1
        size += segments[first].size
    for seg in segments[first:]:
        for h, _pos, _data in seg.walk(0, verify=False):
            yield h


def offset_for_max_timestamp(segments: Sequence[LogSegment], start: int) -> tuple[int, int]:
    """(timestamp, offset) of the first record at or after ``start`` holding the largest
    timestamp, or (-1, -1)."""
    best = None
    for seg in segments:
        if (
            seg.size
            and seg.max_timestamp >= 0
            and (best is None or seg.max_timestamp > best.max_timestamp)
        ):
            best = seg
    if best is None:
        return -1, -1
    target = best.max_timestamp
    for h, _pos, data in best.walk(0, verify=False, with_data=True):
        if h.max_timestamp != target or h.last_offset < start:
            continue
        if h.attributes & ATTR_LOG_APPEND_TIME:
            return target, max(h.base_offset, start)
        assert data is not None
        try:
            for off, ts, _k, _v in iter_record_tuples(data):
                if ts == target and off >= start:
                    return ts, off
        except UnsupportedCompressionError:
            return target, h.last_offset
        return target, h.last_offset
    return -1, -1


def expired_prefix(segments: Sequence[LogSegment], retention_ms: int, now: int) -> int:
    """How many segments, oldest first, have passed ``retention_ms``: never the active one,
    except ``len(segments)`` when it holds records and has passed it too."""
    i = 0
    while i < len(segments) - 1 and now - largest_timestamp(segments[i]) > retention_ms:
        i += 1
    last = segments[-1]
    if i == len(segments) - 1 and last.size and now - largest_timestamp(last) > retention_ms:
        i += 1
    return i


def oversize_prefix(
    segments: Sequence[LogSegment], i: int, size_bytes: int, retention_bytes: int
) -> int:
    """``i`` advanced over the oldest segments while the rest still exceed ``retention_bytes``
    (never the active one)."""
    excess = size_bytes - sum(s.size for s in segments[:i]) - retention_bytes
    while i < len(segments) - 1 and excess - segments[i].size >= 0:
        excess -= segments[i].size
        i += 1
    return i


def largest_timestamp(seg: LogSegment) -> int:
    """The largest timestamp in a segment, or its file's mtime when none is known."""
    if seg.max_timestamp >= 0:
        return seg.max_timestamp
    return os.stat(seg.log_path).st_mtime_ns // 1_000_000


def segment_points(segments: Sequence[LogSegment]) -> list[tuple[int, int, int]]:
    """(base offset, size, last modified ms) of a log's segments, for ``offsets_before``."""
    return [
        (seg.base_offset, seg.size, os.stat(seg.log_path).st_mtime_ns // 1_000_000)
        for seg in segments
    ]
