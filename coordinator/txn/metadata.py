"""One transactional id's metadata at the coordinator, and its two-step transitions.

How this works: a change is prepared, written, then applied (Kafka's TransactionMetadata).

1. ``prepare_*`` checks the move is legal (``state.check_transition``), sets
   ``pending_state`` and returns a ``TxnTransit``: the whole target, leaving the current
   fields untouched. While a transition is pending, the coordinator answers
   CONCURRENT_TRANSACTIONS to anything that would start another.
2. The transit's record is appended to ``__transaction_state`` and made durable.
3. ``complete_transition`` applies the transit (after Kafka's sanity checks: the epoch is
   the same, one more, or 0 with a new producer id; partitions only grow while Ongoing);
   a failed write calls ``abort_transition`` instead, and memory never holds what the log
   does not.

Two fields are never written: ``last_producer_epoch`` (the epoch before the last bump, to
recognise a retried InitProducerId; -1 after a load) and ``has_failed_epoch_fence`` (a TV1
fence whose write failed keeps the bumped epoch in memory, so the next fence does not bump
again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

from coordinator.txn.state import TransactionState, check_transition

__all__ = [
    "MAX_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TransactionMetadata",
    "TxnTransit",
    "is_epoch_exhausted",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MaxValue
TopicPartition = tuple[str, int]

_S = TransactionState


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps 32767 free so the coordinator can always fence the last epoch."""
    return epoch >= MAX_EPOCH - 1


class IllegalTransitionData(RuntimeError):
    """A transit's contents do not follow from the current metadata (a coordinator bug)."""


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """The target of one transition: what the record says, applied once it is durable."""

    producer_id: int
    prev_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    client_transaction_version: int = 0


@dataclass(slots=True, eq=False)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    prev_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 0
    state: TransactionState = _S.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    client_transaction_version: int = 0
    pending_state: TransactionState | None = None
    has_failed_epoch_fence: bool = False
    # The Complete* transit prepared when Prepare* became durable, written once every
    # partition has its marker.
    pending_complete: TxnTransit | None = None

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def remove_partition(self, tp: TopicPartition) -> None:
        """A partition's marker is durable: it leaves the set (DescribeTransactions shows it)."""
        if self.state not in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            raise IllegalTransitionData(
                f"removing {tp} of {self.transactional_id} in state {self.state.kafka_name}"
            )
        self.partitions.discard(tp)

    # -- prepare
    def prepare_fence_producer_epoch(self) -> TxnTransit:
        if self.producer_epoch == MAX_EPOCH:
            raise IllegalTransitionData("cannot fence a producer at epoch 32767")
        # A fence whose write failed already bumped the epoch in memory: do not bump again.
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(
            _S.PREPARE_EPOCH_FENCE,
            self.producer_id,
            bumped,
            NO_PRODUCER_EPOCH,
            self.txn_timeout_ms,
            frozenset(self.partitions),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    def prepare_increment_producer_epoch(
        self, new_txn_timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransit | None:
        """The InitProducerId bump; None when the expected epoch is fenced (PRODUCER_FENCED)."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransitionData(f"epochs of producer {self.producer_id} are exhausted")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            # A new producer instance: bump and forget the last epoch (a new instance
            # fences every older one, including a retry of the previous bump).
            nxt, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            nxt, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # A retry of a bump that succeeded: the current epoch, unbumped.
            nxt, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare(
            _S.EMPTY, self.producer_id, nxt, last, new_txn_timeout_ms, frozenset(), -1, now_ms
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, new_txn_timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransit:
        if self.state in (_S.ONGOING, _S.PREPARE_ABORT, _S.PREPARE_COMMIT):
            raise IllegalTransitionData("cannot rotate producer ids with a transaction pending")
        last = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare(
            _S.EMPTY, new_producer_id, 0, last, new_txn_timeout_ms, frozenset(), -1, now_ms
        )

    def prepare_add_partitions(
        self, added: frozenset[TopicPartition], now_ms: int, client_transaction_version: int = 0
    ) -> TxnTransit:
        start = (
            now_ms
            if self.state in (_S.EMPTY, _S.COMPLETE_ABORT, _S.COMPLETE_COMMIT)
            else self.txn_start_timestamp
        )
        return self._prepare(
            _S.ONGOING,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(self.partitions) | added,
            start,
            now_ms,
            client_transaction_version=client_transaction_version,
        )

    def prepare_abort_or_commit(self, new_state: TransactionState, now_ms: int) -> TxnTransit:
        # TV1: the epoch does not change at the end of a transaction.
        return self._prepare(
            new_state,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(self.partitions),
            self.txn_start_timestamp,
            now_ms,
        )

    def prepare_abort_or_commit_v2(
        self,
        new_state: TransactionState,
        next_producer_id: int,
        now_ms: int,
        no_partition_added: bool,
    ) -> TxnTransit:
        """TV2: the end of every transaction bumps the epoch (the markers carry the new one)
        and remembers the old as the last epoch, so a retried EndTxn is recognised. An
        exhausted epoch also names the next producer id, which Complete* switches to. An
        abort with nothing open (from Empty or Complete*) starts its transaction now."""
        return self._prepare(
            new_state,
            self.producer_id,
            self.producer_epoch + 1,
            self.producer_epoch,
            self.txn_timeout_ms,
            frozenset(self.partitions),
            now_ms if no_partition_added else self.txn_start_timestamp,
            now_ms,
            next_producer_id=next_producer_id,
            client_transaction_version=2,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        new_state = _S.COMPLETE_COMMIT if self.state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        # The Prepare record was durable: a fence that had failed is now written.
        self.has_failed_epoch_fence = False
        if self.client_transaction_version >= 2:
            # TV2: the bumped epoch stays, or an exhausted one gives way to the next producer
            # id at epoch 0; the last epoch stays the one the client last saw.
            overflow = self.next_producer_id != NO_PRODUCER_ID
            return self._prepare(
                new_state,
                self.next_producer_id if overflow else self.producer_id,
                0 if overflow else self.producer_epoch,
                self.last_producer_epoch,
                self.txn_timeout_ms,
                frozenset(),
                self.txn_start_timestamp,
                now_ms,
            )
        return self._prepare(
            new_state,
            self.producer_id,
            self.producer_epoch,
            self.producer_epoch,
            self.txn_timeout_ms,
            frozenset(),
            self.txn_start_timestamp,
            now_ms,
        )

    def prepare_dead(self) -> TxnTransit:
        return self._prepare(
            _S.DEAD,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    def _prepare(
        self,
        state: TransactionState,
        producer_id: int,
        epoch: int,
        last_epoch: int,
        timeout_ms: int,
        partitions: frozenset[TopicPartition],
        start_ms: int,
        now_ms: int,
        next_producer_id: int = NO_PRODUCER_ID,
        client_transaction_version: int | None = None,
    ) -> TxnTransit:
        if self.pending_state is not None:
            raise IllegalTransitionData(
                f"{self.transactional_id}: preparing {state.kafka_name} while "
                f"{self.pending_state.kafka_name} is pending"
            )
        if producer_id < 0:
            raise IllegalTransitionData(f"illegal new producer id {producer_id}")
        if state is not _S.DEAD and epoch < 0:
            raise IllegalTransitionData(f"illegal new producer epoch {epoch}")
        check_transition(self.state, state)
        self.pending_state = state
        return TxnTransit(
            producer_id,
            self.producer_id,
            next_producer_id,
            epoch,
            last_epoch,
            timeout_ms,
            state,
            partitions,
            start_ms,
            now_ms,
            self.client_transaction_version
            if client_transaction_version is None
            else client_transaction_version,
        )

    # -- complete
    def abort_transition(self) -> None:
        """The transit's write failed: nothing changes but the pending state."""
        self.pending_state = None
        self.pending_complete = None

    def complete_transition(self, t: TxnTransit) -> None:
        to = self.pending_state
        if to is None or to is not t.state:
            self._fail(t)
        if to is _S.EMPTY:
            if (
                (self.producer_epoch != t.producer_epoch and not self._valid_epoch_bump(t))
                or t.partitions
                or t.txn_start_timestamp != -1
            ):
                self._fail(t)
            self.txn_timeout_ms = t.txn_timeout_ms
            self.producer_epoch = t.producer_epoch
            self.last_producer_epoch = t.last_producer_epoch
            self.producer_id = t.producer_id
            self.prev_producer_id = t.prev_producer_id
        elif to is _S.ONGOING:
            if (
                not self._valid_epoch(t)
                or not self.partitions <= t.partitions
                or self.txn_timeout_ms != t.txn_timeout_ms
            ):
                self._fail(t)
            self.txn_start_timestamp = t.txn_start_timestamp
            self.partitions |= t.partitions
        elif to in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            tv2 = t.client_transaction_version >= 2
            if (
                not (self._valid_epoch(t) or (tv2 and self._valid_epoch_bump_v2(t)))
                or self.partitions != t.partitions
                or self.txn_timeout_ms != t.txn_timeout_ms
                or (not tv2 and self.txn_start_timestamp != t.txn_start_timestamp)
            ):
                self._fail(t)
            self.producer_epoch = t.producer_epoch
            self.last_producer_epoch = t.last_producer_epoch
            self.next_producer_id = t.next_producer_id
            self.txn_start_timestamp = t.txn_start_timestamp
        elif to in (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
            rotated = (
                t.client_transaction_version >= 2
                and self.next_producer_id != NO_PRODUCER_ID
                and t.producer_id == self.next_producer_id
                and t.producer_epoch == 0
            )
            if (
                not (self._valid_epoch(t) or rotated)
                or self.txn_timeout_ms != t.txn_timeout_ms
                or t.txn_start_timestamp == -1
            ):
                self._fail(t)
            if rotated:
                self.prev_producer_id = t.prev_producer_id
                self.producer_id = t.producer_id
                self.producer_epoch = 0
                self.last_producer_epoch = t.last_producer_epoch
            self.next_producer_id = NO_PRODUCER_ID
            self.txn_start_timestamp = t.txn_start_timestamp
            self.partitions.clear()
        else:  # PrepareEpochFence is never completed; Dead leaves the cache instead.
            self._fail(t)
        self.client_transaction_version = t.client_transaction_version
        self.txn_last_update_timestamp = t.txn_last_update_timestamp
        self.pending_state = None
        self.pending_complete = None
        self.state = to

    def _valid_epoch(self, t: TxnTransit) -> bool:
        return t.producer_epoch == self.producer_epoch and t.producer_id == self.producer_id

    def _valid_epoch_bump_v2(self, t: TxnTransit) -> bool:
        return t.producer_id == self.producer_id and t.producer_epoch == self.producer_epoch + 1

    def _valid_epoch_bump(self, t: TxnTransit) -> bool:
        return t.producer_epoch == self.producer_epoch + 1 or (
            t.producer_epoch == 0 and t.producer_id != self.producer_id
        )

    def _fail(self, t: TxnTransit) -> NoReturn:
        raise IllegalTransitionData(
            f"{self.transactional_id}: transition to {t} does not follow from {self}"
        )

    def apply_loaded(self, t: TxnTransit) -> None:
        """Replay: a record read from the log becomes the metadata, without checks."""
        self.producer_id = t.producer_id
        self.prev_producer_id = t.prev_producer_id
        self.next_producer_id = t.next_producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = NO_PRODUCER_EPOCH
        self.txn_timeout_ms = t.txn_timeout_ms
        self.state = t.state
        self.partitions = set(t.partitions)
        self.txn_start_timestamp = t.txn_start_timestamp
        self.txn_last_update_timestamp = t.txn_last_update_timestamp
        self.client_transaction_version = t.client_transaction_version
        self.pending_state = None
        self.pending_complete = None
        self.has_failed_epoch_fence = False
