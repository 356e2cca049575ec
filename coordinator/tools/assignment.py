"""The consumer protocol's assignment bytes, as the tools read and write them.

How this works: a classic consumer group's leader hands each member a
ConsumerProtocolAssignment (int16 version, [topic, [partition]], user data); the tools
decode it to show who owns what, and write it in tests. Later versions only append
fields, so anything unknown at the end is ignored.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["Assignment", "decode_assignment", "encode_assignment"]


@dataclass(slots=True)
class Assignment:
    version: int
    partitions: dict[str, list[int]]
    user_data: bytes | None = None


def decode_assignment(data: bytes) -> Assignment:
    """ConsumerProtocolAssignment v0-v3: int16 version, [topic, [partition]], user_data.

    Later versions only append fields, so anything we do not know is ignored.
    """
    if not data:
        return Assignment(0, {})
    try:
        (version,) = struct.unpack_from(">h", data, 0)
        pos = 2
        (n_topics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        parts: dict[str, list[int]] = {}
        for _ in range(max(n_topics, 0)):
            (tlen,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if tlen < 0 or pos + tlen > len(data):
                raise struct.error("topic name runs past the end")
            topic = data[pos : pos + tlen].decode()
            pos += tlen
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            parts.setdefault(topic, []).extend(struct.unpack_from(f">{max(n, 0)}i", data, pos))
            pos += 4 * max(n, 0)
        user_data: bytes | None = None
        if pos + 4 <= len(data):
            (ulen,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if ulen >= 0:
                user_data = bytes(data[pos : pos + ulen])
        return Assignment(version, parts, user_data)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"undecodable consumer assignment ({len(data)} bytes)") from exc


def encode_assignment(
    partitions: dict[str, list[int]], version: int = 0, user_data: bytes | None = None
) -> bytes:
    """The inverse of ``decode_assignment`` (for tests and tools)."""
    out = [struct.pack(">hi", version, len(partitions))]
    for topic, parts in partitions.items():
        raw = topic.encode()
        out.append(
            struct.pack(">h", len(raw)) + raw + struct.pack(f">i{len(parts)}i", len(parts), *parts)
        )
    out.append(
        struct.pack(">i", -1)
        if user_data is None
        else struct.pack(">i", len(user_data)) + user_data
    )
    return b"".join(out)
