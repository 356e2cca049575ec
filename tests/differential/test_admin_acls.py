"""ACLs and SCRAM credentials, Kafka vs kgc: CreateAcls, DescribeAcls, DeleteAcls,
DescribeUserScramCredentials and AlterUserScramCredentials.

Both servers run an authorizer (Kafka's StandardAuthorizer; kgc's setting of the same name,
docs/security.md) with the plaintext listener's principal, User:ANONYMOUS, as super
user: the module starts a reference broker of its own for it, so the session's shared broker
keeps running without ACLs. Every ACL and user is named with the run's token.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.diffkit import Side, run_both
from support.kafkaserver import KafkaServer, running_broker
from support.kgc_process import KgcProcess

from protocol.messages import (
    alter_user_scram_credentials as alter_scram,
)
from protocol.messages import (
    create_acls,
    delete_acls,
    describe_acls,
    describe_cluster,
    metadata,
)
from protocol.messages import (
    describe_user_scram_credentials as describe_scram,
)

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SUPER = "User:ANONYMOUS"
CREATE_ACLS, DESCRIBE_ACLS, DELETE_ACLS = 30, 29, 31
DESCRIBE_SCRAM, ALTER_SCRAM, METADATA, DESCRIBE_CLUSTER = 50, 51, 3, 60
# Resource types, pattern types, operations, permissions (Kafka's AclBinding codes).
ANY, TOPIC, GROUP, CLUSTER, TXN_ID, USER = 1, 2, 3, 4, 5, 7
MATCH, LITERAL, PREFIXED = 2, 3, 4
ALL, READ, WRITE, CREATE, DESCRIBE, ALTER = 2, 3, 4, 5, 8, 7
DENY, ALLOW = 2, 3
SHA256, SHA512 = 1, 2


@pytest.fixture(scope="module")
def acl_kafka() -> Iterator[KafkaServer]:
    overrides = {"authorizer.class.name": AUTHORIZER, "super.users": SUPER}
    with running_broker("kgc-kafka-acl-", overrides=overrides) as server:
        yield server


@pytest.fixture
def acl_kgc(tmp_path: Path) -> Iterator[KgcProcess]:
    proc = KgcProcess(
        tmp_path / "data", "--authorizer-class-name", AUTHORIZER, "--super-users", SUPER
    )
    proc.start()
    yield proc
    if proc.alive():
        proc.stop()


def _acl(
    rtype: int,
    name: str,
    principal: str,
    operation: int,
    permission: int = ALLOW,
    pattern: int = LITERAL,
    host: str = "*",
) -> create_acls.AclCreation:
    return create_acls.AclCreation(
        resource_type=rtype,
        resource_name=name,
        resource_pattern_type=pattern,
        principal=principal,
        host=host,
        operation=operation,
        permission_type=permission,
    )


def _filter(
    rtype: int = ANY,
    name: str | None = None,
    pattern: int = ANY,
    principal: str | None = None,
    operation: int = ANY,
    permission: int = ANY,
    host: str | None = None,
) -> dict[str, Any]:
    return {
        "resource_type_filter": rtype,
        "resource_name_filter": name,
        "pattern_type_filter": pattern,
        "principal_filter": principal,
        "host_filter": host,
        "operation": operation,
        "permission_type": permission,
    }


def _sorted_resources(resp: Any) -> Any:
    """DescribeAcls lists resources and their ACLs in the authorizer's map order."""
    if getattr(resp, "resources", None):
        for r in resp.resources:
            r.acls.sort(key=lambda a: (a.principal, a.host, a.operation, a.permission_type))
        resp.resources.sort(key=lambda r: (r.resource_type, r.resource_name, r.pattern_type))
    return resp


def _sorted_matches(resp: Any) -> Any:
    for fr in getattr(resp, "filter_results", []):
        fr.matching_acls.sort(
            key=lambda a: (
                a.resource_type,
                a.resource_name,
                a.pattern_type,
                a.principal,
                a.operation,
            )
        )
    return resp


def _settle_acls(side: Side, expected: dict[str, int]) -> None:
    """Wait until DescribeAcls shows ``expected`` ACL entries per principal: Kafka's
    authorizer learns a committed change from its metadata log a moment later."""
    deadline = time.monotonic() + side.timeout
    while time.monotonic() < deadline:
        seen = {}
        for principal in expected:
            _, resp = side.untimed().request(
                DESCRIBE_ACLS,
                describe_acls.DescribeAclsRequest(**_filter(principal=principal)),
                version=3,
            )
            seen[principal] = sum(len(r.acls) for r in resp.resources)
        if seen == expected:
            return
        time.sleep(0.05)
    raise AssertionError(f"{side.label}: the ACLs never became {expected}")


def acls_scenario(side: Side) -> None:
    topic, group = side.name("acl-topic"), side.name("acl-group")
    alice, bob = f"User:{side.name('alice')}", f"User:{side.name('bob')}"
    side.call(
        CREATE_ACLS,
        3,
        create_acls.CreateAclsRequest(
            creations=[
                _acl(TOPIC, topic, alice, READ),
                _acl(TOPIC, topic, alice, DESCRIBE),
                _acl(TOPIC, topic + "-", bob, WRITE, DENY, PREFIXED),
                _acl(GROUP, group, alice, ALL),
                _acl(TOPIC, topic, bob, READ, host="10.0.0.1"),
            ]
        ),
        step="create_acls.valid",
    )
    for label, creation in (
        ("principal_without_type", _acl(TOPIC, topic, side.name("carol"), READ)),
        ("empty_resource_name", _acl(TOPIC, "", alice, READ)),
        ("cluster_wrong_name", _acl(CLUSTER, "not-the-cluster", alice, ALTER)),
        ("operation_not_for_group", _acl(GROUP, group, alice, WRITE)),
        ("unknown_resource_type", _acl(42, topic, alice, READ)),
        ("unknown_operation", _acl(TOPIC, topic, alice, 99)),
        ("empty_host", _acl(TOPIC, topic, alice, READ, host="")),
    ):
        side.call(
            CREATE_ACLS,
            3,
            create_acls.CreateAclsRequest(creations=[creation]),
            step=f"create_acls.{label}",
        )
    _settle_acls(side, {alice: 4, bob: 2})  # the valid five and GROUP WRITE
    for label, f in (
        ("topic_literal", _filter(TOPIC, topic, LITERAL)),
        ("topic_match", _filter(TOPIC, topic + "-x", MATCH)),
        ("prefixed", _filter(TOPIC, topic + "-", PREFIXED)),
        ("by_principal", _filter(principal=alice)),
        ("by_host", _filter(principal=bob, host="10.0.0.1")),
        ("group_any_pattern", _filter(GROUP, group)),
        ("nothing", _filter(TOPIC, side.name("acl-none"), LITERAL)),
        ("bad_pattern_filter", _filter(TOPIC, topic, 9)),
    ):
        for v in (1, 3) if label == "topic_literal" else (3,):
            resp = side.call(
                DESCRIBE_ACLS,
                v,
                describe_acls.DescribeAclsRequest(**f),
                step=f"describe_acls.{label}.v{v}",
            )
            _sorted_resources(resp)
    resp = side.call(
        DELETE_ACLS,
        3,
        delete_acls.DeleteAclsRequest(
            filters=[
                delete_acls.DeleteAclsFilter(**_filter(TOPIC, topic, LITERAL, alice)),
                delete_acls.DeleteAclsFilter(**_filter(TOPIC, side.name("acl-none"), LITERAL)),
                delete_acls.DeleteAclsFilter(**_filter(principal=bob)),
            ]
        ),
        step="delete_acls.three_filters",
    )
    _sorted_matches(resp)
    _settle_acls(side, {alice: 2, bob: 0})
    resp = side.call(
        DESCRIBE_ACLS,
        3,
        describe_acls.DescribeAclsRequest(**_filter(principal=alice)),
        step="describe_acls.after_delete",
    )
    _sorted_resources(resp)
    resp = side.call(
        DELETE_ACLS,
        3,
        delete_acls.DeleteAclsRequest(
            filters=[delete_acls.DeleteAclsFilter(**_filter(principal=alice))]
        ),
        step="delete_acls.the_rest",
    )
    _sorted_matches(resp)
    # The super user's authorized operations.
    side.create_topic(topic, 1)
    side.call(
        METADATA,
        12,
        metadata.MetadataRequest(
            topics=[metadata.MetadataRequestTopic(name=topic)],
            include_topic_authorized_operations=True,
        ),
        step="metadata.super_user_topic_ops",
    )
    side.call(
        DESCRIBE_CLUSTER,
        1,
        describe_cluster.DescribeClusterRequest(include_cluster_authorized_operations=True),
        step="describe_cluster.super_user_ops",
    )


def acl_creations_naming_any(side: Side) -> None:
    """Creations naming ANY or MATCH where a concrete value is needed (argued in
    known_differences.toml), apart so that no other step shares their entries."""
    topic, alice = side.name("acl-any"), f"User:{side.name('alice')}"
    for label, creation in (
        ("resource_type_any", _acl(ANY, topic, alice, READ)),
        ("operation_any", _acl(TOPIC, topic, alice, ANY)),
        ("permission_any", _acl(TOPIC, topic, alice, READ, ANY)),
        ("pattern_match", _acl(TOPIC, topic, alice, READ, pattern=MATCH)),
        ("pattern_any", _acl(TOPIC, topic, alice, READ, pattern=ANY)),
    ):
        side.call(
            CREATE_ACLS,
            3,
            create_acls.CreateAclsRequest(creations=[creation]),
            step=f"create_acls.{label}",
        )


def _upsert(
    name: str, mechanism: int = SHA256, iterations: int = 8192
) -> alter_scram.ScramCredentialUpsertion:
    salt = hashlib.sha256(name.encode()).digest()
    salted = hashlib.pbkdf2_hmac("sha256", b"secret", salt, 4096)
    return alter_scram.ScramCredentialUpsertion(
        name=name, mechanism=mechanism, iterations=iterations, salt=salt, salted_password=salted
    )


def scram_scenario(side: Side) -> None:
    alice, bob = side.name("alice"), side.name("bob")

    def alter(label: str, upsertions: list[Any] = (), deletions: list[Any] = ()) -> None:  # type: ignore[assignment]
        resp = side.call(
            ALTER_SCRAM,
            0,
            alter_scram.AlterUserScramCredentialsRequest(
                upsertions=list(upsertions), deletions=list(deletions)
            ),
            step=f"alter_scram.{label}",
        )
        resp.results.sort(key=lambda r: r.user)

    def describe(label: str, users: list[str]) -> None:
        resp = side.call(
            DESCRIBE_SCRAM,
            0,
            describe_scram.DescribeUserScramCredentialsRequest(
                users=[describe_scram.UserName(name=u) for u in users]
            ),
            step=f"describe_scram.{label}",
        )
        resp.results.sort(key=lambda r: r.user)
        for r in resp.results:
            r.credential_infos.sort(key=lambda c: c.mechanism)

    def settle(expected: dict[str, set[int]]) -> None:
        """Wait until DescribeUserScramCredentials shows ``expected`` (user -> mechanisms):
        Kafka's broker learns a committed change from its metadata log a moment later."""
        deadline = time.monotonic() + side.timeout
        req = describe_scram.DescribeUserScramCredentialsRequest(
            users=[describe_scram.UserName(name=u) for u in expected]
        )
        while time.monotonic() < deadline:
            _, resp = side.untimed().request(DESCRIBE_SCRAM, req, version=0)
            seen = {r.user: {c.mechanism for c in r.credential_infos} for r in resp.results}
            if seen == expected:
                return
            time.sleep(0.05)
        raise AssertionError(f"{side.label}: SCRAM credentials never became {expected}")

    alter("upsert", [_upsert(alice), _upsert(bob, SHA512)])
    settle({alice: {SHA256}, bob: {SHA512}})
    alter("upsert_second_mechanism", [_upsert(alice, SHA512, 4096)])
    settle({alice: {SHA256, SHA512}, bob: {SHA512}})
    describe("both", [alice, bob])
    describe("unknown_and_known", [side.name("nobody"), alice])
    describe("duplicate", [alice, alice])
    alter("iterations_too_low", [_upsert(side.name("low"), iterations=4095)])
    alter("iterations_too_high", [_upsert(side.name("high"), iterations=16385)])
    alter("unknown_mechanism", [_upsert(side.name("mech"), mechanism=9)])
    alter("empty_user", [_upsert("")])
    alter("same_user_twice", [_upsert(bob), _upsert(bob, SHA512)])
    alter(
        "upsert_and_delete_same",
        [_upsert(bob)],
        [alter_scram.ScramCredentialDeletion(name=bob, mechanism=SHA256)],
    )
    alter(
        "delete_missing",
        deletions=[alter_scram.ScramCredentialDeletion(name=side.name("nobody"), mechanism=SHA256)],
    )
    alter(
        "delete_one_mechanism",
        deletions=[alter_scram.ScramCredentialDeletion(name=alice, mechanism=SHA512)],
    )
    settle({alice: {SHA256}, bob: {SHA512}})
    describe("after_delete", [alice, bob])
    alter(
        "delete_rest",
        deletions=[
            alter_scram.ScramCredentialDeletion(name=alice, mechanism=SHA256),
            alter_scram.ScramCredentialDeletion(name=bob, mechanism=SHA512),
        ],
    )
    settle({alice: set(), bob: set()})
    describe("after_delete_rest", [alice, bob])


def test_acls_and_scram_credentials(acl_kafka: KafkaServer, acl_kgc: KgcProcess) -> None:
    outcome = run_both(acls_scenario, acl_kafka.bootstrap, acl_kgc.bootstrap)
    assert [r.error_code for r in outcome.kafka.exchanges[0].response.results] == [0] * 5
    run_both(acl_creations_naming_any, acl_kafka.bootstrap, acl_kgc.bootstrap)
    run_both(scram_scenario, acl_kafka.bootstrap, acl_kgc.bootstrap)
