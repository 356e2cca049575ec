"""Offset commits of one segment, aggregated per key column by column (numpy).

How this works: offset commits -- nearly every record of an offsets segment -- are decoded
by ``decode_offset_commit_values`` and aggregated per (group, topic, partition) key after one
stable sort by key (``offset_commit_rows``): each key's records form a run in file order, so
"the previous record of this key" is the previous element and every per-record check
(rewinds, timestamp and leader-epoch regressions) is a shifted comparison over the whole
segment. The result is one ``K`` row per key, its ``W`` window rows, and findings carrying
their place in the file so decode.py can sort them with the rest.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from coordinator.audit.columns import (
    RecordColumns,
    decode_offset_commit_values,
)
from coordinator.audit.schema import CommitKey, Finding, Ints, Row, finding_row, value_finding_row
from storage.records import (
    OffsetsFormatError,
)


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


def offset_commit_rows(
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
        f.add(
            i, 0, value_finding_row(src, opart, seg, "offset commit", error, int(c.lo[i]), g, t, p)
        )
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
        self.add(
            i, rank, finding_row(self.src, self.opart, self.seg, "warn", check, detail, lo, *key)
        )


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
