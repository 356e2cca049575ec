"""TransactionCoordinator: the pure transaction coordinator of one node (TV1 protocol).

How this works
--------------
Kafka's TransactionCoordinator and TransactionStateManager without I/O and without a clock.
The coordinator holds the metadata of every transactional id of the ``__transaction_state``
partitions this node owns (``load_partition`` / ``unload_partition``; an id of a partition
being loaded answers COORDINATOR_LOAD_IN_PROGRESS, of one not owned NOT_COORDINATOR).

Every API is a method taking ``now_ms`` and returning a ``TxnOutcome``: either an answer
(error, producer id and epoch), or a ``TxnWrite`` -- one record for a partition of
``__transaction_state`` -- that the runtime must make durable and then hand back to
``written(write, error, now_ms)``. Only then does memory change (``TransactionMetadata``'s
prepare/complete), and ``written`` returns the answer and, after a Prepare* record, the
``TxnMarker`` to deliver. While a write is in flight the id has a pending state and answers
CONCURRENT_TRANSACTIONS to the next InitProducerId, AddPartitionsToTxn and EndTxn, as Kafka.

The checks run in Kafka's order (notes 3.3). Markers: once every partition has its marker
(``marker_partition_done``), ``markers_done`` returns the Complete* write; a stale marker
result (``markers_fenced``) leaves the id in Prepare* until the next load re-drives it.
Background work: ``timed_out_transactions`` (the abort sweep:
fence the epoch, write PrepareAbort, send ABORT markers) and ``expired_transactional_ids``
(tombstones for ids idle ``transactional.id.expiration.ms`` in Empty/Complete*).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from coordinator.txn.markers import TxnMarker
from coordinator.txn.metadata import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TxnTransit,
    is_epoch_exhausted,
)
from coordinator.txn.records import (
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)
from coordinator.txn.state import TransactionState
from protocol.errors import ErrorCode
from storage.records.offsets import java_string_hash

__all__ = [
    "TransactionCoordinator",
    "TxnConfig",
    "TxnOutcome",
    "TxnWrite",
    "WriteKind",
    "partition_for_transactional_id",
]

E = ErrorCode
_S = TransactionState
TopicPartition = tuple[str, int]
OFFSETS_TOPIC = "__consumer_offsets"


def partition_for_transactional_id(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % partitions`` (abs(MIN_VALUE) is 0)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(2**31) else abs(h)) % num_partitions


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """The coordinator's settings, by Kafka's names (``coordinator/config`` fills them)."""

    transaction_max_timeout_ms: int = 900_000
    transaction_state_log_num_partitions: int = 50
    offsets_topic_num_partitions: int = 50
    transactional_id_expiration_ms: int = 604_800_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    # The finalized ``transaction.version``: the protocol of the aborts the coordinator
    # starts itself (a fence by InitProducerId, a timeout), as Kafka's ``txnManager``'s.
    transaction_version: int = 1


class WriteKind(Enum):
    """What a write was for: what ``written`` does once it is durable."""

    INIT = "init"  # InitProducerId: Empty at the new epoch; answer (pid, epoch)
    ADD = "add"  # AddPartitionsToTxn / AddOffsetsToTxn: Ongoing; answer NONE
    END = "end"  # EndTxn: Prepare*; answer NONE, then markers
    FENCE = "fence"  # InitProducerId while Ongoing: PrepareAbort at epoch+1; answer CONCURRENT_TRANSACTIONS, then markers
    TIMEOUT = "timeout"  # the abort sweep: PrepareAbort at epoch+1, then markers
    COMPLETE = "complete"  # every marker written: Complete*
    EXPIRE = "expire"  # the id expired: a tombstone; the id leaves the cache


@dataclass(slots=True)
class TxnWrite:
    kind: WriteKind
    transactional_id: str
    partition: int  # of __transaction_state
    coordinator_epoch: int
    key: bytes
    value: bytes | None  # None: a tombstone
    transit: TxnTransit
    # For a fence or timeout abort: the epoch fence is part of this write.
    epoch_fence: bool = False


@dataclass(slots=True)
class TxnOutcome:
    error: ErrorCode = E.NO_ERROR
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    write: TxnWrite | None = None
    markers: TxnMarker | None = None
    transactional_id: str = ""


@dataclass(slots=True)
class _Partition:
    coordinator_epoch: int
    loading: bool
    ids: dict[str, TransactionMetadata] = field(default_factory=dict)


def _error(code: ErrorCode) -> TxnOutcome:
    return TxnOutcome(code)


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, new_producer_id: Callable[[], int]) -> None:
        self.config = config
        self.new_producer_id = new_producer_id
        self.partitions: dict[int, _Partition] = {}

    # -- ownership
    def partition_for(self, transactional_id: str) -> int:
        return partition_for_transactional_id(
            transactional_id, self.config.transaction_state_log_num_partitions
        )

    def begin_load(self, partition: int, coordinator_epoch: int) -> None:
        """This node now leads ``partition``: its ids answer LOAD_IN_PROGRESS until loaded."""
        self.partitions[partition] = _Partition(coordinator_epoch, loading=True)

    def load_partition(
        self,
        partition: int,
        coordinator_epoch: int,
        records: Iterable[tuple[bytes, bytes | None]],
        now_ms: int,
    ) -> list[TxnMarker]:
        """Replay ``partition``'s log (the last value of a key wins; a tombstone removes it).

        Returns the markers to re-send: every id in Prepare* gets its pending completion,
        as Kafka's load hands them to the marker sender (notes 4.4).
        """
        loaded: dict[str, TransactionMetadata] = {}
        for key, value in records:
            txn_id = decode_txn_key(key)
            if txn_id is None:
                continue
            if value is None:
                loaded.pop(txn_id, None)
                continue
            t = decode_txn_value(value)
            md = loaded.get(txn_id)
            if md is None:
                md = loaded[txn_id] = TransactionMetadata(txn_id, t.producer_id)
            md.apply_loaded(t)
        part = self.partitions.get(partition)
        if part is None or part.coordinator_epoch != coordinator_epoch:
            part = self.partitions[partition] = _Partition(coordinator_epoch, loading=True)
        part.ids = loaded
        part.loading = False
        markers = []
        for md in loaded.values():
            if md.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
                # The pending completion: the id stays blocked until Complete* is durable.
                md.pending_complete = md.prepare_complete(now_ms)
                markers.append(self._marker(md, coordinator_epoch))
        return markers

    def unload_partition(self, partition: int) -> None:
        self.partitions.pop(partition, None)

    def _lookup(self, txn_id: str) -> tuple[ErrorCode, _Partition | None]:
        part = self.partitions.get(self.partition_for(txn_id))
        if part is None:
            return E.NOT_COORDINATOR, None
        if part.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, None
        return E.NO_ERROR, part

    def metadata(self, txn_id: str) -> TransactionMetadata | None:
        part = self.partitions.get(self.partition_for(txn_id))
        return None if part is None else part.ids.get(txn_id)

    def _write(
        self, kind: WriteKind, md: TransactionMetadata, part: _Partition, t: TxnTransit
    ) -> TxnWrite:
        value = None if t.state is _S.DEAD else encode_txn_value(t)
        return TxnWrite(
            kind,
            md.transactional_id,
            self.partition_for(md.transactional_id),
            part.coordinator_epoch,
            encode_txn_key(md.transactional_id),
            value,
            t,
        )

    # -- InitProducerId
    def init_producer_id(
        self,
        txn_id: str,
        timeout_ms: int,
        expected_pid: int,
        expected_epoch: int,
        now_ms: int,
    ) -> TxnOutcome:
        """InitProducerId with a transactional id (a null one is the data plane's)."""
        if not txn_id:
            return _error(E.INVALID_REQUEST)
        if timeout_ms <= 0 or timeout_ms > self.config.transaction_max_timeout_ms:
            return _error(E.INVALID_TRANSACTION_TIMEOUT)
        err, part = self._lookup(txn_id)
        if part is None:
            return _error(err)
        md = part.ids.get(txn_id)
        if md is None:
            md = TransactionMetadata(
                txn_id,
                self.new_producer_id(),
                txn_timeout_ms=timeout_ms,
                txn_last_update_timestamp=now_ms,
            )
            part.ids[txn_id] = md
        if md.pending_transition_in_progress:
            return _error(E.CONCURRENT_TRANSACTIONS)
        expected = None if expected_pid == NO_PRODUCER_ID else (expected_pid, expected_epoch)
        if expected is not None and not (
            md.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == md.producer_id
            or (expected[0] == md.prev_producer_id and is_epoch_exhausted(expected[1]))
        ):
            return _error(E.PRODUCER_FENCED)
        state = md.state
        if state in (_S.PREPARE_ABORT, _S.PREPARE_COMMIT):
            return _error(E.CONCURRENT_TRANSACTIONS)
        if state is _S.ONGOING:
            # Fence the producer of the open transaction and abort it; the client retries
            # on CONCURRENT_TRANSACTIONS and its retry bumps again.
            fence = md.prepare_fence_producer_epoch()
            return self._abort_fenced(md, part, fence, now_ms, WriteKind.FENCE)
        if state not in (_S.EMPTY, _S.COMPLETE_ABORT, _S.COMPLETE_COMMIT):
            raise AssertionError(f"{txn_id} in state {state.kafka_name}")
        if md.is_producer_epoch_exhausted and (
            expected is None or expected[1] == md.producer_epoch
        ):
            t = md.prepare_producer_id_rotation(
                self.new_producer_id(), timeout_ms, now_ms, expected is not None
            )
        else:
            maybe = md.prepare_increment_producer_epoch(
                timeout_ms, None if expected is None else expected[1], now_ms
            )
            if maybe is None:
                return _error(E.PRODUCER_FENCED)
            t = maybe
        return TxnOutcome(write=self._write(WriteKind.INIT, md, part, t), transactional_id=txn_id)

    # -- AddPartitionsToTxn / AddOffsetsToTxn
    def add_partitions(
        self,
        txn_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
        client_transaction_version: int = 0,
    ) -> TxnOutcome:
        """The client's add (v0-3, TV1) or the partition leader's (v5, TV2: the version is
        recorded, and EndTxn then bumps the epoch)."""
        if not txn_id:
            return _error(E.INVALID_REQUEST)
        err, part = self._lookup(txn_id)
        if part is None:
            return _error(err)
        md = part.ids.get(txn_id)
        if md is None:
            return _error(E.INVALID_PRODUCER_ID_MAPPING)
        if md.producer_id != producer_id:
            return _error(E.INVALID_PRODUCER_ID_MAPPING)
        if md.producer_epoch != producer_epoch:
            return _error(E.PRODUCER_FENCED)
        if md.pending_transition_in_progress:
            return _error(E.CONCURRENT_TRANSACTIONS)
        if md.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            return _error(E.CONCURRENT_TRANSACTIONS)
        added = frozenset(partitions)
        if md.state is _S.ONGOING and added <= md.partitions:
            return _error(E.NO_ERROR)  # nothing new: no write, no timestamp update
        t = md.prepare_add_partitions(added, now_ms, client_transaction_version)
        return TxnOutcome(write=self._write(WriteKind.ADD, md, part, t), transactional_id=txn_id)

    def add_offsets(
        self, txn_id: str, producer_id: int, producer_epoch: int, group_id: str, now_ms: int
    ) -> TxnOutcome:
        h = java_string_hash(group_id)
        p = (0 if h == -(2**31) else abs(h)) % self.config.offsets_topic_num_partitions
        return self.add_partitions(
            txn_id, producer_id, producer_epoch, [(OFFSETS_TOPIC, p)], now_ms
        )

    def verify(
        self,
        txn_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn ``VerifyOnly``: no write, and the pending state is not checked."""
        if not txn_id:
            return dict.fromkeys(partitions, E.INVALID_REQUEST)
        err, part = self._lookup(txn_id)
        md = None if part is None else part.ids.get(txn_id)
        if part is None:
            pass
        elif md is None or md.producer_id != producer_id:
            err = E.INVALID_PRODUCER_ID_MAPPING
        elif md.producer_epoch != producer_epoch:
            err = E.PRODUCER_FENCED
        elif md.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            err = E.CONCURRENT_TRANSACTIONS
        if err is not E.NO_ERROR or md is None:
            return dict.fromkeys(partitions, err)
        return {
            tp: (E.NO_ERROR if tp in md.partitions else E.TRANSACTION_ABORTABLE)
            for tp in partitions
        }

    # -- EndTxn
    def end_txn(
        self,
        txn_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
        tv2: bool = False,
    ) -> TxnOutcome:
        """EndTxn from a client: TV1 protocol (versions 0-4) or TV2 (version 5)."""
        if not txn_id:
            return _error(E.INVALID_REQUEST)
        err, part = self._lookup(txn_id)
        if part is None:
            return _error(err)
        md = part.ids.get(txn_id)
        if md is None:
            return _error(E.INVALID_PRODUCER_ID_MAPPING)
        if tv2:
            return self._end_v2(
                md, part, producer_id, producer_epoch, commit, now_ms, WriteKind.END
            )
        if md.producer_id != producer_id:
            return _error(E.INVALID_PRODUCER_ID_MAPPING)
        return self._end(md, part, producer_epoch, commit, now_ms, WriteKind.END)

    def _abort_fenced(
        self,
        md: TransactionMetadata,
        part: _Partition,
        fence: TxnTransit,
        now_ms: int,
        kind: WriteKind,
    ) -> TxnOutcome:
        """The abort the coordinator starts (a fence, a timeout), at the finalized version."""
        if self.config.transaction_version >= 2:
            return self._end_v2(md, part, md.producer_id, fence.producer_epoch, False, now_ms, kind)
        return self._end(md, part, fence.producer_epoch, False, now_ms, kind)

    def _end(
        self,
        md: TransactionMetadata,
        part: _Partition,
        epoch: int,
        commit: bool,
        now_ms: int,
        kind: WriteKind,
    ) -> TxnOutcome:
        from_client = kind is WriteKind.END
        valid_epoch = (not from_client or epoch == md.producer_epoch) and (
            epoch >= md.producer_epoch
        )
        fencing = md.pending_state is _S.PREPARE_EPOCH_FENCE
        if not valid_epoch:
            if fencing:
                md.abort_transition()
            return _error(E.PRODUCER_FENCED)
        if md.pending_transition_in_progress and not fencing:
            return _error(E.CONCURRENT_TRANSACTIONS)
        state = md.state
        ok_same = E.NO_ERROR
        if state is _S.ONGOING:
            if fencing:
                # The fence: the bumped epoch is in memory before the write, and the last
                # epoch is forgotten, so the fenced producer can never retry its way in.
                md.pending_state = None
                md.producer_epoch = epoch
                md.last_producer_epoch = NO_PRODUCER_EPOCH
            t = md.prepare_abort_or_commit(
                _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT, now_ms
            )
            w = self._write(kind, md, part, t)
            w.epoch_fence = fencing
            return TxnOutcome(write=w, transactional_id=md.transactional_id)
        if fencing:
            md.abort_transition()
        if state is _S.COMPLETE_COMMIT:
            ok_same = E.NO_ERROR if commit else E.INVALID_TXN_STATE
        elif state is _S.COMPLETE_ABORT:
            ok_same = E.INVALID_TXN_STATE if commit else E.NO_ERROR
        elif state is _S.PREPARE_COMMIT:
            ok_same = E.CONCURRENT_TRANSACTIONS if commit else E.INVALID_TXN_STATE
        elif state is _S.PREPARE_ABORT:
            ok_same = E.INVALID_TXN_STATE if commit else E.CONCURRENT_TRANSACTIONS
        else:
            ok_same = E.INVALID_TXN_STATE
        if ok_same is E.NO_ERROR:
            return TxnOutcome(E.NO_ERROR, md.producer_id, md.producer_epoch)
        return _error(ok_same)

    def _end_v2(
        self,
        md: TransactionMetadata,
        part: _Partition,
        pid: int,
        epoch: int,
        commit: bool,
        now_ms: int,
        kind: WriteKind,
    ) -> TxnOutcome:
        """Kafka's ``endTransaction`` (TV2): every end bumps the epoch, so a retry is told
        apart by its epoch -- one below the current (``retry_on_bump``), or the last epoch
        of the previous producer id after a rotation (``retry_on_overflow``)."""
        fencing = md.pending_state is _S.PREPARE_EPOCH_FENCE
        if md.pending_transition_in_progress and not fencing:
            return _error(E.CONCURRENT_TRANSACTIONS)
        retry_on_overflow = (
            not fencing
            and md.prev_producer_id == pid
            and epoch == MAX_EPOCH - 1
            and md.producer_epoch == 0
        )
        retry_on_bump = not fencing and md.producer_epoch == epoch + 1
        state = md.state
        if fencing:
            valid = (kind is not WriteKind.END or epoch == md.producer_epoch) and (
                epoch >= md.producer_epoch
            )
        elif state in (_S.ONGOING, _S.EMPTY):
            valid = epoch == md.producer_epoch
        elif state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            valid = retry_on_bump
        else:
            valid = retry_on_bump or retry_on_overflow or epoch == md.producer_epoch
        error = E.NO_ERROR
        if md.producer_id != pid and not retry_on_overflow:
            error = E.INVALID_PRODUCER_ID_MAPPING
        elif not valid:
            error = E.PRODUCER_FENCED
        if error is not E.NO_ERROR:
            if fencing:
                md.abort_transition()
            return _error(error)
        is_retry = retry_on_bump or retry_on_overflow
        target: TransactionState | None = None
        if state is _S.ONGOING:
            target = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
        elif state in (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
            same = commit == (state is _S.COMPLETE_COMMIT)
            if is_retry:
                # The retry of the EndTxn that completed it: NONE for the same result.
                error = E.NO_ERROR if same else E.INVALID_TXN_STATE
            elif commit:
                error = E.INVALID_TXN_STATE
            else:
                target = _S.PREPARE_ABORT  # an abort with nothing open still bumps
        elif state is _S.PREPARE_COMMIT:
            error = E.CONCURRENT_TRANSACTIONS if commit else E.INVALID_TXN_STATE
        elif state is _S.PREPARE_ABORT:
            error = E.INVALID_TXN_STATE if commit else E.CONCURRENT_TRANSACTIONS
        elif state is _S.EMPTY:
            if commit:
                error = E.INVALID_TXN_STATE
            else:
                target = _S.PREPARE_ABORT
        else:
            raise AssertionError(f"{md.transactional_id} in state {state.kafka_name}")
        if target is None:
            if fencing:
                md.abort_transition()
            if error is E.NO_ERROR:
                return TxnOutcome(E.NO_ERROR, md.producer_id, md.producer_epoch)
            return _error(error)
        next_pid = NO_PRODUCER_ID
        if not fencing and md.is_producer_epoch_exhausted:
            next_pid = self.new_producer_id()
        if fencing:
            md.pending_state = None  # the fence gives way to the PrepareAbort below
        t = md.prepare_abort_or_commit_v2(target, next_pid, now_ms, state is not _S.ONGOING)
        w = self._write(kind, md, part, t)
        w.epoch_fence = fencing
        return TxnOutcome(write=w, transactional_id=md.transactional_id)

    # -- after a write
    def written(self, w: TxnWrite, error: ErrorCode, now_ms: int) -> TxnOutcome:
        """``w`` is durable (``error`` NONE) or failed (the write's error, Kafka-mapped)."""
        part = self.partitions.get(w.partition)
        md = None if part is None else part.ids.get(w.transactional_id)
        if part is None or part.coordinator_epoch != w.coordinator_epoch or md is None:
            # The partition moved or reloaded meanwhile: the next owner has the record.
            return _error(E.NOT_COORDINATOR)
        if error is not E.NO_ERROR:
            if w.kind is WriteKind.COMPLETE and error is E.COORDINATOR_NOT_AVAILABLE:
                # The completion is retried with the pending state kept (Kafka's
                # retryOnError): the id stays blocked until Complete* is durable.
                return TxnOutcome(error, write=w, transactional_id=w.transactional_id)
            md.abort_transition()
            if w.epoch_fence:
                md.has_failed_epoch_fence = True
            return _error(error)
        if w.kind is WriteKind.EXPIRE:
            part.ids.pop(w.transactional_id, None)
            return _error(E.NO_ERROR)
        md.complete_transition(w.transit)
        if w.kind is WriteKind.INIT:
            return TxnOutcome(E.NO_ERROR, md.producer_id, md.producer_epoch)
        if w.kind in (WriteKind.ADD, WriteKind.COMPLETE):
            return _error(E.NO_ERROR)
        # END, FENCE, TIMEOUT: Prepare* is durable; the completion is pending while the
        # markers go out, then the answer.
        md.pending_complete = md.prepare_complete(now_ms)
        marker = self._marker(md, part.coordinator_epoch)
        if w.kind is WriteKind.FENCE:
            return TxnOutcome(
                E.CONCURRENT_TRANSACTIONS, markers=marker, transactional_id=md.transactional_id
            )
        # The answer names the producer the transaction ends with: under TV2 the bumped
        # epoch, or the next producer id at epoch 0 once the epochs ran out.
        done = md.pending_complete
        return TxnOutcome(
            E.NO_ERROR,
            done.producer_id,
            done.producer_epoch,
            markers=marker,
            transactional_id=md.transactional_id,
        )

    @staticmethod
    def _marker(md: TransactionMetadata, coordinator_epoch: int) -> TxnMarker:
        return TxnMarker(
            md.producer_id,
            md.producer_epoch,
            coordinator_epoch,
            md.state is _S.PREPARE_COMMIT,
            tuple(sorted(md.partitions)),
            # The leader's stricter marker check (epoch > current) is TV2's.
            2 if md.client_transaction_version >= 2 else 0,
        )

    # -- markers
    def _marking(self, txn_id: str, marker: TxnMarker) -> TransactionMetadata | None:
        """The id's metadata if ``marker`` is still its outstanding marker on this node."""
        part = self.partitions.get(self.partition_for(txn_id))
        if part is None or part.loading or part.coordinator_epoch != marker.coordinator_epoch:
            return None
        md = part.ids.get(txn_id)
        if (
            md is None
            or md.producer_id != marker.producer_id
            or md.producer_epoch != marker.producer_epoch
            or md.state not in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT)
        ):
            return None
        return md

    def marker_partition_done(self, txn_id: str, marker: TxnMarker, tp: TopicPartition) -> bool:
        """One partition has its marker; False when the marker is no longer ours to send."""
        md = self._marking(txn_id, marker)
        if md is None:
            return False
        md.remove_partition(tp)
        return True

    def markers_done(self, txn_id: str, marker: TxnMarker) -> TxnWrite | None:
        """Every partition has its marker: the Complete* record to write (None: moved)."""
        md = self._marking(txn_id, marker)
        if md is None or md.pending_complete is None:
            return None
        part = self.partitions[self.partition_for(txn_id)]
        return self._write(WriteKind.COMPLETE, md, part, md.pending_complete)

    # -- background sweeps
    def timed_out_transactions(self, now_ms: int) -> list[TxnOutcome]:
        """Fence and abort every Ongoing transaction past its timeout (Kafka's sweep)."""
        out = []
        for part in self.partitions.values():
            if part.loading:
                continue
            for md in list(part.ids.values()):
                if (
                    md.state is _S.ONGOING
                    and not md.pending_transition_in_progress
                    and md.txn_start_timestamp + md.txn_timeout_ms < now_ms
                    and md.txn_timeout_ms != 2**31 - 1
                ):
                    fence = md.prepare_fence_producer_epoch()
                    o = self._abort_fenced(md, part, fence, now_ms, WriteKind.TIMEOUT)
                    if o.write is not None:
                        out.append(o)
        return out

    def expired_transactional_ids(self, now_ms: int) -> list[TxnWrite]:
        """Tombstones for ids idle ``transactional.id.expiration.ms`` in Empty/Complete*."""
        horizon = now_ms - self.config.transactional_id_expiration_ms
        out = []
        for part in self.partitions.values():
            if part.loading:
                continue
            for md in part.ids.values():
                if (
                    md.state.may_expire
                    and not md.pending_transition_in_progress
                    and md.txn_last_update_timestamp <= horizon
                ):
                    t = md.prepare_dead()
                    out.append(self._write(WriteKind.EXPIRE, md, part, t))
        return out

    # -- DescribeTransactions / ListTransactions
    def describe(self, txn_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        if not txn_id:
            return E.INVALID_REQUEST, None
        err, part = self._lookup(txn_id)
        if part is None:
            return err, None
        md = part.ids.get(txn_id)
        if md is None or md.state is _S.DEAD or md.pending_state is _S.DEAD:
            return E.TRANSACTIONAL_ID_NOT_FOUND, None
        return E.NO_ERROR, md

    def list_transactions(
        self,
        state_filters: Sequence[str],
        producer_id_filters: Sequence[int],
        duration_filter_ms: int,
        pattern: str | None,
        now_ms: int,
    ) -> tuple[ErrorCode, list[str], list[TransactionMetadata]]:
        """(error, unknown state filters, matching ids) for the partitions of this node."""
        if any(p.loading for p in self.partitions.values()):
            return E.COORDINATOR_LOAD_IN_PROGRESS, [], []
        unknown = [s for s in state_filters if TransactionState.from_kafka_name(s) is None]
        states = {
            st for s in state_filters if (st := TransactionState.from_kafka_name(s)) is not None
        }
        regex = None
        if pattern:
            try:
                regex = re.compile(pattern)
            except re.error:
                return E.INVALID_REGULAR_EXPRESSION, [], []
        pids = set(producer_id_filters)
        out = []
        for part in self.partitions.values():
            for md in part.ids.values():
                if md.state is _S.DEAD:
                    continue
                if state_filters and md.state not in states:
                    continue
                if pids and md.producer_id not in pids:
                    continue
                if (
                    duration_filter_ms >= 0
                    and now_ms - md.txn_start_timestamp <= duration_filter_ms
                ):
                    continue
                if regex is not None and regex.fullmatch(md.transactional_id) is None:
                    continue
                out.append(md)
        return E.NO_ERROR, unknown, out
