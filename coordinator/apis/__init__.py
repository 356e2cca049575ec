"""Every Kafka API kgc serves, in one table: its versions, its handler, its authorization.

How this works: ``API_TABLE`` maps each API key to an ``Api``: the version range kgc
advertises (and accepts: a request outside it closes the connection, as Kafka does), the
factory of its handler (which part of the node answers it, ``parts.Parts``), how its
handler is authorized (a check beside the handler in its family module, bound in front of
it) and Kafka's authorization decision in words (what KafkaApis asks the authorizer).
``build(parts)`` makes the ``Dispatcher`` the transport routes through: one dict lookup
and one pre-bound call per request. Adding an API is one entry here and one handler.

The ranges are Kafka 4.x's, cut where kgc deliberately stops (topic-id-based versions,
OffsetCommit/OffsetFetch v10 among them, are served because Metadata reports topic ids).
ConsumerGroupHeartbeat and ConsumerGroupDescribe serve KIP-848 consumer groups beside the
classic APIs, ShareGroupHeartbeat and ShareGroupDescribe KIP-932 share groups. The group,
offset and data-plane APIs (and CreateTopics/DeleteTopics) also serve the versions Kafka 4 dropped (KIP-896) from Kafka 3.9's first one, so clients from
before Kafka 0.11 work.

The families: ``groups.py`` (the group coordinator's 13 APIs), ``data.py`` (Produce, Fetch,
ListOffsets, InitProducerId, WriteTxnMarkers, DescribeProducers), ``topics.py`` (Metadata, Create/DeleteTopics),
``cluster.py`` (ApiVersions, FindCoordinator, SASL), ``partitions.py`` (CreatePartitions,
DeleteRecords, DescribeCluster, DescribeLogDirs), ``configs.py``, ``acls.py``,
``scram.py``; ``authorize.py`` holds what their checks share; ``leaders.py`` adds the
leader hints (KIP-951) to Produce, Fetch, ShareFetch and ShareAcknowledge answers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from coordinator.apis import (
    cluster,
    data,
    groups,
    history,
    share,
    streams,
    topics,
    transactions,
)
from coordinator.apis.authorize import ApiAuthorizer, Check
from coordinator.apis.leaders import with_leader_hints
from coordinator.apis.parts import Factory, MissingPart, Parts, need
from coordinator.server.dispatch import Dispatcher
from coordinator.server.handler import Handler
from protocol.framing import API_VERSIONS_KEY
from protocol.messages import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    alter_share_group_offsets,
    alter_user_scram_credentials,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_share_group_offsets,
    delete_share_group_state,
    delete_topics,
    describe_acls,
    describe_cluster,
    describe_configs,
    describe_group_history,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_share_group_offsets,
    describe_transactions,
    describe_user_scram_credentials,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    initialize_share_group_state,
    join_group,
    leave_group,
    list_config_resources,
    list_groups,
    list_offsets,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    produce,
    read_share_group_state,
    read_share_group_state_summary,
    sasl_authenticate,
    sasl_handshake,
    share_acknowledge,
    share_fetch,
    share_group_describe,
    share_group_heartbeat,
    streams_group_describe,
    streams_group_heartbeat,
    streams_group_topology_description_update,
    sync_group,
    txn_offset_commit,
    write_share_group_state,
    write_txn_markers,
)

__all__ = [
    "API_TABLE",
    "SUPPORTED",
    "Api",
    "Parts",
    "authorized",
    "before_authentication",
    "build",
    "checked",
    "dispatcher",
    "handlers",
    "in_handler",
    "read_group",
]

# (checks, handler) -> the handler with its authorization in front.
Authorize = Callable[[ApiAuthorizer, Handler], Handler]


def checked(check: Check) -> Authorize:
    """Authorized by ``check`` (a function beside the handler) before the handler runs."""
    return lambda checks, handler: checks.bind(check, handler)


def read_group(checks: ApiAuthorizer, handler: Handler) -> Handler:
    """READ on the request's group, remembered per connection (every heartbeat's check)."""
    return checks.group_read(handler)


def in_handler(checks: ApiAuthorizer, handler: Handler) -> Handler:
    """The handler authorizes itself (where in the request a check falls shapes the
    answer); bound only to count its denials under its API."""
    return checks.counted(handler)


def before_authentication(checks: ApiAuthorizer, handler: Handler) -> Handler:
    """Answered before anyone is known, as in Kafka: nothing to check."""
    return handler


@dataclass(frozen=True, slots=True)
class Api:
    versions: tuple[int, int]  # (min, max) advertised
    # None for ApiVersions alone: ``dispatcher`` answers it from what the others serve.
    handler: Factory | None
    authorize: Authorize
    # What KafkaApis asks the authorizer, "OPERATION RESOURCE_TYPE" each (none: before
    # authentication).
    acl: tuple[str, ...]


_shard = groups.on_shard

API_TABLE: dict[int, Api] = {
    # Kafka 3.9's ranges below Kafka 4's (KIP-896): magic 0/1 message sets for Produce
    # v0-2 and Fetch v0-3, ListOffsets v0's offset lists (dataplane/legacy.py).
    produce.API_KEY: Api(
        (0, 12),
        with_leader_hints(produce.API_KEY, lambda p: need(p.data, "data").produce),
        checked(data.authorize_produce),
        ("WRITE TRANSACTIONAL_ID", "WRITE TOPIC"),
    ),
    fetch.API_KEY: Api(
        (0, 17),
        with_leader_hints(fetch.API_KEY, lambda p: need(p.data, "data").fetch),
        checked(data.authorize_fetch),
        ("READ TOPIC",),
    ),
    list_offsets.API_KEY: Api(
        (0, 10),
        lambda p: need(p.data, "data").list_offsets,
        checked(data.authorize_list_offsets),
        ("DESCRIBE TOPIC",),
    ),
    metadata.API_KEY: Api(
        (0, 12),
        lambda p: need(p.broker, "broker").metadata,
        checked(topics.authorize_metadata),
        ("DESCRIBE TOPIC", "CREATE CLUSTER", "CREATE TOPIC", "DESCRIBE CLUSTER"),
    ),
    offset_commit.API_KEY: Api(
        (0, 10),
        _shard(lambda s: s.offset_commit),
        checked(groups.authorize_offset_commit),
        ("READ GROUP", "READ TOPIC"),
    ),
    offset_fetch.API_KEY: Api(
        (0, 10),
        _shard(lambda s: s.offset_fetch),
        checked(groups.authorize_offset_fetch),
        ("DESCRIBE GROUP", "DESCRIBE TOPIC"),
    ),
    find_coordinator.API_KEY: Api(
        (0, 6),
        cluster.find_coordinator_handler,
        checked(cluster.authorize_find_coordinator),
        ("DESCRIBE GROUP", "DESCRIBE TRANSACTIONAL_ID"),
    ),
    join_group.API_KEY: Api((0, 9), _shard(lambda s: s.join_group), read_group, ("READ GROUP",)),
    heartbeat.API_KEY: Api((0, 4), _shard(lambda s: s.heartbeat), read_group, ("READ GROUP",)),
    leave_group.API_KEY: Api((0, 5), _shard(lambda s: s.leave_group), read_group, ("READ GROUP",)),
    sync_group.API_KEY: Api((0, 5), groups.sync_group_handler, read_group, ("READ GROUP",)),
    describe_groups.API_KEY: Api(
        (0, 6),
        _shard(lambda s: s.describe_groups),
        checked(groups.authorize_describe_groups),
        ("DESCRIBE GROUP",),
    ),
    list_groups.API_KEY: Api(
        (0, 5),
        _shard(lambda s: s.list_groups),
        checked(groups.authorize_list_groups),
        ("DESCRIBE CLUSTER", "DESCRIBE GROUP"),
    ),
    sasl_handshake.API_KEY: Api((0, 1), cluster.sasl_handshake_handler, before_authentication, ()),
    api_versions.API_KEY: Api((0, 4), None, before_authentication, ()),
    create_topics.API_KEY: Api(
        (0, 7),
        lambda p: need(p.broker, "broker").create_topics,
        checked(topics.authorize_create_topics),
        ("CREATE CLUSTER", "CREATE TOPIC"),
    ),
    delete_topics.API_KEY: Api(
        (0, 6),
        lambda p: need(p.broker, "broker").delete_topics,
        checked(topics.authorize_delete_topics),
        ("DELETE TOPIC",),
    ),
    # With a transactional id, the transaction coordinator's; without, the data plane's.
    init_producer_id.API_KEY: Api(
        (0, 5),
        transactions.init_producer_id_handler,
        checked(data.authorize_init_producer_id),
        ("WRITE TRANSACTIONAL_ID", "IDEMPOTENT_WRITE CLUSTER", "WRITE TOPIC"),
    ),
    write_txn_markers.API_KEY: Api(
        (1, 2),
        lambda p: need(p.data, "data").txn.write_txn_markers,
        checked(data.authorize_write_txn_markers),
        ("ALTER CLUSTER", "CLUSTER_ACTION CLUSTER"),
    ),
    describe_producers.API_KEY: Api(
        (0, 0),
        lambda p: need(p.data, "data").txn.describe_producers,
        checked(data.authorize_describe_producers),
        ("READ TOPIC",),
    ),
    # The transaction coordinator (AddPartitionsToTxn v4 is the brokers' verify-only form,
    # v5 TV2's add by another node's leader); each authorizes in its handler.
    add_partitions_to_txn.API_KEY: Api(
        (0, 5),
        transactions.handler("add_partitions_to_txn"),
        in_handler,
        ("WRITE TRANSACTIONAL_ID", "WRITE TOPIC", "CLUSTER_ACTION CLUSTER"),
    ),
    add_offsets_to_txn.API_KEY: Api(
        (0, 4),
        transactions.handler("add_offsets_to_txn"),
        in_handler,
        ("WRITE TRANSACTIONAL_ID", "READ GROUP"),
    ),
    # EndTxn v5 is TV2's: clients send it once transaction.version 2 is finalized.
    end_txn.API_KEY: Api(
        (0, 5), transactions.handler("end_txn"), in_handler, ("WRITE TRANSACTIONAL_ID",)
    ),
    describe_transactions.API_KEY: Api(
        (0, 0),
        transactions.handler("describe_transactions"),
        in_handler,
        ("DESCRIBE TRANSACTIONAL_ID", "DESCRIBE TOPIC"),
    ),
    list_transactions.API_KEY: Api(
        (0, 2),
        transactions.handler("list_transactions"),
        in_handler,
        ("DESCRIBE TRANSACTIONAL_ID",),
    ),
    txn_offset_commit.API_KEY: Api(
        (0, 5),
        groups.txn_offset_commit_handler,
        checked(groups.authorize_txn_offset_commit),
        ("WRITE TRANSACTIONAL_ID", "READ GROUP", "READ TOPIC"),
    ),
    delete_groups.API_KEY: Api(
        (0, 3),
        groups.delete_groups_handler,
        checked(groups.authorize_delete_groups),
        ("DELETE GROUP",),
    ),
    sasl_authenticate.API_KEY: Api(
        (0, 2), cluster.sasl_authenticate_handler, before_authentication, ()
    ),
    offset_delete.API_KEY: Api(
        (0, 0),
        _shard(lambda s: s.offset_delete),
        checked(groups.authorize_offset_delete),
        ("DELETE GROUP", "READ TOPIC"),
    ),
    consumer_group_heartbeat.API_KEY: Api(
        (0, 1),
        _shard(lambda s: s.consumer_group_heartbeat),
        checked(groups.authorize_consumer_group_heartbeat),
        ("READ GROUP", "DESCRIBE TOPIC"),
    ),
    consumer_group_describe.API_KEY: Api(
        (0, 1),
        _shard(lambda s: s.consumer_group_describe),
        checked(groups.authorize_consumer_group_describe),
        ("DESCRIBE GROUP",),
    ),
    # KIP-1071 streams groups: v1 adds the topology description flag and the int64
    # acceptable recovery lag (Kafka 4.4).
    streams_group_heartbeat.API_KEY: Api(
        (0, 1),
        streams.streams_group_heartbeat_handler,
        checked(streams.authorize_streams_group_heartbeat),
        ("READ GROUP", "DESCRIBE TOPIC", "CREATE CLUSTER", "CREATE TOPIC"),
    ),
    streams_group_describe.API_KEY: Api(
        (0, 1),
        _shard(lambda s: s.streams_group_describe),
        checked(streams.authorize_streams_group_describe),
        ("DESCRIBE GROUP", "DESCRIBE TOPIC"),
    ),
    # KIP-1331: as Kafka 4.4 without a topology description plugin (its default), every
    # push is refused (coordinator/apis/streams.py).
    streams_group_topology_description_update.API_KEY: Api(
        (0, 0),
        streams.streams_group_topology_description_update_handler,
        checked(streams.authorize_streams_group_topology_description_update),
        ("READ GROUP",),
    ),
    # Share groups (KIP-932): Kafka 4.x serves v1 only (v0 was 4.0's early access).
    share_group_heartbeat.API_KEY: Api(
        (1, 1),
        groups.share_group_heartbeat_handler,
        checked(groups.authorize_share_group_heartbeat),
        ("READ GROUP", "DESCRIBE TOPIC"),
    ),
    share_group_describe.API_KEY: Api(
        (1, 1),
        _shard(lambda s: s.share_group_describe),
        checked(groups.authorize_share_group_describe),
        ("DESCRIBE GROUP", "DESCRIBE TOPIC"),
    ),
    describe_user_scram_credentials.API_KEY: Api(
        (0, 0),
        lambda p: need(p.scram, "scram").describe_user_scram_credentials,
        in_handler,
        ("DESCRIBE CLUSTER",),
    ),
    alter_user_scram_credentials.API_KEY: Api(
        (0, 0),
        lambda p: need(p.scram, "scram").alter_user_scram_credentials,
        in_handler,
        ("ALTER CLUSTER",),
    ),
    # Kafka 4 serves the ACL APIs from v1 (v0 knew only LITERAL patterns).
    describe_acls.API_KEY: Api(
        (1, 3), lambda p: need(p.acls, "acls").describe_acls, in_handler, ("DESCRIBE CLUSTER",)
    ),
    create_acls.API_KEY: Api(
        (1, 3), lambda p: need(p.acls, "acls").create_acls, in_handler, ("ALTER CLUSTER",)
    ),
    delete_acls.API_KEY: Api(
        (1, 3), lambda p: need(p.acls, "acls").delete_acls, in_handler, ("ALTER CLUSTER",)
    ),
    # The admin APIs tools call, at Kafka 4.x's ranges.
    describe_configs.API_KEY: Api(
        (1, 4),
        lambda p: need(p.configs, "configs").describe_configs,
        in_handler,
        ("DESCRIBE_CONFIGS TOPIC", "DESCRIBE_CONFIGS GROUP", "DESCRIBE_CONFIGS CLUSTER"),
    ),
    alter_configs.API_KEY: Api(
        (0, 2),
        lambda p: need(p.configs, "configs").alter_configs,
        in_handler,
        ("ALTER_CONFIGS TOPIC", "ALTER_CONFIGS GROUP", "ALTER_CONFIGS CLUSTER"),
    ),
    incremental_alter_configs.API_KEY: Api(
        (0, 1),
        lambda p: need(p.configs, "configs").incremental_alter_configs,
        in_handler,
        ("ALTER_CONFIGS TOPIC", "ALTER_CONFIGS GROUP", "ALTER_CONFIGS CLUSTER"),
    ),
    create_partitions.API_KEY: Api(
        (0, 3),
        lambda p: need(p.partitions, "partitions").create_partitions,
        in_handler,
        ("ALTER TOPIC",),
    ),
    delete_records.API_KEY: Api(
        (0, 2),
        lambda p: need(p.partitions, "partitions").delete_records,
        in_handler,
        ("DELETE TOPIC",),
    ),
    describe_cluster.API_KEY: Api(
        (0, 2),
        lambda p: need(p.partitions, "partitions").describe_cluster,
        in_handler,
        ("DESCRIBE CLUSTER",),
    ),
    describe_log_dirs.API_KEY: Api(
        (1, 5),
        lambda p: need(p.partitions, "partitions").describe_log_dirs,
        in_handler,
        ("DESCRIBE CLUSTER",),
    ),
    # kafka-configs asks which groups have configs (KIP-1142; v0 was
    # ListClientMetricsResources).
    list_config_resources.API_KEY: Api(
        (0, 1),
        lambda p: need(p.configs, "configs").list_config_resources,
        in_handler,
        ("DESCRIBE_CONFIGS CLUSTER",),
    ),
    # Share partitions (KIP-932): v1-v2 as Kafka 4.4 (v0 was 4.0's early access, removed).
    share_fetch.API_KEY: Api(
        (1, 2),
        with_leader_hints(share_fetch.API_KEY, share.share_fetch_handler),
        in_handler,
        ("READ GROUP", "READ TOPIC"),
    ),
    share_acknowledge.API_KEY: Api(
        (1, 2),
        with_leader_hints(share_acknowledge.API_KEY, share.share_acknowledge_handler),
        in_handler,
        ("READ GROUP", "READ TOPIC"),
    ),
    describe_share_group_offsets.API_KEY: Api(
        (0, 1),
        share.describe_share_group_offsets_handler,
        in_handler,
        ("DESCRIBE GROUP", "DESCRIBE TOPIC"),
    ),
    alter_share_group_offsets.API_KEY: Api(
        (0, 0), share.alter_share_group_offsets_handler, in_handler, ("READ GROUP", "READ TOPIC")
    ),
    delete_share_group_offsets.API_KEY: Api(
        (0, 0),
        share.delete_share_group_offsets_handler,
        in_handler,
        ("DELETE GROUP", "READ TOPIC"),
    ),
    # The share coordinator's inter-broker APIs (Kafka 4.4's versions), CLUSTER_ACTION:
    # cluster nodes reach the holder of a __share_group_state partition through them.
    initialize_share_group_state.API_KEY: Api(
        (0, 0),
        share.share_state_handler("initialize_share_group_state"),
        checked(share.authorize_share_state),
        ("CLUSTER_ACTION CLUSTER",),
    ),
    read_share_group_state.API_KEY: Api(
        (0, 0),
        share.share_state_handler("read_share_group_state"),
        checked(share.authorize_share_state),
        ("CLUSTER_ACTION CLUSTER",),
    ),
    write_share_group_state.API_KEY: Api(
        (0, 1),
        share.share_state_handler("write_share_group_state"),
        checked(share.authorize_share_state),
        ("CLUSTER_ACTION CLUSTER",),
    ),
    delete_share_group_state.API_KEY: Api(
        (0, 0),
        share.share_state_handler("delete_share_group_state"),
        checked(share.authorize_share_state),
        ("CLUSTER_ACTION CLUSTER",),
    ),
    read_share_group_state_summary.API_KEY: Api(
        (0, 1),
        share.share_state_handler("read_share_group_state_summary"),
        checked(share.authorize_share_state),
        ("CLUSTER_ACTION CLUSTER",),
    ),
    # kgc's own: a group's history (kept for offsets.history.retention.ms), from its
    # coordinator; announced only where history is kept.
    describe_group_history.API_KEY: Api(
        (0, 0),
        history.describe_group_history_handler,
        checked(history.authorize_describe_group_history),
        ("DESCRIBE GROUP", "DESCRIBE TOPIC"),
    ),
}

# APIs a node serves only with a feature on: without their part they are not announced.
OPTIONAL: frozenset[int] = frozenset((describe_group_history.API_KEY,))

# api key -> (min, max) advertised.
SUPPORTED: dict[int, tuple[int, int]] = {k: api.versions for k, api in API_TABLE.items()}


def handlers(parts: Parts) -> dict[int, Handler]:
    """The handler of every API whose part is among ``parts``, authorization bound in."""
    out: dict[int, Handler] = {}
    for key, api in API_TABLE.items():
        if api.handler is None:
            continue  # ApiVersions: made by ``dispatcher``, from what the others serve
        try:
            handler = api.handler(parts)
        except MissingPart:
            continue
        out[key] = handler if parts.checks is None else api.authorize(parts.checks, handler)
    return out


def authorized(checks: ApiAuthorizer, table: Mapping[int, Handler]) -> dict[int, Handler]:
    """``table``'s handlers with each API's authorization in front (tests: stand-ins).
    Fails closed: an API the table does not know has no check, and is refused."""
    unchecked = sorted(set(table) - set(API_TABLE))
    if unchecked:
        raise ValueError(f"api keys served without an authorization check: {unchecked}")
    return {key: API_TABLE[key].authorize(checks, h) for key, h in table.items()}


def dispatcher(*tables: Mapping[int, Handler], transaction_version: int = 1) -> Dispatcher:
    """The dispatcher of these handlers (an API key may have one only), with ApiVersions
    advertising exactly them, at the table's versions (and ``transaction.version`` as a
    finalized feature once it is 2)."""
    merged: dict[int, Handler] = {}
    for table in tables:
        for key, handler in table.items():
            if key in merged or key == API_VERSIONS_KEY:
                raise ValueError(f"api key {key} has two handlers")
            merged[key] = handler
    supported = {k: v for k, v in SUPPORTED.items() if k in merged or k == API_VERSIONS_KEY}
    merged[API_VERSIONS_KEY] = cluster.ApiVersions(supported, transaction_version)
    return Dispatcher(merged, supported)


def build(parts: Parts, transaction_version: int = 1) -> Dispatcher:
    """A node's dispatcher: every API in the table answered by ``parts``. Start-up fails
    here if one lacks its part: an advertised API would have no handler."""
    table = handlers(parts)
    missing = sorted(set(API_TABLE) - set(table) - {API_VERSIONS_KEY} - OPTIONAL)
    if missing:
        raise ValueError(f"api keys without a handler: {missing}")
    return dispatcher(table, transaction_version=transaction_version)
