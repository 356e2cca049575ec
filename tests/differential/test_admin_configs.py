"""Configs, Kafka vs kgc: DescribeConfigs, IncrementalAlterConfigs and AlterConfigs for
topics, the broker and groups -- values, sources, synonyms, flags, types and documentation
at the versions that carry them, and the refusals with their messages.

A config list is compared by config name (a name's dots become '_', so a difference's path
names the config in one part). The broker is described by the keys both servers define and
neither test setup sets (the reference broker's server.properties and kgc's test flags set a
few on purpose); its resource name is the node id, which differs, so it is shown as <node>.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from support.diffkit import Runner, Side

from protocol.messages import (
    alter_configs,
    describe_cluster,
    describe_configs,
    incremental_alter_configs,
)

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

DESCRIBE, ALTER, INCREMENTAL = 32, 33, 44
TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

BROKER_KEYS = [
    "message.max.bytes",
    "log.retention.hours",
    "log.segment.bytes",
    "offsets.retention.minutes",
    "group.max.size",
    "group.min.session.timeout.ms",
    "no.such.config",
]
GROUP_KEYS = [
    "consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms",
    "share.session.timeout.ms",
    "share.partition.max.record.locks",
    "share.renew.acknowledge.enable",
]


def _key(name: str) -> str:
    return name.replace(".", "_")


def _keyed(resp: Any, node: int | None = None) -> None:
    """Each result's configs as a dict by name; the broker's resource name as <node>."""
    for r in resp.results:
        if node is not None and r.resource_name == str(node):
            r.resource_name = "<node>"
        if node is not None and r.error_message:
            r.error_message = r.error_message.replace(f"expected {node} ", "expected <node> ")
        r.configs = {
            _key(c.name): {
                "value": c.value,
                "read_only": c.read_only,
                "config_source": c.config_source,
                "is_sensitive": c.is_sensitive,
                "synonyms": [[s.name, s.value, s.source] for s in c.synonyms],
                "config_type": c.config_type,
                "documentation": c.documentation,
            }
            for c in sorted(r.configs, key=lambda c: c.name)
        }


def _describe(
    resource_type: int, name: str, keys: list[str] | None = None, **kw: Any
) -> describe_configs.DescribeConfigsRequest:
    return describe_configs.DescribeConfigsRequest(
        resources=[
            describe_configs.DescribeConfigsResource(
                resource_type=resource_type, resource_name=name, configuration_keys=keys
            )
        ],
        **kw,
    )


def _incremental(
    resource_type: int, name: str, *ops: tuple[str, int, str | None], validate_only: bool = False
) -> incremental_alter_configs.IncrementalAlterConfigsRequest:
    return incremental_alter_configs.IncrementalAlterConfigsRequest(
        resources=[
            incremental_alter_configs.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=name,
                configs=[
                    incremental_alter_configs.AlterableConfig(name=n, config_operation=op, value=v)
                    for n, op, v in ops
                ],
            )
        ],
        validate_only=validate_only,
    )


def _alter(
    resource_type: int, name: str, configs: dict[str, str | None], validate_only: bool = False
) -> alter_configs.AlterConfigsRequest:
    return alter_configs.AlterConfigsRequest(
        resources=[
            alter_configs.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=name,
                configs=[
                    alter_configs.AlterableConfig(name=k, value=v) for k, v in configs.items()
                ],
            )
        ],
        validate_only=validate_only,
    )


def _settle(side: Side, rtype: int, name: str, key: str, value: str) -> None:
    """Wait until DescribeConfigs shows ``key`` = ``value``: Kafka's broker learns a
    committed config change from its metadata log a moment later."""
    deadline = time.monotonic() + side.timeout
    while time.monotonic() < deadline:
        _, resp = side.untimed().request(DESCRIBE, _describe(rtype, name, [key]), version=4)
        if [c.value for r in resp.results for c in r.configs] == [value]:
            return
        time.sleep(0.05)
    raise AssertionError(f"{side.label}: {name}'s {key} never became {value}")


def _node_id(side: Side) -> int:
    _, resp = side.untimed().request(
        describe_cluster.API_KEY, describe_cluster.DescribeClusterRequest(), version=0
    )
    return int(resp.brokers[0].broker_id)


def topic_configs_scenario(side: Side) -> None:
    topic = side.name("cfg")
    side.create_topic(topic, 1, retention_ms="3600000", cleanup_policy="compact,delete")
    for v, extra in (
        (1, {}),
        (2, {"include_synonyms": True}),
        (4, {"include_synonyms": True, "include_documentation": True}),
    ):
        resp = side.call(
            DESCRIBE, v, _describe(TOPIC, topic, None, **extra), step=f"describe.topic.v{v}"
        )
        _keyed(resp)
    resp = side.call(
        DESCRIBE,
        4,
        _describe(TOPIC, topic, ["retention.ms", "segment.bytes", "no.such.config"]),
        step="describe.topic.some_keys",
    )
    _keyed(resp)
    for label, name in (("unknown", side.name("cfg-none")), ("invalid", "bad/name")):
        resp = side.call(DESCRIBE, 4, _describe(TOPIC, name), step=f"describe.topic.{label}")
        _keyed(resp)
    for label, ops in (
        ("set", [("retention.ms", SET, "7200000"), ("segment.bytes", SET, "2097152")]),
        ("delete", [("segment.bytes", DELETE, None)]),
        ("append", [("cleanup.policy", APPEND, "delete")]),
        ("subtract", [("cleanup.policy", SUBTRACT, "compact")]),
        ("append_to_non_list", [("retention.ms", APPEND, "1")]),
        ("bad_value", [("retention.ms", SET, "soon")]),
        ("unknown_name", [("no.such.config", SET, "1")]),
        ("null_set", [("retention.ms", SET, None)]),
        ("same_name_twice", [("retention.ms", SET, "1000"), ("retention.ms", SET, "2000")]),
    ):
        side.call(
            INCREMENTAL, 1, _incremental(TOPIC, topic, *ops), step=f"incremental.topic.{label}"
        )
    side.call(
        INCREMENTAL,
        1,
        _incremental(TOPIC, topic, ("retention.ms", SET, "1"), validate_only=True),
        step="incremental.topic.validate_only",
    )
    side.call(
        INCREMENTAL,
        0,
        _incremental(TOPIC, side.name("cfg-none"), ("retention.ms", SET, "1")),
        step="incremental.topic.unknown",
    )
    _settle(side, TOPIC, topic, "cleanup.policy", "delete")  # the last change applied
    resp = side.call(
        DESCRIBE,
        1,
        _describe(TOPIC, topic, ["retention.ms", "segment.bytes", "cleanup.policy"]),
        step="describe.topic.after_incremental",
    )
    _keyed(resp)
    for label, configs in (
        ("replace", {"retention.ms": "60000", "max.message.bytes": "2000"}),
        ("bad_value", {"max.message.bytes": "big"}),
        ("null_value", {"retention.ms": None}),
    ):
        side.call(ALTER, 2, _alter(TOPIC, topic, configs), step=f"alter.topic.{label}")
    side.call(
        ALTER,
        0,
        _alter(TOPIC, side.name("cfg-none"), {"retention.ms": "1"}),
        step="alter.topic.unknown",
    )
    _settle(side, TOPIC, topic, "max.message.bytes", "2000")
    resp = side.call(
        DESCRIBE,
        1,
        _describe(TOPIC, topic, ["retention.ms", "max.message.bytes", "cleanup.policy"]),
        step="describe.topic.after_alter",
    )
    _keyed(resp)


def topic_config_refusals_answered_otherwise(side: Side) -> None:
    """The topic config changes kgc refuses otherwise than Kafka (each argued in
    known_differences.toml), apart so that no other step shares their entries."""
    topic = side.name("cfg-refused")
    side.create_topic(topic, 1)
    for label, ops in (
        ("below_minimum", [("segment.bytes", SET, "10")]),
        ("bad_operation", [("retention.ms", 9, "1")]),
        ("kgc_does_not_honour", [("preallocate", SET, "true")]),
    ):
        side.call(
            INCREMENTAL, 1, _incremental(TOPIC, topic, *ops), step=f"incremental.topic.{label}"
        )


def broker_config_changes_answered_otherwise(side: Side) -> None:
    """Dynamic broker config changes: kgc has none (validate_only, so the shared reference
    broker keeps its settings)."""
    node = _node_id(side)
    for label, ops in (
        ("unknown", [("no.such.config", SET, "1")]),
        ("bad_value", [("log.retention.ms", SET, "soon")]),
        ("dynamic_in_kafka", [("log.retention.ms", SET, "1000")]),
    ):
        resp = side.call(
            INCREMENTAL,
            1,
            _incremental(BROKER, str(node), *ops, validate_only=True),
            step=f"incremental.broker.{label}",
        )
        for r in resp.responses:
            r.resource_name = "<node>" if r.resource_name == str(node) else r.resource_name


def broker_and_group_configs_scenario(side: Side) -> None:
    node = _node_id(side)
    for v, extra in ((1, {}), (4, {"include_synonyms": True, "include_documentation": True})):
        resp = side.call(
            DESCRIBE,
            v,
            _describe(BROKER, str(node), BROKER_KEYS, **extra),
            step=f"describe.broker.v{v}",
        )
        _keyed(resp, node)
    for label, name in (("other_node", "77"), ("not_a_number", "x"), ("default", "")):
        resp = side.call(
            DESCRIBE,
            4,
            _describe(BROKER, name, ["message.max.bytes"]),
            step=f"describe.broker.{label}",
        )
        _keyed(resp, node)
    for label, ops in (("read_only", [("log.dirs", SET, "/tmp/x")]),):
        resp = side.call(
            INCREMENTAL,
            1,
            _incremental(BROKER, str(node), *ops, validate_only=True),
            step=f"incremental.broker.{label}",
        )
        for r in resp.responses:
            r.resource_name = "<node>" if r.resource_name == str(node) else r.resource_name
    group = side.name("cfg-group")
    for v in (1, 4):
        resp = side.call(
            DESCRIBE,
            v,
            _describe(
                GROUP, group, GROUP_KEYS, include_synonyms=True, include_documentation=v >= 3
            ),
            step=f"describe.group.v{v}",
        )
        _keyed(resp)
    for label, ops in (
        ("set", [("consumer.session.timeout.ms", SET, "50000")]),
        ("below_broker_minimum", [("consumer.session.timeout.ms", SET, "100")]),
        ("bad_value", [("consumer.heartbeat.interval.ms", SET, "often")]),
        ("unknown", [("no.such.config", SET, "1")]),
        ("delete", [("consumer.heartbeat.interval.ms", DELETE, None)]),
        (
            "share_set",
            [
                ("share.partition.max.record.locks", SET, "150"),
                ("share.renew.acknowledge.enable", SET, "false"),
            ],
        ),
        ("share_locks_above_broker_maximum", [("share.partition.max.record.locks", SET, "5000")]),
        ("share_locks_below_minimum", [("share.partition.max.record.locks", SET, "99")]),
        ("share_renew_not_boolean", [("share.renew.acknowledge.enable", SET, "maybe")]),
    ):
        side.call(
            INCREMENTAL, 1, _incremental(GROUP, group, *ops), step=f"incremental.group.{label}"
        )
    _settle(side, GROUP, group, "consumer.session.timeout.ms", "50000")
    resp = side.call(DESCRIBE, 4, _describe(GROUP, group, GROUP_KEYS), step="describe.group.after")
    _keyed(resp)
    side.call(
        ALTER, 2, _alter(GROUP, group, {"consumer.session.timeout.ms": "50000"}), step="alter.group"
    )
    side.call(DESCRIBE, 4, _describe(77, "x"), step="describe.unknown_resource_type")


def test_topic_configs(diff: Runner) -> None:
    outcome = diff(topic_configs_scenario)
    assert outcome.kafka.exchanges[0].response.results[0].error_code == 0


def test_broker_and_group_configs(diff: Runner) -> None:
    diff(topic_config_refusals_answered_otherwise)
    diff(broker_config_changes_answered_otherwise)
    diff(broker_and_group_configs_scenario)
