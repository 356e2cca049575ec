"""The one error a stored record raises when its bytes do not parse.

How this works: every decoder of ``storage.records`` turns a malformed key or value
(truncated, trailing bytes, a null where the schema has none, an unknown version) into
``OffsetsFormatError``, so a replay or the audit catches one type. The offsets-topic
decoders let a ``UnicodeDecodeError`` from a string field through unchanged, as they
always have (the audit's columnar decoder relies on it); the consumer-group ones convert it.
"""

from __future__ import annotations

__all__ = ["OffsetsFormatError"]


class OffsetsFormatError(ValueError):
    """Bytes that do not match any known version of the schema."""
