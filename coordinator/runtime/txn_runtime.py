"""The transaction runtime: where the pure transaction coordinator meets the log and time.

How this works
--------------
``coordinator/txn``'s ``TransactionCoordinator`` decides; this runtime

1. loads each ``__transaction_state`` partition this node leads (all of them on one node)
   by replaying its log, every batch's CRC checked, and re-drives the markers of every
   transaction found in PrepareCommit/PrepareAbort (Kafka's load, notes 4.4). A partition's
   log is created on its first write, so a node that never sees a transaction keeps none;
2. makes each ``TxnWrite`` durable before the coordinator applies it: one record appended
   to its partition (a checked write, stamped with the partition's leader epoch) and a
   wait for the flusher, then ``coordinator.written``. A failed append or fsync is Kafka's
   storage answer, NOT_COORDINATOR, and the coordinator drops the pending transition;
3. delivers markers through the ``MarkerWriter`` seam, one task per transaction: each
   partition is sent until it is done (retriable results back off
   ``MARKER_RETRY_BACKOFF_MS`` and go again, as Kafka's marker sender re-enqueues them);
   when the last is done the Complete* record is written (retried while the log answers
   COORDINATOR_NOT_AVAILABLE). A fenced result (INVALID_PRODUCER_EPOCH,
   TRANSACTION_COORDINATOR_FENCED) stops the task, leaving the transaction in Prepare*
   for the next load;
4. runs Kafka's two sweeps: the abort of timed-out transactions every
   ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` and the expiry of idle
   transactional ids every ``transaction.remove.expired.transaction.cleanup.interval.ms``.

Writes for one id never interleave: the coordinator's pending state answers
CONCURRENT_TRANSACTIONS to a second one while the first is in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from coordinator.txn.coordinator import TransactionCoordinator, TxnOutcome, TxnWrite
from coordinator.txn.markers import MarkerWriter, TxnMarker, marker_outcome
from coordinator.txn.metadata import TransactionMetadata
from coordinator.txn.records import TRANSACTION_STATE_TOPIC
from coordinator.txn.verify import ADD_RETRY_BACKOFF_MS, ADD_RETRY_MAX_MS
from protocol.errors import ErrorCode
from storage.interface import Durability, LogConfig, Logs, PartitionLog, wall_clock_ms
from storage.record_batch import key_values

__all__ = ["MARKER_RETRY_BACKOFF_MS", "InProcessMarkers", "ProducerIdSpare", "TxnRuntime"]

log = logging.getLogger("kgc.txn")
E = ErrorCode
Clock = Callable[[], int]
TopicPartition = tuple[str, int]
MARKER_RETRY_BACKOFF_MS = 100  # Kafka's marker sender retries at its request backoff
_COMPLETE_RETRY_MS = 100


# One partition's marker write: (topic, partition, producer id, producer epoch,
# coordinator epoch, commit, transaction version) -> its code.
WriteMarker = Callable[[str, int, int, int, int, bool, int], Awaitable[ErrorCode]]


class InProcessMarkers:
    """The ``MarkerWriter`` of one node: every partition's marker written in-process (the
    data plane's per-partition write, which hands ``__consumer_offsets`` partitions to the
    group runtime), all partitions at once. A write that raises is a storage error, which
    the sender retries."""

    def __init__(self, write_marker: WriteMarker) -> None:
        self.write_marker = write_marker

    async def write_markers(self, marker: TxnMarker) -> dict[TopicPartition, ErrorCode]:
        results = await asyncio.gather(
            *(
                self.write_marker(
                    topic,
                    partition,
                    marker.producer_id,
                    marker.producer_epoch,
                    marker.coordinator_epoch,
                    marker.commit,
                    marker.transaction_version,
                )
                for topic, partition in marker.partitions
            ),
            return_exceptions=True,
        )
        out: dict[TopicPartition, ErrorCode] = {}
        for tp, r in zip(marker.partitions, results, strict=True):
            if isinstance(r, BaseException):
                log.error("writing the marker of %s failed: %r", tp, r)
                out[tp] = E.KAFKA_STORAGE_ERROR
            else:
                out[tp] = ErrorCode(r)
        return out


class ProducerIdSpare:
    """One producer id taken ahead, for the pure core, which takes ids synchronously.

    The core calls ``take`` (a new transactional id, a rotation at epoch exhaustion: at most
    one per request); the runtime calls ``fill`` before each InitProducerId, so the
    allocator (a local block file, or a block from the database in cluster mode) is only
    awaited here. Ids skipped by a crash are never reused, as Kafka's blocks.
    """

    def __init__(self) -> None:
        self.spare: int | None = None

    def take(self) -> int:
        pid = self.spare
        if pid is None:
            raise LookupError("no producer id was taken ahead")
        self.spare = None
        return pid

    async def fill(self, allocate: Callable[[], int | Awaitable[int]]) -> None:
        if self.spare is None:
            got = allocate()
            pid = await got if inspect.isawaitable(got) else got
            if self.spare is None:
                self.spare = pid


class TxnRuntime:
    def __init__(
        self,
        coordinator: TransactionCoordinator,
        logs: Logs,
        flusher: Durability,
        *,
        log_config: LogConfig,
        markers: MarkerWriter | None,
        producer_ids: Callable[[], int | Awaitable[int]],
        spare: ProducerIdSpare,
        clock: Clock = wall_clock_ms,
    ) -> None:
        """``spare`` is the one ``coordinator`` takes producer ids from; ``producer_ids``
        allocates them."""
        self.coordinator = coordinator
        self.producer_ids = producer_ids
        self.spare = spare
        self.logs = logs
        self.flusher = flusher
        self.log_config = log_config
        self.markers = markers
        self.clock = clock
        self.leader_epochs: dict[int, int] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.loaded = asyncio.Event()

    # -- ownership
    @property
    def num_partitions(self) -> int:
        return self.coordinator.config.transaction_state_log_num_partitions

    def start(self, partitions: Sequence[int], coordinator_epoch: int = 0) -> None:
        """Serve ``partitions`` (one node: all of them; a worker: its own), loading in the
        background (their ids answer COORDINATOR_LOAD_IN_PROGRESS meanwhile), and run the
        sweeps."""
        for p in partitions:
            self.coordinator.begin_load(p, coordinator_epoch)
        self._spawn(self._load(list(partitions), coordinator_epoch))
        self._spawn(self._sweep_timeouts())
        self._spawn(self._sweep_expired())

    async def _load(self, partitions: list[int], coordinator_epoch: int) -> None:
        try:
            for p in partitions:
                await self.acquire(p, coordinator_epoch)
        finally:
            self.loaded.set()

    async def load(self) -> None:
        """``start`` every partition and wait for the load (tests, tools)."""
        self.start(range(self.num_partitions))
        await self.loaded.wait()

    def begin_acquire(self, partition: int, coordinator_epoch: int) -> None:
        """A cluster node took the partition's lease: its ids answer
        COORDINATOR_LOAD_IN_PROGRESS until ``acquire`` (after the log is filled) ends."""
        self.coordinator.begin_load(partition, coordinator_epoch)

    def serves(self, partition: int) -> bool:
        """This node coordinates the partition (loaded or loading)."""
        return partition in self.coordinator.partitions

    async def acquire(self, partition: int, coordinator_epoch: int) -> None:
        """This node leads ``partition`` at ``coordinator_epoch``: replay it, re-drive markers."""
        part = self.coordinator.partitions.get(partition)
        if part is None or part.coordinator_epoch != coordinator_epoch or not part.loading:
            self.coordinator.begin_load(partition, coordinator_epoch)
        self.leader_epochs[partition] = coordinator_epoch
        plog = self.logs.get(TRANSACTION_STATE_TOPIC, partition)
        records: list[tuple[bytes, bytes | None]] = []
        if plog is not None:
            if plog.damaged:
                log.error(
                    "transaction state partition %d is damaged (%s); its ids answer "
                    "NOT_COORDINATOR",
                    partition,
                    plog.damaged,
                )
                self.coordinator.unload_partition(partition)
                return
            for _header, batch in plog.verified_batches():
                for key, value in key_values(batch):
                    if key is not None:
                        records.append((key, value))
                await asyncio.sleep(0)
        redo = self.coordinator.load_partition(partition, coordinator_epoch, records, self.clock())
        for marker in redo:
            txn_id = self._txn_id_of(partition, marker)
            if txn_id is not None:
                self._send(txn_id, marker)

    def release(self, partition: int) -> None:
        self.coordinator.unload_partition(partition)
        self.leader_epochs.pop(partition, None)

    def _txn_id_of(self, partition: int, marker: TxnMarker) -> str | None:
        part = self.coordinator.partitions.get(partition)
        if part is None:
            return None
        for txn_id, md in part.ids.items():
            if md.producer_id == marker.producer_id and md.pending_complete is not None:
                return txn_id
        return None

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        for task in list(self.tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # -- the APIs
    async def init_producer_id(
        self, txn_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> TxnOutcome:
        try:
            await self.spare.fill(self.producer_ids)
        except Exception as exc:  # the block file or the database failed: retriable
            log.error("allocating a producer id failed: %r", exc)
            return TxnOutcome(E.COORDINATOR_NOT_AVAILABLE)
        # No await between the fill and the core's call: the spare is there for it.
        return await self.persist(
            self.coordinator.init_producer_id(
                txn_id, timeout_ms, producer_id, producer_epoch, self.clock()
            )
        )

    async def add_partitions(
        self,
        txn_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
        client_transaction_version: int = 0,
    ) -> TxnOutcome:
        """A client's add (TV1), or a partition leader's (TV2: version 2)."""
        return await self.persist(
            self.coordinator.add_partitions(
                txn_id,
                producer_id,
                producer_epoch,
                partitions,
                self.clock(),
                client_transaction_version,
            )
        )

    async def add_for_leader(
        self,
        txn_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> ErrorCode:
        """TV2's add by a partition leader or the group coordinator (Kafka's
        AddPartitionsToTxn v5), CONCURRENT_TRANSACTIONS (the previous transaction's markers
        still going out) retried every ``add.partitions.to.txn.retry.backoff.ms`` for at
        most ``add.partitions.to.txn.retry.max.ms``, as Kafka's leader does."""
        waited = 0
        while True:
            o = await self.add_partitions(txn_id, producer_id, producer_epoch, partitions, 2)
            if o.error is not E.CONCURRENT_TRANSACTIONS or waited >= ADD_RETRY_MAX_MS:
                return o.error
            await asyncio.sleep(ADD_RETRY_BACKOFF_MS / 1000)
            waited += ADD_RETRY_BACKOFF_MS

    async def add_offsets(
        self, txn_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> TxnOutcome:
        return await self.persist(
            self.coordinator.add_offsets(
                txn_id, producer_id, producer_epoch, group_id, self.clock()
            )
        )

    async def end_txn(
        self, txn_id: str, producer_id: int, producer_epoch: int, commit: bool, tv2: bool = False
    ) -> TxnOutcome:
        return await self.persist(
            self.coordinator.end_txn(txn_id, producer_id, producer_epoch, commit, self.clock(), tv2)
        )

    def verify(
        self,
        txn_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        return self.coordinator.verify(txn_id, producer_id, producer_epoch, partitions)

    def describe(self, txn_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        return self.coordinator.describe(txn_id)

    # -- writes
    async def persist(self, outcome: TxnOutcome) -> TxnOutcome:
        """Make ``outcome``'s write durable, apply it, start its markers; the answer."""
        w = outcome.write
        if w is None:
            return outcome
        error = await self._append(w)
        done = self.coordinator.written(w, error, self.clock())
        if done.markers is not None:
            self._send(w.transactional_id, done.markers)
        return done

    async def _append(self, w: TxnWrite) -> ErrorCode:
        plog = self._log(w.partition)
        if plog is None:
            return E.NOT_COORDINATOR
        try:
            _, last = plog.append_records(
                [(w.key, w.value)],
                timestamp_ms=self.clock(),
                partition_leader_epoch=self.leader_epochs.get(w.partition, 0),
            )
            await self.flusher.wait_durable(plog, last)
        except Exception as exc:
            # Kafka's coordinator answers NOT_COORDINATOR for a storage error.
            log.error(
                "writing %s of %r to transaction state partition %d failed: %r",
                w.kind.value,
                w.transactional_id,
                w.partition,
                exc,
            )
            return E.NOT_COORDINATOR
        return E.NO_ERROR

    def _log(self, partition: int) -> PartitionLog | None:
        if partition not in self.leader_epochs:
            return None
        plog = self.logs.get(TRANSACTION_STATE_TOPIC, partition)
        if plog is None:
            plog = self.logs.get_or_create(TRANSACTION_STATE_TOPIC, partition, self.log_config)
        return plog

    # -- markers
    def _send(self, txn_id: str, marker: TxnMarker) -> None:
        self._spawn(self._deliver(txn_id, marker))

    async def _deliver(self, txn_id: str, marker: TxnMarker) -> None:
        writer = self.markers
        if writer is None:
            log.error("no marker writer: %r stays in its prepared state", txn_id)
            return
        remaining = list(marker.partitions)
        coord = self.coordinator
        while remaining:
            send = TxnMarker(
                marker.producer_id,
                marker.producer_epoch,
                marker.coordinator_epoch,
                marker.commit,
                tuple(remaining),
                marker.transaction_version,
            )
            try:
                results = await writer.write_markers(send)
            except Exception as exc:  # a lost connection: every partition again
                log.warning("markers of %r failed: %r; retrying", txn_id, exc)
                results = {}
            retry = []
            for tp in remaining:
                outcome = marker_outcome(results.get(tp, E.NETWORK_EXCEPTION))
                if outcome == "fenced":
                    log.warning(
                        "markers of %r fenced at %s: %s; left to the next coordinator",
                        txn_id,
                        tp,
                        results[tp].name,
                    )
                    return
                if outcome == "retry":
                    retry.append(tp)
                elif not coord.marker_partition_done(txn_id, marker, tp):
                    return  # the partition moved or reloaded: the next owner finishes
            remaining = retry
            if remaining:
                await asyncio.sleep(MARKER_RETRY_BACKOFF_MS / 1000)
        w = coord.markers_done(txn_id, marker)
        while w is not None:
            error = await self._append(w)
            done = coord.written(w, error, self.clock())
            w = done.write  # set again only for a completion to retry
            if w is not None:
                await asyncio.sleep(_COMPLETE_RETRY_MS / 1000)

    # -- sweeps
    async def _sweep_timeouts(self) -> None:
        interval = (
            self.coordinator.config.transaction_abort_timed_out_transaction_cleanup_interval_ms
        )
        while True:
            await asyncio.sleep(interval / 1000)
            await self.abort_timed_out()

    async def abort_timed_out(self) -> None:
        for outcome in self.coordinator.timed_out_transactions(self.clock()):
            done = await self.persist(outcome)
            if done.error is not E.NO_ERROR:
                log.warning(
                    "abort of timed-out transaction %r failed: %s",
                    outcome.transactional_id,
                    done.error.name,
                )

    async def _sweep_expired(self) -> None:
        interval = (
            self.coordinator.config.transaction_remove_expired_transaction_cleanup_interval_ms
        )
        while True:
            await asyncio.sleep(interval / 1000)
            await self.expire_ids()

    async def expire_ids(self) -> None:
        for w in self.coordinator.expired_transactional_ids(self.clock()):
            await self.persist(TxnOutcome(write=w))
