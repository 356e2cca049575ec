"""The local ACL store: acls.json in the data directory, durable, and refusing to guess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from coordinator.security.acl_store import (
    ACL_FILE,
    AclStoreUnreadableError,
    LocalAclStore,
)

READ_ORDERS = AclBinding(
    ResourceType.TOPIC,
    "orders",
    PatternType.LITERAL,
    "User:alice",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)
GROUP_PREFIX = AclBinding(
    ResourceType.GROUP,
    "team-",
    PatternType.PREFIXED,
    "User:alice",
    "10.0.0.1",
    AclOperation.ALL,
    AclPermissionType.ALLOW,
)
DENY_BOB = AclBinding(
    ResourceType.TOPIC,
    "orders",
    PatternType.LITERAL,
    "User:bob",
    "*",
    AclOperation.WRITE,
    AclPermissionType.DENY,
)


async def test_local_store_persists_and_reloads(tmp_path: Path) -> None:
    store = LocalAclStore(tmp_path)
    seen: list[frozenset[AclBinding]] = []
    store.on_change.append(seen.append)
    await store.create([READ_ORDERS, GROUP_PREFIX, DENY_BOB])
    await store.create([READ_ORDERS])  # already there: no change, no callback
    assert seen == [{READ_ORDERS, GROUP_PREFIX, DENY_BOB}]
    assert LocalAclStore(tmp_path).bindings == {READ_ORDERS, GROUP_PREFIX, DENY_BOB}
    # The file is readable by people: names, not codes.
    doc = json.loads((tmp_path / ACL_FILE).read_text())
    group = next(e for e in doc["acls"] if e["name"] == "team-")
    assert {"resourceType": "GROUP", "patternType": "PREFIXED", "operation": "ALL"}.items() <= (
        group.items()
    )
    assert not list(tmp_path.glob("*.tmp"))


async def test_local_store_delete_matches_every_filter_against_the_same_set(
    tmp_path: Path,
) -> None:
    store = LocalAclStore(tmp_path)
    await store.create([READ_ORDERS, GROUP_PREFIX, DENY_BOB])
    result = await store.delete(
        [
            AclBindingFilter(ResourceType.TOPIC, "orders", PatternType.LITERAL),
            AclBindingFilter(principal="User:bob"),  # also matched by the first filter
            AclBindingFilter(resource_type=ResourceType.CLUSTER),
        ]
    )
    assert [set(r) for r in result] == [{READ_ORDERS, DENY_BOB}, {DENY_BOB}, set()]
    assert store.bindings == {GROUP_PREFIX}
    assert LocalAclStore(tmp_path).bindings == {GROUP_PREFIX}


def test_local_store_refuses_an_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / ACL_FILE).write_text("{not json")
    with pytest.raises(AclStoreUnreadableError, match="refusing to start"):
        LocalAclStore(tmp_path)
    (tmp_path / ACL_FILE).write_text(json.dumps({"version": 1, "acls": [{"name": "x"}]}))
    with pytest.raises(AclStoreUnreadableError):
        LocalAclStore(tmp_path)


def test_local_store_without_a_file_is_empty(tmp_path: Path) -> None:
    assert LocalAclStore(tmp_path / "new").bindings == frozenset()
