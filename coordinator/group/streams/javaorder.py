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

``JavaPriorityQueue`` is ``java.util.PriorityQueue``'s binary heap, for the ties of Kafka's
streams task assignor (processes and members compared by load alone).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

from storage.records import java_string_hash

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

__all__ = [
    "JavaPriorityQueue",
    "java_compute_if_absent_order",
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


def java_compute_if_absent_order(calls: Iterable[str], initial_capacity: int = 16) -> list[str]:
    """The keys of a ``HashMap`` filled by ``computeIfAbsent(key, ...)`` once per item of
    ``calls`` (repeats included), in its iteration order.

    ``computeIfAbsent`` differs from ``put`` twice: a new key goes to the head of its bucket,
    not the tail, so one bucket holds its keys newest first; and the table grows at the start
    of a call, when the size already passed three quarters of it (every call checks, also one
    for a key present), not right after the insertion that passed it.
    """
    first_put: dict[str, int] = {}
    cap = _table_size(max(initial_capacity, 1))
    for k in calls:
        if len(first_put) > cap * 3 // 4:
            cap <<= 1
        if k not in first_put:
            first_put[k] = len(first_put)
    mask = cap - 1

    def bucket(k: str) -> int:
        h = java_string_hash(k) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & mask

    return sorted(first_put, key=lambda k: (bucket(k), -first_put[k]))


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


class JavaPriorityQueue(Generic[T]):
    """``java.util.PriorityQueue`` with a comparator that compares ``key(x)`` only.

    The binary heap with Java's ``offer`` (siftUp) and ``poll`` (siftDown) exactly, so
    elements whose keys are equal come out in the order Java's heap gives them: it depends on
    the order they were added and polled, which is what decides Kafka's ties. Java's
    comparator reads an element's state at each comparison; here ``key`` is read once, when
    the element is added: the same as long as a queued element does not change, which holds
    for the assignor (it changes only what it polled, and adds it back after).
    """

    __slots__ = ("_es", "_key", "_ks")

    def __init__(self, key: Callable[[T], float]) -> None:
        self._es: list[T] = []
        self._ks: list[float] = []
        self._key = key

    def __len__(self) -> int:
        return len(self._es)

    def add(self, x: T) -> None:
        es, ks = self._es, self._ks
        kx = self._key(x)
        k = len(es)
        es.append(x)
        ks.append(kx)
        while k > 0:
            parent = (k - 1) >> 1
            kp = ks[parent]
            if kx >= kp:
                break
            es[k] = es[parent]
            ks[k] = kp
            k = parent
        es[k] = x
        ks[k] = kx

    def poll(self) -> T | None:
        es, ks = self._es, self._ks
        if not es:
            return None
        result = es[0]
        x = es.pop()
        kx = ks.pop()
        n = len(es)
        if n > 0:
            k = 0
            half = n >> 1
            while k < half:
                child = 2 * k + 1
                kc = ks[child]
                right = child + 1
                if right < n and kc > ks[right]:
                    child = right
                    kc = ks[right]
                if kx <= kc:
                    break
                es[k] = es[child]
                ks[k] = kc
                k = child
            es[k] = x
            ks[k] = kx
        return result
