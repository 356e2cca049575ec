"""Kafka's ACLs enforced on a real ``kgc serve`` for real clients (SASL/PLAIN principals).

How this works: kgc listens on SASL_PLAINTEXT only, with the StandardAuthorizer, ``admin`` as
super user and no ACL granting anything else (allow.everyone.if.no.acl.found is false).
The admin grants ``alice`` READ on one group and READ on one topic (DESCRIBE is implied),
through confluent-kafka's AdminClient. Alice then consumes with that group; with another
group she gets GROUP_AUTHORIZATION_FAILED, on another topic TOPIC_AUTHORIZATION_FAILED, and
ListGroups shows her only the group she may describe.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from support.kgc_process import KgcProcess, free_port

pytestmark = pytest.mark.integration
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret";'
)


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = KgcProcess(
        tmp_path / "data",
        "--listeners",
        f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "--sasl-enabled-mechanisms",
        "PLAIN",
        "--sasl-jaas-config",
        JAAS,
        "--authorizer-class-name",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "--super-users",
        "User:admin",
        "--group-initial-rebalance-delay-ms",
        "0",
        port=port,
    )
    proc.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        proc.stop()


def conf(bootstrap: str, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


def consume(bootstrap: str, group: str, topic: str, want: int) -> tuple[int, list[int]]:
    """(records read, error codes seen) for alice in ``group`` on ``topic``."""
    c = Consumer({**conf(bootstrap, "alice"), "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, errors = 0, []
    try:
        for _ in range(150):
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                errors.append(msg.error().code())
                if msg.error().code() in (
                    KafkaError.GROUP_AUTHORIZATION_FAILED,
                    KafkaError.TOPIC_AUTHORIZATION_FAILED,
                ):
                    break
                continue
            got += 1
            if got == want:
                break
    finally:
        c.close()
    return got, errors


def test_acls_decide_what_alice_may_do(secured: str) -> None:
    admin = AdminClient(conf(secured, "admin"))
    suffix = uuid.uuid4().hex[:6]
    ok_topic, other_topic = f"ok-{suffix}", f"secret-{suffix}"
    ok_group, other_group = f"g-ok-{suffix}", f"g-no-{suffix}"
    for f in admin.create_topics([NewTopic(ok_topic, 1, 1), NewTopic(other_topic, 1, 1)]).values():
        f.result(10)
    p = Producer(conf(secured, "admin"))
    for i in range(5):
        p.produce(ok_topic, value=b"v%d" % i)
        p.produce(other_topic, value=b"s%d" % i)
    assert p.flush(10) == 0
    grants = [
        AclBinding(
            ResourceType.GROUP, ok_group, ResourcePatternType.LITERAL, "User:alice", "*",
            AclOperation.READ, AclPermissionType.ALLOW,
        ),
        AclBinding(
            ResourceType.TOPIC, ok_topic, ResourcePatternType.LITERAL, "User:alice", "*",
            AclOperation.READ, AclPermissionType.ALLOW,
        ),
    ]  # fmt: skip
    for f in admin.create_acls(grants).values():
        f.result(10)

    got, errors = consume(secured, ok_group, ok_topic, 5)
    assert got == 5, errors
    got, errors = consume(secured, other_group, ok_topic, 5)
    assert got == 0 and KafkaError.GROUP_AUTHORIZATION_FAILED in errors, errors
    got, errors = consume(secured, ok_group, other_topic, 5)
    assert got == 0 and KafkaError.TOPIC_AUTHORIZATION_FAILED in errors, errors

    alice = AdminClient(conf(secured, "alice"))  # kept alive until answered
    listed = alice.list_consumer_groups().result(10)
    assert {g.group_id for g in listed.valid} == {ok_group}, (listed.errors, listed.valid)
    everything = admin.list_consumer_groups().result(10)
    assert {ok_group} <= {g.group_id for g in everything.valid}
