"""The versions Kafka 4 dropped (KIP-896) and kgc serves again: Kafka 3.9's layouts, byte for byte.

How this works: the generator extends Kafka 4's schemas down to Kafka 3.9's first versions
(``protocol/schemas/kafka-3.9``) and refuses a merge where a re-added version would not lay
out exactly 3.9's fields; these tests check that refusal, the resulting ranges, and encode
the old requests and responses old clients exchange against frames written out here by hand
from Kafka's protocol guide (field order and widths), so a wrong layout cannot pass.
"""

from __future__ import annotations

import copy
import struct

import pytest

from protocol import codegen
from protocol.framing import decode_request, encode_response
from protocol.messages import (
    create_topics,
    delete_topics,
    fetch,
    list_offsets,
    offset_commit,
    offset_fetch,
    produce,
)

# Kafka 3.9's first version of each message Kafka 4 cut (its schemas' validVersions).
KAFKA_39_MIN = {
    produce: 0,
    fetch: 0,
    list_offsets: 0,
    offset_commit: 0,
    offset_fetch: 0,
    create_topics: 0,
    delete_topics: 0,
}


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _header(api_key: int, version: int, correlation_id: int = 7, client_id: str = "old") -> bytes:
    return struct.pack(">hhi", api_key, version, correlation_id) + _str(client_id)


@pytest.mark.parametrize("mod", list(KAFKA_39_MIN), ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_ranges_start_where_kafka_39_did(mod: object) -> None:
    assert KAFKA_39_MIN[mod] == mod.MIN_VERSION  # type: ignore[attr-defined]


def test_every_old_version_has_a_field_list_from_kafka_39() -> None:
    for api in codegen.OLD_VERSION_APIS:
        for kind in ("Request", "Response"):
            path = codegen.OLD_SCHEMAS / f"{api}{kind}.json"
            text = path.read_text()
            assert codegen.KAFKA_39_REF[:12] in text.splitlines()[0]
            assert '"about"' not in text  # field lists only


def test_merge_refuses_a_version_whose_fields_moved() -> None:
    new = codegen.load_schema("OffsetCommitRequest")
    old = codegen._read_schema((codegen.OLD_SCHEMAS / "OffsetCommitRequest.json").read_text())
    new = copy.deepcopy(new)
    new["validVersions"] = "2-10"
    # As if Kafka 4 had dropped v1's CommitTimestamp from the schema along with the version.
    parts = new["fields"][-1]["fields"][-1]["fields"]
    parts[:] = [f for f in parts if f["name"] != "CommitTimestamp"]
    with pytest.raises(SystemExit, match="OffsetCommitRequest v1"):
        codegen.with_old_versions(new, old)
    # Untouched, it merges to 3.9's first version and Kafka 4's last.
    merged = codegen.with_old_versions(codegen.load_schema("OffsetCommitRequest"), old)
    assert merged["validVersions"] == f"0-{offset_commit.MAX_VERSION}"


def test_offset_commit_v0_and_v1_requests_decode() -> None:
    # v0: group, topics[name, partitions[index, offset, metadata]].
    body = (
        _str("g")
        + struct.pack(">i", 1)
        + _str("t")
        + struct.pack(">i", 1)
        + struct.pack(">iq", 3, 42)
        + _str("m")
    )
    header, req = decode_request(_header(8, 0) + body, strict=True)
    assert header.api_version == 0
    assert req.group_id == "g" and req.generation_id_or_member_epoch == -1 and req.member_id == ""
    p = req.topics[0].partitions[0]
    assert (req.topics[0].name, p.partition_index, p.committed_offset, p.committed_metadata) == (
        "t",
        3,
        42,
        "m",
    )
    assert p.commit_timestamp == -1
    # v1: group, generation, member, topics[name, partitions[index, offset, timestamp, metadata]].
    body = (
        _str("g")
        + struct.pack(">i", 5)
        + _str("member-1")
        + struct.pack(">i", 1)
        + _str("t")
        + struct.pack(">i", 1)
        + struct.pack(">iqq", 0, 7, 1_600_000_000_000)
        + _str("")
    )
    _, req = decode_request(_header(8, 1) + body, strict=True)
    assert (req.generation_id_or_member_epoch, req.member_id) == (5, "member-1")
    assert req.retention_time_ms == -1
    assert req.topics[0].partitions[0].commit_timestamp == 1_600_000_000_000


def test_offset_commit_v0_response_is_topics_only() -> None:
    resp = offset_commit.Response(
        throttle_time_ms=99,
        topics=[
            offset_commit.OffsetCommitResponseTopic(
                name="t",
                partitions=[
                    offset_commit.OffsetCommitResponsePartition(partition_index=3, error_code=25)
                ],
            )
        ],
    )
    frame = encode_response(8, 0, 7, resp)
    want = struct.pack(">i", 7) + struct.pack(">i", 1) + _str("t") + struct.pack(">iih", 1, 3, 25)
    assert frame == struct.pack(">i", len(want)) + want


def test_offset_fetch_v0_matches_v1() -> None:
    body = _str("g") + struct.pack(">i", 1) + _str("t") + struct.pack(">ii", 1, 2)
    _, r0 = decode_request(_header(9, 0) + body, strict=True)
    _, r1 = decode_request(_header(9, 1) + body, strict=True)
    assert r0 == r1
    assert r0.topics[0].partition_indexes == [2]


def test_produce_v0_to_v2_requests_carry_message_sets() -> None:
    message_set = b"\x00" * 8 + struct.pack(">i", 3) + b"abc"  # opaque bytes to the codec
    body = (
        struct.pack(">hi", 1, 1500)
        + struct.pack(">i", 1)
        + _str("t")
        + struct.pack(">i", 1)
        + struct.pack(">i", 0)
        + struct.pack(">i", len(message_set))
        + message_set
    )
    for v in (0, 1, 2):
        _, req = decode_request(_header(0, v) + body, strict=True)
        assert (req.acks, req.timeout_ms, req.transactional_id) == (1, 1500, None)
        assert req.topic_data[0].partition_data[0].records == message_set


def test_produce_v0_v1_v2_responses() -> None:
    part = produce.PartitionProduceResponse(
        index=0, error_code=0, base_offset=10, log_append_time_ms=123, log_start_offset=0
    )
    resp = produce.Response(
        responses=[produce.TopicProduceResponse(name="t", partition_responses=[part])],
        throttle_time_ms=5,
    )
    topics = struct.pack(">i", 1) + _str("t") + struct.pack(">i", 1)
    v0 = topics + struct.pack(">ihq", 0, 0, 10)
    v1 = v0 + struct.pack(">i", 5)
    v2 = topics + struct.pack(">ihqq", 0, 0, 10, 123) + struct.pack(">i", 5)
    for v, want in ((0, v0), (1, v1), (2, v2)):
        frame = encode_response(0, v, 7, resp)
        assert frame[8:] == want, v


def test_fetch_v0_and_v3_requests() -> None:
    topics = (
        struct.pack(">i", 1) + _str("t") + struct.pack(">i", 1) + struct.pack(">iqi", 0, 5, 1024)
    )
    _, r0 = decode_request(
        _header(1, 0) + struct.pack(">iii", -1, 100, 1) + topics,
        strict=True,
    )
    assert (r0.replica_id, r0.max_wait_ms, r0.min_bytes) == (-1, 100, 1)
    assert r0.max_bytes == 0x7FFFFFFF  # no response limit before v3
    p = r0.topics[0].partitions[0]
    assert (r0.topics[0].topic, p.partition, p.fetch_offset, p.partition_max_bytes) == (
        "t",
        0,
        5,
        1024,
    )
    _, r3 = decode_request(
        _header(1, 3) + struct.pack(">iiii", -1, 100, 1, 4096) + topics,
        strict=True,
    )
    assert r3.max_bytes == 4096


def test_fetch_v0_and_v1_responses() -> None:
    resp = fetch.Response(
        throttle_time_ms=3,
        responses=[
            fetch.FetchableTopicResponse(
                topic="t",
                partitions=[
                    fetch.PartitionData(
                        partition_index=0, error_code=0, high_watermark=9, records=b"xyz"
                    )
                ],
            )
        ],
    )
    parts = struct.pack(">i", 1) + _str("t") + struct.pack(">i", 1)
    part = struct.pack(">ihq", 0, 0, 9) + struct.pack(">i", 3) + b"xyz"
    assert encode_response(1, 0, 7, resp)[8:] == parts + part
    assert encode_response(1, 1, 7, resp)[8:] == struct.pack(">i", 3) + parts + part


def test_list_offsets_v0() -> None:
    body = (
        struct.pack(">i", -1)
        + struct.pack(">i", 1)
        + _str("t")
        + struct.pack(">i", 1)
        + struct.pack(">iqi", 0, -1, 1)
    )
    _, req = decode_request(_header(2, 0) + body, strict=True)
    p = req.topics[0].partitions[0]
    assert (req.replica_id, p.partition_index, p.timestamp, p.max_num_offsets) == (-1, 0, -1, 1)
    resp = list_offsets.Response(
        topics=[
            list_offsets.ListOffsetsTopicResponse(
                name="t",
                partitions=[
                    list_offsets.ListOffsetsPartitionResponse(
                        partition_index=0, error_code=0, old_style_offsets=[12, 0]
                    )
                ],
            )
        ]
    )
    want = (
        struct.pack(">i", 1)
        + _str("t")
        + struct.pack(">i", 1)
        + struct.pack(">ih", 0, 0)
        + struct.pack(">iqq", 2, 12, 0)
    )
    assert encode_response(2, 0, 7, resp)[8:] == want


def test_create_topics_v0_and_delete_topics_v0() -> None:
    body = (
        struct.pack(">i", 1)
        + _str("t")
        + struct.pack(">ih", 3, 1)
        + struct.pack(">i", 0)  # assignments
        + struct.pack(">i", 0)  # configs
        + struct.pack(">i", 5000)  # timeout
    )
    _, req = decode_request(_header(19, 0) + body, strict=True)
    t = req.topics[0]
    assert (t.name, t.num_partitions, t.replication_factor, req.timeout_ms) == ("t", 3, 1, 5000)
    assert req.validate_only is False
    _, dreq = decode_request(
        _header(20, 0) + struct.pack(">i", 1) + _str("t") + struct.pack(">i", 5000),
        strict=True,
    )
    assert dreq.topic_names == ["t"]
    resp = delete_topics.Response(
        throttle_time_ms=1, responses=[delete_topics.DeletableTopicResult(name="t", error_code=3)]
    )
    assert encode_response(20, 0, 7, resp)[8:] == struct.pack(">i", 1) + _str("t") + struct.pack(
        ">h", 3
    )
