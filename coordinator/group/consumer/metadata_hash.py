"""The subscribed-topic metadata hash (KIP-1101): how a consumer group notices topic changes.

How this works: a group stores one 64-bit hash over the metadata of every topic its members
subscribe to (id, name, partition count, replica racks). A heartbeat that refreshes the
metadata recomputes it; a different value means a topic was created, deleted or grew, and
the group epoch is bumped so a new target assignment is computed. The bytes hashed are
Kafka's (``Utils.computeTopicHash`` / ``computeGroupHash``: XXH3-64, seed 0, little-endian
integers, strings as UTF-16 code units followed by their length), so a log written by Kafka
loads without an extra epoch bump; elsewhere only equality matters.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import xxhash

from coordinator.group.topics import TopicImage, TopicsImage

__all__ = ["group_hash", "topic_hash"]

_Q = struct.Struct("<q")
_QQ = struct.Struct("<qq")
_I = struct.Struct("<i")


def _string(s: str) -> bytes:
    units = s.encode("utf-16-le")
    return units + _I.pack(len(units) // 2)


def _signed(u: int) -> int:
    return u - (1 << 64) if u >= 1 << 63 else u


def topic_hash(topic: TopicImage) -> int:
    tid = topic.topic_id
    msb, lsb = struct.unpack(">qq", tid)
    parts = [b"\x00", _QQ.pack(msb, lsb), _string(topic.name), _I.pack(topic.num_partitions)]
    racks = topic.partition_racks
    for i in range(topic.num_partitions):
        parts.append(_I.pack(i))
        if i < len(racks):
            for rack in sorted(racks[i]):
                parts.append(_I.pack(len(rack.encode("utf-16-le")) // 2))
                parts.append(_string(rack))
    return _signed(xxhash.xxh3_64_intdigest(b"".join(parts)))


def group_hash(
    names: Iterable[str], topics: TopicsImage, cache: dict[str, int] | None = None
) -> int:
    """The hash of the subscribed topics that exist (0 if none does)."""
    hashes: list[bytes] = []
    for name in sorted(names):
        h = cache.get(name) if cache is not None else None
        if h is None:
            t = topics.topic(name)
            if t is None:
                continue
            h = topic_hash(t)
            if cache is not None:
                cache[name] = h
        hashes.append(_Q.pack(h))
    if not hashes:
        return 0
    return _signed(xxhash.xxh3_64_intdigest(b"".join(hashes)))
