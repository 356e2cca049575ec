"""Streams group records: bytes as Kafka 4.4 writes them, and every type through decode_key."""

from __future__ import annotations

from coordinator.group.streams import records as rec
from coordinator.group.streams.group import StreamsGroupMember, TasksTuple
from storage.records import decode_key
from storage.records.streams_group import (
    StreamsGroupKey,
    decode_streams_group_value,
    encode_streams_group_key,
    encode_streams_group_value,
)


def test_group_metadata_bytes_are_kafkas() -> None:
    # MessageUtil.toVersionPrefixedBytes(0, StreamsGroupMetadataValue) from Kafka 4.4's
    # group-coordinator jar: epoch 2, hash 5, validated epoch 0, num.standby.replicas=1.
    kafka = bytes.fromhex(
        "000000000002000000000000000502000400000000011902156e756d2e7374616e6462792e7265706c69636173023100"
    )
    k, v = rec.group_metadata("g", 2, 5, 0, {"num.standby.replicas": "1"})
    assert encode_streams_group_value(k.rtype, v) == kafka
    assert decode_streams_group_value(17, kafka) == v


def test_every_record_round_trips() -> None:
    m = StreamsGroupMember(
        "m1",
        member_epoch=3,
        previous_member_epoch=2,
        process_id="p",
        user_endpoint=("h", 9),
        client_tags={"b": "2", "a": "1"},
        active={"0": {1: 3, 0: 2}},
        standby={"1": frozenset({2})},
        pending_active={"1": {0: 1}},
    )
    records = [
        rec.member_metadata("g", m),
        rec.target_metadata("g", 3, 1234),
        rec.target_member("g", "m1", TasksTuple({"0": frozenset({0, 1})}, {"1": frozenset({2})})),
        rec.current_assignment("g", m),
        *rec.member_removed("g", "m1"),
    ]
    for k, v in records:
        data = encode_streams_group_key(k)
        assert decode_key(data) == k
        if v is not None:
            assert decode_streams_group_value(k.rtype, encode_streams_group_value(k.rtype, v)) == v
    value = rec.current_assignment("g", m)[1]
    assert [(t.subtopology_id, t.partitions, t.assignment_epochs) for t in value.active_tasks] == [
        ("0", [0, 1], [2, 3])
    ]
    assert value.standby_tasks[0].assignment_epochs is None
    assert decode_key(encode_streams_group_key(StreamsGroupKey(23, "g"))) == StreamsGroupKey(
        23, "g"
    )
