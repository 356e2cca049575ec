"""Linearizability of offsets as registers: a Porcupine-style search plus fast invariants.

How this works: each key (group, topic, partition) is a register, checked on its own (P-
compositionality). A write is an OffsetCommit of a value, a read an OffsetFetch returning a
value or None. Failed writes never happened and are dropped; failed and info reads tell
nothing and are dropped; an info write may take effect at any time after its invocation, so
its return is at infinity (linearized last, it changes nothing any read saw).

The search is Wing & Gong's with Lowe's memoisation, as Porcupine runs it: the ops' call and
return entries sorted by time in a doubly linked list; at a call entry, try to linearize that
op now (the model accepts it and the pair (bitmask of linearized ops, register value) was not
seen before), unlink it and restart from the head; at a return entry the op was not
linearized in time, so backtrack to the last choice. The history is linearizable when the
list empties. A step budget bounds the search: past it the verdict is ``unknown``, never ok.
On failure the witness is the op whose return the deepest attempt could not pass, the ops
concurrent with it and the register value before it.

The fast invariants need no search and explain a failure in words: ``lost`` (a read of None
after an acknowledged write), ``stale`` (a read of a write that an acknowledged write strictly
followed before the read began: lost or rewound), ``phantom`` (a value nobody wrote) and
``failed-visible`` (a read of a write that failed) and ``read-rewind`` (a read sees a write
that strictly preceded the write an earlier, already completed read saw: the register went
back, as when a value visible on one coordinator is lost at the next).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .history import FAIL, OK, Key, Op, by_key

WRITE = "write"
READ = "read"


@dataclass
class Witness:
    """Why one key's history is not linearizable: the blocked op and what surrounded it."""

    op: Op
    concurrent: list[Op]
    state_before: Any
    linearized: list[Op]


@dataclass
class KeyResult:
    key: Key | None
    verdict: str  # "ok", "fail" or "unknown"
    witness: Witness | None = None
    steps: int = 0


@dataclass
class Anomaly:
    kind: str
    key: Key | None
    ops: list[Op]
    detail: str = ""


@dataclass
class RegisterResult:
    keys: list[KeyResult] = field(default_factory=list)
    anomalies: list[Anomaly] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.anomalies and all(k.verdict == "ok" for k in self.keys)

    def kinds(self) -> set[str]:
        found = {a.kind for a in self.anomalies}
        found.update("nonlinearizable" for k in self.keys if k.verdict == "fail")
        found.update("unknown" for k in self.keys if k.verdict == "unknown")
        return found


def _relevant(ops: Iterable[Op]) -> list[Op]:
    """The ops the search needs. An info write no read returned is dropped too: linearized
    last (its return is at infinity) it changes nothing any read saw, so keeping it only
    multiplies the states the search visits."""
    ops = list(ops)
    read = {op.value for op in ops if op.f == READ and op.status == OK}
    return [
        op
        for op in ops
        if (op.f == WRITE and (op.status == OK or (op.status != FAIL and op.invoke_value in read)))
        or (op.f == READ and op.status == OK)
    ]


def check_key(ops: list[Op], key: Key | None = None, max_steps: int = 2_000_000) -> KeyResult:
    """Wing-Gong-Lowe search over one register's ops."""
    ops = _relevant(ops)
    n = len(ops)
    if n == 0:
        return KeyResult(key, "ok")
    # Entries: (time, 0 for call / 1 for return, op id). Calls sort before returns at one
    # time, so touching intervals count as concurrent (the permissive reading, as Porcupine).
    entries = sorted(
        [(op.start, 0, i) for i, op in enumerate(ops)]
        + [(op.end, 1, i) for i, op in enumerate(ops)]
    )
    size = len(entries) + 1  # slot 0 is the head
    nxt = list(range(1, size + 1))
    nxt[-1] = -1
    prv = list(range(-1, size - 1))
    is_call = [False] + [e[1] == 0 for e in entries]
    op_of = [-1] + [e[2] for e in entries]
    match = [0] * size  # call slot -> its return slot
    call_slot: dict[int, int] = {}
    for slot in range(1, size):
        if is_call[slot]:
            call_slot[op_of[slot]] = slot
        else:
            match[call_slot[op_of[slot]]] = slot

    def lift(slot: int) -> None:
        for s in (slot, match[slot]):
            nxt[prv[s]] = nxt[s]
            if nxt[s] != -1:
                prv[nxt[s]] = prv[s]

    def unlift(slot: int) -> None:
        for s in (match[slot], slot):
            nxt[prv[s]] = s
            if nxt[s] != -1:
                prv[nxt[s]] = s

    state: Any = None
    linearized = 0
    cache: set[tuple[int, Any]] = set()
    stack: list[tuple[int, Any]] = []
    deepest: tuple[int, int, Any, list[int]] = (-1, -1, None, [])
    slot = nxt[0]
    steps = 0
    while nxt[0] != -1:
        steps += 1
        if steps > max_steps:
            return KeyResult(key, "unknown", steps=steps)
        i = op_of[slot]
        if is_call[slot]:
            op = ops[i]
            if op.f == WRITE:
                accepted, new_state = True, op.invoke_value
            else:
                accepted, new_state = op.value == state, state
            if accepted:
                lin = linearized | (1 << i)
                if (lin, new_state) not in cache:
                    cache.add((lin, new_state))
                    stack.append((slot, state))
                    state, linearized = new_state, lin
                    lift(slot)
                    slot = nxt[0]
                    continue
            slot = nxt[slot]
        else:
            if len(stack) > deepest[0]:
                deepest = (len(stack), i, state, [op_of[s] for s, _ in stack])
            if not stack:
                break
            slot, state = stack.pop()
            linearized &= ~(1 << op_of[slot])
            unlift(slot)
            slot = nxt[slot]
    if nxt[0] == -1:
        return KeyResult(key, "ok", steps=steps)
    _, blocked_id, before, lin_ids = deepest
    blocked = ops[blocked_id]
    concurrent = [
        o for o in ops if o is not blocked and o.start <= blocked.end and blocked.start <= o.end
    ]
    witness = Witness(blocked, concurrent, before, [ops[j] for j in lin_ids][-5:])
    return KeyResult(key, "fail", witness, steps)


def fast_invariants(ops: list[Op], key: Key | None = None) -> list[Anomaly]:
    """The O(n log n) register invariants: lost, stale, phantom, failed-visible."""
    writes = {op.invoke_value: op for op in ops if op.f == WRITE}
    acked = sorted((op for op in ops if op.f == WRITE and op.status == OK), key=lambda o: o.end)
    ends = [op.end for op in acked]
    # best[j]: the acked write with the latest start among the first j+1 to complete.
    best: list[Op] = []
    for op in acked:
        best.append(op if not best or op.start > best[-1].start else best[-1])
    found: list[Anomaly] = []
    reads = sorted((op for op in ops if op.f == READ and op.status == OK), key=lambda o: o.end)
    read_ends = [op.end for op in reads]
    # seen[j]: of the first j+1 reads to complete, the one whose write started latest.
    seen: list[tuple[float, Op]] = []
    for op in reads:
        w = writes.get(op.value)
        start = w.start if w is not None else -1.0
        seen.append((start, op) if not seen or start > seen[-1][0] else seen[-1])
    for read in (op for op in ops if op.f == READ and op.status == OK):
        j = bisect.bisect_left(ends, read.start) - 1
        latest = best[j] if j >= 0 else None
        k = bisect.bisect_left(read_ends, read.start) - 1
        before = seen[k][1] if k >= 0 else None
        w_now = writes.get(read.value)
        w_before = writes.get(before.value) if before is not None else None
        if (
            before is not None
            and w_before is not None
            and (
                (w_now is None and read.value is None)
                or (w_now is not None and w_now.end < w_before.start)
            )
        ):
            # An earlier read, completed before this one began, already saw a write that
            # strictly followed the one this read sees: the register went back.
            found.append(Anomaly("read-rewind", key, [before, read], "a read went back"))
        if read.value is None:
            if latest is not None:
                found.append(Anomaly("lost", key, [latest, read], "read None after an ack"))
            continue
        w = writes.get(read.value)
        if w is None:
            found.append(Anomaly("phantom", key, [read], f"nobody wrote {read.value!r}"))
        elif w.status == FAIL:
            found.append(Anomaly("failed-visible", key, [w, read]))
        elif latest is not None and w.end < latest.start:
            found.append(Anomaly("stale", key, [w, latest, read], "lost or rewound"))
    return found


def check_registers(
    ops: Iterable[Op], max_steps: int = 2_000_000, search: bool = True
) -> RegisterResult:
    """Every key's fast invariants, then (when asked) its linearizability search."""
    result = RegisterResult()
    for key, key_ops in by_key(ops):
        result.anomalies.extend(fast_invariants(key_ops, key))
        if search:
            result.keys.append(check_key(key_ops, key, max_steps))
    return result


def final_read_check(ops: list[Op], final: Op, key: Key | None = None) -> list[Anomaly]:
    """The final read of a key against every acknowledged write: none lost or rewound."""
    acked = [op for op in ops if op.f == WRITE and op.status == OK and op.end < final.start]
    if not acked:
        return []
    if final.value is None:
        return [Anomaly("lost", key, [*acked[-1:], final], "final read None")]
    w = next((op for op in ops if op.f == WRITE and op.invoke_value == final.value), None)
    if w is None:
        return [Anomaly("phantom", key, [final])]
    if w.status == FAIL:
        return [Anomaly("failed-visible", key, [w, final])]
    later = [op for op in acked if w.end < op.start]
    if later:
        return [Anomaly("stale", key, [w, later[-1], final], "final read rewound")]
    return []
