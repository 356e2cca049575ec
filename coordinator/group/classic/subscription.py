"""Reading the topics out of a consumer's JoinGroup protocol metadata.

How this works
--------------
Consumers (protocol type "consumer") put a ConsumerProtocolSubscription in
each JoinGroup protocol's metadata:

    int16 version, [string topics], nullable bytes user_data,
    v1+ [owned partitions], v2+ int32 generation id, v3+ nullable string rack id

Every version starts with the v0 layout, so, like Kafka, we read only the v0
prefix (topics and user_data) and ignore whatever follows.  The coordinator
needs the topics for OffsetDelete (GROUP_SUBSCRIBED_TO_TOPIC) and for offset
expiry of Stable groups.  Metadata is client-controlled bytes: anything
malformed yields ``None`` ("unknown"), never an exception.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "ConsumerSubscription",
    "encode_assignment",
    "encode_subscription",
    "parse_assignment",
    "parse_subscription",
    "parse_subscription_topics",
]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def parse_subscription_topics(data: bytes) -> frozenset[str] | None:
    """Topics of a ConsumerProtocolSubscription, or None if the bytes do not parse."""
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version < 0:
            return None
        pos = 2
        (count,) = _I32.unpack_from(data, pos)
        pos += 4
        if count < 0 or count > len(data):
            return None
        topics: list[str] = []
        for _ in range(count):
            (n,) = _I16.unpack_from(data, pos)
            pos += 2
            if n < 0 or pos + n > len(data):
                return None
            topics.append(data[pos : pos + n].decode())
            pos += n
        # user_data must be present (possibly null) for the v0 prefix to be whole.
        (ulen,) = _I32.unpack_from(data, pos)
        pos += 4
        if ulen < -1 or (ulen > 0 and pos + ulen > len(data)):
            return None
        return frozenset(topics)
    except (struct.error, UnicodeDecodeError):
        return None


# ------------------------------------------------------------ whole messages
# Consumer groups (KIP-848) serve classic members: they read the owned partitions and
# rack of a subscription, and hand out assignments in the member's own format.


@dataclass(frozen=True, slots=True)
class ConsumerSubscription:
    version: int
    topics: list[str]
    user_data: bytes | None
    owned_partitions: list[tuple[str, list[int]]]  # v1+
    generation_id: int  # v2+, -1 when absent
    rack_id: str | None  # v3+


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def i16(self) -> int:
        (v,) = _I16.unpack_from(self.data, self.pos)
        self.pos += 2
        return int(v)

    def i32(self) -> int:
        (v,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(v)

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise ValueError("string past the end")
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def nbytes(self) -> bytes | None:
        n = self.i32()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise ValueError("bytes past the end")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def count(self) -> int:
        n = self.i32()
        if n < 0 or n > len(self.data):
            raise ValueError("bad array length")
        return n

    def partitions(self) -> list[tuple[str, list[int]]]:
        out = []
        for _ in range(self.count()):
            topic = self.string() or ""
            out.append((topic, [self.i32() for _ in range(self.count())]))
        return out


def parse_subscription(data: bytes) -> ConsumerSubscription | None:
    """A whole ConsumerProtocolSubscription (a newer version read with the newest layout we
    know, as Kafka does), or None if it does not parse."""
    try:
        r = _Reader(data)
        version = r.i16()
        if version < 0:
            return None
        topics = [r.string() or "" for _ in range(r.count())]
        user_data = r.nbytes()
        owned: list[tuple[str, list[int]]] = []
        generation = -1
        rack: str | None = None
        if version >= 1:
            owned = r.partitions()
        if version >= 2:
            generation = r.i32()
        if version >= 3:
            rack = r.string()
        return ConsumerSubscription(version, topics, user_data, owned, generation, rack)
    except (struct.error, UnicodeDecodeError, ValueError):
        return None


def parse_assignment(data: bytes) -> tuple[list[tuple[str, list[int]]], bytes | None] | None:
    """(assigned partitions, user data) of a ConsumerProtocolAssignment, None if malformed."""
    if not data:
        return [], None
    try:
        r = _Reader(data)
        if r.i16() < 0:
            return None
        parts = r.partitions()
        return parts, r.nbytes()
    except (struct.error, UnicodeDecodeError, ValueError):
        return None


def _kstr(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


def encode_assignment(version: int, parts: list[tuple[str, list[int]]]) -> bytes:
    """A ConsumerProtocolAssignment (every version has the same layout), without user data."""
    out = [_I16.pack(max(0, min(version, 3))), _I32.pack(len(parts))]
    for topic, ps in parts:
        out.append(_kstr(topic))
        out.append(_I32.pack(len(ps)))
        out.extend(_I32.pack(p) for p in ps)
    out.append(_I32.pack(-1))
    return b"".join(out)


def encode_subscription(
    version: int,
    topics: list[str],
    owned: list[tuple[str, list[int]]],
    generation_id: int = -1,
    rack_id: str | None = None,
) -> bytes:
    """A ConsumerProtocolSubscription (tests and conversions build them)."""
    out = [_I16.pack(version), _I32.pack(len(topics))]
    out.extend(_kstr(t) for t in topics)
    out.append(_I32.pack(-1))
    if version >= 1:
        out.append(_I32.pack(len(owned)))
        for topic, ps in owned:
            out.append(_kstr(topic))
            out.append(_I32.pack(len(ps)))
            out.extend(_I32.pack(p) for p in ps)
    if version >= 2:
        out.append(_I32.pack(generation_id))
    if version >= 3:
        out.append(_I16.pack(-1) if rack_id is None else _kstr(rack_id))
    return b"".join(out)
