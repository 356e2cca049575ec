"""The placement rule alone (no database): rendezvous scores, even quotas, stickiness."""

from __future__ import annotations

import random
from collections import Counter

from coordinator.cluster.ownership import assign, score

Key = tuple[str, int]


def keys(topic: str, n: int) -> list[Key]:
    return [(topic, p) for p in range(n)]


def test_scores_are_stable_and_differ_by_node() -> None:
    assert score(1, "t", 0) == score(1, "t", 0)
    assert len({score(n, "t", 0) for n in range(1, 50)}) == 49


def test_every_node_gets_its_quota_whatever_the_names() -> None:
    rng = random.Random(7)
    for _ in range(200):
        topic = f"t{rng.random()}"
        parts = keys(topic, 12) + keys("__consumer_offsets", 6)
        nodes = rng.sample(range(1, 100), rng.randint(1, 5))
        out = assign(nodes, parts, {})
        assert set(out) == set(parts)
        counts = Counter(out.values())
        assert max(counts.values()) - min(counts[n] for n in nodes) <= 1


def test_the_same_view_gives_the_same_answer_and_a_stable_one() -> None:
    parts = keys("a", 10) + keys("b", 7)
    first = assign([3, 1, 2], parts, {})
    assert assign([1, 2, 3], list(reversed(parts)), {}) == first
    assert assign([1, 2, 3], parts, first) == first  # owners that match: nothing moves


def test_a_joining_node_takes_about_one_nth_and_only_it_gains() -> None:
    rng = random.Random(11)
    for _ in range(200):
        parts = keys(f"t{rng.random()}", 12) + keys("__consumer_offsets", 6)
        before = assign([1, 2, 3], parts, {})
        after = assign([1, 2, 3, 4], parts, before)
        moved = [k for k in parts if after[k] != before[k]]
        assert all(after[k] == 4 for k in moved)
        assert len(moved) in (4, 5)  # 18 / 4


def test_a_leaving_node_moves_only_its_partitions_evenly() -> None:
    rng = random.Random(13)
    for _ in range(200):
        parts = keys(f"t{rng.random()}", 12) + keys("__consumer_offsets", 6)
        before = assign([1, 2, 3], parts, {})
        alive = {k: o for k, o in before.items() if o != 2}
        after = assign([1, 3], parts, alive)
        assert all(after[k] == o for k, o in alive.items())
        assert Counter(after.values()) == Counter({1: 9, 3: 9})


def test_no_live_node_means_no_owner() -> None:
    assert assign([], keys("t", 3), {}) == {}
