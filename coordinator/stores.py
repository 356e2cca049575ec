"""The metadata stores behind one interface: what the node needs of each, whatever the engine.

How this works: besides its partition logs, a node keeps five kinds of metadata, each in
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
topic catalog       ``LocalTopicStore``           ``LocalTopicStore``             ``SharedCatalog``
                                                  over a ``WorkerCatalog``
==================  ============================  ==============================  =========================

A change made through one store is seen by the others of the same engine at their next
``refresh`` (PostgreSQL), poll (workers) or start (local files); the writer sees it at once.
``tests/storage/test_metadata_contract.py`` holds every engine to these rules.

These are Protocols over the value types of ``coordinator.security`` (credentials, ACL
bindings), so they live above ``storage``, which knows none of them. The ACL stores' is
the base class both engines already extend, ``security.acl_store.AclStore`` (the ACL
admin APIs, below this module, type against it), re-exported here.

The topic catalog is read on the hot paths (Metadata, Produce, Fetch), so every engine
keeps it whole in memory as a ``catalog.TopicCatalog`` that is read synchronously: on one
process changed synchronously in ``topics.json``, by the workers in the same file under
their lock (``node/workers/shared.WorkerCatalog``). A cluster writes it asynchronously
through a ``TopicStore`` (``node/pg_stores.SharedCatalog``), whose changes are one
database transaction each and whose failures name a vanished topic
(``storage.interface.UnknownTopicError``) or a grown one (``ValueError``). The admin APIs
ask the cluster about its nodes and leases through a ``ClusterView``. Both are given to
the handlers at construction, so no handler imports a storage engine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from coordinator.security import ScramCredential
from coordinator.security.acl_store import AclStore
from coordinator.security.credentials import ScramChange

if TYPE_CHECKING:
    from coordinator.catalog import TopicCatalog, TopicInfo
    from storage.interface import RegisteredNode

__all__ = [
    "AclStore",
    "ClusterView",
    "GroupConfigStore",
    "ProducerIdBlocks",
    "ScramCredentialStore",
    "TopicStore",
]


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
    # The same for share groups (share.session.timeout.ms, share.heartbeat.interval.ms).
    on_share_change: list[Callable[[dict[str, tuple[int, int]]], None]]

    def get(self, group: str) -> dict[str, str]: ...

    async def load(self) -> None:
        """Read every group's configs (once, at start)."""
        ...

    async def set(self, group: str, configs: dict[str, str]) -> None:
        """Replace ``group``'s configs durably (empty: remove them)."""
        ...


# (block size, floor) -> the first id of a block no other taker gets, above ``floor``.
ProducerIdBlocks = Callable[[int, int], Awaitable[int]]


class TopicStore(Protocol):
    """A topic catalog changed asynchronously for every node (cluster mode).

    ``catalog`` is the in-memory image every read uses; each change is durable and seen by
    ``catalog`` when the call returns, and by the other nodes at their next ``refresh``.
    """

    catalog: TopicCatalog

    async def refresh(self) -> None:
        """Catch up with changes made by other nodes."""
        ...

    async def create(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicInfo:
        """Create a topic; ``catalog.TopicExistsError`` when the name is taken."""
        ...

    async def create_partitions(self, name: str, num_partitions: int) -> TopicInfo:
        """Grow a topic to ``num_partitions``; ``UnknownTopicError`` when it is gone,
        ``ValueError`` when it has that many already."""
        ...

    async def alter_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        """Replace a topic's configs; ``UnknownTopicError`` when it is gone."""
        ...

    async def delete(self, info: TopicInfo) -> None: ...


class ClusterView(Protocol):
    """What the admin APIs ask about the cluster beyond the live nodes (``Placement``)."""

    async def registered_nodes(self) -> list[RegisteredNode]:
        """Every node ever registered, live or fenced."""
        ...

    async def lease_log_start(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(epoch, log start offset) of a partition's lease; None when it has none."""
        ...
