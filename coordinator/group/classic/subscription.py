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

__all__ = ["parse_subscription_topics"]

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
