"""Assembling a running kgc: settings → storage → components → TCP server, in one place.

How this works: ``App.start`` builds every part once, in dependency order, and gives each
what it uses when it is constructed (nothing is plugged in afterwards):

1. the flusher and the ``LogManager``, which takes the data directory's lock before
   anything there is read; the topic catalog, reconciled with the partition directories;
   every log opened (recovered if the last stop was not clean);
2. the group core (``GroupShard``), the metrics (which read the shard, the logs, the
   flusher and the cleaners at scrape time), the group runtime (which replays the offsets
   log in the background, answering COORDINATOR_LOAD_IN_PROGRESS meanwhile) and the data
   plane;
3. the listening sockets, one set per listener (Kafka's ``listeners``; the TLS contexts
   of SSL/SASL_SSL listeners are built before anything else is opened, so a certificate
   that does not load stops start-up at once): a port is known once bound, and the broker
   advertises each listener's (unless ``advertised.listeners`` says otherwise); then the
   dispatch table from the handler tables of
   the broker, the group runtime and the data plane, and the server that accepts on the
   sockets.

A background task (``Compaction``) runs the log cleaner on compacted logs in bounded steps.
``App.stop`` is the clean shutdown used on SIGTERM/SIGINT: stop accepting, let in-flight
responses go out, flush and close the logs (which writes the clean-shutdown markers that
let the next start skip recovery).

Garbage collection (``serve``): the young generation is collected every
``GC_THRESHOLDS[0]`` net allocations instead of Python's 700, so the objects of requests in
flight (alive for a round of fsync, then freed by reference counting) are rarely scanned
and promoted; once the offsets log is loaded, ``gc.freeze()`` moves the loaded groups,
offsets and catalog into the permanent generation, which no later collection scans.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from coordinator import topic_configs
from coordinator.catalog import CatalogTopics, SharedCatalog, TopicCatalog
from coordinator.config import Settings, offsets_log_config
from coordinator.dataplane import DataPlane
from coordinator.dataplane.admin import PartitionAdmin
from coordinator.dataplane.offsets_topic import OffsetsTopic, offsets_topic_id
from coordinator.group.shard import GroupConfig, GroupShard
from coordinator.group_configs import GROUP_CONFIGS_FILE, LocalGroupConfigs, PgGroupConfigs
from coordinator.metrics import Metrics
from coordinator.runtime import GroupRuntime
from coordinator.security.acl import Authorizer
from coordinator.security.acl_admin import AclAdmin, acl_security
from coordinator.security.acl_store import LocalAclStore, PgAclStore
from coordinator.security.credentials import LocalCredentialStore, PgCredentialStore
from coordinator.security.sasl import attach_sasl
from coordinator.security.scram_admin import AlterableCredentialStore, ScramAdmin
from coordinator.server.authz import ApiAuthorizer, cluster_authorize
from coordinator.server.broker import Broker, advertised_endpoints
from coordinator.server.config_admin import ConfigAdmin
from coordinator.server.dispatch import Dispatcher
from coordinator.server.handler import Handler
from coordinator.server.listener import (
    KafkaServer,
    Listening,
    describe_listeners,
    listen_all,
    tls_contexts,
)
from storage.local.cleaner import LogCleaner
from storage.local.durability import Flusher
from storage.local.log import LogConfig, PartitionLog
from storage.local.manager import LogManager
from storage.offsets_format import OFFSETS_TOPIC
from storage.postgres import redact_url

log = logging.getLogger("kgc")

CLEANER_STEP_BYTES = 1 << 20  # work per step, so a step never holds the loop for long


def log_config_for(
    settings: Settings, catalog: TopicCatalog, topic: str, partition: int
) -> LogConfig | None:
    """A partition's log settings at start-up; None leaves an offline topic unopened."""
    if topic == OFFSETS_TOPIC:
        return offsets_log_config(settings)
    info = catalog.get(topic)
    if info is not None and info.offline is not None:
        return None
    return topic_configs.log_config(settings, info.configs if info else None)


def topic_partitions(settings: Settings, catalog: TopicCatalog, topic: str) -> int | None:
    """Partitions of ``topic``, None if it does not exist (offsets of it are refused)."""
    if topic == OFFSETS_TOPIC:
        return settings.offsets_topic_num_partitions
    info = catalog.get(topic)
    return info.num_partitions if info is not None else None


def group_config(s: Settings) -> GroupConfig:
    return GroupConfig(
        group_min_session_timeout_ms=s.group_min_session_timeout_ms,
        group_max_session_timeout_ms=s.group_max_session_timeout_ms,
        group_initial_rebalance_delay_ms=s.group_initial_rebalance_delay_ms,
        group_max_size=s.group_max_size,
        offsets_topic_num_partitions=s.offsets_topic_num_partitions,
        offset_metadata_max_bytes=s.offset_metadata_max_bytes,
        offsets_retention_minutes=s.offsets_retention_minutes,
        offsets_retention_check_interval_ms=s.offsets_retention_check_interval_ms,
        consumer_group_session_timeout_ms=s.group_consumer_session_timeout_ms,
        consumer_group_min_session_timeout_ms=s.group_consumer_min_session_timeout_ms,
        consumer_group_max_session_timeout_ms=s.group_consumer_max_session_timeout_ms,
        consumer_group_heartbeat_interval_ms=s.group_consumer_heartbeat_interval_ms,
        consumer_group_min_heartbeat_interval_ms=s.group_consumer_min_heartbeat_interval_ms,
        consumer_group_max_heartbeat_interval_ms=s.group_consumer_max_heartbeat_interval_ms,
        consumer_group_max_size=s.group_consumer_max_size,
        consumer_group_assignors=s.consumer_group_assignors,
        consumer_group_migration_policy=s.group_consumer_migration_policy,
    )


class Compaction:
    """Runs the log cleaner over every compacted log, a bounded step at a time."""

    def __init__(self, logs: LogManager, backoff_ms: int) -> None:
        self.logs = logs
        self.backoff_s = backoff_ms / 1000
        self.cleaners: dict[PartitionLog, LogCleaner] = {}  # one per compacted log
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.backoff_s)
            for gone in [plog for plog in self.cleaners if plog.closed]:
                del self.cleaners[gone]  # a deleted topic's log
            for plog in self.logs.logs():
                if not plog.config.compact or plog.closed:
                    continue
                cleaner = self.cleaners.get(plog)
                if cleaner is None:
                    cleaner = self.cleaners[plog] = LogCleaner(plog)
                try:
                    while cleaner.clean_step(CLEANER_STEP_BYTES):
                        await asyncio.sleep(0)  # let requests through between steps
                except Exception:
                    log.exception("compaction of %s failed; will retry", plog.dir)


def group_core(
    s: Settings, catalog: TopicCatalog, logs: LogManager, flusher: Flusher, *, hosted: bool
) -> tuple[Compaction, Metrics, GroupRuntime]:
    """The group core, its runtime, the metrics that read them, and the cleaner's task.

    ``hosted``: this node coordinates every offsets partition (the embedded default); in
    cluster mode none until their leases are taken (``GroupRuntime.acquire``).
    """
    shard = GroupShard(
        group_config(s),
        topic_partitions=functools.partial(topic_partitions, s, catalog),
        topics=CatalogTopics(catalog),
    )
    compaction = Compaction(logs, s.log_cleaner_backoff_ms)
    metrics = Metrics(shard=shard, logs=logs, flusher=flusher, cleaners=compaction.cleaners.values)
    groups = GroupRuntime(
        shard,
        logs,
        flusher,
        num_partitions=s.offsets_topic_num_partitions,
        log_config=offsets_log_config(s),
        metrics=metrics,  # load times, rebalance durations
        hosted=hosted,
    )
    catalog.on_change.append(groups.topics_changed)
    return compaction, metrics, groups


def kafka_server(
    s: Settings,
    listening: Listening | list[Listening],
    broker: Broker,
    groups: GroupRuntime,
    data: DataPlane,
    metrics: Metrics,
    more_handlers: Sequence[Mapping[int, Handler]] = (),
    authorizer: Authorizer | None = None,
) -> KafkaServer:
    dispatcher = Dispatcher(broker.handlers(), groups.handlers(), data.handlers(), *more_handlers)
    if authorizer is not None:
        # Every API checks what Kafka's KafkaApis checks before its handler runs.
        catalog = broker.catalog
        offsets_id = offsets_topic_id(s.cluster_id)

        def topic_name(topic_id: bytes) -> str | None:
            if topic_id == offsets_id:
                return OFFSETS_TOPIC
            info = catalog.by_id.get(topic_id)
            return None if info is None else info.name

        api_authorizer = ApiAuthorizer(authorizer, topic_name)
        dispatcher.handlers = api_authorizer.wrap(dispatcher.handlers)
        metrics.count_denials(authorizer, lambda: api_authorizer.api_key)
    return KafkaServer(
        listening,
        dispatcher,
        max_request_size=s.socket_request_max_bytes,
        queued_max_requests=s.queued_max_requests,
        queued_max_request_bytes=s.queued_max_request_bytes,
        on_refused=metrics.on_refused,
        on_connection=metrics.on_connection,
        # Without an endpoint nobody reads the counters: skip the per-request hook then.
        on_request=metrics.on_request if s.metrics_port else None,
    )


def start_kafka_server(
    s: Settings,
    listening: list[Listening],
    broker: Broker,
    groups: GroupRuntime,
    data: DataPlane,
    metrics: Metrics,
    credentials: AlterableCredentialStore,
    acls: AclAdmin,
    admins: Sequence[Mapping[int, Handler]],
) -> KafkaServer:
    """The Kafka server of every way kgc starts (embedded, cluster node, worker): the
    broker's, groups' and data plane's APIs, the SCRAM and ACL admin APIs and ``admins``
    (partitions, configs: built per mode), SASL on its listeners, its connections counted,
    accepting."""
    server = kafka_server(
        s,
        listening,
        broker,
        groups,
        data,
        metrics,
        [
            ScramAdmin(credentials, cluster_authorize(acls.authorizer)).handlers(),
            acls.handlers(),
            *admins,
        ],
        authorizer=acls.authorizer,
    )
    attach_sasl(server, s, credentials)
    metrics.watch(server)  # connections per listener, SASL authentications
    server.start()
    return server


async def serve_metrics(s: Settings, metrics: Metrics, data: DataPlane) -> None:
    metrics.data = data  # consumer lag is measured in the partitions it serves
    metrics.lag.max_series = s.metrics_lag_max_series
    if s.metrics_port:
        port = await metrics.serve(s.host, s.metrics_port)
        log.info("metrics on http://%s:%d/metrics", s.host, port)


class App:
    """A running kgc node: its parts, as ``start`` built them."""

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
        credentials: LocalCredentialStore | PgCredentialStore | None = None,
    ) -> None:
        self.flusher = flusher
        self.logs = logs
        self.groups = groups
        self.data = data
        self.server = server
        self.metrics = metrics
        self.compaction = compaction
        self.credentials = credentials  # SCRAM credentials (SASL/SCRAM looks users up here)
        self.cluster: Any = None  # coordinator.cluster.Cluster in cluster mode
        self.closers: list[Callable[[], Awaitable[None]]] = []
        # Kafka's ACLs (None without authorizer.class.name: everything is allowed);
        # request handlers enforce them with authorize()/authorized_operations().
        self.authorizer: Authorizer | None = None

    @classmethod
    async def start(cls, settings: Settings) -> App:
        if settings.cluster_mode:
            return await cls.start_cluster_node(settings)
        s = settings
        tls = tls_contexts(s)  # before anything is opened: a bad certificate stops here
        flusher = Flusher()
        # First: the LogManager takes the data directory's lock before anything there is read.
        logs = LogManager(s.data_dir, flusher=flusher)
        catalog = TopicCatalog(s.data_dir / "topics.json")
        # Before any log is opened, recovered or removed, the catalog and the partition
        # directories must agree.
        catalog.reconcile(logs)
        credentials = LocalCredentialStore.in_data_dir(s.data_dir)
        acls = acl_security(s, LocalAclStore(s.data_dir) if s.authorizer_class_name else None)
        logs.open_all(functools.partial(log_config_for, s, catalog))
        flusher.start()

        compaction, metrics, groups = group_core(s, catalog, logs, flusher, hosted=True)
        groups.start()
        # __consumer_offsets is read through the data plane (Burrow, kminion, decoders).
        offsets_topic = OffsetsTopic(groups, s.cluster_id)
        data = DataPlane(s, catalog, logs, flusher, offsets_topic=offsets_topic)
        data.start()

        listening = await listen_all(s, tls)
        endpoints = advertised_endpoints(s, {li.name: li.port for li in listening})
        broker = Broker(
            s,
            catalog,
            logs,
            groups,
            data,
            advertised_port=s.advertised_port or listening[0].port,
            endpoints=endpoints,
        )
        server = start_kafka_server(
            s,
            listening,
            broker,
            groups,
            data,
            metrics,
            credentials,
            acls,
            [
                # CreatePartitions, DeleteRecords, DescribeCluster, DescribeLogDirs.
                PartitionAdmin(
                    s, catalog, logs, data, broker.placement, authorizer=acls.authorizer
                ).handlers(),
                # DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.
                (
                    await ConfigAdmin.start(
                        s,
                        catalog,
                        data,
                        groups,
                        LocalGroupConfigs(s, s.data_dir / GROUP_CONFIGS_FILE),
                        authorizer=acls.authorizer,
                        nodes=lambda: [n.node_id for n in broker.placement.nodes()],
                    )
                ).handlers(),
            ],
        )
        compaction.start()
        await serve_metrics(s, metrics, data)
        log.info(
            "kgc listening on %s (node %d, data in %s)",
            describe_listeners(listening, endpoints),
            s.node_id,
            s.data_dir,
        )
        app = cls(
            flusher=flusher,
            logs=logs,
            groups=groups,
            data=data,
            server=server,
            metrics=metrics,
            compaction=compaction,
            credentials=credentials,
        )
        app.authorizer = acls.authorizer
        return app

    @classmethod
    async def start_cluster_node(cls, settings: Settings) -> App:
        """Cluster mode: the same parts over the PostgreSQL engine (README "Cluster mode").

        The data directory is this node's cache; the database holds the logs, the topic
        catalog and the leases. The node listens before it owns anything: until its leases
        are taken and loaded, its answers send clients to the owners (or ask them to retry).
        """
        import asyncpg

        from coordinator.cluster import Cluster
        from coordinator.dataplane.producers import ClusterProducerIds
        from coordinator.runtime.partition_host import PartitionHost
        from coordinator.server.placement import ClusterPlacement
        from storage.postgres import catalog as pg_catalog
        from storage.postgres.journal import PgJournal
        from storage.postgres.schema import migrate

        s = settings
        assert s.storage_url is not None
        tls = tls_contexts(s)  # before anything is opened: a bad certificate stops here
        name = f"kgc-node-{s.node_id}"
        flusher = Flusher(remote_only=True)
        logs = LogManager(s.data_dir, flusher=flusher)
        logs.drop_cache()  # nothing local is trusted: partitions are filled from the database
        try:
            pool = await asyncpg.create_pool(
                s.storage_url,
                min_size=1,
                max_size=4,
                server_settings={"application_name": f"{name}-reads"},
            )
        except (OSError, asyncpg.PostgresError) as exc:
            raise OSError(
                f"cannot reach the cluster's database {redact_url(s.storage_url)}: {exc}"
            ) from exc
        async with pool.acquire() as conn:
            await migrate(conn)
        journal = PgJournal(s.storage_url, s.node_id, application_name=f"{name}-writer")
        await journal.start()
        flusher.journal = journal
        catalog = TopicCatalog(None)
        shared = SharedCatalog(catalog, pool)
        await shared.listen(s.storage_url, f"{name}-catalog")
        await shared.refresh()
        credentials = PgCredentialStore(pool)
        await credentials.refresh()
        group_config_store = PgGroupConfigs(s, pool)  # loaded by ConfigAdmin.start
        acl_store = PgAclStore(pool) if s.authorizer_class_name else None
        if acl_store is not None:  # loads kgc_acl, then follows it (poll + NOTIFY)
            await acl_store.start(s.storage_url, f"{name}-acl")
        acls = acl_security(s, acl_store)
        flusher.start()

        compaction, metrics, groups = group_core(s, catalog, logs, flusher, hosted=False)
        groups.loaded.set()  # nothing to load up front: partitions load as leases come

        async def take_producer_ids(block: int, floor: int) -> int:
            async with pool.acquire() as conn:
                return await pg_catalog.take_producer_ids(conn, block, floor)

        data = DataPlane(
            s,
            catalog,
            logs,
            flusher,
            hosted=False,
            producer_ids=ClusterProducerIds(take_producer_ids),
            # Read where this node holds the partition's lease, at the lease's epoch.
            offsets_topic=OffsetsTopic(groups, s.cluster_id, lease_of=journal.lease_of),
        )
        data.start()
        host = PartitionHost(s, catalog, logs, flusher, journal, groups, data, pool, shared)
        shared.on_deleted.append(groups.topic_deleted)

        async def catalog_changed() -> None:
            # The cluster's change version moved: topics, SCRAM credentials ('scram'),
            # or a group's configs ('group_config').
            try:
                await shared.refresh()
            finally:
                try:
                    await credentials.refresh()
                finally:
                    await group_config_store.refresh()

        listening = await listen_all(s, tls)
        endpoints = advertised_endpoints(s, {li.name: li.port for li in listening})
        # The node's row keeps its first advertised address and every advertised listener,
        # which the other nodes give to clients of that listener.
        adv_host, adv_port = next(iter(endpoints.values()))
        cluster = Cluster(
            s.storage_url,
            s.node_id,
            adv_host,
            adv_port,
            listeners=",".join(f"{n}://{h}:{p}" for n, (h, p) in endpoints.items()),
            rack=s.broker_rack,
            heartbeat_interval_ms=s.broker_heartbeat_interval_ms,
            session_timeout_ms=s.broker_session_timeout_ms,
            offsets_partitions=s.offsets_topic_num_partitions,
            on_acquire=host.acquire,
            on_release=host.release,
            on_catalog_change=catalog_changed,
        )
        host.broker_epoch = lambda: cluster.broker_epoch
        metrics.cluster = cluster
        host.on_fenced_partition.append(cluster.partition_lost)
        broker = Broker(
            s,
            catalog,
            logs,
            groups,
            data,
            advertised_port=adv_port,
            placement=ClusterPlacement(cluster),
            topics=shared,
            endpoints=endpoints,
        )
        server = start_kafka_server(
            s,
            listening,
            broker,
            groups,
            data,
            metrics,
            credentials,
            acls,
            [
                PartitionAdmin(
                    s,
                    catalog,
                    logs,
                    data,
                    broker.placement,
                    authorizer=acls.authorizer,
                    shared=shared,
                    pool=pool,
                    journal=journal,
                ).handlers(),
                (
                    await ConfigAdmin.start(
                        s,
                        catalog,
                        data,
                        groups,
                        group_config_store,
                        shared_topics=shared,
                        authorizer=acls.authorizer,
                        nodes=lambda: [n.node_id for n in broker.placement.nodes()],
                    )
                ).handlers(),
            ],
        )
        await cluster.start()
        compaction.start()
        await serve_metrics(s, metrics, data)
        log.info(
            "kgc node %d listening on %s, cluster on %s, cache in %s",
            s.node_id,
            describe_listeners(listening, endpoints),
            redact_url(s.storage_url),
            s.data_dir,
        )
        app = cls(
            flusher=flusher,
            logs=logs,
            groups=groups,
            data=data,
            server=server,
            metrics=metrics,
            compaction=compaction,
            credentials=credentials,
        )
        app.cluster = cluster
        app.closers = [journal.close, shared.close, pool.close]
        app.authorizer = acls.authorizer
        if acl_store is not None:
            app.closers.insert(0, acl_store.close)
        return app

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
        await self.data.stop()
        await self.compaction.stop()
        self.groups.close()
        await self.flusher.stop()
        for close in self.closers:
            await close()
        self.logs.close_all()
        log.info("kgc stopped")


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# gc.set_threshold: young generation, then how many young collections per older one.
GC_THRESHOLDS = (10_000, 10, 10)


def tune_gc() -> None:
    """Collect less often than Python's default (see the module docstring)."""
    gc.set_threshold(*GC_THRESHOLDS)


async def freeze_when_loaded(groups: GroupRuntime) -> None:
    """``gc.freeze()`` once the offsets log is loaded: what start-up built stays (groups,
    offsets, the catalog, modules) and no collection scans it again. No ``gc.collect()``
    first: on a large heap it would pause the node for as long as the load took."""
    await groups.loaded.wait()
    gc.freeze()


async def serve(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT, then stop cleanly.

    The handlers go in before anything is opened: once the port accepts connections a
    supervisor may send SIGTERM at any moment, and that must be a clean stop (exit 0), not
    the signal's default action. A signal during start-up lets the start finish, then
    stops. A signal during the stop is logged and otherwise ignored (the flush cannot go
    faster); after the stop the signals stay ignored, because closing the loop would
    restore their default action and a late SIGTERM would then kill the process after
    "kgc stopped".
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    tune_gc()
    app = await App.start(settings)
    freezing = asyncio.ensure_future(freeze_when_loaded(app.groups))
    await stop.wait()
    freezing.cancel()
    log.info("shutting down")
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, log.info, "already shutting down")
    try:
        await app.stop()
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)


def run(settings: Settings) -> None:
    if settings.kgc_workers > 1:  # a supervisor of worker processes (coordinator/workers)
        from coordinator.workers.supervisor import supervise

        supervise(settings)
        return
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(settings))
    else:
        uvloop.run(serve(settings))
