"""CreatePartitions, DeleteRecords, DescribeCluster and DescribeLogDirs in process.

Real logs, catalog, flusher and data plane (no sockets); every request and answer goes
through the codec at the version named, as the transport sends it. The authorizer, where
used, is the real one with real bindings.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.apis import Parts, authorized, handlers
from coordinator.apis.authorize import ApiAuthorizer
from coordinator.apis.partitions import PartitionAdmin
from coordinator.catalog import TopicCatalog, TopicInfo
from coordinator.config import Settings
from coordinator.dataplane import DataPlane
from coordinator.node.reconcile import reconcile
from coordinator.placement import LocalPlacement, NodeAddress
from coordinator.security import KafkaPrincipal
from coordinator.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
    all_operations,
)
from coordinator.server.handler import ClientInfo, Deferred
from protocol.errors import ErrorCode
from protocol.framing import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from protocol.messages import (
    create_partitions,
    delete_records,
    describe_cluster,
    describe_log_dirs,
    fetch,
    list_offsets,
    metadata,
    produce,
)
from storage.local.durability import Flusher
from storage.local.manager import LogManager
from storage.record_batch import encode_batch

CLIENT = ClientInfo("test", "127.0.0.1", 1, 1)
ALICE = ClientInfo("c", "10.0.0.1", 1, 1, principal=KafkaPrincipal("User", "alice"))
NODE_ID = 3


class Node:
    """One embedded kgc node's data path, with the admin APIs (and optionally ACLs)."""

    def __init__(self, data_dir: Path, authorizer: Authorizer | None = None) -> None:
        self.data_dir = data_dir
        self.settings = Settings(data_dir=data_dir, node_id=NODE_ID, cluster_id="test-cluster")
        self.flusher = Flusher()
        self.logs = LogManager(data_dir, flusher=self.flusher)
        self.catalog = TopicCatalog(data_dir / "topics.json")
        reconcile(self.catalog, self.logs)
        self.logs.open_all()
        self.dp = DataPlane(self.settings, self.catalog, self.logs, self.flusher)
        self.placement = LocalPlacement(
            NodeAddress(NODE_ID, "kgc.example", 9092, "r1", (("PLAINTEXT", "kgc.example", 9092),))
        )
        self.admin = PartitionAdmin(
            self.settings,
            self.catalog,
            self.logs,
            self.dp,
            self.placement,
            authorizer=authorizer,
        )
        self.handlers = handlers(Parts(data=self.dp, partitions=self.admin))
        if authorizer is not None:
            self.handlers = authorized(ApiAuthorizer(authorizer), self.handlers)
        self.changes: list[tuple[list[str], bool]] = []
        self.catalog.on_change.append(lambda names, created: self.changes.append((names, created)))

    def create(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> TopicInfo:
        info = self.catalog.create(name, partitions, configs or {})
        self.dp.create_partitions(info)
        return info

    async def call(self, key: int, version: int, body: Any, client: ClientInfo = CLIENT) -> Any:
        """Through the codec both ways, as a client and the transport would."""
        frame = encode_request(RequestHeader(key, version, 7, "test"), body)
        header, decoded = decode_request(frame[4:], strict=True)
        res = self.handlers[key](header, decoded, client)
        if isinstance(res, Deferred):
            res = await res
        out = encode_response(key, version, 7, res)
        corr, answer = decode_response(key, version, out[4:])
        assert corr == 7
        return answer

    async def produce(self, topic: str, partition: int, values: list[bytes]) -> int:
        req = produce.Request(
            acks=-1,
            timeout_ms=1000,
            topic_data=[
                produce.TopicProduceData(
                    name=topic,
                    partition_data=[
                        produce.PartitionProduceData(
                            index=partition,
                            records=encode_batch(
                                0,
                                [(b"k%d" % i, v) for i, v in enumerate(values)],
                                timestamp_ms=int(time.time() * 1000),
                            ),
                        )
                    ],
                )
            ],
        )
        r = (await self.call(produce.API_KEY, 9, req)).responses[0].partition_responses[0]
        assert r.error_code == 0, r
        return int(r.base_offset)

    async def fetch_at(self, topic: str, partition: int, offset: int) -> Any:
        req = fetch.Request(
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 20,
            session_id=0,
            session_epoch=-1,
            topics=[
                fetch.FetchTopic(
                    topic=topic,
                    partitions=[
                        fetch.FetchPartition(
                            partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20
                        )
                    ],
                )
            ],
        )
        return (await self.call(fetch.API_KEY, 12, req)).responses[0].partitions[0]

    async def earliest(self, topic: str, partition: int) -> int:
        req = list_offsets.Request(
            replica_id=-1,
            topics=[
                list_offsets.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        list_offsets.ListOffsetsPartition(partition_index=partition, timestamp=-2)
                    ],
                )
            ],
        )
        r = (await self.call(list_offsets.API_KEY, 7, req)).topics[0].partitions[0]
        assert r.error_code == 0
        return int(r.offset)

    async def close(self) -> None:
        await self.dp.stop()
        await self.flusher.stop()
        self.logs.close_all()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path / "data")
    yield n
    await n.close()


def grow(*topics: tuple[str, int, list[list[int]] | None], validate_only: bool = False) -> Any:
    return create_partitions.Request(
        topics=[
            create_partitions.CreatePartitionsTopic(
                name=name,
                count=count,
                assignments=None
                if assignments is None
                else [
                    create_partitions.CreatePartitionsAssignment(broker_ids=a) for a in assignments
                ],
            )
            for name, count, assignments in topics
        ],
        timeout_ms=5000,
        validate_only=validate_only,
    )


def results(resp: Any) -> dict[str, tuple[int, str | None]]:
    return {r.name: (r.error_code, r.error_message) for r in resp.results}


def delete(topic: str, *partitions: tuple[int, int], timeout_ms: int = 5000) -> Any:
    return delete_records.Request(
        topics=[
            delete_records.DeleteRecordsTopic(
                name=topic,
                partitions=[
                    delete_records.DeleteRecordsPartition(partition_index=p, offset=o)
                    for p, o in partitions
                ],
            )
        ],
        timeout_ms=timeout_ms,
    )


def low_watermarks(resp: Any) -> dict[tuple[str, int], tuple[int, int]]:
    return {
        (t.name, p.partition_index): (p.error_code, p.low_watermark)
        for t in resp.topics
        for p in t.partitions
    }


# ---------------------------------------------------------------- CreatePartitions


@pytest.mark.parametrize("version", [0, 1, 2, 3])
async def test_create_partitions_grows_a_topic_durably(tmp_path: Path, version: int) -> None:
    n = Node(tmp_path / "data")
    try:
        n.create("t", 2)
        n.changes.clear()
        resp = await n.call(create_partitions.API_KEY, version, grow(("t", 5, None)))
        assert results(resp) == {"t": (0, None)}
        assert n.catalog.get("t").num_partitions == 5  # type: ignore[union-attr]
        # The group runtime's hook hears of the growth (consumer groups re-assign on it).
        assert n.changes == [(["t"], False)]
        for p in range(5):
            assert n.logs.get("t", p) is not None
        assert await n.produce("t", 4, [b"new"]) == 0
    finally:
        await n.close()
    again = Node(tmp_path / "data")
    try:
        assert again.catalog.get("t").num_partitions == 5  # type: ignore[union-attr]
        assert (await again.fetch_at("t", 4, 0)).high_watermark == 1
    finally:
        await again.close()


async def test_create_partitions_refuses_as_kafka_does(node: Node) -> None:
    node.create("t", 3)
    node.create("u", 1)
    resp = await node.call(
        create_partitions.API_KEY,
        3,
        grow(
            ("t", 3, None),
            ("u", 1, None),
            ("nope", 4, None),
            ("__consumer_offsets", 60, None),
        ),
    )
    got = results(resp)
    assert got["t"] == (ErrorCode.INVALID_PARTITIONS, "Topic already has 3 partition(s).")
    assert got["nope"] == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
    assert got["__consumer_offsets"][0] == ErrorCode.POLICY_VIOLATION
    resp = await node.call(create_partitions.API_KEY, 3, grow(("t", 2, None)))
    assert results(resp)["t"] == (
        ErrorCode.INVALID_PARTITIONS,
        "The topic t currently has 3 partition(s); 2 would not be an increase.",
    )
    # A name given twice: one answer, INVALID_REQUEST, and nothing grows.
    resp = await node.call(create_partitions.API_KEY, 3, grow(("u", 2, None), ("u", 3, None)))
    assert [(r.name, r.error_code, r.error_message) for r in resp.results] == [
        ("u", ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
    ]
    assert node.catalog.get("u").num_partitions == 1  # type: ignore[union-attr]
    assert node.catalog.get("t").num_partitions == 3  # type: ignore[union-attr]


async def test_validate_only_stores_nothing(node: Node) -> None:
    node.create("t", 1)
    resp = await node.call(create_partitions.API_KEY, 2, grow(("t", 4, None), validate_only=True))
    assert results(resp) == {"t": (0, None)}
    assert node.catalog.get("t").num_partitions == 1  # type: ignore[union-attr]
    assert node.logs.get("t", 1) is None
    resp = await node.call(create_partitions.API_KEY, 2, grow(("t", 1, None), validate_only=True))
    assert results(resp)["t"][0] == ErrorCode.INVALID_PARTITIONS


@pytest.mark.parametrize(
    ("assignments", "message"),
    [
        (
            [[NODE_ID]],
            "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.",
        ),
        (
            [[NODE_ID], [7]],
            "The manual partition assignment includes broker 7, but no such broker is registered.",
        ),
        ([[NODE_ID], []], "The manual partition assignment includes an empty replica list."),
        (
            [[NODE_ID], [NODE_ID, NODE_ID]],
            f"The manual partition assignment includes the broker {NODE_ID} more than once.",
        ),
    ],
)
async def test_manual_assignments_are_checked(
    node: Node, assignments: list[list[int]], message: str
) -> None:
    node.create("t", 1)
    resp = await node.call(create_partitions.API_KEY, 3, grow(("t", 3, assignments)))
    assert results(resp)["t"] == (ErrorCode.INVALID_REPLICATION_ASSIGNMENT, message)
    assert node.catalog.get("t").num_partitions == 1  # type: ignore[union-attr]


async def test_a_manual_assignment_to_this_node_grows(node: Node) -> None:
    node.create("t", 1)
    resp = await node.call(create_partitions.API_KEY, 3, grow(("t", 3, [[NODE_ID], [NODE_ID]])))
    assert results(resp)["t"] == (0, None)
    assert node.catalog.get("t").num_partitions == 3  # type: ignore[union-attr]


async def test_more_than_the_controllers_record_limit_is_refused(node: Node) -> None:
    node.create("t", 1)
    node.create("u", 1)
    resp = await node.call(
        create_partitions.API_KEY, 3, grow(("u", 3, None), ("t", 1 + 10_000, None))
    )
    # u's 2 new partitions fit; t's 10,000 more would pass the 10,000-record limit.
    assert results(resp) == {"u": (0, None), "t": (ErrorCode.UNKNOWN, None)}
    assert node.catalog.get("t").num_partitions == 1  # type: ignore[union-attr]
    assert not any(d.startswith("t-") and d != "t-0" for d in os.listdir(node.data_dir))


# ---------------------------------------------------------------- DeleteRecords


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_delete_records_moves_the_log_start(node: Node, version: int) -> None:
    node.create("t", 2, {"segment.bytes": "1024"})
    for _ in range(10):
        await node.produce("t", 0, [b"x" * 300, b"y" * 300])  # a segment every ~1.5 batches
    plog = node.logs.get("t", 0)
    assert plog is not None and len(plog.segments) > 4
    segments = len(plog.segments)
    resp = await node.call(delete_records.API_KEY, version, delete("t", (0, 11)))
    assert low_watermarks(resp) == {("t", 0): (0, 11)}
    assert plog.log_start_offset == 11
    assert len(plog.segments) < segments  # whole segments below the start are gone
    # Below the start: OFFSET_OUT_OF_RANGE (the consumer resets); at it: served.
    assert (await node.fetch_at("t", 0, 4)).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    served = await node.fetch_at("t", 0, 11)
    assert (served.error_code, served.log_start_offset) == (0, 11)
    assert await node.earliest("t", 0) == 11
    # An offset at or below the start changes nothing and answers the start.
    resp = await node.call(delete_records.API_KEY, version, delete("t", (0, 3)))
    assert low_watermarks(resp) == {("t", 0): (0, 11)}
    # -1 is the high watermark.
    resp = await node.call(delete_records.API_KEY, version, delete("t", (0, -1), (1, -1)))
    assert low_watermarks(resp) == {("t", 0): (0, 20), ("t", 1): (0, 0)}
    assert (await node.fetch_at("t", 0, 20)).error_code == 0


async def test_delete_records_refuses_as_kafka_does(node: Node) -> None:
    node.create("t", 1)
    node.create("compacted", 1, {"cleanup.policy": "compact"})
    await node.produce("t", 0, [b"a", b"b"])
    await node.produce("compacted", 0, [b"a"])
    resp = await node.call(delete_records.API_KEY, 2, delete("t", (0, 3), (1, 0)))
    assert low_watermarks(resp) == {
        ("t", 0): (ErrorCode.OFFSET_OUT_OF_RANGE, -1),
        ("t", 1): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
    }
    resp = await node.call(delete_records.API_KEY, 2, delete("t", (0, -2)))
    assert low_watermarks(resp) == {("t", 0): (ErrorCode.OFFSET_OUT_OF_RANGE, -1)}
    resp = await node.call(delete_records.API_KEY, 2, delete("compacted", (0, 1)))
    assert low_watermarks(resp) == {("compacted", 0): (ErrorCode.POLICY_VIOLATION, -1)}
    resp = await node.call(delete_records.API_KEY, 2, delete("__consumer_offsets", (0, 0), (99, 0)))
    assert low_watermarks(resp) == {
        ("__consumer_offsets", 0): (ErrorCode.INVALID_TOPIC, -1),
        ("__consumer_offsets", 99): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
    }
    resp = await node.call(delete_records.API_KEY, 2, delete("nope", (0, 0)))
    assert low_watermarks(resp) == {("nope", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)}
    assert node.logs.get("t", 0).log_start_offset == 0  # type: ignore[union-attr]
    # Up to the high watermark itself is allowed.
    resp = await node.call(delete_records.API_KEY, 2, delete("t", (0, 2)))
    assert low_watermarks(resp) == {("t", 0): (0, 2)}


async def test_delete_records_survives_a_restart(tmp_path: Path) -> None:
    n = Node(tmp_path / "data")
    try:
        n.create("t", 1)
        for _ in range(3):
            await n.produce("t", 0, [b"a", b"b"])
        resp = await n.call(delete_records.API_KEY, 2, delete("t", (0, 5)))
        assert low_watermarks(resp) == {("t", 0): (0, 5)}
    finally:
        await n.close()
    again = Node(tmp_path / "data")
    try:
        assert await again.earliest("t", 0) == 5
        assert (await again.fetch_at("t", 0, 4)).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    finally:
        await again.close()


# ---------------------------------------------------------------- DescribeCluster


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_describe_cluster(node: Node, version: int) -> None:
    req = describe_cluster.Request(include_cluster_authorized_operations=False)
    resp = await node.call(describe_cluster.API_KEY, version, req)
    assert (resp.error_code, resp.cluster_id, resp.controller_id) == (0, "test-cluster", NODE_ID)
    assert [(b.broker_id, b.host, b.port, b.rack, b.is_fenced) for b in resp.brokers] == [
        (NODE_ID, "kgc.example", 9092, "r1", False)
    ]
    assert resp.cluster_authorized_operations == -(2**31)
    if version >= 1:
        assert resp.endpoint_type == 1
    req = describe_cluster.Request(include_cluster_authorized_operations=True)
    resp = await node.call(describe_cluster.API_KEY, version, req)
    assert resp.cluster_authorized_operations == all_operations(ResourceType.CLUSTER)
    if version >= 2:  # one node, never fenced
        req = describe_cluster.Request(include_fenced_brokers=True)
        resp = await node.call(describe_cluster.API_KEY, version, req)
        assert [b.broker_id for b in resp.brokers] == [NODE_ID]


async def test_describe_cluster_endpoint_types(node: Node) -> None:
    resp = await node.call(describe_cluster.API_KEY, 1, describe_cluster.Request(endpoint_type=2))
    assert (resp.error_code, resp.error_message) == (
        ErrorCode.MISMATCHED_ENDPOINT_TYPE,
        "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of "
        "type CONTROLLER",
    )
    assert resp.brokers == []
    resp = await node.call(describe_cluster.API_KEY, 2, describe_cluster.Request(endpoint_type=9))
    assert (resp.error_code, resp.error_message) == (
        ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
        "Unsupported endpoint type 9",
    )


async def test_describe_cluster_on_a_listener_the_node_lacks(node: Node) -> None:
    other = ClientInfo("c", "127.0.0.1", 1, 1, listener="INTERNAL")
    resp = await node.call(describe_cluster.API_KEY, 2, describe_cluster.Request(), client=other)
    assert (resp.brokers, resp.controller_id) == ([], -1)


# ---------------------------------------------------------------- DescribeLogDirs


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
async def test_describe_log_dirs(node: Node, version: int) -> None:
    node.create("t", 2)
    node.create("u", 1)
    await node.produce("t", 1, [b"a" * 100])
    resp = await node.call(
        describe_log_dirs.API_KEY, version, describe_log_dirs.Request(topics=None)
    )
    assert resp.error_code == 0
    (d,) = resp.results
    assert (d.error_code, d.log_dir) == (0, str(node.data_dir.absolute()))
    sizes = {(t.name, p.partition_index): p.partition_size for t in d.topics for p in t.partitions}
    assert sizes == {
        ("t", 0): 0,
        ("t", 1): node.logs.get("t", 1).size_bytes,  # type: ignore[union-attr]
        ("u", 0): 0,
    }
    assert sizes[("t", 1)] > 100
    assert all(
        (p.offset_lag, p.is_future_key) == (0, False) for t in d.topics for p in t.partitions
    )
    if version >= 4:
        st = os.statvfs(node.data_dir)
        assert d.total_bytes == st.f_blocks * st.f_frsize
        assert 0 < d.usable_bytes <= d.total_bytes
    req = describe_log_dirs.Request(
        topics=[describe_log_dirs.DescribableLogDirTopic(topic="t", partitions=[1, 7])]
    )
    (d,) = (await node.call(describe_log_dirs.API_KEY, version, req)).results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in d.topics] == [("t", [1])]


# ---------------------------------------------------------------- authorization


def allow(rtype: ResourceType, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(
        rtype, name, PatternType.LITERAL, "User:alice", "*", op, AclPermissionType.ALLOW
    )


async def test_authorization_as_kafka_checks_it(tmp_path: Path) -> None:
    acls = Authorizer(
        [
            allow(ResourceType.TOPIC, "mine", AclOperation.ALTER),
            allow(ResourceType.TOPIC, "mine", AclOperation.DELETE),
        ]
    )
    n = Node(tmp_path / "data", authorizer=acls)  # ApiAuthorizer.wrap accepts the four APIs
    try:
        n.create("mine", 1)
        n.create("theirs", 1)
        resp = await n.call(
            create_partitions.API_KEY,
            3,
            grow(
                ("mine", 2, None), ("theirs", 2, None), ("theirs2", 2, None), ("theirs2", 3, None)
            ),
            client=ALICE,
        )
        assert results(resp) == {
            "mine": (0, None),
            "theirs": (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None),
            "theirs2": (ErrorCode.INVALID_REQUEST, "Duplicate topic name."),
        }
        resp = await n.call(
            delete_records.API_KEY,
            2,
            delete_records.Request(
                topics=[
                    delete_records.DeleteRecordsTopic(
                        name=name,
                        partitions=[
                            delete_records.DeleteRecordsPartition(partition_index=0, offset=0)
                        ],
                    )
                    for name in ("mine", "theirs")
                ],
                timeout_ms=1000,
            ),
            client=ALICE,
        )
        assert low_watermarks(resp) == {
            ("mine", 0): (0, 0),
            ("theirs", 0): (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1),
        }
        # DescribeLogDirs needs DESCRIBE on the cluster.
        resp = await n.call(
            describe_log_dirs.API_KEY, 4, describe_log_dirs.Request(topics=None), client=ALICE
        )
        assert (resp.error_code, resp.results) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
        # DescribeCluster is answered to anyone; its authorized operations are 0 without
        # DESCRIBE on the cluster.
        req = describe_cluster.Request(include_cluster_authorized_operations=True)
        resp = await n.call(describe_cluster.API_KEY, 2, req, client=ALICE)
        assert (resp.error_code, resp.cluster_authorized_operations) == (0, 0)
        assert [b.broker_id for b in resp.brokers] == [NODE_ID]
        acls.update(
            [
                *acls.bindings,
                allow(ResourceType.CLUSTER, "kafka-cluster", AclOperation.DESCRIBE),
                allow(ResourceType.CLUSTER, "kafka-cluster", AclOperation.ALTER),
            ]
        )
        resp = await n.call(describe_cluster.API_KEY, 2, req, client=ALICE)
        assert resp.cluster_authorized_operations == (1 << AclOperation.DESCRIBE) | (
            1 << AclOperation.ALTER
        )
        resp = await n.call(
            describe_log_dirs.API_KEY, 4, describe_log_dirs.Request(topics=None), client=ALICE
        )
        assert resp.error_code == 0 and len(resp.results) == 1
    finally:
        await n.close()


def test_metadata_authorized_operations_with_acls() -> None:
    """librdkafka's describe_cluster/describe_topics ask Metadata v8-10 for them."""

    def stand_in(h: RequestHeader, req: Any, c: ClientInfo) -> Any:
        return metadata.Response(
            cluster_id="x",
            topics=[metadata.MetadataResponseTopic(name="mine", partitions=[])],
            cluster_authorized_operations=-(2**31),
        )

    acls = Authorizer(
        [
            allow(ResourceType.TOPIC, "mine", AclOperation.DESCRIBE),
            allow(ResourceType.TOPIC, "mine", AclOperation.READ),
        ]
    )
    hs = authorized(ApiAuthorizer(acls), {metadata.API_KEY: stand_in})
    req = metadata.Request(
        topics=[metadata.MetadataRequestTopic(name="mine")],
        include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True,
    )
    resp = hs[metadata.API_KEY](RequestHeader(metadata.API_KEY, 10, 1, "c"), req, ALICE)
    assert resp.cluster_authorized_operations == 0  # no DESCRIBE on the cluster
    assert resp.topics[0].topic_authorized_operations == (1 << AclOperation.READ) | (
        1 << AclOperation.DESCRIBE
    )
    acls.update(
        [*acls.bindings, allow(ResourceType.CLUSTER, "kafka-cluster", AclOperation.DESCRIBE)]
    )
    resp = hs[metadata.API_KEY](RequestHeader(metadata.API_KEY, 10, 1, "c"), req, ALICE)
    assert resp.cluster_authorized_operations == 1 << AclOperation.DESCRIBE
