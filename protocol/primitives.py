"""Runtime helpers shared by the generated codec in ``protocol/messages``.

How this works: the generator emits straight-line code per message and version, and
inlines fixed-width fields as precompiled ``struct.Struct`` calls. Only the variable-length
pieces that need a loop (unsigned varints) and the skipping of unknown tagged fields live
here, so a decode is a sequence of slices and ``unpack_from`` calls with no per-field
interpretation at run time.
"""

from __future__ import annotations

from struct import Struct

__all__ = [
    "UVARINT_SMALL",
    "DecodeError",
    "read_uvarint",
    "skip_tagged_fields",
    "uvarint",
]


class DecodeError(ValueError):
    """A frame that does not parse as the message and version it claims to be."""


# Encodings of 0..127 are one byte; caching them avoids a function call per length prefix.
UVARINT_SMALL: tuple[bytes, ...] = tuple(bytes((i,)) for i in range(128))

_B = Struct(">B")


def uvarint(value: int) -> bytes:
    """Unsigned LEB128, as used for compact lengths and tag headers."""
    if value < 128:
        return UVARINT_SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Read an unsigned varint at ``pos``; return (value, next position)."""
    shift = 0
    result = 0
    while True:
        if pos >= len(buf):
            raise DecodeError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise DecodeError("varint too long")


def skip_tagged_fields(buf: bytes, pos: int) -> int:
    """Skip a whole tagged-field section whose fields are all unknown to this version."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise DecodeError("truncated tagged field")
    return pos
