"""The ACL API handlers in process: Kafka's validation, cluster authorization, per-filter
results, and the authorizer following every change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.apis.acls import AclAdmin
from coordinator.security import ANONYMOUS, KafkaPrincipal
from coordinator.security.acl import (
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
)
from coordinator.security.acl_store import LocalAclStore
from coordinator.server.handler import CLOSE_CONNECTION, ClientInfo, Deferred
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import create_acls, delete_acls, describe_acls

ROOT = KafkaPrincipal("User", "root")


def client(principal: KafkaPrincipal = ROOT) -> ClientInfo:
    return ClientInfo("test", "127.0.0.1", 50000, 1, principal=principal)


def header(api_key: int) -> RequestHeader:
    return RequestHeader(api_key, 3, 1, "test")


async def answer(result: Any) -> Any:
    return await result if isinstance(result, Deferred) else result


def creation(**kw: Any) -> create_acls.AclCreation:
    base: dict[str, Any] = {
        "resource_type": ResourceType.TOPIC,
        "resource_name": "orders",
        "resource_pattern_type": PatternType.LITERAL,
        "principal": "User:alice",
        "host": "*",
        "operation": AclOperation.READ,
        "permission_type": AclPermissionType.ALLOW,
    }
    base.update(kw)
    return create_acls.AclCreation(**base)


def describe_all(**kw: Any) -> describe_acls.DescribeAclsRequest:
    base: dict[str, Any] = {
        "resource_type_filter": ResourceType.ANY,
        "resource_name_filter": None,
        "pattern_type_filter": PatternType.ANY,
        "principal_filter": None,
        "host_filter": None,
        "operation": AclOperation.ANY,
        "permission_type": AclPermissionType.ANY,
    }
    base.update(kw)
    return describe_acls.Request(**base)


def admin(tmp_path: Path) -> tuple[AclAdmin, Authorizer]:
    store = LocalAclStore(tmp_path)
    authorizer = Authorizer(store.bindings, super_users={"User:root"})
    store.on_change.append(authorizer.update)
    return AclAdmin(store, authorizer), authorizer


async def test_create_validates_each_binding_and_stores_the_valid_ones(tmp_path: Path) -> None:
    acls, authorizer = admin(tmp_path)
    req = create_acls.Request(
        creations=[
            creation(),
            creation(resource_type=ResourceType.CLUSTER, resource_name="other"),
            creation(resource_name=""),
            creation(resource_type=ResourceType.ANY),
            creation(resource_pattern_type=PatternType.MATCH),
            creation(operation=AclOperation.ANY),
            creation(permission_type=AclPermissionType.ANY),
            creation(principal="alice"),
            creation(host=""),
            creation(resource_type=ResourceType.GROUP, resource_name="g", principal="User:*"),
        ]
    )
    resp = await answer(acls.create_acls(header(create_acls.API_KEY), req, client()))
    assert [(r.error_code, r.error_message) for r in resp.results] == [
        (0, ""),
        (
            ErrorCode.INVALID_REQUEST,
            "The only valid name for the CLUSTER resource is kafka-cluster",
        ),
        (ErrorCode.INVALID_REQUEST, "Invalid empty resource name"),
        (ErrorCode.INVALID_REQUEST, "Invalid resourceType ANY"),
        (ErrorCode.INVALID_REQUEST, "Invalid patternType MATCH"),
        (ErrorCode.INVALID_REQUEST, "Invalid operation ANY"),
        (ErrorCode.INVALID_REQUEST, "Invalid permissionType ANY"),
        (
            ErrorCode.INVALID_REQUEST,
            # Kafka 4.4's AclControlManager messages.
            "Could not parse principal from `alice` (no colon is present separating the "
            "principal type from the principal name)",
        ),
        (ErrorCode.INVALID_REQUEST, "Host pattern cannot be null or empty"),
        (0, ""),
    ]
    # The authorizer follows the store at once.
    alice = KafkaPrincipal("User", "alice")
    assert authorizer.authorize(alice, "1.2.3.4", AclOperation.READ, ResourceType.TOPIC, "orders")
    assert authorizer.authorize(ANONYMOUS, "1.2.3.4", AclOperation.READ, ResourceType.GROUP, "g")
    assert len(LocalAclStore(tmp_path).bindings) == 2


async def test_unknown_codes_close_the_connection_as_kafka_parse_failures_do(
    tmp_path: Path,
) -> None:
    # Kafka 4.4 refuses to parse a request naming UNKNOWN (code 0) outright.
    acls, _ = admin(tmp_path)
    for bad in (creation(resource_type=0), creation(operation=0), creation(permission_type=0)):
        req = create_acls.Request(creations=[creation(), bad])
        assert acls.create_acls(header(create_acls.API_KEY), req, client()) is CLOSE_CONNECTION
    assert (
        acls.describe_acls(
            header(describe_acls.API_KEY), describe_all(pattern_type_filter=0), client()
        )
        is CLOSE_CONNECTION
    )
    assert LocalAclStore(tmp_path).bindings == frozenset()


async def test_codes_outside_the_enums_are_answered_as_kafka_4_4_does(tmp_path: Path) -> None:
    # A code no enum has reads as UNKNOWN without failing the parse: CreateAcls refuses that
    # creation, DescribeAcls matches nothing, DeleteAcls refuses that filter.
    acls, _ = admin(tmp_path)
    req = create_acls.Request(
        creations=[
            creation(),
            creation(resource_type=42),
            creation(resource_pattern_type=9),
            creation(operation=99),
            creation(permission_type=9),
        ]
    )
    resp = await answer(acls.create_acls(header(create_acls.API_KEY), req, client()))
    assert [(r.error_code, r.error_message) for r in resp.results] == [
        (0, ""),
        (ErrorCode.INVALID_REQUEST, "Invalid resourceType UNKNOWN"),
        (ErrorCode.INVALID_REQUEST, "Invalid patternType UNKNOWN"),
        (ErrorCode.INVALID_REQUEST, "Invalid operation UNKNOWN"),
        (ErrorCode.INVALID_REQUEST, "Invalid permissionType UNKNOWN"),
    ]
    for bad in ({"resource_type_filter": 42}, {"operation": 99}):
        described = await answer(
            acls.describe_acls(header(describe_acls.API_KEY), describe_all(**bad), client())
        )
        assert (described.error_code, described.error_message, described.resources) == (0, "", [])
    filters = [
        delete_acls.DeleteAclsFilter(
            resource_type_filter=bad.get("resource_type_filter", ResourceType.ANY),
            resource_name_filter=None,
            pattern_type_filter=bad.get("pattern_type_filter", PatternType.ANY),
            principal_filter=None,
            host_filter=None,
            operation=bad.get("operation", AclOperation.ANY),
            permission_type=bad.get("permission_type", AclPermissionType.ANY),
        )
        for bad in (
            {"resource_type_filter": 42},
            {"pattern_type_filter": 9},
            {"operation": 99},
            {"permission_type": 9},
        )
    ]
    deleted = await answer(
        acls.delete_acls(
            header(delete_acls.API_KEY), delete_acls.Request(filters=filters), client()
        )
    )
    assert [(r.error_code, r.error_message) for r in deleted.filter_results] == [
        (ErrorCode.INVALID_REQUEST, "Unknown patternFilter."),
        (ErrorCode.INVALID_REQUEST, "Unknown patternFilter."),
        (ErrorCode.INVALID_REQUEST, "Unknown entryFilter."),
        (ErrorCode.INVALID_REQUEST, "Unknown entryFilter."),
    ]
    assert len(LocalAclStore(tmp_path).bindings) == 1


async def test_describe_success_has_an_empty_message_as_kafka_4_4(tmp_path: Path) -> None:
    acls, _ = admin(tmp_path)
    resp = await answer(acls.describe_acls(header(describe_acls.API_KEY), describe_all(), client()))
    assert (resp.error_code, resp.error_message) == (0, "")


async def test_cluster_authorization_is_checked_first(tmp_path: Path) -> None:
    acls, _ = admin(tmp_path)
    alice = client(KafkaPrincipal("User", "alice"))
    req = create_acls.Request(creations=[creation(), creation(resource_name="x")])
    resp = await answer(acls.create_acls(header(create_acls.API_KEY), req, alice))
    assert [r.error_code for r in resp.results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 2
    resp = acls.describe_acls(header(describe_acls.API_KEY), describe_all(), alice)
    assert resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and resp.resources == []
    # Grant alice ALTER on the cluster (which implies DESCRIBE): now she may.
    grant = create_acls.Request(
        creations=[
            creation(
                resource_type=ResourceType.CLUSTER,
                resource_name="kafka-cluster",
                operation=AclOperation.ALTER,
            )
        ]
    )
    await answer(acls.create_acls(header(create_acls.API_KEY), grant, client()))
    resp = acls.describe_acls(header(describe_acls.API_KEY), describe_all(), alice)
    assert resp.error_code == 0
    assert [(r.resource_type, r.resource_name) for r in resp.resources] == [
        (ResourceType.CLUSTER, "kafka-cluster")
    ]


async def test_describe_groups_by_pattern_and_delete_reports_per_filter(tmp_path: Path) -> None:
    acls, authorizer = admin(tmp_path)
    req = create_acls.Request(
        creations=[
            creation(),
            creation(operation=AclOperation.WRITE),
            creation(resource_pattern_type=PatternType.PREFIXED, resource_name="ord"),
        ]
    )
    await answer(acls.create_acls(header(create_acls.API_KEY), req, client()))
    resp = acls.describe_acls(header(describe_acls.API_KEY), describe_all(), client())
    assert [(r.resource_name, r.pattern_type, len(r.acls)) for r in resp.resources] == [
        ("ord", PatternType.PREFIXED, 1),
        ("orders", PatternType.LITERAL, 2),
    ]

    def flt(**kw: Any) -> delete_acls.DeleteAclsFilter:
        base = describe_all(**kw)
        return delete_acls.DeleteAclsFilter(
            resource_type_filter=base.resource_type_filter,
            resource_name_filter=base.resource_name_filter,
            pattern_type_filter=base.pattern_type_filter,
            principal_filter=base.principal_filter,
            host_filter=base.host_filter,
            operation=base.operation,
            permission_type=base.permission_type,
        )

    req_d = delete_acls.Request(
        filters=[
            flt(
                resource_name_filter="orders",
                pattern_type_filter=PatternType.MATCH,
                operation=AclOperation.READ,
            ),
            flt(principal_filter="User:nobody"),
        ]
    )
    resp_d = await answer(acls.delete_acls(header(delete_acls.API_KEY), req_d, client()))
    first, second = resp_d.filter_results
    assert first.error_code == 0 and second.error_code == 0 and second.matching_acls == []
    assert sorted((m.resource_name, m.operation) for m in first.matching_acls) == [
        ("ord", AclOperation.READ),
        ("orders", AclOperation.READ),
    ]
    alice = KafkaPrincipal("User", "alice")
    assert not authorizer.authorize(alice, "h", AclOperation.READ, ResourceType.TOPIC, "orders")
    assert authorizer.authorize(alice, "h", AclOperation.WRITE, ResourceType.TOPIC, "orders")


async def test_without_an_authorizer_every_answer_is_security_disabled() -> None:
    acls = AclAdmin(None, None)
    resp = await answer(
        acls.create_acls(
            header(create_acls.API_KEY), create_acls.Request(creations=[creation()]), client()
        )
    )
    assert [(r.error_code, r.error_message) for r in resp.results] == [
        (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    ]
    resp = acls.describe_acls(header(describe_acls.API_KEY), describe_all(), client())
    assert resp.error_code == ErrorCode.SECURITY_DISABLED
