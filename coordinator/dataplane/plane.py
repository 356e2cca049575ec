"""The single-node data plane: Produce, Fetch, ListOffsets and InitProducerId over topic logs.

How this works
--------------
Every partition of every catalog topic is a ``PartitionLog`` owned by the shared
``LogManager`` (``<data_dir>/<topic>-<n>/``); this node is the leader of all of them with
leader epoch 0, and the high watermark and log end offset coincide (one replica); the last
stable offset stops at the first open transaction (``transactions``).

* **Produce** (v3+): each partition's payload must be exactly one valid magic-2 batch
  (``reads.validate_produced``); idempotent batches go through the partition's producer table
  (``producers``), which may answer a retry with the original offsets; a transactional batch
  that opens a transaction is first verified with the transaction coordinator (``txnlog``). The batch is stored as
  sent, compressed or not: only its base offset is patched (and, for topics with
  message.timestamp.type=LogAppendTime, its max timestamp, attribute bit and CRC). With acks=0
  nothing is answered (a failed one closes the connection, as Kafka does); with acks=1/-1
  the answer waits for ``Flusher.wait_durable`` under the configured flush policy (group
  commit for "batch"). An append wakes long-polling fetches of
  that partition.
* **Fetch** (v4+; by topic id from v13): sessionless; read_committed stops at the last
  stable offset and lists the aborted transactions it returns. A request opening a session (epoch 0)
  gets session id 0, the answer of a broker whose session cache is full, so clients keep
  sending full fetches; an incremental request (epoch > 0) gets FETCH_SESSION_ID_NOT_FOUND.
  Byte limits follow ``reads.ReadBudget``. When fewer than min_bytes are available the
  request parks on one future registered with each partition it reads (woken by appends,
  topic deletion and shutdown) until max_wait_ms passes; there is no polling.
* **ListOffsets** (v1+): earliest/earliest-local = log start, latest = the high watermark
  (the last stable offset for read_committed), max
  timestamp = the first record carrying the largest timestamp, a timestamp = the first record
  at or after it (the segments' time indexes), latest-tiered = none (-1).
* **InitProducerId**: non-transactional producers get a fresh producer id with epoch 0 (as
  Kafka, whatever id/epoch they present); a transactional id gets COORDINATOR_NOT_AVAILABLE,
  matching FindCoordinator's answer for transaction coordinators.
* **Maintenance**: one task rolls idle segments (segment.ms), applies retention.ms /
  retention.bytes (whole segments; the log start offset advances) and forgets producers with
  nothing left in the log or idle for producer.id.expiration.ms. Compaction of
  cleanup.policy=compact topics is the App's cleaner loop (it covers every log).

Clients before Kafka 0.11 (Produce v0-2, Fetch v0-3, ListOffsets v0) go through ``legacy``:
their magic 0/1 message sets are stored as v2 batches and read back down-converted.

``__consumer_offsets`` is read-only here (``offsets_topic``): Fetch and ListOffsets read the
offsets log where the group runtime keeps it, Produce is refused (INVALID_TOPIC_EXCEPTION).

Producer state (sequences and transactions) is rebuilt when a log opens by replaying it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from coordinator import topic_configs
from coordinator.catalog import TopicCatalog, TopicInfo
from coordinator.config import Settings
from coordinator.dataplane import legacy
from coordinator.dataplane.batches import (
    TIMESTAMP_AFTER_MAX_MS,
    first_batch_attributes,
    future_timestamp_errors,
    keyless_record_errors,
    record_errors_message,
    stamp_log_append_time,
)
from coordinator.dataplane.offsets_topic import OffsetsTopic
from coordinator.dataplane.producers import (
    ClusterProducerIds,
    PartitionProducers,
    ProducerIdAllocator,
    rebuild_producers,
)
from coordinator.dataplane.reads import (
    FetchPlan,
    FetchTarget,
    fill,
    high_watermark,
    offset_for,
    validate_produced,
)
from coordinator.dataplane.txnlog import TxnLog, Verification
from coordinator.server.handler import (
    CLOSE_CONNECTION,
    NO_RESPONSE,
    ClientInfo,
    Deferred,
    HandlerResult,
)
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages.fetch import (
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    PartitionData,
)
from protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from protocol.messages.list_offsets import (
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from protocol.messages.produce import (
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)
from storage.interface import (
    Durability,
    InvalidBatchError,
    LogConfig,
    Logs,
    NotOwnerError,
    PartitionLog,
    RecordTooLargeError,
    wall_clock_ms,
)
from storage.record_batch import (
    ATTR_TRANSACTIONAL,
    CorruptBatchError,
    UnsupportedCompressionError,
)
from storage.records import OFFSETS_TOPIC

log = logging.getLogger("kgc.data")

READ_COMMITTED = 1
LEADER_EPOCH = 0
FETCH_TOPIC_ID_VERSION = 13
PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms
PRODUCER_ID_FILE = "producer-id-block"


class DataPlane:
    def __init__(
        self,
        settings: Settings,
        catalog: TopicCatalog,
        logs: Logs,
        flusher: Durability,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        retention_check_interval_ms: int = 30_000,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
        hosted: bool = True,
        producer_ids: ClusterProducerIds | None = None,
        offsets_topic: OffsetsTopic | None = None,
    ) -> None:
        """``hosted=False`` (cluster mode): a partition is served here only between
        ``acquire`` and ``release`` (its lease); others answer NOT_LEADER_OR_FOLLOWER.
        ``offsets_topic``: ``__consumer_offsets`` served read-only (None: not at all)."""
        self.settings = settings
        self.catalog = catalog
        self.logs = logs
        self.flusher = flusher
        self.clock = clock
        self.retention_check_interval_ms = retention_check_interval_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[PartitionLog, PartitionProducers] = {}
        self.waiters: dict[PartitionLog, set[asyncio.Future[None]]] = {}
        self.append_time_topics: set[str] = set()
        # Producer ids: a file-backed counter on one node; blocks from the database's
        # counter in cluster mode (unique across nodes).
        self.producer_ids: ProducerIdAllocator | ClusterProducerIds = (
            producer_ids or ProducerIdAllocator(settings.data_dir / PRODUCER_ID_FILE)
        )
        self.tasks: list[asyncio.Task[None]] = []
        # PartitionLog.cut_backs each producer table was built at (rebuilt after a cut-back).
        self.producer_generations: dict[PartitionLog, int] = {}
        self.durability_watches: set[asyncio.Task[None]] = set()  # acks=0 appends
        self.stopping = False
        self.hosted = hosted
        # Leader epoch of each partition served (its lease's fencing epoch; 0 on one node).
        self.leader_epochs: dict[PartitionLog, int] = {}
        # Told when this node stops serving a partition (cluster mode: its lease went).
        self.on_release: list[Callable[[PartitionLog], None]] = []
        self.offsets_topic = offsets_topic
        if offsets_topic is not None:
            offsets_topic.watch(self.wake)  # its commits wake long polls
        self.txn = TxnLog(self)  # transactions: verification, markers
        self.open()

    # ------------------------------------------------------------ topics and logs

    def log_config(self, info: TopicInfo) -> LogConfig:
        """The topic's log settings; its configs were validated (CreateTopics, catalog load)."""
        return topic_configs.log_config(self.settings, info.configs)

    def open(self) -> None:
        """Open every catalog topic's logs and rebuild their producers.

        The catalog was reconciled with the partition directories first (``TopicCatalog.
        reconcile``), so no directory is deleted here; offline topics stay closed.
        """
        for info in list(self.catalog.topics.values()):
            if info.is_internal or info.offline is not None:
                continue
            self.create_partitions(info)

    def create_partitions(self, info: TopicInfo) -> None:
        cfg = self.log_config(info)
        if info.configs.get("message.timestamp.type") == "LogAppendTime":
            self.append_time_topics.add(info.name)
        else:
            self.append_time_topics.discard(info.name)
        if not self.hosted:
            return  # cluster mode: logs open as their leases are acquired
        for p in range(info.num_partitions):
            plog = self.logs.get_or_create(info.name, p, cfg, info.topic_id)
            if plog not in self.producers:
                self.producers[plog] = self._rebuild_producers(plog)

    def delete_topic(self, info: TopicInfo) -> None:
        for p in range(info.num_partitions):
            plog = self.logs.get(info.name, p)
            if plog is None:
                continue
            self.producers.pop(plog, None)
            self.wake(plog)
        self.append_time_topics.discard(info.name)
        self.logs.delete_topic(info.name, info.topic_id)

    def _log(self, info: TopicInfo, partition: int) -> PartitionLog | None:
        if not 0 <= partition < info.num_partitions:
            return None
        if self.offsets_topic is not None and info is self.offsets_topic.info:
            return self.offsets_topic.log(partition)  # where this node coordinates it
        plog = self.logs.get(info.name, partition)
        if not self.hosted and plog not in self.leader_epochs:
            # Cluster mode: a log exists here while its lease is being taken over (filled
            # from the database, not yet journaled there); only ``acquire`` makes it ours to
            # serve. An append before that would be acknowledged without the database.
            return None
        return plog

    def _readable(self, name: str | None, topic_id: bytes | None) -> TopicInfo | None:
        """The topic a Fetch or ListOffsets entry names (by id when ``topic_id`` is given):
        a data topic, or ``__consumer_offsets``; other internal names are not served."""
        offsets = self.offsets_topic
        if offsets is not None and offsets.names(name if topic_id is None else None, topic_id):
            return offsets.info
        info = (
            self.catalog.by_id.get(topic_id)
            if topic_id is not None
            else self.catalog.get(name or "")
        )
        return None if info is None or info.is_internal else info

    def leads(self, plog: PartitionLog) -> bool:
        """This node serves ``plog`` now (cluster mode: while it holds the lease)."""
        return self.hosted or plog in self.leader_epochs

    def leader_epoch_of(self, plog: PartitionLog) -> int:
        epoch = self.leader_epochs.get(plog)
        if epoch is None and self.offsets_topic is not None:
            return self.offsets_topic.leader_epoch(plog)  # 0 unless journaled under a lease
        return LEADER_EPOCH if epoch is None else epoch

    def _absent(self, info: TopicInfo | None, partition: int) -> ErrorCode:
        """The error for a partition with no log here: another node leads it (cluster mode),
        or it does not exist."""
        if not self.hosted and info is not None and 0 <= partition < info.num_partitions:
            return ErrorCode.NOT_LEADER_FOR_PARTITION  # Kafka 2.6+ calls it NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def served_log(self, info: TopicInfo, partition: int) -> tuple[PartitionLog | None, ErrorCode]:
        """The partition's log when this node serves it, else (None, the error Produce and
        Fetch answer: another node leads it, or it does not exist). For the admin APIs."""
        plog = self._log(info, partition)
        return plog, ErrorCode.NO_ERROR if plog is not None else self._absent(info, partition)

    def log_start_moved(self, plog: PartitionLog) -> None:
        """DeleteRecords moved ``plog``'s start: producers with nothing left above it are
        forgotten, as retention does (Kafka keeps them until producer.id.expiration.ms,
        from its producer snapshots; kgc rebuilds producer state from the log alone, so
        such an entry could not come back after a restart). Their verification guards
        stay and expire on their own, as Kafka's do."""
        table = self.producers.get(plog)
        if table is not None:
            table.prune(plog.log_start_offset, self.clock(), self.producer_id_expiration_ms)

    # ------------------------------------------------------------ cluster mode

    def acquire(self, info: TopicInfo, plog: PartitionLog, leader_epoch: int) -> None:
        """Serve a partition whose lease this node now holds, from its materialised log."""
        self.leader_epochs[plog] = leader_epoch
        self.producers[plog] = self._rebuild_producers(plog)
        if info.configs.get("message.timestamp.type") == "LogAppendTime":
            self.append_time_topics.add(info.name)

    def release(self, plog: PartitionLog) -> None:
        """Stop serving a partition (its lease moves): parked fetches answer now."""
        self.producers.pop(plog, None)
        self.producer_generations.pop(plog, None)
        self.leader_epochs.pop(plog, None)
        for hook in list(self.on_release):
            hook(plog)
        self.wake(plog)

    def _rebuild_producers(self, plog: PartitionLog) -> PartitionProducers:
        # Cluster mode: a log taken over is filled from the database, without the note of
        # where its transactional data starts; it is replayed whole.
        ids = self.producer_ids
        return rebuild_producers(plog, self.clock(), ids.ensure_above, full=not self.hosted)

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.tasks.append(loop.create_task(self._retention_loop(), name="kgc-retention"))

    def begin_shutdown(self) -> None:
        """Answer parked fetches now and stop parking new ones."""
        self.stopping = True
        for plog in list(self.waiters):
            self.wake(plog)

    async def stop(self) -> None:
        self.begin_shutdown()
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.tasks.clear()

    # ------------------------------------------------------------ Produce

    def produce(
        self, header: RequestHeader, req: ProduceRequest, client: ClientInfo
    ) -> HandlerResult:
        transactional = header.api_version >= 3 and any(  # v0-2 carry no transactions
            first_batch_attributes(p.records) & ATTR_TRANSACTIONAL
            for t in req.topic_data
            for p in t.partition_data
        )
        request_error = ErrorCode.NO_ERROR
        if transactional and req.transactional_id is None:
            request_error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif req.acks not in (0, 1, -1):
            request_error = ErrorCode.INVALID_REQUIRED_ACKS
        elif transactional:
            # Batches that would open a transaction are first verified (txnlog.TxnLog).
            started = self.txn.start(req, header.api_version)
            if isinstance(started, Verification):
                return Deferred.task(self.txn.produce_verified(header, req, client, started))
            if started is not None:
                request_error = started
        return self.produce_checked(header, req, client, request_error, None)

    def produce_checked(
        self,
        header: RequestHeader,
        req: ProduceRequest,
        client: ClientInfo,
        request_error: int,
        checked: Verification | None,
    ) -> HandlerResult:
        version = header.api_version
        acks = req.acks
        now = self.clock()
        responses: list[TopicProduceResponse] = []
        waits: list[tuple[PartitionProduceResponse, PartitionLog, int, int]] = []
        for t in req.topic_data:
            tr = TopicProduceResponse(name=t.name, topic_id=t.topic_id)
            responses.append(tr)
            info = self.catalog.get(t.name)
            for p in t.partition_data:
                pr = PartitionProduceResponse(
                    index=p.index, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1
                )
                tr.partition_responses.append(pr)
                if request_error:
                    pr.error_code = request_error
                    continue
                if self.offsets_topic is not None and t.name == OFFSETS_TOPIC:
                    # Kafka's ReplicaManager: "Cannot append to internal topic", without a
                    # custom message; a partition that does not exist is unknown first.
                    n = self.offsets_topic.info.num_partitions
                    pr.error_code = (
                        ErrorCode.INVALID_TOPIC
                        if 0 <= p.index < n
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    )
                    continue
                plog = (
                    self._log(info, p.index) if info is not None and not info.is_internal else None
                )
                if plog is None:
                    pr.error_code = self._absent(info, p.index)
                    pr.error_message = "This server does not host this topic-partition."
                    continue
                records = p.records
                if version < 3:  # a magic 0/1 message set, stored as one v2 batch
                    records, pr.error_code, pr.error_message = legacy.produce_batch(
                        records, t.name in self.append_time_topics
                    )
                    if records is None:
                        continue  # refused, or no complete message (nothing to append)
                generation = plog.cut_backs
                durable_at = self._append(plog, t.name, records, version, now, pr, checked)
                if durable_at is None:
                    continue
                if acks != 0:
                    waits.append((pr, plog, durable_at, generation))
                elif self.needs_flush_wait(plog, durable_at):
                    # Nobody waits, but fetches only see durable records: get them flushed.
                    self._watch_durability(plog, durable_at, generation)
        if acks == 0:
            # Kafka answers a failed acks=0 produce by closing the connection, the only
            # signal such a producer gets; a successful one gets no response at all.
            if any(p.error_code for t in responses for p in t.partition_responses):
                log.info(
                    "closing connection from %s:%d: acks=0 produce failed", client.host, client.port
                )
                return CLOSE_CONNECTION
            return NO_RESPONSE
        resp = ProduceResponse(responses=responses, throttle_time_ms=0)
        waits = [w for w in waits if self.needs_flush_wait(w[1], w[2])]
        if not waits:
            return resp
        return Deferred.task(self._await_durable(resp, waits))

    def _watch_durability(self, plog: PartitionLog, offset: int, generation: int) -> None:
        async def watch() -> None:
            with contextlib.suppress(Exception):  # a failure was logged by the flusher
                await self.flusher.wait_durable(plog, offset, generation=generation)
            self.wake(plog)

        task = asyncio.get_running_loop().create_task(watch())
        self.durability_watches.add(task)
        task.add_done_callback(self.durability_watches.discard)

    def _append(
        self,
        plog: PartitionLog,
        topic: str,
        records: bytes | None,
        version: int,
        now: int,
        pr: PartitionProduceResponse,
        checked: Verification | None = None,
    ) -> int | None:
        """Validate and append one partition's batch, filling ``pr``; the offset to make durable."""
        if plog.damaged is not None:
            # Kafka takes a log directory with a storage failure offline; here only the
            # partition found corrupt is, for Produce as for Fetch.
            pr.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            pr.error_message = f"partition is damaged: {plog.damaged}"
            return None
        h, err, msg = validate_produced(records, version, plog.config.max_message_bytes)
        if h is None or records is None:
            pr.error_code, pr.error_message = err, msg
            return None
        if plog.config.compact:
            try:
                refused = keyless_record_errors(records, f"{topic}-{pr.index}")
            except (CorruptBatchError, UnsupportedCompressionError) as e:
                pr.error_code, pr.error_message = ErrorCode.CORRUPT_MESSAGE, str(e)
                return None
            if refused:
                pr.error_code, pr.record_errors = ErrorCode.INVALID_RECORD, refused
                pr.error_message = record_errors_message(refused)
                pr.log_start_offset = plog.log_start_offset
                return None
        if topic not in self.append_time_topics and h.max_timestamp - now > TIMESTAMP_AFTER_MAX_MS:
            try:
                late = future_timestamp_errors(records, now)
            except (CorruptBatchError, UnsupportedCompressionError) as e:
                pr.error_code, pr.error_message = ErrorCode.CORRUPT_MESSAGE, str(e)
                return None
            if late:
                pr.error_code, pr.record_errors = ErrorCode.INVALID_TIMESTAMP, late
                pr.error_message = "One or more records have been rejected due to invalid timestamp"
                pr.log_start_offset = plog.log_start_offset
                return None
        table = self.table_for(plog)
        verdict = table.check_header(h)
        if (
            h.is_transactional
            and verdict.duplicate is None
            and verdict.error != ErrorCode.INVALID_PRODUCER_EPOCH
        ):
            txn_refused = self.txn.admit(table, (topic, pr.index), h, checked, version, plog)
            if txn_refused is not None:
                pr.error_code, pr.error_message, in_log = txn_refused
                pr.log_start_offset = plog.log_start_offset if in_log else -1
                return None
        if verdict.error:
            pr.error_code, pr.error_message = verdict.error, verdict.message
            pr.log_start_offset = plog.log_start_offset  # Kafka checks in the log's append
            return None
        if verdict.duplicate is not None:
            d = verdict.duplicate
            pr.base_offset, pr.log_start_offset = d.first_offset, plog.log_start_offset
            return d.last_offset
        append_time = topic in self.append_time_topics
        data = stamp_log_append_time(records, now) if append_time else records
        try:
            base, last = plog.append(data, self.leader_epoch_of(plog))
        except RecordTooLargeError as e:
            pr.error_code, pr.error_message = ErrorCode.MESSAGE_SIZE_TOO_LARGE, str(e)
            return None
        except InvalidBatchError as e:
            pr.error_code, pr.error_message = ErrorCode.CORRUPT_MESSAGE, str(e)
            return None
        except OSError as e:
            # The log cut the partial write back (PartitionLog.append's contract): nothing
            # of this batch stands, the next append starts at the last good position.
            log.error("append to %s failed: %r", plog.dir.name, e)
            pr.error_code, pr.error_message = ErrorCode.KAFKA_STORAGE_ERROR, str(e)
            return None
        table.record_appended(h, base, last, now)
        pr.base_offset, pr.log_start_offset = base, plog.log_start_offset
        if append_time:
            pr.log_append_time_ms = now
        if plog.config.flush_policy != "batch":
            self.wake(plog)  # visible at once; batch-policy fetches wake once it is durable
        return last

    def table_for(self, plog: PartitionLog) -> PartitionProducers:
        """The partition's producer state, rebuilt after a cut-back of its log."""
        table = self.producers.get(plog)
        if table is None:
            table = self.producers[plog] = PartitionProducers()
        if self.producer_generations.get(plog, 0) != plog.cut_backs:
            table = self.producers[plog] = self._rebuild_producers(plog)
            self.producer_generations[plog] = plog.cut_backs
        return table

    def needs_flush_wait(self, plog: PartitionLog, offset: int) -> bool:
        cfg = plog.config
        if cfg.flush_policy == "batch":
            return plog.recovery_point <= offset
        if (
            cfg.flush_policy == "interval"
            and plog.unflushed_messages >= cfg.flush_interval_messages
        ):
            self.flusher.poke()
        return False

    async def _await_durable(
        self,
        resp: ProduceResponse,
        waits: list[tuple[PartitionProduceResponse, PartitionLog, int, int]],
    ) -> ProduceResponse:
        """Answer once every appended batch is durable; a failed fsync (FlushError: the log
        was cut back, the batch is gone) or a cut-back below the batch is
        KAFKA_STORAGE_ERROR, which producers retry."""
        if len(waits) == 1:
            _, plog, offset, gen = waits[0]
            results: list[BaseException | None] = []
            try:
                await self.flusher.wait_durable(plog, offset, generation=gen)
                results.append(None)
            except Exception as e:
                results.append(e)
        else:
            results = list(
                await asyncio.gather(
                    *(
                        self.flusher.wait_durable(plog, off, generation=gen)
                        for _, plog, off, gen in waits
                    ),
                    return_exceptions=True,
                )
            )
        for (pr, plog, _, _), res in zip(waits, results, strict=True):
            if res is None:
                self.wake(plog)  # durable now: visible to fetches
            if isinstance(res, BaseException):
                if isinstance(res, NotOwnerError):
                    # Another node took the partition over before this write committed:
                    # the client finds the new leader and retries there.
                    pr.error_code, pr.error_message = ErrorCode.NOT_LEADER_FOR_PARTITION, str(res)
                elif plog.closed:
                    pr.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    log.error("fsync of %s failed: %r", plog.dir.name, res)
                    pr.error_code, pr.error_message = ErrorCode.KAFKA_STORAGE_ERROR, str(res)
                pr.base_offset, pr.log_append_time_ms, pr.log_start_offset = -1, -1, -1
        return resp

    # ------------------------------------------------------------ Fetch

    def fetch(self, header: RequestHeader, req: FetchRequest, client: ClientInfo) -> HandlerResult:
        version = header.api_version
        if req.session_epoch not in (0, -1):
            # Incremental fetch of a session we never created (kgc keeps no fetch sessions).
            return FetchResponse(
                throttle_time_ms=0,
                error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                session_id=0,
                responses=[],
            )
        plan = self._plan_fetch(version, req)
        total, errored = fill(plan)
        resp = FetchResponse(
            throttle_time_ms=0, error_code=ErrorCode.NO_ERROR, session_id=0, responses=plan.topics
        )
        logs = [
            t.log
            for t in plan.targets
            if t.log is not None and t.resp.error_code == ErrorCode.NO_ERROR
        ]
        if req.max_wait_ms <= 0 or total >= req.min_bytes or errored or not logs or self.stopping:
            return resp
        return Deferred.task(self._long_poll(plan, resp, logs))

    def _plan_fetch(self, version: int, req: FetchRequest) -> FetchPlan:
        plan = FetchPlan(version, req)
        committed = req.isolation_level == READ_COMMITTED
        by_id = version >= FETCH_TOPIC_ID_VERSION
        for ft in req.topics:
            info = self._readable(ft.topic, ft.topic_id if by_id else None)
            tr = FetchableTopicResponse(topic=ft.topic, topic_id=ft.topic_id)
            plan.topics.append(tr)
            for fp in ft.partitions:
                pd = PartitionData(
                    partition_index=fp.partition,
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                    aborted_transactions=[] if committed else None,
                    preferred_read_replica=-1,
                    records=b"",
                )
                tr.partitions.append(pd)
                plog = None
                if info is None:
                    pd.error_code = (
                        ErrorCode.UNKNOWN_TOPIC_ID
                        if by_id
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    )
                elif (plog := self._log(info, fp.partition)) is None:
                    pd.error_code = self._absent(info, fp.partition)
                elif fp.current_leader_epoch > self.leader_epoch_of(plog):
                    pd.error_code = ErrorCode.UNKNOWN_LEADER_EPOCH
                    plog = None
                if plog is None:
                    # Kafka answers these from the schema's defaults: an empty list.
                    pd.aborted_transactions = []
                plan.targets.append(
                    FetchTarget(
                        pd, plog, fp.fetch_offset, fp.partition_max_bytes, self.txn.txns_of(plog)
                    )
                )
        return plan

    async def _long_poll(
        self, plan: FetchPlan, resp: FetchResponse, logs: list[PartitionLog]
    ) -> FetchResponse:
        loop = asyncio.get_running_loop()
        req = plan.req
        deadline = loop.time() + req.max_wait_ms / 1000.0
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            fut: asyncio.Future[None] = loop.create_future()
            for plog in logs:
                self.waiters.setdefault(plog, set()).add(fut)
            try:
                async with asyncio.timeout(remaining):
                    await fut
            except TimeoutError:
                pass
            finally:
                for plog in logs:
                    ws = self.waiters.get(plog)
                    if ws is not None:
                        ws.discard(fut)
                        if not ws:
                            del self.waiters[plog]
            total, errored = fill(plan)
            if total >= req.min_bytes or errored or self.stopping:
                return resp
        fill(plan)
        return resp

    def wake(self, plog: PartitionLog) -> None:
        ws = self.waiters.pop(plog, None)
        if ws:
            for fut in ws:
                if not fut.done():
                    fut.set_result(None)

    # ------------------------------------------------------------ ListOffsets

    def list_offsets(
        self, header: RequestHeader, req: ListOffsetsRequest, client: ClientInfo
    ) -> ListOffsetsResponse:
        topics = []
        for t in req.topics:
            info = self._readable(t.name, None)
            tr = ListOffsetsTopicResponse(name=t.name)
            topics.append(tr)
            for p in t.partitions:
                r = ListOffsetsPartitionResponse(
                    partition_index=p.partition_index, timestamp=-1, offset=-1, leader_epoch=-1
                )
                tr.partitions.append(r)
                plog = self._log(info, p.partition_index) if info is not None else None
                if plog is None:
                    r.error_code = self._absent(info, p.partition_index)
                elif header.api_version == 0:  # offsets before a time (legacy.py)
                    r.error_code, r.old_style_offsets = legacy.list_offsets_v0(
                        plog,
                        p.timestamp,
                        p.max_num_offsets,
                        high_watermark(plog),
                        self.clock(),
                        from_consumer=req.replica_id == -1,
                    )
                elif p.current_leader_epoch > self.leader_epoch_of(plog):
                    r.error_code = ErrorCode.UNKNOWN_LEADER_EPOCH
                else:
                    end = self.txn.fetchable_end(plog, req.isolation_level)
                    try:
                        r.timestamp, r.offset = offset_for(plog, p.timestamp, end)
                    except OSError as e:
                        log.error("offset lookup in %s failed: %r", plog.dir.name, e)
                        r.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                        continue
                    epoch = self.leader_epoch_of(plog)
                    r.leader_epoch = epoch if r.offset >= 0 else -1
        return ListOffsetsResponse(throttle_time_ms=0, topics=topics)

    # ------------------------------------------------------------ InitProducerId

    def init_producer_id(
        self, header: RequestHeader, req: InitProducerIdRequest, client: ClientInfo
    ) -> InitProducerIdResponse | Deferred:
        resp = InitProducerIdResponse(throttle_time_ms=0, producer_id=-1, producer_epoch=-1)
        if req.transactional_id is not None:
            # Reached only where no transaction coordinator runs (apis/transactions.py
            # routes transactional ids to it): Kafka's coordinator rejects an empty id, and
            # any other id needs a coordinator.
            resp.error_code = (
                ErrorCode.INVALID_REQUEST
                if req.transactional_id == ""
                else ErrorCode.COORDINATOR_NOT_AVAILABLE
            )
            return resp
        if (req.producer_id == -1) != (req.producer_epoch == -1):
            resp.error_code = ErrorCode.INVALID_REQUEST
            return resp
        ids = self.producer_ids
        if isinstance(ids, ClusterProducerIds):
            return Deferred.task(self._init_producer_id_cluster(ids, resp))
        try:
            resp.producer_id = ids.allocate()
        except OSError as e:
            log.error("persisting the producer id block failed: %r", e)
            resp.error_code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            return resp
        resp.producer_epoch = 0
        return resp

    async def _init_producer_id_cluster(
        self, ids: ClusterProducerIds, resp: InitProducerIdResponse
    ) -> InitProducerIdResponse:
        try:
            resp.producer_id = await ids.allocate()
        except Exception as e:  # the database is unreachable: a retriable answer
            log.error("taking a block of producer ids from the database failed: %r", e)
            resp.error_code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            return resp
        resp.producer_epoch = 0
        return resp

    # ------------------------------------------------------------ maintenance

    def topic_logs(self) -> list[PartitionLog]:
        return [plog for plog in self.producers if not plog.closed]

    def run_retention(self, now_ms: int | None = None) -> int:
        """One retention pass over every topic log; returns the number of segments deleted."""
        now = self.clock() if now_ms is None else now_ms
        deleted = 0
        for plog in self.topic_logs():
            try:
                plog.maybe_roll_by_time()
                if plog.config.delete:
                    n = plog.apply_retention(now)
                    if n:
                        log.info(
                            "retention deleted %d segment(s) of %s; log start offset now %d",
                            n,
                            plog.dir.name,
                            plog.log_start_offset,
                        )
                    deleted += n
                table = self.producers.get(plog)
                if table is not None:
                    table.prune(plog.log_start_offset, now, self.producer_id_expiration_ms)
            except OSError:
                log.exception("retention of %s failed", plog.dir.name)
        return deleted

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_check_interval_ms / 1000.0)
            self.run_retention()
