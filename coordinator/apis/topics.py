"""The topic APIs: Metadata, CreateTopics, DeleteTopics, answered by the ``Broker``.

How this works: answers come from the topic catalog and the placement (which node leads
what). Metadata lists every partition's leader (a damaged partition's replica as offline,
``__consumer_offsets`` partitions whose load failed as leaderless) at the address of the
listener the request came on; ``__consumer_offsets`` is listed as Kafka lists it (an
internal topic, see ``dataplane/offsets_topic``) and is never created, deleted or grown as
a data topic. CreateTopics and DeleteTopics change the catalog and the data plane's
partitions (data first, so a crash in between is finished at the next start). Each API is
bound to its check below, KafkaApis': DESCRIBE on each topic named, CREATE on the cluster
or the topic, DELETE on each topic. The broker also knows where each group's coordinator
is (``cluster.py`` answers FindCoordinator from it).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections import Counter
from typing import TYPE_CHECKING, Any

from coordinator import topic_configs
from coordinator.apis.authorize import CLUSTER, ApiAuthorizer, append_topics, then
from coordinator.catalog import (
    TopicCatalog,
    TopicExistsError,
    TopicInfo,
    topic_name_error,
)
from coordinator.config import Settings
from coordinator.config_resources import kafka_topic_error
from coordinator.dataplane.offsets_topic import admin_refusal, offsets_topic_id
from coordinator.placement import (
    LocalPlacement,
    NodeAddress,
    Placement,
    advertised_address,
    endpoint,
    leader_of,
)
from coordinator.security.acl import AclOperation, ResourceType, all_operations
from coordinator.server.handler import ClientInfo, Deferred, Handler, HandlerResult
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader, encode_body
from protocol.messages import (
    create_topics,
    delete_topics,
    metadata,
)
from protocol.messages.create_topics import (
    CreatableTopic,
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from protocol.messages.delete_topics import (
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from protocol.messages.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from storage.records import OFFSETS_TOPIC

if TYPE_CHECKING:
    from coordinator.dataplane import DataPlane
    from coordinator.runtime import GroupRuntime
    from coordinator.stores import TopicStore
    from storage.interface import Logs

log = logging.getLogger("kgc.broker")


# Authorized-operations "not requested" marker (Integer.MIN_VALUE), as Kafka sends it.
AUTH_OPS_OMITTED = -2147483648


_NO_TOPIC_ID = bytes(16)


def with_authorized_operations(resp: MetadataResponse, req: MetadataRequest, version: int) -> None:
    """Metadata v8+ asked for authorized operations: every operation Kafka reports for the
    cluster (v8-10 only) and each topic, as Kafka answers without an authorizer."""
    if version <= 10 and req.include_cluster_authorized_operations:
        resp.cluster_authorized_operations = all_operations(ResourceType.CLUSTER)
    if req.include_topic_authorized_operations:
        for t in resp.topics:
            t.topic_authorized_operations = all_operations(ResourceType.TOPIC)


class Broker:
    def __init__(
        self,
        settings: Settings,
        catalog: TopicCatalog,
        logs: Logs,
        groups: GroupRuntime,
        data: DataPlane,
        *,
        advertised_port: int,
        placement: Placement | None = None,
        topics: TopicStore | None = None,
        endpoints: dict[str, tuple[str, int]] | None = None,
    ) -> None:
        """``advertised_port``: the port given to clients (the one bound unless configured);
        ``endpoints``: with several listeners, each one's advertised (host, port) by name.

        ``placement``: who leads what (default: this node leads everything); ``topics``: in
        cluster mode, where topics are created and deleted for the whole cluster.
        """
        self.settings = settings
        self.catalog = catalog
        self.logs = logs
        self.groups = groups
        self.data = data
        self.node_id = settings.node_id
        self.advertised_host, self.advertised_port = advertised_address(settings, advertised_port)
        # Metadata and FindCoordinator answer with the endpoint of the listener the
        # request came on (ClientInfo.listener).
        self.endpoints = endpoints or {
            settings.listener_specs[0].name: (self.advertised_host, self.advertised_port)
        }
        self.placement: Placement = placement or LocalPlacement(
            NodeAddress(
                self.node_id,
                self.advertised_host,
                self.advertised_port,
                settings.broker_rack,
                tuple((name, host, port) for name, (host, port) in self.endpoints.items()),
            )
        )
        self.shared_topics = topics
        self.offsets_topic_id = offsets_topic_id(settings.cluster_id)
        # Encoded Metadata bodies by (version, requested topics), valid for one catalog state.
        self._metadata_cache: dict[tuple[int, tuple[str, ...] | None, str], bytes] = {}
        self._metadata_cache_at: tuple[int, int] = (-1, 0)

    # -- Metadata
    def metadata(
        self, header: RequestHeader, req: MetadataRequest, client: ClientInfo
    ) -> MetadataResponse | bytes | Deferred:
        # Clients ask for the same topics over and over; answers only change with the catalog,
        # the placement (cluster mode), and when a partition's log is found damaged.
        state = (self.catalog.changes, self._damaged_logs() + (self.placement.version << 32))
        if self._metadata_cache_at != state:
            self._metadata_cache.clear()
            self._metadata_cache_at = state
        # Topics asked for by id are answered fresh: their names ("" from the Java client)
        # do not tell them apart.
        by_name = req.topics is not None and all(
            t.name is not None and t.topic_id == _NO_TOPIC_ID for t in req.topics
        )
        names = (
            tuple(t.name or "" for t in req.topics) if by_name and req.topics is not None else None
        )
        if header.api_version >= 8 and (
            req.include_cluster_authorized_operations or req.include_topic_authorized_operations
        ):
            # Admin describe calls (librdkafka's describe_cluster / describe_topics): rare,
            # answered fresh, with the operations (every one without an authorizer;
            # ``authorize_metadata`` puts the authorizer's in).
            resp = self._metadata(header, req, client.listener)
            if not isinstance(resp, Deferred):
                with_authorized_operations(resp, req, header.api_version)
            return resp
        cache_key = (header.api_version, names, client.listener)
        if (by_name or req.topics is None) and cache_key in self._metadata_cache:
            return self._metadata_cache[cache_key]
        resp = self._metadata(header, req, client.listener)
        if isinstance(resp, Deferred):
            return resp
        if (
            (by_name or req.topics is None)
            and self._metadata_cache_at == state
            and all(
                t.error_code == 0 and all(p.error_code == 0 for p in t.partitions)
                for t in resp.topics
            )
        ):
            # Answers with errors (no leader yet, an offline replica) are not kept: they
            # are what clients retry on, and must show the next change at once.
            if len(self._metadata_cache) > 1024:
                self._metadata_cache.clear()
            self._metadata_cache[cache_key] = encode_body(
                metadata.API_KEY, header.api_version, resp
            )
        return resp

    def _metadata(
        self, header: RequestHeader, req: MetadataRequest, listener: str
    ) -> MetadataResponse | Deferred:
        version = header.api_version
        names: list[str | bytes]  # a topic's name, or the unknown topic id asked for
        if req.topics is None or (version == 0 and not req.topics):
            names = [t.name for t in self.catalog.topics.values() if not t.is_internal]
            names.append(OFFSETS_TOPIC)  # Kafka lists its internal topics too
            auto_create = False
        else:
            names = []
            # As soon as one topic is asked for by id, Kafka looks up the ids only and
            # ignores every name (the Java client leaves them at "", not null).
            by_id = version >= 10 and any(t.topic_id != _NO_TOPIC_ID for t in req.topics)
            for t in req.topics:
                name: str | bytes
                if by_id and t.topic_id == _NO_TOPIC_ID:
                    continue
                if (by_id or t.name is None) and t.topic_id == self.offsets_topic_id:
                    name = OFFSETS_TOPIC
                elif by_id or t.name is None:
                    info = self.catalog.by_id.get(t.topic_id)
                    name = info.name if info else t.topic_id
                else:
                    name = t.name
                # Kafka answers each topic once, however often it is asked for.
                if name not in names:
                    names.append(name)
            auto_create = (
                self.settings.auto_create_topics_enable
                and not by_id
                and (version < 4 or req.allow_auto_topic_creation)
            )
        topics = []
        for name in names:
            if isinstance(name, bytes):  # Kafka names the id it does not know
                topics.append(
                    MetadataResponseTopic(
                        error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=name
                    )
                )
                continue
            if name == OFFSETS_TOPIC:
                topics.append(self._offsets_topic_metadata())
                continue
            info = self.catalog.get(name)
            if info is None:
                err = topic_name_error(name)
                if err is not None:
                    topics.append(
                        MetadataResponseTopic(error_code=ErrorCode.INVALID_TOPIC, name=name)
                    )
                    continue
                if auto_create and self.shared_topics is not None:
                    # Cluster mode: created in the database for every node; answered once
                    # committed (its partitions get leaders as nodes claim them).
                    return Deferred.task(self._metadata_after_create(header, req, name, listener))
                if auto_create:
                    try:
                        info = self.create_topic(name, self.settings.num_partitions, {})
                        log.info(
                            "auto-created topic %s with %d partitions", name, info.num_partitions
                        )
                    except TopicExistsError:  # kgc.workers: another worker created it just now
                        info = self.catalog.get(name)
                        if info is None:
                            raise
                else:
                    topics.append(
                        MetadataResponseTopic(
                            error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name
                        )
                    )
                    continue
            topics.append(self._topic_metadata(info))
        nodes = self.placement.nodes()
        # Each node as the request's listener reaches it; nodes without it are left out
        # (Kafka's getAliveBrokerNodes(listenerName)).
        brokers = []
        for n in nodes:
            address = endpoint(n, listener)
            if address is not None:
                brokers.append(
                    MetadataResponseBroker(
                        node_id=n.node_id, host=address[0], port=address[1], rack=n.rack
                    )
                )
        return MetadataResponse(
            throttle_time_ms=0,
            brokers=brokers,
            cluster_id=self.settings.cluster_id,
            # The lowest live node id stands for the controller (kgc has none: PostgreSQL
            # holds the cluster's state); clients only use it for admin requests.
            controller_id=min((n.node_id for n in nodes), default=-1),
            topics=topics,
            cluster_authorized_operations=AUTH_OPS_OMITTED,
        )

    async def _metadata_after_create(
        self, header: RequestHeader, req: MetadataRequest, name: str, listener: str
    ) -> MetadataResponse:
        assert self.shared_topics is not None
        try:
            await self.shared_topics.create(name, self.settings.num_partitions, {})
            log.info("auto-created topic %s with %d partitions", name, self.settings.num_partitions)
        except TopicExistsError:
            pass  # another node created it meanwhile
        except Exception as exc:
            log.error("auto-creating topic %s failed: %r", name, exc)
        resp = self._metadata(header, req, listener)
        if isinstance(resp, Deferred):  # still unknown here: answer it as unavailable
            return MetadataResponse(
                throttle_time_ms=0,
                brokers=[],
                cluster_id=self.settings.cluster_id,
                controller_id=-1,
                topics=[
                    MetadataResponseTopic(error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name)
                ],
                cluster_authorized_operations=AUTH_OPS_OMITTED,
            )
        return resp

    def _leader(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader id, leader epoch) of a partition; (-1, -1) while it has none."""
        return leader_of(self.placement, topic, partition)

    def _damaged_logs(self) -> int:
        return sum(1 for plog in self.logs.logs() if plog.damaged is not None)

    def _offsets_topic_metadata(self) -> MetadataResponseTopic:
        """``__consumer_offsets``: asked for by name (``kgc health`` does) or in all topics.

        A partition whose log is damaged, or whose load failed, is offline as Kafka reports
        a partition whose only replica's log directory failed: LEADER_NOT_AVAILABLE, no
        leader, this node among ``offline_replicas``.
        """
        groups = self.groups
        partitions = []
        for p in range(groups.num_partitions):
            leader, epoch = self._leader(OFFSETS_TOPIC, p)
            plog = groups.partitions.get(p)
            offline = leader == self.node_id and (
                (plog is not None and plog.damaged is not None) or groups.partition_failed(p)
            )
            if offline:
                leader = -1  # our replica is offline
            # No live holder (cluster mode, a failover under way): no replica to name, as
            # for a data topic's partition.
            replicas = [self.node_id] if offline else [] if leader == -1 else [leader]
            partitions.append(
                MetadataResponsePartition(
                    error_code=ErrorCode.LEADER_NOT_AVAILABLE if leader == -1 else 0,
                    partition_index=p,
                    leader_id=leader,
                    leader_epoch=epoch if leader != -1 else -1,
                    replica_nodes=replicas,
                    isr_nodes=[] if leader == -1 else replicas,
                    offline_replicas=replicas if offline else [],
                )
            )
        return MetadataResponseTopic(
            error_code=0,
            name=OFFSETS_TOPIC,
            topic_id=self.offsets_topic_id,
            is_internal=True,
            partitions=partitions,
            topic_authorized_operations=AUTH_OPS_OMITTED,
        )

    def _topic_metadata(self, info: TopicInfo) -> MetadataResponseTopic:
        if info.offline is not None:
            return self._offline_topic_metadata(info)
        partitions = []
        for p in range(info.num_partitions):
            leader, epoch = self._leader(info.name, p)
            if leader == self.node_id and not self.placement.serves(info.name, p):
                # Held here but still loading: Kafka names a leader only once it serves the
                # partition, and clients retry LEADER_NOT_AVAILABLE.
                leader = -1
            if leader == -1:
                partitions.append(
                    MetadataResponsePartition(
                        error_code=ErrorCode.LEADER_NOT_AVAILABLE,
                        partition_index=p,
                        leader_id=-1,
                        leader_epoch=-1,
                        replica_nodes=[],
                        isr_nodes=[],
                        offline_replicas=[],
                    )
                )
                continue
            plog = self.logs.get(info.name, p) if leader == self.node_id else None
            # A damaged topic partition is still served as far as its data plane can (reads
            # of the damaged batch answer KAFKA_STORAGE_ERROR); its replica is reported in
            # offline_replicas so that ``kgc health`` and operators see it.
            damaged = plog is not None and plog.damaged is not None
            partitions.append(
                MetadataResponsePartition(
                    error_code=0,
                    partition_index=p,
                    leader_id=leader,
                    leader_epoch=epoch,
                    replica_nodes=[leader],
                    isr_nodes=[leader],
                    offline_replicas=[leader] if damaged else [],
                )
            )
        return MetadataResponseTopic(
            error_code=0,
            name=info.name,
            topic_id=info.topic_id,
            is_internal=info.is_internal,
            partitions=partitions,
            topic_authorized_operations=AUTH_OPS_OMITTED,
        )

    def _offline_topic_metadata(self, info: TopicInfo) -> MetadataResponseTopic:
        """A topic whose catalog entry is invalid: its only replica is offline, no leader.

        Kafka's answer for a partition whose every replica is offline: LEADER_NOT_AVAILABLE,
        leader -1 (clients retry and write nothing); when even the partition count is
        unreadable, the topic-level LEADER_NOT_AVAILABLE.
        """
        node = self.node_id
        partitions = [
            MetadataResponsePartition(
                error_code=ErrorCode.LEADER_NOT_AVAILABLE,
                partition_index=p,
                leader_id=-1,
                leader_epoch=-1,
                replica_nodes=[node],
                isr_nodes=[],
                offline_replicas=[node],
            )
            for p in range(info.num_partitions)
        ]
        return MetadataResponseTopic(
            error_code=0 if partitions else ErrorCode.LEADER_NOT_AVAILABLE,
            name=info.name,
            topic_id=info.topic_id,
            is_internal=info.is_internal,
            partitions=partitions,
            topic_authorized_operations=AUTH_OPS_OMITTED,
        )

    # -- topics
    def create_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicInfo:
        info = self.catalog.create(name, num_partitions, configs)
        self.data.create_partitions(info)
        return info

    def create_topics(
        self, header: RequestHeader, req: CreateTopicsRequest, client: ClientInfo
    ) -> CreateTopicsResponse | Deferred:
        results = []
        shared: list[tuple[CreatableTopicResult, int, dict[str, str]]] = []
        # Kafka refuses a name asked for twice, once, and creates neither.
        counts = Counter(t.name for t in req.topics)
        duplicates: set[str] = set()
        for t in req.topics:
            if counts[t.name] > 1:
                if t.name not in duplicates:
                    duplicates.add(t.name)
                    results.append(
                        CreatableTopicResult(
                            name=t.name,
                            error_code=ErrorCode.INVALID_REQUEST,
                            error_message="Duplicate topic name.",
                            num_partitions=-1,
                            replication_factor=-1,
                        )
                    )
                continue
            res = CreatableTopicResult(
                name=t.name, error_message=None, num_partitions=-1, replication_factor=-1
            )
            results.append(res)
            raw_configs = {c.name: c.value for c in t.configs}
            configs = {k: v for k, v in raw_configs.items() if v is not None}
            num_partitions, code, message = self._check_new_topic(t, raw_configs)
            if code:
                res.error_code, res.error_message = code, message
                continue
            res.num_partitions, res.replication_factor = num_partitions, 1
            # Kafka lists its whole topic config table, by name: the topic's own values
            # (TOPIC_CONFIG) and the defaults it would get (DEFAULT_CONFIG).
            values = topic_configs.effective(self.settings, configs)
            res.configs = [
                CreatableTopicConfigs(
                    name=k,
                    value=v,
                    read_only=False,
                    config_source=1 if k in configs else 5,
                    is_sensitive=False,
                )
                for k, v in sorted(values.items())
            ]
            if req.validate_only:
                # Kafka's answer names the id the topic would have had.
                res.topic_id = uuid.uuid4().bytes
                continue
            if self.shared_topics is not None:
                shared.append((res, num_partitions, configs))
                continue
            try:
                info = self.create_topic(t.name, num_partitions, configs)
            except TopicExistsError:  # kgc.workers: created through another worker just now
                res.error_code = ErrorCode.TOPIC_ALREADY_EXISTS
                res.error_message = f"Topic '{t.name}' already exists."
                res.num_partitions = res.replication_factor = -1
                res.configs = []
                continue
            res.topic_id = info.topic_id
            log.info(
                "created topic %s with %d partitions %s", t.name, num_partitions, configs or ""
            )
        resp = CreateTopicsResponse(throttle_time_ms=0, topics=results)
        if shared:
            return Deferred.task(self._create_shared(resp, shared))
        return resp

    def _check_new_topic(
        self, t: CreatableTopic, raw_configs: dict[str, str | None]
    ) -> tuple[int, ErrorCode, str | None]:
        """CreateTopics' checks of one topic, in Kafka's order: (its partition count,
        NO_ERROR, None) when it may be created, else (-1, the error, Kafka's message)."""
        if topic_name_error(t.name) is not None:
            return -1, ErrorCode.INVALID_TOPIC, kafka_topic_error(t.name)
        if self.catalog.get(t.name) is not None or t.name == OFFSETS_TOPIC:
            return -1, ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists."
        if t.assignments:
            nodes = {n for a in t.assignments for n in a.broker_ids}
            if t.num_partitions != -1 or t.replication_factor != -1:
                return (
                    -1,
                    ErrorCode.INVALID_REQUEST,
                    "Both numPartitions or replicationFactor and replicasAssignments were set.",
                )
            if nodes - {self.node_id}:
                return (
                    -1,
                    ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
                    (
                        "The manual partition assignment includes broker "
                        f"{min(nodes - {self.node_id})}, but no such broker is registered."
                    ),
                )
            num_partitions = len(t.assignments)
        else:
            num_partitions = (
                self.settings.num_partitions if t.num_partitions == -1 else t.num_partitions
            )
        if num_partitions <= 0:
            return (
                -1,
                ErrorCode.INVALID_PARTITIONS,
                "Number of partitions was set to an invalid non-positive value.",
            )
        if t.replication_factor == 0 or t.replication_factor < -1:
            return (
                -1,
                ErrorCode.INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        if t.replication_factor not in (-1, 1) and not t.assignments:
            return (
                -1,
                ErrorCode.INVALID_REPLICATION_FACTOR,
                (
                    f"Unable to replicate the partition {t.replication_factor} time(s): "
                    f"The target replication factor of {t.replication_factor} cannot be reached "
                    "because only 1 broker(s) are registered or some brokers have all their log "
                    "directories cordoned."
                ),
            )
        try:
            # Kafka's LogConfig.validate: nothing is stored unless every config is valid.
            topic_configs.validate(raw_configs)
        except topic_configs.InvalidConfigError as e:
            return -1, ErrorCode.INVALID_CONFIG, str(e)
        return num_partitions, ErrorCode.NO_ERROR, None

    async def _create_shared(
        self,
        resp: CreateTopicsResponse,
        todo: list[tuple[CreatableTopicResult, int, dict[str, str]]],
    ) -> CreateTopicsResponse:
        """Cluster mode: each topic is created in the database, answered once committed."""
        assert self.shared_topics is not None
        for res, num_partitions, configs in todo:
            try:
                info = await self.shared_topics.create(res.name, num_partitions, configs)
            except TopicExistsError:
                res.error_code = ErrorCode.TOPIC_ALREADY_EXISTS
                res.error_message = f"Topic '{res.name}' already exists."
                res.num_partitions = res.replication_factor = -1
                res.configs = []
                continue
            except Exception as exc:
                log.error("creating topic %s failed: %r", res.name, exc)
                res.error_code, res.error_message = ErrorCode.KAFKA_STORAGE_ERROR, str(exc)
                res.num_partitions = res.replication_factor = -1
                res.configs = []
                continue
            res.topic_id = info.topic_id
            log.info(
                "created topic %s with %d partitions %s", res.name, num_partitions, configs or ""
            )
        return resp

    def delete_topics(
        self, header: RequestHeader, req: DeleteTopicsRequest, client: ClientInfo
    ) -> DeleteTopicsResponse | Deferred:
        results = []
        shared: list[tuple[DeletableTopicResult, TopicInfo]] = []
        targets: list[tuple[str | None, bytes]] = []
        if header.api_version >= 6:
            targets = [(t.name, t.topic_id) for t in req.topics]
        else:
            targets = [(n, bytes(16)) for n in req.topic_names]
        for name, topic_id in targets:
            info = self.catalog.get(name) if name is not None else self.catalog.by_id.get(topic_id)
            res = DeletableTopicResult(name=name, topic_id=topic_id)
            results.append(res)
            if name == OFFSETS_TOPIC or (name is None and topic_id == self.offsets_topic_id):
                res.name, res.topic_id = OFFSETS_TOPIC, self.offsets_topic_id
                res.error_code, res.error_message = admin_refusal("delete_topic")
                continue
            if name is not None and topic_id != bytes(16):
                res.error_code = ErrorCode.INVALID_REQUEST
                res.error_message = "You may not specify both topic name and topic id."
                continue
            if name is None and topic_id == bytes(16):
                res.error_code = ErrorCode.INVALID_REQUEST
                res.error_message = "Neither topic name nor id were specified."
                continue
            if info is None:
                # Errors.message() of each code: Kafka's answer carries it.
                if name is None:
                    res.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                    res.error_message = "This server does not host this topic ID."
                else:
                    res.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    res.error_message = "This server does not host this topic-partition."
                continue
            res.name, res.topic_id = info.name, info.topic_id
            if self.shared_topics is not None:
                shared.append((res, info))
                continue
            try:
                self.delete_topic(info)
            except OSError as e:
                log.error("deleting topic %s failed: %r", info.name, e)
                res.error_code, res.error_message = ErrorCode.KAFKA_STORAGE_ERROR, str(e)
        resp = DeleteTopicsResponse(throttle_time_ms=0, responses=results)
        if shared:
            return Deferred.task(self._delete_shared(resp, shared))
        return resp

    async def _delete_shared(
        self, resp: DeleteTopicsResponse, todo: list[tuple[DeletableTopicResult, TopicInfo]]
    ) -> DeleteTopicsResponse:
        """Cluster mode: the topic, its leases and its log rows go in one transaction."""
        assert self.shared_topics is not None
        for res, info in todo:
            try:
                await self.shared_topics.delete(info)
                log.info("deleted topic %s", info.name)
            except Exception as exc:
                log.error("deleting topic %s failed: %r", info.name, exc)
                res.error_code, res.error_message = ErrorCode.KAFKA_STORAGE_ERROR, str(exc)
        return resp

    def delete_topic(self, info: TopicInfo) -> None:
        # Data first: its directories are renamed "*.<topic id>-delete" (durably) before the
        # catalog forgets the topic, so a crash in between is finished at the next start
        # (node/reconcile.py) instead of leaving data no catalog entry accounts for.
        self.data.delete_topic(info)
        self.catalog.delete(info.name)
        self.groups.topic_deleted(info.name)
        log.info("deleted topic %s", info.name)


# -- authorization

_O = AclOperation
_R = ResourceType
_TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def authorize_metadata(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    v = header.api_version
    named = req.topics is not None and not (v == 0 and not req.topics)
    if named:
        order = [a.topic_of(t) for t in req.topics]
        denied = {n for n in order if not a.allowed(client, _O.DESCRIBE, _R.TOPIC, n)}
        allowed = [t for t, n in zip(req.topics, order, strict=True) if n not in denied]
        creatable = a.quietly(client, _O.CREATE, _R.CLUSTER, CLUSTER) or all(
            a.quietly(client, _O.CREATE, _R.TOPIC, a.topic_of(t)) for t in allowed
        )
        inner = dataclasses.replace(
            req,
            topics=allowed,
            allow_auto_topic_creation=req.allow_auto_topic_creation and creatable,
        )
        if v < 4 and not creatable:
            inner = dataclasses.replace(inner, allow_auto_topic_creation=False)
    else:
        denied = set()
        inner = req

    def filtered(resp: Any) -> Any:
        if type(resp) is bytes:
            resp, _ = metadata.RESPONSE_DECODERS[v](resp, 0)
        topics = [t for t in resp.topics if a.quietly(client, _O.DESCRIBE, _R.TOPIC, t.name or "")]
        topics += [
            metadata.MetadataResponseTopic(error_code=_TOPIC_DENIED, name=n, partitions=[])
            for n in sorted(denied)
        ]
        return _metadata_operations(a, dataclasses.replace(resp, topics=topics), req, v, client)

    return then(handler(header, inner, client), filtered)


def _metadata_operations(a: ApiAuthorizer, resp: Any, req: Any, v: int, client: ClientInfo) -> Any:
    """Metadata v8+'s authorized operations as KafkaApis computes them: the cluster's
    (v8-10) only with DESCRIBE on it (else 0), each listed topic's."""
    if v < 8:
        return resp
    if v <= 10 and req.include_cluster_authorized_operations:
        ops = 0
        if a.allowed(client, _O.DESCRIBE, _R.CLUSTER, CLUSTER):
            ops = a.authorizer.authorized_operations(
                client.principal, client.host, _R.CLUSTER, CLUSTER
            )
        resp = dataclasses.replace(resp, cluster_authorized_operations=ops)
    if req.include_topic_authorized_operations:
        for t in resp.topics:
            t.topic_authorized_operations = a.authorizer.authorized_operations(
                client.principal, client.host, _R.TOPIC, t.name or ""
            )
    return resp


def authorize_create_topics(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    if a.quietly(client, _O.CREATE, _R.CLUSTER, CLUSTER):
        return handler(header, req, client)

    merge = append_topics(create_topics.Response)

    return a.split_topics(handler, header, req, client, _O.CREATE, merge)


def authorize_delete_topics(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    field = "topics" if header.api_version >= 6 else "topic_names"
    entries = getattr(req, field)

    def name_of(e: Any) -> str:
        return e if isinstance(e, str) else (e.name or a.topic_name(e.topic_id) or "")

    denied = [e for e in entries if not a.allowed(client, _O.DELETE, _R.TOPIC, name_of(e))]
    if not denied:
        return handler(header, req, client)
    refused = [
        delete_topics.DeletableTopicResult(
            name=name_of(e),
            topic_id=getattr(e, "topic_id", bytes(16)),
            error_code=_TOPIC_DENIED,
        )
        for e in denied
    ]
    allowed = [e for e in entries if e not in denied]
    if not allowed:
        return delete_topics.Response(responses=refused)
    return then(
        handler(header, dataclasses.replace(req, **{field: allowed}), client),
        lambda r: dataclasses.replace(r, responses=[*r.responses, *refused]),
    )
