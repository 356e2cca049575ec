"""The partition admin APIs: CreatePartitions, DeleteRecords, DescribeCluster, DescribeLogDirs.

How this works
--------------
``PartitionAdmin`` answers the four APIs admin tools call about partitions and the cluster,
as Kafka 4.x (KRaft) answers them (the API table, ``coordinator/apis``, routes them here).
Each API does its own authorization (with an authorizer configured), exactly as
``KafkaApis``/``ControllerApis`` do, because the error shape depends on where in the
request the check falls.

* **CreatePartitions** (v0-3): a name given twice is INVALID_REQUEST ("Duplicate topic
  name.") before anything else; then ALTER on the topic (TOPIC_AUTHORIZATION_FAILED); then
  ReplicationControlManager's checks in its order: unknown topic, a count that does not
  grow (INVALID_PARTITIONS, Kafka's two messages), manual assignments (one per new
  partition, each naming registered nodes, once each, as many as the topic's replication
  factor, which is 1, and at least one of them active: INVALID_REPLICA_ASSIGNMENT with
  Kafka's messages), at most 10,000 new partitions per request (the controller's record
  limit: UNKNOWN_SERVER_ERROR past it). ``validate_only`` checks everything and stores
  nothing. Embedded: the new partitions' logs are created first, then the catalog is
  saved (a crash in between leaves empty directories that the catalog does not serve and
  that a retry takes over); cluster mode: one transaction adds the partitions and their
  unowned lease rows (``node/pg_stores.SharedCatalog``), nodes claim them at their next
  heartbeat. Either way the catalog's ``on_change`` tells the group runtime, so consumer
  groups (KIP-848) subscribed to the topic compute a new target assignment; classic groups
  notice through Metadata (their leader's client sees the new count and rejoins). kgc's
  ``__consumer_offsets`` keeps ``offsets.topic.num.partitions`` (every group's partition is
  a hash modulo that count): growing it is refused with POLICY_VIOLATION, where Kafka
  would grow it and lose track of its groups.
* **DeleteRecords** (v0-2): DELETE on the topic (TOPIC_AUTHORIZATION_FAILED per partition);
  an unknown partition is UNKNOWN_TOPIC_OR_PARTITION, ``__consumer_offsets`` INVALID_TOPIC
  (Kafka refuses internal topics), a partition led by another node NOT_LEADER_OR_FOLLOWER,
  a topic without ``delete`` in cleanup.policy POLICY_VIOLATION. Offset -1 means the high
  watermark; a negative offset or one above the high watermark is OFFSET_OUT_OF_RANGE.
  The log start moves (``PartitionLog.delete_segments_before``: whole segments below it
  are deleted, the new start is checkpointed with an fsync before the answer) and
  ``low_watermark`` is the log start after it. Fetches below it then answer
  OFFSET_OUT_OF_RANGE (consumers reset per auto.offset.reset) and ListOffsets EARLIEST
  returns it. In cluster mode the answer waits until the lease row's ``log_start_offset``
  is raised in PostgreSQL (the journal's fenced trim), so a node taking the partition
  over starts from it too; a lease lost meanwhile is NOT_LEADER_OR_FOLLOWER, and
  ``timeout_ms`` passing first REQUEST_TIMED_OUT, as Kafka's delayed operation answers.
* **DescribeCluster** (v0-2): the live nodes as the request's listener reaches them,
  cluster id, the controller id Metadata reports (kgc has no controller; the lowest live
  node id stands for it, -1 when that node is not reachable on this listener), and, when
  asked, the cluster's authorized operations (0 without DESCRIBE on the cluster; every
  cluster operation without an authorizer). Kafka checks nothing else: any client may
  describe the cluster. ``endpoint_type`` 2 (controllers) is MISMATCHED_ENDPOINT_TYPE (a
  broker answers only for brokers), an unknown type UNSUPPORTED_ENDPOINT_TYPE (v0:
  INVALID_REQUEST). v2's ``include_fenced_brokers`` adds, in cluster mode, the registered
  nodes that are not live (session expired, fenced or stopped) with ``is_fenced``.
* **DescribeLogDirs** (v1-5): DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED
  and no directories. One directory, kgc's data directory (absolute path): every
  partition log in it (``__consumer_offsets`` too, as Kafka lists every log) or those the
  request names, each with its size in bytes, offset lag 0 (this node is the only
  replica) and ``is_future_key`` false; total and usable bytes of its file system (v4+).
  A directory that cannot be examined is KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections import Counter
from typing import Protocol

from coordinator.catalog import TopicCatalog
from coordinator.config import Settings
from coordinator.dataplane.offsets_topic import admin_refusal
from coordinator.dataplane.plane import DataPlane
from coordinator.dataplane.reads import high_watermark
from coordinator.placement import Placement, endpoint, parse_endpoints
from coordinator.security.acl import AclOperation, Authorizer, ResourceType, all_operations
from coordinator.server.handler import ClientInfo, Deferred, HandlerResult
from coordinator.stores import ClusterView, TopicStore
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages.create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
)
from protocol.messages.delete_records import (
    DeleteRecordsPartitionResult,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)
from protocol.messages.describe_cluster import (
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
)
from protocol.messages.describe_log_dirs import (
    DescribeLogDirsPartition,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeLogDirsResult,
    DescribeLogDirsTopic,
)
from storage.interface import Logs, PartitionLog, UnknownTopicError
from storage.records import OFFSETS_TOPIC

__all__ = ["MAX_NEW_PARTITIONS_PER_REQUEST", "PartitionAdmin"]

log = logging.getLogger("kgc.admin")

CLUSTER = "kafka-cluster"
# QuorumController.MAX_RECORDS_PER_USER_OP: one partition record per new partition.
MAX_NEW_PARTITIONS_PER_REQUEST = 10_000
REPLICATION_FACTOR = 1  # every kgc partition has one replica
HIGH_WATERMARK = -1  # DeleteRecordsRequest.HIGH_WATERMARK
AUTH_OPS_OMITTED = -(2**31)  # Integer.MIN_VALUE: authorized operations not requested
ENDPOINT_BROKER = 1
ENDPOINT_CONTROLLER = 2
_ENDPOINT_NAMES = {ENDPOINT_BROKER: "BROKER", ENDPOINT_CONTROLLER: "CONTROLLER"}
_TRIM_POLL_MAX_S = 0.5  # DeleteRecords in cluster mode: longest wait between checks

Problem = tuple[ErrorCode, str | None]


class Maintainable(Protocol):
    """The PostgreSQL journal's maintenance (runs pending trims now; True if one failed)."""

    async def maintain(self) -> bool: ...


class PartitionAdmin:
    def __init__(
        self,
        settings: Settings,
        catalog: TopicCatalog,
        logs: Logs,
        data: DataPlane,
        placement: Placement,
        *,
        authorizer: Authorizer | None = None,
        shared: TopicStore | None = None,
        cluster: ClusterView | None = None,
        journal: Maintainable | None = None,
    ) -> None:
        """Cluster mode passes ``shared`` (the catalog in the database), ``cluster`` (its
        registered nodes and leases) and ``journal`` (the PostgreSQL journal whose trims
        DeleteRecords waits for)."""
        self.settings = settings
        self.catalog = catalog
        self.logs = logs
        self.data = data
        self.placement = placement
        self.authorizer = authorizer
        self.shared = shared
        self.cluster = cluster
        self.journal = journal

    def _allowed(
        self,
        client: ClientInfo,
        op: AclOperation,
        rtype: ResourceType,
        name: str,
        *,
        audit: bool = True,
    ) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(
            client.principal, client.host, op, rtype, name, audit=audit
        )

    # ------------------------------------------------------------ CreatePartitions

    def create_partitions(
        self, header: RequestHeader, req: CreatePartitionsRequest, client: ClientInfo
    ) -> HandlerResult:
        counts = Counter(t.name for t in req.topics)
        results: list[CreatePartitionsTopicResult] = []
        todo: list[tuple[CreatePartitionsTopicResult, CreatePartitionsTopic]] = []
        seen: set[str] = set()
        for t in req.topics:
            if t.name in seen:
                continue
            seen.add(t.name)
            res = CreatePartitionsTopicResult(name=t.name, error_message=None)
            results.append(res)
            if counts[t.name] > 1:
                res.error_code, res.error_message = (
                    ErrorCode.INVALID_REQUEST,
                    "Duplicate topic name.",
                )
            elif not self._allowed(client, AclOperation.ALTER, ResourceType.TOPIC, t.name):
                res.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                todo.append((res, t))
        resp = CreatePartitionsResponse(throttle_time_ms=0, results=results)
        if not todo:
            return resp
        if self.shared is not None:
            return Deferred.task(self._grow_shared(resp, todo, req.validate_only))
        me = {self.settings.node_id}
        budget = [0]
        for res, t in todo:
            problem = self.growth_problem(t, registered=me, active=me, budget=budget)
            if problem is not None:
                res.error_code, res.error_message = problem
            elif not req.validate_only:
                self._grow_local(res, t.name, t.count)
        return resp

    def growth_problem(
        self,
        t: CreatePartitionsTopic,
        *,
        registered: set[int],
        active: set[int],
        budget: list[int],
    ) -> Problem | None:
        """Why ``t`` cannot grow as asked, in ReplicationControlManager's order, or None.

        ``registered``/``active``: the node ids manual assignments may name / of which one
        must be up; ``budget[0]`` counts the new partitions of the request so far.
        """
        if t.name == OFFSETS_TOPIC:
            return admin_refusal("create_partitions")
        problem = self._count_problem(t)
        if problem is not None:
            return problem
        info = self.catalog.get(t.name)
        assert info is not None
        current = info.num_partitions
        additional = t.count - current
        if t.assignments is not None:
            if len(t.assignments) != additional:
                return (
                    ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
                    f"Attempted to add {additional} additional partition(s), but only "
                    f"{len(t.assignments)} assignment(s) were specified.",
                )
            for i, a in enumerate(t.assignments):
                why = manual_assignment_problem(a.broker_ids, registered)
                if why is None and not set(a.broker_ids) & active:
                    why = (
                        "All brokers specified in the manual partition assignment for "
                        f"partition {current + i} are fenced or in controlled shutdown."
                    )
                if why is not None:
                    return ErrorCode.INVALID_REPLICATION_ASSIGNMENT, why
        if budget[0] + additional > MAX_NEW_PARTITIONS_PER_REQUEST:
            # The controller's bounded record list overflows: an unexpected error there.
            return ErrorCode.UNKNOWN, None
        budget[0] += additional
        return None

    def _count_problem(self, t: CreatePartitionsTopic) -> Problem | None:
        """The topic is unknown, offline, or ``count`` does not grow it."""
        info = self.catalog.get(t.name)
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        if info.offline is not None:
            return ErrorCode.KAFKA_STORAGE_ERROR, f"Topic {t.name} is offline: {info.offline}"
        current = info.num_partitions
        if t.count == current:
            return ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s)."
        if t.count < current:
            return (
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {t.name} currently has {current} partition(s); {t.count} would "
                "not be an increase.",
            )
        return None

    def _grow_local(self, res: CreatePartitionsTopicResult, name: str, count: int) -> None:
        info = self.catalog.get(name)
        assert info is not None
        before = info.num_partitions
        try:
            # Data first: the new logs exist (not yet served: the catalog still has the
            # old count) before the catalog says so.
            self.data.create_partitions(dataclasses.replace(info, num_partitions=count))
            self.catalog.create_partitions(name, count)
        except OSError as e:
            log.error("adding partitions to topic %s failed: %r", name, e)
            res.error_code, res.error_message = ErrorCode.KAFKA_STORAGE_ERROR, str(e)
            return
        log.info("topic %s grew from %d to %d partitions", name, before, count)

    async def _grow_shared(
        self,
        resp: CreatePartitionsResponse,
        todo: list[tuple[CreatePartitionsTopicResult, CreatePartitionsTopic]],
        validate_only: bool,
    ) -> CreatePartitionsResponse:
        """Cluster mode: each topic grows in its own transaction, answered once committed."""
        active = {n.node_id for n in self.placement.nodes()}
        registered = set(active)
        if any(t.assignments for _, t in todo):
            assert self.cluster is not None
            try:
                registered = {n.node_id for n in await self.cluster.registered_nodes()}
            except Exception as exc:
                log.error("reading the cluster's nodes failed: %r", exc)
                for res, _t in todo:
                    res.error_code, res.error_message = ErrorCode.KAFKA_STORAGE_ERROR, str(exc)
                return resp
        budget = [0]
        for res, t in todo:
            problem = self.growth_problem(t, registered=registered, active=active, budget=budget)
            if problem is None and not validate_only:
                problem = await self._grow_in_database(t)
            if problem is not None:
                res.error_code, res.error_message = problem
        return resp

    async def _grow_in_database(self, t: CreatePartitionsTopic) -> Problem | None:
        assert self.shared is not None
        info = self.catalog.get(t.name)
        before = info.num_partitions if info is not None else 0
        try:
            await self.shared.create_partitions(t.name, t.count)
        except UnknownTopicError:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        except ValueError:
            # Grown (or deleted) by another node since this node's catalog was read.
            await self.shared.refresh()
            return self._count_problem(t) or (
                ErrorCode.INVALID_PARTITIONS,
                f"Topic {t.name} changed while it was being grown; retry",
            )
        except Exception as exc:
            log.error("adding partitions to topic %s failed: %r", t.name, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR, str(exc)
        log.info("topic %s grew from %d to %d partitions", t.name, before, t.count)
        return None

    # ------------------------------------------------------------ DeleteRecords

    def delete_records(
        self, header: RequestHeader, req: DeleteRecordsRequest, client: ClientInfo
    ) -> HandlerResult:
        # Kafka keys the request by partition: a partition named twice is answered once,
        # for the offset given last.
        wanted: dict[tuple[str, int], int] = {}
        for t in req.topics:
            for dp in t.partitions:
                wanted[(t.name, dp.partition_index)] = dp.offset
        allowed = {
            name: self._allowed(client, AclOperation.DELETE, ResourceType.TOPIC, name)
            for name in dict.fromkeys(t.name for t in req.topics)
        }
        topics: dict[str, DeleteRecordsTopicResult] = {}
        waits: list[tuple[DeleteRecordsPartitionResult, PartitionLog, str, int]] = []
        for (name, p), offset in wanted.items():
            r = DeleteRecordsPartitionResult(partition_index=p, low_watermark=-1)
            topics.setdefault(name, DeleteRecordsTopicResult(name=name)).partitions.append(r)
            if not allowed[name]:
                r.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            r.error_code, plog = self._delete_below(name, p, offset)
            if plog is not None:
                r.low_watermark = plog.log_start_offset
                if self.journal is not None:
                    waits.append((r, plog, name, p))
        resp = DeleteRecordsResponse(throttle_time_ms=0, topics=list(topics.values()))
        if waits:
            return Deferred.task(self._trims_durable(resp, waits, req.timeout_ms))
        return resp

    def _delete_below(
        self, name: str, p: int, offset: int
    ) -> tuple[ErrorCode, PartitionLog | None]:
        """Move the partition's log start to ``offset`` (Partition.deleteRecordsOnLeader)."""
        if name == OFFSETS_TOPIC:
            if 0 <= p < self.settings.offsets_topic_num_partitions:
                return admin_refusal("delete_records")[0], None  # the response has no message
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        info = self.catalog.get(name)
        if info is None or not 0 <= p < info.num_partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        if info.offline is not None:
            return ErrorCode.KAFKA_STORAGE_ERROR, None
        plog, error = self.data.served_log(info, p)
        if plog is None:
            return error, None
        if plog.closed or plog.damaged is not None:
            return ErrorCode.KAFKA_STORAGE_ERROR, None
        if not plog.config.delete:
            # "Records of partition ... can not be deleted due to the configured policy"
            return ErrorCode.POLICY_VIOLATION, None
        hw = high_watermark(plog)
        target = hw if offset == HIGH_WATERMARK else offset
        if target < 0 or target > hw:
            return ErrorCode.OFFSET_OUT_OF_RANGE, None
        if target > plog.log_start_offset:
            try:
                removed = plog.delete_segments_before(target)
            except OSError as e:
                log.error("moving the log start of %s to %d failed: %r", plog.dir.name, target, e)
                return ErrorCode.KAFKA_STORAGE_ERROR, None
            self.data.log_start_moved(plog)
            log.info(
                "DeleteRecords: log start offset of %s-%d now %d (%d segment(s) deleted)",
                name,
                p,
                plog.log_start_offset,
                removed,
            )
        return ErrorCode.NO_ERROR, plog

    async def _trims_durable(
        self,
        resp: DeleteRecordsResponse,
        waits: list[tuple[DeleteRecordsPartitionResult, PartitionLog, str, int]],
        timeout_ms: int,
    ) -> DeleteRecordsResponse:
        """Cluster mode: answer once every new log start is the lease's in PostgreSQL."""
        deadline = asyncio.get_running_loop().time() + max(timeout_ms, 0) / 1000
        await asyncio.gather(*(self._trim_durable(*w, deadline) for w in waits))
        return resp

    async def _trim_durable(
        self,
        r: DeleteRecordsPartitionResult,
        plog: PartitionLog,
        topic: str,
        partition: int,
        deadline: float,
    ) -> None:
        assert self.journal is not None and self.cluster is not None
        loop = asyncio.get_running_loop()
        epoch = self.data.leader_epochs.get(plog)
        wanted = r.low_watermark
        delay = 0.01
        while True:
            try:
                await self.journal.maintain()  # the trim runs now, not at its next turn
                found = await self.cluster.lease_log_start(topic, partition)
            except Exception as exc:  # the database is away: retried until the deadline
                log.warning("DeleteRecords on %s-%d: %r", topic, partition, exc)
            else:
                if found is None or found[0] != epoch or plog.closed:
                    # The lease moved: the new leader's log start is the database's.
                    r.error_code, r.low_watermark = ErrorCode.NOT_LEADER_FOR_PARTITION, -1
                    return
                if found[1] >= wanted:
                    return
            if loop.time() >= deadline:
                r.error_code, r.low_watermark = ErrorCode.REQUEST_TIMED_OUT, -1
                return
            await asyncio.sleep(min(delay, max(deadline - loop.time(), 0)))
            delay = min(delay * 2, _TRIM_POLL_MAX_S)

    # ------------------------------------------------------------ DescribeCluster

    def describe_cluster(
        self, header: RequestHeader, req: DescribeClusterRequest, client: ClientInfo
    ) -> HandlerResult:
        v = header.api_version
        kind = req.endpoint_type
        if kind not in _ENDPOINT_NAMES:
            return DescribeClusterResponse(
                error_code=ErrorCode.INVALID_REQUEST
                if v == 0
                else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                error_message=f"Unsupported endpoint type {kind}",
            )
        if kind != ENDPOINT_BROKER:
            return DescribeClusterResponse(
                error_code=ErrorCode.INVALID_REQUEST
                if v == 0
                else ErrorCode.MISMATCHED_ENDPOINT_TYPE,
                error_message="The request was sent to an endpoint of type BROKER, but we "
                f"wanted an endpoint of type {_ENDPOINT_NAMES[kind]}",
            )
        ops = AUTH_OPS_OMITTED
        if req.include_cluster_authorized_operations:
            if self.authorizer is None:
                ops = all_operations(ResourceType.CLUSTER)
            elif self._allowed(client, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER):
                ops = self.authorizer.authorized_operations(
                    client.principal, client.host, ResourceType.CLUSTER, CLUSTER
                )
            else:
                ops = 0
        if v >= 2 and req.include_fenced_brokers and self.cluster is not None:
            return Deferred.task(self._describe_with_fenced(client.listener, ops))
        return self._cluster(client.listener, ops, [])

    def _cluster(
        self, listener: str, ops: int, fenced: list[DescribeClusterBroker]
    ) -> DescribeClusterResponse:
        live = self.placement.nodes()
        brokers = []
        for n in live:
            address = endpoint(n, listener)
            if address is not None:
                brokers.append(
                    DescribeClusterBroker(
                        broker_id=n.node_id, host=address[0], port=address[1], rack=n.rack
                    )
                )
        brokers = sorted(brokers + fenced, key=lambda b: b.broker_id)
        # Metadata's controller id; -1 when that node is not listed (Kafka's AuthHelper).
        controller = min((n.node_id for n in live), default=-1)
        if not any(b.broker_id == controller and not b.is_fenced for b in brokers):
            controller = -1
        return DescribeClusterResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.NO_ERROR,
            error_message=None,
            endpoint_type=ENDPOINT_BROKER,
            cluster_id=self.settings.cluster_id,
            controller_id=controller,
            brokers=brokers,
            cluster_authorized_operations=ops,
        )

    async def _describe_with_fenced(self, listener: str, ops: int) -> DescribeClusterResponse:
        """Cluster mode, include_fenced_brokers: registered nodes that are not live too."""
        assert self.cluster is not None
        live = {n.node_id for n in self.placement.nodes()}
        fenced: list[DescribeClusterBroker] = []
        try:
            nodes = await self.cluster.registered_nodes()
        except Exception as exc:  # the live ones are known without the database
            log.warning("DescribeCluster: reading the registered nodes failed: %r", exc)
            nodes = []
        for n in nodes:
            if n.node_id in live:
                continue
            address = endpoint(
                _Registered(n.node_id, n.host, n.port, n.rack, parse_endpoints(n.listeners)),
                listener,
            )
            if address is not None:
                fenced.append(
                    DescribeClusterBroker(
                        broker_id=n.node_id,
                        host=address[0],
                        port=address[1],
                        rack=n.rack,
                        is_fenced=True,
                    )
                )
        return self._cluster(listener, ops, fenced)

    # ------------------------------------------------------------ DescribeLogDirs

    def describe_log_dirs(
        self, header: RequestHeader, req: DescribeLogDirsRequest, client: ClientInfo
    ) -> DescribeLogDirsResponse:
        if not self._allowed(client, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER):
            return DescribeLogDirsResponse(
                throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[]
            )
        wanted = (
            None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
        )
        return DescribeLogDirsResponse(throttle_time_ms=0, results=[self._log_dir(wanted)])

    def _log_dir(self, wanted: set[tuple[str, int]] | None) -> DescribeLogDirsResult:
        path = self.logs.data_dir.absolute()
        try:
            st = os.statvfs(path)
        except OSError as e:
            log.warning("DescribeLogDirs: cannot examine %s: %r", path, e)
            return DescribeLogDirsResult(
                error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=str(path)
            )
        topics: dict[str, DescribeLogDirsTopic] = {}
        for topic, p in self.logs.partitions():
            plog = self.logs.get(topic, p)
            if plog is None or plog.closed or (wanted is not None and (topic, p) not in wanted):
                continue
            topics.setdefault(topic, DescribeLogDirsTopic(name=topic)).partitions.append(
                DescribeLogDirsPartition(
                    partition_index=p,
                    partition_size=plog.size_bytes,
                    offset_lag=0,  # max(high watermark - log end, 0) on the only replica
                    is_future_key=False,
                )
            )
        return DescribeLogDirsResult(
            error_code=ErrorCode.NO_ERROR,
            log_dir=str(path),
            topics=list(topics.values()),
            total_bytes=st.f_blocks * st.f_frsize,  # Java's FileStore.getTotalSpace
            usable_bytes=st.f_bavail * st.f_frsize,  # and getUsableSpace
            is_cordoned=False,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class _Registered:
    """A registered node as ``placement.endpoint`` reads one."""

    node_id: int
    host: str
    port: int
    rack: str | None
    endpoints: tuple[tuple[str, str, int], ...]


def manual_assignment_problem(broker_ids: list[int], registered: set[int]) -> str | None:
    """Why one partition's manual assignment is invalid (ReplicationControlManager's
    validateManualPartitionAssignment, replication factor 1), or None."""
    if not broker_ids:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for node in sorted(broker_ids):
        if node not in registered:
            return (
                f"The manual partition assignment includes broker {node}, but no such broker "
                "is registered."
            )
        if node == previous:
            return f"The manual partition assignment includes the broker {node} more than once."
        previous = node
    if len(broker_ids) != REPLICATION_FACTOR:
        return (
            f"The manual partition assignment includes a partition with {len(broker_ids)} "
            "replica(s), but this is not consistent with previous partitions, which have "
            f"{REPLICATION_FACTOR} replica(s)."
        )
    return None
