"""A tagged field without "versions" exists in its tagged versions, as Kafka's FieldSpec has it."""

from __future__ import annotations

from coordinator.txn.metadata import TxnTransit
from coordinator.txn.records import decode_txn_value, encode_txn_value
from coordinator.txn.state import TransactionState
from protocol.codegen.schema import Versions, build_fields, layout


def test_tagged_field_without_versions_takes_its_tagged_versions() -> None:
    raw = [
        {"name": "A", "type": "int32", "versions": "0+"},
        {"name": "B", "type": "int64", "taggedVersions": "1+", "tag": 0, "default": -1},
    ]
    fields = build_fields(raw, {}, "Owner")
    assert fields[1].versions == Versions(1, 1 << 15)
    assert [f[0] for f in layout(raw, 0, True)] == ["A"]
    assert [f[0] for f in layout(raw, 1, True)] == ["A", "B"]


def test_transaction_value_tags_in_tag_order() -> None:
    # Kafka's generated TransactionLogValue writes tags 0 (PreviousProducerId),
    # 1 (NextProducerId), 2 (ClientTransactionVersion) ascending, each only off default.
    t = TxnTransit(1, 7, 9, 2, -1, 3, TransactionState.COMPLETE_COMMIT, frozenset(), 5, 4, 2)
    expect = (
        b"\x00\x01"
        + (1).to_bytes(8, "big")
        + (2).to_bytes(2, "big")
        + (3).to_bytes(4, "big")
        + b"\x04"  # CompleteCommit
        + b"\x01"  # an empty partition list
        + (4).to_bytes(8, "big")
        + (5).to_bytes(8, "big")
        + b"\x03"
        + b"\x00\x08"
        + (7).to_bytes(8, "big")
        + b"\x01\x08"
        + (9).to_bytes(8, "big")
        + b"\x02\x02"
        + (2).to_bytes(2, "big")
    )
    assert encode_txn_value(t) == expect
    assert decode_txn_value(expect) == t
