"""Config admin APIs against a real ``kgc serve`` with the admin clients people use.

confluent-kafka's AdminClient (``describe_configs``, ``alter_configs``,
``incremental_alter_configs``) and kafka-python's KafkaAdminClient (``describe_configs``,
``alter_configs``): topic and broker resources, a change that survives a restart, an
invalid value refused with INVALID_CONFIG and the stored config left as it was, and a
retention change that the data plane applies.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration

NODE_ID = 0


@pytest.fixture
def kgc(tmp_path: Path) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path / "data", "--group-min-session-timeout-ms", "7000")
    proc.start()
    yield proc
    if proc.alive():
        proc.stop()


def result(fs: dict[Any, Future[Any]]) -> Any:
    (f,) = fs.values()
    return f.result(timeout=30)


def create(admin: AdminClient, name: str, configs: dict[str, str] | None = None) -> None:
    result(admin.create_topics([NewTopic(name, 2, 1, config=configs or {})]))


def describe_topic(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    entries: dict[str, ConfigEntry] = result(
        admin.describe_configs([ConfigResource("topic", name)], request_timeout=30)
    )
    return entries


def test_confluent_describe_alter_incremental_and_restart(kgc: KgcProcess) -> None:
    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
    create(admin, "orders", {"retention.ms": "3600000"})

    entries = describe_topic(admin, "orders")
    assert entries["retention.ms"].value == "3600000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["cleanup.policy"].value == "delete"
    assert entries["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["segment.bytes"].value == "1073741824"
    assert "max.message.bytes" in entries and "segment.jitter.ms" in entries

    # IncrementalAlterConfigs: SET one, APPEND to a list.
    incremental = ConfigResource(
        "topic",
        "orders",
        incremental_configs=[
            ConfigEntry("retention.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
        ],
    )
    result(admin.incremental_alter_configs([incremental]))
    entries = describe_topic(admin, "orders")
    assert entries["retention.bytes"].value == "1048576"
    assert entries["cleanup.policy"].value == "delete,compact"
    assert entries["retention.ms"].value == "3600000"  # untouched

    # An invalid value: INVALID_CONFIG, nothing stored.
    bad = ConfigResource(
        "topic",
        "orders",
        incremental_configs=[
            ConfigEntry("retention.ms", "forever", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.bytes", "7", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    with pytest.raises(KafkaException) as err:
        result(admin.incremental_alter_configs([bad]))
    kerr = err.value.args[0]
    assert kerr.code() == KafkaError.INVALID_CONFIG
    assert "Not a number of type LONG" in kerr.str()
    entries = describe_topic(admin, "orders")
    assert (entries["retention.ms"].value, entries["retention.bytes"].value) == (
        "3600000",
        "1048576",
    )

    # AlterConfigs (deprecated, replaces the whole set).
    legacy = ConfigResource("topic", "orders", set_config={"retention.ms": "7200000"})
    result(admin.alter_configs([legacy]))
    entries = describe_topic(admin, "orders")
    assert entries["retention.ms"].value == "7200000"
    assert entries["retention.bytes"].value == "-1"  # the set was replaced
    assert entries["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    # validate_only stores nothing.
    result(
        admin.alter_configs(
            [ConfigResource("topic", "orders", set_config={"retention.ms": "1"})],
            validate_only=True,
        )
    )
    assert describe_topic(admin, "orders")["retention.ms"].value == "7200000"

    # The broker: kgc's settings under Kafka's names, read-only.
    broker = result(admin.describe_configs([ConfigResource("broker", str(NODE_ID))]))
    entry = broker["group.min.session.timeout.ms"]
    assert (entry.value, entry.is_read_only) == ("7000", True)
    assert entry.source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert broker["node.id"].value == str(NODE_ID)
    with pytest.raises(KafkaException) as err:
        result(
            admin.alter_configs(
                [ConfigResource("broker", str(NODE_ID), set_config={"message.max.bytes": "5"})]
            )
        )
    assert err.value.args[0].code() == KafkaError.INVALID_REQUEST

    unknown = ConfigResource("topic", "missing")
    with pytest.raises(KafkaException) as err:
        result(admin.describe_configs([unknown]))
    assert err.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # Durable: a restart (clean stop, then SIGKILL after another change) keeps the configs.
    kgc.stop()
    kgc.start()
    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
    assert describe_topic(admin, "orders")["retention.ms"].value == "7200000"
    result(
        admin.incremental_alter_configs(
            [
                ConfigResource(
                    "topic",
                    "orders",
                    incremental_configs=[
                        ConfigEntry(
                            "min.cleanable.dirty.ratio",
                            "0.25",
                            incremental_operation=AlterConfigOpType.SET,
                        )
                    ],
                )
            ]
        )
    )
    kgc.kill()
    kgc.start()
    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
    entries = describe_topic(admin, "orders")
    assert (entries["retention.ms"].value, entries["min.cleanable.dirty.ratio"].value) == (
        "7200000",
        "0.25",
    )


def test_kafka_python_describe_and_alter(kgc: KgcProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kgc.bootstrap, request_timeout_ms=30000)
    try:
        confluent = AdminClient({"bootstrap.servers": kgc.bootstrap})
        create(confluent, "events")
        topic = KpConfigResource(ConfigResourceType.TOPIC, "events")
        described = admin.describe_configs([topic], config_filter="all")
        configs = described["topic"]["events"]
        assert configs["retention.ms"]["value"] == "604800000"
        assert configs["retention.ms"]["config_source"] == "DEFAULT_CONFIG"
        # Only the modified ones by default: none yet.
        assert admin.describe_configs([topic])["topic"]["events"] == {}

        out = admin.alter_configs(
            [
                KpConfigResource(
                    ConfigResourceType.TOPIC, "events", configs={"retention.ms": "60000"}
                )
            ]
        )
        assert out["topic"]["events"] == "OK"
        modified = admin.describe_configs([topic], include_synonyms=True)["topic"]["events"]
        assert set(modified) == {"retention.ms"}
        assert modified["retention.ms"]["value"] == "60000"
        assert modified["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"

        # Forced legacy AlterConfigs, and an invalid value that stores nothing.
        out = admin.alter_configs(
            [KpConfigResource(ConfigResourceType.TOPIC, "events", configs={"segment.ms": "0"})],
            incremental=False,
        )
        assert (
            "InvalidConfig" in out["topic"]["events"] or "INVALID_CONFIG" in out["topic"]["events"]
        )
        assert "Value must be at least 1" in out["topic"]["events"]
        after = admin.describe_configs([topic])["topic"]["events"]
        assert set(after) == {"retention.ms"} and after["retention.ms"]["value"] == "60000"

        broker = admin.describe_configs(
            [KpConfigResource(ConfigResourceType.BROKER, str(NODE_ID))], config_filter="all"
        )["broker"][str(NODE_ID)]
        assert broker["group.min.session.timeout.ms"]["value"] == "7000"
        assert broker["group.min.session.timeout.ms"]["read_only"] is True

        # A consumer group's own configs (KIP-848 GROUP resource).
        group = KpConfigResource(
            ConfigResourceType.GROUP, "g1", configs={"consumer.heartbeat.interval.ms": "6000"}
        )
        assert admin.alter_configs([group])["group"]["g1"] == "OK"
        got = admin.describe_configs([KpConfigResource(ConfigResourceType.GROUP, "g1")])
        assert got["group"]["g1"]["consumer.heartbeat.interval.ms"]["value"] == "6000"
        bad = KpConfigResource(
            ConfigResourceType.GROUP, "g1", configs={"consumer.session.timeout.ms": "99999999"}
        )
        # Kafka 4.4's message names the broker's bounds.
        assert (
            "must be in the range 45000 to 60000 inclusive"
            in (admin.alter_configs([bad])["group"]["g1"])
        )
    finally:
        admin.close()


@pytest.fixture
def retention_kgc(tmp_path: Path) -> Iterator[KgcProcess]:
    """kgc with a retention pass every 200 ms (log.retention.check.interval.ms; 30 s by
    default), so the next pass after a change is soon."""
    proc = KgcProcess(tmp_path / "data", "--log-retention-check-interval-ms", "200")
    proc.start()
    yield proc
    if proc.alive():
        proc.stop()


@pytest.mark.slow
def test_retention_change_applies_to_the_log(retention_kgc: KgcProcess) -> None:
    """A lowered retention.ms deletes old segments at the next retention pass."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    kgc = retention_kgc

    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
    result(admin.create_topics([NewTopic("logs", 1, 1, config={"segment.bytes": "1024"})]))
    producer = Producer({"bootstrap.servers": kgc.bootstrap, "linger.ms": 0})
    old = int(time.time() * 1000) - 3_600_000
    for i in range(40):
        producer.produce("logs", value=bytes(200), timestamp=old + i)
        producer.flush(10)

    def earliest() -> int:
        c = Consumer({"bootstrap.servers": kgc.bootstrap, "group.id": "probe"})
        try:
            low, _high = c.get_watermark_offsets(TopicPartition("logs", 0), timeout=10)
            return int(low)
        finally:
            c.close()

    assert earliest() == 0
    result(
        admin.incremental_alter_configs(
            [
                ConfigResource(
                    "topic",
                    "logs",
                    incremental_configs=[
                        ConfigEntry(
                            "retention.ms", "60000", incremental_operation=AlterConfigOpType.SET
                        )
                    ],
                )
            ]
        )
    )
    # The next retention pass (every 200 ms here) moves the log start: well within 10 s,
    # which ends before the first pass at the default interval (30 s after the start).
    deadline = time.monotonic() + 10
    while earliest() == 0:
        assert time.monotonic() < deadline, "retention never applied the new retention.ms"
        time.sleep(0.5)


@pytest.mark.postgres
@pytest.mark.slow  # two nodes on PostgreSQL
def test_cluster_mode_changes_reach_every_node(tmp_path: Path, pg_url: str) -> None:
    """A topic's and a group's configs altered through node 1 are what node 2 describes,
    and survive both nodes' restart (kgc_topic, kgc_group_config)."""
    from support.clusterkit import Cluster
    from support.groupkit import wait_until

    from coordinator.tools.client import Connection
    from protocol.messages import describe_configs

    def describe(node: KgcProcess, rtype: int, name: str) -> dict[str, str | None]:
        req = describe_configs.Request(
            resources=[
                describe_configs.DescribeConfigsResource(resource_type=rtype, resource_name=name)
            ]
        )
        with Connection.to(node.bootstrap) as c:
            _, resp = c.request(describe_configs.API_KEY, req)
        (r,) = resp.results
        assert r.error_code == 0, r
        return {e.name: e.value for e in r.configs}

    with Cluster(tmp_path, pg_url, nodes=2) as cluster:
        cluster.start_all()
        one, two = cluster.nodes[1], cluster.nodes[2]
        admin = AdminClient({"bootstrap.servers": one.bootstrap})
        create(admin, "shared")
        result(
            admin.incremental_alter_configs(
                [
                    ConfigResource(
                        "topic",
                        "shared",
                        incremental_configs=[
                            ConfigEntry(
                                "retention.ms",
                                "120000",
                                incremental_operation=AlterConfigOpType.SET,
                            )
                        ],
                    )
                ]
            )
        )
        kp = KafkaAdminClient(bootstrap_servers=one.bootstrap, request_timeout_ms=30000)
        try:
            group = KpConfigResource(
                ConfigResourceType.GROUP, "cg", configs={"consumer.session.timeout.ms": "50000"}
            )
            assert kp.alter_configs([group])["group"]["cg"] == "OK"
        finally:
            kp.close()
        wait_until(
            lambda: describe(two, 2, "shared")["retention.ms"] == "120000",
            what="node 2 to see the topic's new retention.ms",
        )
        wait_until(
            lambda: describe(two, 32, "cg")["consumer.session.timeout.ms"] == "50000",
            what="node 2 to see the group's config",
        )
        for node in (one, two):
            node.stop()
        for node in (one, two):
            node.start()
        cluster.wait_ready()
        assert describe(two, 2, "shared")["retention.ms"] == "120000"
        assert describe(one, 32, "cg")["consumer.session.timeout.ms"] == "50000"
