"""Who should own which partition: rendezvous hashing with per-node quotas, sticky.

How this works: every node computes the same assignment from the same heartbeat view (the
live nodes and, for each partition, its live owner if any), so no controller is needed.

* Preference: each (node, topic, partition) has a rendezvous score (a 64-bit hash); a
  partition prefers the live node with the highest score. Pure rendezvous alone moves
  only the partitions a joining node wins (about 1/N) and only those of a leaving node,
  but its spread is uneven on small partition counts (18 partitions over 3 nodes give a
  node fewer than 4 or more than 8 about four times in ten).
* Quotas make the spread even: with P partitions over N nodes every node gets
  ``P // N`` and the ``P % N`` lowest node ids one more (fixed by node id, not by what a
  node holds, so quotas do not change while partitions move).
* Sticky: a node keeps the partitions it owns, its highest-scored first, up to its quota;
  the rest (unowned, owned by a dead node, or beyond an owner's quota) go, in a fixed
  order, to their highest-scored node that still has room. So when a node joins, the
  old nodes are at or over their (smaller) quotas and only the new node has room:
  partitions move only to it. When a node leaves, only its partitions move.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from functools import lru_cache

__all__ = ["assign", "score"]

Key = tuple[str, int]


@lru_cache(maxsize=1 << 17)
def score(node_id: int, topic: str, partition: int) -> int:
    """The rendezvous score of a node for a partition (stable across processes and runs)."""
    digest = hashlib.blake2b(
        f"{node_id}\x00{topic}\x00{partition}".encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "big")


def _order(key: Key) -> tuple[int, str, int]:
    # The fixed order in which unkept partitions are placed (the same on every node).
    return (score(-1, key[0], key[1]), key[0], key[1])


def assign(
    nodes: Iterable[int], partitions: Iterable[Key], current: Mapping[Key, int]
) -> dict[Key, int]:
    """The desired owner of every partition.

    ``current`` maps a partition to its owner when that owner is live (a partition whose
    owner is dead or missing is absent). Returns ``{}`` when there is no live node.
    """
    live = sorted(set(nodes))
    if not live:
        return {}
    keys = sorted(set(partitions))
    base, extra = divmod(len(keys), len(live))
    room = {node: base + (1 if i < extra else 0) for i, node in enumerate(live)}
    out: dict[Key, int] = {}
    held: dict[int, list[Key]] = defaultdict(list)
    free: list[Key] = []
    for key in keys:
        owner = current.get(key)
        if owner in room:
            held[owner].append(key)
        else:
            free.append(key)
    for node, owned in held.items():
        owned.sort(key=lambda k: (-score(node, k[0], k[1]), k))
        keep = owned[: room[node]]
        for key in keep:
            out[key] = node
        room[node] -= len(keep)
        free.extend(owned[len(keep) :])
    free.sort(key=_order)
    for key in free:
        best = max(
            (node for node in live if room[node] > 0),
            key=lambda node: (score(node, key[0], key[1]), -node),
        )
        out[key] = best
        room[best] -= 1
    return out
