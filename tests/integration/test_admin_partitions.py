"""CreatePartitions, DeleteRecords, DescribeCluster and DescribeLogDirs with real admin clients.

confluent-kafka's AdminClient and kafka-python's KafkaAdminClient against a real
``kgc serve``: the calls tools make, what they answer, and what follows from them --
consumers of a classic group and of a KIP-848 group pick up the new partitions, a consumer
whose position was deleted resets as its auto.offset.reset says, and both survive a SIGKILL.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec
from kafka import KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import InvalidPartitionsError, OffsetOutOfRangeError
from support.clusterkit import Cluster
from support.kgc_process import KgcProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# KIP-848 members heartbeat every 250 ms (kgc's default is 5 s).
ARGS = (
    "--group-consumer-min-heartbeat-interval-ms",
    "100",
    "--group-consumer-heartbeat-interval-ms",
    "250",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path_factory.mktemp("kgc") / "data", *ARGS)
    proc.start()
    proc.wait_loaded()
    yield proc
    if proc.alive():
        proc.stop()


@pytest.fixture
def kgc(server: KgcProcess) -> KgcProcess:
    """The module's server, started again if a test left it down. Shared, as no test needs a
    fresh one: each uses topics and groups of its own, and the SIGKILL test restarts it on
    the same data, which a later test reads as any restart's state."""
    if not server.alive():
        server.start()
        server.wait_loaded()
    return server


def wait_until(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def create_topic(a: AdminClient, name: str, partitions: int) -> None:
    a.create_topics([NewTopic(name, partitions)])[name].result(timeout=10)


def produce(kgc: KgcProcess, topic: str, partition: int, n: int, prefix: str = "v") -> None:
    p = Producer({"bootstrap.servers": kgc.bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, f"{prefix}{i}".encode(), partition=partition)
    assert p.flush(10) == 0


def earliest(a: AdminClient, topic: str, partition: int) -> int:
    tp = TopicPartition(topic, partition)
    return int(a.list_offsets({tp: OffsetSpec.earliest()})[tp].result(timeout=10).offset)


def partitions_of(a: AdminClient, topic: str) -> int:
    return len(a.list_topics(topic, timeout=10).topics[topic].partitions)


# ---------------------------------------------------------------- confluent-kafka


def test_confluent_admin_calls(kgc: KgcProcess) -> None:
    a = AdminClient({"bootstrap.servers": kgc.bootstrap})
    create_topic(a, "t", 1)
    a.create_partitions([NewPartitions("t", 3)])["t"].result(timeout=10)
    assert partitions_of(a, "t") == 3
    with pytest.raises(KafkaException) as err:
        a.create_partitions([NewPartitions("t", 3)])["t"].result(timeout=10)
    assert err.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    assert "Topic already has 3 partition(s)." in err.value.args[0].str()
    with pytest.raises(KafkaException) as err:
        a.create_partitions([NewPartitions("nope", 3)])["nope"].result(timeout=10)
    assert err.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    a.create_partitions([NewPartitions("t", 8)], validate_only=True)["t"].result(timeout=10)
    assert partitions_of(a, "t") == 3

    produce(kgc, "t", 0, 10)
    tp = TopicPartition("t", 0, 4)
    deleted = a.delete_records([tp])
    assert deleted[tp].result(timeout=10).low_watermark == 4
    assert earliest(a, "t", 0) == 4
    beyond = TopicPartition("t", 0, 11)
    with pytest.raises(KafkaException) as err:
        a.delete_records([beyond])[beyond].result(timeout=10)
    assert err.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    # OFFSET_END (-1): everything up to the high watermark.
    to_end = TopicPartition("t", 0, -1)
    assert a.delete_records([to_end])[to_end].result(timeout=10).low_watermark == 10

    cluster = a.describe_cluster(include_authorized_operations=True).result(timeout=10)
    assert cluster.cluster_id == "kgc-cluster-0000000000"
    assert cluster.controller is not None and cluster.controller.id == 0
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, "127.0.0.1", kgc.port)]
    # Asked through Metadata v10 by librdkafka: every cluster operation without an authorizer.
    assert {op.name for op in cluster.authorized_operations} >= {"DESCRIBE", "ALTER", "CREATE"}


# ---------------------------------------------------------------- kafka-python


def test_kafka_python_admin_calls(kgc: KgcProcess) -> None:
    a = KafkaAdminClient(bootstrap_servers=kgc.bootstrap, request_timeout_ms=10_000)
    try:
        a.create_topics([KNewTopic("k", 1, 1)])
        a.create_partitions({"k": 4})
        assert len(a.describe_topics(["k"])[0]["partitions"]) == 4
        with pytest.raises(InvalidPartitionsError):
            a.create_partitions({"k": 2})

        p = KafkaProducer(bootstrap_servers=kgc.bootstrap)
        for i in range(6):
            p.send("k", f"r{i}".encode(), partition=1)
        p.flush(10)
        p.close()
        got = a.delete_records({KTopicPartition("k", 1): 5})
        assert got[KTopicPartition("k", 1)]["low_watermark"] == 5
        with pytest.raises(OffsetOutOfRangeError):
            a.delete_records({KTopicPartition("k", 1): 7})

        cluster = a.describe_cluster()
        assert cluster["cluster_id"] == "kgc-cluster-0000000000"
        assert cluster["controller_id"] == 0
        assert [(b["broker_id"], b["port"], b["is_fenced"]) for b in cluster["brokers"]] == [
            (0, kgc.port, False)
        ]

        (broker,) = a.describe_log_dirs()
        (log_dir,) = broker["log_dirs"]
        assert log_dir["log_dir"] == str(kgc.data_dir.absolute())
        assert log_dir["error_code"] == 0
        sizes = {
            (t["name"], p["partition_index"]): p["partition_size"]
            for t in log_dir["topics"]
            for p in t["partitions"]
        }
        assert {k for k in sizes if k[0] == "k"} == {("k", i) for i in range(4)}
        assert sizes[("k", 1)] > 0 and sizes[("k", 0)] == 0
        assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    finally:
        a.close()


# ---------------------------------------------------------------- what follows


def consumer(kgc: KgcProcess, group: str, **extra: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": kgc.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 500,
            **extra,
        }
    )


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_picks_up_new_partitions(kgc: KgcProcess, protocol: str) -> None:
    """Classic: the leader's client sees the count grow in Metadata and rejoins; KIP-848:
    kgc computes a new target assignment when the catalog grows."""
    a = AdminClient({"bootstrap.servers": kgc.bootstrap})
    grow = f"grow-{protocol}"
    create_topic(a, grow, 1)
    extra: dict[str, Any] = {"group.protocol": protocol}
    if protocol == "classic":
        extra["session.timeout.ms"] = 6000
    c = consumer(kgc, f"g-{protocol}", **extra)
    try:
        c.subscribe([grow])
        seen: set[tuple[int, bytes]] = set()

        def consumed(partition: int) -> bool:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                seen.add((m.partition(), m.value()))
            return any(p == partition for p, _ in seen)

        produce(kgc, grow, 0, 1)
        wait_until("the record of partition 0", lambda: consumed(0))
        a.create_partitions([NewPartitions(grow, 3)])[grow].result(timeout=10)
        produce(kgc, grow, 2, 1, prefix="new")
        wait_until("the record of the new partition 2", lambda: consumed(2))
        assert {tp.partition for tp in c.assignment()} == {0, 1, 2}
        assert (2, b"new0") in seen
    finally:
        c.close()


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_a_consumer_behind_the_new_log_start_resets(kgc: KgcProcess, reset: str) -> None:
    a = AdminClient({"bootstrap.servers": kgc.bootstrap})
    r = f"r-{reset}"
    create_topic(a, r, 1)
    produce(kgc, r, 0, 10)
    group = f"behind-{reset}"
    c = consumer(kgc, group)
    c.commit(offsets=[TopicPartition(r, 0, 3)], asynchronous=False)  # positioned at 3
    c.close()
    tp = TopicPartition(r, 0, 7)
    assert a.delete_records([tp])[tp].result(timeout=10).low_watermark == 7

    c = consumer(kgc, group, **{"auto.offset.reset": reset})
    try:
        c.subscribe([r])
        offsets: list[int] = []

        def got_one() -> bool:
            if reset == "latest":
                produce(kgc, r, 0, 1, prefix="late")  # the reset point moves with the end
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                offsets.append(m.offset())
            return bool(offsets)

        wait_until("a record after the reset", got_one)
        # Fetching at 3 was OFFSET_OUT_OF_RANGE: earliest resumes at the new log start,
        # latest at the end; nothing deleted is ever delivered.
        if reset == "earliest":
            assert offsets[0] == 7
        else:
            assert offsets[0] >= 10
    finally:
        c.close()


def test_growth_and_deletion_survive_a_sigkill(kgc: KgcProcess) -> None:
    a = AdminClient({"bootstrap.servers": kgc.bootstrap})
    create_topic(a, "d", 2)
    a.create_partitions([NewPartitions("d", 5)])["d"].result(timeout=10)
    produce(kgc, "d", 4, 6)
    tp = TopicPartition("d", 4, 4)
    assert a.delete_records([tp])[tp].result(timeout=10).low_watermark == 4
    kgc.kill()
    kgc.start()
    a = AdminClient({"bootstrap.servers": kgc.bootstrap})
    assert partitions_of(a, "d") == 5
    assert earliest(a, "d", 4) == 4
    c = consumer(kgc, "after-restart")
    try:
        c.assign([TopicPartition("d", 4, 0)])  # below the start: reset to earliest
        first: list[int] = []

        def got() -> bool:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                first.append(m.offset())
            return bool(first)

        wait_until("a record of partition 4", got)
        assert first[0] == 4
    finally:
        c.close()


# ---------------------------------------------------------------- cluster mode


@pytest.mark.postgres
def test_cluster_create_partitions_describe_cluster_delete_records(
    tmp_path: Path, pg_server: Any, pg_url: str
) -> None:
    """Two nodes on one PostgreSQL: a topic grown through node 1 is served by the cluster
    (node 2's Metadata gives every new partition a leader), DescribeCluster lists both nodes
    (and, after one stops, that one as fenced); DeleteRecords raises the lease's log start in
    the database, so the node that takes the partition over starts there too."""
    with Cluster(tmp_path, pg_url, nodes=2, offsets_partitions=4) as c:
        c.start_all()
        one = AdminClient({"bootstrap.servers": c.nodes[1].bootstrap})
        create_topic(one, "ct", 2)
        one.create_partitions([NewPartitions("ct", 4)])["ct"].result(timeout=20)
        wait_until(
            "every partition of ct has a leader, seen from node 2",
            lambda: (
                sorted(c.leaders("ct", via=2)) == [0, 1, 2, 3]
                and -1 not in c.leaders("ct", via=2).values()
            ),
        )
        assert pg_server.psql("kgc", "SELECT partitions FROM kgc_topic WHERE name = 'ct'") == "4\n"
        with pytest.raises(KafkaException) as err:
            one.create_partitions([NewPartitions("ct", 3)])["ct"].result(timeout=20)
        assert err.value.args[0].code() == KafkaError.INVALID_PARTITIONS

        p = Producer({"bootstrap.servers": c.bootstrap})
        for i in range(6):
            p.produce("ct", f"c{i}".encode(), partition=3)
        assert p.flush(20) == 0
        # (Under load a lease may be between renewals for a moment: Metadata then gives no
        # leader, -1; wait for one.)
        seen: list[int] = []
        wait_until(
            "partition 3 of ct has a leader",
            lambda: seen.append(c.leader_of("ct", 3)) or seen[-1] in (1, 2),
        )
        leader = seen[-1]
        tp = TopicPartition("ct", 3, 4)
        both = AdminClient({"bootstrap.servers": c.bootstrap})
        assert both.delete_records([tp])[tp].result(timeout=20).low_watermark == 4
        row = "SELECT log_start_offset FROM kgc_partition WHERE topic = 'ct' AND partition = 3"
        assert pg_server.psql("kgc", row) == "4\n"  # durable before the answer

        k = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=20_000)
        try:
            described = k.describe_cluster()  # DescribeCluster v2, include_fenced_brokers
            assert described["controller_id"] == 1
            assert [(b["broker_id"], b["is_fenced"]) for b in described["brokers"]] == [
                (1, False),
                (2, False),
            ]
        finally:
            k.close()
        cluster = both.describe_cluster().result(timeout=20)
        assert sorted(n.id for n in cluster.nodes) == [1, 2]

        survivor = 2 if leader == 1 else 1
        c.stop(leader)  # a graceful hand-off: the survivor takes partition 3 over
        wait_until(
            "the survivor leads ct-3", lambda: c.leader_of("ct", 3, via=survivor) == survivor
        )
        alone = AdminClient({"bootstrap.servers": c.nodes[survivor].bootstrap})
        assert earliest(alone, "ct", 3) == 4
        k = KafkaAdminClient(
            bootstrap_servers=c.nodes[survivor].bootstrap, request_timeout_ms=20_000
        )
        try:
            described = k.describe_cluster()
            assert [(b["broker_id"], b["is_fenced"]) for b in described["brokers"]] == sorted(
                [(survivor, False), (leader, True)]
            )
            assert described["controller_id"] == survivor
        finally:
            k.close()
