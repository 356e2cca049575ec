"""Where a committed offset of one cluster falls on another that holds the same records.

How this works: a committed offset N means "the next record to read is the first one at or
after N". Its *anchor* is that record on the source (the first data record at offset >= N);
where N is the source's log end there is none, and the anchor is the last record read (the
last data record before N) and the answer is the offset after its copy. Its *context* is
up to ``CONTEXT`` data records either side of the anchor on the source.

On the target the anchor's copy is found by time, then by content: ListOffsets for the
anchor's timestamp gives the first offset whose timestamp is at or after it, so any copy
lies at or after it (a copy keeps the record's timestamp); from there the target's data
records are scanned for ones equal to the anchor (same key, value and headers; offsets and
timestamps are not compared, a mirror keeps timestamps but not offsets) whose neighbours
also equal the anchor's context wherever both sides still hold them. Exactly one such
record places the offset; none, or several, leave the partition unplaced with the reason,
never guessed. The scan ends at the log end, or once ``SCAN_PAST`` records in a row are
later than the anchor (timestamps of a partition need not be ordered, so a few later ones
do not end it), or after ``MAX_SCAN`` records (then a partition with no single match is
unplaced: the scan could not rule out a further copy).

This module is pure (records in, a placement out); ``commands/translate.py`` fetches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CONTEXT",
    "MAX_SCAN",
    "SCAN_PAST",
    "Anchor",
    "Placement",
    "Rec",
    "anchor_for",
    "place",
    "scan_done",
    "scanned_past",
]

CONTEXT = 2
SCAN_PAST = 100
MAX_SCAN = 10_000


@dataclass(frozen=True, slots=True)
class Rec:
    """One data record as read from a partition (control and aborted records left out)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    def same(self, other: Rec) -> bool:
        """The same record in another log: equal key, value and headers."""
        return self.key == other.key and self.value == other.value and self.headers == other.headers


@dataclass(frozen=True, slots=True)
class Anchor:
    """The source record a committed offset is found by, and the records around it.

    ``records`` are the source's data records around it in offset order, ``index`` the
    anchor's place among them; ``after`` says the committed offset is the one after the
    anchor (the source's log end), not the anchor's own."""

    records: tuple[Rec, ...]
    index: int
    after: bool

    @property
    def record(self) -> Rec:
        return self.records[self.index]


@dataclass(frozen=True, slots=True)
class Placement:
    """The target offset for a committed offset, or why there is none."""

    offset: int | None
    reason: str = ""


def anchor_for(committed: int, before: Sequence[Rec], after: Sequence[Rec]) -> Anchor | None:
    """The anchor of ``committed`` from the source's data records just before it (offset
    order, the last ``CONTEXT`` are used) and from it on (the first ``CONTEXT + 1``)."""
    prev = list(before)[-CONTEXT:] if CONTEXT else []
    nxt = list(after)[: CONTEXT + 1]
    if nxt:
        return Anchor(tuple(prev + nxt), len(prev), after=False)
    if prev:
        return Anchor(tuple(prev), len(prev) - 1, after=True)
    return None


def scanned_past(scanned: Sequence[Rec], timestamp: int) -> bool:
    """Whether a scan from the ListOffsets offset has seen ``SCAN_PAST`` records in a row
    later than the anchor: no copy of it follows (a complete scan)."""
    tail = scanned[-SCAN_PAST:]
    return len(tail) == SCAN_PAST and all(r.timestamp > timestamp for r in tail)


def scan_done(scanned: Sequence[Rec], timestamp: int) -> bool:
    """Whether a scan from the ListOffsets offset stops here (the log end aside)."""
    return len(scanned) >= MAX_SCAN or scanned_past(scanned, timestamp)


def _context_matches(anchor: Anchor, target: Sequence[Rec], at: int) -> bool:
    for k in range(-anchor.index, len(anchor.records) - anchor.index):
        if k == 0 or not 0 <= at + k < len(target):
            continue
        if not anchor.records[anchor.index + k].same(target[at + k]):
            return False
    return True


def place(anchor: Anchor, target: Sequence[Rec], first: int, complete: bool) -> Placement:
    """Place ``anchor`` among the target's data records ``target`` (offset order, a run
    with no record left out), of which those from index ``first`` on were scanned from the
    ListOffsets offset; ``complete`` says the scan reached the log end or
    ``scanned_past``, so no later copy can exist."""
    rec = anchor.record
    found = [
        i
        for i in range(first, len(target))
        if target[i].same(rec) and _context_matches(anchor, target, i)
    ]
    where = f"the source's record at offset {rec.offset} (timestamp {rec.timestamp})"
    if len(found) > 1:
        offsets = ", ".join(str(target[i].offset) for i in found[:5])
        return Placement(None, f"{len(found)} records on the target match {where}: {offsets}")
    if not found:
        if not complete:
            return Placement(
                None, f"no record among the first {MAX_SCAN} on the target by time matches {where}"
            )
        return Placement(None, f"no record on the target matches {where}")
    if not complete:
        return Placement(
            None,
            f"{where} matched at target offset {target[found[0]].offset} but the scan stopped "
            f"after {MAX_SCAN} records, so another copy cannot be ruled out",
        )
    hit = target[found[0]]
    return Placement(hit.offset + 1 if anchor.after else hit.offset)
