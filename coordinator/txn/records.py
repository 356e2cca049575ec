"""``__transaction_state`` records: Kafka's TransactionLogKey/Value, built and read here.

How this works: a key is the int16 record type 0 then TransactionLogKey v0 (the
transactional id); a value is an int16 version then TransactionLogValue. kgc writes v1
(flexible) as Kafka 4.x does with ``transaction.version`` >= 1, with the tagged fields
PreviousProducerId (tag 0), NextProducerId (tag 1) and ClientTransactionVersion (tag 2)
written only when they differ from their defaults (the generated codec,
``storage/records/messages/transaction.py``, does that); it reads v0 and v1. A null value
is a tombstone: the id expired. Partitions are null in Empty, the set in Ongoing and
Prepare*, and an empty list in Complete* (``TransactionLog.valueToBytes``).
"""

from __future__ import annotations

import struct

from coordinator.txn.metadata import TxnTransit
from coordinator.txn.state import TransactionState
from protocol.primitives import DecodeError
from storage.records.errors import OffsetsFormatError
from storage.records.messages.transaction import (
    TRANSACTION_LOG_KEY_DECODERS,
    TRANSACTION_LOG_KEY_ENCODERS,
    TRANSACTION_LOG_VALUE_DECODERS,
    TRANSACTION_LOG_VALUE_ENCODERS,
    PartitionsSchema,
    TransactionLogKey,
    TransactionLogValue,
)

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "decode_txn_key",
    "decode_txn_value",
    "encode_txn_key",
    "encode_txn_value",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"
_I16 = struct.Struct(">h")
_VALUE_VERSION = 1


def encode_txn_key(transactional_id: str) -> bytes:
    out = bytearray(_I16.pack(0))
    TRANSACTION_LOG_KEY_ENCODERS[0](TransactionLogKey(transactional_id), out)
    return bytes(out)


def decode_txn_key(data: bytes) -> str | None:
    """The transactional id; None for a key of another record type (skipped on load)."""
    if len(data) < 2:
        raise OffsetsFormatError("transaction log key shorter than its version field")
    (version,) = _I16.unpack_from(data, 0)
    if version != 0:
        return None
    try:
        key, end = TRANSACTION_LOG_KEY_DECODERS[0](data, 2)
    except (DecodeError, struct.error, IndexError, UnicodeDecodeError) as e:
        raise OffsetsFormatError(f"malformed transaction log key: {e}") from None
    if end != len(data):
        raise OffsetsFormatError("trailing bytes in transaction log key")
    return key.transactional_id


def _partitions(t: TxnTransit) -> list[PartitionsSchema] | None:
    if t.state is TransactionState.EMPTY:
        if t.partitions:
            raise ValueError("partitions in an Empty transaction")
        return None
    by_topic: dict[str, list[int]] = {}
    for topic, partition in t.partitions:
        by_topic.setdefault(topic, []).append(partition)
    return [PartitionsSchema(topic, sorted(ps)) for topic, ps in sorted(by_topic.items())]


def encode_txn_value(t: TxnTransit) -> bytes:
    if t.state in (TransactionState.DEAD, TransactionState.PREPARE_EPOCH_FENCE):
        raise ValueError(f"{t.state.kafka_name} is never written")
    body = TransactionLogValue(
        producer_id=t.producer_id,
        previous_producer_id=t.prev_producer_id,
        next_producer_id=t.next_producer_id,
        producer_epoch=t.producer_epoch,
        transaction_timeout_ms=t.txn_timeout_ms,
        transaction_status=int(t.state),
        transaction_partitions=_partitions(t),
        transaction_last_update_timestamp_ms=t.txn_last_update_timestamp,
        transaction_start_timestamp_ms=t.txn_start_timestamp,
        client_transaction_version=t.client_transaction_version,
    )
    out = bytearray(_I16.pack(_VALUE_VERSION))
    TRANSACTION_LOG_VALUE_ENCODERS[_VALUE_VERSION](body, out)
    return bytes(out)


def decode_txn_value(data: bytes) -> TxnTransit:
    """A value as the transit it records (last epoch -1: it is never written)."""
    if len(data) < 2:
        raise OffsetsFormatError("transaction log value shorter than its version field")
    (version,) = _I16.unpack_from(data, 0)
    decoder = TRANSACTION_LOG_VALUE_DECODERS.get(version)
    if decoder is None:
        # Kafka reads a future version by its known fields; kgc never wrote one.
        decoder = TRANSACTION_LOG_VALUE_DECODERS[_VALUE_VERSION]
    try:
        v, end = decoder(data, 2)
    except (DecodeError, struct.error, IndexError, UnicodeDecodeError) as e:
        raise OffsetsFormatError(f"malformed transaction log value: {e}") from None
    if end != len(data):
        raise OffsetsFormatError("trailing bytes in transaction log value")
    try:
        state = TransactionState(v.transaction_status)
    except ValueError:
        raise OffsetsFormatError(f"unknown transaction status {v.transaction_status}") from None
    parts = frozenset(
        (p.topic, i) for p in (v.transaction_partitions or ()) for i in p.partition_ids
    )
    return TxnTransit(
        producer_id=v.producer_id,
        prev_producer_id=v.previous_producer_id,
        next_producer_id=v.next_producer_id,
        producer_epoch=v.producer_epoch,
        last_producer_epoch=-1,
        txn_timeout_ms=v.transaction_timeout_ms,
        state=state,
        partitions=parts,
        txn_start_timestamp=v.transaction_start_timestamp_ms,
        txn_last_update_timestamp=v.transaction_last_update_timestamp_ms,
        client_transaction_version=v.client_transaction_version,
    )
