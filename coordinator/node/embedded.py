"""One kgc process on a data directory: it leads every partition, its stores are local files.

How this works: ``assemble`` builds the node; this deployment opens the data directory
(its lock first, then the topic catalog reconciled with the partition directories before
any log is opened, recovered or removed), opens every log, replays every offsets
partition in the background, and serves every topic partition. Metadata and
FindCoordinator name this node for everything.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from coordinator.apis.topics import Broker
from coordinator.catalog import CATALOG_FILE, TopicCatalog
from coordinator.config import Settings
from coordinator.group_configs import GROUP_CONFIGS_FILE, LocalGroupConfigs
from coordinator.node import Node
from coordinator.node.assemble import Core, Stores, assemble, lock_data_dir, log_config_for
from coordinator.node.reconcile import reconcile
from coordinator.placement import Placement
from coordinator.runtime import GroupRuntime
from coordinator.security.acl_store import LocalAclStore
from coordinator.security.credentials import LocalCredentialStore
from storage.local.durability import Flusher

log = logging.getLogger("kgc")


class Embedded:
    """The ``Deployment`` of one process on a data directory."""

    hosted = True

    async def open_stores(self, s: Settings) -> Stores:
        flusher = Flusher()
        # First: the LogManager takes the data directory's lock before anything there is read.
        logs = lock_data_dir(s, flusher)
        catalog = TopicCatalog(s.data_dir / CATALOG_FILE)
        # Before any log is opened, recovered or removed, the catalog and the partition
        # directories must agree.
        reconcile(catalog, logs)
        return Stores(
            flusher=flusher,
            logs=logs,
            catalog=catalog,
            credentials=LocalCredentialStore.in_data_dir(s.data_dir),
            acls=LocalAclStore(s.data_dir) if s.authorizer_class_name else None,
            group_configs=LocalGroupConfigs(s, s.data_dir / GROUP_CONFIGS_FILE),
        )

    def open_logs(self, s: Settings, stores: Stores) -> None:
        stores.logs.open_all(functools.partial(log_config_for, s, stores.catalog))

    def core_built(self, groups: GroupRuntime) -> None:
        groups.start()

    def serve_partitions(self, s: Settings, core: Core) -> None:
        pass  # hosted: the data plane serves every open log, the runtime loads every one

    def placement(
        self, s: Settings, core: Core, endpoints: dict[str, tuple[str, int]], port: int
    ) -> tuple[Placement | None, int]:
        return None, s.advertised_port or port

    def broker_nodes(self, broker: Broker) -> Callable[[], list[int]] | None:
        return lambda: [n.node_id for n in broker.placement.nodes()]

    async def started(self, s: Settings, core: Core) -> None:
        pass

    def announce(self, s: Settings, listeners: str) -> None:
        log.info("kgc listening on %s (node %d, data in %s)", listeners, s.node_id, s.data_dir)

    def membership(self) -> None:
        return None


async def start_embedded(settings: Settings) -> Node:
    return await assemble(settings, Embedded())
