"""Executor-side decoder: one segment file in, a few summary rows out (numpy + pyarrow).

How this works
--------------
Spark's ``binaryFile`` source hands ``mapInArrow`` Arrow batches of (path, content) rows, one
file per task.  ``decode_batches`` walks each file with kgc's own codec
(``storage.record_batch`` / ``storage.records``, shared with the server, and the audit's
columnar decoders over it in ``columns``) and, instead of shipping one row per record back to
the JVM, *combines* inside the task:

* ``K`` one row per (segment, group, topic, partition): first/last log offset, committed
  offset, commit time and leader epoch, number of commits and tombstones, whether the key's
  first event in the segment is a tombstone and whether its last one is;
* ``W`` the last ``window`` commits of each key in the segment (for Burrow's rules);
* ``G`` one row per (segment, group) for GroupMetadata records (first/last generation, the
  last value's member count / protocol type / state timestamp, tombstones);
* ``Q`` one row per (segment, key) of KIP-848 consumer-group records (types 3-8 and 16): the
  key's last record in the segment, its value as JSON in ``detail`` or a tombstone
  (``consumer_groups``);
* ``S`` one row per offsets segment (first/last offset, record and batch counts, size), or
  per *piece* of one: the PostgreSQL source (``source_pg``) decodes many ``kgc_record_log``
  rows of a partition as one buffer, each row a piece with its own name and S row, so a row
  is audited like a small segment at the cost of one decode for all of them;
* ``F`` findings visible inside one segment (CRC, truncation, unknown versions, offsets going
  backwards between batches, and per-key rewinds / timestamp or epoch regressions between
  consecutive records of the same segment);
* ``T`` / ``P`` for topic-partition segments: first and next offset, and a down-sampled
  (max timestamp, next offset) time line so lag *at commit time* can be estimated;
* ``C`` the topic catalog (``topics.json``: name, partitions, id in ``detail``) and ``L``
  ``log-start-offset`` checkpoints.

``stitch`` later joins segments together (checks across segment boundaries use the first/last
columns), so a million commits become a few thousand rows.  All rows share one wide schema
(``SCHEMA``); unused columns are null.  Nothing here imports pyspark, so the module is cheap to
import on workers and testable without a JVM.

An offsets segment is decoded column by column rather than record by record:

1. the batch walk stays a loop over batches (``iter_batches``, CRC, control batches, and the
   batch-level findings);
2. ``record_columns`` turns the records of all readable batches into numpy arrays (offset,
   key and value positions), and ``key_ids`` numbers the distinct keys, each of which is
   decoded once;
3. offset commits -- nearly every record -- are decoded by ``decode_offset_commit_values``
   and aggregated per key after one stable sort by key (``commits.offset_commit_rows``): each key's
   records form a run in file order, so "the previous record of this key" is the previous
   element and every per-record check is a shifted comparison over the whole segment;
4. the rare rest (group metadata, consumer-group records, unknown or broken keys) goes
   through a per-record loop.

Findings carry their place in the file (batch, record, rank) and are sorted at the end, so
the rows come out exactly as a single pass over the records would produce them.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from coordinator.audit.columns import (
    RecordColumns,
    key_ids,
    record_columns,
)
from coordinator.audit.commits import offset_commit_rows
from coordinator.audit.consumer_groups import SegmentFold, key_second, value_doc
from coordinator.audit.schema import (
    CATALOG_NAME,
    CHECKPOINT_NAME,
    NAMES,
    SCHEMA,
    SPARK_SCHEMA,
    CommitKey,
    Finding,
    Ints,
    Row,
    classify_path,
    finding_row,
    value_finding_row,
)
from storage.record_batch import CorruptBatchError, iter_batches, verify_crc
from storage.records import (
    OFFSETS_TOPIC,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetsFormatError,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMetadataKey,
    UnknownKey,
    decode_consumer_group_value,
    decode_group_metadata_value,
    decode_key,
    partition_for,
)
from storage.records.streams_group import StreamsGroupKey

__all__ = [
    "CATALOG_NAME",
    "CHECKPOINT_NAME",
    "OFFSETS_TOPIC",
    "SCHEMA",
    "SPARK_SCHEMA",
    "Piece",
    "classify_path",
    "decode_batches",
    "decode_file",
    "decode_offsets",
]

_TIMELINE_POINTS = 256

_SHARE_GROUP_KEYS = (
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupStatePartitionMetadataKey,
)

_CONSUMER_GROUP_KEYS = (
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupRegularExpressionKey,
)


class _GroupState:
    """A group's GroupMetadata records in one segment, folded in file order (its G row)."""

    __slots__ = (
        "g1",
        "g2",
        "last_tomb",
        "lead_tomb",
        "lo1",
        "lo2",
        "members",
        "n",
        "ntomb",
        "ptype",
        "state_ts",
    )

    def __init__(self, lo: int) -> None:
        self.lo1 = lo
        self.lo2 = lo
        self.g1: int | None = None
        self.g2: int | None = None
        self.n = 0
        self.ntomb = 0
        self.lead_tomb: int | None = None
        self.last_tomb = False
        self.members: int | None = None
        self.ptype: str | None = None
        self.state_ts: int | None = None

    def tombstone(self, lo: int) -> None:
        self.ntomb += 1
        self.last_tomb = True
        if self.n == 0 and self.lead_tomb is None:
            self.lead_tomb = lo

    def metadata(self, gv: GroupMetadataValue) -> int | None:
        """Fold a GroupMetadata value in; returns the previous generation if this one is lower
        (a regression: not after a tombstone, which starts the group afresh)."""
        g2 = self.g2
        regressed = g2 if g2 is not None and gv.generation < g2 and not self.last_tomb else None
        if self.n == 0:
            self.g1 = gv.generation
        self.last_tomb = False
        self.n += 1
        self.g2 = gv.generation
        self.members = len(gv.members)
        self.ptype = gv.protocol_type
        self.state_ts = gv.current_state_timestamp
        return regressed

    def row(self, src: str, opart: int, seg: int, group: str, expected: int) -> Row:
        return {
            "kind": "G",
            "src": src,
            "opart": opart,
            "seg": seg,
            "grp": group,
            "lo1": self.lo1,
            "lo2": self.lo2,
            "ep1": self.g1,
            "ep2": self.g2,
            "n": self.n,
            "n2": self.ntomb,
            "lead_tomb": self.lead_tomb,
            "last_tomb": self.last_tomb,
            "members": self.members,
            "ptype": self.ptype,
            "state_ts": self.state_ts,
            "expected": expected,
        }


def _classify_keys(
    cols: RecordColumns, ids: Ints, firsts: Ints, num_partitions: int
) -> tuple[
    list[CommitKey],
    Ints,
    dict[int, str | ConsumerGroupKey | ShareGroupKey | UnknownKey | OffsetsFormatError],
    dict[str, int],
]:
    """Decode each distinct key once (``ids`` / ``firsts`` from ``key_ids``).

    Returns the offset-commit keys in order of first appearance, the index in that list of
    each record's key (-1 for any other record), what the other key ids are (a group of a
    GroupMetadataKey, an UnknownKey, or why the key does not decode), and the expected
    offsets partition of each group seen in an offset-commit key.
    """
    keys: list[CommitKey] = []
    index: dict[CommitKey, int] = {}
    other: dict[int, str | ConsumerGroupKey | ShareGroupKey | UnknownKey | OffsetsFormatError] = {}
    expected: dict[str, int] = {}
    commit_key_of_id = np.full(len(firsts), -1, np.int64)
    for j, r in enumerate(firsts.tolist()):
        start = int(cols.key_start[r])
        try:
            dk = decode_key(cols.data[start : start + int(cols.key_len[r])])
        except OffsetsFormatError as e:
            other[j] = e
            continue
        if isinstance(dk, OffsetCommitKey):
            ck = (dk.group, dk.topic, dk.partition)
            if ck not in index:  # two encodings (v0, v1) of one key share its index
                index[ck] = len(keys)
                keys.append(ck)
                if dk.group not in expected:
                    expected[dk.group] = partition_for(dk.group, num_partitions)
            commit_key_of_id[j] = index[ck]
        elif isinstance(dk, StreamsGroupKey):
            # Streams group records are not folded by the audit: reported as before.
            other[j] = UnknownKey(dk.rtype, bytes(cols.data[start : start + int(cols.key_len[r])]))
        else:
            other[j] = dk.group if isinstance(dk, GroupMetadataKey) else dk
    rec_key = np.full(len(ids), -1, np.int64)
    keyed = ids >= 0
    rec_key[keyed] = commit_key_of_id[ids[keyed]]
    return keys, rec_key, other, expected


def _other_records(
    src: str,
    opart: int,
    seg: int,
    cols: RecordColumns,
    recs: Ints,
    ids: Ints,
    other_keys: dict[int, str | ConsumerGroupKey | ShareGroupKey | UnknownKey | OffsetsFormatError],
    rec_batch: Ints,
    num_partitions: int,
    expected: dict[str, int],
) -> tuple[list[Row], list[Finding]]:
    """G and Q rows and findings of the records that are not offset commits, one at a time.

    They are rare: group metadata (one per rebalance), consumer-group records (a few per
    heartbeat that changes something; the last one of each key per segment makes a Q row,
    ``consumer_groups.SegmentFold``), unknown or broken keys.
    """
    found: list[Finding] = []
    groups: dict[str, _GroupState] = {}
    cgroups = SegmentFold()
    for r, kid, lo, vs, vl in zip(
        recs.tolist(),
        ids[recs].tolist(),
        cols.offset[recs].tolist(),
        cols.value_start[recs].tolist(),
        cols.value_len[recs].tolist(),
        strict=True,
    ):
        order = (int(rec_batch[r]), r, 0)
        k = other_keys.get(kid) if kid >= 0 else None
        if isinstance(k, _CONSUMER_GROUP_KEYS):
            if k.group not in expected:
                expected[k.group] = partition_for(k.group, num_partitions)
            doc = None
            if vl >= 0:
                try:
                    doc = value_doc(decode_consumer_group_value(k, cols.data[vs : vs + vl]))
                except OffsetsFormatError as e:
                    what = f"consumer group record type {k.version}"
                    found.append((order, value_finding_row(src, opart, seg, what, e, lo, k.group)))
                    continue  # its effect is unknown: the key keeps its previous record
            cgroups.add(k.group, k.version, key_second(k), lo, doc)
            continue
        if isinstance(k, _SHARE_GROUP_KEYS):
            continue  # share groups' membership: nothing the audit checks
        if not isinstance(k, str):
            found.append((order, _key_finding(src, opart, seg, k, lo)))
            continue
        gs = groups.get(k)
        if gs is None:
            gs = groups[k] = _GroupState(lo)
            if k not in expected:
                expected[k] = partition_for(k, num_partitions)
        gs.lo2 = lo
        if vl < 0:
            gs.tombstone(lo)
            continue
        try:
            gv = decode_group_metadata_value(cols.data[vs : vs + vl])
        except OffsetsFormatError as e:
            found.append((order, value_finding_row(src, opart, seg, "group metadata", e, lo, k)))
            continue
        previous = gs.metadata(gv)
        if previous is not None:
            finding = finding_row(
                src,
                opart,
                seg,
                "warn",
                "generation_regression",
                f"generation went from {previous} to {gv.generation}",
                lo,
                k,
            )
            found.append((order, finding))
    rows = [gs.row(src, opart, seg, g, expected[g]) for g, gs in groups.items()]
    rows += cgroups.rows(src, opart, seg, expected)
    return rows, found


def _key_finding(
    src: str, opart: int, seg: int, key: UnknownKey | OffsetsFormatError | None, lo: int
) -> Row:
    """The finding of a record whose key is missing, broken or of a type we do not know."""
    if key is None:
        return finding_row(
            src, opart, seg, "error", "undecodable_record", "record without a key", lo
        )
    if isinstance(key, OffsetsFormatError):
        return finding_row(src, opart, seg, "error", "undecodable_record", f"key: {key}", lo)
    return finding_row(
        src,
        opart,
        seg,
        "warn",
        "unknown_record_version",
        f"key version {key.version} is not an offset commit, classic group or consumer "
        "group record (a share or streams group's, or a newer Kafka record type?)",
        lo,
    )


class Piece(NamedTuple):
    """A part of a decoded buffer that reports as a segment of its own: from byte ``start``
    (up to the next piece), named ``src``, with ``seg`` as its base offset."""

    start: int
    seg: int
    src: str


def decode_offsets(
    src: str,
    opart: int,
    seg: int,
    buf: bytes,
    *,
    window: int,
    num_partitions: int,
    future_limit_ms: int,
    pieces: Sequence[Piece] | None = None,
) -> list[Row]:
    """Rows of one offsets segment (see ``_decode_offsets_segment``); ``pieces``, if given,
    split ``buf`` into whole-batch parts (the first at byte 0) that each get an S row, and
    batch offsets are compared within a piece only (between pieces it is the stitch's
    overlapping_segments check, as between files)."""
    return _decode_offsets_segment(
        src, opart, seg, buf, window, num_partitions, future_limit_ms, pieces
    )


def _decode_offsets_segment(
    src: str,
    opart: int,
    seg: int,
    buf: bytes,
    window: int,
    num_partitions: int,
    future_limit_ms: int,
    pieces: Sequence[Piece] | None = None,
) -> list[Row]:
    """Rows of one offsets segment: its findings in file order, then the findings about its
    end, its S row (one per piece), the K / W rows of its offset-commit keys and the G rows
    of its groups.

    The steps: walk the batches (``_walk_batches``); read the records of the readable ones as
    columns and number their keys; offset commits by key (``offset_commit_rows``); the rest
    one by one (``_other_records``).
    """
    pieces = pieces or [Piece(0, seg, src)]
    walk = _walk_batches(src, opart, seg, buf, pieces)
    found = walk.found
    cols, errors = record_columns(buf, walk.spans)
    for i, error in errors:
        check = (
            "truncated_batch" if isinstance(error, CorruptBatchError) else "unsupported_compression"
        )
        finding = finding_row(src, opart, seg, "error", check, str(error), walk.span_base[i])
        found.append(((walk.span_batch[i], -1, 1), finding))
    rec_batch = np.array(walk.span_batch, np.int64)[cols.batch]
    ids, firsts = key_ids(cols)
    keys, rec_key, other_keys, expected = _classify_keys(cols, ids, firsts, num_partitions)
    commits = np.flatnonzero(rec_key >= 0)
    key_rows, commit_found = offset_commit_rows(
        src,
        opart,
        seg,
        cols,
        commits,
        rec_key[commits],
        keys,
        rec_batch,
        window,
        future_limit_ms,
        expected,
    )
    group_rows, other_found = _other_records(
        src,
        opart,
        seg,
        cols,
        np.flatnonzero(rec_key < 0),
        ids,
        other_keys,
        rec_batch,
        num_partitions,
        expected,
    )
    found += commit_found
    found += other_found
    found.sort(key=lambda f: f[0])
    rows = [row for _, row in found]
    rows += walk.tail
    # records per piece: record -> its readable batch (span) -> batch -> piece
    span_piece = np.array(walk.batch_piece, np.int64)[walk.span_batch]
    records = np.bincount(span_piece[cols.batch], minlength=len(pieces)).tolist()
    for i, (piece, stats) in enumerate(zip(pieces, walk.pieces, strict=True)):
        end = pieces[i + 1].start if i + 1 < len(pieces) else len(buf)
        rows.append(
            {
                "kind": "S",
                "src": piece.src,
                "opart": opart,
                "seg": piece.seg,
                "lo1": stats.first_offset,
                "lo2": stats.last_offset,
                "n": records[i],
                "n2": stats.batches,
                "size": end - piece.start,
                "tsmax": stats.max_ts,
            }
        )
    return rows + key_rows + group_rows


@dataclass(slots=True)
class _PieceStats:
    """A piece's batches: first and (highest) last offset, count, max timestamp."""

    first_offset: int | None = None
    last_offset: int | None = None
    batches: int = 0
    max_ts: int = -1


@dataclass(slots=True)
class _BatchWalk:
    """What the walk over a segment's batches found (``_walk_batches``)."""

    found: list[Finding] = field(default_factory=list)  # batch findings, at their place
    tail: list[Row] = field(default_factory=list)  # findings about the end of the segment
    spans: list[tuple[int, int]] = field(default_factory=list)  # batches whose records are read
    span_batch: list[int] = field(default_factory=list)  # their index among all batches
    span_base: list[int] = field(default_factory=list)  # their base offset
    pieces: list[_PieceStats] = field(default_factory=list)  # one per Piece
    batch_piece: list[int] = field(default_factory=list)  # each batch's piece
    batches: int = 0


def _walk_batches(
    src: str, opart: int, seg: int, buf: bytes, pieces: Sequence[Piece]
) -> _BatchWalk:
    """Walk the segment's batches: offsets that do not increase (within a piece), CRC
    mismatches (their records are skipped), control batches (skipped), and an end that is
    not a whole batch.  Byte positions in details count from the piece's start."""
    w = _BatchWalk(pieces=[_PieceStats() for _ in pieces])
    found = w.found
    prev_last: int | None = None
    end = 0
    piece = 0
    stats = w.pieces[0]
    try:
        for h, start, end in iter_batches(buf):
            while piece + 1 < len(pieces) and start >= pieces[piece + 1].start:
                piece += 1
                stats = w.pieces[piece]
                prev_last = None
            at = start - pieces[piece].start
            b = w.batches
            w.batches += 1
            w.batch_piece.append(piece)
            stats.batches += 1
            if stats.first_offset is None:
                stats.first_offset = h.base_offset
            if prev_last is not None and h.base_offset <= prev_last:
                finding = finding_row(
                    src,
                    opart,
                    seg,
                    "error",
                    "non_monotonic_offsets",
                    f"batch at byte {at} starts at offset {h.base_offset}, "
                    f"not after the previous batch's last offset {prev_last}",
                    h.base_offset,
                )
                found.append(((b, -1, 0), finding))
            prev_last = h.last_offset if prev_last is None else max(prev_last, h.last_offset)
            stats.last_offset = prev_last
            if h.max_timestamp > stats.max_ts:
                stats.max_ts = h.max_timestamp
            if not verify_crc(buf, start, end):
                finding = finding_row(
                    src,
                    opart,
                    seg,
                    "error",
                    "crc_mismatch",
                    f"CRC32C mismatch in batch at byte {at} "
                    f"(offsets {h.base_offset}..{h.last_offset}); its records were skipped",
                    h.base_offset,
                )
                found.append(((b, -1, 1), finding))
                continue
            if h.is_control:
                continue
            w.spans.append((start, end))
            w.span_batch.append(b)
            w.span_base.append(h.base_offset)
        if end < len(buf):
            while piece + 1 < len(pieces) and end >= pieces[piece + 1].start:
                piece, prev_last = piece + 1, None
            w.tail.append(
                finding_row(
                    src,
                    opart,
                    seg,
                    "error",
                    "truncated_batch",
                    f"{len(buf) - end} bytes at the end of the segment (from byte "
                    f"{end - pieces[piece].start}) are not a complete batch",
                    prev_last + 1 if prev_last is not None else pieces[piece].seg,
                )
            )
    except CorruptBatchError as e:
        while piece + 1 < len(pieces) and end >= pieces[piece + 1].start:
            piece, prev_last = piece + 1, None
        w.tail.append(
            finding_row(
                src,
                opart,
                seg,
                "error",
                "corrupt_batch",
                f"{e}; the rest of the segment ({len(buf) - end} bytes) was not read",
                prev_last + 1 if prev_last is not None else pieces[piece].seg,
            )
        )
    return w


def _decode_topic_segment(src: str, topic: str, part: int, seg: int, buf: bytes) -> list[Row]:
    """First/next offset of a topic segment plus a down-sampled time line."""
    first: int | None = None
    nxt = seg
    batches = 0
    points: list[tuple[int, int]] = []
    running_ts = -1
    rows: list[Row] = []
    end = 0
    try:
        for h, _start, batch_end in iter_batches(buf):
            end = batch_end
            batches += 1
            if first is None:
                first = h.base_offset
            nxt = max(nxt, h.next_offset)
            if h.max_timestamp > running_ts:
                running_ts = h.max_timestamp
            points.append((running_ts, nxt))
    except CorruptBatchError as e:
        rows.append(
            finding_row(
                src,
                None,
                seg,
                "error",
                "corrupt_batch",
                f"{topic}-{part}: {e}",
                nxt,
                None,
                topic,
                part,
            )
        )
    if end < len(buf) and not rows:
        rows.append(
            finding_row(
                src,
                None,
                seg,
                "error",
                "truncated_batch",
                f"{topic}-{part}: {len(buf) - end} bytes at the end of the segment "
                "are not a complete batch",
                nxt,
                None,
                topic,
                part,
            )
        )
    step = max(1, len(points) // _TIMELINE_POINTS)
    sampled = points[step - 1 :: step]
    if points and (not sampled or sampled[-1] != points[-1]):
        sampled.append(points[-1])
    rows.append(
        {
            "kind": "T",
            "src": src,
            "topic": topic,
            "part": part,
            "seg": seg,
            "lo1": first,
            "lo2": nxt,
            "n2": batches,
            "size": len(buf),
        }
    )
    for ts, off in sampled:
        rows.append({"kind": "P", "topic": topic, "part": part, "seg": seg, "ts1": ts, "off1": off})
    return rows


def decode_file(
    path: str,
    content: bytes,
    *,
    window: int = 10,
    num_partitions: int = 50,
    future_limit_ms: int = 2**62,
) -> list[Row]:
    """Rows for one file of the data directory (segment, checkpoint or catalog)."""
    kind, topic, part, seg = classify_path(path)
    if kind == "catalog":
        try:
            catalog = json.loads(content.decode())
            return [
                {
                    "kind": "C",
                    "src": path,
                    "topic": str(t["name"]),
                    "n": int(t["partitions"]),
                    "detail": str(t["id"]) if t.get("id") else None,  # hex, as stored
                }
                for t in catalog
            ]
        except (ValueError, KeyError, TypeError) as e:
            return [finding_row(path, None, None, "error", "unreadable_catalog", f"{path}: {e}")]
    if kind == "checkpoint":
        lines = content.decode(errors="replace").split()
        if len(lines) == 2 and lines[0] == "0" and lines[1].lstrip("-").isdigit():
            return [{"kind": "L", "src": path, "topic": topic, "part": part, "off1": int(lines[1])}]
        return [
            finding_row(
                path,
                None,
                None,
                "warn",
                "unreadable_checkpoint",
                f"{path}: {content[:40]!r}",
                None,
                None,
                topic,
                part,
            )
        ]
    if kind != "log":
        return []
    assert topic is not None and part is not None and seg is not None
    if topic == OFFSETS_TOPIC:
        return _decode_offsets_segment(
            path, part, seg, content, window, num_partitions, future_limit_ms
        )
    return _decode_topic_segment(path, topic, part, seg, content)


def decode_batches(
    batches: Iterator[pa.RecordBatch],
    *,
    window: int,
    num_partitions: int,
    future_limit_ms: int,
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: binaryFile batches in, ``SCHEMA`` batches out."""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the loops allocate many short-lived tuples; a paused GC is ~4x cheaper
    try:
        for batch in batches:
            paths = batch.column("path").to_pylist()
            contents = batch.column("content")
            for i, path in enumerate(paths):
                content = contents[i].as_py() or b""
                rows = decode_file(
                    path,
                    content,
                    window=window,
                    num_partitions=num_partitions,
                    future_limit_ms=future_limit_ms,
                )
                if rows:
                    cols = {n: [r.get(n) for r in rows] for n in NAMES}
                    yield pa.RecordBatch.from_pydict(cols, schema=SCHEMA)
    finally:
        if gc_was_enabled:
            gc.enable()
