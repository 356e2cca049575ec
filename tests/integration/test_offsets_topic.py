"""``__consumer_offsets`` read by real Kafka clients from a real ``kgc serve``, as Burrow,
kminion and ``kafka-console-consumer --formatter`` read it from Kafka.

A real group (librdkafka) consumes and commits; a second client, assigned to every partition
of ``__consumer_offsets`` from the beginning, reads it and decodes the keys and values with
the decoder below, written here from Kafka's record schemas (group-coordinator's
OffsetCommitKey/Value, GroupMetadataKey/Value JSON), not with kgc's own code. It must find
the offsets the group committed and the group's metadata. Produce to the topic is refused as
Kafka refuses it; with ACLs, reading it needs READ on the topic; in cluster mode each
partition is read from the node that coordinates it.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from support.clusterkit import Cluster, groups_on_distinct_nodes
from support.groupkit import commit_offset, create_topic
from support.kgc_process import KgcProcess, free_port

from coordinator.tools.client import ClientSecurity, Connection
from protocol.errors import ErrorCode
from protocol.messages import fetch, list_offsets, metadata
from storage.records import partition_for

pytestmark = pytest.mark.integration

OFFSETS = "__consumer_offsets"
PARTITIONS = 5  # offsets.topic.num.partitions of the servers below

# -- Kafka's __consumer_offsets formats, decoded independently of kgc ------------------------
# Every key and value starts with an int16 version. Keys: 0 and 1 OffsetCommitKey (group,
# topic, partition), 2 GroupMetadataKey (group); higher versions are other record types
# (KIP-848 consumer groups, share groups) that this reader skips, as Burrow does. Values of
# versions 0-3 are "classic" encodings: int16-length strings (-1 = null), int32-length bytes,
# int32 array counts, big-endian integers.


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def _take(self, fmt: str) -> Any:
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def i16(self) -> int:
        return int(self._take(">h"))

    def i32(self) -> int:
        return int(self._take(">i"))

    def i64(self) -> int:
        return int(self._take(">q"))

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def blob(self) -> bytes:
        n = self.i32()
        b = self.data[self.pos : self.pos + max(n, 0)]
        self.pos += max(n, 0)
        return b


@dataclass(frozen=True)
class CommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass
class Commit:
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_timestamp: int


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass
class Group:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    members: list[Member]


def decode_key(data: bytes) -> CommitKey | GroupKey | None:
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        group, topic = r.string(), r.string()
        assert group is not None and topic is not None
        return CommitKey(group, topic, r.i32())
    if version == 2:
        group = r.string()
        assert group is not None
        return GroupKey(group)
    return None


def decode_commit(data: bytes) -> Commit:
    r = _Reader(data)
    version = r.i16()
    assert 0 <= version <= 3, f"OffsetCommitValue v{version}"
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.i64()
    if version == 1:
        r.i64()  # expire_timestamp
    assert r.pos == len(data), "trailing bytes in OffsetCommitValue"
    return Commit(offset, leader_epoch, metadata, commit_timestamp)


def decode_group(data: bytes) -> Group:
    r = _Reader(data)
    version = r.i16()
    assert 0 <= version <= 3, f"GroupMetadataValue v{version}"
    protocol_type = r.string()
    assert protocol_type is not None
    generation = r.i32()
    protocol, leader = r.string(), r.string()
    if version >= 2:
        r.i64()  # current_state_timestamp
    members = []
    for _ in range(r.i32()):
        member_id = r.string()
        if version >= 3:
            r.string()  # group_instance_id
        client_id, client_host = r.string(), r.string()
        if version >= 1:
            r.i32()  # rebalance_timeout
        session_timeout = r.i32()
        subscription, assignment = r.blob(), r.blob()
        assert member_id is not None and client_id is not None and client_host is not None
        members.append(
            Member(member_id, client_id, client_host, session_timeout, subscription, assignment)
        )
    assert r.pos == len(data), "trailing bytes in GroupMetadataValue"
    return Group(protocol_type, generation, protocol, leader, members)


class OffsetsView:
    """What a Burrow-like reader learns from the records it consumed, in offset order."""

    def __init__(self) -> None:
        self.commits: dict[CommitKey, Commit] = {}
        self.groups: dict[str, list[Group]] = {}  # every GroupMetadataValue, in order
        self.read = 0

    def add(self, key: bytes | None, value: bytes | None) -> None:
        self.read += 1
        assert key is not None
        k = decode_key(key)
        if isinstance(k, CommitKey):
            if value is None:
                self.commits.pop(k, None)  # a tombstone: the offset was deleted
            else:
                self.commits[k] = decode_commit(value)
        elif isinstance(k, GroupKey) and value is not None:
            self.groups.setdefault(k.group, []).append(decode_group(value))

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        return {
            (k.topic, k.partition): c.offset for k, c in self.commits.items() if k.group == group
        }


# -- readers -----------------------------------------------------------------------------------


def confluent_reader(conf: dict[str, Any]) -> Consumer:
    """A librdkafka consumer assigned every ``__consumer_offsets`` partition from the start."""
    c = Consumer(
        {
            **conf,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",  # never joined: assign() only
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    c.assign([TopicPartition(OFFSETS, p, -2) for p in range(PARTITIONS)])  # -2: beginning
    return c


def read_until(
    reader: Consumer, view: OffsetsView, done: Any, timeout: float = 30.0, what: str = ""
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out reading {OFFSETS}: {what}"
        msg = reader.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"reading {OFFSETS}: {msg.error()}")
        view.add(msg.key(), msg.value())


def run_group(bootstrap: str, group: str, topic: str, want: int, client_id: str) -> dict[int, int]:
    """Consume ``want`` records of ``topic`` in ``group`` and commit them synchronously;
    returns the committed offsets by partition. The consumer stays in the group (open)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "partition.assignment.strategy": "range",
        }
    )
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < want:
        assert time.monotonic() < deadline, f"consumed {got} of {want}"
        msg = c.poll(0.2)
        if msg is None or msg.error():
            continue
        got += 1
    committed = c.commit(asynchronous=False)
    assert committed is not None
    out = {tp.partition: tp.offset for tp in committed if tp.error is None}
    _open_consumers.append(c)
    return out


_open_consumers: list[Consumer] = []


@pytest.fixture(autouse=True)
def _close_consumers() -> Iterator[None]:
    yield
    while _open_consumers:
        _open_consumers.pop().close()


@pytest.fixture(scope="module")
def kgc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KgcProcess]:
    proc = KgcProcess(
        tmp_path_factory.mktemp("offsets-topic") / "data",
        "--offsets-topic-num-partitions",
        str(PARTITIONS),
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def produce(bootstrap: str, topic: str, n: int, conf: dict[str, Any] | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, **(conf or {})})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 3)
    assert p.flush(10) == 0


# -- tests -------------------------------------------------------------------------------------


def test_confluent_reader_finds_what_a_group_wrote(kgc: KgcProcess) -> None:
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", f"burrow-{uuid.uuid4().hex[:6]}"
    create_topic(kgc.bootstrap, topic, 3)
    produce(kgc.bootstrap, topic, 30)
    committed = run_group(kgc.bootstrap, group, topic, 30, client_id="app-1")
    assert committed == {0: 10, 1: 10, 2: 10}

    # Metadata lists the topic, with offsets.topic.num.partitions partitions.
    reader = confluent_reader({"bootstrap.servers": kgc.bootstrap})
    try:
        md = reader.list_topics(timeout=10)
        assert OFFSETS in md.topics and md.topics[OFFSETS].error is None
        assert sorted(md.topics[OFFSETS].partitions) == list(range(PARTITIONS))
        assert topic in md.topics

        view = OffsetsView()
        want = {(topic, p): o for p, o in committed.items()}

        def found() -> bool:
            stable = [
                g
                for g in view.groups.get(group, [])
                if g.protocol_type == "consumer" and g.generation >= 1 and g.members
            ]
            return view.committed(group) == want and bool(stable)

        read_until(reader, view, found, what=f"the commits and metadata of {group}")
    finally:
        reader.close()
    g = [x for x in view.groups[group] if x.members][-1]
    assert g.protocol == "range"
    assert [m.client_id for m in g.members] == ["app-1"]
    assert g.leader == g.members[0].member_id
    assert g.members[0].session_timeout == 45_000  # librdkafka's session.timeout.ms
    # The member's subscription (ConsumerProtocolSubscription) names the topic.
    assert topic.encode() in g.members[0].subscription
    commit = view.commits[CommitKey(group, topic, 0)]
    assert commit.offset == 10 and commit.commit_timestamp > 0


def test_kafka_python_reads_it_too(kgc: KgcProcess) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    topic, group = f"kp-{uuid.uuid4().hex[:6]}", f"kp-g-{uuid.uuid4().hex[:6]}"
    create_topic(kgc.bootstrap, topic, 1)
    with Connection.to(kgc.bootstrap) as conn:
        assert commit_offset(conn, group, topic, 123, metadata="from-test") == 0

    admin = KafkaAdminClient(bootstrap_servers=kgc.bootstrap)
    try:
        (described,) = admin.describe_topics([OFFSETS])
        assert described["is_internal"] is True
        assert len(described["partitions"]) == PARTITIONS
    finally:
        admin.close()

    consumer = KafkaConsumer(bootstrap_servers=kgc.bootstrap, enable_auto_commit=False)
    try:
        assert consumer.partitions_for_topic(OFFSETS) == set(range(PARTITIONS))
        parts = [KTopicPartition(OFFSETS, p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        view = OffsetsView()
        deadline = time.monotonic() + 30
        while view.committed(group) != {(topic, 0): 123}:
            assert time.monotonic() < deadline, "kafka-python did not read the commit"
            for records in consumer.poll(timeout_ms=200).values():
                for rec in records:
                    view.add(rec.key, rec.value)
        assert view.commits[CommitKey(group, topic, 0)].metadata == "from-test"
    finally:
        consumer.close()


def test_produce_to_it_is_refused(kgc: KgcProcess) -> None:
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": kgc.bootstrap, "retries": 0})
    p.produce(
        OFFSETS, key=b"x", value=b"y", partition=0, on_delivery=lambda e, _m: errors.append(e)
    )
    p.flush(10)
    # Kafka's INVALID_TOPIC_EXCEPTION (17), "Cannot append to internal topic".
    assert [e.code() if e else None for e in errors] == [KafkaError.TOPIC_EXCEPTION]
    # Nothing was written: a reader still finds only what groups wrote (no "x" key).
    view = OffsetsView()
    keys: list[bytes] = []
    reader = confluent_reader({"bootstrap.servers": kgc.bootstrap, "enable.partition.eof": True})
    eof: set[int] = set()
    try:
        deadline = time.monotonic() + 20
        while len(eof) < PARTITIONS:
            assert time.monotonic() < deadline
            msg = reader.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                eof.add(msg.partition())
                continue
            keys.append(msg.key())
            view.add(msg.key(), msg.value())  # decodes: every key is Kafka's
    finally:
        reader.close()
    assert b"x" not in keys


def test_admin_cannot_create_or_delete_it(kgc: KgcProcess) -> None:
    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
    created = admin.create_topics([NewTopic(OFFSETS, 1, 1)])[OFFSETS]
    with pytest.raises(Exception) as exc:
        created.result(10)
    assert exc.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    deleted = admin.delete_topics([OFFSETS])[OFFSETS]
    with pytest.raises(Exception) as exc:
        deleted.result(10)
    assert exc.value.args[0].code() == KafkaError.POLICY_VIOLATION
    md = admin.list_topics(timeout=10)
    assert len(md.topics[OFFSETS].partitions) == PARTITIONS


# -- authorization -----------------------------------------------------------------------------

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret";'
)


def sasl(bootstrap: str, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


def test_reading_it_needs_read_on_the_topic(tmp_path: Path) -> None:
    port = free_port()
    proc = KgcProcess(
        tmp_path / "data",
        "--listeners", f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "--sasl-enabled-mechanisms", "PLAIN",
        "--sasl-jaas-config", JAAS,
        "--authorizer-class-name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "--super-users", "User:admin",
        "--offsets-topic-num-partitions", str(PARTITIONS),
        port=port,
    )  # fmt: skip
    proc.start()
    try:
        bootstrap = f"127.0.0.1:{port}"
        admin_conf = sasl(bootstrap, "admin")
        topic, group = f"sec-{uuid.uuid4().hex[:6]}", f"sec-g-{uuid.uuid4().hex[:6]}"
        admin = AdminClient(admin_conf)
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
        c = Consumer({**admin_conf, "group.id": group})
        c.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
        c.close()

        # The readers' (never joined) groups are alice's to use; the topic is not yet.
        reader_groups = AclBinding(
            ResourceType.GROUP, "reader-", ResourcePatternType.PREFIXED, "User:alice", "*",
            AclOperation.READ, AclPermissionType.ALLOW,
        )  # fmt: skip
        for f in admin.create_acls([reader_groups]).values():
            f.result(10)

        # Without an ACL on it alice does not see the topic (Metadata filters it out), and
        # Fetch (by name or by topic id) and ListOffsets of it are refused.
        reader = confluent_reader(sasl(bootstrap, "alice"))
        try:
            assert OFFSETS not in reader.list_topics(timeout=10).topics
        finally:
            reader.close()
        topic_id = admin_topic_id(admin_conf)
        p = partition_for(group, PARTITIONS)
        alice = ClientSecurity("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret")
        denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert raw_fetch(bootstrap, p, security=alice)[0] == denied
        assert raw_fetch(bootstrap, p, security=alice, topic_id=topic_id)[0] == denied
        assert raw_list_offsets(bootstrap, p, security=alice) == (denied, -1)
        admin_view = ClientSecurity("SASL_PLAINTEXT", "PLAIN", "admin", "admin-secret")
        assert raw_fetch(bootstrap, p, security=admin_view, topic_id=topic_id)[0] == 0

        grant = AclBinding(
            ResourceType.TOPIC, OFFSETS, ResourcePatternType.LITERAL, "User:alice", "*",
            AclOperation.READ, AclPermissionType.ALLOW,
        )  # fmt: skip
        for f in admin.create_acls([grant]).values():
            f.result(10)
        # By topic id too: the authorizer is asked about the name the id stands for.
        assert raw_fetch(bootstrap, p, security=alice, topic_id=topic_id)[0] == 0
        assert raw_list_offsets(bootstrap, p, security=alice)[0] == 0
        reader = confluent_reader(sasl(bootstrap, "alice"))
        try:
            assert OFFSETS in reader.list_topics(timeout=10).topics  # READ implies DESCRIBE
            view = OffsetsView()
            read_until(
                reader,
                view,
                lambda: view.committed(group) == {(topic, 0): 7},
                what="alice's read after the grant",
            )
        finally:
            reader.close()
    finally:
        proc.stop()


# -- cluster mode ------------------------------------------------------------------------------


def raw_fetch(
    bootstrap: str,
    partition: int,
    *,
    security: ClientSecurity | None = None,
    topic_id: bytes | None = None,
) -> tuple[int, int, bytes]:
    """(error code, high watermark, records) of a Fetch of one offsets partition: v12 by
    name, or v13 by ``topic_id``."""
    req = fetch.Request(
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=0,
        session_epoch=-1,
        topics=[
            fetch.FetchTopic(
                topic=OFFSETS if topic_id is None else "",
                topic_id=topic_id or bytes(16),
                partitions=[
                    fetch.FetchPartition(
                        partition=partition, fetch_offset=0, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )
    with Connection.to(bootstrap, security=security) as conn:
        resp = conn.call(fetch.API_KEY, 12 if topic_id is None else 13, req)
    pd = resp.responses[0].partitions[0]
    return int(pd.error_code), int(pd.high_watermark), bytes(pd.records or b"")


def raw_list_offsets(
    bootstrap: str, partition: int, *, security: ClientSecurity | None = None
) -> tuple[int, int]:
    """(error code, offset) of ListOffsets "latest" of one offsets partition."""
    req = list_offsets.Request(
        replica_id=-1,
        topics=[
            list_offsets.ListOffsetsTopic(
                name=OFFSETS,
                partitions=[
                    list_offsets.ListOffsetsPartition(partition_index=partition, timestamp=-1)
                ],
            )
        ],
    )
    with Connection.to(bootstrap, security=security) as conn:
        resp = conn.call(list_offsets.API_KEY, 7, req)
    r = resp.topics[0].partitions[0]
    return int(r.error_code), int(r.offset)


def admin_topic_id(conf: dict[str, Any]) -> bytes:
    """``__consumer_offsets``'s topic id, as a client with DESCRIBE on it reads it."""
    security = ClientSecurity(
        conf["security.protocol"],
        conf["sasl.mechanism"],
        conf["sasl.username"],
        conf["sasl.password"],
    )
    with Connection.to(conf["bootstrap.servers"], security=security) as conn:
        resp = conn.call(
            metadata.API_KEY,
            12,
            metadata.Request(topics=[metadata.MetadataRequestTopic(name=OFFSETS)]),
        )
    (t,) = resp.topics
    assert t.error_code == 0 and t.is_internal
    return bytes(t.topic_id)


@pytest.mark.postgres
def test_cluster_each_partition_is_read_from_its_coordinator(tmp_path: Path, pg_url: str) -> None:
    with Cluster(tmp_path, pg_url, nodes=2, offsets_partitions=PARTITIONS) as cluster:
        cluster.start_all()
        leaders = cluster.offsets_leaders()
        assert set(leaders.values()) == {1, 2}, leaders  # both nodes coordinate some
        topic = "cluster-orders"
        create_topic(cluster.nodes[1].bootstrap, topic, 1)
        cluster.wait_topic_led(topic)
        groups = groups_on_distinct_nodes(cluster, 2, prefix="cg")
        for i, group in enumerate(groups):
            node = cluster.coordinator_of(group)
            with Connection.to(cluster.nodes[node].bootstrap) as conn:
                assert commit_offset(conn, group, topic, 100 + i) == 0

        # Raw Fetch: each partition answers from its coordinator only.
        for p, leader in leaders.items():
            other = 2 if leader == 1 else 1
            err, _hw, _ = raw_fetch(cluster.nodes[other].bootstrap, p)
            assert err == 6, (p, err)  # NOT_LEADER_OR_FOLLOWER
            err, hw, _ = raw_fetch(cluster.nodes[leader].bootstrap, p)
            assert err == 0, (p, err)
        for group in groups:
            p = cluster.offsets_partition(group)
            _, hw, _ = raw_fetch(cluster.nodes[leaders[p]].bootstrap, p)
            assert hw >= 1, (group, p, hw)

        # A real client, bootstrapped from both nodes, reads every partition (librdkafka
        # follows Metadata's leaders) and finds both groups' commits.
        reader = confluent_reader({"bootstrap.servers": cluster.bootstrap})
        view = OffsetsView()
        try:
            read_until(
                reader,
                view,
                lambda: all(
                    view.committed(g) == {(topic, 0): 100 + i} for i, g in enumerate(groups)
                ),
                what="both groups' commits",
            )
        finally:
            reader.close()
