"""The local ACL store: acls.json in the data directory, readable, and refusing to guess.

What every ACL store does (persist, reload, delete by filters): test_metadata_contract.py
in tests/storage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.security.acl import (
    AclBinding,
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


async def test_local_store_file_is_readable_by_people(tmp_path: Path) -> None:
    # Persisting, reloading and deleting: tests/storage/test_metadata_contract.py.
    store = LocalAclStore(tmp_path)
    await store.create([READ_ORDERS, GROUP_PREFIX, DENY_BOB])
    # Names, not codes.
    doc = json.loads((tmp_path / ACL_FILE).read_text())
    group = next(e for e in doc["acls"] if e["name"] == "team-")
    assert {"resourceType": "GROUP", "patternType": "PREFIXED", "operation": "ALL"}.items() <= (
        group.items()
    )
    assert not list(tmp_path.glob("*.tmp"))


def test_local_store_refuses_an_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / ACL_FILE).write_text("{not json")
    with pytest.raises(AclStoreUnreadableError, match="refusing to start"):
        LocalAclStore(tmp_path)
    (tmp_path / ACL_FILE).write_text(json.dumps({"version": 1, "acls": [{"name": "x"}]}))
    with pytest.raises(AclStoreUnreadableError):
        LocalAclStore(tmp_path)


def test_local_store_without_a_file_is_empty(tmp_path: Path) -> None:
    assert LocalAclStore(tmp_path / "new").bindings == frozenset()
