"""A kgc node of a cluster over PostgreSQL, and what it does when it gains or loses a lease.

How this works: ``assemble`` builds the node; this deployment (``ClusterNode``) opens the
data directory as a cache only (its lock first, then every partition directory dropped:
nothing local is trusted), connects to the database (schema migrated), starts the
PostgreSQL journal and follows the shared stores (topic catalog, SCRAM credentials, group
configs, ACLs). The group runtime and the data plane start with nothing: the node listens
before it owns anything, and until its leases are taken and loaded its answers send
clients to the owners (or ask them to retry). Membership (``coordinator.cluster``) starts
once the server accepts.

``coordinator/cluster`` decides which node holds which partition (leases
with fencing epochs in PostgreSQL) and calls ``acquire(lease)`` / ``release(topic, p)``
here. Taking a partition over:

1. the group runtime (``__consumer_offsets``) marks it LOADING at once, so its groups answer
   COORDINATOR_LOAD_IN_PROGRESS instead of NOT_COORDINATOR while it loads;
2. a fresh local log is made for it (the local directory is only a cache, never trusted
   across owners) and filled from the database up to the lease's ``next_offset``
   (``storage.postgres.materialize``);
3. the log is attached to the PostgreSQL journal under the lease's epoch: from now on every
   append is made durable by a round statement that checks that epoch (a node that lost the
   lease can never write);
4. the group runtime replays it into the shard and serves it (timers re-armed), or the data
   plane serves the topic partition (leader epoch = the lease's epoch).

A ``__transaction_state`` partition is leased the same way (the transaction coordinator,
``TxnRuntime``); its lease's states on this node:

* **not held**: its transactional ids answer NOT_COORDINATOR here; FindCoordinator (key
  type 1) names the lease holder, or answers COORDINATOR_NOT_AVAILABLE while nobody holds it;
* **loading** (lease claimed, ``begin_acquire``): the ids answer
  COORDINATOR_LOAD_IN_PROGRESS while the log is filled from the database and replayed;
  the lease epoch is the coordinator epoch (Kafka: the partition's leader epoch);
* **serving** (``acquire`` returned): transactions found in PrepareCommit/PrepareAbort get
  their markers again (to each partition's leader, ``cluster/txn_channel.py``), timeouts
  count from the records' times, and every write is fenced by the lease epoch;
* **released** (a hand-off, a stop, a lost lease, a write refused as fenced): the ids
  answer NOT_COORDINATOR at once; marker tasks of the old epoch find their partition gone
  and stop, and the next holder finishes their transactions. A coordinator that is cut off
  cannot write its partition any more (the journal checks the lease epoch); markers it
  still sends carry only outcomes already durable in Prepare* records, which the next
  holder re-sends unchanged, and a leader that saw the newer holder's marker for the
  producer refuses the older epoch's (TRANSACTION_COORDINATOR_FENCED), as Kafka's log.

Giving one up (a clean stop, or the cluster moving it to a newer node) runs the same steps
backwards: stop serving (parked requests answer NOT_COORDINATOR / NOT_LEADER_OR_FOLLOWER),
let the writes already appended finish their round, detach, drop the cache. When the journal
finds a write fenced (another node took the partition while this one was paused or cut
off), the partition is dropped the same way at once and the cluster layer is told.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import asyncpg

from coordinator import topic_configs
from coordinator.apis.topics import Broker
from coordinator.catalog import TopicCatalog
from coordinator.cluster import Cluster
from coordinator.cluster.peers import PeerClient, PeerConfigError, PeerSecurity
from coordinator.config import (
    Settings,
    offsets_log_config,
    share_state_log_config,
    txn_state_log_config,
)
from coordinator.dataplane import DataPlane
from coordinator.dataplane.producers import ClusterProducerIds
from coordinator.history.table import HistoryTable
from coordinator.node import Node
from coordinator.node.assemble import (
    Core,
    SettingRefused,
    Stores,
    assemble,
    lock_data_dir,
    route_transactions,
    status_settings,
)
from coordinator.node.pg_stores import PgClusterView, PgGroupConfigs, SharedCatalog
from coordinator.placement import ClusterPlacement, Placement
from coordinator.runtime.group_runtime import GroupRuntime
from coordinator.runtime.history import history_merge, history_retention
from coordinator.runtime.txn_runtime import TxnRuntime
from coordinator.security.acl_store import PgAclStore
from coordinator.security.credentials import PgCredentialStore
from coordinator.share.coordinator import ShareCoordinator
from coordinator.share.remote import RemoteShareState
from coordinator.share.state_shard import SHARE_STATE_TOPIC
from coordinator.txn.records import TRANSACTION_STATE_TOPIC
from storage.interface import Lease, NotOwnerError
from storage.local.durability import Flusher
from storage.local.manager import LogManager
from storage.postgres import catalog as pg_catalog
from storage.postgres.history import PgHistoryRows
from storage.postgres.journal import PgJournal
from storage.postgres.materialize import materialize
from storage.postgres.schema import migrate
from storage.records import OFFSETS_TOPIC
from storage.urls import redact_url

if TYPE_CHECKING:
    from storage.local.log import PartitionLog

log = logging.getLogger("kgc.cluster")


class PartitionHost:
    def __init__(
        self,
        settings: Settings,
        catalog: TopicCatalog,
        logs: LogManager,
        flusher: Flusher,
        journal: PgJournal,
        groups: GroupRuntime,
        data: DataPlane,
        txn: TxnRuntime,
        pool: Any,
        shared: SharedCatalog,
        *,
        broker_epoch: Callable[[], int],
        on_fenced: Callable[[str, int], None],
        share: ShareCoordinator | None = None,
    ) -> None:
        """``pool``: an asyncpg pool for reads (materialising partitions);
        ``broker_epoch``: the cluster layer's current one (the journal's writes carry it);
        ``on_fenced``: tells the cluster layer a partition was lost to a newer owner."""
        self.shared = shared
        self.broker_epoch = broker_epoch
        self.settings = settings
        self.catalog = catalog
        self.logs = logs
        self.flusher = flusher
        self.journal = journal
        self.groups = groups
        self.data = data
        self.txn = txn
        self.pool = pool
        self.hosted: dict[tuple[str, int], PartitionLog] = {}
        self.on_fenced = on_fenced
        self.share = share  # __share_group_state's partitions
        journal.on_fenced.append(self._fenced)

    async def acquire(self, lease: Lease) -> None:
        topic, p = lease.topic, lease.partition
        started = time.perf_counter()
        offsets = topic == OFFSETS_TOPIC
        txn_state = topic == TRANSACTION_STATE_TOPIC
        share_state = topic == SHARE_STATE_TOPIC and self.share is not None
        info = None
        topic_id = None
        if offsets:
            self.groups.begin_acquire(p)
            cfg = offsets_log_config(self.settings)
        elif txn_state:
            # Its transactional ids answer COORDINATOR_LOAD_IN_PROGRESS while it loads; the
            # lease epoch is the coordinator epoch (Kafka: the partition's leader epoch).
            self.txn.begin_acquire(p, lease.epoch)
            cfg = txn_state_log_config(self.settings)
        elif share_state:
            cfg = share_state_log_config(self.settings)
        else:
            info = self.catalog.get(topic)
            if info is None:
                await self.shared.refresh()  # created since our last heartbeat
                info = self.catalog.get(topic)
            if info is None or info.offline is not None:
                log.warning("not serving %s-%d: the topic is not in this node's catalog", topic, p)
                return
            cfg = topic_configs.log_config(self.settings, info.configs)
            topic_id = info.topic_id
        # Nothing serves this log until it is attached to the journal below: the group
        # runtime and the data plane only use logs handed to them by ``acquire``.
        plog = self.logs.fresh(topic, p, cfg, topic_id)
        try:
            async with self.pool.acquire() as conn:
                batches = await materialize(conn, plog, lease)
            self.journal.broker_epoch = self.broker_epoch()
            self.journal.attach(plog, lease)
        except BaseException:
            self.journal.detach(plog)
            self.logs.forget(topic, p)
            if offsets:
                self.groups.release(p)
            elif txn_state:
                self.txn.release(p)
            raise
        self.hosted[(topic, p)] = plog
        if offsets:
            records = await self.groups.acquire(p, plog, lease.epoch)
            what = f"{records} records"
        elif txn_state:
            # Replayed; transactions found in PrepareCommit/PrepareAbort get their markers
            # again, and timeouts count from the records' times.
            await self.txn.acquire(p, lease.epoch)
            what = f"offsets {plog.log_start_offset}..{plog.log_end_offset}"
        elif share_state:
            assert self.share is not None
            what = f"{await self.share.acquire(p, plog)} records"
        else:
            assert info is not None
            self.data.acquire(info, plog, lease.epoch)
            what = f"offsets {plog.log_start_offset}..{plog.log_end_offset}"
        ms = (time.perf_counter() - started) * 1000
        # The cluster layer logs the acquisition itself; this line adds what loading cost.
        log.log(
            logging.INFO if ms >= 1000 else logging.DEBUG,
            "loaded %s-%d at leader epoch %d: %d batches, %s, in %.0f ms",
            topic,
            p,
            lease.epoch,
            batches,
            what,
            ms,
        )

    async def release(self, topic: str, p: int) -> None:
        plog = self.hosted.pop((topic, p), None)
        if topic == OFFSETS_TOPIC:
            self.groups.release(p)
        elif topic == TRANSACTION_STATE_TOPIC:
            self.txn.release(p)  # its ids answer NOT_COORDINATOR from now on
        elif topic == SHARE_STATE_TOPIC and self.share is not None:
            self.share.release(p)
        elif plog is not None:
            self.data.release(plog)
        if plog is None:
            return
        if plog.log_end_offset > plog.durable_end:
            # Appends already made wait for their round: their answers depend on it.
            with contextlib.suppress(Exception):
                await self.flusher.wait_durable(plog, plog.log_end_offset - 1)
        self.journal.detach(plog)
        self.logs.forget(topic, p)
        log.debug("unloaded %s-%d", topic, p)

    def _fenced(self, topic: str, p: int) -> None:
        """A write of ours was refused: another node holds the lease now."""
        log.warning(
            "write to %s-%d refused: another node holds its lease now; stepping down", topic, p
        )
        # The cluster layer unloads it (``release``) through its one transition per
        # partition, so a later take-over never overlaps the unload.
        self.on_fenced(topic, p)


class ClusterNode:
    """The ``Deployment`` of a cluster node over PostgreSQL (module docstring)."""

    hosted = False

    def __init__(self, s: Settings) -> None:
        assert s.storage_url is not None
        self.url = s.storage_url
        self.settings = s
        self.name = f"kgc-node-{s.node_id}"
        # No I/O until ``start``; given to the flusher, which syncs it every round.
        self.journal = PgJournal(self.url, s.node_id, application_name=f"{self.name}-writer")
        self.pool: Any = None
        self.shared: SharedCatalog | None = None
        self.credentials: PgCredentialStore | None = None
        self.group_configs: PgGroupConfigs | None = None
        self.host: PartitionHost | None = None
        self.cluster: Cluster | None = None
        # The inter-broker client: checked here, before anything is opened (a listener or
        # mechanism it cannot serve stops start-up with one line); it reaches the nodes the
        # membership's last heartbeat saw live.
        try:
            security = PeerSecurity.from_settings(s)
        except PeerConfigError as exc:
            raise SystemExit(f"kgc: error: invalid setting {exc}") from None
        self.peers = PeerClient(
            lambda: self.cluster.nodes() if self.cluster is not None else [],
            security,
            node_id=s.node_id,
            request_timeout_ms=s.request_timeout_ms,
        )

    async def open_stores(self, s: Settings) -> Stores:
        flusher = Flusher(remote_only=True, journal=self.journal)
        # First: the LogManager takes the data directory's lock before anything there is read.
        logs = lock_data_dir(s, flusher)
        logs.drop_cache()  # nothing local is trusted: partitions are filled from the database
        try:
            pool = self.pool = await asyncpg.create_pool(
                self.url,
                min_size=1,
                max_size=4,
                server_settings={"application_name": f"{self.name}-reads"},
            )
        except (OSError, asyncpg.PostgresError) as exc:
            why = f"cannot reach the cluster's database: {exc}"
            raise SettingRefused("storage.url", redact_url(self.url), why) from exc
        async with pool.acquire() as conn:
            await migrate(conn)
        await self.journal.start()
        catalog = TopicCatalog(None)
        shared = self.shared = SharedCatalog(catalog, pool)
        await shared.listen(self.url, f"{self.name}-catalog")
        await shared.refresh()
        credentials = self.credentials = PgCredentialStore(pool)
        await credentials.refresh()
        group_configs = self.group_configs = PgGroupConfigs(s, pool)  # ConfigAdmin loads it
        acl_store = PgAclStore(pool) if s.authorizer_class_name else None
        if acl_store is not None:  # loads kgc_acl, then follows it (poll + NOTIFY)
            await acl_store.start(self.url, f"{self.name}-acl")
        closers = [self.peers.close, self.journal.close, shared.close, pool.close]
        return Stores(
            flusher=flusher,
            logs=logs,
            catalog=catalog,
            credentials=credentials,
            acls=acl_store,
            group_configs=group_configs,
            producer_ids=ClusterProducerIds(self._take_producer_ids),
            shared_topics=shared,
            cluster=PgClusterView(pool),
            journal=self.journal,
            peers=self.peers,
            closers=[acl_store.close, *closers] if acl_store is not None else closers,
        )

    async def _take_producer_ids(self, block: int, floor: int) -> int:
        async with self.pool.acquire() as conn:
            return await pg_catalog.take_producer_ids(conn, block, floor)

    def open_logs(self, s: Settings, stores: Stores) -> None:
        pass  # partitions are opened as their leases are taken

    def core_built(self, groups: GroupRuntime) -> None:
        groups.loaded.set()  # nothing to load up front: partitions load as leases come
        if self.settings.offsets_history_retention_ms > 0:
            groups.history = cluster_history(self.settings, groups, self.journal, self.pool)

    def serve_partitions(self, s: Settings, core: Core) -> None:
        assert self.shared is not None
        st = core.stores
        # The host and the membership call each other: each gets the other's call through
        # this deployment, and neither calls before ``Cluster.start`` (``started``).
        self.host = PartitionHost(
            s,
            st.catalog,
            st.logs,
            st.flusher,
            self.journal,
            core.groups,
            core.data,
            core.txn,
            self.pool,
            self.shared,
            broker_epoch=lambda: self._cluster().broker_epoch,
            on_fenced=lambda topic, p: self._cluster().partition_lost(topic, p),
            share=core.share,
        )
        # A share partition's state kept by another node is reached through its APIs.
        core.share.remote = RemoteShareState(
            self.peers, self._share_state_owner, s.node_id, leader_of=self._leader_of
        )
        self.shared.on_deleted.append(core.groups.topic_deleted)
        self._transactions_across_nodes(s, core)

    def _transactions_across_nodes(self, s: Settings, core: Core) -> None:
        """Markers to each partition's leader, verification at each id's coordinator, both
        through the inter-broker client; the coordinator serves the partitions it leases."""

        def leaders() -> ClusterPlacement | None:
            return ClusterPlacement(self.cluster) if self.cluster is not None else None

        route_transactions(s.node_id, core, leaders, self.peers)
        core.txn.start(())  # the sweeps; partitions come with their leases

    def _leader_of(self, topic: str, p: int) -> int | None:
        node = self.cluster.owner(topic, p) if self.cluster is not None else None
        return None if node is None else node.node_id

    def _share_state_owner(self, p: int) -> int | None:
        """The live node holding ``__share_group_state`` partition ``p``, if any."""
        node = self.cluster.owner(SHARE_STATE_TOPIC, p) if self.cluster is not None else None
        return None if node is None else node.node_id

    def _cluster(self) -> Cluster:
        assert self.cluster is not None
        return self.cluster

    async def _catalog_changed(self) -> None:
        # The cluster's change version moved: topics, SCRAM credentials ('scram'),
        # or a group's configs ('group_config').
        assert self.shared and self.credentials and self.group_configs
        try:
            await self.shared.refresh()
        finally:
            try:
                await self.credentials.refresh()
            finally:
                await self.group_configs.refresh()

    def placement(
        self, s: Settings, core: Core, endpoints: dict[str, tuple[str, int]], port: int
    ) -> tuple[Placement | None, int]:
        assert self.host is not None
        # The node's row keeps its first advertised address and every advertised listener,
        # which the other nodes give to clients of that listener.
        adv_host, adv_port = next(iter(endpoints.values()))
        self.cluster = Cluster(
            self.url,
            s.node_id,
            adv_host,
            adv_port,
            listeners=",".join(f"{n}://{h}:{p}" for n, (h, p) in endpoints.items()),
            rack=s.broker_rack,
            heartbeat_interval_ms=s.broker_heartbeat_interval_ms,
            session_timeout_ms=s.broker_session_timeout_ms,
            offsets_partitions=s.offsets_topic_num_partitions,
            internal_topics=(
                (
                    TRANSACTION_STATE_TOPIC,
                    s.transaction_state_log_num_partitions,
                    "transaction.state.log.num.partitions",
                ),
                (
                    SHARE_STATE_TOPIC,
                    s.share_coordinator_state_topic_num_partitions,
                    "share.coordinator.state.topic.num.partitions",
                ),
            ),
            on_acquire=self.host.acquire,
            on_release=self.host.release,
            on_catalog_change=self._catalog_changed,
        )
        return ClusterPlacement(self.cluster), adv_port

    def broker_nodes(self, broker: Broker) -> Callable[[], list[int]] | None:
        return lambda: [n.node_id for n in broker.placement.nodes()]

    async def started(self, s: Settings, core: Core) -> None:
        await self._cluster().start()  # leases are taken only now, once the server accepts
        groups = core.groups
        history = groups.history
        if history is not None:
            jobs = [history_retention(history, groups.clock)]
            if isinstance(history, HistoryTable) and history.merge_lag_ms > 0:
                # its rows merged as they age (0: never, and no loop waking for nothing)
                jobs.append(history_merge(history, groups.clock))
            for job in jobs:
                task = asyncio.ensure_future(job)
                groups.background.add(task)
                task.add_done_callback(groups.background.discard)

    def announce(self, s: Settings, listeners: str) -> None:
        logging.getLogger("kgc").info(
            "kgc node %d listening on %s, cluster on %s, cache in %s",
            s.node_id,
            listeners,
            redact_url(self.url),
            s.data_dir,
        )

    def membership(self) -> Cluster | None:
        return self.cluster


def cluster_history(
    s: Settings, groups: GroupRuntime, journal: PgJournal, pool: Any
) -> HistoryTable:
    """The groups' history in ``kgc_group_history``: each turn's values join their offsets
    partition's round in the journal (``coordinator.history.table``)."""
    flusher = groups.flusher

    def note(p: int, now_ms: int, value: bytes) -> bool:
        plog = groups.partitions.get(p)
        if plog is None:
            return False
        try:
            journal.note_history(plog, now_ms, value)
        except NotOwnerError:
            return False
        return True

    def lease(p: int) -> tuple[int, int, int] | None:
        plog = groups.partitions.get(p)
        held = None if plog is None else journal.lease_of(plog)
        return None if held is None else (journal.node_id, journal.broker_epoch, held[2])

    return HistoryTable(
        s.offsets_history_retention_ms,
        PgHistoryRows(pool),
        note,
        groups.shard.partition_of,
        groups.partitions.keys,
        status_settings(s),
        poke=flusher.poke,
        merge_lag_ms=s.offsets_history_merge_lag_ms,
        lease=lease,
    )


async def start_cluster_node(settings: Settings) -> Node:
    """Cluster mode: the same parts over the PostgreSQL engine (docs/cluster.md)."""
    return await assemble(settings, ClusterNode(settings))
