"""AdminClient 4.4.0 against kgc: every admin call kgc serves, run as one scenario against kgc
and against the reference Kafka broker, the answers compared modulo ids; ACLs against kgc
with an authorizer."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.diffkit import Difference, load_known  # the differential suite's argued list
from support.javakit import AdminSession, Clients
from support.kafkaserver import KafkaServer
from support.kgc_process import KgcProcess

pytestmark = [pytest.mark.kafka, pytest.mark.integration]


def wait_for_partitions(
    admin: AdminSession, topic: str, count: int, timeout_s: float = 15.0
) -> None:
    """Poll describeTopics until ``topic`` has ``count`` partitions or the time is up (then the
    recorded call that follows shows what the server still answers)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = admin("describeTopics", topics=[topic])
        found = r["result"].get(topic, {}) if r["ok"] else {}
        if len(found.get("partitions", [])) == count:
            return
        time.sleep(0.1)


def scenario(admin: AdminSession, p: str) -> list[tuple[str, Any]]:
    """The calls, each (label, what the call answered); ``p`` prefixes every name."""
    a, b, gone = f"{p}-a", f"{p}-b", f"{p}-missing"
    classic, modern, nobody = f"{p}-classic", f"{p}-848", f"{p}-nobody"
    out: list[tuple[str, Any]] = []

    def call(label: str, op: str, **args: Any) -> Any:
        r = admin(op, **args)
        answer = r["result"] if r["ok"] else {"error": r["error"]}
        out.append((label, answer))
        return answer

    # Topics.
    call(
        "create",
        "createTopics",
        topics=[
            {"name": a, "partitions": 3},
            {
                "name": b,
                "partitions": 2,
                "configs": {"cleanup.policy": "compact", "retention.ms": "3600000"},
            },
            {
                "name": f"{p}-bad-config",
                "partitions": 1,
                "configs": {"cleanup.policy": "sometimes"},
            },
            {"name": f"{p}-bad/name", "partitions": 1},
        ],
    )
    call("create again", "createTopics", topics=[{"name": a, "partitions": 1}])
    call(
        "create validate only",
        "createTopics",
        topics=[{"name": f"{p}-v", "partitions": 4}],
        validate_only=True,
    )
    call("list topics", "listTopics", prefix=p)
    call("describe topics", "describeTopics", topics=[a, b, gone])
    call("grow partitions", "createPartitions", counts={a: 5})
    call("shrink partitions", "createPartitions", counts={b: 1})
    call("grow a missing topic", "createPartitions", counts={gone: 3})
    # Kafka's broker learns of new partitions from the controller's metadata a moment after
    # CreatePartitions answers: wait (unrecorded) until the topic shows them, as a client that
    # just grew a topic would, so the comparison is of the grown topic on both sides.
    wait_for_partitions(admin, a, 5)
    call("describe grown", "describeTopics", topics=[a])

    # Records, offsets, log dirs.
    call("produce 0", "produce", topic=a, partition=0, count=10)
    call("produce 1", "produce", topic=a, partition=1, count=5)
    parts = [[a, 0], [a, 1], [a, 4]]
    call("latest", "listOffsets", partitions=parts, spec="latest")
    call("earliest", "listOffsets", partitions=parts, spec="earliest")
    call("before the epoch", "listOffsets", partitions=parts, spec="timestamp:0")
    call("far future", "listOffsets", partitions=parts, spec="timestamp:99999999999999")
    call("missing partition", "listOffsets", partitions=[[gone, 0]], spec="latest")
    call("delete records", "deleteRecords", records=[[a, 0, 4], [a, 1, 99]])
    call("earliest after delete", "listOffsets", partitions=parts, spec="earliest")
    call("delete records of a compacted topic", "deleteRecords", records=[[b, 0, 0]])
    call("log dirs", "describeLogDirs", topics=[a, b])
    cluster = call("cluster", "describeCluster")
    node = str(cluster["nodes"][0]["id"])

    # Configs: a topic, the broker, a group.
    keys = ["cleanup.policy", "retention.ms", "min.insync.replicas", "max.message.bytes"]
    topic_b = {"type": "topic", "name": b, "keys": keys, "count": True}
    call("topic configs", "describeConfigs", resources=[topic_b])
    call(
        "alter topic configs",
        "incrementalAlterConfigs",
        resources=[
            {
                "type": "topic",
                "name": a,
                "ops": [
                    {"name": "retention.ms", "op": "set", "value": "7200000"},
                    {"name": "cleanup.policy", "op": "append", "value": "compact"},
                ],
            },
            {"type": "topic", "name": b, "ops": [{"name": "retention.ms", "op": "delete"}]},
            {
                "type": "topic",
                "name": gone,
                "ops": [{"name": "retention.ms", "op": "set", "value": "1"}],
            },
            {
                "type": "topic",
                "name": a,
                "ops": [{"name": "no.such.config", "op": "set", "value": "1"}],
            },
        ],
    )
    topic_a = {"type": "topic", "name": a, "keys": keys, "count": True}
    call("topic configs altered", "describeConfigs", resources=[topic_a, topic_b])
    # Settings both servers leave at Kafka's default, and one both are started with.
    broker_keys = ["message.max.bytes", "group.max.size", "group.initial.rebalance.delay.ms"]
    call(
        "broker configs",
        "describeConfigs",
        resources=[{"type": "broker", "name": node, "keys": broker_keys}],
    )
    call(
        "alter a static broker config",
        "incrementalAlterConfigs",
        resources=[
            {
                "type": "broker",
                "name": node,
                "ops": [{"name": "log.dirs", "op": "set", "value": "/x"}],
            }
        ],
    )
    group_keys = ["consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"]
    call(
        "group configs",
        "describeConfigs",
        resources=[{"type": "group", "name": classic, "keys": group_keys}],
    )
    call(
        "alter group configs",
        "incrementalAlterConfigs",
        resources=[
            {
                "type": "group",
                "name": classic,
                "ops": [{"name": "consumer.session.timeout.ms", "op": "set", "value": "50000"}],
            },
            {
                "type": "group",
                "name": modern,
                "ops": [{"name": "consumer.session.timeout.ms", "op": "set", "value": "5"}],
            },
        ],
    )
    call(
        "group configs altered",
        "describeConfigs",
        resources=[{"type": "group", "name": classic, "keys": group_keys}],
    )

    # Groups: a classic member and a consumer-protocol member, alive.
    call("classic member", "consumer", name="c1", group=classic, topics=[a], min_records=11)
    call(
        "consumer-protocol member",
        "consumer",
        name="m1",
        group=modern,
        topics=[b],
        protocol="consumer",
    )
    call("list groups", "listGroups", prefix=p)
    call("list consumer groups", "listGroups", prefix=p, consumer_groups=True)
    call("list classic groups", "listGroups", prefix=p, types=["classic"])
    call("list stable groups", "listGroups", prefix=p, states=["Stable"])
    call("listConsumerGroups", "listConsumerGroups", prefix=p)
    call("describe groups", "describeConsumerGroups", groups=[classic, modern, nobody])
    call("committed", "listConsumerGroupOffsets", group=classic)
    call(
        "alter offsets of a live group",
        "alterConsumerGroupOffsets",
        group=classic,
        offsets=[[a, 0, 5]],
    )
    call("delete a live group", "deleteConsumerGroups", groups=[classic, modern, nobody])
    call("classic member leaves", "closeConsumer", name="c1")
    call("classic group empty", "describeConsumerGroups", groups=[classic], until_state="Empty")
    call(
        "alter offsets",
        "alterConsumerGroupOffsets",
        group=classic,
        offsets=[[a, 0, 5], [a, 1, 1]],
        metadata="m",
    )
    call("committed after alter", "listConsumerGroupOffsets", group=classic)
    call("delete offsets", "deleteConsumerGroupOffsets", group=classic, partitions=[[a, 0], [a, 3]])
    call("committed after delete", "listConsumerGroupOffsets", group=classic)
    call("consumer-protocol member leaves", "closeConsumer", name="m1")
    call(
        "consumer-protocol group empty",
        "describeConsumerGroups",
        groups=[modern],
        until_state="Empty",
    )
    call("delete groups", "deleteConsumerGroups", groups=[classic, modern])
    call("groups after delete", "listGroups", prefix=p)

    # SCRAM users.
    user = f"{p}-user"
    call(
        "add scram users",
        "alterUserScramCredentials",
        alterations=[
            {"user": user, "mechanism": "SCRAM-SHA-256", "iterations": 8192, "password": "pw1"},
            {"user": user, "mechanism": "SCRAM-SHA-512", "iterations": 4096, "password": "pw2"},
            {"user": f"{p}-weak", "mechanism": "SCRAM-SHA-256", "iterations": 10, "password": "pw"},
        ],
    )
    call("describe scram users", "describeUserScramCredentials", users=[user, f"{p}-nobody"])
    call(
        "remove a scram credential",
        "alterUserScramCredentials",
        alterations=[
            {"user": user, "mechanism": "SCRAM-SHA-256", "delete": True},
            {"user": f"{p}-nobody", "mechanism": "SCRAM-SHA-256", "delete": True},
        ],
    )
    call("describe scram users again", "describeUserScramCredentials", users=[user])

    # ACLs without an authorizer configured.
    acl = {"resource_type": "topic", "name": a, "principal": "User:alice", "operation": "read"}
    call("create acls without an authorizer", "createAcls", acls=[acl])
    call("describe acls without an authorizer", "describeAcls", filter={})

    # Topics go.
    call("delete topics", "deleteTopics", topics=[b, gone])
    call("list topics after delete", "listTopics", prefix=p)
    return out


def normalized(answers: list[tuple[str, Any]], p: str, node: int) -> dict[str, Any]:
    """The answers by label, with what differs by nature between two servers taken out: the
    prefix, member ids, the node id and port, record timestamps, the log dirs' sizes."""

    def norm(x: Any, key: str = "") -> Any:
        if isinstance(x, dict):
            return {
                (
                    "NODE"
                    if k == str(node)
                    else k.replace(p, "P").replace(f"broker:{node}", "broker:NODE")
                ): norm(v, k)
                for k, v in x.items()
            }
        if isinstance(x, list):
            return [norm(v, key) for v in x]
        if key == "member_id":
            return "MEMBER"
        if isinstance(x, str):
            return x.replace(p, "P")
        if key in ("coordinator", "controller", "leader", "id", "replicas", "isr") and x == node:
            return "NODE"
        if key == "port":
            return "PORT"
        if key == "size":
            return x > 0
        if key == "timestamp" and x != -1:
            return "TIMESTAMP"
        return x

    return {label: norm(a) for label, a in answers}


def differences(kafka: Any, kgc: Any, path: str = "result") -> Iterator[tuple[str, Any, Any]]:
    """(dotted path, Kafka's value, kgc's value) of every leaf that differs."""
    if isinstance(kafka, dict) and isinstance(kgc, dict):
        for k in list(kafka) + [k for k in kgc if k not in kafka]:
            yield from differences(kafka.get(k, "<absent>"), kgc.get(k, "<absent>"), f"{path}.{k}")
    elif isinstance(kafka, list) and isinstance(kgc, list) and len(kafka) == len(kgc):
        for i, (x, y) in enumerate(zip(kafka, kgc, strict=True)):
            yield from differences(x, y, f"{path}.{i}")
    elif kafka != kgc:
        yield path, kafka, kgc


@pytest.fixture
def admin_pair(
    kgc: KgcProcess, kafka_broker: KafkaServer, clients: Clients
) -> Iterator[tuple[AdminSession, AdminSession]]:
    yield clients.admin_session(kgc.bootstrap), clients.admin_session(kafka_broker.bootstrap)


def test_every_admin_call_answers_as_on_kafka(
    admin_pair: tuple[AdminSession, AdminSession],
) -> None:
    """Each call's answer on kgc equals Kafka's, field by field, apart from the differences
    argued in known_differences.toml (scenario ``java.admin.<call label>``)."""
    on_kgc, on_kafka = admin_pair
    p = f"adm{uuid.uuid4().hex[:6]}"
    got, ref = scenario(on_kgc, p), scenario(on_kafka, p)
    assert [label for label, _ in got] == [label for label, _ in ref]
    got_n = normalized(got, p, dict(got)["cluster"]["nodes"][0]["id"])
    ref_n = normalized(ref, p, dict(ref)["cluster"]["nodes"][0]["id"])
    known = load_known()
    unexplained = []
    for label, answer in ref_n.items():
        for path, kafka, kgc in differences(answer, got_n[label]):
            d = Difference(f"java.admin.{label}", label, path, kafka, kgc)
            if not any(k.matches(d) for k in known):
                unexplained.append(str(d))
    assert not unexplained, "\n".join(unexplained)


@pytest.fixture
def kgc_acls(tmp_path: Path) -> Iterator[KgcProcess]:
    """kgc with Kafka's authorizer; the PLAINTEXT client (User:ANONYMOUS) is a super user."""
    proc = KgcProcess(
        tmp_path / "acl-data",
        "--authorizer-class-name",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "--super-users",
        "User:ANONYMOUS",
    )
    proc.start()
    yield proc
    if proc.alive():
        proc.stop()


def _binding(
    rtype: str, name: str, pattern: str, principal: str, op: str, perm: str
) -> dict[str, str]:
    return {
        "resource_type": rtype,
        "name": name,
        "pattern": pattern,
        "principal": principal,
        "host": "*",
        "operation": op,
        "permission": perm,
    }


def test_acls_are_created_described_by_filter_and_deleted(
    kgc_acls: KgcProcess, clients: Clients
) -> None:
    admin = clients.admin_session(kgc_acls.bootstrap)
    acls = [
        _binding("topic", "events", "literal", "User:alice", "read", "allow"),
        _binding("group", "app-", "prefixed", "User:alice", "read", "allow"),
        _binding("cluster", "kafka-cluster", "literal", "User:bob", "describe", "allow"),
        _binding("topic", "*", "literal", "User:carol", "write", "deny"),
    ]
    assert admin.ok("createAcls", acls=acls) == [{"ok": True}] * 4
    as_kafka = [
        {
            k: v.upper() if k in ("resource_type", "pattern", "operation", "permission") else v
            for k, v in a.items()
        }
        for a in acls
    ]
    everything = sorted(as_kafka, key=lambda b: json.dumps(b, separators=(",", ":")))
    assert (
        sorted(
            admin.ok("describeAcls", filter={}), key=lambda b: json.dumps(b, separators=(",", ":"))
        )
        == everything
    )
    # MATCH: the literal name, the wildcard and any prefix of it.
    matched = admin.ok(
        "describeAcls", filter={"resource_type": "topic", "name": "events", "pattern": "match"}
    )
    assert {(b["name"], b["principal"]) for b in matched} == {
        ("events", "User:alice"),
        ("*", "User:carol"),
    }
    matched = admin.ok(
        "describeAcls", filter={"resource_type": "group", "name": "app-billing", "pattern": "match"}
    )
    assert [(b["name"], b["pattern"]) for b in matched] == [("app-", "PREFIXED")]
    assert len(admin.ok("describeAcls", filter={"principal": "User:alice"})) == 2
    deleted = admin.ok(
        "deleteAcls",
        filters=[
            {"principal": "User:alice", "resource_type": "group"},
            {"resource_type": "topic", "name": "nothing-here"},
        ],
    )
    assert deleted == [{"deleted": [as_kafka[1]]}, {"deleted": []}]
    left = admin.ok("describeAcls", filter={})
    assert sorted(b["principal"] for b in left) == ["User:alice", "User:bob", "User:carol"]
