"""Executor-side decoder: one segment file in, a few summary rows out (numpy + pyarrow).

How this works
--------------
Spark's ``binaryFile`` source hands ``mapInArrow`` Arrow batches of (path, content) rows, one
file per task.  ``decode_batches`` walks each file with kgc's own codec
(``storage.record_batch`` / ``storage.offsets_format``, shared with the server, and the audit's
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
   and aggregated per key after one stable sort by key (``_offset_commit_rows``): each key's
   records form a run in file order, so "the previous record of this key" is the previous
   element and every per-record check is a shifted comparison over the whole segment;
4. the rare rest (group metadata, consumer-group records, unknown or broken keys) goes
   through a per-record loop.

Findings carry their place in the file (batch, record, rank) and are sorted at the end, so
the rows come out exactly as a single pass over the records would produce them.
"""

from __future__ import annotations

import gc
import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from coordinator.audit.columns import (
    RecordColumns,
    decode_offset_commit_values,
    key_ids,
    record_columns,
)
from coordinator.audit.consumer_groups import SegmentFold, key_second, value_doc
from storage.consumer_group_format import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    decode_consumer_group_value,
)
from storage.local.manager import parse_partition_dir
from storage.local.segment import parse_segment_name
from storage.offsets_format import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetsFormatError,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    partition_for,
)
from storage.record_batch import CorruptBatchError, iter_batches, verify_crc

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

CATALOG_NAME = "topics.json"
CHECKPOINT_NAME = "log-start-offset"
_TIMELINE_POINTS = 256

_COLUMNS: list[tuple[str, pa.DataType, str]] = [
    ("kind", pa.string(), "string"),
    ("src", pa.string(), "string"),
    ("opart", pa.int32(), "int"),
    ("seg", pa.int64(), "bigint"),
    ("grp", pa.string(), "string"),
    ("topic", pa.string(), "string"),
    ("part", pa.int32(), "int"),
    ("lo1", pa.int64(), "bigint"),
    ("lo2", pa.int64(), "bigint"),
    ("off1", pa.int64(), "bigint"),
    ("off2", pa.int64(), "bigint"),
    ("ts1", pa.int64(), "bigint"),
    ("ts2", pa.int64(), "bigint"),
    ("tsmax", pa.int64(), "bigint"),
    ("ep1", pa.int32(), "int"),
    ("ep2", pa.int32(), "int"),
    ("n", pa.int64(), "bigint"),
    ("n2", pa.int64(), "bigint"),
    ("lead_tomb", pa.int64(), "bigint"),
    ("last_tomb", pa.bool_(), "boolean"),
    ("expire", pa.int64(), "bigint"),
    ("state_ts", pa.int64(), "bigint"),
    ("members", pa.int32(), "int"),
    ("ptype", pa.string(), "string"),
    ("expected", pa.int32(), "int"),
    ("severity", pa.string(), "string"),
    ("chk", pa.string(), "string"),
    ("detail", pa.string(), "string"),
    ("size", pa.int64(), "bigint"),
]
SCHEMA = pa.schema([(n, t) for n, t, _ in _COLUMNS])
SPARK_SCHEMA = ", ".join(f"{n} {s}" for n, _, s in _COLUMNS)
_NAMES = [n for n, _, _ in _COLUMNS]

Row = dict[str, Any]
_CONSUMER_GROUP_KEYS = (
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupRegularExpressionKey,
)


def classify_path(path: str) -> tuple[str, str | None, int | None, int | None]:
    """(kind, topic, partition, segment base) of a path: kind is log/checkpoint/catalog/other."""
    parts = path.rstrip("/").rsplit("/", 2)
    name = parts[-1]
    if name == CATALOG_NAME:
        return "catalog", None, None, None
    if len(parts) < 2:
        return "other", None, None, None
    parsed = parse_partition_dir(parts[-2])
    if parsed is None:
        return "other", None, None, None
    if name == CHECKPOINT_NAME:
        return "checkpoint", parsed[0], parsed[1], None
    base = parse_segment_name(name)
    if base is None:
        return "other", None, None, None
    return "log", parsed[0], parsed[1], base


def _value_finding(
    src: str,
    opart: int,
    seg: int,
    what: str,
    error: OffsetsFormatError,
    log_offset: int,
    group: str,
    topic: str | None = None,
    partition: int | None = None,
) -> Row:
    """A value that does not decode: a version we do not know (warn) or garbage (error)."""
    unknown_version = "version" in str(error)
    return _finding(
        src,
        opart,
        seg,
        "warn" if unknown_version else "error",
        "unknown_record_version" if unknown_version else "undecodable_record",
        f"{what} value: {error}",
        log_offset,
        group,
        topic,
        partition,
    )


def _finding(
    src: str,
    opart: int | None,
    seg: int | None,
    severity: str,
    check: str,
    detail: str,
    log_offset: int | None = None,
    group: str | None = None,
    topic: str | None = None,
    partition: int | None = None,
) -> Row:
    return {
        "kind": "F",
        "src": src,
        "opart": opart,
        "seg": seg,
        "grp": group,
        "topic": topic,
        "part": partition,
        "lo1": log_offset,
        "severity": severity,
        "chk": check,
        "detail": detail,
    }


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


# Where a finding belongs in file order: (batch, record, rank within the record), with
# record -1 for a batch's own findings.  Findings are made per kind and sorted at the end.
Order = tuple[int, int, int]
Finding = tuple[Order, Row]
CommitKey = tuple[str, str, int]  # (group, topic, partition)
Ints = NDArray[np.int64]


def _select(mask: NDArray[np.bool_]) -> Ints | slice:
    """Indices where ``mask`` is set; a slice (indexing with it is a free view) if everywhere."""
    return slice(None) if mask.all() else np.flatnonzero(mask)


def _runs(sorted_keys: Ints) -> tuple[Ints, Ints]:
    """First and last index of each run of equal values in ``sorted_keys``."""
    if not len(sorted_keys):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    first = np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1])))
    return first, np.append(first[1:] - 1, len(sorted_keys) - 1)


def _or_none(values: NDArray[Any], present: NDArray[np.bool_]) -> list[Any]:
    return [v if p else None for v, p in zip(values.tolist(), present.tolist(), strict=True)]


def _offset_commit_rows(
    src: str,
    opart: int,
    seg: int,
    cols: RecordColumns,
    recs: Ints,
    key: Ints,
    keys: list[CommitKey],
    rec_batch: Ints,
    window: int,
    future_limit_ms: int,
    expected: dict[str, int],
) -> tuple[list[Row], list[Finding]]:
    """K and W rows, and per-record findings, of the offset-commit records ``recs``.

    ``key[i]`` is the index in ``keys`` of record ``recs[i]``.  A record is a commit (its value
    decodes), a tombstone, or undecodable (a finding; it counts for lo1/lo2 only).  After a
    stable sort by key each key's records are a run in file order, so "the previous record of
    the same key" is the previous element and each check of a per-record loop becomes one
    shifted comparison over the whole segment.  The steps below each take one such view.
    """
    nk = len(keys)
    c, value_errors = _sorted_commits(cols, recs, key, nk)
    f = _CommitFindings(src, opart, seg, keys, rec_batch, c)
    for i, error in value_errors:
        g, t, p = keys[c.key[i]]
        f.add(i, 0, _value_finding(src, opart, seg, "offset commit", error, int(c.lo[i]), g, t, p))
    first, last = _runs(c.key)  # all records: lo1 / lo2
    tombs = _tombstones_and_order(f, c, nk)
    cv = _commits_only(c, first, last)
    stats = _first_and_last_commits(cv, nk)
    for j in np.flatnonzero(cv.ts > future_limit_ms).tolist():
        detail = f"commit timestamp {cv.ts[j]} is after the audit time"
        f.warn(int(cv.at[j]), 3, "commit_timestamp_in_future", detail)
    ep1, ep2 = _leader_epochs(f, cv, nk)
    windows, w_count = _windows(cv, nk, window)
    rows = _key_rows(
        src,
        opart,
        seg,
        keys,
        c.lo[first],
        c.lo[last],
        stats,
        tombs,
        ep1,
        ep2,
        windows,
        w_count,
        expected,
    )
    return rows, f.found


class _Commits(NamedTuple):
    """A segment's offset-commit records sorted by key, stably (a key's records in file order).

    ``commit``: the value decodes; ``tomb``: no value.  The value columns read 0 elsewhere.
    """

    rec: Ints  # the record, as an index into the segment's RecordColumns
    key: Ints  # its key, as an index into the segment's list of CommitKey
    lo: Ints  # its log offset
    tomb: NDArray[np.bool_]
    commit: NDArray[np.bool_]
    off: Ints
    ts: Ints
    ep: Ints
    expire: Ints


def _sorted_commits(
    cols: RecordColumns, recs: Ints, key: Ints, nk: int
) -> tuple[_Commits, list[tuple[int, OffsetsFormatError]]]:
    """Decode the values of the records ``recs`` (``key[i]`` is record ``recs[i]``'s key) and
    sort the records by key; also the values that do not decode, as (index in the sorted
    order, error), in the order they came in the file."""
    n = len(recs)
    # Values are decoded in file order: their bytes are then read front to back.
    vlen = cols.value_len[recs]
    tomb = vlen < 0
    with_value = _select(~tomb)
    vals = decode_offset_commit_values(
        cols.data, cols.value_start[recs][with_value], vlen[with_value]
    )
    value_cols = [vals.offset, vals.commit_timestamp, vals.leader_epoch, vals.expire_timestamp]
    if not isinstance(with_value, slice):  # spread over all records; tombstones read 0
        spread = [np.zeros(n, np.int64) for _ in value_cols]
        for full, part in zip(spread, value_cols, strict=True):
            full[with_value] = part
        value_cols = spread
    value_rows = np.arange(n)[with_value]
    commit = ~tomb
    commit[value_rows[list(vals.errors)]] = False

    by_key = np.argsort(key.astype(np.int16) if nk < 1 << 15 else key, kind="stable")
    recs = recs[by_key]
    off, ts, ep, expire = (c[by_key] for c in value_cols)
    errors: list[tuple[int, OffsetsFormatError]] = []
    if vals.errors:
        sorted_at = np.empty(n, np.int64)
        sorted_at[by_key] = np.arange(n)
        errors = [(int(sorted_at[value_rows[v]]), e) for v, e in vals.errors.items()]
    sorted_commits = _Commits(
        recs, key[by_key], cols.offset[recs], tomb[by_key], commit[by_key], off, ts, ep, expire
    )
    return sorted_commits, errors


@dataclass(slots=True)
class _CommitFindings:
    """The findings of a segment's offset-commit records, each at its place in file order."""

    src: str
    opart: int
    seg: int
    keys: list[CommitKey]
    rec_batch: Ints  # each record's batch
    c: _Commits
    found: list[Finding] = field(default_factory=list)

    def add(self, i: int, rank: int, row: Row) -> None:
        """``row`` about the sorted record ``i``, ``rank``-th among that record's findings."""
        r = int(self.c.rec[i])
        self.found.append(((int(self.rec_batch[r]), r, rank), row))

    def warn(self, i: int, rank: int, check: str, detail: str) -> None:
        lo, key = int(self.c.lo[i]), self.keys[self.c.key[i]]
        self.add(i, rank, _finding(self.src, self.opart, self.seg, "warn", check, detail, lo, *key))


class _Tombstones(NamedTuple):
    """Per key: whether its last event is a tombstone, the log offset of a tombstone that is
    its first event (where ``has_lead``), and its number of tombstones."""

    last_tomb: NDArray[np.bool_]
    has_lead: NDArray[np.bool_]
    lead_tomb: Ints
    ntomb: Ints


def _tombstones_and_order(f: _CommitFindings, c: _Commits, nk: int) -> _Tombstones:
    """Commits and tombstones ("events"): a tombstone ends a run of commits for the rewind
    and timestamp checks (offset_rewind, commit_timestamp_backwards between consecutive
    commits of a key), and decides lead_tomb / last_tomb."""
    ev = _select(c.commit | c.tomb)
    ev_key, ev_commit, ev_off, ev_ts = c.key[ev], c.commit[ev], c.off[ev], c.ts[ev]
    ev_at = np.arange(len(c.key))[ev]
    after_commit = ev_key[1:] == ev_key[:-1]
    last_tomb = np.zeros(nk, np.bool_)
    has_lead = np.zeros(nk, np.bool_)
    lead_tomb = np.zeros(nk, np.int64)
    ntomb = np.zeros(nk, np.int64)
    if c.tomb.any():
        after_commit &= ev_commit[1:] & ev_commit[:-1]
        first_ev, last_ev = _runs(ev_key)
        last_tomb[ev_key[last_ev]] = ~ev_commit[last_ev]
        leading = first_ev[~ev_commit[first_ev]]  # keys whose first event is a tombstone
        has_lead[ev_key[leading]] = True
        lead_tomb[ev_key[leading]] = c.lo[ev_at[leading]]
        ntomb = np.bincount(ev_key[~ev_commit], minlength=nk)
    for j in (np.flatnonzero(after_commit & (ev_off[1:] < ev_off[:-1])) + 1).tolist():
        detail = f"committed offset went from {ev_off[j - 1]} to {ev_off[j]}"
        f.warn(int(ev_at[j]), 0, "offset_rewind", detail)
    for j in (np.flatnonzero(after_commit & (ev_ts[1:] < ev_ts[:-1])) + 1).tolist():
        detail = f"commit timestamp went from {ev_ts[j - 1]} to {ev_ts[j]}"
        f.warn(int(ev_at[j]), 1, "commit_timestamp_backwards", detail)
    return _Tombstones(last_tomb, has_lead, lead_tomb, ntomb)


class _CommitView(NamedTuple):
    """The commits alone (records whose value decodes), still sorted by key."""

    key: Ints
    lo: Ints
    off: Ints
    ts: Ints
    ep: Ints
    expire: Ints
    at: Ints  # index in the sorted records (``_Commits``)
    first: Ints  # first and last commit of each key that has one
    last: Ints


def _commits_only(c: _Commits, first: Ints, last: Ints) -> _CommitView:
    """The commits of ``c``; ``first`` / ``last`` are the runs of all of ``c``'s records."""
    s = _select(c.commit)
    key = c.key[s]
    first_c, last_c = (first, last) if isinstance(s, slice) else _runs(key)
    at = np.arange(len(c.key))[s]
    return _CommitView(key, c.lo[s], c.off[s], c.ts[s], c.ep[s], c.expire[s], at, first_c, last_c)


class _CommitStats(NamedTuple):
    """Per key: number of commits, first / last committed offset and commit time, latest
    commit time, and the expire timestamp of the last commit (0 for keys without commits)."""

    commits: Ints
    off1: Ints
    off2: Ints
    ts1: Ints
    ts2: Ints
    tsmax: Ints
    exp: Ints


def _first_and_last_commits(cv: _CommitView, nk: int) -> _CommitStats:
    """First / last values of each key's commits."""
    with_c = cv.key[cv.first]
    count = np.bincount(cv.key, minlength=nk)
    off1, off2, ts1, ts2, tsmax, exp = (np.zeros(nk, np.int64) for _ in range(6))
    off1[with_c], off2[with_c] = cv.off[cv.first], cv.off[cv.last]
    ts1[with_c], ts2[with_c] = cv.ts[cv.first], cv.ts[cv.last]
    if len(cv.ts):
        tsmax[with_c] = np.maximum.reduceat(cv.ts, cv.first)
    exp[with_c] = cv.expire[cv.last]
    return _CommitStats(count, off1, off2, ts1, ts2, tsmax, exp)


def _leader_epochs(f: _CommitFindings, cv: _CommitView, nk: int) -> tuple[Ints, Ints]:
    """Each key's first and last known leader epoch (-1: none), and leader_epoch_regression
    findings.  Among commits with a known epoch (not -1), a key's previous one is the latest
    earlier known epoch; tombstones do not reset it."""
    known = _select(cv.ep != -1)
    k_key, k_ep, k_at = cv.key[known], cv.ep[known], cv.at[known]
    first_k, last_k = (cv.first, cv.last) if isinstance(known, slice) else _runs(k_key)
    ep1 = np.full(nk, -1, np.int64)
    ep2 = np.full(nk, -1, np.int64)
    ep1[k_key[first_k]] = k_ep[first_k]
    ep2[k_key[last_k]] = k_ep[last_k]
    for j in (np.flatnonzero((k_key[1:] == k_key[:-1]) & (k_ep[1:] < k_ep[:-1])) + 1).tolist():
        detail = f"leader epoch went from {k_ep[j - 1]} to {k_ep[j]}"
        f.warn(int(k_at[j]), 2, "leader_epoch_regression", detail)
    return ep1, ep2


def _windows(
    cv: _CommitView, nk: int, window: int
) -> tuple[Iterator[tuple[int, int, int, int]], list[int]]:
    """The commits at most ``window - 1`` before their key's last one, as (log offset,
    committed offset, commit time, leader epoch) key after key, and how many each key has."""
    last_of_key = np.zeros(nk, np.int64)
    last_of_key[cv.key[cv.first]] = cv.last
    w = np.flatnonzero(last_of_key[cv.key] - np.arange(len(cv.key)) < window)
    windows = zip(
        cv.lo[w].tolist(), cv.off[w].tolist(), cv.ts[w].tolist(), cv.ep[w].tolist(), strict=True
    )
    return windows, np.bincount(cv.key[w], minlength=nk).tolist()


def _key_rows(
    src: str,
    opart: int,
    seg: int,
    keys: list[CommitKey],
    lo1: Ints,
    lo2: Ints,
    stats: _CommitStats,
    tombs: _Tombstones,
    ep1: Ints,
    ep2: Ints,
    windows: Iterator[tuple[int, int, int, int]],
    w_count: list[int],
    expected: dict[str, int],
) -> list[Row]:
    """One K row per key (in order of first appearance), each followed by its W rows."""
    any_commit = stats.commits > 0
    per_key = zip(
        keys,
        lo1.tolist(),
        lo2.tolist(),
        _or_none(stats.off1, any_commit),
        _or_none(stats.off2, any_commit),
        _or_none(stats.ts1, any_commit),
        _or_none(stats.ts2, any_commit),
        _or_none(stats.tsmax, any_commit),
        ep1.tolist(),
        ep2.tolist(),
        stats.commits.tolist(),
        tombs.ntomb.tolist(),
        _or_none(tombs.lead_tomb, tombs.has_lead),
        tombs.last_tomb.tolist(),
        np.where(any_commit, stats.exp, -1).tolist(),
        w_count,
        strict=True,
    )
    rows: list[Row] = []
    for (g, t, p), lo1, lo2, o1, o2, t1, t2, tmax, e1, e2, cnt, nt, lead, lt, ex, nw in per_key:
        rows.append(
            {
                "kind": "K",
                "src": src,
                "opart": opart,
                "seg": seg,
                "grp": g,
                "topic": t,
                "part": p,
                "lo1": lo1,
                "lo2": lo2,
                "off1": o1,
                "off2": o2,
                "ts1": t1,
                "ts2": t2,
                "tsmax": tmax,
                "ep1": e1,
                "ep2": e2,
                "n": cnt,
                "n2": nt,
                "lead_tomb": lead,
                "last_tomb": lt,
                "expire": ex,
                "expected": expected[g],
            }
        )
        for w_lo, w_off, w_ts, w_ep in itertools.islice(windows, nw):
            rows.append(
                {
                    "kind": "W",
                    "opart": opart,
                    "seg": seg,
                    "grp": g,
                    "topic": t,
                    "part": p,
                    "lo1": w_lo,
                    "off1": w_off,
                    "ts1": w_ts,
                    "ep1": w_ep,
                    "expected": expected[g],  # the job routes a group's rows by it
                }
            )
    return rows


def _classify_keys(
    cols: RecordColumns, ids: Ints, firsts: Ints, num_partitions: int
) -> tuple[
    list[CommitKey],
    Ints,
    dict[int, str | ConsumerGroupKey | UnknownKey | OffsetsFormatError],
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
    other: dict[int, str | ConsumerGroupKey | UnknownKey | OffsetsFormatError] = {}
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
    other_keys: dict[int, str | ConsumerGroupKey | UnknownKey | OffsetsFormatError],
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
                    found.append((order, _value_finding(src, opart, seg, what, e, lo, k.group)))
                    continue  # its effect is unknown: the key keeps its previous record
            cgroups.add(k.group, k.version, key_second(k), lo, doc)
            continue
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
            found.append((order, _value_finding(src, opart, seg, "group metadata", e, lo, k)))
            continue
        previous = gs.metadata(gv)
        if previous is not None:
            finding = _finding(
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
        return _finding(src, opart, seg, "error", "undecodable_record", "record without a key", lo)
    if isinstance(key, OffsetsFormatError):
        return _finding(src, opart, seg, "error", "undecodable_record", f"key: {key}", lo)
    return _finding(
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
    columns and number their keys; offset commits by key (``_offset_commit_rows``); the rest
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
        finding = _finding(src, opart, seg, "error", check, str(error), walk.span_base[i])
        found.append(((walk.span_batch[i], -1, 1), finding))
    rec_batch = np.array(walk.span_batch, np.int64)[cols.batch]
    ids, firsts = key_ids(cols)
    keys, rec_key, other_keys, expected = _classify_keys(cols, ids, firsts, num_partitions)
    commits = np.flatnonzero(rec_key >= 0)
    key_rows, commit_found = _offset_commit_rows(
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
                finding = _finding(
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
                finding = _finding(
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
                _finding(
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
            _finding(
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
            _finding(
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
            _finding(
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
            return [_finding(path, None, None, "error", "unreadable_catalog", f"{path}: {e}")]
    if kind == "checkpoint":
        lines = content.decode(errors="replace").split()
        if len(lines) == 2 and lines[0] == "0" and lines[1].lstrip("-").isdigit():
            return [{"kind": "L", "src": path, "topic": topic, "part": part, "off1": int(lines[1])}]
        return [
            _finding(
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
                    cols = {n: [r.get(n) for r in rows] for n in _NAMES}
                    yield pa.RecordBatch.from_pydict(cols, schema=SCHEMA)
    finally:
        if gc_was_enabled:
            gc.enable()
