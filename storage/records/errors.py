"""The one error a stored record raises when its bytes do not parse, and the call that raises it.

How this works: every decoder of ``storage.records`` reads a key or value through
``parse_body``, which runs a generated decoder past the int16 prefix and turns a malformed
record (truncated, trailing bytes, a null where the schema has none) into
``OffsetsFormatError``, so a replay or the audit catches one type. The offsets-topic
decoders let a ``UnicodeDecodeError`` from a string field through unchanged, as they always
have (the audit's columnar decoder relies on it); the consumer-group ones convert it too.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TypeVar

from protocol.primitives import DecodeError

__all__ = ["OffsetsFormatError", "parse_body"]


class OffsetsFormatError(ValueError):
    """Bytes that do not match any known version of the schema."""


_T = TypeVar("_T")


def parse_body(
    decoder: Callable[[bytes, int], tuple[_T, int]],
    data: bytes,
    what: str,
    *,
    utf8_errors_are_corrupt: bool,
) -> _T:
    """Run a generated decoder over ``data`` after its int16 prefix; all of it must parse."""
    try:
        value, end = decoder(data, 2)
    except (DecodeError, struct.error, IndexError) as e:
        raise OffsetsFormatError(f"malformed {what}: {e}") from None
    except UnicodeDecodeError as e:
        if not utf8_errors_are_corrupt:
            raise
        raise OffsetsFormatError(f"malformed {what}: {e}") from None
    if end != len(data):
        if end > len(data):
            raise OffsetsFormatError(f"truncated {what}")
        raise OffsetsFormatError(f"{len(data) - end} trailing bytes in {what}")
    return value
