"""Member reconciliation (Kafka's CurrentAssignmentBuilder) rule by rule, and §4.5's walk-through.

Kafka's tests: CurrentAssignmentBuilderTest (testStableToStable..., testUnknownState),
GroupMetadataManagerTest.testReconciliationProcess, ConsumerGroupTest's partition-epoch tests.
Semantics note §4, §10 items 25-31. Where 4.1 and 4.2 differ, 4.2.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from support.consumer_member import Member, settle
from support.group_context import GroupContext

from coordinator.group.consumer.group import ConsumerGroup, ConsumerGroupState
from coordinator.group.consumer.member import ConsumerGroupMember, MemberState
from coordinator.group.consumer.reconcile import FencedMemberEpoch, next_member
from protocol.errors import ErrorCode

T1, T2 = b"\x01" * 16, b"\x02" * 16
ST, UNREV, UNREL = (
    MemberState.STABLE,
    MemberState.UNREVOKED_PARTITIONS,
    MemberState.UNRELEASED_PARTITIONS,
)
Parts = dict[bytes, frozenset[int]]


def a(t1: list[int] | None = None, t2: list[int] | None = None) -> Parts:
    out: Parts = {}
    if t1:
        out[T1] = frozenset(t1)
    if t2:
        out[T2] = frozenset(t2)
    return out


def member(
    state: MemberState,
    epoch: int,
    assigned: Parts,
    pending: Parts | None = None,
    previous: int | None = None,
) -> ConsumerGroupMember:
    m = ConsumerGroupMember("m")
    m.state = state
    m.member_epoch = epoch
    m.previous_member_epoch = epoch - 1 if previous is None else previous
    m.assigned = assigned
    m.pending_revocation = pending or {}
    return m


def held(by_others: Mapping[bytes, set[int]] | None = None, epoch: int = 10) -> object:
    """A partition-epoch lookup: ``by_others`` are held at ``epoch``, the rest free."""
    others = by_others or {}

    def look(topic: bytes, p: int) -> int:
        return epoch if p in others.get(topic, set()) else -1

    return look


def step(
    m: ConsumerGroupMember,
    target_epoch: int,
    target: Parts,
    owned: Parts | None,
    by_others: Mapping[bytes, set[int]] | None = None,
) -> ConsumerGroupMember:
    return next_member(m, target_epoch, target, owned, held(by_others))  # type: ignore[arg-type]


def shape(m: ConsumerGroupMember) -> tuple[MemberState, int, int, Parts, Parts]:
    return (
        m.state,
        m.member_epoch,
        m.previous_member_epoch,
        dict(m.assigned),
        dict(m.pending_revocation),
    )


# ------------------------------------------------------------ item 25: STABLE -> STABLE


def test_stable_at_target_epoch_is_unchanged() -> None:
    m = member(ST, 10, a([1, 2], [3]))
    assert step(m, 10, a([1], [3]), None) is m  # STABLE at the target epoch: not looked at


def test_stable_to_stable_with_unchanged_target() -> None:
    m = member(ST, 10, a([1, 2, 3], [4, 5, 6]))
    new = step(m, 11, a([1, 2, 3], [4, 5, 6]), None)
    assert shape(new) == (ST, 11, 10, a([1, 2, 3], [4, 5, 6]), {})


def test_stable_to_stable_with_new_free_partitions() -> None:
    m = member(ST, 10, a([1, 2, 3], [4, 5, 6]))
    new = step(m, 11, a([1, 2, 3, 4], [4, 5, 6, 7]), None)
    assert shape(new) == (ST, 11, 10, a([1, 2, 3, 4], [4, 5, 6, 7]), {})


# ------------------------------------------------------------ item 26: STABLE -> UNREVOKED / UNRELEASED


def test_stable_to_unrevoked_when_it_still_owns_the_revoked_partitions() -> None:
    m = member(ST, 10, a([1, 2, 3], [4, 5, 6]))
    target = a([2, 3, 4], [5, 6, 7])
    for owned in (None, a([1, 2, 3], [4, 5, 6]), a([1])):
        new = step(m, 11, target, owned)
        assert shape(new) == (UNREV, 10, 10, a([2, 3], [5, 6]), a([1], [4])), owned


def test_stable_to_unreleased_when_new_partitions_are_still_held() -> None:
    m = member(ST, 10, a([1, 2, 3], [4, 5, 6]))
    new = step(m, 11, a([1, 2, 3, 4], [4, 5, 6, 7]), None, {T1: {4}, T2: {7}})
    assert shape(new) == (UNREL, 11, 10, a([1, 2, 3], [4, 5, 6]), {})


def test_stable_to_unreleased_with_some_new_partitions_free() -> None:
    m = member(ST, 10, a([1, 2, 3], [4, 5, 6]))
    new = step(m, 11, a([1, 2, 3, 4], [4, 5, 6, 7]), None, {T2: {7}})
    assert shape(new) == (UNREL, 11, 10, a([1, 2, 3, 4], [4, 5, 6]), {})


def test_stable_skips_revocation_when_it_no_longer_owns_the_revoked_partitions() -> None:
    m = member(ST, 10, a([1, 2, 3], [4, 5, 6]))
    new = step(m, 11, a([2, 3, 4], [5, 6, 7]), a([2, 3], [5, 6]), {T1: {4}, T2: {7}})
    assert shape(new) == (UNREL, 11, 10, a([2, 3], [5, 6]), {})


# ------------------------------------------------------------ item 27: UNREVOKED


def test_unrevoked_stays_while_it_reports_revoked_partitions_or_sends_null() -> None:
    m = member(UNREV, 10, a([2, 3], [5, 6]), a([1], [4]))
    target = a([2, 3, 4], [5, 6, 7])
    assert step(m, 11, target, None) is m
    assert step(m, 11, target, a([1, 2, 3], [5, 6])) is m
    assert step(m, 11, target, a([2, 3], [4, 5, 6])) is m


def test_unrevoked_to_stable_once_revoked_and_picks_up_free_partitions() -> None:
    m = member(UNREV, 10, a([2, 3], [5, 6]), a([1], [4]))
    new = step(m, 11, a([2, 3, 4], [5, 6, 7]), a([2, 3], [5, 6]))
    assert shape(new) == (ST, 11, 10, a([2, 3, 4], [5, 6, 7]), {})


def test_unrevoked_to_unreleased_when_new_partitions_are_still_held() -> None:
    m = member(UNREV, 10, a([2, 3], [5, 6]), a([1], [4]))
    new = step(m, 11, a([2, 3, 4], [5, 6, 7]), a([2, 3], [5, 6]), {T1: {4}})
    assert shape(new) == (UNREL, 11, 10, a([2, 3], [5, 6, 7]), {})


def test_unrevoked_to_unrevoked_for_a_second_revocation() -> None:
    """A newer target revokes more: a new revocation chain at the member's epoch (4.2)."""
    m = member(UNREV, 10, a([2, 3], [5, 6]), a([1], [4]))
    new = step(m, 12, a([3], [6]), a([2, 3], [5, 6]))
    assert shape(new) == (UNREV, 10, 10, a([3], [6]), a([2], [5]))


def test_own_pending_revocation_does_not_count_as_unreleased() -> None:
    """4.2 (KAFKA-19431): a partition held only by this member's pending set is not unreleased."""
    m = member(UNREV, 10, a([2]), a([1]))
    # the newer target gives 1 back to this member; the partition epoch index still has it
    new = step(m, 11, a([1, 2]), a([2]), {T1: {1}})
    assert shape(new) == (ST, 11, 10, a([1, 2]), {})


# ------------------------------------------------------------ item 28: UNRELEASED


def test_unreleased_to_stable_when_partitions_are_freed() -> None:
    m = member(UNREL, 11, a([1, 2, 3], [5, 6]), previous=10)
    new = step(m, 11, a([1, 2, 3], [4, 5, 6]), None)
    assert shape(new) == (ST, 11, 11, a([1, 2, 3], [4, 5, 6]), {})


def test_unreleased_stays_unreleased() -> None:
    m = member(UNREL, 11, a([1, 2, 3], [5, 6]), previous=10)
    new = step(m, 11, a([1, 2, 3], [4, 5, 6]), None, {T2: {4}})
    # Kafka's builder always sets the previous epoch to the current one (updateMemberEpoch)
    assert shape(new) == (UNREL, 11, 11, a([1, 2, 3], [5, 6]), {})
    assert step(new, 11, a([1, 2, 3], [4, 5, 6]), None, {T2: {4}}) is new


def test_unreleased_to_unrevoked_when_a_new_target_removes_some() -> None:
    m = member(UNREL, 11, a([1, 2, 3], [5, 6]), previous=10)
    new = step(m, 12, a([1, 3], [4, 5, 6]), None, {T2: {4}})
    assert shape(new) == (UNREV, 11, 11, a([1, 3], [5, 6]), a([2]))


# ------------------------------------------------------------ item 29: UNKNOWN


def test_unknown_state_fences_unless_it_owns_nothing() -> None:
    m = member(MemberState.UNKNOWN, 11, a([1, 2]))
    with pytest.raises(FencedMemberEpoch):
        step(m, 11, a([1, 2]), None)
    with pytest.raises(FencedMemberEpoch):
        step(m, 11, a([1, 2]), a([1]))
    new = step(m, 11, a([1, 2]), {})
    assert shape(new) == (ST, 11, 11, a([1, 2]), {})


def test_unknown_state_from_the_log_is_fenced_on_heartbeat() -> None:
    c = GroupContext.with_topics(foo=2)
    m = Member(c, "g", "m", ["foo"])
    m.join()
    g = c.shard.consumer.groups["g"]
    old = g.members["m"]
    g.replay_current_assignment(
        "m", old.member_epoch, 0, MemberState.UNKNOWN, dict(old.assigned), {}
    )
    r = m.beat()
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert m.join().error_code == 0  # rejoining owns nothing: recovered
    assert g.members["m"].state is ST


# ------------------------------------------------------------ item 30: §4.5 walk-through


def test_reconciliation_walk_through_of_three_members() -> None:
    c = GroupContext.with_topics(foo=6)
    m1, m2, m3 = (Member(c, "g", f"m{i}", ["foo"]) for i in (1, 2, 3))
    m1.join()
    m2.join()
    settle([m1, m2])
    g = c.shard.consumer.groups["g"]
    old_epoch = g.group_epoch
    had1, had2 = m1.partitions(), m2.partitions()

    def st(m: Member) -> tuple[MemberState, int]:
        x = g.members[m.member_id]
        return x.state, x.member_epoch

    # M3 joins: new epoch and target; it gets nothing yet.
    r = m3.join()
    new = old_epoch + 1
    assert g.group_epoch == g.assignment_epoch == new
    assert st(m3) == (UNREL, new) and m3.partitions() == set()
    assert r.member_epoch == new
    t3 = {("foo", p) for p in g.target["m3"][c.tid("foo")]}
    assert len(t3) == 2 and t3 & had1 and t3 & had2
    # 2. M1 and M2 heartbeat: UNREVOKED at their old epoch, told their reduced sets.
    r = m1.beat()
    assert st(m1) == (UNREV, old_epoch) and r.member_epoch == old_epoch
    assert m1.partitions() == had1 - t3
    r = m2.beat()
    assert st(m2) == (UNREV, old_epoch) and m2.partitions() == had2 - t3
    # 3. M3 heartbeats: nothing changes.
    r = m3.beat()
    assert r.assignment is None and st(m3) == (UNREL, new)
    # 4. M1 acknowledges: STABLE at the new epoch.
    r = m1.beat()
    assert st(m1) == (ST, new) and r.member_epoch == new
    # 5. M3 gets M1's released partition, still waits for M2's.
    r = m3.beat()
    assert r.assignment is not None
    assert m3.partitions() == t3 & had1
    assert st(m3) == (UNREL, new)
    assert g.state is ConsumerGroupState.RECONCILING
    # 6. M2 acknowledges.
    m2.beat()
    assert st(m2) == (ST, new)
    # 7. M3 gets everything: the group is Stable.
    m3.beat()
    assert m3.partitions() == t3 and st(m3) == (ST, new)
    assert c.shard.consumer.groups["g"].state is ConsumerGroupState.STABLE


# ------------------------------------------------------------ item 31: partition epochs


def test_partition_epochs_follow_member_updates_and_deletion() -> None:
    g = ConsumerGroup("g")
    g.replay_current_assignment("a", 10, 9, UNREV, a([1, 2]), a([3]))
    g.replay_current_assignment("b", 11, 10, ST, a([4], [1]), {})
    assert g.partition_epochs == {T1: {1: 10, 2: 10, 3: 10, 4: 11}, T2: {1: 11}}
    g.replay_current_assignment("a", 11, 10, ST, a([1, 2]), {})
    assert g.partition_epochs == {T1: {1: 11, 2: 11, 4: 11}, T2: {1: 11}}
    assert g.current_partition_epoch(T1, 3) == -1
    g.replay_current_assignment("b", -1, -1, ST, {}, {})  # its tombstone
    assert g.partition_epochs == {T1: {1: 11, 2: 11}}
    g.replay_member_removed("a")
    assert g.partition_epochs == {}
