"""The history's binary form: what is encoded decodes the same, strings once per value; a
merged value gives the entries of the values it replaces, in their order."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.group.records import OffsetEntry, offset_commit_record, offset_commit_tombstone
from coordinator.history.codec import (
    MERGED_VERSION,
    PLAIN,
    HistoryFormatError,
    compress,
    decode,
    encode,
    merge,
)
from coordinator.history.model import (
    DELETED,
    LogRecord,
    MembershipChange,
    OffsetChange,
    OffsetHistoryEntry,
)

T = 1_764_000_000_000


def commit(
    offsets: dict[tuple[str, int], OffsetEntry | None],
    previous: list[int] | None = None,
    unchanged: list[int] | None = None,
    **who: str,
) -> OffsetChange:
    """An OffsetChange with the records the core writes for ``offsets`` (None: a delete)."""
    group = who.get("group_id", "g")
    records = [
        offset_commit_tombstone(3, group, t, p)
        if e is None
        else offset_commit_record(3, group, t, p, e)
        for (t, p), e in offsets.items()
    ]
    n = len(offsets)
    return OffsetChange(
        3,
        group,
        who.get("member_id", "consumer-1-4f1c"),
        who.get("client_id", "consumer-1"),
        who.get("host", "/10.0.0.1"),
        records,
        previous or [-1] * n,
        unchanged or [0] * n,
    )


def entries(
    c: OffsetChange, offsets: dict[tuple[str, int], OffsetEntry | None], at: int = T
) -> list[OffsetHistoryEntry]:
    return [
        OffsetHistoryEntry(
            at, c.group_id, tp[0], tp[1], DELETED if e is None else e.offset, c.previous[i],
            -1 if e is None else e.leader_epoch, "" if e is None else e.metadata,
            at if e is None else e.commit_timestamp_ms, c.member_id, c.client_id, c.host,
            c.unchanged[i],
        )
        for i, (tp, e) in enumerate(offsets.items())
    ]  # fmt: skip


def test_offset_changes_round_trip() -> None:
    first = {("orders", 7): OffsetEntry(100, 4, "", T)}
    second: dict[tuple[str, int], OffsetEntry | None] = {
        ("orders", 1): OffsetEntry(2**62, -1, "ünï\U0001f600", T - 86_400_000),
        ("other", 2**31 - 1): OffsetEntry(0, 0, "m", -1),
    }
    changes = [
        commit(dict(first)),
        commit(second, previous=[5, 2**40], unchanged=[300, 0], member_id="", host=""),
    ]
    assert decode(encode(T, changes)) == entries(changes[0], dict(first)) + entries(
        changes[1], second
    )


def test_a_plain_value_reads_as_its_compressed_form_and_merges() -> None:
    changes = [
        commit({("orders", p): OffsetEntry(100 + p, 4, "", T) for p in range(10)}),
        commit({("t", 0): None}, previous=[42], member_id="", client_id="kgc-admin"),
    ]
    plain = encode(T, changes, compressed=False)
    assert plain[: len(PLAIN)] == PLAIN
    assert compress(plain) == encode(T, changes)
    assert decode(plain) == decode(encode(T, changes))
    assert decode(plain, "g") == decode(encode(T, changes), "g")
    later = encode(T + 1, changes)
    assert decode(merge([plain, later])) == decode(plain) + decode(later)


def test_a_delete_keeps_the_previous_offset_and_who() -> None:
    deleted = commit({("t", 0): None}, previous=[42], member_id="", client_id="kgc-admin")
    (e,) = decode(encode(T, [deleted]))
    assert isinstance(e, OffsetHistoryEntry)
    assert (e.offset, e.previous, e.client_id, e.admin) == (DELETED, 42, "kgc-admin", True)


def test_membership_changes_round_trip() -> None:
    m = [
        MembershipChange(
            T, "g", "rebalance_started", 3, "join", "member m-1 joined", "m-1", -1, -1
        ),
        MembershipChange(T, "g", "stable", 4, "", "", "m-1", 2, 3012),
    ]
    assert decode(encode(T, m)) == m


def test_a_commit_of_ten_partitions_is_small() -> None:
    ten = commit(
        {("orders", p): OffsetEntry(1_000_000 + p, 4, "", T) for p in range(10)},
        previous=[999_990 + p for p in range(10)],
    )
    one = commit({("orders", 0): OffsetEntry(1_000_000, 4, "", T)}, previous=[999_990])
    # the names once (compression takes the repeats out of the keys), then each further
    # partition: its numbers
    assert len(encode(T, [ten])) - len(encode(T, [one])) <= 9 * 30


def test_a_value_filters_by_group() -> None:
    value = encode(
        T,
        [
            commit({("t", 0): OffsetEntry(1, 0, "", T)}),
            commit({("t", 0): OffsetEntry(2, 0, "", T)}, group_id="h"),
        ],
    )
    assert [(e.group_id, e.offset) for e in decode(value, "h")] == [("h", 2)]
    assert decode(value, "nobody") == []


@pytest.mark.parametrize(
    "bad",
    [b"", b"\x02\x00\x00\x00", encode(T, [commit({("t", 0): OffsetEntry(1, 0, "", T)})])[:-3]],
)
def test_damage_is_a_format_error(bad: bytes) -> None:
    with pytest.raises(HistoryFormatError):
        decode(bad)


def test_a_delete_among_commits_and_an_unchanged_count_past_32_bits() -> None:
    offsets: dict[tuple[str, int], OffsetEntry | None] = {
        ("t", 0): OffsetEntry(7, -1, "", T),
        ("t", 1): None,
    }
    c = commit(offsets, previous=[3, 9], unchanged=[2**33, 0])
    got = [e for e in decode(encode(T, [c])) if isinstance(e, OffsetHistoryEntry)]
    assert [(e.offset, e.previous, e.unchanged) for e in got] == [
        (7, 3, 2**32 - 1),
        (DELETED, 9, 0),
    ]


_names = st.sampled_from(["g", "h", "grp-\u00e9", ""])
_offsets = st.dictionaries(
    st.tuples(st.sampled_from(["t", "orders"]), st.integers(0, 3)),
    st.one_of(
        st.none(),
        st.builds(
            OffsetEntry,
            st.integers(0, 2**62),
            st.integers(-1, 5),
            st.sampled_from(["", "m"]),
            st.integers(-1, T),
        ),
    ),
    min_size=1,
    max_size=4,
)
_change = st.one_of(
    st.builds(lambda o, g, m: commit(o, group_id=g, member_id=m), _offsets, _names, _names),
    st.builds(
        lambda g, kind, gen: MembershipChange(T, g, kind, gen, "join", "", "m-1", 2, 5),
        _names,
        st.sampled_from(["stable", "rebalance_started"]),
        st.integers(-1, 9),
    ),
)
# A turn: its time and its changes (membership changes carry the turn's time, as written).
_turn = st.tuples(st.integers(0, T), st.lists(_change, min_size=1, max_size=3))


def _value(at: int, changes: list[OffsetChange | MembershipChange]) -> bytes:
    return encode(
        at, [c._replace(timestamp_ms=at) if isinstance(c, MembershipChange) else c for c in changes]
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(_turn, min_size=1, max_size=6), st.integers(0, 5), _names)
def test_a_merged_value_gives_the_entries_of_its_turns_in_order(
    turns: list[tuple[int, list[OffsetChange | MembershipChange]]], split: int, group: str
) -> None:
    values = [_value(at, changes) for at, changes in turns]
    expected = [e for v in values for e in decode(v)]
    merged = merge(values)
    assert bytes(cramjam.lz4.decompress_block(merged))[0] == MERGED_VERSION
    assert decode(merged) == expected
    assert decode(merged, group) == [e for v in values for e in decode(v, group)]
    # A merged value merged again with further turns: still every entry, in order.
    split = min(split, len(values))
    assert decode(merge([merge(values[:split] or values[:1]), *values[split:]])) == (
        [e for v in (values[:split] or values[:1]) for e in decode(v)]
        + [e for v in values[split:] for e in decode(v)]
    )


def test_merging_many_turns_takes_out_what_they_repeat() -> None:
    values = [
        encode(
            T + 5000 * i,
            [
                commit(
                    {
                        ("orders", p): OffsetEntry(1_000 * i + p, 4, "", T + 5000 * i)
                        for p in range(10)
                    },
                    previous=[1_000 * (i - 1) + p for p in range(10)],
                )
            ],
        )
        for i in range(200)
    ]
    merged = merge(values)
    assert len(decode(merged)) == 2000
    assert len(merged) * 2 < sum(map(len, values))


def test_a_damaged_turn_is_not_merged() -> None:
    good = encode(T, [commit({("t", 0): OffsetEntry(1, 0, "", T)})])
    with pytest.raises(HistoryFormatError):
        merge([good, b"x" * 10])
    with pytest.raises(HistoryFormatError):  # a merged value cut short
        decode(
            bytes(
                cramjam.lz4.compress_block(
                    bytes(cramjam.lz4.decompress_block(merge([good, good])))[:-2]
                )
            )
        )


# Values written by the code before ``encode`` took its present form (f669265), one per
# case below, generated then and checked in: what kgc wrote must read the same, and the
# plain form stays the same bytes (the compressed ones depend on the LZ4 library).
GOLDEN = Path(__file__).parent / "data" / "values-v1.json"


def golden_cases() -> Iterator[tuple[str, list[OffsetChange | MembershipChange]]]:
    def rec(g: str, t: str, p: int, e: OffsetEntry | None) -> LogRecord:
        return (
            offset_commit_tombstone(3, g, t, p)
            if e is None
            else offset_commit_record(3, g, t, p, e)
        )

    ten = [rec("orders-app", "orders", p, OffsetEntry(1_000_000 + p, 4, "", T)) for p in range(10)]
    yield (
        "one commit of ten partitions",
        [
            OffsetChange(
                3,
                "orders-app",
                "consumer-orders-app-1-4f1c",
                "consumer-orders-app-1",
                "/10.0.0.1",
                ten,
                [999_990 + p for p in range(10)],
                [0] * 10,
            )
        ],
    )
    two: list[OffsetChange | MembershipChange] = [
        OffsetChange(
            3,
            "g",
            "m-1",
            "c-1",
            "/h1",
            [rec("g", "t", 0, OffsetEntry(5, -1, "meta ü", T - 5))],
            [-1],
            [3],
        ),
        OffsetChange(3, "h", "", "kgc-admin", "", [rec("h", "u", 2**31 - 1, None)], [42], [2**33]),
        OffsetChange(
            3,
            "g",
            "m-2",
            "c-1",
            "/h2",
            [
                rec("g", "t", 1, OffsetEntry(2**62, 7, "", -1)),
                rec("g", "t", 2, OffsetEntry(0, 0, "x", T)),
            ],
            [1, 2],
            [0, 0],
        ),
    ]
    yield "commits of two groups, a delete, metadata, an unchanged count past 32 bits", two
    yield (
        "membership changes",
        [
            MembershipChange(
                T, "g", "rebalance_started", 3, "join", "member m-1 joined", "m-1", -1, -1
            ),
            MembershipChange(T, "g", "stable", 4, "", "", "m-1", 2, 3012),
        ],
    )
    yield (
        "a commit and a membership change",
        [two[0], MembershipChange(T, "g", "epoch_bumped", 9, "heartbeat", "", "m-2", 3, -1)],
    )


@pytest.mark.parametrize("name, entries_", list(golden_cases()), ids=lambda x: str(x)[:40])
def test_values_written_before_read_the_same_and_the_plain_form_is_unchanged(
    name: str, entries_: list[OffsetChange | MembershipChange]
) -> None:
    value = bytes.fromhex({g["case"]: g["value"] for g in json.loads(GOLDEN.read_text())}[name])
    assert decode(value) == decode(encode(T, entries_))
    assert PLAIN + bytes(cramjam.lz4.decompress_block(value)) == encode(
        T, entries_, compressed=False
    )
