"""The audit's view of KIP-848 consumer groups: their records folded as a replay would.

How this works
--------------
A consumer group lives in ``__consumer_offsets`` as records of types 3-8 and 16
(``storage.records``): the group epoch (3), each member's subscription (5),
the target assignment (6: its epoch, 7: each member's target partitions) and each member's
current assignment (8: epoch, state, assigned partitions and partitions pending revocation).

Two halves, both plain Python (no Spark), so they are unit-tested directly:

* executor, per segment (``decode``): ``SegmentFold`` keeps, per record key, the *last*
  record of the segment (a value, as a small JSON document, or a tombstone) -- compaction
  semantics, so one ``Q`` row per (segment, key) is all the stitch needs;
* stitch, per group (``report_group``): the group's ``Q`` rows in log order, last value per
  key, tombstones remove; what is left is the group's state as Kafka would replay it.  From
  it come one groups-table row (state, member count, group epoch), one ``M`` row per member
  (epochs, state, assigned / pending / target partitions, subscription) and two checks:

  - ``partition_assigned_twice`` (error): a partition in two members' current assignment
    (assigned or pending revocation) at once; Kafka hands a partition over only after its
    owner revoked it, so this never holds in a consistent log;
  - ``partition_unassigned`` (warn; info while the target's epoch is behind the group's, a
    recomputation being due): a partition of a subscribed topic (the members' topic names
    and the topics their resolved regexes matched) that no member's target holds.  Which
    partitions a topic has: the audit's catalog (``Context.catalog`` and ``topic_ids``),
    else the group's own legacy type-4 record, else the partitions present in the group's
    targets and current assignments.  A topic some target holds is checked even when no
    subscription names it (a regex whose resolution is unknown, no catalog): without a
    partition count, that finds the partitions a member owns but no target holds.

Topic ids are shown as topic names where the catalog or a type-4 record names them, else in
Kafka's form (URL-safe base64).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from storage.interface import kafka_uuid
from storage.records import (
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    TopicPartitions,
)

__all__ = [
    "CONSUMER_GROUP_CHECKS",
    "MEMBER_STATES",
    "SegmentFold",
    "key_second",
    "partitions_text",
    "report_group",
    "value_doc",
]

MEMBER_STATES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS"}
CONSUMER_GROUP_CHECKS = ("partition_assigned_twice", "partition_unassigned")
_LISTED = 20  # partitions named in a finding's detail

Row = dict[str, Any]
Doc = dict[str, Any]
# topic id (hex) -> partitions
Parts = dict[str, list[int]]


def key_second(key: ConsumerGroupKey) -> str | None:
    """The key's second field (member id or regular expression), if its type has one."""
    if isinstance(key, ConsumerGroupRegularExpressionKey):
        return key.regular_expression
    member_id: str | None = getattr(key, "member_id", None)
    return member_id


def _parts(tps: list[TopicPartitions]) -> Parts:
    out: Parts = {}
    for tp in tps:
        out.setdefault(tp.topic_id.hex(), []).extend(tp.partitions)
    return out


def value_doc(value: ConsumerGroupValue) -> Doc:
    """A decoded value as the small JSON document a ``Q`` row carries (topic ids in hex)."""
    if isinstance(value, ConsumerGroupMetadataValue):
        return {"epoch": value.epoch, "metadata_hash": value.metadata_hash}
    if isinstance(value, ConsumerGroupPartitionMetadataValue):
        return {
            "topics": [[t.topic_id.hex(), t.topic_name, t.num_partitions] for t in value.topics]
        }
    if isinstance(value, ConsumerGroupMemberMetadataValue):
        return {
            "instance_id": value.instance_id,
            "rack_id": value.rack_id,
            "client_id": value.client_id,
            "client_host": value.client_host,
            "topics": value.subscribed_topic_names,
            "regex": value.subscribed_topic_regex,
            "rebalance_timeout_ms": value.rebalance_timeout_ms,
            "server_assignor": value.server_assignor,
            "classic": value.classic_member_metadata is not None,
        }
    if isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        return {"assignment_epoch": value.assignment_epoch}
    if isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        return {"target": _parts(value.topic_partitions)}
    if isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        return {
            "member_epoch": value.member_epoch,
            "previous_member_epoch": value.previous_member_epoch,
            "state": value.state,
            "assigned": _parts(value.assigned_partitions),
            "pending": _parts(value.partitions_pending_revocation),
        }
    assert isinstance(value, ConsumerGroupRegularExpressionValue)
    return {"topics": value.topics, "version": value.version, "timestamp": value.timestamp}


# ------------------------------------------------------------------ executor side


@dataclass(slots=True)
class _KeyInSegment:
    lo1: int
    lo2: int
    n: int = 0
    doc: Doc | None = None  # the last value; None after a tombstone


@dataclass(slots=True)
class SegmentFold:
    """One segment's consumer-group records, the last one per key (its ``Q`` rows)."""

    keys: dict[tuple[str, int, str | None], _KeyInSegment] = field(default_factory=dict)

    def add(self, group: str, rtype: int, second: str | None, lo: int, doc: Doc | None) -> None:
        k = (group, rtype, second)
        st = self.keys.get(k)
        if st is None:
            st = self.keys[k] = _KeyInSegment(lo, lo)
        st.lo2 = lo
        st.n += 1
        st.doc = doc

    def groups(self) -> set[str]:
        return {g for g, _, _ in self.keys}

    def rows(self, src: str, opart: int, seg: int, expected: dict[str, int]) -> list[Row]:
        return [
            {
                "kind": "Q",
                "src": src,
                "opart": opart,
                "seg": seg,
                "grp": g,
                "topic": second,  # the member id or regular expression
                "part": rtype,  # the record type
                "lo1": st.lo1,
                "lo2": st.lo2,
                "n": st.n,
                "last_tomb": st.doc is None,
                "detail": None if st.doc is None else json.dumps(st.doc, separators=(",", ":")),
                "expected": expected[g],
            }
            for (g, rtype, second), st in self.keys.items()
        ]


# ------------------------------------------------------------------ stitch side


@dataclass(slots=True)
class _Member:
    member_id: str
    meta: Doc | None = None  # type 5
    current: Doc | None = None  # type 8
    target: Parts | None = None  # type 7
    lo: int = -1  # the newest of its records


@dataclass(slots=True)
class _Group:
    epoch: Doc | None = None  # type 3
    legacy: Doc | None = None  # type 4
    assignment: Doc | None = None  # type 6
    members: dict[str, _Member] = field(default_factory=dict)
    regexes: dict[str, Doc] = field(default_factory=dict)  # type 16
    first_lo: int | None = None
    last_lo: int = -1
    assignment_lo: int = -1


def _replay(rows: list[Row]) -> _Group:
    """The group's state after its records, last value per key (rows in any order)."""
    g = _Group()
    live: dict[tuple[int, str | None], tuple[int, Doc | None]] = {}
    for r in sorted(rows, key=lambda r: (r["seg"], r["lo2"])):
        doc = None if r["last_tomb"] else json.loads(r["detail"])
        live[(int(r["part"]), r["topic"])] = (int(r["lo2"]), doc)
        g.first_lo = r["lo1"] if g.first_lo is None else min(g.first_lo, r["lo1"])
        g.last_lo = max(g.last_lo, int(r["lo2"]))
    for (rtype, second), (lo, doc) in live.items():
        if doc is None:
            continue
        if rtype == 3:
            g.epoch = doc
        elif rtype == 4:
            g.legacy = doc
        elif rtype == 6:
            g.assignment = doc
            g.assignment_lo = lo
        elif rtype == 16:
            g.regexes[str(second)] = doc
        else:
            m = g.members.get(str(second))
            if m is None:
                m = g.members[str(second)] = _Member(str(second))
            m.lo = max(m.lo, lo)
            if rtype == 5:
                m.meta = doc
            elif rtype == 7:
                m.target = doc["target"]
            else:
                m.current = doc
    # Kafka's replay creates a member from a type-5 or type-8 value; a target alone is not one.
    g.members = {
        mid: m for mid, m in g.members.items() if m.meta is not None or m.current is not None
    }
    return g


def _state(g: _Group, group_epoch: int, assignment_epoch: int) -> str:
    """Kafka's ConsumerGroup state: Empty / Assigning / Reconciling / Stable."""
    if not g.members:
        return "Empty"
    if group_epoch > assignment_epoch:
        return "Assigning"
    for m in g.members.values():
        cur = m.current or {}
        if cur.get("state", 0) != 0 or cur.get("member_epoch", 0) != assignment_epoch:
            return "Reconciling"
    return "Stable"


def partitions_text(parts: Parts | None, names: dict[str, str]) -> str:
    """``orders:0,1;payments:3``, topics by name where known, partitions ascending."""
    if not parts:
        return ""
    shown = sorted(
        (names.get(tid) or kafka_uuid(bytes.fromhex(tid)), sorted(ps)) for tid, ps in parts.items()
    )
    return ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in shown)


def _finding(
    sev: str,
    check: str,
    opart: int,
    detail: str,
    log_offset: int | None,
    group: str,
    topic: str | None = None,
    partition: int | None = None,
) -> Row:
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


def _listed(ps: list[int]) -> str:
    more = f" and {len(ps) - _LISTED} more" if len(ps) > _LISTED else ""
    return ",".join(map(str, ps[:_LISTED])) + more


def report_group(
    opart: int,
    grp: str,
    rows: list[Row],
    expected: int,
    catalog: dict[str, int] | None,
    topic_ids: dict[str, str],
) -> tuple[Row, int, list[Row], list[Row]]:
    """A consumer group's report from its ``Q`` rows in one offsets partition.

    Returns its groups-table row (``stitch``'s G shape), the log offset of its newest record
    (to choose between it and classic metadata of the same name), its members' ``M`` rows and
    its findings.  ``catalog``: partitions per topic name, if the audit knows them;
    ``topic_ids``: topic name -> id (hex).
    """
    g = _replay(rows)
    names = {tid: name for name, tid in topic_ids.items()}
    counts: dict[str, int] = {}  # topic id -> partition count, where known
    if catalog is not None:
        for name, tid in topic_ids.items():
            if name in catalog:
                counts[tid] = catalog[name]
    for tid, name, n in (g.legacy or {}).get("topics", []):
        names.setdefault(tid, name)
        counts.setdefault(tid, int(n))
    ids = {name: tid for tid, name in names.items()}
    group_epoch = int((g.epoch or {}).get("epoch", 0))
    assignment_epoch = int((g.assignment or {}).get("assignment_epoch", -1))
    dead = g.epoch is None and not g.members and not g.regexes and g.assignment is None
    state = "Dead" if dead else _state(g, group_epoch, assignment_epoch)
    g_row: Row = {
        "kind": "G",
        "group": grp,
        "state": state,
        "offsets_partition": opart,
        "expected_partition": expected,
        "members": None if dead else len(g.members),
        "generation": None if dead else group_epoch,
        "state_ms": None,
        "log_offset": g.first_lo,
        "group_type": "consumer",
        "assignment_epoch": None if dead else assignment_epoch,
    }
    member_rows: list[Row] = []
    for mid in sorted(g.members):
        m = g.members[mid]
        meta = m.meta or {}
        cur = m.current or {}
        subscribed = ",".join(sorted(meta.get("topics", [])))
        if meta.get("regex"):
            subscribed += ("," if subscribed else "") + f"/{meta['regex']}/"
        member_rows.append(
            {
                "kind": "M",
                "group": grp,
                "member_id": mid,
                "instance_id": meta.get("instance_id"),
                "client_id": meta.get("client_id"),
                "client_host": meta.get("client_host"),
                "member_epoch": cur.get("member_epoch"),
                "previous_member_epoch": cur.get("previous_member_epoch"),
                "member_state": None
                if m.current is None
                else MEMBER_STATES.get(cur["state"], "UNKNOWN"),
                "assigned": partitions_text(cur.get("assigned"), names),
                "pending": partitions_text(cur.get("pending"), names),
                "target": partitions_text(m.target, names),
                "subscribed": subscribed,
                "generation": group_epoch,
                "assignment_epoch": assignment_epoch,
                "offsets_partition": opart,
                "expected_partition": expected,
                "record_offset": m.lo,
            }
        )
    findings = _owned_twice(opart, grp, g, names)
    findings += _unassigned(opart, grp, g, names, ids, counts, group_epoch, assignment_epoch)
    return g_row, g.last_lo, member_rows, findings


def _owned_twice(opart: int, grp: str, g: _Group, names: dict[str, str]) -> list[Row]:
    """Partitions in two members' current assignments (assigned or pending) at once."""
    owners: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for mid in sorted(g.members):
        m = g.members[mid]
        if m.current is None:
            continue
        held = {
            (tid, p)
            for side in ("assigned", "pending")
            for tid, ps in m.current[side].items()
            for p in ps
        }
        for tp in held:
            owners.setdefault(tp, []).append((mid, m.lo))
    out: list[Row] = []
    for (tid, p), who in sorted(owners.items()):
        if len(who) > 1:
            topic = names.get(tid) or kafka_uuid(bytes.fromhex(tid))
            out.append(
                _finding(
                    "error",
                    "partition_assigned_twice",
                    opart,
                    f"partition {topic}-{p} is in the current assignment of "
                    + " and ".join(mid for mid, _ in who),
                    max(lo for _, lo in who),
                    grp,
                    topic,
                    p,
                )
            )
    return out


def _unassigned(
    opart: int,
    grp: str,
    g: _Group,
    names: dict[str, str],
    ids: dict[str, str],
    counts: dict[str, int],
    group_epoch: int,
    assignment_epoch: int,
) -> list[Row]:
    """Partitions of subscribed topics that no member's target holds (one finding a topic)."""
    if not g.members:
        return []
    subscribed: set[str] = set()
    for m in g.members.values():
        meta = m.meta or {}
        subscribed.update(meta.get("topics", []))
        regex = meta.get("regex")
        if regex and regex in g.regexes:
            subscribed.update(g.regexes[regex]["topics"])
    targets: dict[str, set[int]] = {}
    seen: dict[str, set[int]] = {}  # partitions present in targets or current assignments
    for m in g.members.values():
        for tid, ps in (m.target or {}).items():
            targets.setdefault(tid, set()).update(ps)
            seen.setdefault(tid, set()).update(ps)
        cur = m.current or {}
        for side in ("assigned", "pending"):
            for tid, ps in cur.get(side, {}).items():
                seen.setdefault(tid, set()).update(ps)
    behind = assignment_epoch < group_epoch
    # Subscribed topics the audit can name by id, then any other topic a target holds.
    topics: list[tuple[str, str | None]] = [
        (ids[name], name) for name in sorted(subscribed) if name in ids
    ]
    named = {tid for tid, _ in topics}
    topics += [(tid, None) for tid in sorted(targets) if tid not in named]
    out: list[Row] = []
    for tid, name in topics:
        known = set(range(counts[tid])) if tid in counts else seen.get(tid, set())
        missing = sorted(known - targets.get(tid, set()))
        if not missing:
            continue
        topic = name or names.get(tid) or kafka_uuid(bytes.fromhex(tid))
        what = "subscribed topic" if name is not None else "topic"
        detail = (
            f"{len(missing)} of {len(known)} partitions of {what} {topic} are in no "
            f"member's target: {_listed(missing)}"
        )
        if behind:
            detail += (
                f" (the target's epoch {assignment_epoch} is behind the group epoch "
                f"{group_epoch}: a new target is due)"
            )
        out.append(
            _finding(
                "info" if behind else "warn",
                "partition_unassigned",
                opart,
                detail,
                g.assignment_lo if g.assignment_lo >= 0 else g.last_lo,
                grp,
                topic,
                missing[0],
            )
        )
    return out
