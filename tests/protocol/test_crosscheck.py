"""Cross-check the generated codec against two independent client implementations.

* kafka-python 3.0.12 builds its message classes from Kafka's JSON schemas at import
  time and runs them through its own reflective codec. Field names are the same
  snake_case names ours use, so its ``to_dict(json=False)`` view is compared with our
  dataclasses field by field (only the fields it reports for the version in question).
* aiokafka 0.14.0 has hand-written per-version ``Struct`` classes with its own field
  names and ordering. For each API a pair of small "shape" functions maps one of our
  objects onto aiokafka's positional layout for a given version; the decoded aiokafka
  values must equal that layout.

Directions: responses we encode must decode with their client-side decoders (header
included), and requests they encode (header included) must decode with
``framing.decode_request``. Requests at versions below our ``MIN_VERSION`` must be
rejected with ``UnknownApi``. Every version in the union of our range and the library's
range is parametrized; pairs that a library does not implement are skipped with the
reason.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import struct
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from protocol.errors import ErrorCode as E
from protocol.framing import UnknownApi, decode_request, encode_response
from protocol.messages import (
    api_versions,
    delete_groups,
    describe_groups,
    fetch,
    find_coordinator,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    produce,
    sync_group,
)

kp_admin = pytest.importorskip("kafka.protocol.admin")
kp_consumer = pytest.importorskip("kafka.protocol.consumer")
kp_metadata = pytest.importorskip("kafka.protocol.metadata")
kp_producer = pytest.importorskip("kafka.protocol.producer")
aio_api = pytest.importorskip("aiokafka.protocol.api")
aio_types = pytest.importorskip("aiokafka.protocol.types")

CORRELATION_ID = 0x1234ABCD
CLIENT_ID = "crosscheck-client"


# --------------------------------------------------------------------------------------
# Realistic payloads
# --------------------------------------------------------------------------------------


def _str16(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def subscription(topics: list[str], user_data: bytes = b"") -> bytes:
    """ConsumerProtocolSubscription v0, as a Java consumer puts in JoinGroup metadata."""
    out = struct.pack(">hi", 0, len(topics)) + b"".join(_str16(t) for t in topics)
    return out + struct.pack(">i", len(user_data)) + user_data


def assignment(parts: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0, as the leader sends in SyncGroup."""
    out = struct.pack(">hi", 0, len(parts))
    for topic, ps in parts.items():
        out += _str16(topic) + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    return out + struct.pack(">i", -1)


TOPIC_ID_ORDERS = uuid.UUID("6b0e3ad7-43f2-4a39-9d55-5f4c9a6e7c01").bytes
TOPIC_ID_PAYMENTS = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0").bytes
META_1 = subscription(["orders", "payments"], b"rack=a")
META_2 = subscription(["orders"])
ASSIGN_1 = assignment({"orders": [0, 2, 4], "payments": [1]})
ASSIGN_2 = assignment({"orders": [1, 3, 5], "payments": [0]})
RECORDS = bytes(range(61)) * 2  # opaque to both codecs


# Requests (ours). Every field is set to a non-default value; each version keeps the ones
# it carries. Values are chosen distinct so that a swapped field cannot go unnoticed.


def req_api_versions() -> Any:
    return api_versions.ApiVersionsRequest(
        client_software_name="kgc-crosscheck", client_software_version="1.2.3"
    )


def req_metadata() -> Any:
    T = metadata.MetadataRequestTopic
    return metadata.MetadataRequest(
        topics=[
            T(topic_id=TOPIC_ID_ORDERS, name="orders"),
            T(topic_id=TOPIC_ID_PAYMENTS, name="payments"),
        ],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True,
    )


def req_find_coordinator() -> Any:
    return find_coordinator.FindCoordinatorRequest(
        key="billing-consumers", key_type=1, coordinator_keys=["billing-consumers", "audit"]
    )


def req_join_group() -> Any:
    P = join_group.JoinGroupRequestProtocol
    return join_group.JoinGroupRequest(
        group_id="billing-consumers",
        session_timeout_ms=45000,
        rebalance_timeout_ms=300000,
        member_id="consumer-1-8c0e0d5e-1f7c-4c55-bd0e-8a9d0c2a7e11",
        group_instance_id="static-member-1",
        protocol_type="consumer",
        protocols=[P("cooperative-sticky", META_1), P("range", META_2)],
        reason="rebalance requested by application",
    )


def req_sync_group() -> Any:
    A = sync_group.SyncGroupRequestAssignment
    return sync_group.SyncGroupRequest(
        group_id="billing-consumers",
        generation_id=17,
        member_id="consumer-1-leader",
        group_instance_id="static-member-1",
        protocol_type="consumer",
        protocol_name="range",
        assignments=[A("consumer-1-leader", ASSIGN_1), A("consumer-2-follower", ASSIGN_2)],
    )


def req_heartbeat() -> Any:
    return heartbeat.HeartbeatRequest(
        group_id="billing-consumers",
        generation_id=17,
        member_id="consumer-1-leader",
        group_instance_id="static-member-1",
    )


def req_leave_group() -> Any:
    M = leave_group.MemberIdentity
    return leave_group.LeaveGroupRequest(
        group_id="billing-consumers",
        member_id="consumer-2-follower",
        members=[
            M("consumer-2-follower", "static-member-2", "shutting down"),
            M("consumer-3", None, None),
        ],
    )


def req_offset_commit() -> Any:
    P = offset_commit.OffsetCommitRequestPartition
    T = offset_commit.OffsetCommitRequestTopic
    return offset_commit.OffsetCommitRequest(
        group_id="billing-consumers",
        generation_id_or_member_epoch=17,
        member_id="consumer-1-leader",
        group_instance_id="static-member-1",
        retention_time_ms=86_400_000,
        topics=[
            T(
                "orders",
                TOPIC_ID_ORDERS,
                [
                    P(0, 1_000_123, 5, 1_700_000_000_000, "checkpoint-a"),
                    P(2, 42, 6, 1_700_000_000_001, ""),
                ],
            ),
            T("payments", TOPIC_ID_PAYMENTS, [P(1, 9_876_543_210, 3, 1_700_000_000_002, "x" * 30)]),
        ],
    )


def req_offset_fetch() -> Any:
    return offset_fetch.OffsetFetchRequest(
        group_id="billing-consumers",
        topics=[
            offset_fetch.OffsetFetchRequestTopic("orders", [0, 2, 4]),
            offset_fetch.OffsetFetchRequestTopic("payments", [1]),
        ],
        groups=[
            offset_fetch.OffsetFetchRequestGroup(
                group_id="billing-consumers",
                member_id="consumer-1-leader",
                member_epoch=23,
                topics=[
                    offset_fetch.OffsetFetchRequestTopics("orders", TOPIC_ID_ORDERS, [0, 2, 4])
                ],
            ),
            offset_fetch.OffsetFetchRequestGroup(
                group_id="audit", member_id=None, member_epoch=-1, topics=None
            ),
        ],
        require_stable=True,
    )


def req_describe_groups() -> Any:
    return describe_groups.DescribeGroupsRequest(
        groups=["billing-consumers", "audit"], include_authorized_operations=True
    )


def req_list_groups() -> Any:
    return list_groups.ListGroupsRequest(
        states_filter=["Stable", "PreparingRebalance"], types_filter=["classic"]
    )


def req_delete_groups() -> Any:
    return delete_groups.DeleteGroupsRequest(groups_names=["old-consumers", "audit"])


def req_produce() -> Any:
    PD = produce.PartitionProduceData
    return produce.ProduceRequest(
        transactional_id="txn-billing-1",
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            produce.TopicProduceData(
                "orders", TOPIC_ID_ORDERS, [PD(0, RECORDS), PD(3, RECORDS[:17])]
            ),
            produce.TopicProduceData("payments", TOPIC_ID_PAYMENTS, [PD(1, RECORDS[5:])]),
        ],
    )


def req_fetch() -> Any:
    FP = fetch.FetchPartition
    return fetch.FetchRequest(
        cluster_id="kgc-cluster-7Zq",
        replica_id=-1,
        replica_state=fetch.ReplicaState(-1, -1),
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52_428_800,
        isolation_level=1,
        session_id=998877,
        session_epoch=4,
        topics=[
            fetch.FetchTopic(
                "orders",
                TOPIC_ID_ORDERS,
                [
                    FP(0, 5, 1_000_123, 4, 17, 1_048_576),
                    FP(2, 6, 42, 5, 0, 524_288, uuid.UUID(int=9).bytes, 4_000),
                ],
            ),
            fetch.FetchTopic(
                "payments", TOPIC_ID_PAYMENTS, [FP(1, 3, 9_876_543_210, 2, 100, 1_048_576)]
            ),
        ],
        forgotten_topics_data=[fetch.ForgottenTopic("refunds", uuid.UUID(int=77).bytes, [0, 1])],
        rack_id="rack-b",
    )


def req_list_offsets() -> Any:
    P = list_offsets.ListOffsetsPartition
    return list_offsets.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=1,
        topics=[
            list_offsets.ListOffsetsTopic(
                "orders", [P(0, 5, -1, 1), P(2, 6, 1_700_000_000_000, 1)]
            ),
            list_offsets.ListOffsetsTopic("payments", [P(1, 3, -2, 1)]),
        ],
        timeout_ms=15000,
    )


# Responses (ours).


def resp_api_versions() -> Any:
    AV = api_versions.ApiVersion
    return api_versions.ApiVersionsResponse(
        error_code=E.NO_ERROR,
        api_keys=[
            AV(0, 3, 13),
            AV(1, 4, 18),
            AV(3, 0, 13),
            AV(8, 2, 10),
            AV(9, 1, 10),
            AV(10, 0, 6),
            AV(11, 0, 9),
            AV(12, 0, 4),
            AV(18, 0, 4),
        ],
        throttle_time_ms=7,
        supported_features=[api_versions.SupportedFeatureKey("group.version", 0, 1)],
        finalized_features_epoch=12,
        finalized_features=[api_versions.FinalizedFeatureKey("group.version", 1, 0)],
        zk_migration_ready=False,
    )


def resp_metadata() -> Any:
    B, T, P = (
        metadata.MetadataResponseBroker,
        metadata.MetadataResponseTopic,
        metadata.MetadataResponsePartition,
    )
    return metadata.MetadataResponse(
        throttle_time_ms=3,
        brokers=[B(1, "kgc-0.kgc.svc", 9092, "rack-a"), B(2, "kgc-1.kgc.svc", 9093, None)],
        cluster_id="kgc-cluster-7Zq",
        controller_id=1,
        topics=[
            T(
                E.NO_ERROR,
                "orders",
                TOPIC_ID_ORDERS,
                False,
                [
                    P(E.NO_ERROR, 0, 1, 5, [1, 2], [1, 2], []),
                    P(E.LEADER_NOT_AVAILABLE, 1, -1, 5, [2, 1], [1], [2]),
                ],
                0x5F8,
            ),
            T(
                E.NO_ERROR,
                "__consumer_offsets",
                uuid.UUID(int=5).bytes,
                True,
                [P(E.NO_ERROR, 0, 2, 9, [2], [2], [])],
                0x1F8,
            ),
            T(E.UNKNOWN_TOPIC_OR_PARTITION, "missing", bytes(16), False, [], -2147483648),
        ],
        cluster_authorized_operations=0xDF8,
        error_code=E.NO_ERROR,
    )


def resp_find_coordinator() -> Any:
    C = find_coordinator.Coordinator
    return find_coordinator.FindCoordinatorResponse(
        throttle_time_ms=2,
        error_code=E.NO_ERROR,
        error_message=None,
        node_id=1,
        host="kgc-0.kgc.svc",
        port=9092,
        coordinators=[
            C("billing-consumers", 1, "kgc-0.kgc.svc", 9092, E.NO_ERROR, None),
            C("audit", -1, "", -1, E.COORDINATOR_NOT_AVAILABLE, "loading"),
        ],
    )


def resp_join_group() -> Any:
    M = join_group.JoinGroupResponseMember
    return join_group.JoinGroupResponse(
        throttle_time_ms=4,
        error_code=E.NO_ERROR,
        generation_id=17,
        protocol_type="consumer",
        protocol_name="range",
        leader="consumer-1-leader",
        skip_assignment=False,
        member_id="consumer-1-leader",
        members=[
            M("consumer-1-leader", "static-member-1", META_1),
            M("consumer-2-follower", None, META_2),
            M("consumer-3", "static-3", b""),
        ],
    )


def resp_sync_group() -> Any:
    return sync_group.SyncGroupResponse(
        throttle_time_ms=6,
        error_code=E.REBALANCE_IN_PROGRESS,
        protocol_type="consumer",
        protocol_name="range",
        assignment=ASSIGN_2,
    )


def resp_heartbeat() -> Any:
    return heartbeat.HeartbeatResponse(throttle_time_ms=9, error_code=E.ILLEGAL_GENERATION)


def resp_leave_group() -> Any:
    MR = leave_group.MemberResponse
    return leave_group.LeaveGroupResponse(
        throttle_time_ms=1,
        error_code=E.NO_ERROR,
        members=[
            MR("consumer-2-follower", "static-member-2", E.NO_ERROR),
            MR("ghost", None, E.UNKNOWN_MEMBER_ID),
        ],
    )


def resp_offset_commit() -> Any:
    P, T = offset_commit.OffsetCommitResponsePartition, offset_commit.OffsetCommitResponseTopic
    return offset_commit.OffsetCommitResponse(
        throttle_time_ms=11,
        topics=[
            T("orders", TOPIC_ID_ORDERS, [P(0, E.NO_ERROR), P(2, E.OFFSET_METADATA_TOO_LARGE)]),
            T("payments", TOPIC_ID_PAYMENTS, [P(1, E.UNKNOWN_TOPIC_OR_PARTITION)]),
        ],
    )


def resp_offset_fetch() -> Any:
    P, T = offset_fetch.OffsetFetchResponsePartition, offset_fetch.OffsetFetchResponseTopic
    GP, GT = offset_fetch.OffsetFetchResponsePartitions, offset_fetch.OffsetFetchResponseTopics
    return offset_fetch.OffsetFetchResponse(
        throttle_time_ms=8,
        topics=[
            T(
                "orders",
                [P(0, 1_000_123, 5, "checkpoint-a", E.NO_ERROR), P(2, -1, -1, None, E.NO_ERROR)],
            ),
            T("payments", [P(1, 77, 3, "", E.UNSTABLE_OFFSET_COMMIT)]),
        ],
        error_code=E.NO_ERROR,
        groups=[
            offset_fetch.OffsetFetchResponseGroup(
                "billing-consumers",
                [GT("orders", TOPIC_ID_ORDERS, [GP(0, 1_000_123, 5, "checkpoint-a", E.NO_ERROR)])],
                E.NO_ERROR,
            ),
            offset_fetch.OffsetFetchResponseGroup("audit", [], E.GROUP_AUTHORIZATION_FAILED),
        ],
    )


def resp_describe_groups() -> Any:
    M, G = describe_groups.DescribedGroupMember, describe_groups.DescribedGroup
    return describe_groups.DescribeGroupsResponse(
        throttle_time_ms=5,
        groups=[
            G(
                E.NO_ERROR,
                None,
                "billing-consumers",
                "Stable",
                "consumer",
                "range",
                [
                    M(
                        "consumer-1-leader",
                        "static-member-1",
                        "client-a",
                        "/10.0.0.1",
                        META_1,
                        ASSIGN_1,
                    ),
                    M("consumer-2-follower", None, "client-b", "/10.0.0.2", META_2, ASSIGN_2),
                ],
                0x5F8,
            ),
            G(
                E.GROUP_ID_NOT_FOUND,
                "group audit does not exist",
                "audit",
                "Dead",
                "",
                "",
                [],
                -2147483648,
            ),
        ],
    )


def resp_list_groups() -> Any:
    LG = list_groups.ListedGroup
    return list_groups.ListGroupsResponse(
        throttle_time_ms=2,
        error_code=E.NO_ERROR,
        groups=[
            LG("billing-consumers", "consumer", "Stable", "classic"),
            LG("connect-sink", "connect", "Empty", "classic"),
        ],
    )


def resp_delete_groups() -> Any:
    R = delete_groups.DeletableGroupResult
    return delete_groups.DeleteGroupsResponse(
        throttle_time_ms=3,
        results=[R("old-consumers", E.NO_ERROR), R("billing-consumers", E.NON_EMPTY_GROUP)],
    )


def resp_produce() -> Any:
    PR = produce.PartitionProduceResponse
    BE = produce.BatchIndexAndErrorMessage
    return produce.ProduceResponse(
        responses=[
            produce.TopicProduceResponse(
                "orders",
                TOPIC_ID_ORDERS,
                [
                    PR(
                        0,
                        E.NO_ERROR,
                        1_000_124,
                        1_700_000_000_500,
                        10,
                        [],
                        None,
                        produce.LeaderIdAndEpoch(1, 5),
                    ),
                    PR(
                        3,
                        E.INVALID_RECORD,
                        -1,
                        -1,
                        0,
                        [BE(2, "bad key"), BE(5, None)],
                        "record validation failed",
                    ),
                ],
            ),
            produce.TopicProduceResponse(
                "payments",
                TOPIC_ID_PAYMENTS,
                [
                    PR(
                        1,
                        E.NOT_LEADER_FOR_PARTITION,
                        -1,
                        -1,
                        -1,
                        [],
                        None,
                        produce.LeaderIdAndEpoch(2, 4),
                    )
                ],
            ),
        ],
        throttle_time_ms=12,
        node_endpoints=[produce.NodeEndpoint(2, "kgc-1.kgc.svc", 9093, "rack-b")],
    )


def resp_fetch() -> Any:
    PD, AT = fetch.PartitionData, fetch.AbortedTransaction
    return fetch.FetchResponse(
        throttle_time_ms=1,
        error_code=E.NO_ERROR,
        session_id=998877,
        responses=[
            fetch.FetchableTopicResponse(
                "orders",
                TOPIC_ID_ORDERS,
                [
                    PD(
                        0,
                        E.NO_ERROR,
                        1_000_200,
                        1_000_150,
                        17,
                        records=RECORDS,
                        aborted_transactions=[AT(4001, 1_000_100), AT(4002, 1_000_110)],
                        preferred_read_replica=2,
                    ),
                    PD(
                        2,
                        E.OFFSET_OUT_OF_RANGE,
                        50,
                        50,
                        0,
                        records=None,
                        aborted_transactions=None,
                        current_leader=fetch.LeaderIdAndEpoch(1, 6),
                        diverging_epoch=fetch.EpochEndOffset(5, 48),
                    ),
                ],
            ),
            fetch.FetchableTopicResponse(
                "payments",
                TOPIC_ID_PAYMENTS,
                [
                    PD(
                        1,
                        E.NO_ERROR,
                        9_876_543_300,
                        9_876_543_300,
                        100,
                        records=b"",
                        aborted_transactions=[],
                    )
                ],
            ),
        ],
        node_endpoints=[fetch.NodeEndpoint(1, "kgc-0.kgc.svc", 9092, None)],
    )


def resp_list_offsets() -> Any:
    P = list_offsets.ListOffsetsPartitionResponse
    return list_offsets.ListOffsetsResponse(
        throttle_time_ms=4,
        topics=[
            list_offsets.ListOffsetsTopicResponse(
                "orders",
                [
                    P(0, E.NO_ERROR, [1_000_200], -1, 1_000_200, 5),
                    P(2, E.NO_ERROR, [42], 1_700_000_000_000, 42, 6),
                ],
            ),
            list_offsets.ListOffsetsTopicResponse(
                "payments", [P(1, E.NOT_LEADER_FOR_PARTITION, [], -1, -1, -1)]
            ),
        ],
    )


# --------------------------------------------------------------------------------------
# aiokafka layouts: our object -> aiokafka's positional tuple for a version
# --------------------------------------------------------------------------------------


def _v(v: int, since: int, *vals: Any) -> tuple[Any, ...]:
    return vals if v >= since else ()


def aio_req_api_versions(o: Any, v: int) -> tuple[Any, ...]:
    return ()


def aio_resp_api_versions(o: Any, v: int) -> tuple[Any, ...]:
    keys = [(k.api_key, k.min_version, k.max_version) for k in o.api_keys]
    return (o.error_code, keys, *_v(v, 1, o.throttle_time_ms))


def aio_req_metadata(o: Any, v: int) -> tuple[Any, ...]:
    return ([t.name for t in o.topics], *_v(v, 4, o.allow_auto_topic_creation))


def aio_resp_metadata(o: Any, v: int) -> tuple[Any, ...]:
    brokers = [(b.node_id, b.host, b.port, *_v(v, 1, b.rack)) for b in o.brokers]
    topics = [
        (
            t.error_code,
            t.name,
            *_v(v, 1, t.is_internal),
            [
                (
                    p.error_code,
                    p.partition_index,
                    p.leader_id,
                    p.replica_nodes,
                    p.isr_nodes,
                    *_v(v, 5, p.offline_replicas),
                )
                for p in t.partitions
            ],
        )
        for t in o.topics
    ]
    return (
        *_v(v, 3, o.throttle_time_ms),
        brokers,
        *_v(v, 2, o.cluster_id),
        *_v(v, 1, o.controller_id),
        topics,
    )


def aio_req_find_coordinator(o: Any, v: int) -> tuple[Any, ...]:
    return (o.key, *_v(v, 1, o.key_type))


def aio_resp_find_coordinator(o: Any, v: int) -> tuple[Any, ...]:
    if v == 0:
        return (o.error_code, o.node_id, o.host, o.port)
    return (o.throttle_time_ms, o.error_code, o.error_message, o.node_id, o.host, o.port)


def aio_req_join_group(o: Any, v: int) -> tuple[Any, ...]:
    protocols = [(p.name, p.metadata) for p in o.protocols]
    return (
        o.group_id,
        o.session_timeout_ms,
        *_v(v, 1, o.rebalance_timeout_ms),
        o.member_id,
        *_v(v, 5, o.group_instance_id),
        o.protocol_type,
        protocols,
    )


def aio_resp_join_group(o: Any, v: int) -> tuple[Any, ...]:
    members = [(m.member_id, *_v(v, 5, m.group_instance_id), m.metadata) for m in o.members]
    return (
        *_v(v, 2, o.throttle_time_ms),
        o.error_code,
        o.generation_id,
        o.protocol_name,
        o.leader,
        o.member_id,
        members,
    )


def aio_req_sync_group(o: Any, v: int) -> tuple[Any, ...]:
    assignments = [(a.member_id, a.assignment) for a in o.assignments]
    return (o.group_id, o.generation_id, o.member_id, *_v(v, 3, o.group_instance_id), assignments)


def aio_resp_sync_group(o: Any, v: int) -> tuple[Any, ...]:
    return (*_v(v, 1, o.throttle_time_ms), o.error_code, o.assignment)


def aio_req_heartbeat(o: Any, v: int) -> tuple[Any, ...]:
    return (o.group_id, o.generation_id, o.member_id)


def aio_resp_heartbeat(o: Any, v: int) -> tuple[Any, ...]:
    return (*_v(v, 1, o.throttle_time_ms), o.error_code)


def aio_req_leave_group(o: Any, v: int) -> tuple[Any, ...]:
    return (o.group_id, o.member_id)


aio_resp_leave_group = aio_resp_heartbeat


def aio_req_offset_commit(o: Any, v: int) -> tuple[Any, ...]:
    topics = [
        (
            t.name,
            [
                (
                    p.partition_index,
                    p.committed_offset,
                    *((p.commit_timestamp,) if v == 1 else ()),
                    p.committed_metadata,
                )
                for p in t.partitions
            ],
        )
        for t in o.topics
    ]
    if v == 0:  # no generation, member or retention (offsets kept in ZooKeeper then)
        return (o.group_id, topics)
    if v == 1:  # a commit timestamp per partition, no retention time
        return (o.group_id, o.generation_id_or_member_epoch, o.member_id, topics)
    return (o.group_id, o.generation_id_or_member_epoch, o.member_id, o.retention_time_ms, topics)


def aio_resp_offset_commit(o: Any, v: int) -> tuple[Any, ...]:
    topics = [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in o.topics]
    return (*_v(v, 3, o.throttle_time_ms), topics)


def aio_req_offset_fetch(o: Any, v: int) -> tuple[Any, ...]:
    return (o.group_id, [(t.name, t.partition_indexes) for t in o.topics])


def aio_resp_offset_fetch(o: Any, v: int) -> tuple[Any, ...]:
    topics = [
        (
            t.name,
            [
                (p.partition_index, p.committed_offset, p.metadata, p.error_code)
                for p in t.partitions
            ],
        )
        for t in o.topics
    ]
    return (*_v(v, 3, o.throttle_time_ms), topics, *_v(v, 2, o.error_code))


def aio_req_describe_groups(o: Any, v: int) -> tuple[Any, ...]:
    return (o.groups, *_v(v, 3, o.include_authorized_operations))


def aio_resp_describe_groups(o: Any, v: int) -> tuple[Any, ...]:
    groups = [
        (
            g.error_code,
            g.group_id,
            g.group_state,
            g.protocol_type,
            g.protocol_data,
            [
                (m.member_id, m.client_id, m.client_host, m.member_metadata, m.member_assignment)
                for m in g.members
            ],
            *_v(v, 3, g.authorized_operations),
        )
        for g in o.groups
    ]
    return (*_v(v, 1, o.throttle_time_ms), groups)


def aio_req_list_groups(o: Any, v: int) -> tuple[Any, ...]:
    return ()


def aio_resp_list_groups(o: Any, v: int) -> tuple[Any, ...]:
    return (
        *_v(v, 1, o.throttle_time_ms),
        o.error_code,
        [(g.group_id, g.protocol_type) for g in o.groups],
    )


def aio_req_delete_groups(o: Any, v: int) -> tuple[Any, ...]:
    return (o.groups_names,)


def aio_resp_delete_groups(o: Any, v: int) -> tuple[Any, ...]:
    return (o.throttle_time_ms, [(r.group_id, r.error_code) for r in o.results])


def aio_req_produce(o: Any, v: int) -> tuple[Any, ...]:
    topics = [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in o.topic_data]
    return (*_v(v, 3, o.transactional_id), o.acks, o.timeout_ms, topics)


def aio_resp_produce(o: Any, v: int) -> tuple[Any, ...]:
    def part(p: Any) -> tuple[Any, ...]:
        errs = [(e.batch_index, e.batch_index_error_message) for e in p.record_errors]
        return (
            p.index,
            p.error_code,
            p.base_offset,
            *_v(v, 2, p.log_append_time_ms),
            *_v(v, 5, p.log_start_offset),
            *_v(v, 8, errs, p.error_message),
        )

    return (
        [(t.name, [part(p) for p in t.partition_responses]) for t in o.responses],
        *_v(v, 1, o.throttle_time_ms),
    )


def aio_req_fetch(o: Any, v: int) -> tuple[Any, ...]:
    def part(p: Any) -> tuple[Any, ...]:
        if v < 5:
            return (p.partition, p.fetch_offset, p.partition_max_bytes)
        return (
            p.partition,
            *_v(v, 9, p.current_leader_epoch),
            p.fetch_offset,
            p.log_start_offset,
            p.partition_max_bytes,
        )

    topics = [(t.topic, [part(p) for p in t.partitions]) for t in o.topics]
    forgotten = [(f.topic, f.partitions) for f in o.forgotten_topics_data]
    return (
        o.replica_id,
        o.max_wait_ms,
        o.min_bytes,
        *_v(v, 3, o.max_bytes),
        *_v(v, 4, o.isolation_level),
        *_v(v, 7, o.session_id, o.session_epoch),
        topics,
        *_v(v, 7, forgotten),
        *_v(v, 11, o.rack_id),
    )


def aio_resp_fetch(o: Any, v: int) -> tuple[Any, ...]:
    def part(p: Any) -> tuple[Any, ...]:
        aborted = (
            None
            if p.aborted_transactions is None
            else [(a.producer_id, a.first_offset) for a in p.aborted_transactions]
        )
        if v < 4:  # message sets, before transactions
            return (p.partition_index, p.error_code, p.high_watermark, p.records)
        return (
            p.partition_index,
            p.error_code,
            p.high_watermark,
            p.last_stable_offset,
            *_v(v, 5, p.log_start_offset),
            aborted,
            *_v(v, 11, p.preferred_read_replica),
            p.records,
        )

    topics = [(t.topic, [part(p) for p in t.partitions]) for t in o.responses]
    return (*_v(v, 1, o.throttle_time_ms), *_v(v, 7, o.error_code, o.session_id), topics)


def aio_req_list_offsets(o: Any, v: int) -> tuple[Any, ...]:
    topics = [
        (
            t.name,
            [
                (p.partition_index, *_v(v, 4, p.current_leader_epoch), p.timestamp)
                if v >= 1
                else (p.partition_index, p.timestamp, p.max_num_offsets)
                for p in t.partitions
            ],
        )
        for t in o.topics
    ]
    return (o.replica_id, *_v(v, 2, o.isolation_level), topics)


def aio_resp_list_offsets(o: Any, v: int) -> tuple[Any, ...]:
    topics = [
        (
            t.name,
            [
                (p.partition_index, p.error_code, p.timestamp, p.offset, *_v(v, 4, p.leader_epoch))
                if v >= 1
                else (p.partition_index, p.error_code, p.old_style_offsets)
                for p in t.partitions
            ],
        )
        for t in o.topics
    ]
    return (*_v(v, 2, o.throttle_time_ms), topics)


# --------------------------------------------------------------------------------------
# The API table
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Api:
    name: str
    mod: Any
    make_req: Callable[[], Any]
    make_resp: Callable[[], Any]
    kp_module: Any  # kafka-python package exporting <Name>Request / <Name>Response
    aio_module: str  # aiokafka.protocol.<module>
    aio_name: str  # aiokafka class prefix, e.g. "OffsetRequest" for ListOffsets


def _g(name: str) -> Callable[..., tuple[Any, ...]]:
    return globals()[name]


APIS = [
    Api(
        "ApiVersions",
        api_versions,
        req_api_versions,
        resp_api_versions,
        kp_metadata,
        "admin",
        "ApiVersion",
    ),
    Api("Metadata", metadata, req_metadata, resp_metadata, kp_metadata, "metadata", "Metadata"),
    Api(
        "FindCoordinator",
        find_coordinator,
        req_find_coordinator,
        resp_find_coordinator,
        kp_metadata,
        "coordination",
        "FindCoordinator",
    ),
    Api(
        "JoinGroup", join_group, req_join_group, resp_join_group, kp_consumer, "group", "JoinGroup"
    ),
    Api(
        "SyncGroup", sync_group, req_sync_group, resp_sync_group, kp_consumer, "group", "SyncGroup"
    ),
    Api("Heartbeat", heartbeat, req_heartbeat, resp_heartbeat, kp_consumer, "group", "Heartbeat"),
    Api(
        "LeaveGroup",
        leave_group,
        req_leave_group,
        resp_leave_group,
        kp_consumer,
        "group",
        "LeaveGroup",
    ),
    Api(
        "OffsetCommit",
        offset_commit,
        req_offset_commit,
        resp_offset_commit,
        kp_consumer,
        "commit",
        "OffsetCommit",
    ),
    Api(
        "OffsetFetch",
        offset_fetch,
        req_offset_fetch,
        resp_offset_fetch,
        kp_consumer,
        "commit",
        "OffsetFetch",
    ),
    Api(
        "DescribeGroups",
        describe_groups,
        req_describe_groups,
        resp_describe_groups,
        kp_admin,
        "admin",
        "DescribeGroups",
    ),
    Api(
        "ListGroups",
        list_groups,
        req_list_groups,
        resp_list_groups,
        kp_admin,
        "admin",
        "ListGroups",
    ),
    Api(
        "DeleteGroups",
        delete_groups,
        req_delete_groups,
        resp_delete_groups,
        kp_admin,
        "admin",
        "DeleteGroups",
    ),
    Api("Produce", produce, req_produce, resp_produce, kp_producer, "produce", "Produce"),
    Api("Fetch", fetch, req_fetch, resp_fetch, kp_consumer, "fetch", "Fetch"),
    Api(
        "ListOffsets",
        list_offsets,
        req_list_offsets,
        resp_list_offsets,
        kp_consumer,
        "offset",
        "Offset",
    ),
]

# (api, version) pairs aiokafka ships a class for but which it cannot be cross-checked
# with, and why. Only requests: the matching response classes are checked.
AIO_BROKEN = {
    (
        "ListGroups",
        2,
    ): "aiokafka's ListGroupsRequest_v2 declares API_VERSION = 1, so it sends a v1 header",
    ("ListOffsets", 4): "aiokafka's OffsetRequest_v4 is marked 'Not yet supported' and declares "
    "current_leader_epoch as Int64 (Kafka's schema: int32), so its bytes are not a valid v4 request",
    (
        "ListOffsets",
        5,
    ): "aiokafka's OffsetRequest_v5 reuses the v4 schema (current_leader_epoch as Int64, "
    "Kafka's schema: int32) and is marked 'Not yet supported'",
}


def kp_class(api: Api, kind: str) -> Any:
    return getattr(api.kp_module, f"{api.name}{kind}")


def kp_range(api: Api, kind: str) -> range:
    lo, hi = kp_class(api, kind).valid_versions
    return range(lo, hi + 1)


def aio_class(api: Api, kind: str, v: int) -> Any:
    mod = importlib.import_module(f"aiokafka.protocol.{api.aio_module}")
    return getattr(mod, f"{api.aio_name}{kind}_v{v}", None)


def aio_versions(api: Api, kind: str) -> list[int]:
    return [v for v in range(0, 40) if aio_class(api, kind, v) is not None]


def our_range(api: Api) -> range:
    return range(api.mod.MIN_VERSION, api.mod.MAX_VERSION + 1)


def cases(lib: str, kind: str) -> list[Any]:
    out = []
    for api in APIS:
        theirs = list(kp_range(api, kind)) if lib == "kp" else aio_versions(api, kind)
        for v in sorted(set(our_range(api)) | set(theirs)):
            out.append(pytest.param(api, v, id=f"{api.name}{kind}-v{v}"))
    return out


# --------------------------------------------------------------------------------------
# Comparison helpers
# --------------------------------------------------------------------------------------


# kafka-python patches a few schema fields (json_patch): Metadata's Cluster- and
# TopicAuthorizedOperations both become "authorized_operations", and authorized
# operations fields are decoded as a set of bit positions (None for "not requested").
KP_ALIASES = {
    "MetadataResponse": {"authorized_operations": "cluster_authorized_operations"},
    "MetadataResponseTopic": {"authorized_operations": "topic_authorized_operations"},
}
NOT_REQUESTED = -(2**31)


def _bits(value: int) -> set[int]:
    return {i for i in range(32) if (value >> i) & 1}


def assert_matches_kp(ours: Any, theirs: Any, path: str = "") -> int:
    """Assert that our decoded/encoded object has the values kafka-python reports.

    ``theirs`` is kafka-python's ``to_dict(json=False)`` view, which lists exactly the
    fields of the version at hand. Returns the number of leaf values compared.
    """
    if isinstance(theirs, dict):
        assert dataclasses.is_dataclass(ours), f"{path}: expected a struct, got {ours!r}"
        n = 0
        aliases = KP_ALIASES.get(type(ours).__name__, {})
        for key, value in theirs.items():
            key = aliases.get(key, key)
            assert hasattr(ours, key), f"{path}.{key}: field missing from {type(ours).__name__}"
            n += assert_matches_kp(getattr(ours, key), value, f"{path}.{key}")
        return n
    if isinstance(theirs, list):
        assert isinstance(ours, list), f"{path}: expected a list, got {ours!r}"
        assert len(ours) == len(theirs), (
            f"{path}: {len(ours)} items vs kafka-python's {len(theirs)}"
        )
        return (
            sum(
                assert_matches_kp(o, t, f"{path}[{i}]")
                for i, (o, t) in enumerate(zip(ours, theirs, strict=True))
            )
            or 1
        )
    if theirs is None and dataclasses.is_dataclass(ours):
        # kafka-python leaves an absent tagged struct as None; absent means "default".
        assert ours == type(ours)(), (
            f"{path}: kafka-python saw no tagged struct but we have {ours!r}"
        )
        return 1
    if (
        path.endswith("authorized_operations")
        and isinstance(ours, int)
        and not isinstance(ours, bool)
    ):
        expected = None if ours == NOT_REQUESTED else _bits(ours)
        assert theirs == expected, (
            f"{path}: kgc has {ours:#x} ({expected}), kafka-python has {theirs!r}"
        )
        return 1
    if theirs is None and ours == bytes(16):
        return 1  # kafka-python reports the all-zero UUID as None
    if isinstance(theirs, uuid.UUID):
        assert ours == theirs.bytes, f"{path}: {ours!r} != {theirs}"
        return 1
    if isinstance(theirs, memoryview):
        theirs = bytes(theirs)
    assert ours == theirs, f"{path}: kgc has {ours!r}, kafka-python has {theirs!r}"
    return 1


def to_kp(obj: Any, kp_cls: Any, version: int) -> Any:
    """Build kafka-python's message object carrying the same values as our dataclass."""
    kwargs = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        field = kp_cls.fields[f.name]
        if not field.for_version_q(version):
            continue
        if field.is_struct_array():
            value = None if value is None else [to_kp(x, field.data_class, version) for x in value]
        elif field.is_struct():
            value = to_kp(value, field.data_class, version)
        elif isinstance(value, bytes) and field.type_str == "uuid":
            value = uuid.UUID(bytes=value)
        kwargs[f.name] = value
    return kp_cls(version=version, **kwargs)


def aio_zero(schema: Any) -> Any:
    """A value of aiokafka ``schema`` with every field zero/empty."""
    T = aio_types
    if isinstance(schema, T.Schema):
        return tuple(aio_zero(f) for f in schema.fields)
    if isinstance(schema, T.Array):
        return []
    if isinstance(schema, T.String):
        return ""
    if schema is T.Bytes:
        return b""
    if schema is T.Boolean:
        return False
    return 0


def aio_values(struct_obj: Any) -> tuple[Any, ...]:
    return tuple(struct_obj.get_item(n) for n in struct_obj.SCHEMA.names)


def _require(api: Api, v: int, theirs: bool, lib: str) -> None:
    if not theirs:
        pytest.skip(f"{lib} has no {api.name} v{v}")


# --------------------------------------------------------------------------------------
# kafka-python
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("api", "v"), cases("kp", "Response"))
def test_kafka_python_decodes_our_response(api: Api, v: int) -> None:
    if v not in our_range(api):
        pytest.skip(
            f"kgc does not implement {api.name} v{v} (range {api.mod.MIN_VERSION}-{api.mod.MAX_VERSION})"
        )
    _require(api, v, v in kp_range(api, "Response"), "kafka-python 3.0.12")
    ours = api.make_resp()
    frame = encode_response(api.mod.API_KEY, v, CORRELATION_ID, ours)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    decoded = kp_class(api, "Response")[v].decode(frame, header=True, framed=True)
    assert decoded.header.correlation_id == CORRELATION_ID
    n = assert_matches_kp(ours, decoded.to_dict(json=False), api.name)
    assert n >= 1
    # Re-encoding with kafka-python must give back our exact bytes (same field order,
    # same compact/tagged encodings), header and size prefix included.
    if api.name != "ApiVersions":  # kafka-python re-encodes the ApiVersions header its own way
        decoded.with_header(correlation_id=CORRELATION_ID)
        assert decoded.encode(header=True, framed=True) == frame


@pytest.mark.parametrize(("api", "v"), cases("kp", "Request"))
def test_we_decode_kafka_python_request(api: Api, v: int) -> None:
    _require(api, v, v in kp_range(api, "Request"), "kafka-python 3.0.12")
    kp_req = to_kp(api.make_req(), kp_class(api, "Request"), v)
    kp_req.with_header(correlation_id=CORRELATION_ID, client_id=CLIENT_ID)
    frame = kp_req.encode(header=True)
    if v not in our_range(api):
        with pytest.raises(UnknownApi):
            decode_request(frame)
        return
    header, body = decode_request(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        api.mod.API_KEY,
        v,
        CORRELATION_ID,
        CLIENT_ID,
    )
    assert type(body).__name__ == f"{api.name}Request"
    fields = kp_req.to_dict(json=False)
    if fields:
        assert assert_matches_kp(body, fields, api.name) >= 1
    else:  # an empty body at this version (ApiVersions v0-2, ListGroups v0-3)
        assert body == type(body)()


# --------------------------------------------------------------------------------------
# aiokafka
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("api", "v"), cases("aio", "Response"))
def test_aiokafka_decodes_our_response(api: Api, v: int) -> None:
    cls = aio_class(api, "Response", v)
    if v not in our_range(api):
        pytest.skip(
            f"kgc does not implement {api.name} v{v} (range {api.mod.MIN_VERSION}-{api.mod.MAX_VERSION})"
        )
    _require(api, v, cls is not None, "aiokafka 0.14.0")
    ours = api.make_resp()
    frame = encode_response(api.mod.API_KEY, v, CORRELATION_ID, ours)
    buf = io.BytesIO(frame[4:])
    header = aio_api.ResponseHeader_v0.decode(buf)  # every version aiokafka has uses header v0
    assert header.correlation_id == CORRELATION_ID
    decoded = cls.decode(buf)
    assert buf.tell() == len(frame) - 4, "aiokafka left bytes unread"
    assert aio_values(decoded) == _g(f"aio_resp_{api.mod.__name__.rsplit('.', 1)[1]}")(ours, v)


@pytest.mark.parametrize(("api", "v"), cases("aio", "Request"))
def test_we_decode_aiokafka_request(api: Api, v: int) -> None:
    cls = aio_class(api, "Request", v)
    _require(api, v, cls is not None, "aiokafka 0.14.0")
    if (api.name, v) in AIO_BROKEN:
        pytest.skip(AIO_BROKEN[(api.name, v)])
    if v not in our_range(api):
        # Older than anything we implement: a valid (all-zero) request must be refused.
        aio_req = cls(*aio_zero(cls.SCHEMA))
        frame = (
            aio_req.build_request_header(
                correlation_id=CORRELATION_ID, client_id=CLIENT_ID
            ).encode()
            + aio_req.encode()
        )
        with pytest.raises(UnknownApi):
            decode_request(frame)
        return
    shape = _g(f"aio_req_{api.mod.__name__.rsplit('.', 1)[1]}")
    original = api.make_req()
    aio_req = cls(*shape(original, v))
    frame = (
        aio_req.build_request_header(correlation_id=CORRELATION_ID, client_id=CLIENT_ID).encode()
        + aio_req.encode()
    )
    header, body = decode_request(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        api.mod.API_KEY,
        v,
        CORRELATION_ID,
        CLIENT_ID,
    )
    assert shape(body, v) == shape(original, v)


# --------------------------------------------------------------------------------------
# A few literal spot checks, so that a systematic mistake in the helpers above cannot
# make everything pass vacuously.
# --------------------------------------------------------------------------------------


def test_spot_heartbeat_v4_from_kafka_python() -> None:
    req = kp_consumer.HeartbeatRequest(
        version=4, group_id="g1", generation_id=23, member_id="m-1", group_instance_id="i-1"
    )
    req.with_header(correlation_id=99, client_id="c")
    header, body = decode_request(req.encode(header=True))
    assert header.correlation_id == 99 and header.client_id == "c"
    assert body == heartbeat.HeartbeatRequest("g1", 23, "m-1", "i-1")


def test_spot_offset_commit_v3_from_aiokafka() -> None:
    from aiokafka.protocol.commit import OffsetCommitRequest_v3

    req = OffsetCommitRequest_v3("g1", 5, "m-1", -1, [("t", [(0, 100, "meta"), (7, 2**40, None)])])
    _, body = decode_request(
        req.build_request_header(correlation_id=1, client_id="aio").encode() + req.encode()
    )
    assert (
        body.group_id == "g1"
        and body.generation_id_or_member_epoch == 5
        and body.retention_time_ms == -1
    )
    parts = body.topics[0].partitions
    assert body.topics[0].name == "t"
    assert [(p.partition_index, p.committed_offset, p.committed_metadata) for p in parts] == [
        (0, 100, "meta"),
        (7, 2**40, None),
    ]


def test_spot_join_group_v5_response_to_aiokafka() -> None:
    from aiokafka.protocol.group import JoinGroupResponse_v5

    frame = encode_response(11, 5, 3, resp_join_group())
    buf = io.BytesIO(frame[8:])
    r = JoinGroupResponse_v5.decode(buf)
    assert (r.throttle_time_ms, r.error_code, r.generation_id, r.group_protocol, r.leader_id) == (
        4,
        0,
        17,
        "range",
        "consumer-1-leader",
    )
    assert r.members[1] == ("consumer-2-follower", None, META_2)
    assert r.members[0][2] == META_1
