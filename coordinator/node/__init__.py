"""A running kgc node: every part, as ``assemble`` built it, and its clean stop.

How this works: ``assemble.assemble`` writes the build order once; three deployments use
it -- ``embedded`` (one process on a data directory), ``cluster`` (a node over PostgreSQL)
and ``workers`` (a supervisor of N worker processes on one data directory, each a
deployment of its own). ``process`` runs a node until SIGTERM/SIGINT; the CLI's ``serve``
chooses between one process and a supervisor of workers.

``Node.stop`` is the clean shutdown used on SIGTERM/SIGINT: stop accepting, let in-flight
responses go out, flush and close the logs (which writes the clean-shutdown markers that
let the next start skip recovery).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coordinator.cluster import Cluster
    from coordinator.dataplane import DataPlane
    from coordinator.metrics import Metrics
    from coordinator.runtime import GroupRuntime
    from coordinator.security.acl import Authorizer
    from coordinator.server.listener import KafkaServer
    from coordinator.stores import ScramCredentialStore
    from storage.local.compaction import Compaction
    from storage.local.durability import Flusher
    from storage.local.manager import LogManager

log = logging.getLogger("kgc")


class Node:
    """A running kgc node: its parts, as ``assemble`` built them."""

    def __init__(
        self,
        *,
        flusher: Flusher,
        logs: LogManager,
        groups: GroupRuntime,
        data: DataPlane,
        server: KafkaServer,
        metrics: Metrics,
        compaction: Compaction,
        credentials: ScramCredentialStore,
        authorizer: Authorizer | None,
        closers: Sequence[Callable[[], Awaitable[None]]] = (),
        cluster: Cluster | None = None,
        stopping: Sequence[Callable[[], Awaitable[None]]] = (),
    ) -> None:
        self.flusher = flusher
        self.logs = logs
        self.groups = groups
        self.data = data
        self.server = server
        self.metrics = metrics
        self.compaction = compaction
        self.credentials = credentials  # SCRAM credentials (SASL/SCRAM looks users up here)
        # Kafka's ACLs (None without authorizer.class.name: everything is allowed);
        # request handlers enforce them with authorize()/authorized_operations().
        self.authorizer = authorizer
        self.closers = list(closers)  # run last, in order
        self.cluster = cluster  # cluster mode's membership
        # Background work stopped once the server is, before the logs' last flush (the
        # transaction coordinator's marker deliveries and sweeps).
        self.stopping = list(stopping)

    async def stop(self) -> None:
        if self.cluster is not None:
            # Hand every partition over first (the others take them at their next
            # heartbeat), while this node still answers: clients re-route on NOT_COORDINATOR.
            await self.cluster.stop()
        self.data.begin_shutdown()  # answer parked fetches so connections drain
        await self.server.stop()
        for sasl in self.server.sasl.values():
            sasl.close()  # e.g. OAUTHBEARER's JWKS refresh thread
        await self.metrics.stop()
        for stop in self.stopping:
            await stop()
        await self.data.stop()
        await self.compaction.stop()
        self.groups.close()
        await self.flusher.stop()
        for close in self.closers:
            await close()
        self.logs.close_all()
        log.info("kgc stopped")
