"""The simple share assignor: Kafka's SimpleAssignorTest examples and its properties under
hypothesis -- every assignable partition goes to ceil(M/P) members (shared when members
outnumber partitions), counts as even as Kafka's quotas, only subscribed topics, and
stickiness: a stable input gives the same answer, and a joining member takes only its share."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.group.share.assignor import assign

T1, T2 = b"\x01" * 16, b"\x02" * 16


def counts(result: dict[str, dict[bytes, frozenset[int]]]) -> dict[str, int]:
    return {m: sum(len(ps) for ps in parts.values()) for m, parts in result.items()}


def holders(result: dict[str, dict[bytes, frozenset[int]]]) -> dict[tuple[bytes, int], int]:
    out: dict[tuple[bytes, int], int] = {}
    for parts in result.values():
        for t, ps in parts.items():
            for p in ps:
                out[(t, p)] = out.get((t, p), 0) + 1
    return out


def test_kafka_examples() -> None:
    one = {T1: frozenset({0})}
    # Two members, one partition: both get it.
    got = assign({"a": frozenset({T1}), "b": frozenset({T1})}, one, {})
    assert got == {"a": {T1: frozenset({0})}, "b": {T1: frozenset({0})}}
    # Three members, two partitions: 2, 1, 1 assignments, each partition twice.
    two = {T1: frozenset({0, 1})}
    got = assign({m: frozenset({T1}) for m in "abc"}, two, {})
    assert sorted(counts(got).values()) == [1, 1, 2]
    assert set(holders(got).values()) == {2}
    # Not-yet-initialized partitions are not assignable; unsubscribed topics never go.
    got = assign(
        {"a": frozenset({T1}), "b": frozenset({T2})},
        {T1: frozenset({0, 1}), T2: frozenset({0})},
        {"a": {T2: frozenset({0})}},
    )
    assert got == {"a": {T1: frozenset({0, 1})}, "b": {T2: frozenset({0})}}
    assert assign({"a": frozenset({T1})}, {}, {}) == {"a": {}}


subscriptions = st.dictionaries(
    st.sampled_from([f"m{i}" for i in range(8)]),
    st.sampled_from([frozenset({T1}), frozenset({T2}), frozenset({T1, T2})]),
    min_size=1,
)
assignable = st.fixed_dictionaries(
    {T1: st.frozensets(st.integers(0, 7), max_size=8), T2: st.frozensets(st.integers(0, 3))}
)


@settings(max_examples=50, deadline=None)
@given(subscriptions, assignable)
def test_every_partition_shared_as_kafka_wants_and_only_subscribed(
    subs: dict[str, frozenset[bytes]], parts: dict[bytes, frozenset[int]]
) -> None:
    got = assign(subs, parts, {})
    for m, mparts in got.items():
        assert set(mparts) <= subs[m]
        for t, ps in mparts.items():
            assert ps <= parts[t]
    held = holders(got)
    for t in (T1, T2):
        members = [m for m, s in subs.items() if t in s]
        if not members:
            continue
        if len(set(subs.values())) == 1:
            pool = sum(len(parts[u]) for u in next(iter(subs.values())))
        else:
            pool = len(parts[t])
        if pool == 0:
            continue
        desired = math.ceil(len(members) / pool)
        for p in parts[t]:
            # every partition is assigned, never to more members than the sharing wants
            assert 1 <= held.get((t, p), 0) <= desired


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 8), st.integers(1, 8))
def test_homogeneous_counts_are_balanced(members: int, partitions: int) -> None:
    subs = {f"m{i}": frozenset({T1}) for i in range(members)}
    got = assign(subs, {T1: frozenset(range(partitions))}, {})
    c = counts(got)
    assert max(c.values()) - min(c.values()) <= 1
    desired = math.ceil(members / partitions)
    assert sum(c.values()) == desired * partitions
    assert set(holders(got).values()) == {desired}


@settings(max_examples=50, deadline=None)
@given(subscriptions, assignable)
def test_a_stable_group_keeps_its_assignment(
    subs: dict[str, frozenset[bytes]], parts: dict[bytes, frozenset[int]]
) -> None:
    first = assign(subs, parts, {})
    assert assign(subs, parts, first) == first


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12))
def test_a_joining_member_takes_only_its_share(members: int, partitions: int) -> None:
    subs = {f"m{i}": frozenset({T1}) for i in range(members)}
    parts = {T1: frozenset(range(partitions))}
    before = assign(subs, parts, {})
    after = assign({**subs, "new": frozenset({T1})}, parts, before)
    if members + 1 <= partitions:
        # No sharing before or after: the newcomer's partitions are the only ones that
        # moved, and every old member kept all but what it gave it.
        moved = sum(
            len(before[m].get(T1, frozenset()) - after[m].get(T1, frozenset())) for m in subs
        )
        assert moved == counts(after)["new"]
        for m in subs:
            assert after[m].get(T1, frozenset()) <= before[m].get(T1, frozenset())
