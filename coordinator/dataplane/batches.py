"""A produced batch's checks and patches beyond its framing, as Kafka's LogValidator makes them.

How this works: ``reads.validate_produced`` checks a Produce payload's framing; the checks
here read its records: a compacted topic refuses records without a key
(``keyless_record_errors``), a CreateTime record may lead the broker's clock by at most
``TIMESTAMP_AFTER_MAX_MS`` (``future_timestamp_errors``), each refusal reported with Kafka's
messages (``record_errors_message``). A topic with message.timestamp.type=LogAppendTime gets
its batch stamped (``stamp_log_append_time``: max timestamp, attribute bit, new CRC).
"""

from __future__ import annotations

import struct

import crc32c as _crc32c

from protocol.messages.produce import BatchIndexAndErrorMessage
from storage.record_batch import ATTR_LOG_APPEND_TIME, iter_record_tuples, key_values

_ATTRS = struct.Struct(">h")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")


def stamp_log_append_time(batch: bytes, now_ms: int) -> bytes:
    """The batch with LogAppendTime semantics: max timestamp = now, attribute bit 3, new CRC."""
    b = bytearray(batch)
    (attrs,) = _ATTRS.unpack_from(b, 21)
    _ATTRS.pack_into(b, 21, attrs | ATTR_LOG_APPEND_TIME)
    _I64.pack_into(b, 35, now_ms)
    _U32.pack_into(b, 17, _crc32c.crc32c(memoryview(b)[21:]))
    return bytes(b)


def keyless_record_errors(batch: bytes, partition: str) -> list[BatchIndexAndErrorMessage]:
    """The records of ``batch`` without a key, as Kafka's LogValidator reports them when the
    topic is compacted (a record without a key could never be compacted away)."""
    why = f"Compacted topic cannot accept message without key in topic partition {partition}"
    return [
        BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=why)
        for i, (key, _) in enumerate(key_values(batch))
        if key is None
    ]


# Kafka 4's message.timestamp.after.max.ms default (KIP-937): a CreateTime record may lead the
# broker's clock by at most this much. kgc does not let topics change it (topic_configs), and
# message.timestamp.before.max.ms stays Kafka's unbounded default.
TIMESTAMP_AFTER_MAX_MS = 3_600_000
_LONG_MAX = 2**63 - 1


def future_timestamp_errors(batch: bytes, now_ms: int) -> list[BatchIndexAndErrorMessage]:
    """The records of ``batch`` stamped more than TIMESTAMP_AFTER_MAX_MS after ``now_ms``,
    with Kafka's LogValidator message (its bounds as Java prints the long arithmetic)."""
    bounds = f"[{now_ms - _LONG_MAX}, {now_ms + TIMESTAMP_AFTER_MAX_MS}]"
    return [
        BatchIndexAndErrorMessage(
            batch_index=i,
            batch_index_error_message=(
                f"Timestamp {ts} of message with offset {offset} is out of range. "
                f"The timestamp should be within {bounds}"
            ),
        )
        for i, (offset, ts, _k, _v) in enumerate(iter_record_tuples(batch))
        if ts - now_ms > TIMESTAMP_AFTER_MAX_MS
    ]


def record_errors_message(errors: list[BatchIndexAndErrorMessage]) -> str:
    """Kafka's summary of refused records (ReplicaManager, RecordValidationException)."""
    shown = ", ".join(
        f"RecordError(batchIndex={e.batch_index}, message='{e.batch_index_error_message}')"
        for e in errors[:3]
    )
    return (
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]"
    )


def first_batch_attributes(records: bytes | None) -> int:
    """The attributes of the first batch in ``records`` (0 when there is none)."""
    if records is None or len(records) < 23:
        return 0
    return int(_ATTRS.unpack_from(records, 21)[0])
