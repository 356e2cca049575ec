"""Executor-side stitching and reporting: decoded segment summaries in, report rows out.

How this works
--------------
``decode`` leaves one ``K`` row per (segment, key), the last commits of each key per segment
(``W``), one ``G`` row per (segment, group), one ``S`` row per segment and ``F`` findings.
The job routes every row of a group to one task (by the offsets partition Kafka would store
the group in) and ``report_table`` runs there:

* ``stitch_rows`` walks each offsets partition's segments in base-offset order, exactly as a
  replay of the log would: overlapping segments; a rewind / commit-timestamp or leader-epoch
  regression between the last commit of one segment and the first of the next; tombstones
  with no earlier record of their key; generation regressions; the live state (a key's
  committed offset is its last commit unless a tombstone followed; a group's state comes from
  its last GroupMetadata record: tombstone = Dead, no members = Empty, else Stable); and per
  live partition, with the topic logs' figures (``Context``), lag, log-start / log-end
  checks, unknown partitions, retention and Burrow's status over the last ``window`` commits,
  the lag at each commit estimated from the topic's time line;
* consumer groups (KIP-848, the ``Q`` rows): each group's records replayed, last value per
  key (``consumer_groups.report_group``): its G row (state Empty / Assigning / Reconciling /
  Stable / Dead, members, group epoch), one ``M`` row per member and the checks of its
  assignments; a group converted between protocols shows as the kind of its newest record;
* ``finalize`` resolves groups stored in two offsets partitions, builds the per-group rows
  and the lifecycle findings (offsets without a live group and the reverse), sorts the
  findings, marks the task's first ``top`` and adds one ``Z`` row: a JSON summary (finding
  counts, partitions and lag by status, segment totals) the driver adds up.

Everything is pure Python on plain dicts so it is unit-testable without Spark.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pyarrow as pa

from coordinator.audit.consumer_groups import report_group
from coordinator.audit.schema import OUT_NAMES, OUT_SCHEMA, OUT_SPARK_SCHEMA
from storage.records import OFFSETS_TOPIC

__all__ = [
    "OUT_SCHEMA",
    "OUT_SPARK_SCHEMA",
    "SEVERITY_ORDER",
    "STATUS_ORDER",
    "Context",
    "TopicLog",
    "burrow_status",
    "decoded_finding",
    "finding_sort_key",
    "report_rows",
    "report_table",
    "row_name",
    "stitch_rows",
]


@dataclass(frozen=True, slots=True)
class TopicLog:
    log_start: int
    log_end: int | None
    last_segment: int
    # (max timestamp so far, log end offset after that batch), ascending
    timeline: tuple[tuple[int, int], ...] = ()

    def end_at(self, ts: int) -> int:
        """Log end offset at time ``ts``: newest timeline point not after ``ts``."""
        i = bisect.bisect_right(self.timeline, (ts, 2**63))
        if i == 0:
            return self.last_segment  # before the active segment: at most its base offset
        return self.timeline[i - 1][1]


@dataclass(frozen=True, slots=True)
class Context:
    now_ms: int
    window: int
    retention_ms: int
    num_partitions: int
    topics: dict[tuple[str, int], TopicLog] = field(default_factory=dict)
    catalog: dict[str, int] | None = None
    # what an S row is: a "segment" file, or a "row" of kgc_record_log (--storage-url)
    pieces: str = "segment"
    # topic name -> Kafka topic id (hex), from the catalog: consumer groups name topics by id
    topic_ids: dict[str, str] = field(default_factory=dict)


def row_name(opart: int, base_offset: int) -> str:
    """A kgc_record_log row's name in findings (what a segment's path is for files)."""
    return f"pg:{OFFSETS_TOPIC}-{opart}@{base_offset}"


def burrow_status(
    window: list[tuple[int, int, int]], lag_now: int | None, now_ms: int
) -> str | None:
    """Burrow's evaluation over (committed offset, commit ms, lag at commit), oldest first."""
    if lag_now is None or not window:
        return None
    if lag_now == 0 or any(lag == 0 for _, _, lag in window):
        return "OK"
    if any(window[i][0] < window[i - 1][0] for i in range(1, len(window))):
        return "REWIND"
    first_ts, last_ts = window[0][1], window[-1][1]
    if now_ms - last_ts > last_ts - first_ts:
        return "STOP"
    if len(window) >= 2 and all(o == window[0][0] for o, _, _ in window):
        return "STALL"
    if len(window) >= 2 and all(window[i][2] >= window[i - 1][2] for i in range(1, len(window))):
        return "WARN"
    return "OK"


def _f(
    sev: str,
    check: str,
    opart: int,
    detail: str,
    log_offset: int | None,
    group: str | None = None,
    topic: str | None = None,
    partition: int | None = None,
) -> dict[str, Any]:
    return {
        "kind": "F",
        "severity": sev,
        "check": check,
        "group": group,
        "topic": topic,
        "partition": partition,
        "log_offset": log_offset,
        "detail": detail,
        "offsets_partition": opart,
    }


Row = dict[str, Any]
Key = tuple[str, str, int]  # (group, topic, partition) of committed offsets
GroupState = tuple[str | None, int | None]  # (state, state timestamp) of a group's metadata


@dataclass(slots=True)
class _Subjects:
    """One offsets partition's decoded rows, by what they are about."""

    keys: dict[Key, list[Row]] = field(default_factory=dict)  # K rows of each key
    windows: dict[Key, list[tuple[int, int, int]]] = field(default_factory=dict)  # W rows
    groups: dict[str, list[Row]] = field(default_factory=dict)  # G rows of each group
    cgroups: dict[str, list[Row]] = field(default_factory=dict)  # Q rows of each group
    expected: dict[str, int] = field(default_factory=dict)  # the partition Kafka would use


def stitch_rows(opart: int, rows: list[Row], ctx: Context) -> list[Row]:
    """All report rows for one offsets partition from its decoded summary rows.

    The steps, in the order their rows come out: segments that overlap; each group's metadata
    across segments and its state; each key's commits across segments and, if it is live, its
    partition row and checks; groups whose records are not where Kafka would keep them.
    """
    out = _overlapping_segments(opart, rows, ctx.pieces)
    subjects = _by_subject(rows)
    group_state: dict[str, GroupState] = {}
    # a group's G row and the log offset of its newest record: classic or consumer group
    metas: dict[str, tuple[Row, GroupState, int]] = {}
    for grp, gl in subjects.groups.items():
        gl.sort(key=lambda r: r["seg"])
        out += _group_history(opart, grp, gl)
        row, gstate = _group_row(opart, grp, gl, subjects.expected[grp])
        metas[grp] = (row, gstate, max(r["lo2"] for r in gl))
    for grp, ql in subjects.cgroups.items():
        row, newest, members, found = report_group(
            opart, grp, ql, subjects.expected[grp], ctx.catalog, ctx.topic_ids
        )
        out += members
        out += found
        # A group converted between the protocols keeps the kind it was converted to last.
        if grp not in metas or newest > metas[grp][2]:
            metas[grp] = (row, (row["state"], None), newest)
    for grp, (row, gstate, _newest) in metas.items():
        out.append(row)
        group_state[grp] = gstate
    for key, kl in subjects.keys.items():
        kl.sort(key=lambda r: r["seg"])
        found, count, first_ts = _key_history(opart, key, kl)
        out += found
        last = kl[-1]
        if last["n"] == 0 or last["last_tomb"]:
            continue  # deleted: no live committed offset
        out += _live_partition(
            opart,
            key,
            last,
            count,
            first_ts,
            subjects.windows.get(key, []),
            group_state.get(key[0], (None, None)),
            subjects.expected[key[0]],
            ctx,
        )
    out += _wrong_partition(opart, subjects, ctx.num_partitions)
    return out


def _overlapping_segments(opart: int, rows: list[Row], pieces: str = "segment") -> list[Row]:
    """A segment (or row) starting at or below an offset an earlier one (by base offset)
    reaches."""
    out: list[Row] = []
    segs = sorted((r for r in rows if r["kind"] == "S"), key=lambda r: r["seg"])
    reach: int | None = None
    for s in segs:
        if s["lo1"] is not None and reach is not None and s["lo1"] <= reach:
            name = row_name(opart, s["seg"]) if pieces == "row" else f"segment {s['seg']:020d}"
            out.append(
                _f(
                    "error",
                    "overlapping_segments",
                    opart,
                    f"{name} starts at offset {s['lo1']} but an earlier {pieces} reaches {reach}",
                    s["lo1"],
                    None,
                    OFFSETS_TOPIC,
                    opart,
                )
            )
        if s["lo2"] is not None:
            reach = s["lo2"] if reach is None else max(reach, s["lo2"])
    return out


def _by_subject(rows: list[Row]) -> _Subjects:
    """The K, W and G rows by key or group, in the order they arrive."""
    s = _Subjects()
    for r in rows:
        kind = r["kind"]
        if kind == "K":
            s.keys.setdefault((r["grp"], r["topic"], r["part"]), []).append(r)
            s.expected[r["grp"]] = r["expected"]
        elif kind == "W":
            s.windows.setdefault((r["grp"], r["topic"], r["part"]), []).append(
                (r["lo1"], r["off1"], r["ts1"])
            )
        elif kind == "G":
            s.groups.setdefault(r["grp"], []).append(r)
            s.expected[r["grp"]] = r["expected"]
        elif kind == "Q":
            s.cgroups.setdefault(r["grp"], []).append(r)
            s.expected[r["grp"]] = r["expected"]
    return s


def _group_history(opart: int, grp: str, gl: list[Row]) -> list[Row]:
    """Findings across a group's segments (``gl`` in segment order): a leading tombstone with
    no earlier record, a generation lower than the previous segment's last one."""
    out: list[Row] = []
    seen = 0
    prev_gen: int | None = None
    for r in gl:
        if r["lead_tomb"] is not None and seen == 0:
            out.append(
                _f(
                    "info",
                    "tombstone_without_record",
                    opart,
                    "group tombstone with no earlier group record in the log "
                    "(normal once compaction removed the record)",
                    r["lead_tomb"],
                    grp,
                )
            )
        if (
            r["lead_tomb"] is None
            and r["n"] > 0
            and prev_gen is not None
            and r["ep1"] is not None
            and r["ep1"] < prev_gen
        ):
            out.append(
                _f(
                    "warn",
                    "generation_regression",
                    opart,
                    f"generation went from {prev_gen} to {r['ep1']}",
                    r["lo1"],
                    grp,
                )
            )
        seen += r["n"]
        prev_gen = None if r["last_tomb"] else (r["ep2"] if r["n"] > 0 else prev_gen)
    return out


def _group_row(opart: int, grp: str, gl: list[Row], expected: int) -> tuple[Row, GroupState]:
    """The group's live state from its last GroupMetadata record (tombstone = Dead, no members
    = Empty, else Stable): its G row, and (state, state timestamp) for the retention check."""
    last = gl[-1]
    dead = bool(last["last_tomb"]) or last["n"] == 0
    state = "Dead" if dead else ("Empty" if last["members"] == 0 else "Stable")
    row = {
        "kind": "G",
        "group": grp,
        "state": state,
        "offsets_partition": opart,
        "expected_partition": expected,
        "members": None if dead else last["members"],
        "generation": None if dead else last["ep2"],
        "state_ms": None if dead else last["state_ts"],
        "log_offset": min(r["lo1"] for r in gl),
    }
    return row, (state, None if dead else last["state_ts"])


def _key_history(opart: int, key: Key, kl: list[Row]) -> tuple[list[Row], int, int | None]:
    """Findings across a key's segments (``kl`` in segment order), its number of commits and
    its first commit time.

    Checked between the last commit of one segment and the first of the next, as within a
    segment: a leading tombstone with no earlier commit, a rewind or commit time going back
    (unless a tombstone came between), a leader epoch lower than the last known one.
    """
    grp, topic, part = key
    out: list[Row] = []
    prev: Row | None = None
    last_epoch: int | None = None
    count = 0  # commits so far, also: whether any came before
    first_ts: int | None = None
    for r in kl:
        if r["lead_tomb"] is not None and count == 0:
            out.append(
                _f(
                    "info",
                    "tombstone_without_record",
                    opart,
                    "offset tombstone with no earlier commit for the key in the log "
                    "(normal once compaction removed the commit)",
                    r["lead_tomb"],
                    grp,
                    topic,
                    part,
                )
            )
        if (
            r["lead_tomb"] is None
            and r["n"] > 0
            and prev is not None
            and prev["off2"] is not None
            and not prev["last_tomb"]
        ):
            if r["off1"] < prev["off2"]:
                out.append(
                    _f(
                        "warn",
                        "offset_rewind",
                        opart,
                        f"committed offset went from {prev['off2']} to {r['off1']}",
                        r["lo1"],
                        grp,
                        topic,
                        part,
                    )
                )
            if r["ts1"] < prev["ts2"]:
                out.append(
                    _f(
                        "warn",
                        "commit_timestamp_backwards",
                        opart,
                        f"commit timestamp went from {prev['ts2']} to {r['ts1']}",
                        r["lo1"],
                        grp,
                        topic,
                        part,
                    )
                )
        if r["ep1"] not in (None, -1) and last_epoch is not None and r["ep1"] < last_epoch:
            out.append(
                _f(
                    "warn",
                    "leader_epoch_regression",
                    opart,
                    f"leader epoch went from {last_epoch} to {r['ep1']}",
                    r["lo1"],
                    grp,
                    topic,
                    part,
                )
            )
        if r["ep2"] not in (None, -1):
            last_epoch = r["ep2"]
        count += r["n"]
        if r["n"] > 0 and (first_ts is None or r["ts1"] < first_ts):
            first_ts = r["ts1"]
        prev = r
    return out, count, first_ts


def _live_partition(
    opart: int,
    key: Key,
    last: Row,
    count: int,
    first_ts: int | None,
    window: list[tuple[int, int, int]],
    group_state: GroupState,
    expected: int,
    ctx: Context,
) -> list[Row]:
    """A live key's P row (committed offset, lag, Burrow's status over the last commits) and
    the checks of its committed offset against the topic's log, catalog and retention."""
    grp, topic, part = key
    committed = int(last["off2"])
    tl = ctx.topics.get((topic, part))
    log_end = tl.log_end if tl is not None else None
    log_start = tl.log_start if tl is not None else None
    lag = None if log_end is None else max(log_end - committed, 0)
    win = sorted(window)[-ctx.window :]
    wl = [(o, ts, max((tl.end_at(ts) if tl is not None else o) - o, 0)) for _, o, ts in win]
    rec = int(last["lo2"])
    out: list[Row] = [
        {
            "kind": "P",
            "group": grp,
            "topic": topic,
            "partition": part,
            "committed_offset": committed,
            "log_end_offset": log_end,
            "lag": lag,
            "leader_epoch": last["ep2"],
            "last_commit_ms": last["ts2"],
            "commit_count": count,
            "status": burrow_status(wl, lag, ctx.now_ms),
            "log_start_offset": log_start,
            "offsets_partition": opart,
            "first_commit_ms": first_ts,
            "expected_partition": expected,
            "record_offset": rec,
        }
    ]
    out += _committed_offset_checks(opart, key, committed, rec, log_start, log_end, ctx.catalog)
    retention = _retention_finding(opart, key, last, rec, group_state, ctx)
    if retention is not None:
        out.append(retention)
    return out


def _committed_offset_checks(
    opart: int,
    key: Key,
    committed: int,
    rec: int,
    log_start: int | None,
    log_end: int | None,
    catalog: dict[str, int] | None,
) -> list[Row]:
    """A committed offset past the log end or below the log start, or for a partition the
    catalog does not have (``rec``: the log offset of the commit)."""
    grp, topic, part = key
    out: list[Row] = []
    if log_end is not None and committed > log_end:
        out.append(
            _f(
                "error",
                "commit_beyond_log_end",
                opart,
                f"committed offset {committed} is beyond the log end offset {log_end}",
                rec,
                grp,
                topic,
                part,
            )
        )
    if log_start is not None and committed < log_start:
        out.append(
            _f(
                "warn",
                "commit_below_log_start",
                opart,
                f"committed offset {committed} is below the log start offset {log_start}",
                rec,
                grp,
                topic,
                part,
            )
        )
    if catalog is not None:
        n = catalog.get(topic)
        if n is None or part >= n:
            out.append(
                _f(
                    "warn",
                    "commit_for_unknown_partition",
                    opart,
                    f"topic {topic} is not in topics.json"
                    if n is None
                    else f"topic {topic} has {n} partitions",
                    rec,
                    grp,
                    topic,
                    part,
                )
            )
    return out


def _retention_finding(
    opart: int, key: Key, last: Row, rec: int, group_state: GroupState, ctx: Context
) -> Row | None:
    """Offsets Kafka would have expired by ``ctx.now_ms``: of a group that is Empty or has no
    metadata, past their expire timestamp (v1) or older than the retention (counted from the
    group's emptying, else from the last commit)."""
    grp, topic, part = key
    gstate, state_ts = group_state
    if gstate not in (None, "Empty"):
        return None
    expire = last["expire"]
    ref = state_ts if gstate == "Empty" and state_ts and state_ts > 0 else last["ts2"]
    if not (
        (ctx.now_ms >= expire)
        if expire is not None and expire > 0
        else (ctx.now_ms - ref > ctx.retention_ms)
    ):
        return None
    return _f(
        "warn",
        "offsets_past_retention",
        opart,
        f"group is {gstate or 'without metadata'} since {ref}; offsets older "
        f"than the retention of {ctx.retention_ms // 60000} min are still present",
        rec,
        grp,
        topic,
        part,
    )


def _wrong_partition(opart: int, subjects: _Subjects, num_partitions: int) -> list[Row]:
    """Groups with records in this offsets partition that Kafka would keep in another one."""
    out: list[Row] = []
    for grp, exp in sorted(subjects.expected.items()):
        if exp != opart:
            first = min(
                [r["lo1"] for (g, _, _), kl in subjects.keys.items() if g == grp for r in kl]
                + [r["lo1"] for r in subjects.groups.get(grp, [])]
                + [r["lo1"] for r in subjects.cgroups.get(grp, [])]
            )
            out.append(
                _f(
                    "error",
                    "wrong_partition",
                    opart,
                    f"group records in {OFFSETS_TOPIC}-{opart}, but "
                    f"partition_for(group, {num_partitions}) = {exp}",
                    first,
                    grp,
                    OFFSETS_TOPIC,
                    opart,
                )
            )
    return out


# ------------------------------------------------------------------------------ final reports

STATUS_ORDER = ["OK", "WARN", "STALL", "STOP", "REWIND"]
SEVERITY_ORDER = ["info", "warn", "error"]
_STATUS_RANK = {s: i for i, s in enumerate(STATUS_ORDER)}
_SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITY_ORDER)}


def finding_sort_key(f: dict[str, Any]) -> tuple[Any, ...]:
    """The findings table's order: worst severity first, then check and keys (nulls first)."""
    return (
        -_SEVERITY_RANK.get(f["severity"], 0),
        f["check"],
        *((f[c] is not None, f[c]) for c in ("group", "topic", "partition", "log_offset")),
    )


def decoded_finding(r: dict[str, Any]) -> dict[str, Any]:
    """A decoder ``F`` row as a findings-table row (log-level findings name the log partition)."""
    about_log = r["grp"] is None and r["topic"] is None
    return _f(
        r["severity"],
        r["chk"],
        r["opart"],
        r["detail"],
        r["lo1"],
        r["grp"],
        OFFSETS_TOPIC if about_log else r["topic"],
        r["opart"] if about_log else r["part"],
    )


def _round3(x: float) -> float:
    # Spark's round(): half-up on the double's shortest decimal form
    return float(Decimal(repr(x)).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP))


def finalize(out: list[Row], top: int, segments: dict[str, int]) -> list[Row]:
    """Stitched rows of whole groups in, the three reports' rows plus one summary row out.

    Every row of a group arrives in the same call (the job routes by the group's expected
    offsets partition), so a group stored in two partitions is resolved here: its partition
    row and its metadata come from the partition Kafka would use, else the newest commit.
    The steps: resolve (``_resolve``), one row per group with the lifecycle findings
    (``_group_rows``), then the findings sorted, the first ``top`` marked, and the Z row.
    """
    parts, metas, members, findings = _resolve(out)
    rows: list[Row] = list(parts.values())
    status: dict[str, list[int]] = {}
    for p in parts.values():
        st = status.setdefault(p["status"] or "UNKNOWN", [0, 0])
        st[0] += 1
        st[1] += p["lag"] or 0
    group_rows, lifecycle = _group_rows(parts, metas)
    rows += group_rows
    rows += members
    findings += lifecycle
    findings.sort(key=finding_sort_key)
    counts: dict[str, dict[str, int]] = {}
    for i, f in enumerate(findings):
        by_sev = counts.setdefault(f["check"], {})
        by_sev[f["severity"]] = by_sev.get(f["severity"], 0) + 1
        f["top"] = i < top
    rows += findings
    summary = {"findings": counts, "status": status, **segments}
    rows.append({"kind": "Z", "detail": json.dumps(summary)})
    return rows


def _resolve(out: list[Row]) -> tuple[dict[Key, Row], dict[str, Row], list[Row], list[Row]]:
    """One P row per key, one G row per group, the consumer groups' M rows of the partition
    the G row comes from, and the rest (findings) as they come.

    A P row from the partition Kafka would use wins, then the newest last commit; a G row
    from the partition Kafka would use wins, then the lowest partition.
    """
    parts: dict[Key, Row] = {}
    metas: dict[str, Row] = {}
    members: list[Row] = []
    findings: list[Row] = []
    for r in out:
        kind = r["kind"]
        if kind == "P":
            k = (r["group"], r["topic"], r["partition"])
            old = parts.get(k)
            rank = (r["offsets_partition"] == r["expected_partition"], r["last_commit_ms"] or 0)
            if old is None or rank > (
                old["offsets_partition"] == old["expected_partition"],
                old["last_commit_ms"] or 0,
            ):
                parts[k] = r
        elif kind == "G":
            old = metas.get(r["group"])
            rank_g = (r["offsets_partition"] != r["expected_partition"], r["offsets_partition"])
            if old is None or rank_g < (
                old["offsets_partition"] != old["expected_partition"],
                old["offsets_partition"],
            ):
                metas[r["group"]] = r
        elif kind == "M":
            members.append(r)
        else:
            findings.append(r)
    members = [
        m
        for m in members
        if m["group"] in metas and metas[m["group"]]["offsets_partition"] == m["offsets_partition"]
    ]
    return parts, metas, members, findings


def _group_rows(parts: dict[Key, Row], metas: dict[str, Row]) -> tuple[list[Row], list[Row]]:
    """The groups table's rows (state, members, lag, worst status, commit rate) by group name,
    and the lifecycle findings: offsets with no live group, a live group with no offsets."""
    per_group: dict[str, list[Row]] = {}
    for k in sorted(parts):
        per_group.setdefault(k[0], []).append(parts[k])
    rows: list[Row] = []
    findings: list[Row] = []
    for grp in sorted(per_group.keys() | metas.keys()):
        meta = metas.get(grp)
        pl = per_group.get(grp)
        state = meta["state"] if meta is not None else None
        row: Row = {
            "kind": "G",
            "group": grp,
            "state": state or "NoMetadata",
            "members": (meta["members"] if meta is not None else None) or 0,
            "generation": meta["generation"] if meta is not None else None,
            "group_type": meta.get("group_type", "classic") if meta is not None else None,
            "assignment_epoch": meta.get("assignment_epoch") if meta is not None else None,
            "partitions": len(pl) if pl else 0,
            "total_lag": sum(p["lag"] or 0 for p in pl) if pl else 0,
        }
        if pl:
            ranks = [_STATUS_RANK[p["status"]] for p in pl if p["status"] is not None]
            row["worst_status"] = STATUS_ORDER[max(ranks)] if ranks else None
            t0 = min(
                (p["first_commit_ms"] for p in pl if p["first_commit_ms"] is not None), default=None
            )
            t1 = max(
                (p["last_commit_ms"] for p in pl if p["last_commit_ms"] is not None), default=None
            )
            commits = sum(p["commit_count"] or 0 for p in pl)
            if t0 is not None and t1 is not None and t1 > t0:
                row["commits_per_min"] = _round3(commits * 60000.0 / (t1 - t0))
        rows.append(row)
        if pl and (state is None or state == "Dead"):
            findings.append(
                _f(
                    "warn" if state == "Dead" else "info",
                    "offsets_without_group",
                    pl[0]["offsets_partition"],
                    f"{len(pl)} committed partitions, no group metadata (simple consumer?)"
                    if state is None
                    else f"{len(pl)} committed partitions outlive the deleted group",
                    min(p["record_offset"] for p in pl),
                    grp,
                )
            )
        elif not pl and meta is not None and state != "Dead":
            findings.append(
                _f(
                    "info",
                    "group_without_offsets",
                    meta["offsets_partition"],
                    f"group is {state} with {meta['members']} members but has no committed offsets",
                    meta["log_offset"],
                    grp,
                )
            )
    return rows, findings


def report_rows(rows: list[dict[str, Any]], ctx: Context, top: int) -> list[dict[str, Any]]:
    """All decoded rows of some groups (from any offsets partition) -> ``OUT_SCHEMA`` rows."""
    by_opart: dict[int, list[dict[str, Any]]] = {}
    out: list[dict[str, Any]] = []
    segments = {"segments": 0, "records": 0, "batches": 0, "bytes": 0}
    for r in rows:
        if r["kind"] == "F":
            out.append(decoded_finding(r))
            continue
        if r["kind"] == "S":
            segments["segments"] += 1
            segments["records"] += r["n"] or 0
            segments["batches"] += r["n2"] or 0
            segments["bytes"] += r["size"] or 0
        by_opart.setdefault(int(r["opart"]), []).append(r)
    for opart, rs in sorted(by_opart.items()):
        out += stitch_rows(opart, rs, ctx)
    return finalize(out, top, segments)


def report_table(table: pa.Table, ctx: Context, top: int) -> pa.Table:
    """``applyInArrow`` body: the decoded rows routed to one group of groups -> report rows."""
    rows = table.to_pylist()
    if not rows:
        return OUT_SCHEMA.empty_table()
    out = report_rows(rows, ctx, top)
    return pa.Table.from_pydict({n: [r.get(n) for r in out] for n in OUT_NAMES}, schema=OUT_SCHEMA)
