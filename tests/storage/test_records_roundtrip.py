"""Every record value kgc writes decodes back to itself, and the hand-kept fast paths of
``storage.records.offsets`` write and read exactly what the generated codecs do.

The record codecs were hand-written before they were generated from Kafka's schemas; the
generated ones were checked byte for byte against them over these strategies (and over
random bytes) before the hand-written modules went. The golden bytes stay in
test_offsets_format.py and test_consumer_group_format.py.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

import storage.records as rec
from storage.records.messages import offsets as gen

text = st.text(max_size=20)
ntext = st.none() | text
i8 = st.integers(-128, 127)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
uuid = st.binary(min_size=16, max_size=16)
blob = st.binary(max_size=30)
partitions = st.lists(i32, max_size=4)


@given(text, text, i32)
def test_offset_commit_key_fast_path_is_the_generated_codec(group: str, topic: str, p: int) -> None:
    data = rec.encode_offset_commit_key(group, topic, p)
    out = bytearray(b"\x00\x01")
    gen.OFFSET_COMMIT_KEY_ENCODERS[0](gen.OffsetCommitKey(group, topic, p), out)
    assert data == bytes(out)
    assert rec.decode_key(data) == rec.OffsetCommitKey(group, topic, p, 1)


@given(i64, text, i64, i32, st.none() | i64)
def test_offset_commit_value_round_trips(
    offset: int, metadata: str, ts: int, epoch: int, expire: int | None
) -> None:
    data = rec.encode_offset_commit_value(
        offset, metadata, ts, leader_epoch=epoch, expire_timestamp=expire
    )
    version = 3 if expire is None else 1
    value = gen.OffsetCommitValue(offset, epoch, metadata, ts, -1 if expire is None else expire)
    out = bytearray(struct.pack(">h", version))
    gen.OFFSET_COMMIT_VALUE_ENCODERS[version](value, out)
    assert data == bytes(out)
    decoded = rec.decode_offset_commit_value(data)
    assert decoded == rec.OffsetCommitValue(
        offset,
        metadata,
        ts,
        epoch if version == 3 else -1,
        -1 if expire is None else expire,
        version,
    )


@given(i64, text, i64, i32, st.integers(0, 4))
def test_offset_commit_value_reads_every_version(
    offset: int, metadata: str, ts: int, epoch: int, version: int
) -> None:
    out = bytearray(struct.pack(">h", version))
    gen.OFFSET_COMMIT_VALUE_ENCODERS[version](
        gen.OffsetCommitValue(offset, epoch, metadata, ts, 7), out
    )
    v = rec.decode_offset_commit_value(bytes(out))
    assert (v.offset, v.metadata, v.commit_timestamp, v.version) == (offset, metadata, ts, version)
    assert v.leader_epoch == (epoch if version >= 3 else -1)
    assert v.expire_timestamp == (7 if version == 1 else -1)


members = st.lists(
    st.builds(rec.MemberMetadata, text, ntext, text, text, i32, i32, blob, blob), max_size=3
)


@given(text, i32, ntext, ntext, i64, members)
def test_group_metadata_value_round_trips(
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    ts: int,
    ms: list[rec.MemberMetadata],
) -> None:
    data = rec.encode_group_metadata_value(protocol_type, generation, protocol, leader, ts, ms)
    assert rec.decode_group_metadata_value(data) == rec.GroupMetadataValue(
        protocol_type, generation, protocol, leader, ts, tuple(ms), 3
    )
    assert rec.decode_key(rec.encode_group_metadata_key(protocol_type)) == rec.GroupMetadataKey(
        protocol_type
    )


@st.composite
def current_partitions(draw: st.DrawFn) -> list[rec.TopicPartitions]:
    out = []
    for tid, parts in draw(st.lists(st.tuples(uuid, partitions), max_size=3)):
        epochs = draw(st.none() | st.lists(i32, min_size=len(parts), max_size=len(parts)))
        out.append(rec.TopicPartitions(tid, parts, epochs))
    return out


target_partitions = st.lists(
    st.tuples(uuid, partitions).map(lambda t: rec.TopicPartitions(*t)), max_size=3
)
classic = st.none() | st.builds(
    rec.ClassicMemberMetadata, i32, st.lists(st.tuples(text, blob), max_size=2)
)
cg_values: st.SearchStrategy[tuple[rec.ConsumerGroupKey, rec.ConsumerGroupValue]] = st.one_of(
    st.tuples(
        text.map(rec.ConsumerGroupMetadataKey),
        st.builds(rec.ConsumerGroupMetadataValue, i32, i64),
    ),
    st.tuples(
        text.map(rec.ConsumerGroupPartitionMetadataKey),
        st.builds(
            rec.ConsumerGroupPartitionMetadataValue,
            st.lists(
                st.builds(
                    rec.TopicMetadata,
                    uuid,
                    text,
                    i32,
                    st.lists(
                        st.builds(rec.PartitionMetadata, i32, st.lists(text, max_size=2)),
                        max_size=2,
                    ),
                ),
                max_size=2,
            ),
        ),
    ),
    st.tuples(
        st.tuples(text, text).map(lambda t: rec.ConsumerGroupMemberMetadataKey(*t)),
        st.builds(
            rec.ConsumerGroupMemberMetadataValue,
            ntext,
            ntext,
            text,
            text,
            st.lists(text, max_size=3),
            ntext,
            i32,
            ntext,
            classic,
        ),
    ),
    st.tuples(
        text.map(rec.ConsumerGroupTargetAssignmentMetadataKey),
        st.builds(rec.ConsumerGroupTargetAssignmentMetadataValue, i32),
    ),
    st.tuples(
        st.tuples(text, text).map(lambda t: rec.ConsumerGroupTargetAssignmentMemberKey(*t)),
        st.builds(rec.ConsumerGroupTargetAssignmentMemberValue, target_partitions),
    ),
    st.tuples(
        st.tuples(text, text).map(lambda t: rec.ConsumerGroupCurrentMemberAssignmentKey(*t)),
        st.builds(
            rec.ConsumerGroupCurrentMemberAssignmentValue,
            i32,
            i32,
            i8,
            current_partitions(),
            current_partitions(),
        ),
    ),
    st.tuples(
        st.tuples(text, text).map(lambda t: rec.ConsumerGroupRegularExpressionKey(*t)),
        st.builds(rec.ConsumerGroupRegularExpressionValue, st.lists(text, max_size=3), i64, i64),
    ),
)


@settings(max_examples=300)
@given(cg_values)
def test_consumer_group_records_round_trip(
    record: tuple[rec.ConsumerGroupKey, rec.ConsumerGroupValue],
) -> None:
    key, value = record
    key_bytes = rec.encode_consumer_group_key(key)
    assert rec.decode_key(key_bytes) == key
    assert rec.decode_consumer_group_value(key, rec.encode_consumer_group_value(value)) == value
