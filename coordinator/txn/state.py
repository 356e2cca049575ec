"""States of a transactional id at the transaction coordinator, and their legal moves.

How this works
--------------
``TransactionState`` mirrors Kafka's ``TransactionState``: its value is the id written as
the status byte of a ``__transaction_state`` value, its ``kafka_name`` the string
DescribeTransactions and ListTransactions report. Each state knows the states it may be
entered from (``valid_previous``, Kafka's ``VALID_PREVIOUS_STATES``);
``check_transition`` raises ``IllegalTransactionTransition`` for anything else, so a bug
shows up as an exception, not as a corrupt log.

The doc comment of each state says what the coordinator does with each request while an
id is in it (action:) and where it goes next (transition:).
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["IllegalTransactionTransition", "TransactionState", "check_transition"]


class IllegalTransactionTransition(RuntimeError):
    """A transition Kafka's transaction state machine forbids was attempted."""


class TransactionState(IntEnum):
    EMPTY = 0
    """No transaction is open; the producer id and epoch are current.

    action: InitProducerId bumps the epoch (or rotates the producer id at 32766)
            AddPartitionsToTxn / AddOffsetsToTxn open a transaction
            EndTxn answers INVALID_TXN_STATE (TV1)
    transition: add partitions => ONGOING; id expiry => DEAD; InitProducerId => EMPTY
    """

    ONGOING = 1
    """A transaction is open: partitions were added; its timeout runs from the first add.

    action: AddPartitionsToTxn adds more partitions (no write if nothing is new)
            EndTxn writes PREPARE_COMMIT or PREPARE_ABORT and answers once it is durable
            InitProducerId fences the epoch (+1) and aborts, answering CONCURRENT_TRANSACTIONS
            the timeout sweep fences and aborts
    transition: EndTxn commit => PREPARE_COMMIT; EndTxn abort, fence, timeout => PREPARE_ABORT
    """

    PREPARE_COMMIT = 2
    """The commit is decided and durable; COMMIT markers are being written.

    action: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn answer CONCURRENT_TRANSACTIONS
            EndTxn commit answers CONCURRENT_TRANSACTIONS, abort INVALID_TXN_STATE
    transition: every partition has its marker => COMPLETE_COMMIT
    """

    PREPARE_ABORT = 3
    """The abort is decided and durable; ABORT markers are being written.

    action: as PREPARE_COMMIT, with commit and abort swapped in EndTxn's answers
    transition: every partition has its marker => COMPLETE_ABORT
    """

    COMPLETE_COMMIT = 4
    """The last transaction committed and every partition has its marker.

    action: InitProducerId bumps the epoch; an add opens the next transaction
            EndTxn commit answers NONE (a retry), abort INVALID_TXN_STATE (TV1)
    transition: add => ONGOING; InitProducerId => EMPTY; id expiry => DEAD
    """

    COMPLETE_ABORT = 5
    """The last transaction aborted and every partition has its marker.

    action: as COMPLETE_COMMIT, with EndTxn abort answering NONE and commit INVALID_TXN_STATE
    transition: add => ONGOING; InitProducerId => EMPTY; id expiry => DEAD
    """

    DEAD = 6
    """The id expired (``transactional.id.expiration.ms`` idle): a tombstone is written and
    the id leaves the cache. Never written as a status.

    action: none; the id is gone (DescribeTransactions: TRANSACTIONAL_ID_NOT_FOUND)
    transition: none
    """

    PREPARE_EPOCH_FENCE = 7
    """Only ever a pending state: the epoch was bumped in memory to fence the producer of an
    ongoing transaction (InitProducerId from a new instance, a timeout) before the abort is
    written. Never written, never reached.

    action: EndTxn from the coordinator itself (the abort) passes; everything else sees the
            pending transition (CONCURRENT_TRANSACTIONS)
    transition: => PREPARE_ABORT
    """

    @property
    def kafka_name(self) -> str:
        return _NAMES[self]

    @property
    def valid_previous(self) -> frozenset[TransactionState]:
        return _VALID_PREVIOUS[self]

    @property
    def may_expire(self) -> bool:
        """Whether an id in this state may expire (Kafka's ``isExpirationAllowed``)."""
        return self in _EXPIRABLE

    @classmethod
    def from_kafka_name(cls, name: str) -> TransactionState | None:
        return _BY_NAME.get(name)


_S = TransactionState
_NAMES: dict[TransactionState, str] = {
    _S.EMPTY: "Empty",
    _S.ONGOING: "Ongoing",
    _S.PREPARE_COMMIT: "PrepareCommit",
    _S.PREPARE_ABORT: "PrepareAbort",
    _S.COMPLETE_COMMIT: "CompleteCommit",
    _S.COMPLETE_ABORT: "CompleteAbort",
    _S.DEAD: "Dead",
    _S.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}
_VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    # Empty and Complete* only under TV2 (an abort with nothing open bumps the epoch).
    _S.PREPARE_ABORT: frozenset(
        {_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}
    ),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
_EXPIRABLE = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})


def check_transition(current: TransactionState, target: TransactionState) -> None:
    if current not in target.valid_previous:
        raise IllegalTransactionTransition(
            f"transition from {current.kafka_name} to {target.kafka_name} is not allowed"
        )
