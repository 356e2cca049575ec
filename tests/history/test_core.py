"""The group core reports the commits that change an offset, and counts those that do not."""

from __future__ import annotations

from typing import NamedTuple

from support.group_context import GroupContext, end_txn, offset_delete, txn_commit

from coordinator.group import GroupConfig
from coordinator.history.model import DELETED, EXPIRED_CLIENT, TRANSACTION_CLIENT, OffsetChange
from storage.records import OffsetCommitKey, decode_key, decode_offset_commit_value

ON = GroupConfig(offsets_history=True)


class Change(NamedTuple):
    partition: int
    group_id: str
    member_id: str
    client_id: str
    host: str
    partition_index: int
    offset: int
    previous: int
    unchanged: int


def changes(h: GroupContext) -> list[Change]:
    """Every partition the history was told of, one row each (from its record)."""
    out = []
    for c in requests(h):
        for i, (_p, key, value) in enumerate(c.records):
            k = decode_key(key)
            assert isinstance(k, OffsetCommitKey) and k.group == c.group_id
            offset = DELETED if value is None else decode_offset_commit_value(value).offset
            out.append(
                Change(
                    c.partition,
                    c.group_id,
                    c.member_id,
                    c.client_id,
                    c.host,
                    k.partition,
                    offset,
                    c.previous[i],
                    c.unchanged[i],
                )
            )
    return out


def requests(h: GroupContext) -> list[OffsetChange]:
    return [c for r in h.results if r.history for c in r.history]


def test_a_change_is_reported_with_who_and_the_offset_before() -> None:
    h = GroupContext(ON)
    h.commit("g", {("t", 0): 5, ("t", 1): 7})
    h.commit("g", {("t", 0): 9})
    got = changes(h)
    assert [(c.partition_index, c.offset, c.previous) for c in got] == [
        (0, 5, -1),
        (1, 7, -1),
        (0, 9, 5),
    ]
    assert got[0].partition == h.shard.partition_of("g")
    assert (got[0].member_id, got[0].client_id, got[0].host) == ("", h.client_id, h.client_host)


def test_a_new_partition_beside_moved_ones_has_no_offset_before() -> None:
    h = GroupContext(ON)
    h.commit("g", {("t", 0): 5})
    h.commit("g", {("t", 0): 6, ("t", 1): 2})
    assert [(c.partition_index, c.offset, c.previous, c.unchanged) for c in changes(h)] == [
        (0, 5, -1, 0),
        (0, 6, 5, 0),
        (1, 2, -1, 0),
    ]


def test_unchanged_commits_are_counted_into_the_next_change() -> None:
    h = GroupContext(ON)
    h.commit("g", {("t", 0): 5})
    for _ in range(3):
        h.commit("g", {("t", 0): 5})
    assert len(changes(h)) == 1
    h.commit("g", {("t", 0): 6})
    assert len(requests(h)) == 2
    assert [(c.offset, c.unchanged) for c in changes(h)] == [(5, 0), (6, 3)]


def test_a_members_commit_names_it() -> None:
    h = GroupContext(ON)
    (member,), generation = h.stable_group("g", 1)
    assert h.commit("g", {("t", 0): 3}, member_id=member, generation=generation) == {("t", 0): 0}
    (c,) = changes(h)
    assert c.member_id == member


def test_the_fast_and_general_paths_report_the_same() -> None:
    fast, general = GroupContext(ON), GroupContext(ON)
    for h in (fast, general):
        h.commit("g", {("t", 0): 1})  # a new group: the general path
    fast.commit("g", {("t", 0): 2})  # v8: the fast path
    general.commit("g", {("t", 0): 2}, version=0)  # v0: the general path
    assert changes(fast) == changes(general)


def test_an_admin_delete_keeps_the_offset_it_removed() -> None:
    h = GroupContext(ON)
    h.commit("g", {("t", 0): 5})
    offset_delete(h, "g", {"t": [0]})
    last = changes(h)[-1]
    assert (last.offset, last.previous, last.member_id) == (DELETED, 5, "")


def test_an_expired_offset_is_kept_as_removed_by_the_retention() -> None:
    h = GroupContext(
        GroupConfig(
            offsets_history=True,
            offsets_retention_minutes=1,
            offsets_retention_check_interval_ms=10_000,
        )
    )
    h.commit("s", {("t", 0): 4})
    h.advance(30_000)
    h.commit("s", {("t", 1): 2})
    h.advance(35_000)  # t=65000: partition 0 expired, partition 1 not yet
    last = changes(h)[-1]
    assert (last.partition_index, last.offset, last.previous) == (0, DELETED, 4)
    assert (last.member_id, last.client_id, last.host) == ("", EXPIRED_CLIENT, "")
    h.assert_replay_equivalent()


def test_transactional_offsets_are_kept_when_their_commit_marker_lands() -> None:
    h = GroupContext(ON)
    h.commit("g", {("t", 0): 3})
    txn_commit(h, "g", 42, {("t", 0): 8, ("t", 1): 2})
    txn_commit(h, "g", 43, {("t", 2): 5})
    assert len(changes(h)) == 1  # sent, not yet visible: nothing more
    assert end_txn(h, "g", 43, commit=False) == 0  # an abort makes nothing visible
    assert len(changes(h)) == 1
    assert end_txn(h, "g", 42, commit=True) == 0
    got = changes(h)[1:]
    assert [(c.partition_index, c.offset, c.previous) for c in got] == [(0, 8, 3), (1, 2, -1)]
    assert {(c.member_id, c.client_id, c.host) for c in got} == {
        ("", f"{TRANSACTION_CLIENT} 42", "")
    }
    h.assert_replay_equivalent()


def test_a_commit_of_changed_and_unchanged_partitions_reports_the_changed() -> None:
    h = GroupContext(ON)
    h.commit("g", {("t", 0): 5, ("t", 1): 5, ("t", 2): 5})
    h.commit("g", {("t", 0): 6, ("t", 1): 5, ("t", 2): 7})
    last = requests(h)[-1]
    assert [decode_key(key) for _p, key, _v in last.records] == [
        OffsetCommitKey("g", "t", 0),
        OffsetCommitKey("g", "t", 2),
    ]
    assert (last.previous, last.unchanged) == ([5, 5], [0, 0])
    # The fast path stored the first as it compared it, then left the rest to the caller.
    assert [h.committed("g", "t", p) for p in range(3)] == [6, 5, 7]
    h.assert_replay_equivalent()
    h.commit("g", {("t", 1): 9})
    assert requests(h)[-1].unchanged == [1]
    assert [h.committed("g", "t", p) for p in range(3)] == [6, 9, 7]


def test_history_off_reports_nothing() -> None:
    h = GroupContext(GroupConfig())
    h.commit("g", {("t", 0): 5})
    h.commit("g", {("t", 0): 6})
    assert changes(h) == [] and not h.shard.offset_manager.unchanged
