"""Helpers shared by the built-in assignors: Kafka's topic-id order and rack matching.

How this works: ``uuid_key`` orders 16-byte topic ids the way Kafka's ``Uuid.compareTo``
does (signed most-significant int64, then signed least-significant int64), so every
place where Kafka breaks ties by topic id gives the same answer here. Python's own
``bytes`` hashing is randomised per process, so the assignors never iterate a set of
topic ids without sorting it by this key first: the same input gives the same target
on every node and after every restart.

``match_to_racks`` is the rack-aware extension (Kafka 4.x's built-ins ignore racks). It is
only ever asked *which* of a fixed multiset of partitions goes to which member slot; the
number of partitions each member receives is decided before it runs, so balance and
stickiness are exactly those of Kafka's algorithm. It computes a maximum matching of
partitions to racks (a partition may go to a rack that holds one of its replicas; a rack
takes at most as many partitions as its members have free slots) with augmenting paths
over the racks, which are few. ``deal_by_rack`` then hands each member the partitions
matched to its rack, in their original order, and fills what is left in the original
order, so with no rack-local partition at all the result is the plain in-order deal.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Sequence

__all__ = ["deal_by_rack", "match_to_racks", "uuid_key"]


def uuid_key(topic_id: bytes) -> tuple[int, int]:
    """Sort key equal to Kafka ``Uuid.compareTo``: signed msb, then signed lsb."""
    return (
        int.from_bytes(topic_id[:8], "big", signed=True),
        int.from_bytes(topic_id[8:16], "big", signed=True),
    )


def match_to_racks(local: Sequence[Collection[str]], capacity: dict[str, int]) -> list[str | None]:
    """A maximum matching of items to racks: ``local[i]`` are the racks item i may go to,
    ``capacity[r]`` how many items rack r takes. Returns each item's rack or None.

    Kuhn's algorithm with rack capacities: each item is placed on a rack with room, else an
    augmenting path over racks is searched (rack a -> rack b when some item on a could also
    go to b, ending at a rack with room). An item that finds no path now never will, so one
    pass over the items gives a maximum matching. Ties go to the smallest rack name.
    """
    racks = sorted(r for r, c in capacity.items() if c > 0)
    spare = {r: capacity[r] for r in racks}
    match: list[str | None] = [None] * len(local)
    # movable[a][b]: items matched to a that could move to b (dicts as ordered sets).
    movable: dict[str, dict[str, dict[int, None]]] = {
        a: {b: {} for b in racks if b != a} for a in racks
    }

    def place(i: int, r: str) -> None:
        match[i] = r
        for b in local[i]:
            if b != r and b in spare:
                movable[r][b][i] = None

    def unplace(i: int, r: str) -> None:
        for b in local[i]:
            if b != r and b in spare:
                del movable[r][b][i]

    for i, rs in enumerate(local):
        if not rs:
            continue
        cands = sorted(r for r in rs if r in spare)
        if not cands:
            continue
        free = next((r for r in cands if spare[r] > 0), None)
        if free is not None:
            spare[free] -= 1
            place(i, free)
            continue
        parent: dict[str, str | None] = dict.fromkeys(cands)
        queue = deque(cands)
        end: str | None = None
        while queue and end is None:
            a = queue.popleft()
            for b, items in movable[a].items():
                if items and b not in parent:
                    parent[b] = a
                    if spare[b] > 0:
                        end = b
                        break
                    queue.append(b)
        if end is None:
            continue
        spare[end] -= 1
        b = end
        while (src := parent[b]) is not None:
            j = next(iter(movable[src][b]))
            unplace(j, src)
            place(j, b)
            b = src
        place(i, b)
    return match


def deal_by_rack(
    local: Sequence[Collection[str]],
    slots: Sequence[tuple[int, int]],
    member_racks: Sequence[str],
) -> list[list[int]]:
    """Deal items 0..len(local)-1 to ``slots`` ((member index, count), in dealing order),
    each member getting exactly its count, preferring items with a replica in the member's
    rack (``member_racks[member index]``). Returns, per slot, the item indices it gets."""
    capacity: dict[str, int] = {}
    for m, count in slots:
        r = member_racks[m]
        capacity[r] = capacity.get(r, 0) + count
    match = match_to_racks(local, capacity)
    by_rack: dict[str, deque[int]] = {r: deque() for r in capacity}
    leftover: deque[int] = deque()
    for i, rack in enumerate(match):
        if rack is None:
            leftover.append(i)
        else:
            by_rack[rack].append(i)
    out: list[list[int]] = []
    for m, count in slots:
        q = by_rack[member_racks[m]]
        take = min(count, len(q))
        got = [q.popleft() for _ in range(take)]
        out.append(got)
    # A rack's matched items never exceed its members' slots, so every queue is drained
    # above; the unmatched items fill the remaining slots in order.
    for k, (_, count) in enumerate(slots):
        got = out[k]
        while len(got) < count and leftover:
            got.append(leftover.popleft())
    return out
