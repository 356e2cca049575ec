"""The ``simple`` share-group assignor (Kafka's SimpleAssignor): balance first, then stickiness.

How this works
--------------
Share groups let several members consume one partition, so the assignor need not give a
partition to exactly one member. With P assignable partitions and M members (of one
subscription), each partition goes to ``desired = ceil(M / P)`` members: one when there
are at least as many partitions as members, several (the partition is *shared*) when there
are more members. The ``desired * P`` assignments are spread as evenly as Kafka spreads
them: member i of M gets ``ceil(x * (i + 1)) - ceil(x * i)`` of them, ``x = desired * P / M``.
The quotas are handed out largest first to the members that already hold the most, so a
change moves as little as possible. Then, as Kafka's Simple*AssignmentBuilder:

1. drop partitions a member no longer subscribes to, or that are not assignable;
2. trim members over their quota;
3. trim partitions shared by more than ``desired`` members;
4. fill members under their quota with the least-shared partitions they do not hold,
   accepting a slight imbalance when no partition is left for a member.

When every member subscribes to the same topics (homogeneous), all their partitions form
one pool; otherwise (heterogeneous) each topic is assigned on its own among its
subscribers. Which member gets which partition depends on Java's hash iteration order in
Kafka; kgc orders by member id and partition, and the tests check the properties
(balance, sharing, stickiness), as Kafka's SimpleAssignorTest does. Only partitions whose
share state is initialized are assignable: the caller passes those.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["NAME", "assign"]

NAME = "simple"

TopicPartition = tuple[bytes, int]


def _quotas(members: int, partitions: int) -> tuple[int, list[int]]:
    """(desired sharing per partition, the quota of each of ``members`` members)."""
    desired = -(-members // partitions)
    total = desired * partitions
    # ceil(total * i / members), integer arithmetic.
    bounds = [-(-total * i // members) for i in range(members + 1)]
    return desired, sorted((bounds[i + 1] - bounds[i] for i in range(members)), reverse=True)


def _assign_pool(
    members: list[str],
    pool: list[TopicPartition],
    current: Mapping[str, set[TopicPartition]],
) -> dict[str, set[TopicPartition]]:
    """Assign ``pool`` among ``members``, keeping what ``current`` (already filtered to the
    pool) gives where balance allows."""
    out: dict[str, set[TopicPartition]] = {m: set(current.get(m, ())) for m in members}
    if not pool or not members:
        return {m: set() for m in members}
    desired, quota_list = _quotas(len(members), len(pool))
    order = sorted(members, key=lambda m: (-len(out[m]), m))
    quota = dict(zip(order, quota_list, strict=True))
    # 2. Trim members over their quota (their lowest partitions go first, as Kafka's
    # iteration happens to give them up).
    for m in order:
        extra = len(out[m]) - quota[m]
        if extra > 0:
            for tp in sorted(out[m])[:extra]:
                out[m].discard(tp)
    # 3. Trim partitions shared by more than ``desired`` members: the fullest members
    # give them up first.
    holders: dict[TopicPartition, list[str]] = {tp: [] for tp in pool}
    for m in order:
        for tp in out[m]:
            holders[tp].append(m)
    for tp in pool:
        hs = holders[tp]
        if len(hs) > desired:
            hs.sort(key=lambda m: (-len(out[m]), m))
            for m in hs[: len(hs) - desired]:
                out[m].discard(tp)
            holders[tp] = hs[len(hs) - desired :]
    # 4. Fill members under their quota with the least-shared partitions they lack.
    for m in sorted(members, key=lambda m: (len(out[m]) - quota[m], m)):
        need = quota[m] - len(out[m])
        if need <= 0:
            continue
        candidates = sorted(
            (tp for tp in pool if tp not in out[m]), key=lambda tp: (len(holders[tp]), tp)
        )
        for tp in candidates[:need]:
            if len(holders[tp]) >= desired:
                break  # nothing under-shared left: accept the imbalance
            out[m].add(tp)
            holders[tp].append(m)
    return out


def assign(
    subscriptions: Mapping[str, frozenset[bytes]],
    assignable: Mapping[bytes, frozenset[int]],
    current: Mapping[str, Mapping[bytes, frozenset[int]]],
) -> dict[str, dict[bytes, frozenset[int]]]:
    """The target assignment of every member.

    subscriptions: member id -> the topic ids it subscribes to (that exist);
    assignable: topic id -> its partitions whose share state is initialized;
    current: member id -> its current target (for stickiness).
    """

    def held(m: str, topics: frozenset[bytes] | set[bytes]) -> set[TopicPartition]:
        cur = current.get(m, {})
        return {
            (t, p)
            for t, ps in cur.items()
            if t in topics
            for p in ps
            if p in assignable.get(t, frozenset())
        }

    result: dict[str, dict[bytes, set[int]]] = {m: {} for m in subscriptions}
    subs = set(subscriptions.values())
    if len(subs) <= 1:
        topics = next(iter(subs), frozenset())
        pool = sorted((t, p) for t in topics for p in assignable.get(t, ()))
        members = sorted(subscriptions)
        got = _assign_pool(members, pool, {m: held(m, topics) for m in members})
        for m, tps in got.items():
            for t, p in tps:
                result[m].setdefault(t, set()).add(p)
    else:
        all_topics = sorted({t for s in subs for t in s})
        for t in all_topics:
            members = sorted(m for m, s in subscriptions.items() if t in s)
            pool = sorted((t, p) for p in assignable.get(t, ()))
            got = _assign_pool(members, pool, {m: held(m, {t}) for m in members})
            for m, tps in got.items():
                for _, p in tps:
                    result[m].setdefault(t, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in parts.items() if ps} for m, parts in result.items()}
