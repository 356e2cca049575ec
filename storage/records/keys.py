"""The one switch on the record type of a ``__consumer_offsets`` key.

How this works: a key starts with its int16 record type (Kafka's ``apiKey`` of the key
schema), and ``decode_key`` dispatches on it in one place, the shape of Kafka's
``GroupCoordinatorShard.replay``: 0-1 offset commits, 2 classic group metadata, 3-8 and 16
KIP-848 consumer groups, 10-15 KIP-932 share groups, 17 and 19-23 KIP-1071 streams
groups; any other type comes back as ``UnknownKey`` so a replay can skip it. The
offset-commit key is tested first, by two byte comparisons, and read in place: it is
nearly every record of a replay.
"""

from __future__ import annotations

import struct
from typing import TypeAlias

from storage.records.consumer_group import (
    CONSUMER_GROUP_RECORD_TYPES,
    ConsumerGroupKey,
    decode_consumer_group_key,
)
from storage.records.errors import OffsetsFormatError
from storage.records.offsets import (
    GroupMetadataKey,
    OffsetCommitKey,
    UnknownKey,
    decode_group_metadata_key,
)
from storage.records.share_group import (
    SHARE_GROUP_RECORD_TYPES,
    ShareGroupKey,
    decode_share_group_key,
)
from storage.records.streams_group import (
    STREAMS_GROUP_RECORD_TYPES,
    StreamsGroupKey,
    decode_streams_group_key,
)

__all__ = ["RecordKey", "decode_key"]

RecordKey: TypeAlias = (
    OffsetCommitKey
    | GroupMetadataKey
    | ConsumerGroupKey
    | ShareGroupKey
    | StreamsGroupKey
    | UnknownKey
)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# tuple.__new__ skips the NamedTuple's Python-level __new__ on hot paths.
_new = tuple.__new__


def decode_key(data: bytes) -> RecordKey:
    if len(data) < 2:
        raise OffsetsFormatError("key shorter than its version field")
    if data[0] == 0 and data[1] <= 1:
        # Offset commit key (types 0 and 1, the generated OffsetCommitKey's layout), read
        # here rather than through a call: it is nearly every record of a replay, so
        # lengths are read by indexing instead of struct calls.
        try:
            gend = 4 + ((data[2] << 8) | data[3])
            tend = gend + 2 + ((data[gend] << 8) | data[gend + 1])
        except IndexError:
            raise OffsetsFormatError("truncated offset commit key") from None
        if tend + 4 != len(data):
            raise OffsetsFormatError("offset commit key has trailing or missing bytes")
        return _new(
            OffsetCommitKey,
            (
                data[4:gend].decode(),
                data[gend + 2 : tend].decode(),
                _I32.unpack_from(data, tend)[0],
                data[1],
            ),
        )
    (rtype,) = _I16.unpack_from(data, 0)
    if rtype == 2:
        return decode_group_metadata_key(data)
    if rtype in CONSUMER_GROUP_RECORD_TYPES:
        return decode_consumer_group_key(data)
    if rtype in STREAMS_GROUP_RECORD_TYPES:
        return decode_streams_group_key(data)
    if rtype in SHARE_GROUP_RECORD_TYPES:
        return decode_share_group_key(data)
    return UnknownKey(rtype, bytes(data))
