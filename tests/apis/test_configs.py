"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs in process.

Real logs, catalog, data plane and group core (no sockets); every request and answer goes
through the codec at the version named, as the transport sends it. Expected answers are
Kafka 4.x's (ConfigHelper, ConfigAdminManager, ControllerApis, ConfigurationControlManager,
ControllerConfigurationValidator, GroupConfig, RuntimeLoggerManager), messages included.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from coordinator import topic_configs
from coordinator.apis import Parts, authorized, handlers
from coordinator.apis.authorize import ApiAuthorizer
from coordinator.apis.configs import ConfigAdmin, apply_topic_configs
from coordinator.catalog import TopicCatalog, TopicInfo
from coordinator.config import Settings
from coordinator.dataplane import DataPlane
from coordinator.group.shard import GroupShard
from coordinator.group_configs import GROUP_CONFIGS_FILE, LocalGroupConfigs
from coordinator.node.pg_stores import PgGroupConfigs, SharedCatalog
from coordinator.node.reconcile import reconcile
from coordinator.security import KafkaPrincipal
from coordinator.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
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
from protocol.messages import alter_configs, describe_configs, incremental_alter_configs, produce
from protocol.messages import consumer_group_heartbeat as cgh
from protocol.messages import share_group_heartbeat as sgh
from storage.local.durability import Flusher
from storage.local.manager import LogManager
from storage.record_batch import encode_batch

CLIENT = ClientInfo("test", "127.0.0.1", 1, 1)
ALICE = ClientInfo("c", "10.0.0.1", 1, 1, principal=KafkaPrincipal("User", "alice"))
NODE_ID = 3
TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
# ConfigSource
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG, GROUP_CONFIG = 1, 4, 5, 8


class _Runtime:
    """What ConfigAdmin needs of the group runtime: its shard."""

    def __init__(self, shard: GroupShard) -> None:
        self.shard = shard


class Node:
    """One embedded kgc node: catalog, logs, data plane, group core and the config APIs."""

    def __init__(self, data_dir: Path, **settings: Any) -> None:
        self.data_dir = data_dir
        self.settings = Settings(data_dir=data_dir, node_id=NODE_ID, **settings)
        self.flusher = Flusher()
        self.logs = LogManager(data_dir, flusher=self.flusher)
        self.catalog = TopicCatalog(data_dir / "topics.json")
        reconcile(self.catalog, self.logs)
        self.logs.open_all()
        self.dp = DataPlane(self.settings, self.catalog, self.logs, self.flusher)
        self.shard = GroupShard()
        self.shard.mark_all_loaded(0)  # this node coordinates every group
        self.store = LocalGroupConfigs(self.settings, data_dir / GROUP_CONFIGS_FILE)
        self.handlers: dict[int, Any] = {}

    async def start(self, authorizer: Authorizer | None = None) -> Node:
        admin = await ConfigAdmin.start(
            self.settings,
            self.catalog,
            self.dp,
            _Runtime(self.shard),  # type: ignore[arg-type]
            self.store,
            authorizer=authorizer,
        )
        self.handlers = handlers(Parts(configs=admin))
        if authorizer is not None:
            self.handlers = authorized(ApiAuthorizer(authorizer), self.handlers)
        return self

    def create(
        self, name: str, partitions: int = 1, configs: dict[str, str] | None = None
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

    async def describe(
        self,
        rtype: int,
        name: str,
        keys: list[str] | None = None,
        *,
        version: int = 4,
        synonyms: bool = True,
        docs: bool = False,
        client: ClientInfo = CLIENT,
    ) -> Any:
        req = describe_configs.Request(
            resources=[
                describe_configs.DescribeConfigsResource(
                    resource_type=rtype, resource_name=name, configuration_keys=keys
                )
            ],
            include_synonyms=synonyms,
            include_documentation=docs,
        )
        resp = await self.call(describe_configs.API_KEY, version, req, client)
        assert len(resp.results) == 1
        return resp.results[0]

    async def alter(
        self,
        rtype: int,
        name: str,
        configs: dict[str, str | None],
        *,
        version: int = 2,
        validate_only: bool = False,
        client: ClientInfo = CLIENT,
    ) -> tuple[int, str | None]:
        req = alter_configs.Request(
            resources=[
                alter_configs.AlterConfigsResource(
                    resource_type=rtype,
                    resource_name=name,
                    configs=[
                        alter_configs.AlterableConfig(name=k, value=v) for k, v in configs.items()
                    ],
                )
            ],
            validate_only=validate_only,
        )
        resp = await self.call(alter_configs.API_KEY, version, req, client)
        (r,) = resp.responses
        assert (r.resource_type, r.resource_name) == (rtype, name)
        return r.error_code, r.error_message

    async def incremental(
        self,
        rtype: int,
        name: str,
        ops: list[tuple[str, int, str | None]],
        *,
        version: int = 1,
        validate_only: bool = False,
        client: ClientInfo = CLIENT,
    ) -> tuple[int, str | None]:
        req = incremental_alter_configs.Request(
            resources=[
                incremental_alter_configs.AlterConfigsResource(
                    resource_type=rtype,
                    resource_name=name,
                    configs=[
                        incremental_alter_configs.AlterableConfig(
                            name=n, config_operation=op, value=v
                        )
                        for n, op, v in ops
                    ],
                )
            ],
            validate_only=validate_only,
        )
        resp = await self.call(incremental_alter_configs.API_KEY, version, req, client)
        (r,) = resp.responses
        assert (r.resource_type, r.resource_name) == (rtype, name)
        return r.error_code, r.error_message

    def close(self) -> None:
        self.logs.close_all()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = await Node(tmp_path).start()
    yield n
    n.close()


def by_name(result: Any) -> dict[str, Any]:
    return {c.name: c for c in result.configs}


def synonyms(entry: Any) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


# ------------------------------------------------------------------ DescribeConfigs: topics


@pytest.mark.parametrize("version", [1, 2, 3, 4])
async def test_describe_topic_lists_every_kafka_topic_config_in_kafka_order(
    node: Node, version: int
) -> None:
    node.create("t", configs={"retention.ms": "3600000", "cleanup.policy": "compact"})
    result = await node.describe(TOPIC, "t", version=version)
    assert result.error_code == 0
    assert [c.name for c in result.configs] == list(topic_configs.KAFKA_TOPIC_CONFIGS)
    c = by_name(result)
    assert (c["retention.ms"].value, c["retention.ms"].config_source) == (
        "3600000",
        DYNAMIC_TOPIC_CONFIG,
    )
    assert (c["cleanup.policy"].value, c["cleanup.policy"].config_source) == (
        "compact",
        DYNAMIC_TOPIC_CONFIG,
    )
    # Defaults come from the broker's settings; Kafka's types from v3 on.
    assert (c["segment.bytes"].value, c["segment.bytes"].config_source) == (
        "1073741824",
        DEFAULT_CONFIG,
    )
    assert c["min.cleanable.dirty.ratio"].value == "0.5"
    types = {n: c[n].config_type for n in ("segment.bytes", "retention.ms", "cleanup.policy")}
    types["min.cleanable.dirty.ratio"] = c["min.cleanable.dirty.ratio"].config_type
    if version >= 3:
        # INT, LONG, LIST, DOUBLE
        assert types == {
            "segment.bytes": 3,
            "retention.ms": 5,
            "cleanup.policy": 7,
            "min.cleanable.dirty.ratio": 6,
        }
    assert not any(e.is_sensitive for e in result.configs)
    assert not c["retention.ms"].read_only
    assert c["segment.jitter.ms"].read_only  # kgc does not honour it: reported, not settable


async def test_topic_synonyms_follow_kafka_order_and_cut(tmp_path: Path) -> None:
    n = await Node(tmp_path, log_retention_ms=86400000).start()
    try:
        n.create("plain")
        n.create("own", configs={"retention.ms": "1000", "segment.bytes": "2048"})
        plain = by_name(await n.describe(TOPIC, "plain"))
        # Given in the settings: STATIC_BROKER_CONFIG, then Kafka's default of the family's
        # next name (log.retention.hours) after it.
        assert plain["retention.ms"].value == "86400000"
        assert plain["retention.ms"].config_source == STATIC_BROKER_CONFIG
        assert synonyms(plain["retention.ms"]) == [
            ("log.retention.ms", "86400000", STATIC_BROKER_CONFIG),
            ("log.retention.hours", "168", DEFAULT_CONFIG),
        ]
        assert synonyms(plain["segment.bytes"]) == [
            ("log.segment.bytes", "1073741824", DEFAULT_CONFIG)
        ]
        own = by_name(await n.describe(TOPIC, "own"))
        assert synonyms(own["retention.ms"]) == [
            ("retention.ms", "1000", DYNAMIC_TOPIC_CONFIG),
            ("log.retention.ms", "86400000", STATIC_BROKER_CONFIG),
            ("log.retention.hours", "168", DEFAULT_CONFIG),
        ]
        assert synonyms(own["segment.bytes"])[0] == ("segment.bytes", "2048", DYNAMIC_TOPIC_CONFIG)
        # Without include_synonyms: none listed, the source still the first synonym's.
        bare = by_name(await n.describe(TOPIC, "own", synonyms=False))
        assert bare["retention.ms"].synonyms == []
        assert bare["retention.ms"].config_source == DYNAMIC_TOPIC_CONFIG
    finally:
        n.close()


async def test_retention_default_without_settings_has_no_synonyms(node: Node) -> None:
    # Kafka: log.retention.ms has no default, so log.retention.hours' DEFAULT entry is cut.
    node.create("t")
    entry = by_name(await node.describe(TOPIC, "t"))["retention.ms"]
    assert (entry.value, entry.config_source, entry.synonyms) == ("604800000", DEFAULT_CONFIG, [])


async def test_describe_topic_keys_docs_and_errors(node: Node) -> None:
    node.create("t")
    result = await node.describe(TOPIC, "t", ["retention.ms", "nope", "cleanup.policy"], docs=True)
    assert [c.name for c in result.configs] == ["retention.ms", "cleanup.policy"]
    assert all(c.documentation for c in result.configs)
    v2 = await node.describe(TOPIC, "t", ["retention.ms"], version=2, docs=True)
    assert v2.configs[0].documentation in (None, "")  # documentation is v3+
    unknown = await node.describe(TOPIC, "missing")
    assert (unknown.error_code, unknown.configs) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
    bad = await node.describe(TOPIC, "a/b")
    assert bad.error_code == ErrorCode.INVALID_TOPIC
    assert bad.error_message == (
        "Topic name is invalid: 'a/b' contains one or more characters other than "
        "ASCII alphanumerics, '.', '_' and '-'"
    )


async def test_describe_unknown_resource_type_fails_every_resource(node: Node) -> None:
    node.create("t")
    req = describe_configs.Request(
        resources=[
            describe_configs.DescribeConfigsResource(resource_type=TOPIC, resource_name="t"),
            describe_configs.DescribeConfigsResource(resource_type=99, resource_name="x"),
        ]
    )
    resp = await node.call(describe_configs.API_KEY, 4, req)
    assert [r.error_code for r in resp.results] == [ErrorCode.INVALID_REQUEST] * 2


# ------------------------------------------------------------------ DescribeConfigs: broker


async def test_describe_broker_reports_settings_under_kafka_names(tmp_path: Path) -> None:
    n = await Node(
        tmp_path,
        group_min_session_timeout_ms=7000,
        sasl_jaas_config='org.apache.kafka.common.security.plain.PlainLoginModule required user_a="s3cret";',
    ).start()
    try:
        result = await n.describe(BROKER, str(NODE_ID), docs=True)
        assert result.error_code == 0
        c = by_name(result)
        entry = c["group.min.session.timeout.ms"]
        assert (entry.value, entry.config_source, entry.read_only) == (
            "7000",
            STATIC_BROKER_CONFIG,
            True,
        )
        assert synonyms(entry) == [
            ("group.min.session.timeout.ms", "7000", STATIC_BROKER_CONFIG),
            ("group.min.session.timeout.ms", "6000", DEFAULT_CONFIG),
        ]
        assert entry.documentation
        jaas = c["sasl.jaas.config"]
        assert (jaas.value, jaas.is_sensitive, jaas.config_type) == (None, True, 9)
        assert all(s.value is None for s in jaas.synonyms)
        assert c["node.id"].value == str(NODE_ID)
        assert c["log.retention.ms"].config_source == DEFAULT_CONFIG
        assert c["auto.create.topics.enable"].config_type == 1  # BOOLEAN
        # The cluster-wide dynamic defaults: kgc has none.
        empty = await n.describe(BROKER, "")
        assert (empty.error_code, empty.configs) == (0, [])
        other = await n.describe(BROKER, "7")
        assert (other.error_code, other.error_message) == (
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {NODE_ID} or empty string, but received 7",
        )
        word = await n.describe(BROKER, "x")
        assert word.error_message == "Broker id must be an integer, but it is: x"
    finally:
        n.close()


async def test_broker_configs_cannot_change_dynamically(node: Node) -> None:
    assert await node.alter(BROKER, str(NODE_ID), {"log.retention.ms": "1"}) == (
        ErrorCode.INVALID_REQUEST,
        "Cannot update these configs dynamically: [log.retention.ms]",
    )
    assert await node.incremental(BROKER, "", [("message.max.bytes", SET, "5")]) == (
        ErrorCode.INVALID_REQUEST,
        "Cannot update these configs dynamically: [message.max.bytes]",
    )
    # Deleting a dynamic value that is not there succeeds and changes nothing.
    assert await node.incremental(BROKER, str(NODE_ID), [("log.retention.ms", DELETE, None)]) == (
        0,
        None,
    )
    assert await node.incremental(BROKER, "9", [("log.retention.ms", DELETE, None)]) == (
        ErrorCode.INVALID_REQUEST,
        f"Unexpected broker id, expected {NODE_ID}, but received 9",
    )


# ------------------------------------------------------------------ broker loggers


async def test_broker_logger_describe_and_set(node: Node) -> None:
    logging.getLogger("kgc.config_admin_test").setLevel(logging.INFO)
    result = await node.describe(BROKER_LOGGER, str(NODE_ID))
    levels = {c.name: c.value for c in result.configs}
    assert "root" in levels
    assert levels["kgc.config_admin_test"] == "INFO"
    assert {c.config_source for c in result.configs} == {6}
    assert await node.incremental(
        BROKER_LOGGER, str(NODE_ID), [("kgc.config_admin_test", SET, "DEBUG")]
    ) == (0, None)
    assert logging.getLogger("kgc.config_admin_test").level == logging.DEBUG
    assert await node.incremental(
        BROKER_LOGGER, str(NODE_ID), [("kgc.config_admin_test", SET, "LOUD")]
    ) == (
        ErrorCode.INVALID_CONFIG,
        "Cannot set the log level of kgc.config_admin_test to LOUD as it is not a supported "
        "log level. Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN",
    )
    assert await node.incremental(BROKER_LOGGER, str(NODE_ID), [("root", DELETE, None)]) == (
        ErrorCode.INVALID_REQUEST,
        "Removing the log level of the root logger is not allowed",
    )
    assert await node.incremental(
        BROKER_LOGGER, str(NODE_ID), [("no.such.logger", SET, "INFO")]
    ) == (ErrorCode.INVALID_CONFIG, "Logger no.such.logger does not exist!")
    assert await node.incremental(
        BROKER_LOGGER, str(NODE_ID), [("kgc.config_admin_test", DELETE, None)]
    ) == (0, None)
    assert logging.getLogger("kgc.config_admin_test").level == logging.NOTSET
    # AlterConfigs (the legacy API) knows no BROKER_LOGGER resource.
    assert await node.alter(BROKER_LOGGER, str(NODE_ID), {"root": "INFO"}) == (
        ErrorCode.INVALID_REQUEST,
        "Unknown resource type 8",
    )


# ------------------------------------------------------------------ AlterConfigs on topics


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_alter_configs_replaces_the_whole_set_durably(tmp_path: Path, version: int) -> None:
    n = await Node(tmp_path).start()
    n.create("t", configs={"retention.ms": "1000", "cleanup.policy": "compact"})
    assert await n.alter(TOPIC, "t", {"retention.bytes": "5000"}, version=version) == (0, None)
    assert n.catalog.get("t").configs == {"retention.bytes": "5000"}  # type: ignore[union-attr]
    n.close()
    # A restart reads the change back from topics.json.
    again = await Node(tmp_path).start()
    try:
        assert again.catalog.get("t").configs == {"retention.bytes": "5000"}  # type: ignore[union-attr]
        c = by_name(await again.describe(TOPIC, "t"))
        assert (c["retention.bytes"].value, c["retention.bytes"].config_source) == (
            "5000",
            DYNAMIC_TOPIC_CONFIG,
        )
        assert c["cleanup.policy"].value == "delete"
    finally:
        again.close()


@pytest.mark.parametrize(
    ("configs", "code", "message"),
    [
        (
            {"retention.ms": "abc"},
            ErrorCode.INVALID_CONFIG,
            "Invalid value abc for configuration retention.ms: Not a number of type LONG",
        ),
        (
            {"retention.mss": "1"},
            ErrorCode.INVALID_CONFIG,
            "Unknown topic config name: retention.mss",
        ),
        (
            {"cleanup.policy": "compact,shred"},
            ErrorCode.INVALID_CONFIG,
            "Invalid value shred for configuration cleanup.policy: String must be one of: compact, delete",
        ),
        (
            {"segment.jitter.ms": "10"},
            ErrorCode.INVALID_CONFIG,
            "Topic config segment.jitter.ms is not supported by kgc",
        ),
        (
            {"retention.ms": None},
            ErrorCode.INVALID_REQUEST,
            "Null value not supported for : retention.ms",
        ),
    ],
)
async def test_invalid_alter_stores_nothing(
    node: Node, configs: dict[str, str | None], code: int, message: str
) -> None:
    node.create("t", configs={"retention.ms": "1000"})
    saved = (node.data_dir / "topics.json").read_bytes()
    assert await node.alter(TOPIC, "t", configs) == (code, message)
    ops = [(k, SET, v) for k, v in configs.items()]
    assert await node.incremental(TOPIC, "t", ops) == (code, message)
    assert node.catalog.get("t").configs == {"retention.ms": "1000"}  # type: ignore[union-attr]
    assert (node.data_dir / "topics.json").read_bytes() == saved


async def test_alter_unknown_topic_validate_only_and_duplicates(node: Node) -> None:
    assert await node.alter(TOPIC, "missing", {"retention.ms": "1"}) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        "The topic 'missing' does not exist.",
    )
    # Validation comes before the existence check, as in the controller.
    assert (await node.alter(TOPIC, "missing", {"retention.ms": "x"}))[
        0
    ] == ErrorCode.INVALID_CONFIG
    assert await node.alter(TOPIC, "", {"retention.ms": "1"}) == (
        ErrorCode.INVALID_REQUEST,
        "Default topic resources are not allowed.",
    )
    node.create("t")
    assert await node.alter(TOPIC, "t", {"retention.ms": "1"}, validate_only=True) == (0, None)
    assert node.catalog.get("t").configs == {}  # type: ignore[union-attr]
    req = alter_configs.Request(
        resources=[
            alter_configs.AlterConfigsResource(resource_type=TOPIC, resource_name="t"),
            alter_configs.AlterConfigsResource(resource_type=TOPIC, resource_name="t"),
        ]
    )
    resp = await node.call(alter_configs.API_KEY, 2, req)
    assert [(r.error_code, r.error_message) for r in resp.responses] == [
        (ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
    ] * 2
    assert await node.incremental(
        TOPIC, "t", [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)]
    ) == (ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")


# ------------------------------------------------------------------ IncrementalAlterConfigs


async def test_incremental_set_delete_append_subtract(node: Node) -> None:
    node.create("t", configs={"retention.ms": "1000"})
    assert await node.incremental(
        TOPIC, "t", [("cleanup.policy", APPEND, "compact"), ("segment.bytes", SET, "4096")]
    ) == (0, None)
    assert node.catalog.get("t").configs == {  # type: ignore[union-attr]
        "retention.ms": "1000",
        "cleanup.policy": "delete,compact",  # the default, then the appended item
        "segment.bytes": "4096",
    }
    assert await node.incremental(
        TOPIC, "t", [("cleanup.policy", SUBTRACT, "delete"), ("retention.ms", DELETE, None)]
    ) == (0, None)
    assert node.catalog.get("t").configs == {  # type: ignore[union-attr]
        "cleanup.policy": "compact",
        "segment.bytes": "4096",
    }
    assert await node.incremental(TOPIC, "t", [("retention.ms", APPEND, "5")]) == (
        ErrorCode.INVALID_CONFIG,
        "Can't APPEND to key retention.ms because its type is not LIST.",
    )
    # Deleting a name no topic config has changes nothing and succeeds, as in Kafka.
    assert await node.incremental(TOPIC, "t", [("no.such", DELETE, None)]) == (0, None)


async def test_changes_reach_the_open_logs(node: Node) -> None:
    node.create("t", partitions=2)
    plogs = [node.logs.get("t", p) for p in range(2)]
    assert all(p is not None and p.config.delete and not p.config.compact for p in plogs)
    assert await node.incremental(
        TOPIC,
        "t",
        [
            ("cleanup.policy", SET, "compact"),
            ("segment.ms", SET, "60000"),
            ("max.message.bytes", SET, "2000"),
            ("message.timestamp.type", SET, "LogAppendTime"),
        ],
    ) == (0, None)
    for plog in plogs:
        assert plog is not None
        assert plog.config.compact and not plog.config.delete
        assert (plog.config.segment_ms, plog.config.max_message_bytes) == (60000, 2000)
    assert "t" in node.dp.append_time_topics


async def test_lowered_retention_deletes_old_segments(node: Node) -> None:
    node.create("t", configs={"segment.bytes": "1024"})
    old = int(time.time() * 1000) - 3_600_000  # an hour ago: kept under the 7-day default
    for i in range(20):
        req = produce.Request(
            acks=-1,
            timeout_ms=1000,
            topic_data=[
                produce.TopicProduceData(
                    name="t",
                    partition_data=[
                        produce.PartitionProduceData(
                            index=0,
                            records=encode_batch(0, [(None, bytes(200))], timestamp_ms=old + i),
                        )
                    ],
                )
            ],
        )
        res = node.dp.produce(RequestHeader(produce.API_KEY, 9, 1, "p"), req, CLIENT)
        if isinstance(res, Deferred):
            await res
    plog = node.logs.get("t", 0)
    assert plog is not None and len(plog.segments) > 2
    assert node.dp.run_retention() == 0
    assert await node.incremental(TOPIC, "t", [("retention.ms", SET, "60000")]) == (0, None)
    assert node.dp.run_retention() > 0
    assert plog.log_start_offset > 0


# ------------------------------------------------------------------ GROUP configs


async def test_group_configs_validated_stored_and_honoured(tmp_path: Path) -> None:
    n = await Node(tmp_path).start()
    described = await n.describe(GROUP, "g")
    c = by_name(described)
    assert list(c) == [
        "consumer.session.timeout.ms",
        "consumer.heartbeat.interval.ms",
        "streams.session.timeout.ms",
        "streams.heartbeat.interval.ms",
        "streams.num.standby.replicas",
        "streams.initial.rebalance.delay.ms",
        "streams.assignment.interval.ms",
        "streams.task.offset.interval.ms",
        "streams.acceptable.recovery.lag",
        "streams.rack.aware.assignment.tags",
        "share.session.timeout.ms",
        "share.heartbeat.interval.ms",
        "share.record.lock.duration.ms",
        "share.delivery.count.limit",
        "share.partition.max.record.locks",
        "share.auto.offset.reset",
        "share.isolation.level",
        "share.renew.acknowledge.enable",
        "errors.deadletterqueue.topic.name",
        "errors.deadletterqueue.copy.record.enable",
    ]
    assert (
        c["errors.deadletterqueue.topic.name"].value,
        c["errors.deadletterqueue.copy.record.enable"].value,
    ) == ("", "false")
    assert (
        c["consumer.session.timeout.ms"].value,
        c["consumer.session.timeout.ms"].config_source,
    ) == (
        "45000",
        DEFAULT_CONFIG,
    )
    assert await n.incremental(GROUP, "g", [("consumer.session.timeout.ms", SET, "50000")]) == (
        0,
        None,
    )
    assert await n.incremental(GROUP, "g", [("consumer.heartbeat.interval.ms", SET, "6000")]) == (
        0,
        None,
    )
    assert n.shard.consumer.group_configs == {"g": (50000, 6000)}
    c = by_name(await n.describe(GROUP, "g"))
    assert synonyms(c["consumer.session.timeout.ms"]) == [
        ("consumer.session.timeout.ms", "50000", GROUP_CONFIG),
        ("group.consumer.session.timeout.ms", "45000", DEFAULT_CONFIG),
    ]
    # A consumer-protocol member of the group gets the group's interval.
    out = n.shard.consumer_group_heartbeat(
        _ctx(),
        cgh.ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id="m1",
            member_epoch=0,
            rebalance_timeout_ms=30000,
            subscribed_topic_names=["x"],
            topic_partitions=[],
        ),
        1000,
    )
    reply = out.replies[0][1]
    assert reply.heartbeat_interval_ms == 6000
    # ... and the group's session timeout (the broker default is 45000).
    timer = n.shard.consumer.groups["g"].session_timers[reply.member_id]
    assert timer.deadline_ms == 1000 + 50000
    n.close()
    again = await Node(tmp_path).start()  # durable: group_configs.json
    try:
        assert again.shard.consumer.group_configs == {"g": (50000, 6000)}
    finally:
        again.close()


async def test_share_group_configs_reach_the_share_groups(tmp_path: Path) -> None:
    n = await Node(tmp_path).start()
    try:
        ops = [
            ("share.session.timeout.ms", SET, "50000"),
            ("share.heartbeat.interval.ms", SET, "6000"),
            ("share.auto.offset.reset", SET, "by_duration:PT1H"),
            ("share.isolation.level", SET, "read_committed"),
            ("share.record.lock.duration.ms", SET, "20000"),
            ("share.delivery.count.limit", SET, "3"),
            ("errors.deadletterqueue.topic.name", SET, "dlq.sg"),
            ("errors.deadletterqueue.copy.record.enable", SET, "true"),
        ]
        assert await n.incremental(GROUP, "sg", ops) == (0, None)
        assert n.shard.share.group_configs == {"sg": (50000, 6000)}
        c = by_name(await n.describe(GROUP, "sg"))
        assert (c["share.auto.offset.reset"].value, c["share.auto.offset.reset"].config_source) == (
            "by_duration:PT1H",
            GROUP_CONFIG,
        )
        assert synonyms(c["share.auto.offset.reset"]) == [
            ("share.auto.offset.reset", "by_duration:PT1H", GROUP_CONFIG),
            ("share.auto.offset.reset", "latest", DEFAULT_CONFIG),
        ]
        assert synonyms(c["share.session.timeout.ms"])[1] == (
            "group.share.session.timeout.ms",
            "45000",
            DEFAULT_CONFIG,
        )
        # What the share-partition leader reads by name.
        assert n.store.get("sg")["share.delivery.count.limit"] == "3"
        assert n.store.get("sg")["errors.deadletterqueue.topic.name"] == "dlq.sg"
        out = n.shard.share_group_heartbeat(
            _ctx(),
            sgh.ShareGroupHeartbeatRequest(
                group_id="sg", member_id="m1", member_epoch=0, subscribed_topic_names=["x"]
            ),
            1000,
        )
        assert out.replies[0][1].heartbeat_interval_ms == 6000  # type: ignore[attr-defined]
        timer = n.shard.share.groups["sg"].session_timers["m1"]
        assert timer.deadline_ms == 1000 + 50000
    finally:
        n.close()


def _ctx() -> Any:
    from coordinator.group.types import RequestContext

    return RequestContext(1, "client", "/127.0.0.1", 1)


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        (
            [("consumer.session.timeout.ms", SET, "70000")],
            # Kafka 4.4's GroupConfig: the broker's bounds, named.
            "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive.",
        ),
        (
            [("consumer.heartbeat.interval.ms", SET, "1000")],
            "consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive.",
        ),
        ([("consumer.poll.ms", SET, "5")], "Unknown group config name: consumer.poll.ms"),
        (
            [("consumer.session.timeout.ms", SET, "x")],
            "Invalid value x for configuration consumer.session.timeout.ms: Not a number of type INT",
        ),
        (
            [("consumer.session.timeout.ms", APPEND, "1")],
            "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST.",
        ),
        # Share groups: Kafka 4.4's answers, word for word.
        (
            [("share.session.timeout.ms", SET, "70000")],
            "share.session.timeout.ms must be in the range 45000 to 60000 inclusive.",
        ),
        (
            [("share.heartbeat.interval.ms", SET, "1000")],
            "share.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive.",
        ),
        (
            [("share.record.lock.duration.ms", SET, "70000")],
            "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive.",
        ),
        (
            [("share.delivery.count.limit", SET, "1")],
            "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2",
        ),
        (
            [("share.delivery.count.limit", SET, "11")],
            "share.delivery.count.limit must be in the range 2 to 10 inclusive.",
        ),
        (
            [("share.auto.offset.reset", SET, "EARLIEST")],
            "Invalid value EARLIEST for configuration share.auto.offset.reset: Invalid value "
            "`EARLIEST` for configuration share.auto.offset.reset. The value must be either "
            "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
        ),
        (
            [("share.auto.offset.reset", SET, "by_duration:xx")],
            "Invalid value by_duration:xx for configuration share.auto.offset.reset: Invalid "
            "value `by_duration:xx` for configuration share.auto.offset.reset. The value must "
            "be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
        ),
        (
            [("share.isolation.level", SET, "READ_COMMITTED")],
            "Invalid value READ_COMMITTED for configuration share.isolation.level: String must "
            "be one of: read_committed, read_uncommitted",
        ),
        (
            [("share.heartbeat.interval.ms", SET, "often")],
            "Invalid value often for configuration share.heartbeat.interval.ms: Not a number "
            "of type INT",
        ),
        (
            [("share.assignment.interval.ms", SET, "0")],
            "Group config share.assignment.interval.ms is not supported by kgc",
        ),
        (
            [("errors.deadletterqueue.topic.name", SET, "__dlq")],
            "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'",
        ),
        (
            [("errors.deadletterqueue.copy.record.enable", SET, "yes")],
            "Invalid value yes for configuration errors.deadletterqueue.copy.record.enable: "
            "Expected value to be either true or false",
        ),
    ],
)
async def test_invalid_group_configs_store_nothing(
    node: Node, ops: list[tuple[str, int, str | None]], message: str
) -> None:
    assert await node.incremental(GROUP, "g", ops) == (ErrorCode.INVALID_CONFIG, message)
    assert node.store.get("g") == {}
    assert not (node.data_dir / GROUP_CONFIGS_FILE).exists()


async def test_group_session_must_exceed_heartbeat(tmp_path: Path) -> None:
    n = await Node(
        tmp_path,
        group_consumer_min_session_timeout_ms=10000,
        group_consumer_max_heartbeat_interval_ms=20000,
    ).start()
    try:
        assert await n.incremental(
            GROUP,
            "g",
            [
                ("consumer.session.timeout.ms", SET, "12000"),
                ("consumer.heartbeat.interval.ms", SET, "12000"),
            ],
        ) == (
            ErrorCode.INVALID_CONFIG,
            "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms",
        )
        assert await n.incremental(GROUP, "", [("consumer.session.timeout.ms", SET, "45000")]) == (
            ErrorCode.INVALID_REQUEST,
            "Default group resources are not allowed.",
        )
    finally:
        n.close()


# ------------------------------------------------------------------ authorization


def _allow(authorizer: Authorizer, rtype: ResourceType, name: str, op: AclOperation) -> None:
    authorizer.update(
        authorizer.bindings
        | {
            AclBinding(
                rtype, name, PatternType.LITERAL, "User:alice", "*", op, AclPermissionType.ALLOW
            )
        }
    )


async def test_authorization_per_resource(tmp_path: Path) -> None:
    authorizer = Authorizer(frozenset())
    _allow(authorizer, ResourceType.TOPIC, "mine", AclOperation.DESCRIBE_CONFIGS)
    _allow(authorizer, ResourceType.TOPIC, "editable", AclOperation.ALTER_CONFIGS)
    n = await Node(tmp_path).start(authorizer)
    try:
        for t in ("mine", "theirs", "editable"):
            n.create(t)
        req = describe_configs.Request(
            resources=[
                describe_configs.DescribeConfigsResource(
                    resource_type=BROKER, resource_name=str(NODE_ID)
                ),
                describe_configs.DescribeConfigsResource(
                    resource_type=TOPIC, resource_name="theirs"
                ),
                describe_configs.DescribeConfigsResource(resource_type=TOPIC, resource_name="mine"),
                describe_configs.DescribeConfigsResource(resource_type=GROUP, resource_name="g"),
                # ALTER_CONFIGS implies DESCRIBE_CONFIGS
                describe_configs.DescribeConfigsResource(
                    resource_type=TOPIC, resource_name="editable"
                ),
            ]
        )
        resp = await n.call(describe_configs.API_KEY, 4, req, ALICE)
        # The authorized ones first, then the refused, each refused in its resource's code.
        assert [(r.resource_name, r.error_code, r.error_message) for r in resp.results] == [
            ("mine", 0, ""),
            ("editable", 0, ""),
            (str(NODE_ID), ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."),
            ("theirs", ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."),
            ("g", ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."),
        ]
        assert await n.alter(TOPIC, "mine", {"retention.ms": "1"}, client=ALICE) == (
            ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            "Topic authorization failed.",
        )
        assert await n.incremental(
            GROUP, "g", [("consumer.session.timeout.ms", SET, "50000")], client=ALICE
        ) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
        assert await n.incremental(
            BROKER_LOGGER, str(NODE_ID), [("root", SET, "INFO")], client=ALICE
        ) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
        # A broker config that cannot change is refused before authorization, as in Kafka.
        assert (await n.alter(BROKER, "", {"log.retention.ms": "1"}, client=ALICE))[0] == (
            ErrorCode.INVALID_REQUEST
        )
        assert await n.incremental(BROKER, "", [("x", DELETE, None)], client=ALICE) == (
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "Cluster authorization failed.",
        )
        assert await n.alter(TOPIC, "editable", {"retention.ms": "1"}, client=ALICE) == (0, None)
        assert n.catalog.get("theirs").configs == {}  # type: ignore[union-attr]
    finally:
        n.close()


# ------------------------------------------------------------------ cluster mode


@pytest.mark.postgres
async def test_cluster_mode_configs_reach_every_node(tmp_path: Path, pg_url: str) -> None:
    import asyncpg

    from storage.postgres import catalog as pg
    from storage.postgres.schema import migrate

    pool = await asyncpg.create_pool(pg_url, min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
        settings = Settings(data_dir=tmp_path, node_id=NODE_ID, storage_url=pg_url)
        # Two nodes' catalogs and group configs over one database.
        a, b = TopicCatalog(None), TopicCatalog(None)
        shared_a, shared_b = SharedCatalog(a, pool), SharedCatalog(b, pool)
        await shared_a.create("t", 1, {"retention.ms": "1000"})
        await shared_b.refresh()
        seen: list[list[str]] = []
        b.on_configs.append(seen.append)
        store_a, store_b = PgGroupConfigs(settings, pool), PgGroupConfigs(settings, pool)
        await store_a.load()
        flusher = Flusher()
        logs = LogManager(tmp_path, flusher=flusher)
        dp = DataPlane(settings, a, logs, flusher, hosted=False)
        admin = await ConfigAdmin.start(
            settings,
            a,
            dp,
            _Runtime(GroupShard()),
            store_a,
            shared_topics=shared_a,
        )
        header = RequestHeader(incremental_alter_configs.API_KEY, 1, 1, "c")
        req = incremental_alter_configs.Request(
            resources=[
                incremental_alter_configs.AlterConfigsResource(
                    resource_type=TOPIC,
                    resource_name="t",
                    configs=[
                        incremental_alter_configs.AlterableConfig(
                            name="cleanup.policy", config_operation=SET, value="compact"
                        )
                    ],
                ),
                incremental_alter_configs.AlterConfigsResource(
                    resource_type=GROUP,
                    resource_name="g",
                    configs=[
                        incremental_alter_configs.AlterableConfig(
                            name="consumer.session.timeout.ms", config_operation=SET, value="55000"
                        )
                    ],
                ),
            ]
        )
        res = admin.incremental_alter_configs(header, req, CLIENT)
        assert isinstance(res, Deferred)
        resp = await res
        assert [r.error_code for r in resp.responses] == [0, 0]
        rows = {r.name: r for r in await _topics(pool, pg)}
        assert rows["t"].configs == {"retention.ms": "1000", "cleanup.policy": "compact"}
        # The other node: the catalog version moved; its refresh tells the data plane.
        await shared_b.refresh()
        assert b.get("t").configs["cleanup.policy"] == "compact"  # type: ignore[union-attr]
        assert seen == [["t"]]
        await store_b.refresh()
        assert store_b.get("g") == {"consumer.session.timeout.ms": "55000"}
        async with pool.acquire() as conn:
            version = await pg.change_version(conn)
            kinds = [
                r["kind"]
                for r in await conn.fetch("SELECT kind FROM kgc_cluster_change ORDER BY version")
            ]
        assert version >= 3 and kinds[-2:] == ["topic_configs_altered", "group_config"]
        logs.close_all()
    finally:
        await pool.close()


async def _topics(pool: Any, pg: Any) -> list[Any]:
    async with pool.acquire() as conn:
        return list(await pg.list_topics(conn))


def test_apply_topic_configs_skips_offline(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    flusher = Flusher()
    logs = LogManager(tmp_path, flusher=flusher)
    catalog = TopicCatalog(tmp_path / "topics.json")
    dp = DataPlane(settings, catalog, logs, flusher)
    info = TopicInfo("t", bytes(range(16)), 1, {"cleanup.policy": "bogus"}, offline="bad entry")
    apply_topic_configs(dp, info)  # would raise on the invalid configs if it tried
    assert json.dumps(info.configs)
    logs.close_all()


def test_unreadable_group_configs_stop_the_start_with_one_line(tmp_path: Path) -> None:
    from storage.local.manager import DataDirError

    (tmp_path / GROUP_CONFIGS_FILE).write_text("{not json")
    with pytest.raises(DataDirError, match="move it aside"):
        LocalGroupConfigs(Settings(data_dir=tmp_path), tmp_path / GROUP_CONFIGS_FILE)


async def test_group_config_synonyms_name_the_broker_setting_as_kafka_does(node: Node) -> None:
    # Kafka 4.4: a group config's synonym is its broker default (group.<name>); the group's
    # own value comes first once set.
    def synonyms(result: Any) -> dict[str, list[tuple[str, str | None, int]]]:
        return {c.name: [(s.name, s.value, s.source) for s in c.synonyms] for c in result.configs}

    keys = ["consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"]
    fresh = await node.describe(GROUP, "g", keys, synonyms=True)
    assert synonyms(fresh) == {
        "consumer.session.timeout.ms": [("group.consumer.session.timeout.ms", "45000", 5)],
        "consumer.heartbeat.interval.ms": [("group.consumer.heartbeat.interval.ms", "5000", 5)],
    }
    assert await node.incremental(GROUP, "g", [("consumer.session.timeout.ms", SET, "50000")]) == (
        0,
        None,
    )
    own = await node.describe(GROUP, "g", keys[:1], synonyms=True)
    assert synonyms(own) == {
        "consumer.session.timeout.ms": [
            ("consumer.session.timeout.ms", "50000", 8),
            ("group.consumer.session.timeout.ms", "45000", 5),
        ]
    }


async def test_topic_synonyms_of_the_configs_kafka_4_changed_or_added(node: Node) -> None:
    node.create("t4")
    result = await node.describe(TOPIC, "t4", synonyms=True)
    got = {c.name: [(s.name, s.value, s.source) for s in c.synonyms] for c in result.configs}
    assert got["message.timestamp.after.max.ms"] == [
        ("log.message.timestamp.after.max.ms", "3600000", DEFAULT_CONFIG)
    ]
    assert got["remote.copy.lag.ms"] == [("log.remote.copy.lag.ms", "0", DEFAULT_CONFIG)]
    assert got["max.decompressed.message.bytes"] == [
        ("max.decompressed.message.bytes", "2147483639", DEFAULT_CONFIG)
    ]
