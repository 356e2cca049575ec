"""kafka-topics (TopicCommand) and kafka-configs (ConfigCommand) against Kafka and kgc.

A topic's life through kafka-topics (create with configs, list, describe, alter its
partition count, delete), then kafka-configs on topics (describe, alter, delete a config),
on the broker (its dynamic configs, the cluster defaults) and on consumer groups (KIP-848's
per-group session timeout and heartbeat interval). Both tools print fields on a line rather
than in columns; ``fields_table`` and ``config_table`` turn them into tables first, so a
difference is named by its field (``<topic>.ELR``, ``<config>.SYNONYMS``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from support.tools_kit import CONFIGS, TOPICS, Server, ToolRun, compare, run_pair
from support.tools_setup import consume_and_commit, create_topic, produce

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

_KEY = re.compile(r"^[A-Za-z]+:$")
_CONFIG = re.compile(r"^(\S+)=(.*) sensitive=(\S+) synonyms=\{(.*)\}$")


def fields_table(lines: list[str]) -> list[str]:
    """kafka-topics --describe prints 'Key: value' fields on a line: each line becomes a table
    of its own (the keys, then the values; '-' for an empty one), so each field is a cell."""
    out: list[str] = []
    for line in lines:
        tokens = line.split(" ")
        if not _KEY.match(tokens[0]):
            out.append(line)
            continue
        keys: list[str] = []
        values: list[list[str]] = []
        for t in tokens:
            if _KEY.match(t):
                keys.append(t[:-1].upper())
                values.append([])
            else:
                values[-1].append(t)
        out += ["", " ".join(keys), " ".join(" ".join(v) or "-" for v in values), ""]
    return out


def config_table(lines: list[str]) -> list[str]:
    """kafka-configs --describe prints 'name=value sensitive=.. synonyms={..}' lines under an
    '... are:' line: a table for each such line, one row per config (named by it)."""
    out: list[str] = []
    for line in lines:
        m = _CONFIG.match(line)
        if m:
            name, value, sensitive, synonyms = m.groups()
            out.append(f"{name} {value or '-'} {sensitive} {synonyms.replace(' ', '') or '-'}")
        elif line.endswith(" are:"):
            out += ["", line, "CONFIG VALUE SENSITIVE SYNONYMS"]
        elif line:
            out += ["", line]
    return out


def both(
    scenario: str,
    runs: list[ToolRun],
    transform: Callable[[list[str]], list[str]] | None = None,
) -> None:
    compare(scenario, runs, transform=transform)
    compare(scenario, runs, stream="stderr")


def topics(pair: list[Server], *args: str) -> list[ToolRun]:
    return run_pair(TOPICS, ["--bootstrap-server", "{bootstrap}", *args], pair)


def configs(pair: list[Server], *args: str) -> list[ToolRun]:
    return run_pair(CONFIGS, ["--bootstrap-server", "{bootstrap}", *args], pair)


def test_topic_create_list_describe_alter_delete(pair: list[Server]) -> None:
    name = "kt.topics.a"
    # A group has committed on both, so both have __consumer_offsets (Kafka creates it then).
    for s in pair:
        create_topic(s.bootstrap, "kt.topics.used", 1)
        produce(s.bootstrap, "kt.topics.used", 1, 1)
        consume_and_commit(s.bootstrap, "kt.topics.g", "classic", "kt.topics.used", {0: 1})
    both(
        "tools.topics.create",
        topics(
            pair,
            "--create",
            "--topic",
            name,
            "--partitions",
            "2",
            "--config",
            "retention.ms=3600000",
            "--config",
            "cleanup.policy=compact",
        ),
    )
    both("tools.topics.create-exists", topics(pair, "--create", "--topic", name))
    both(
        "tools.topics.create-invalid-config",
        topics(pair, "--create", "--topic", "kt.topics.b", "--config", "retention.ms=soon"),
    )

    def ours(lines: list[str]) -> list[str]:  # --list names every topic of the server
        return [x for x in lines if x.startswith("kt.topics.") or x == "__consumer_offsets"]

    compare("tools.topics.list-all", topics(pair, "--list"), transform=ours)
    both(
        "tools.topics.alter-partitions",
        topics(pair, "--alter", "--topic", name, "--partitions", "4"),
    )
    both(
        "tools.topics.alter-partitions-fewer",
        topics(pair, "--alter", "--topic", name, "--partitions", "3"),
    )
    both("tools.topics.describe", topics(pair, "--describe", "--topic", name), fields_table)
    both("tools.topics.delete", topics(pair, "--delete", "--topic", name))
    both(
        "tools.topics.describe-deleted",
        topics(pair, "--describe", "--topic", name),
        fields_table,
    )


def test_configs_of_topics_brokers_and_groups(pair: list[Server]) -> None:
    topic = "kt.configs.t"
    group = "kt.configs.g"
    for s in pair:
        create_topic(s.bootstrap, topic, 1)
        produce(s.bootstrap, topic, 1, 1)
        consume_and_commit(s.bootstrap, group, "consumer", topic, {0: 1})

    entity = ["--entity-type", "topics", "--entity-name", topic]
    both(
        "tools.configs.topic-alter",
        configs(
            pair, "--alter", *entity, "--add-config", "retention.ms=7200000,segment.bytes=1048576"
        ),
    )
    both("tools.configs.topic-describe", configs(pair, "--describe", *entity), config_table)
    both(
        "tools.configs.topic-alter-invalid",
        configs(pair, "--alter", *entity, "--add-config", "max.message.bytes=-3"),
    )
    both(
        "tools.configs.topic-delete-config",
        configs(pair, "--alter", *entity, "--delete-config", "segment.bytes"),
    )
    both(
        "tools.configs.topic-describe-all",
        configs(pair, "--describe", "--all", *entity),
        config_table,
    )

    broker = ["--entity-type", "brokers"]
    both(
        "tools.configs.broker-describe",
        configs(pair, "--describe", *broker, "--entity-name", "1"),
        config_table,
    )
    both(
        "tools.configs.broker-defaults",
        configs(pair, "--describe", *broker, "--entity-default"),
        config_table,
    )

    # The broker's default value, set and removed again: the shared broker is unchanged.
    both(
        "tools.configs.broker-alter",
        configs(
            pair,
            "--alter",
            *broker,
            "--entity-name",
            "1",
            "--add-config",
            "message.max.bytes=1048588",
        ),
    )
    both(
        "tools.configs.broker-delete-config",
        configs(
            pair, "--alter", *broker, "--entity-name", "1", "--delete-config", "message.max.bytes"
        ),
    )

    entity = ["--entity-type", "groups", "--entity-name", group]
    both(
        "tools.configs.group-alter",
        configs(
            pair,
            "--alter",
            *entity,
            "--add-config",
            "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=6000",
        ),
    )
    both("tools.configs.group-describe", configs(pair, "--describe", *entity), config_table)
    both(
        "tools.configs.group-alter-invalid",
        configs(pair, "--alter", *entity, "--add-config", "consumer.session.timeout.ms=5"),
    )
    both(
        "tools.configs.group-delete-config",
        configs(pair, "--alter", *entity, "--delete-config", "consumer.heartbeat.interval.ms"),
    )
    both(
        "tools.configs.group-describe-all",
        configs(pair, "--describe", "--all", *entity),
        config_table,
    )
    both(
        "tools.configs.group-describe-unknown",
        configs(pair, "--describe", "--entity-type", "groups", "--entity-name", "kt.configs.none"),
        config_table,
    )
