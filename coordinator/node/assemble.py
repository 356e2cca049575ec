"""The one build order of a running kgc, for every deployment.

How this works: ``assemble(settings, deployment)`` builds every part once, in dependency
order, and gives each what it uses when it is constructed. A deployment (``embedded``: one
process on a data directory; ``cluster``: a node over PostgreSQL; ``workers.worker``: one
worker process of a kgc.workers node) supplies what differs between them -- where the
stores and logs live, which partitions this process serves, who leads the others -- and
nothing else. The steps:

1. the TLS contexts of SSL/SASL_SSL listeners, before anything is opened:
   a certificate that does not load stops start-up before a file is touched;
2. the stores (``Deployment.open_stores``), whose first act is to take the data
   directory's lock (``lock_data_dir``), before anything there is read: the flusher and the ``LogManager``,
   the topic catalog, the SCRAM credentials, the ACLs, the group configs;
3. the logs this process serves opened (recovered if the last stop was not clean), and the
   flusher started;
4. the group core (``GroupShard``), the metrics (which read the shard, the logs, the
   flusher and the cleaners at scrape time) and the group runtime (which replays the
   offsets log in the background, answering COORDINATOR_LOAD_IN_PROGRESS meanwhile);
5. the data plane, then the deployment's partitions handed to both (``serve_partitions``);
6. the listening sockets, one set per listener (Kafka's ``listeners``): a port is known
   once bound, and the broker advertises each listener's (unless ``advertised.listeners``
   says otherwise). In cluster mode this comes before any lease is taken: until its
   leases are taken and loaded, the node's answers send clients to the owners;
7. who leads what (``Deployment.placement``), the broker, the API handlers (the broker's,
   the group runtime's, the data plane's, the SCRAM and ACL admin APIs, the partition and
   config admin APIs), each wrapped by its authorization check, and the server accepting;
8. the deployment's background work (``Deployment.started``: cluster membership, the
   workers' shared-file poll), compaction, and the metrics endpoint.

A refusal to start names the setting and its value in one line (``SettingRefused``): the
listeners' (``listeners`` or ``port``), ``metrics.port``, ``data.dir`` (locked by another
process, not a usable directory), the TLS files (``tls_contexts``), ``storage.url``.

A background task (``storage.local.compaction.Compaction``) runs the log cleaner on compacted logs in bounded steps.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from coordinator import apis, topic_configs
from coordinator.apis.acls import AclAdmin, acl_security
from coordinator.apis.authorize import ApiAuthorizer, cluster_authorize
from coordinator.apis.configs import ConfigAdmin
from coordinator.apis.partitions import PartitionAdmin
from coordinator.apis.parts import Parts, need
from coordinator.apis.scram import ScramAdmin
from coordinator.apis.topics import Broker
from coordinator.catalog import CatalogTopics, TopicCatalog, TopicInfo
from coordinator.config import (
    Settings,
    offsets_log_config,
    share_state_log_config,
    txn_state_log_config,
)
from coordinator.config.log_configs import history_log_config
from coordinator.dataplane import DataPlane
from coordinator.dataplane.offsets_topic import OffsetsTopic, offsets_topic_id
from coordinator.dataplane.producers import ClusterProducerIds
from coordinator.group.shard import GroupConfig, GroupShard
from coordinator.history import HISTORY_TOPIC
from coordinator.history.status import StatusSettings
from coordinator.history.store import HistoryLog
from coordinator.metrics import Metrics
from coordinator.node import Node
from coordinator.placement import Placement, advertised_endpoints
from coordinator.runtime import GroupRuntime, TxnRuntime
from coordinator.runtime import history_writers as writers
from coordinator.runtime.older_history import OlderHistory
from coordinator.runtime.txn_runtime import InProcessMarkers, ProducerIdSpare
from coordinator.security.acl import Authorizer
from coordinator.security.sasl import attach_sasl
from coordinator.server.listener import (
    KafkaServer,
    Listening,
    TlsContexts,
    describe_listeners,
    listen_all,
    tls_contexts,
)
from coordinator.share.admin import ShareAdmin
from coordinator.share.coordinator import ShareCoordinator
from coordinator.share.dlq import DeadLetterWriter
from coordinator.share.leader import ShareLeader, ShareLeaderConfig
from coordinator.share.requests import ShareRequests
from coordinator.share.sessions import ShareSessionCache
from coordinator.share.state_apis import ShareStateApis
from coordinator.share.state_shard import SHARE_STATE_TOPIC
from coordinator.stores import (
    AclStore,
    ClusterView,
    GroupConfigStore,
    ScramCredentialStore,
    TopicStore,
)
from coordinator.txn.coordinator import TransactionCoordinator, TxnConfig
from coordinator.txn.records import TRANSACTION_STATE_TOPIC
from coordinator.txn.verify import CoordinatorVerifier
from storage.interface import wall_clock_ms
from storage.local.compaction import Compaction
from storage.local.durability import Flusher
from storage.local.log import LogConfig
from storage.local.manager import DataDirLockedError, LogManager
from storage.records import OFFSETS_TOPIC

if TYPE_CHECKING:
    from coordinator.cluster import Cluster  # imports asyncpg: cluster mode only
    from coordinator.cluster.peers import PeerClient
    from coordinator.cluster.txn_channel import Leaders
    from storage.postgres.journal import PgJournal

log = logging.getLogger("kgc")


def log_config_for(
    settings: Settings, catalog: TopicCatalog, topic: str, partition: int
) -> LogConfig | None:
    """A partition's log settings at start-up; None leaves an offline topic unopened."""
    if topic == OFFSETS_TOPIC:
        return offsets_log_config(settings)
    if topic == SHARE_STATE_TOPIC:
        return share_state_log_config(settings)
    if topic == TRANSACTION_STATE_TOPIC:
        return txn_state_log_config(settings)
    if topic == HISTORY_TOPIC:
        return history_log_config(settings)
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


def history_enabled(s: Settings) -> bool:
    """Whether groups' history is kept: ``offsets.history.retention.ms`` > 0 (on one node
    or its workers in ``__kgc_group_history``; in a cluster in ``kgc_group_history``, made
    by the cluster node, ``coordinator.node.cluster``)."""
    return s.offsets_history_retention_ms > 0


def status_settings(s: Settings) -> StatusSettings:
    """How a partition's status is judged (``offsets.status.*``)."""
    return StatusSettings(s.offsets_status_window_commits, s.offsets_status_stop_ms)


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
        offsets_history=history_enabled(s),
        consumer_group_session_timeout_ms=s.group_consumer_session_timeout_ms,
        consumer_group_min_session_timeout_ms=s.group_consumer_min_session_timeout_ms,
        consumer_group_max_session_timeout_ms=s.group_consumer_max_session_timeout_ms,
        consumer_group_heartbeat_interval_ms=s.group_consumer_heartbeat_interval_ms,
        consumer_group_min_heartbeat_interval_ms=s.group_consumer_min_heartbeat_interval_ms,
        consumer_group_max_heartbeat_interval_ms=s.group_consumer_max_heartbeat_interval_ms,
        consumer_group_max_size=s.group_consumer_max_size,
        consumer_group_assignors=s.consumer_group_assignors,
        consumer_group_migration_policy=s.group_consumer_migration_policy,
        streams_group_session_timeout_ms=s.group_streams_session_timeout_ms,
        streams_group_heartbeat_interval_ms=s.group_streams_heartbeat_interval_ms,
        streams_group_max_size=s.group_streams_max_size,
        streams_group_num_standby_replicas=s.group_streams_num_standby_replicas,
        streams_group_max_standby_replicas=s.group_streams_max_standby_replicas,
        streams_group_initial_rebalance_delay_ms=s.group_streams_initial_rebalance_delay_ms,
        streams_group_assignment_interval_ms=s.group_streams_assignment_interval_ms,
        streams_group_rack_aware_assignment_tags=s.streams_rack_aware_assignment_tags,
        streams_group_task_offset_interval_ms=s.group_streams_task_offset_interval_ms,
        streams_group_acceptable_recovery_lag=s.group_streams_acceptable_recovery_lag,
        share_group_session_timeout_ms=s.group_share_session_timeout_ms,
        share_group_min_session_timeout_ms=s.group_share_min_session_timeout_ms,
        share_group_max_session_timeout_ms=s.group_share_max_session_timeout_ms,
        share_group_heartbeat_interval_ms=s.group_share_heartbeat_interval_ms,
        share_group_min_heartbeat_interval_ms=s.group_share_min_heartbeat_interval_ms,
        share_group_max_heartbeat_interval_ms=s.group_share_max_heartbeat_interval_ms,
        share_group_max_size=s.group_share_max_size,
    )


def txn_config(s: Settings) -> TxnConfig:
    return TxnConfig(
        transaction_max_timeout_ms=s.transaction_max_timeout_ms,
        transaction_version=s.transaction_version,
        transaction_state_log_num_partitions=s.transaction_state_log_num_partitions,
        offsets_topic_num_partitions=s.offsets_topic_num_partitions,
        transactional_id_expiration_ms=s.transactional_id_expiration_ms,
        transaction_abort_timed_out_transaction_cleanup_interval_ms=(
            s.transaction_abort_timed_out_transaction_cleanup_interval_ms
        ),
        transaction_remove_expired_transaction_cleanup_interval_ms=(
            s.transaction_remove_expired_transaction_cleanup_interval_ms
        ),
    )


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
    metrics = Metrics(
        shard=shard,
        logs=logs,
        flusher=flusher,
        cleaners=compaction.cleaners.values,
        lag_max_series=s.metrics_lag_max_series,
        status=status_settings(s) if history_enabled(s) else None,
    )
    groups = GroupRuntime(
        shard,
        logs,
        flusher,
        num_partitions=s.offsets_topic_num_partitions,
        log_config=offsets_log_config(s),
        metrics=metrics,  # load times, rebalance durations
        hosted=hosted,
        # One history partition per process: worker i of a kgc.workers node writes its own.
        history=HistoryLog(logs, history_log_config(s), logs.worker or 0, status_settings(s))
        if history_enabled(s) and not s.cluster_mode
        else None,
    )
    if isinstance(groups.history, HistoryLog):
        groups.older_history = older_history(s, logs, groups.history)
    catalog.on_change.append(groups.topics_changed)
    return compaction, metrics, groups


def older_history(
    s: Settings, logs: LogManager, own_log: HistoryLog, clock: Callable[[], int] = wall_clock_ms
) -> OlderHistory:
    """The history partitions this process opened but does not write (left by a run with
    more workers), read beside its own (``runtime.older_history``); first records, in its
    own partition, that a run of ``kgc.workers`` writes it (``history.writers``: which
    workers a read asks). Raises the OSError of that write (start-up stops)."""
    cfg = history_log_config(s)
    own, plog = own_log.partition, own_log.plog
    writers.record(plog.dir, s.kgc_workers, clock(), plog.log_end_offset > 0)
    return OlderHistory(
        [
            HistoryLog(logs, cfg, p, status_settings(s))
            for topic, p in sorted(logs.partitions())
            if topic == HISTORY_TOPIC and p != own
        ],
        remove=lambda history: logs.remove_partition(HISTORY_TOPIC, history.partition),
    )


def kafka_server(
    s: Settings,
    listening: Listening | list[Listening],
    parts: Parts,
    metrics: Metrics,
    authorizer: Authorizer | None = None,
) -> KafkaServer:
    """The server answering every API of the table (``coordinator.apis``) with ``parts``,
    each handler behind its authorization check when ``authorizer`` is given; not
    accepting yet."""
    if authorizer is not None:
        # Every API checks what Kafka's KafkaApis checks before its handler runs.
        catalog = need(parts.broker, "broker").catalog
        offsets_id = offsets_topic_id(s.cluster_id)

        def topic_name(topic_id: bytes) -> str | None:
            if topic_id == offsets_id:
                return OFFSETS_TOPIC
            info = catalog.by_id.get(topic_id)
            return None if info is None else info.name

        checks = parts.checks = ApiAuthorizer(authorizer, topic_name)
        metrics.count_denials(authorizer, lambda: checks.api_key)
    return KafkaServer(
        listening,
        apis.build(parts, transaction_version=s.transaction_version),
        max_request_size=s.socket_request_max_bytes,
        queued_max_requests=s.queued_max_requests,
        queued_max_request_bytes=s.queued_max_request_bytes,
        on_refused=metrics.on_refused,
        on_connection=metrics.on_connection,
        # Without an endpoint nobody reads the counters: skip the per-request hook then.
        on_request=metrics.on_request if s.metrics_port else None,
    )


class SettingRefused(OSError):
    """Start-up refused because of one setting: ``<setting> <value>: <why>``, one line (the
    CLI prints it after ``kgc: error:`` and exits 1)."""

    def __init__(self, setting: str, value: object, why: str) -> None:
        super().__init__(f"{setting} {value}: {why}")


def data_dir_refused(s: Settings, exc: OSError) -> SettingRefused:
    """The one line for a data directory that cannot be locked or used."""
    if isinstance(exc, DataDirLockedError):
        return SettingRefused("data.dir", s.data_dir, str(exc))
    why = f"cannot use it as the data directory: {(exc.strerror or str(exc)).lower()}"
    return SettingRefused("data.dir", s.data_dir, why)


def lock_data_dir(s: Settings, flusher: Flusher, worker: int | None = None) -> LogManager:
    """Step 2's first act: the ``LogManager`` takes the data directory's lock (worker i:
    ``.lock.w<i>``) before anything there is read, recovered or deleted."""
    try:
        return LogManager(s.data_dir, flusher=flusher, worker=worker)
    except OSError as exc:  # locked by another process, not a directory, not writable, ...
        raise data_dir_refused(s, exc) from exc


def listener_setting(s: Settings) -> tuple[str, object]:
    """The setting the listeners come from, and its value."""
    return ("listeners", s.listeners) if s.listeners is not None else ("port", s.port)


@dataclass
class Stores:
    """What a deployment opens first: the logs and the metadata stores."""

    flusher: Flusher
    logs: LogManager
    catalog: TopicCatalog
    credentials: ScramCredentialStore
    acls: AclStore | None  # None without authorizer.class.name
    group_configs: GroupConfigStore
    # Where producer ids come from when other processes take them too (None: this one's
    # own counter file).
    producer_ids: ClusterProducerIds | None = None
    # Cluster mode: where topics are created and deleted for the whole cluster, the
    # cluster's registered nodes and leases, and the journal in the database, whose leases
    # the reads of __consumer_offsets follow and whose trims DeleteRecords waits for.
    shared_topics: TopicStore | None = None
    cluster: ClusterView | None = None
    journal: PgJournal | None = None
    # Cluster mode: the inter-broker client to the other nodes (markers, verification).
    peers: PeerClient | None = None
    # Run after the parts stop, in order (database pools, journals, followers).
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


@dataclass
class Core:
    """The parts every deployment's partitions are handed to (``serve_partitions``)."""

    stores: Stores
    compaction: Compaction
    metrics: Metrics
    groups: GroupRuntime
    data: DataPlane
    # The share coordinator: share partitions' state in __share_group_state, the
    # persister the share groups and the share-partition leader use.
    share: ShareCoordinator
    # The transaction coordinator: transactional ids' state in __transaction_state.
    txn: TxnRuntime


class Deployment(Protocol):
    """What differs between the ways kgc runs; ``assemble`` calls these in its order."""

    # This process serves every partition from the start (False: only those handed to it).
    hosted: bool

    async def open_stores(self, s: Settings) -> Stores:
        """Step 2: the data directory's lock first, then the stores."""
        ...

    def open_logs(self, s: Settings, stores: Stores) -> None:
        """Step 3: open (and recover) the logs this process serves from the start."""
        ...

    def core_built(self, groups: GroupRuntime) -> None:
        """Step 4: start loading the offsets partitions served from the start, if any."""
        ...

    def serve_partitions(self, s: Settings, core: Core) -> None:
        """Step 5: hand this process's partitions to the group runtime and the data plane."""
        ...

    def placement(
        self, s: Settings, core: Core, endpoints: dict[str, tuple[str, int]], port: int
    ) -> tuple[Placement | None, int]:
        """Step 7: who leads what (None: this node leads everything) and the advertised
        port; ``port``: the first listener's bound port."""
        ...

    def broker_nodes(self, broker: Broker) -> Callable[[], list[int]] | None:
        """The node ids DescribeConfigs answers for (None: this node only)."""
        ...

    async def started(self, s: Settings, core: Core) -> None:
        """Step 8: the deployment's background work, once the server accepts."""
        ...

    def announce(self, s: Settings, listeners: str) -> None:
        """Log the start-up line, given the listeners it listens on."""
        ...

    def membership(self) -> Cluster | None:
        """Cluster mode's membership, which the node stops first (None otherwise)."""
        ...


def core_and_data(s: Settings, deployment: Deployment, stores: Stores) -> Core:
    """Steps 4 and 5: the group core and its runtime, the data plane, and this process's
    partitions handed to both."""
    compaction, metrics, groups = group_core(
        s, stores.catalog, stores.logs, stores.flusher, hosted=deployment.hosted
    )
    deployment.core_built(groups)
    # The transaction coordinator's core comes before the data plane, whose produce path
    # asks it (KIP-890 verification); its runtime after, with the data plane's producer ids.
    spare = ProducerIdSpare()
    txn_coordinator = TransactionCoordinator(txn_config(s), spare.take)
    group_verifier = CoordinatorVerifier(txn_coordinator.verify)
    if deployment.hosted:
        # TxnOffsetCommit asks it too: is the group's offsets partition in the transaction?
        groups.txn_verifier = group_verifier
    journal = stores.journal
    data = DataPlane(
        s,
        stores.catalog,
        stores.logs,
        stores.flusher,
        hosted=deployment.hosted,
        producer_ids=stores.producer_ids,
        retention_check_interval_ms=s.log_retention_check_interval_ms,
        # __consumer_offsets is read through the data plane (Burrow, kminion, decoders);
        # in cluster mode where this node holds the partition's lease, at its epoch.
        offsets_topic=OffsetsTopic(
            groups, s.cluster_id, lease_of=journal.lease_of if journal is not None else None
        ),
    )
    # The log's transactional duties: a transactional batch opening a transaction is
    # verified with this node's coordinator; __consumer_offsets markers go to the groups.
    data.txn.verify = CoordinatorVerifier(txn_coordinator.verify).verify
    data.txn.complete_transaction = groups.complete_transaction
    data.start()
    share = ShareCoordinator(
        stores.logs,
        stores.flusher,
        num_partitions=s.share_coordinator_state_topic_num_partitions,
        updates_per_snapshot=s.share_coordinator_snapshot_update_records_per_snapshot,
        log_config=share_state_log_config(s),
        hosted=deployment.hosted,
        topic_exists=stores.catalog.by_id.__contains__,
    )
    stores.catalog.on_change.append(share.topics_changed)
    if deployment.hosted:
        share.start()
    # Cluster mode too: the partitions held here (a moved log start trims the database's rows).
    share.start_pruning(s.share_coordinator_state_topic_prune_interval_ms)
    txn = TxnRuntime(
        txn_coordinator,
        stores.logs,
        stores.flusher,
        log_config=txn_state_log_config(s),
        markers=InProcessMarkers(data.txn.write_marker),
        producer_ids=data.producer_ids.allocate,
        spare=spare,
    )
    if deployment.hosted:
        txn.start(range(s.transaction_state_log_num_partitions))
        # TV2 (Produce v12+, TxnOffsetCommit v5): the leader and the group coordinator add
        # the partition to the transaction themselves, through the runtime (durable first).
        # Over several nodes the add goes to the id's coordinator (route_transactions).
        data.txn.add = txn.add_for_leader
        group_verifier.add_fn = txn.add_for_leader
    groups.share_persister = share  # share groups initialize their partitions' state
    core = Core(stores, compaction, metrics, groups, data, share, txn)
    deployment.serve_partitions(s, core)
    return core


def route_transactions(
    node_id: int, core: Core, leaders: Callable[[], Leaders | None], peers: PeerClient
) -> None:
    """Transactions over nodes (a cluster's, a kgc.workers node's workers) that each lead
    some partitions: markers to each partition's leader, AddPartitionsToTxn verification
    (produce and TxnOffsetCommit) at each transactional id's coordinator, both through the
    inter-broker client when that is another node (``cluster.txn_channel``). The caller
    starts the coordinator's partitions (``TxnRuntime.start``)."""
    from coordinator.cluster.txn_channel import ClusterMarkers, RoutedVerifier

    txn = core.txn
    txn.markers = ClusterMarkers(node_id, leaders, peers, core.data.txn.write_marker)
    verifier = RoutedVerifier(
        node_id,
        txn.coordinator.partition_for,
        leaders,
        txn.serves,
        peers,
        txn.verify,
        TRANSACTION_STATE_TOPIC,
    )
    core.data.txn.verify = verifier.verify
    core.groups.txn_verifier = verifier
    # TV2 (Produce v12+, TxnOffsetCommit v5): the leaders and group coordinators add
    # partitions themselves, through the id's coordinator (AddPartitionsToTxn v5 when it
    # is another node's).
    verifier.add_fn = txn.add_for_leader
    core.data.txn.add = verifier.add


async def listen_step(s: Settings, tls: TlsContexts) -> list[Listening]:
    """Step 6: every listener bound, or one line naming the listeners' setting."""
    try:
        return await listen_all(s, tls)
    except OSError as exc:  # the address is taken, the host has no such address, ...
        raise SettingRefused(*listener_setting(s), exc.strerror or str(exc)) from exc


def _partitions_of(catalog: TopicCatalog) -> Callable[[bytes], int | None]:
    """A topic's partition count by id (the share state APIs' metadata check)."""

    def count(topic_id: bytes) -> int | None:
        info = catalog.by_id.get(topic_id)
        return None if info is None or info.is_internal else info.num_partitions

    return count


def share_requests(s: Settings, core: Core) -> ShareRequests:
    """The share-partition leader (ShareFetch, ShareAcknowledge) over the share state."""
    config = ShareLeaderConfig(
        record_lock_duration_ms=s.group_share_record_lock_duration_ms,
        min_record_lock_duration_ms=s.group_share_min_record_lock_duration_ms,
        max_record_lock_duration_ms=s.group_share_max_record_lock_duration_ms,
        delivery_count_limit=s.group_share_delivery_count_limit,
        partition_max_record_locks=s.group_share_partition_max_record_locks,
        max_share_sessions=s.group_share_max_share_sessions,
    )
    catalog, data = core.stores.catalog, core.data

    def create_topic(name: str, configs: dict[str, str]) -> TopicInfo:
        info = catalog.create(name, s.num_partitions, configs)
        data.create_partitions(info)
        return info

    dead_letters = DeadLetterWriter(
        data,
        catalog,
        core.stores.group_configs,
        auto_create=s.errors_deadletterqueue_auto_create_topics_enable,
        prefix=s.errors_deadletterqueue_topic_name_prefix,
        # Cluster mode creates topics in the shared catalog, which this writer does not
        # reach: there a missing dead-letter topic is not created.
        create_topic=create_topic if core.stores.shared_topics is None else None,
        # Cluster mode: a dead-letter partition another node leads is written there.
        remote=lambda: core.share.remote,
    )
    leader = ShareLeader(
        config, core.share, data, catalog, core.stores.group_configs, dead_letters=dead_letters
    )
    sessions = ShareSessionCache(config.max_share_sessions)
    leader.on_event.append(core.metrics.on_share_event)
    core.metrics.share_sessions = lambda: len(sessions.sessions)
    return ShareRequests(leader, sessions)


async def api_server(
    s: Settings, deployment: Deployment, core: Core, acls: AclAdmin, listening: list[Listening]
) -> tuple[KafkaServer, dict[str, tuple[str, int]]]:
    """Step 7: who leads what, the broker, every API's handler behind its authorization
    check, SASL on its listeners; the server accepting, and each listener's advertised
    (host, port)."""
    stores, data, groups = core.stores, core.data, core.groups
    endpoints = advertised_endpoints(s, {li.name: li.port for li in listening})
    placement, advertised_port = deployment.placement(s, core, endpoints, listening[0].port)
    broker = Broker(
        s,
        stores.catalog,
        stores.logs,
        groups,
        data,
        advertised_port=advertised_port,
        placement=placement,
        topics=stores.shared_topics,
        endpoints=endpoints,
    )
    config_admin = await ConfigAdmin.start(
        s,
        stores.catalog,
        data,
        groups,
        stores.group_configs,
        shared_topics=stores.shared_topics,
        authorizer=acls.authorizer,
        nodes=deployment.broker_nodes(broker),
    )
    share = share_requests(s, core)
    parts = Parts(
        broker=broker,
        groups=groups,
        txn=core.txn,
        data=data,
        # CreatePartitions, DeleteRecords, DescribeCluster, DescribeLogDirs.
        partitions=PartitionAdmin(
            s,
            stores.catalog,
            stores.logs,
            data,
            broker.placement,
            authorizer=acls.authorizer,
            shared=stores.shared_topics,
            cluster=stores.cluster,
            journal=stores.journal,
        ),
        configs=config_admin,  # DescribeConfigs, AlterConfigs, IncrementalAlterConfigs
        acls=acls,
        scram=ScramAdmin(stores.credentials, cluster_authorize(acls.authorizer)),
        share=share,
        share_admin=ShareAdmin(
            core.share,
            data,
            stores.catalog,
            initialized=core.groups.shard.share.initialized_topics,
            groups=core.groups,
            latest=core.share.remote.latest if core.share.remote is not None else None,
        ),
        share_state=ShareStateApis(core.share, partitions_of=_partitions_of(stores.catalog)),
    )
    server = kafka_server(s, listening, parts, core.metrics, authorizer=acls.authorizer)
    # A share session ends with its connection, giving back its member's records.
    server.on_disconnect.append(share.connection_closed)
    attach_sasl(server, s, stores.credentials)
    core.metrics.watch(server)  # connections per listener, SASL authentications
    server.start()
    return server, endpoints


async def assemble(s: Settings, deployment: Deployment) -> Node:
    """Build and start every part of a node, in the order of the module docstring."""
    # Step 1: TLS before anything is opened, so a bad certificate stops start-up here.
    tls = tls_contexts(s)
    # Step 2: the data directory's lock, then the stores.
    stores = await deployment.open_stores(s)
    acls = acl_security(s, stores.acls)
    # Step 3: the logs this process serves from the start.
    deployment.open_logs(s, stores)
    stores.flusher.start()
    # Steps 4 and 5: the group core, the data plane, this process's partitions.
    core = core_and_data(s, deployment, stores)
    # Step 6: listen. In cluster mode before any lease is taken (``started``): until they
    # are taken and loaded, answers send clients to the owners.
    listening = await listen_step(s, tls)
    # Step 7: the broker, the API handlers, the server accepting.
    server, endpoints = await api_server(s, deployment, core, acls, listening)
    # Step 8: background work, the metrics endpoint.
    await deployment.started(s, core)
    core.compaction.start()
    cluster = deployment.membership()
    # The lag is measured in the partitions the data plane serves; both it and the
    # cluster membership are built after the metrics, which the group runtime reports to.
    core.metrics.follow(core.data, cluster)
    if s.metrics_port:
        try:
            port = await core.metrics.serve(s.host, s.metrics_port)
        except OSError as exc:
            why = f"cannot listen on {s.host}:{s.metrics_port}: {exc.strerror or exc}".lower()
            raise SettingRefused("metrics.port", s.metrics_port, why) from exc
        log.info("metrics on http://%s:%d/metrics", s.host, port)
    deployment.announce(s, describe_listeners(listening, endpoints))
    return Node(
        flusher=stores.flusher,
        logs=stores.logs,
        groups=core.groups,
        data=core.data,
        server=server,
        metrics=core.metrics,
        compaction=core.compaction,
        credentials=stores.credentials,
        authorizer=acls.authorizer,
        closers=stores.closers,
        cluster=cluster,
        stopping=[core.txn.stop],
    )
