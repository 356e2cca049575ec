"""The ``uniform`` server-side assignor (Kafka's ``UniformAssignor``): balance, then stickiness.

How this works: like Kafka, two builders, picked by the spec's subscription type.

* **Homogeneous** (every member subscribes to the same topics; Kafka 4.1's
  ``UniformHomogeneousAssignmentBuilder``). With P partitions and M members every member's
  target size is P // M, and P % M members get one more. Members are walked in order; each
  keeps its previous target up to its quota (whole topics while they fit, then the lowest
  partition ids of the topic that overflows) and the rest is revoked. A member that could
  take an extra partition but did not fill it from its previous target gives the extra back
  while enough members remain after it to take all the extras left (4.1's rule: extras stay
  with members that already hold them, which is what makes joins and leaves move only what
  balance requires). Partitions nobody held come first, in topic order then ascending, then
  the revoked ones in the order they were revoked; they are dealt in that order to the
  members still below quota, in member order.
* **Heterogeneous** (Kafka's ``UniformHeterogeneousAssignmentBuilder``). Each member keeps
  its previous target of the topics it still subscribes to; per topic (ordered by
  partitions-per-subscriber descending, subscriber count ascending, topic id ascending) the
  unowned partitions go one by one to the least-loaded subscriber (water-filling: members
  sorted by size, the lowest level filled one partition each in order before it rises); then
  up to 16 balancing passes over the topics with two or more subscribers move a topic's
  highest-numbered partition from its most-loaded owner to its least-loaded subscriber
  until they differ by at most one.

Orders (where Kafka iterates Java hash maps, whose order we do not emulate):
* members: the spec's ``members`` insertion order stands in for Kafka's ``memberIds()``;
* topics: Kafka ``Uuid`` order (signed msb, then signed lsb) wherever Kafka iterates a
  topic-id set; partitions of one topic: ascending (what Java's ``HashSet<Integer>``
  iterates for partition ids below its capacity).
So exact outputs match Kafka's for groups whose Java iteration order is the same (one or two
members, hand-built cases); otherwise the same invariants hold with a different tie order.

Differences from Kafka, on purpose:
* A topic whose ``num_partitions`` is -1 (it no longer exists) is skipped instead of
  raising; every member of the spec appears in the result, possibly with ``{}``.
* The previous targets are the truth for who holds what (``GroupSpec.inverted_target`` is
  their inverse and is not needed); a partition claimed by two members' previous targets is
  kept by the first, and partition ids beyond the topic's count are dropped. Both cannot
  happen with consistent inputs, where the result is Kafka's.
* A spec labelled HOMOGENEOUS whose members' subscriptions differ is assigned with the
  heterogeneous builder (Kafka trusts the label).
* **Rack awareness.** Only when every member has a ``rack_id`` and some partition being
  dealt reports replica racks: the partitions a member receives that it did not hold
  (homogeneous: the unassigned list dealt to the unfilled members; heterogeneous: per
  topic, after Kafka's algorithm has run, the partitions that moved in) are re-matched among
  the same receivers, each keeping its count, so that as many as possible land on a member
  in a rack holding a replica (a maximum matching, ``_common.match_to_racks``). What each
  member keeps and how many it receives are unchanged, so balance and movement are exactly
  Kafka's, and no assignment is less rack-local than the rack-blind one. Without racks the
  result is exactly the algorithm above.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain
from operator import itemgetter

from ._common import deal_by_rack, uuid_key
from .spec import (
    Assignment,
    GroupSpec,
    MemberSpec,
    PartitionAssignorError,
    SubscribedTopics,
    SubscriptionType,
)

__all__ = ["UniformAssignor"]

# Kafka's MAX_ITERATION_COUNT: balancing passes over the topics (heterogeneous builder).
MAX_ITERATION_COUNT = 16


class UniformAssignor:
    """Kafka's ``uniform`` assignor (the default of ``group.consumer.assignors``)."""

    name = "uniform"

    def assign(self, spec: GroupSpec, topics: SubscribedTopics) -> dict[str, Assignment]:
        members = spec.members
        if not members:
            return {}
        if spec.subscription_type is SubscriptionType.HOMOGENEOUS:
            it = iter(members.values())
            first = next(it).subscribed_topic_ids
            # ``is`` first: members sharing one frozenset compare in O(1).
            if all(m.subscribed_topic_ids is first or m.subscribed_topic_ids == first for m in it):
                return _assign_homogeneous(members, first, topics)
        return _HeterogeneousBuilder(members, topics).build()


# --------------------------------------------------------------------------------------
# Homogeneous
# --------------------------------------------------------------------------------------


def _assign_homogeneous(
    members: Mapping[str, MemberSpec], subscribed: frozenset[bytes], topics: SubscribedTopics
) -> dict[str, Assignment]:
    counts: dict[bytes, int] = {}
    for t in sorted(subscribed, key=uuid_key):
        n = topics.num_partitions(t)
        if n >= 0:
            counts[t] = n
    if not counts:
        return {m: {} for m in members}
    topic_rank = {t: i for i, t in enumerate(counts)}
    total = sum(counts.values())
    num_members = len(members)
    min_quota, extra = divmod(total, num_members)

    result: dict[str, Assignment] = {}
    # (member id, remaining quota), in member order.
    unfilled: list[tuple[str, int]] = []
    # Revoked partitions, as (topic, ascending partitions) segments in revocation order.
    revoked: list[tuple[bytes, list[int]]] = []
    # Partitions kept (or revoked) from some previous target, per topic.
    held: dict[bytes, set[int]] = {}

    for i, (member_id, member) in enumerate(members.items()):
        quota = min_quota
        flagged = extra > 0
        if flagged:
            quota += 1
        prev = member.assigned_partitions
        new: Assignment = {}
        if prev:
            order = [t for t in prev if t in topic_rank]
            if len(order) > 1:
                order.sort(key=topic_rank.__getitem__)
            for t in order:
                parts = prev[t]
                if not parts:
                    continue
                seen = held.get(t)
                if seen is None:
                    seen = held[t] = set()
                if not seen.isdisjoint(parts) or max(parts) >= counts[t]:
                    # Inconsistent input (see the module doc): drop what another member
                    # already holds and ids beyond the topic.
                    n = counts[t]
                    parts = frozenset(p for p in parts if p < n and p not in seen)
                    if not parts:
                        continue
                seen.update(parts)
                size = len(parts)
                if size <= quota:
                    new[t] = parts if isinstance(parts, frozenset) else frozenset(parts)
                    quota -= size
                else:
                    ordered = sorted(parts)
                    if quota > 0:
                        new[t] = frozenset(ordered[:quota])
                    revoked.append((t, ordered[quota:]))
                    quota = 0
        # 4.1's give-back: an unfilled extra goes back while the members left (this one
        # included) outnumber the extras left, so it lands on a member that holds it.
        if quota > 0 and flagged and num_members - i > extra:
            quota -= 1
            flagged = False
        if quota > 0:
            unfilled.append((member_id, quota))
        if flagged:
            extra -= 1
        result[member_id] = new

    # Partitions no previous target holds, topic by topic, ascending.
    unassigned: list[tuple[bytes, list[int]]] = []
    for t, n in counts.items():
        seen = held.get(t)
        if not seen:
            if n:
                unassigned.append((t, list(range(n))))
        elif len(seen) < n:
            unassigned.append((t, [p for p in range(n) if p not in seen]))
    unassigned.extend(revoked)
    if not unassigned:
        return result

    if _rack_aware(members, unfilled):
        _deal_rack_aware(members, unfilled, unassigned, topics, result)
    else:
        _deal(unfilled, unassigned, result)
    return result


def _deal(
    unfilled: list[tuple[str, int]],
    unassigned: list[tuple[bytes, list[int]]],
    result: dict[str, Assignment],
) -> None:
    """Kafka's assignRemainingPartitions: the list in order to the unfilled in order."""
    seg = 0
    off = 0
    nseg = len(unassigned)
    for member_id, quota in unfilled:
        new = result[member_id]
        while quota > 0 and seg < nseg:
            t, parts = unassigned[seg]
            take = parts[off : off + quota]
            off += len(take)
            quota -= len(take)
            old = new.get(t)
            new[t] = frozenset(take) if old is None else old.union(take)
            if off >= len(parts):
                seg += 1
                off = 0
        if seg >= nseg:
            break
    if seg < nseg:
        raise PartitionAssignorError("Partitions were left unassigned")


def _rack_aware(members: Mapping[str, MemberSpec], unfilled: list[tuple[str, int]]) -> bool:
    return len(unfilled) > 1 and all(m.rack_id for m in members.values())


def _deal_rack_aware(
    members: Mapping[str, MemberSpec],
    unfilled: list[tuple[str, int]],
    unassigned: list[tuple[bytes, list[int]]],
    topics: SubscribedTopics,
    result: dict[str, Assignment],
) -> None:
    flat = [(t, p) for t, parts in unassigned for p in parts]
    local = [topics.racks_for_partition(t, p) for t, p in flat]
    if not any(local):
        _deal(unfilled, unassigned, result)
        return
    if sum(q for _, q in unfilled) < len(flat):
        raise PartitionAssignorError("Partitions were left unassigned")
    racks = [members[m].rack_id or "" for m, _ in unfilled]
    slots = [(k, q) for k, (_, q) in enumerate(unfilled)]
    for (member_id, _), items in zip(unfilled, deal_by_rack(local, slots, racks), strict=True):
        _add_items(result[member_id], flat, items)


def _add_items(new: Assignment, flat: Sequence[tuple[bytes, int]], items: list[int]) -> None:
    per_topic: dict[bytes, list[int]] = {}
    for i in items:
        t, p = flat[i]
        per_topic.setdefault(t, []).append(p)
    for t, ps in per_topic.items():
        old = new.get(t)
        new[t] = frozenset(ps) if old is None else old.union(ps)


# --------------------------------------------------------------------------------------
# Heterogeneous
# --------------------------------------------------------------------------------------


class _Balancer:
    """Kafka's MemberAssignmentBalancer: a least-loaded range growing rightwards and a
    most-loaded range growing leftwards over a topic's subscribers sorted by size."""

    __slots__ = (
        "least_count",
        "least_end",
        "most_count",
        "most_end",
        "most_start",
        "next_least",
        "next_most",
        "sizes",
        "sorted",
    )

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.sorted: list[int] = []
        self.least_end = 0
        self.least_count = -1
        self.next_least = 0
        self.most_start = 0
        self.most_end = 0
        self.most_count = 1
        self.next_most = -1

    def imbalance(self, members: list[int]) -> int:
        """max - min size over ``members`` without sorting them (what ``initialize``
        returns; the balancing pass skips a topic within one without the sort)."""
        sizes = self.sizes
        if len(members) == 1:
            return 0
        got = itemgetter(*members)(sizes)
        return int(max(got)) - int(min(got))

    def initialize(self, members: list[int]) -> int:
        sizes = self.sizes
        # ``members`` is ascending, and the sort is stable: ties stay in index order, as
        # Kafka's comparator (size, then index) has them.
        s = sorted(members, key=sizes.__getitem__)
        self.sorted = s
        self.least_end = 0
        self.least_count = sizes[s[0]] - 1
        self.next_least = 0
        self.most_start = len(s)
        self.most_end = len(s)
        self.most_count = sizes[s[-1]] + 1
        self.next_most = len(s) - 1
        return sizes[s[-1]] - sizes[s[0]]

    def next_least_loaded(self) -> int:
        if self.next_least >= self.least_end:
            # The range is full: raise its level, absorb members now at that level, restart.
            self.least_count += 1
            s, sizes = self.sorted, self.sizes
            while self.least_end < len(s) and sizes[s[self.least_end]] == self.least_count:
                self.least_end += 1
            self.next_least = 0
        m = self.sorted[self.next_least]
        self.next_least += 1
        return m

    def next_most_loaded(self) -> int:
        s, sizes = self.sorted, self.sizes
        if self.next_most < self.most_start:
            if self.most_end <= self.most_start and self.most_start > 0:
                # Emptied by exclusions: reset the level so the range does expand.
                self.most_count = sizes[s[self.most_start - 1]]
            else:
                self.most_count -= 1
            while self.most_start > 0 and sizes[s[self.most_start - 1]] == self.most_count:
                self.most_start -= 1
            self.next_most = self.most_end - 1
        if self.next_most < 0:
            return -1
        m = s[self.next_most]
        self.next_most -= 1
        return m

    def exclude_most_loaded(self) -> None:
        s = self.sorted
        k = self.next_most + 1
        s[k], s[self.most_end - 1] = s[self.most_end - 1], s[k]
        self.most_end -= 1

    def is_balanced(self) -> bool:
        return self.most_count - self.least_count <= 1


class _HeterogeneousBuilder:
    def __init__(self, members: Mapping[str, MemberSpec], topics: SubscribedTopics) -> None:
        self.members = members
        self.topics = topics
        self.member_ids = list(members)
        self.specs = list(members.values())
        self.counts: dict[bytes, int] = {}
        # Subscribers per topic, ascending. Members sharing a subscription are grouped
        # first: a large group has few distinct subscriptions, and this avoids one step per
        # (member, topic) pair. The lists are shared and never mutated.
        by_subscription: dict[frozenset[bytes], list[int]] = {}
        for idx, member in enumerate(self.specs):
            by_subscription.setdefault(member.subscribed_topic_ids, []).append(idx)
        per_topic: dict[bytes, list[list[int]]] = {}
        for subscription, indices in by_subscription.items():
            for t in subscription:
                if t not in self.counts:
                    n = topics.num_partitions(t)
                    if n < 0:
                        continue
                    self.counts[t] = n
                per_topic.setdefault(t, []).append(indices)
        # Topics with the same subscribing groups share one merged list.
        merged: dict[tuple[int, ...], list[int]] = {}
        self.subscribers: dict[bytes, list[int]] = {}
        for t, lists in per_topic.items():
            if len(lists) == 1:
                self.subscribers[t] = lists[0]
                continue
            key = tuple(id(x) for x in lists)
            got = merged.get(key)
            if got is None:
                got = merged[key] = sorted(chain.from_iterable(lists))
            self.subscribers[t] = got
        self.sizes = [0] * len(self.specs)
        self.owners: dict[bytes, list[int]] = {t: [-1] * n for t, n in self.counts.items()}
        # Per member: the previous-target topics it keeps as they were.
        self.kept: list[dict[bytes, frozenset[int]]] = []
        # (member, topic) pairs whose partitions changed; rebuilt from ``owners`` at the end.
        self.dirty: dict[bytes, set[int]] = {}
        self.rack_aware = bool(self.specs) and all(m.rack_id for m in self.specs)
        self.racks: dict[bytes, list[frozenset[str]]] = {}

    def _topic_key(self, t: bytes) -> tuple[float, int, tuple[int, int]]:
        s = len(self.subscribers[t])
        return (-(self.counts[t] / s), s, uuid_key(t))

    def build(self) -> dict[str, Assignment]:
        self._revoke()
        self._assign_remaining()
        balanceable = [t for t, subs in self.subscribers.items() if len(subs) >= 2]
        if balanceable:
            self._balance(sorted(balanceable, key=self._topic_key))
        if self.rack_aware:
            self._rack_pass()
        return self._result()

    def _mark(self, t: bytes, member: int) -> None:
        d = self.dirty.get(t)
        if d is None:
            self.dirty[t] = {member}
        else:
            d.add(member)

    def _revoke(self) -> None:
        counts, owners, sizes = self.counts, self.owners, self.sizes
        for idx, member in enumerate(self.specs):
            kept: dict[bytes, frozenset[int]] = {}
            subscribed = member.subscribed_topic_ids
            prev = member.assigned_partitions
            # Usually every previous topic is still subscribed and known: test once.
            check = not (subscribed.issuperset(prev) and counts.keys() >= prev.keys())
            for t, parts in prev.items():
                if check and (t not in subscribed or t not in counts):
                    continue
                if not parts:
                    continue
                own = owners[t]
                n = counts[t]
                got = 0
                for p in parts:
                    if p < n and own[p] == -1:
                        own[p] = idx
                        got += 1
                sizes[idx] += got
                if got == len(parts):
                    kept[t] = parts if isinstance(parts, frozenset) else frozenset(parts)
                else:
                    self._mark(t, idx)
            self.kept.append(kept)

    def _assign(self, t: bytes, p: int, member: int) -> None:
        own = self.owners[t]
        old = own[p]
        if old != -1:
            self.sizes[old] -= 1
            self._mark(t, old)
        own[p] = member
        self.sizes[member] += 1
        self._mark(t, member)

    def _assign_remaining(self) -> None:
        unassigned: dict[bytes, list[int]] = {}
        for t, own in self.owners.items():
            free = [p for p, o in enumerate(own) if o == -1]
            if free:
                unassigned[t] = free
        balancer = _Balancer(self.sizes)
        for t in sorted(unassigned, key=self._topic_key):
            parts = unassigned[t]
            balancer.initialize(self.subscribers[t])
            for p in parts:
                self._assign(t, p, balancer.next_least_loaded())

    def _rack_pass(self) -> None:
        """Per topic, re-deal the partitions that end with a member not holding them in its
        previous target (the "moved in" ones) among those same members, each keeping its
        count, so that as many as possible sit in the member's rack. Kept partitions, counts
        and hence balance and movement are exactly what Kafka's algorithm produced."""
        member_racks = [m.rack_id or "" for m in self.specs]
        for t, own in self.owners.items():
            fresh: list[int] = []
            slot_count: dict[int, int] = {}
            for p, o in enumerate(own):
                if o != -1 and p not in self.specs[o].assigned_partitions.get(t, ()):
                    fresh.append(p)
                    slot_count[o] = slot_count.get(o, 0) + 1
            # A receiver must not get back a partition it held before: it would keep it,
            # and what members keep must stay Kafka's. Such partitions stay where they are.
            held_by = {
                p: i
                for i, spec in enumerate(self.specs)
                for p in spec.assigned_partitions.get(t, ())
            }
            while True:
                back = [p for p in fresh if held_by.get(p, -1) in slot_count]
                if not back:
                    break
                for p in back:
                    fresh.remove(p)
                    o = own[p]
                    slot_count[o] -= 1
                    if not slot_count[o]:
                        del slot_count[o]
            if len(slot_count) < 2:
                continue
            racks = self._partition_racks(t)
            local = [racks[p] for p in fresh]
            if not any(local):
                continue
            slots = list(slot_count.items())
            for (m, _), items in zip(slots, deal_by_rack(local, slots, member_racks), strict=True):
                for i in items:
                    p = fresh[i]
                    if own[p] != m:
                        self._assign(t, p, m)

    def _balance(self, sorted_topics: list[bytes]) -> None:
        last = -1
        balancer = _Balancer(self.sizes)
        for _ in range(MAX_ITERATION_COUNT):
            for ti, t in enumerate(sorted_topics):
                if ti == last:
                    # A whole pass since the last move: nothing more to do.
                    return
                moved = self._balance_topic(t, balancer)
                if moved > 0 or last == -1:
                    last = ti

    def _balance_topic(self, t: bytes, balancer: _Balancer) -> int:
        moved = 0
        subscribers = self.subscribers[t]
        if balancer.imbalance(subscribers) <= 1:
            return moved
        balancer.initialize(subscribers)
        own = self.owners[t]
        parts = sorted(range(len(own)), key=lambda p: (own[p], p))
        start: dict[int, int] = {}
        end: dict[int, int] = {}
        for i, p in enumerate(parts):
            o = own[p]
            if o not in start:
                start[o] = i
            end[o] = i + 1
        while not balancer.is_balanced():
            most = -1
            while True:
                most = balancer.next_most_loaded()
                if most == -1:
                    break
                if most not in end or end[most] - start[most] <= 0:
                    balancer.exclude_most_loaded()
                    continue
                break
            if most == -1:
                break
            least = balancer.next_least_loaded()
            if balancer.is_balanced():
                break
            last = end[most] - 1
            p = parts[last]
            end[most] = last
            self._assign(t, p, least)
            moved += 1
        return moved

    def _partition_racks(self, t: bytes) -> list[frozenset[str]]:
        got = self.racks.get(t)
        if got is None:
            rf = self.topics.racks_for_partition
            got = self.racks[t] = [rf(t, p) for p in range(self.counts[t])]
        return got

    def _result(self) -> dict[str, Assignment]:
        rebuilt: dict[int, dict[bytes, frozenset[int]]] = {}
        for t, dirty_members in self.dirty.items():
            per: dict[int, list[int]] = {m: [] for m in dirty_members}
            for p, o in enumerate(self.owners[t]):
                lst = per.get(o)
                if lst is not None:
                    lst.append(p)
            for m, ps in per.items():
                got = rebuilt.setdefault(m, {})
                if ps:
                    got[t] = frozenset(ps)
        result: dict[str, Assignment] = {}
        for idx, member_id in enumerate(self.member_ids):
            new = dict(self.kept[idx])
            changes = rebuilt.get(idx)
            if changes is not None:
                for t in self.dirty:
                    if idx in self.dirty[t]:
                        new.pop(t, None)
                new.update(changes)
            result[member_id] = new
        return result
