"""Membership and queue checkers over recorded histories (real-time and version-order rules).

How this works. Both checkers take the ``Op`` list of ``history.pair_ops`` and return the
anomalies found, each with its kind and the ops that show it.

Membership ops (key ``(group, "", -1)``), written by raw-protocol members:
- ``view`` ok: a JoinGroup/SyncGroup or ConsumerGroupHeartbeat answer, value
  ``{"member": id, "generation": g, "assignment": [[topic, partition], ...]}`` where g is the
  classic generation or the KIP-848 group epoch the assignment belongs to;
- ``fenced`` ok: the coordinator fenced ``{"member": id, "generation": g}``;
- ``commit``: an OffsetCommit carrying ``{"member": id, "generation": g}``, plus
  ``"protocol": "consumer"`` when g is a KIP-848 member epoch.
Rules: ``double-owner`` (two members handed one partition in one generation), ``generation-
back`` (a member's views, in completion order, go to a lower generation), ``fenced-commit`` (a
commit acknowledged with generation g although, before it was invoked, a view of a later
generation had completed (classic only), or that member at g had been fenced). A classic
JoinGroup answer (``"phase": "join"``) counts for neither of the last two: Kafka persists a
classic generation only with the leader's SyncGroup, so a coordinator lost between the two
phases comes back at the generation before and a member may see it go back. And, for views
whose invoke value says ``"protocol": "consumer"`` (KIP-848 heartbeats, each request carrying
the partitions its member owns: the assignment of its previous ok view), ``owned-twice``:
member B was handed partition p, and afterwards member A, which held p since before that,
sent a heartbeat still owning p and was answered ok -- the coordinator kept A as p's live
owner while B had it (a fenced or expired A gets an error instead, and a crashed one sends
nothing).

Queue ops, Jepsen's Kafka model: keys are partitions (strings in JSON), values unique ints.
- ``send`` of value v to key k (op key ``(topic, "", partition)`` or value ``{"key": k,
  "value": v}``), ok value ``[offset, v]``;
- ``poll`` ok value ``{k: [[offset, v], ...]}``;
- ``assign``/``subscribe``/``rebalance`` by a process: its positions restart (skips and
  rewinds across them are allowed, as in Jepsen).
Rules: ``inconsistent-offsets``, ``duplicate``, ``lost-write``, ``unseen``, ``poll-skip``,
``nonmonotonic-poll`` (and their ``int-`` forms inside one poll), ``nonmonotonic-send`` and
``aborted-read`` (a failed send's value polled). Skips are judged in the version order: the
sorted set of every offset any send or poll saw for the key.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .history import FAIL, OK, Op


@dataclass
class Anomaly:
    kind: str
    ops: list[Op]
    detail: str = ""


def kinds(anomalies: Iterable[Anomaly]) -> set[str]:
    return {a.kind for a in anomalies}


def _group(op: Op) -> str:
    return op.key[0] if op.key is not None else ""


def check_membership(ops: list[Op]) -> list[Anomaly]:
    found: list[Anomaly] = []
    views = sorted((op for op in ops if op.f == "view" and op.ok), key=lambda o: o.end)
    owners: dict[tuple[str, int, str, int], Op] = {}
    last: dict[tuple[str, str], Op] = {}
    for v in views:
        member, gen = v.value["member"], v.value["generation"]
        for topic, partition in v.value.get("assignment", []):
            slot = (_group(v), gen, topic, partition)
            other = owners.setdefault(slot, v)
            if other.value["member"] != member:
                found.append(Anomaly("double-owner", [other, v], f"{topic}-{partition} gen {gen}"))
        if v.value.get("phase") == "join":
            continue
        prev = last.get((_group(v), member))
        if prev is not None and gen < prev.value["generation"]:
            found.append(Anomaly("generation-back", [prev, v]))
        last[(_group(v), member)] = v
    # Per group (views) and per member (fencings): completion times and the highest
    # generation completed by then, so each commit is one binary search.
    durable = [v for v in views if v.value.get("phase") != "join"]
    seen_by = _running_max(durable, lambda v: (_group(v),))
    fenced = sorted((op for op in ops if op.f == "fenced" and op.ok), key=lambda o: o.end)
    fenced_by = _running_max(fenced, lambda f: (_group(f), f.value["member"]))
    for c in (op for op in ops if op.f == "commit" and op.ok):
        member, gen = c.invoke_value["member"], c.invoke_value["generation"]
        # A KIP-848 member's epoch can trail the group epoch and still be current: only its
        # own fencing ends it. A classic generation ends when any later one completes.
        classic = c.invoke_value.get("protocol", "classic") == "classic"
        newer = _latest_before(seen_by.get((_group(c),)), c.start) if classic else None
        if newer is not None and newer.value["generation"] > gen:
            found.append(Anomaly("fenced-commit", [newer, c], "a later generation was seen"))
            continue
        gone = _latest_before(fenced_by.get((_group(c), member)), c.start)
        if gone is not None and gone.value["generation"] >= gen:
            found.append(Anomaly("fenced-commit", [gone, c], "the member was fenced"))
    found.extend(check_owned_once(ops))
    return found


def check_owned_once(ops: list[Op]) -> list[Anomaly]:
    """KIP-848 exclusive ownership in real time (``owned-twice``, see the module doc)."""
    members: dict[tuple[str, str], list[Op]] = defaultdict(list)
    for op in ops:
        iv = op.invoke_value
        if op.f == "view" and isinstance(iv, dict) and iv.get("protocol") == "consumer":
            members[(_group(op), iv["member"])].append(op)
    # Per (group, partition): when each member was handed it, and each ok request of a
    # member carrying it with the time that member's holding of it began.
    grants: dict[tuple[str, Any], list[tuple[float, str, Op]]] = defaultdict(list)
    carried: list[tuple[str, Any, str, float, Op]] = []
    for (group, member), seq in members.items():
        owned: set[Any] = set()
        since: dict[Any, float] = {}
        for op in sorted(seq, key=lambda o: o.start):
            if not op.ok:
                continue
            for p in owned:
                carried.append((group, p, member, since[p], op))
            now = {tuple(x) for x in op.value.get("assignment", [])}
            for p in now - owned:
                since[p] = op.end
                grants[(group, p)].append((op.end, member, op))
            owned = now
    for g in grants.values():
        g.sort(key=lambda x: x[0])
    found: list[Anomaly] = []
    for group, p, member, began, op in carried:
        handed = grants[(group, p)]
        i = bisect.bisect_right(handed, began, key=lambda x: x[0])
        while i < len(handed) and handed[i][0] < op.start:
            _t, other, given = handed[i]
            if other != member:
                found.append(Anomaly("owned-twice", [given, op], f"{p} to {other} and {member}"))
                break
            i += 1
    return found


_Running = dict[tuple[str, ...], tuple[list[float], list[Op]]]


def _running_max(ops: list[Op], name: Callable[[Op], tuple[str, ...]]) -> _Running:
    """For ops sorted by completion, per name: the end times and, at each, the op with the
    highest generation completed so far."""
    out: _Running = {}
    for op in ops:
        ends, best = out.setdefault(name(op), ([], []))
        ends.append(op.end)
        top = best[-1] if best else op
        best.append(op if op.value["generation"] >= top.value["generation"] else top)
    return out


def _latest_before(running: tuple[list[float], list[Op]] | None, t: float) -> Op | None:
    if running is None:
        return None
    ends, best = running
    i = bisect.bisect_left(ends, t)
    return best[i - 1] if i > 0 else None


def _send_key(op: Op) -> str:
    if isinstance(op.invoke_value, dict):
        return str(op.invoke_value["key"])
    return str(op.key[2]) if op.key is not None else ""


def _send_value(op: Op) -> Any:
    return op.invoke_value["value"] if isinstance(op.invoke_value, dict) else op.invoke_value


def check_queue(ops: list[Op]) -> list[Anomaly]:
    found: list[Anomaly] = []
    sends = [op for op in ops if op.f == "send"]
    polls = [op for op in ops if op.f == "poll" and op.ok]
    seen: dict[tuple[str, int], dict[Any, Op]] = defaultdict(dict)
    where: dict[Any, dict[tuple[str, int], Op]] = defaultdict(dict)
    read_values: set[Any] = set()
    max_read: dict[str, int] = {}
    for s in sends:
        if s.ok:
            offset, value = s.value
            seen[(_send_key(s), offset)].setdefault(value, s)
            where[value].setdefault((_send_key(s), offset), s)
    for p in polls:
        for k, records in p.value.items():
            for offset, value in records:
                seen[(k, offset)].setdefault(value, p)
                where[value].setdefault((k, offset), p)
                read_values.add(value)
                max_read[k] = max(max_read.get(k, -1), offset)
    for (k, offset), values in seen.items():
        if len(values) > 1:
            found.append(Anomaly("inconsistent-offsets", list(values.values()), f"{k}@{offset}"))
    for value, places in where.items():
        if len(places) > 1:
            found.append(Anomaly("duplicate", list(places.values()), f"value {value}"))
    for s in sends:
        if s.status == FAIL and _send_value(s) in read_values:
            found.append(Anomaly("aborted-read", [s], f"value {_send_value(s)}"))
        if not s.ok or s.value[1] in read_values:
            continue
        kind = "lost-write" if s.value[0] <= max_read.get(_send_key(s), -1) else "unseen"
        found.append(Anomaly(kind, [s], f"{_send_key(s)}@{s.value[0]}"))
    order: dict[str, list[int]] = defaultdict(list)
    for k, offset in sorted(seen):
        order[k].append(offset)
    found.extend(_poll_order(ops, order))
    found.extend(_send_order(sends))
    return found


def _poll_order(ops: list[Op], order: dict[str, list[int]]) -> list[Anomaly]:
    """Per process and key, consecutive polled offsets must be adjacent in the version order."""
    found: list[Anomaly] = []
    last: dict[tuple[int, str], tuple[int, Op]] = {}
    for op in sorted(ops, key=lambda o: o.start):
        if op.f in ("assign", "subscribe", "rebalance"):
            for pk in [pk for pk in last if pk[0] == op.process]:
                del last[pk]
            continue
        if op.f != "poll" or not op.ok:
            continue
        for k, records in op.value.items():
            for n, (offset, _) in enumerate(records):
                idx = bisect.bisect_left(order[k], offset)
                prev = last.get((op.process, k))
                if prev is not None:
                    pidx = bisect.bisect_left(order[k], prev[0])
                    inner = "int-" if n > 0 else ""
                    ops_ = [prev[1], op] if prev[1] is not op else [op]
                    if idx <= pidx:
                        found.append(Anomaly(f"{inner}nonmonotonic-poll", ops_, f"{k}@{offset}"))
                    elif idx > pidx + 1:
                        found.append(Anomaly(f"{inner}poll-skip", ops_, f"{k}@{offset}"))
                last[(op.process, k)] = (offset, op)
    return found


def _send_order(sends: list[Op]) -> list[Anomaly]:
    found: list[Anomaly] = []
    last: dict[tuple[int, str], Op] = {}
    for s in sorted((s for s in sends if s.status == OK), key=lambda o: o.start):
        pk = (s.process, _send_key(s))
        prev = last.get(pk)
        if prev is not None and s.value[0] <= prev.value[0]:
            found.append(Anomaly("nonmonotonic-send", [prev, s]))
        last[pk] = s
    return found
