"""The log's duties for transactions: verified transactional appends, markers, DescribeProducers.

How this works
--------------
``TxnLog`` is the part of the data plane (``plane.DataPlane``, which owns one) that Kafka
spreads over ReplicaManager, UnifiedLog and KafkaApis for transactions:

* **Verification (KIP-890 part 1).** A Produce carrying a transactional batch that would
  open a transaction on a partition (its producer has none open there at that epoch) first
  asks the transaction coordinator (``verify``, the coordinator's ``TxnVerifier.verify``)
  whether the partition is in the producer's ongoing transaction. ``start`` takes a
  verification guard per such partition in its producer state; after the answer, ``admit``
  lets the batch open the transaction only if that guard is still the producer's current
  one (a marker in between cleared it) and the answer was NONE. The coordinator's codes
  become produce errors as Kafka's ReplicaManager/AddPartitionsToTxnManager translate them.
  Without a coordinator (``verify`` None) transactional batches are refused.
* **Markers** (``write_marker``): a COMMIT/ABORT control batch appended to a data partition,
  after the producer-epoch and coordinator-epoch checks, then made durable; it closes the
  producer's transaction there (the LSO moves; an abort adds an aborted-index entry) and
  wakes parked fetches. A ``__consumer_offsets`` partition is handed to the group runtime
  (``complete_transaction``), whose NOT_COORDINATOR-like answers become
  NOT_LEADER_OR_FOLLOWER as in Kafka's KafkaApis.
* **WriteTxnMarkers** (key 27, v1-2): the same marker writes for a request (the admin
  abort of ``kafka-transactions.sh``, or a coordinator on another node), one answer per
  partition; **DescribeProducers** (key 61, v0): the producer state of led partitions.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from coordinator.catalog import TopicCatalog, TopicInfo
from coordinator.dataplane.offsets_topic import OffsetsTopic
from coordinator.dataplane.producers import PartitionProducers, note_transactional
from coordinator.dataplane.reads import READ_COMMITTED, last_stable_offset
from coordinator.dataplane.transactions import PartitionTxns, VerificationGuard, marker_batch
from coordinator.server.handler import Answer, ClientInfo, Deferred, HandlerResult
from protocol.error_responses import error_response
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages.describe_producers import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
    TopicResponse,
)
from protocol.messages.produce import ProduceRequest
from protocol.messages.write_txn_markers import (
    WritableTxnMarker,
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from storage.interface import Durability, NotOwnerError, PartitionLog
from storage.record_batch import (
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    BatchHeader,
    CorruptBatchError,
    parse_header,
)
from storage.records import OFFSETS_TOPIC

log = logging.getLogger("kgc.data")

TopicPartition = tuple[str, int]
# The transaction coordinator's check (``coordinator.txn.verify.TxnVerifier.verify``).
VerifyFn = Callable[
    [str, int, int, Sequence[TopicPartition]], Awaitable[dict[TopicPartition, ErrorCode]]
]
# TV2's add by the partition leader (Kafka's AddPartitionsToTxn v5 from the leader): the
# transaction coordinator's ``TxnRuntime.add_partitions`` at client transaction version 2.
AddFn = Callable[[str, int, int, Sequence[TopicPartition]], Awaitable[ErrorCode]]
# The group runtime's marker on a __consumer_offsets partition:
# (partition, producer id, producer epoch, coordinator epoch, commit) -> code.
CompleteFn = Callable[[int, int, int, int, bool], Awaitable[ErrorCode]]

_RETRY_AS_NOT_ENOUGH_REPLICAS = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)
_GROUP_NOT_READY = frozenset(
    {
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.NOT_COORDINATOR,
    }
)
# Produce v11 is the first whose clients know TRANSACTION_ABORTABLE (KIP-890).
TRANSACTION_ABORTABLE_PRODUCE_VERSION = 11
# Produce v12 is TV2's: the leader adds the partition to the transaction (KIP-890 part 2).
ADD_PARTITION_PRODUCE_VERSION = 12

NOT_IN_TRANSACTION = "Record was not part of an ongoing transaction"


class Refusal(NamedTuple):
    """Why a transactional batch is not appended. ``in_log``: refused by the log's own
    checks, whose answers carry the log start offset (Kafka's appendToLocalLog); the
    verification's refusals come before the log and carry -1."""

    code: int
    message: str | None
    in_log: bool = True


def verification_error(code: int, produce_version: int) -> Refusal:
    """A coordinator's verification answer as a produce error (Kafka's
    AddPartitionsToTxnManager, then ReplicaManager's postVerificationCallback)."""
    if code == ErrorCode.PRODUCER_FENCED:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    elif (
        code == ErrorCode.TRANSACTION_ABORTABLE
        and produce_version < TRANSACTION_ABORTABLE_PRODUCE_VERSION
    ):
        code = ErrorCode.INVALID_TXN_STATE
    if code == ErrorCode.INVALID_TXN_STATE:
        return Refusal(code, "Partition was not added to the transaction", False)
    if (
        code == ErrorCode.CONCURRENT_TRANSACTIONS
        and produce_version >= ADD_PARTITION_PRODUCE_VERSION
    ):
        return Refusal(code, None, False)  # TV2: after the leader's own retries
    if code in _RETRY_AS_NOT_ENOUGH_REPLICAS:
        return Refusal(
            ErrorCode.NOT_ENOUGH_REPLICAS,
            "Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {ErrorCode(code).name}",
            False,
        )
    return Refusal(code, None, False)


@dataclass(slots=True)
class Verification:
    """One Produce's question to the coordinator, and the guards taken before it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    guards: dict[TopicPartition, VerificationGuard]
    errors: dict[TopicPartition, int] = field(default_factory=dict)


class Plane(Protocol):
    """What ``TxnLog`` uses of the data plane that owns it (``plane.DataPlane``)."""

    catalog: TopicCatalog
    flusher: Durability
    offsets_topic: OffsetsTopic | None
    clock: Callable[[], int]
    producers: dict[PartitionLog, PartitionProducers]

    def served_log(
        self, info: TopicInfo, partition: int
    ) -> tuple[PartitionLog | None, ErrorCode]: ...
    def table_for(self, plog: PartitionLog) -> PartitionProducers: ...
    def leader_epoch_of(self, plog: PartitionLog) -> int: ...
    def wake(self, plog: PartitionLog) -> None: ...
    def needs_flush_wait(self, plog: PartitionLog, offset: int) -> bool: ...
    def produce_checked(
        self,
        header: RequestHeader,
        req: ProduceRequest,
        client: ClientInfo,
        request_error: int,
        checked: Verification | None,
    ) -> HandlerResult: ...


class TxnLog:
    def __init__(self, plane: Plane) -> None:
        self.plane = plane
        self.verify: VerifyFn | None = None
        self.add: AddFn | None = None
        self.complete_transaction: CompleteFn | None = None
        self.noted: weakref.WeakSet[PartitionLog] = weakref.WeakSet()
        # Logs read here that the group runtime writes: (producer state, replayed up to,
        # the log's cut_backs then).
        self.followed: weakref.WeakKeyDictionary[
            PartitionLog, tuple[PartitionProducers, int, int]
        ] = weakref.WeakKeyDictionary()

    # ------------------------------------------------------------ produce and fetch

    def txns_of(self, plog: PartitionLog | None) -> Callable[[], PartitionTxns | None]:
        """The partition's transactions as a Fetch re-reads them (the producer table is
        replaced when the log is cut back or changes hands)."""

        def txns() -> PartitionTxns | None:
            table = None if plog is None else self.table_of(plog)
            return None if table is None else table.txns

        return txns

    def last_stable_offset(self, plog: PartitionLog) -> int:
        table = self.table_of(plog)
        return last_stable_offset(plog, None if table is None else table.txns)

    def table_of(self, plog: PartitionLog) -> PartitionProducers | None:
        """A readable log's producer state: a data partition's own table, or, for a log
        the group runtime writes (``__consumer_offsets``: its transactional offset commits
        and their markers), one that follows it, replaying what was appended since the
        last read (from scratch after a cut-back)."""
        table = self.plane.producers.get(plog)
        if table is not None or plog.dir.name.rpartition("-")[0] != OFFSETS_TOPIC:
            return table  # a data log without a table is not served (being released)
        followed = self.followed.get(plog)
        if followed is None or followed[2] != plog.cut_backs:
            followed = (PartitionProducers(), plog.log_start_offset, plog.cut_backs)
        table, offset, generation = followed
        if offset < plog.log_end_offset:
            now = self.plane.clock()
            for h, batch in plog.iter_batches(offset):
                if h.producer_id >= 0:
                    table.replay(h, batch, now)
                offset = h.next_offset
        self.followed[plog] = (table, offset, generation)
        return table

    def fetchable_end(self, plog: PartitionLog, isolation_level: int) -> int | None:
        """Where ListOffsets answers stop: the LSO for read_committed, else the default."""
        return self.last_stable_offset(plog) if isolation_level == READ_COMMITTED else None

    async def produce_verified(
        self, header: RequestHeader, req: ProduceRequest, client: ClientInfo, v: Verification
    ) -> Answer:
        """A transactional Produce once the coordinator answered its verification (or,
        from Produce v12, added the partitions)."""
        if header.api_version >= ADD_PARTITION_PRODUCE_VERSION and self.add is not None:
            await self.add_to_transaction(v)
        else:
            await self.ask(v)
        result = self.plane.produce_checked(header, req, client, ErrorCode.NO_ERROR, v)
        return await result if isinstance(result, Deferred) else result

    def start(self, req: ProduceRequest, version: int = 0) -> Verification | ErrorCode | None:
        """The verification a transactional Produce needs (None: none), or the whole
        request's error (INVALID_PRODUCER_ID_MAPPING: batches of two producers)."""
        plane = self.plane
        tv2 = version >= ADD_PARTITION_PRODUCE_VERSION and self.add is not None
        producer: tuple[int, int] | None = None
        guards: dict[TopicPartition, VerificationGuard] = {}
        for t in req.topic_data:
            info = plane.catalog.get(t.name)
            for p in t.partition_data:
                records = p.records
                if records is None or len(records) < HEADER_SIZE:
                    continue
                try:
                    h = parse_header(records)
                except CorruptBatchError:
                    continue  # refused by the append's validation
                if not h.attributes & ATTR_TRANSACTIONAL or h.producer_id < 0:
                    continue
                if producer is None:
                    producer = (h.producer_id, h.producer_epoch)
                elif producer != (h.producer_id, h.producer_epoch):
                    return ErrorCode.INVALID_PRODUCER_ID_MAPPING
                if info is None or info.is_internal or self.verify is None:
                    continue
                plog, _ = plane.served_log(info, p.index)
                if plog is None:
                    continue
                table = plane.table_for(plog)
                pid, epoch = producer
                if table.in_transaction(pid, epoch) or epoch < table.epoch_of(pid):
                    continue  # nothing to ask, or fenced at the append
                guards[(t.name, p.index)] = table.txns.guard(
                    pid, epoch, h.base_sequence, plane.clock(), tv2
                )
        if not guards or producer is None or req.transactional_id is None:
            return None
        return Verification(req.transactional_id, producer[0], producer[1], guards)

    async def ask(self, v: Verification) -> None:
        """Ask the coordinator; every partition gets its answer in ``v.errors``."""
        assert self.verify is not None
        parts = list(v.guards)
        try:
            answers = await self.verify(v.transactional_id, v.producer_id, v.producer_epoch, parts)
        except Exception as e:
            log.warning("verifying %s with the transaction coordinator failed: %r", parts, e)
            answers = {}
        for tp in parts:
            v.errors[tp] = answers.get(tp, ErrorCode.COORDINATOR_NOT_AVAILABLE)

    async def add_to_transaction(self, v: Verification) -> None:
        """TV2: the coordinator adds the partitions (durably) before the append."""
        assert self.add is not None
        parts = list(v.guards)
        try:
            code = await self.add(v.transactional_id, v.producer_id, v.producer_epoch, parts)
        except Exception as e:
            log.warning("adding %s to the transaction failed: %r", parts, e)
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        for tp in parts:
            v.errors[tp] = code

    def admit(
        self,
        table: PartitionProducers,
        tp: TopicPartition,
        h: BatchHeader,
        checked: Verification | None,
        version: int,
        plog: PartitionLog,
    ) -> Refusal | None:
        """Whether a transactional batch may be appended now (None) or its error."""
        producer_id, epoch, base_sequence = h.producer_id, h.producer_epoch, h.base_sequence
        if self.verify is None:
            return Refusal(
                ErrorCode.INVALID_TXN_STATE,
                "kgc has no transaction coordinator; transactional produce is not supported",
                False,
            )
        if table.in_transaction(producer_id, epoch):
            return None
        code = (
            checked.errors.get(tp, ErrorCode.NO_ERROR)
            if checked is not None
            else ErrorCode.NO_ERROR
        )
        if code != ErrorCode.NO_ERROR:
            return verification_error(code, version)
        guard = checked.guards.get(tp) if checked is not None else None
        if guard is None or table.txns.verifying.get(producer_id) is not guard:
            return Refusal(ErrorCode.INVALID_TXN_STATE, NOT_IN_TRANSACTION)
        if guard.supports_epoch_bump and base_sequence != 0 and table.is_empty(producer_id):
            # TV2 bumps the epoch per transaction, so a producer new to the partition starts
            # at 0 (Kafka's ProducerAppendInfo.checkSequence; its answer carries no message).
            return Refusal(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
        if base_sequence > guard.lowest_sequence:
            # An earlier batch of this producer is still on its way (Kafka's
            # VerificationStateEntry.lowestSequence): the client retries in order.
            return Refusal(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"Out of order sequence number for producer {producer_id}: {base_sequence} "
                f"(incoming seq. number), {guard.lowest_sequence} (earliest seen sequence)",
            )
        return self.note_transactional(plog)

    def note_transactional(self, plog: PartitionLog) -> Refusal | None:
        """Before the first transaction of a partition: note where its transactional data
        starts, so a restart replays its producer state from there (``rebuild_producers``)."""
        if plog in self.noted:
            return None
        try:
            # From the durable end: what lies past it may be cut back after a failed fsync
            # and written again, the transaction's first batch then at a lower offset.
            note_transactional(plog, min(plog.durable_end, plog.log_end_offset))
        except OSError as e:
            log.error("noting transactional data in %s failed: %r", plog.dir.name, e)
            return Refusal(ErrorCode.KAFKA_STORAGE_ERROR, str(e), False)
        self.noted.add(plog)
        return None

    # ------------------------------------------------------------ markers

    async def write_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        transaction_version: int = 0,
    ) -> ErrorCode:
        """Append a COMMIT/ABORT marker to one partition and make it durable."""
        plane = self.plane
        if topic == OFFSETS_TOPIC:
            return await self._complete_offsets(
                partition, producer_id, producer_epoch, coordinator_epoch, commit
            )
        info = plane.catalog.get(topic)
        if info is None or info.is_internal:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        plog, code = plane.served_log(info, partition)
        if plog is None:
            return code
        if plog.damaged is not None:
            return ErrorCode.KAFKA_STORAGE_ERROR
        table = plane.table_for(plog)
        verdict = table.check_marker(
            producer_id, producer_epoch, coordinator_epoch, transaction_version
        )
        if verdict.error:
            log.info(
                "marker for producer %d on %s refused: %s",
                producer_id,
                plog.dir.name,
                verdict.message,
            )
            return ErrorCode(verdict.error)
        refused = self.note_transactional(plog)
        if refused is not None:
            return ErrorCode(refused.code)
        now = plane.clock()
        epoch = plane.leader_epoch_of(plog)
        batch = marker_batch(producer_id, producer_epoch, coordinator_epoch, commit, now, epoch)
        generation = plog.cut_backs
        try:
            base, _ = plog.append(batch, epoch)
        except OSError as e:
            log.error("marker append to %s failed: %r", plog.dir.name, e)
            return ErrorCode.KAFKA_STORAGE_ERROR
        table.record_marker(
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit,
            base,
            now,
            now,
            transaction_version,
        )
        if plog.config.flush_policy != "batch":
            plane.wake(plog)
        if not plane.needs_flush_wait(plog, base):
            return ErrorCode.NO_ERROR
        try:
            await plane.flusher.wait_durable(plog, base, generation=generation)
        except NotOwnerError:
            return ErrorCode.NOT_LEADER_FOR_PARTITION
        except Exception as e:
            log.error("marker of %s not made durable: %r", plog.dir.name, e)
            return (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if plog.closed
                else ErrorCode.KAFKA_STORAGE_ERROR
            )
        plane.wake(plog)  # the LSO may have moved: parked read_committed fetches answer
        return ErrorCode.NO_ERROR

    async def _complete_offsets(
        self, partition: int, producer_id: int, epoch: int, coordinator_epoch: int, commit: bool
    ) -> ErrorCode:
        complete = self.complete_transaction
        if complete is None:
            return ErrorCode.NOT_LEADER_FOR_PARTITION
        try:
            code = await complete(partition, producer_id, epoch, coordinator_epoch, commit)
        except Exception as e:
            log.error("completing the transaction on %s-%d failed: %r", OFFSETS_TOPIC, partition, e)
            return ErrorCode.UNKNOWN
        # Kafka's KafkaApis: the coordinator is not ready there; the sender retries.
        return ErrorCode.NOT_LEADER_FOR_PARTITION if code in _GROUP_NOT_READY else code

    def write_txn_markers(
        self, header: RequestHeader, req: WriteTxnMarkersRequest, client: ClientInfo
    ) -> HandlerResult:
        if not req.markers:
            return WriteTxnMarkersResponse(markers=[])
        if any(m.producer_id < 0 or m.producer_epoch < 0 for m in req.markers):
            # Kafka cannot build such a marker (IllegalArgumentException): the whole request
            # fails with UNKNOWN_SERVER_ERROR.
            refused: WriteTxnMarkersResponse = error_response(
                header.api_key, header.api_version, req, ErrorCode.UNKNOWN
            )
            return refused
        # The appends happen in request order: each write appends before its first await.
        targets = [
            (m, t.name, p) for m in req.markers for t in m.topics for p in t.partition_indexes
        ]
        tasks = [
            asyncio.ensure_future(
                self.write_marker(
                    name,
                    p,
                    m.producer_id,
                    m.producer_epoch,
                    m.coordinator_epoch,
                    m.transaction_result,
                    m.transaction_version if header.api_version >= 2 else 0,
                )
            )
            for m, name, p in targets
        ]
        return Deferred.task(self._markers_response(targets, tasks))

    @staticmethod
    async def _markers_response(
        targets: list[tuple[WritableTxnMarker, str, int]],
        tasks: Sequence[Awaitable[ErrorCode]],
    ) -> WriteTxnMarkersResponse:
        codes = await asyncio.gather(*tasks)
        by_pid: dict[int, dict[str, WritableTxnMarkerTopicResult]] = {}
        for (m, topic, partition), code in zip(targets, codes, strict=True):
            topics = by_pid.setdefault(m.producer_id, {})
            tr = topics.setdefault(topic, WritableTxnMarkerTopicResult(name=topic))
            tr.partitions.append(
                WritableTxnMarkerPartitionResult(partition_index=partition, error_code=code)
            )
        return WriteTxnMarkersResponse(
            markers=[
                WritableTxnMarkerResult(producer_id=pid, topics=list(topics.values()))
                for pid, topics in by_pid.items()
            ]
        )

    # ------------------------------------------------------------ DescribeProducers

    def describe_producers(
        self, header: RequestHeader, req: DescribeProducersRequest, client: ClientInfo
    ) -> DescribeProducersResponse:
        plane = self.plane
        topics = []
        for t in req.topics:
            tr = TopicResponse(name=t.name)
            topics.append(tr)
            info = plane.catalog.get(t.name)
            offsets = plane.offsets_topic
            offsets_info = None if offsets is None else offsets.info
            if offsets is not None and offsets.names(t.name, None):
                info = offsets_info  # the group runtime's transactional offset commits
            for index in t.partition_indexes:
                pr = PartitionResponse(partition_index=index)
                tr.partitions.append(pr)
                if info is None or (info.is_internal and info is not offsets_info):
                    pr.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    pr.error_message = "This server does not host this topic-partition."
                    continue
                plog, code = plane.served_log(info, index)
                if plog is None:
                    pr.error_code = code
                    continue
                table = self.table_of(plog) or plane.table_for(plog)
                pr.active_producers = [
                    ProducerState(
                        producer_id=e.producer_id,
                        producer_epoch=e.epoch,
                        last_sequence=e.last_seq,
                        last_timestamp=e.last_timestamp,
                        coordinator_epoch=e.coordinator_epoch,
                        current_txn_start_offset=e.current_txn_first_offset,
                    )
                    for e in table.entries.values()
                ]
        return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
