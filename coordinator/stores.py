"""The metadata stores behind one interface: what the node needs of each, whatever the engine.

How this works: besides its partition logs, a node keeps four kinds of metadata, each in
one of three engines -- local files in the data directory (one process), the same files
shared by the workers of a kgc.workers node (changed under one ``flock``, polled by every
worker: ``node/workers/shared.py``), and PostgreSQL tables shared by the nodes of a cluster
(versioned through ``kgc_cluster_change``, followed by LISTEN/NOTIFY and a poll):

==================  ============================  ==============================  =========================
store               local files                   shared between workers          PostgreSQL
==================  ============================  ==============================  =========================
SCRAM credentials   ``LocalCredentialStore``      ``WorkerCredentialStore``       ``PgCredentialStore``
ACLs                ``LocalAclStore``             ``WorkerAclStore``              ``PgAclStore``
group configs       ``LocalGroupConfigs``         ``WorkerGroupConfigs``          ``PgGroupConfigs``
producer id blocks  (the data plane's counter)    ``shared_producer_ids``         ``take_producer_ids``
==================  ============================  ==============================  =========================

A change made through one store is seen by the others of the same engine at their next
``refresh`` (PostgreSQL), poll (workers) or start (local files); the writer sees it at once.
``tests/storage/test_metadata_contract.py`` holds every engine to these rules.

These are Protocols over the value types of ``coordinator.security`` (credentials, ACL
bindings), so they live above ``storage``, which knows none of them. The ACL stores' is
the base class both engines already extend, ``security.acl_store.AclStore`` (the ACL
admin APIs, below this module, type against it), re-exported here. The topic catalog is
not among them: on one process it is the in-memory image itself (``catalog.TopicCatalog``,
changed synchronously) and in a cluster an asynchronous writer over that image
(``catalog.SharedCatalog``, ``apis.topics.SharedTopics``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from coordinator.security import ScramCredential
from coordinator.security.acl_store import AclStore
from coordinator.security.credentials import ScramChange

__all__ = ["AclStore", "GroupConfigStore", "ProducerIdBlocks", "ScramCredentialStore"]


class ScramCredentialStore(Protocol):
    """SCRAM credentials by user and mechanism (SASL/SCRAM logins, the SCRAM admin APIs)."""

    def get(self, user: str, mechanism: str) -> ScramCredential | None: ...

    def users(self) -> dict[str, list[ScramCredential]]: ...

    async def refresh(self) -> None:
        """Catch up with changes made through other stores of the engine."""
        ...

    async def alter(self, changes: list[ScramChange]) -> set[int]:
        """Apply ``changes`` durably, all or none; the indexes of deletions that found
        nothing to delete."""
        ...


class GroupConfigStore(Protocol):
    """Each consumer group's dynamic configs (IncrementalAlterConfigs on a GROUP)."""

    configs: dict[str, dict[str, str]]  # group -> its configs as set
    # Told each group's (session timeout, heartbeat interval) after every change.
    on_change: list[Callable[[dict[str, tuple[int, int]]], None]]

    def get(self, group: str) -> dict[str, str]: ...

    async def load(self) -> None:
        """Read every group's configs (once, at start)."""
        ...

    async def set(self, group: str, configs: dict[str, str]) -> None:
        """Replace ``group``'s configs durably (empty: remove them)."""
        ...


# (block size, floor) -> the first id of a block no other taker gets, above ``floor``.
ProducerIdBlocks = Callable[[int, int], Awaitable[int]]
