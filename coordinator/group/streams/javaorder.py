"""The iteration order of Java's HashMap and HashSet, for texts and lists Kafka builds from one.

How this works: where Kafka joins the keys of a ``HashMap`` into a message (the missing
internal topics of a MISSING_INTERNAL_TOPICS status) or lists its entries on the wire (an
internal topic's configs in StreamsGroupDescribe), the order is the map's bucket order:
``String.hashCode`` spread by ``h ^ (h >>> 16)``, masked by the table size, and within one
bucket the order the keys were first put. The table starts at 16 buckets (or the size a
copying constructor asks for) and doubles whenever the size passes three quarters of it;
a resize keeps each bucket's relative order. Removals never shrink it. Bins Java turns
into trees (eight keys in one bucket of a table of 64 or more) are not modelled: topic
names and config keys never collide that much.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

from storage.records import java_string_hash

K = TypeVar("K", bound=Hashable)

__all__ = [
    "java_hash_order",
    "java_hash_order_by",
    "java_set_copy_order",
    "java_string_hash",
    "topic_partition_hash",
]


def _table_size(wanted: int) -> int:
    n = 1
    while n < wanted:
        n <<= 1
    return n


def java_hash_order_by(
    keys: Iterable[K], hash_code: Callable[[K], int], initial_capacity: int = 16
) -> list[K]:
    """``java_hash_order`` for keys whose Java ``hashCode()`` is ``hash_code``."""
    first_put: dict[K, int] = {}
    for k in keys:
        if k not in first_put:
            first_put[k] = len(first_put)
    cap = _table_size(max(initial_capacity, 1))
    while len(first_put) > cap * 3 // 4:
        cap <<= 1
    mask = cap - 1

    def bucket(k: K) -> int:
        h = hash_code(k) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & mask

    return sorted(first_put, key=lambda k: (bucket(k), first_put[k]))


def topic_partition_hash(topic: str, partition: int) -> int:
    """``TopicPartition.hashCode()``: 31 * (31 + partition) + topic.hashCode(), as int32."""
    h = (31 * (31 + partition) + java_string_hash(topic)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def java_hash_order(keys: Iterable[str], initial_capacity: int = 16) -> list[str]:
    """The distinct ``keys`` (in the order they were put) as a HashMap iterates them.

    ``initial_capacity`` is the table a copying constructor sizes
    (``new HashSet<>(c)``: ``max(c.size() / .75 + 1, 16)``); ``Collectors.toMap`` and
    ``toSet`` start from the default 16.
    """
    return java_hash_order_by(keys, java_string_hash, initial_capacity)


def java_set_copy_order(keys: Iterable[str]) -> list[str]:
    """``new HashSet<>(collection)``'s order: a table sized for the collection up front."""
    items = list(keys)
    return java_hash_order(items, max(int(len(items) / 0.75) + 1, 16))
