"""ACLs through real admin clients against a real ``kgc serve``; durable across SIGKILL.

confluent-kafka's AdminClient creates, describes (with Kafka's filters: ANY, MATCH) and
deletes ACLs; kgc's own ``kgc acls`` does the same with kafka-acls.sh's options. The ACLs
must come back identical after the process is SIGKILLed and restarted. Without an
authorizer the ACL APIs answer SECURITY_DISABLED, as Kafka's do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from support.clikit import Run, call_cli, run_cli
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import describe_acls

pytestmark = pytest.mark.integration

AUTHORIZER = (
    "--authorizer-class-name",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    # Plaintext connections are User:ANONYMOUS: a super user, so the admin calls are
    # allowed once the APIs enforce CLUSTER ALTER/DESCRIBE.
    "--super-users",
    "User:ANONYMOUS",
)

READ_ORDERS = AclBinding(
    ResourceType.TOPIC,
    "orders",
    ResourcePatternType.LITERAL,
    "User:alice",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)
PREFIX_ORD = AclBinding(
    ResourceType.TOPIC,
    "ord",
    ResourcePatternType.PREFIXED,
    "User:bob",
    "10.0.0.1",
    AclOperation.WRITE,
    AclPermissionType.ALLOW,
)
DENY_GROUP = AclBinding(
    ResourceType.GROUP,
    "payments",
    ResourcePatternType.LITERAL,
    "User:*",
    "*",
    AclOperation.ALL,
    AclPermissionType.DENY,
)
CLUSTER_ALTER = AclBinding(
    ResourceType.BROKER,
    "kafka-cluster",
    ResourcePatternType.LITERAL,
    "User:admin",
    "*",
    AclOperation.ALTER,
    AclPermissionType.ALLOW,
)
EVERYTHING = AclBindingFilter(
    ResourceType.ANY,
    None,
    ResourcePatternType.ANY,
    None,
    None,
    AclOperation.ANY,
    AclPermissionType.ANY,
)

Key = tuple[str, str, str, str, str, str, str]


def key(b: AclBinding) -> Key:
    return (
        b.restype.name,
        b.name,
        b.resource_pattern_type.name,
        b.principal,
        b.host,
        b.operation.name,
        b.permission_type.name,
    )


def described(a: AdminClient, flt: AclBindingFilter = EVERYTHING) -> set[Key]:
    return {key(b) for b in a.describe_acls(flt).result(timeout=10)}


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path / "data", *AUTHORIZER)
    proc.start()
    yield proc
    if proc.alive():
        proc.stop()


def test_admin_client_acls_survive_a_sigkill(secured: KgcProcess) -> None:
    a = AdminClient({"bootstrap.servers": secured.bootstrap})
    futures = a.create_acls([READ_ORDERS, PREFIX_ORD, DENY_GROUP, CLUSTER_ALTER])
    for f in futures.values():
        assert f.result(timeout=10) is None
    every = {key(b) for b in (READ_ORDERS, PREFIX_ORD, DENY_GROUP, CLUSTER_ALTER)}
    assert described(a) == every

    # Kafka's filter semantics: MATCH finds what applies to the topic "orders" (the
    # literal and the prefix); ANY with a name only that exact name.
    match = AclBindingFilter(
        ResourceType.TOPIC,
        "orders",
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert described(a, match) == {key(READ_ORDERS), key(PREFIX_ORD)}
    exact = AclBindingFilter(
        ResourceType.ANY,
        "orders",
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert described(a, exact) == {key(READ_ORDERS)}

    # The CLUSTER resource has one name: Kafka answers INVALID_REQUEST for any other.
    bad = AclBinding(
        ResourceType.BROKER,
        "my-cluster",
        ResourcePatternType.LITERAL,
        "User:admin",
        "*",
        AclOperation.ALTER,
        AclPermissionType.ALLOW,
    )
    with pytest.raises(KafkaException) as refused:
        a.create_acls([bad])[bad].result(timeout=10)
    err = refused.value.args[0]
    assert err.code() == KafkaError.INVALID_REQUEST
    assert "kafka-cluster" in err.str()

    secured.kill()
    secured.start()
    a = AdminClient({"bootstrap.servers": secured.bootstrap})
    assert described(a) == every

    deny_filter = AclBindingFilter(
        ResourceType.GROUP,
        None,
        ResourcePatternType.ANY,
        "User:*",
        None,
        AclOperation.ANY,
        AclPermissionType.DENY,
    )
    deleted = a.delete_acls([deny_filter])[deny_filter].result(timeout=10)
    assert {key(b) for b in deleted} == {key(DENY_GROUP)}
    assert described(a) == every - {key(DENY_GROUP)}

    secured.kill()
    secured.start()
    a = AdminClient({"bootstrap.servers": secured.bootstrap})
    assert described(a) == every - {key(DENY_GROUP)}


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(kgc: KgcProcess) -> None:
    a = AdminClient({"bootstrap.servers": kgc.bootstrap})
    with pytest.raises(KafkaException) as refused:
        a.create_acls([READ_ORDERS])[READ_ORDERS].result(timeout=10)
    assert refused.value.args[0].code() == KafkaError.SECURITY_DISABLED
    # librdkafka's describe_acls drops DescribeAcls' top-level error (it returns an empty
    # list), so the answer is read on the wire.
    with Connection.to(kgc.bootstrap) as c:
        _, resp = c.request(
            describe_acls.API_KEY,
            describe_acls.Request(
                resource_type_filter=1,
                resource_name_filter=None,
                pattern_type_filter=1,
                principal_filter=None,
                host_filter=None,
                operation=1,
                permission_type=1,
            ),
        )
    assert resp.error_code == ErrorCode.SECURITY_DISABLED
    assert resp.error_message == "No Authorizer is configured on the broker"


def cli(*args: str) -> Run:
    """``kgc acls *args`` in process (support.clikit); the last usage error runs the entry point."""
    return call_cli("acls", *args)


def test_kgc_acls_add_list_remove(secured: KgcProcess) -> None:
    boot = ("--bootstrap-server", secured.bootstrap, "--output", "json")
    added = cli(
        "add",
        *boot,
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--operation",
        "Describe",
        "--topic",
        "orders",
        "--group",
        "billing",
        "--resource-pattern-type",
        "prefixed",
    )
    assert added.code == 0, added.err
    assert len(json.loads(added.out)) == 4

    denied = cli(
        "add", *boot, "--deny-principal", "User:bob", "--deny-host", "10.1.1.1", "--cluster"
    )
    assert denied.code == 0, denied.err

    listed = cli("list", *boot)
    assert listed.code == 0, listed.err
    rows = {
        (
            r["resource_type"],
            r["name"],
            r["pattern_type"],
            r["principal"],
            r["host"],
            r["operation"],
            r["permission"],
        )
        for r in json.loads(listed.out)
    }
    assert rows == {
        ("TOPIC", "orders", "PREFIXED", "User:alice", "*", "Read", "Allow"),
        ("TOPIC", "orders", "PREFIXED", "User:alice", "*", "Describe", "Allow"),
        ("GROUP", "billing", "PREFIXED", "User:alice", "*", "Read", "Allow"),
        ("GROUP", "billing", "PREFIXED", "User:alice", "*", "Describe", "Allow"),
        ("CLUSTER", "kafka-cluster", "LITERAL", "User:bob", "10.1.1.1", "All", "Deny"),
    }
    only_bob = cli("list", *boot, "--principal", "User:bob")
    assert [r["principal"] for r in json.loads(only_bob.out)] == ["User:bob"]
    topic = cli("list", *boot, "--topic", "orders", "--resource-pattern-type", "PREFIXED")
    assert {r["operation"] for r in json.loads(topic.out)} == {"Read", "Describe"}

    # One principal's Describe on the group, then every ACL of the topic.
    one = cli(
        "remove",
        *boot,
        "--force",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Describe",
        "--group",
        "billing",
        "--resource-pattern-type",
        "PREFIXED",
    )
    assert one.code == 0, one.err
    assert [r["operation"] for r in json.loads(one.out)] == ["Describe"]
    whole = cli(
        "remove", *boot, "--force", "--topic", "orders", "--resource-pattern-type", "PREFIXED"
    )
    assert whole.code == 0, whole.err
    assert len(json.loads(whole.out)) == 2
    left = {(r["resource_type"], r["operation"]) for r in json.loads(cli("list", *boot).out)}
    assert left == {("GROUP", "Read"), ("CLUSTER", "All")}

    # Usage errors: one line, exit 2.
    bad = cli("add", *boot, "--allow-principal", "alice", "--topic", "t")
    assert bad.code == 2 and "principalType:principalName" in bad.err
    bad_op = run_cli(
        "acls", "add", *boot, "--allow-principal", "User:a", "--operation", "Read", "--cluster"
    )
    assert bad_op.code == 2 and "only supports operations" in bad_op.err
