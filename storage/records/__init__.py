"""Kafka's coordinator records, as kgc writes and replays them in ``__consumer_offsets``.

How this works: Kafka publishes every record key and value as a JSON schema
(``protocol/schemas/records``); ``python -m protocol.codegen`` generates their codecs into
``storage.records.messages`` (one module per family: offsets, consumer_group, and the share
group, streams group, share state and transaction records kgc does not write yet). Over them:

* ``offsets``: offset commits (types 0-1) and classic group metadata (type 2), with the
  offsets topic's name and Kafka's group -> partition hash;
* ``consumer_group``: KIP-848 consumer groups (types 3-8, 16);
* ``keys.decode_key``: the one switch on a key's record type;
* ``errors.OffsetsFormatError``: what every decoder raises on bytes that do not parse.

Callers import from here; this package imports nothing but ``protocol`` and itself.
"""

from __future__ import annotations

from storage.records.consumer_group import (
    CONSUMER_GROUP_RECORD_TYPES,
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    PartitionMetadata,
    TopicMetadata,
    TopicPartitions,
    decode_consumer_group_key,
    decode_consumer_group_value,
    encode_consumer_group_key,
    encode_consumer_group_value,
)
from storage.records.errors import OffsetsFormatError
from storage.records.keys import RecordKey, decode_key
from storage.records.offsets import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_group_metadata_value,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    java_string_hash,
    partition_for,
)

__all__ = [
    "CONSUMER_GROUP_RECORD_TYPES",
    "OFFSETS_TOPIC",
    "ClassicMemberMetadata",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupKey",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupRegularExpressionKey",
    "ConsumerGroupRegularExpressionValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "ConsumerGroupValue",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "OffsetsFormatError",
    "PartitionMetadata",
    "RecordKey",
    "TopicMetadata",
    "TopicPartitions",
    "UnknownKey",
    "decode_consumer_group_key",
    "decode_consumer_group_value",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_consumer_group_key",
    "encode_consumer_group_value",
    "encode_group_metadata_key",
    "encode_group_metadata_value",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
    "java_string_hash",
    "partition_for",
]
