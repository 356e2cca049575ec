"""The placement rules of ``kgc offsets translate`` (``coordinator.tools.translate``), on
records made here: exact copies placed, ambiguity and absence listed, never guessed."""

from __future__ import annotations

from coordinator.tools.translate import (
    CONTEXT,
    MAX_SCAN,
    SCAN_PAST,
    Rec,
    anchor_for,
    place,
    scan_done,
)


def recs(values: list[bytes], first: int = 0, ts: int = 1000) -> list[Rec]:
    return [Rec(first + i, ts + i, None, v, ()) for i, v in enumerate(values)]


def test_the_next_record_is_placed_at_its_copy() -> None:
    src = recs([b"a", b"b", b"c", b"d", b"e"])
    anchor = anchor_for(2, src[:2], src[2:])
    assert anchor is not None and anchor.record.value == b"c" and not anchor.after
    dst = recs([b"x", b"y", b"a", b"b", b"c", b"d", b"e"], first=40)
    assert place(anchor, dst, 0, complete=True).offset == 44


def test_at_the_log_end_the_offset_after_the_last_record_copy() -> None:
    src = recs([b"a", b"b", b"c"])
    anchor = anchor_for(3, src, [])
    assert anchor is not None and anchor.after and anchor.record.value == b"c"
    dst = recs([b"a", b"b", b"c", b"more"], first=10)
    assert place(anchor, dst, 0, complete=True).offset == 13


def test_equal_records_are_told_apart_by_their_neighbours() -> None:
    src = recs([b"p", b"tick", b"q"])
    anchor = anchor_for(1, src[:1], src[1:])
    assert anchor is not None
    dst = recs([b"r", b"tick", b"s", b"p", b"tick", b"q", b"u", b"tick"], first=0)
    assert place(anchor, dst, 0, complete=True).offset == 4


def test_copies_that_cannot_be_told_apart_are_not_placed() -> None:
    src = recs([b"tick", b"tick", b"tick"])
    anchor = anchor_for(3, src, [])  # the log end: after the last tick
    assert anchor is not None
    dst = recs([b"tick"] * 5)
    got = place(anchor, dst, 0, complete=True)
    assert got.offset is None and "records on the target match" in got.reason


def test_key_value_and_headers_all_count() -> None:
    base = Rec(0, 1, b"k", b"v", (("h", b"1"),))
    assert base.same(Rec(9, 2, b"k", b"v", (("h", b"1"),)))  # offset and time are not compared
    assert not base.same(Rec(0, 1, b"k2", b"v", (("h", b"1"),)))
    assert not base.same(Rec(0, 1, b"k", b"v", (("h", b"2"),)))
    assert not base.same(Rec(0, 1, b"k", b"v", ()))


def test_no_copy_and_a_cut_scan_are_listed() -> None:
    src = recs([b"a", b"b"])
    anchor = anchor_for(1, src[:1], src[1:])
    assert anchor is not None
    dst = recs([b"a", b"z"])
    assert place(anchor, dst, 0, complete=True).reason.startswith("no record on the target")
    cut = place(anchor, recs([b"a", b"b"]), 0, complete=False)
    assert cut.offset is None and "cannot be ruled out" in cut.reason


def test_a_source_without_records_has_no_anchor() -> None:
    assert anchor_for(5, [], []) is None


def test_context_is_what_both_sides_hold() -> None:
    # the target's copy starts at the anchor: only the later neighbours are compared
    src = recs([b"a", b"b", b"c", b"d"])
    anchor = anchor_for(2, src[:2], src[2:])
    assert anchor is not None and len(anchor.records) == 2 * CONTEXT
    assert place(anchor, recs([b"c", b"d"], first=100), 0, complete=True).offset == 100


def test_the_scan_stops_past_the_anchor_time() -> None:
    later = [Rec(i, 5000 + i, None, b"x") for i in range(SCAN_PAST)]
    assert scan_done(later, 4000)
    assert not scan_done(later[:-1], 4000)
    assert not scan_done([*later, Rec(SCAN_PAST, 4000, None, b"x")], 4000)
    assert scan_done([Rec(i, 0, None, b"x") for i in range(MAX_SCAN)], 4000)
