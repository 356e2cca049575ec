"""What a partition leader asks the transaction coordinator before a transactional append.

How this works: KIP-890 part 1. The first transactional batch of a (producer id, epoch) on
a partition opens a transaction there and pins the partition's last stable offset, so the
leader first asks the coordinator whether the partition really is in that producer's
ongoing transaction (Kafka: AddPartitionsToTxn v4+ with ``VerifyOnly``). Without the check a
late or retried produce after the markers would open a transaction nobody will ever end (a
hanging transaction).

``TxnVerifier.verify`` answers per partition: NONE when it is in the ongoing transaction of
that producer and epoch; otherwise the coordinator's code, in Kafka's order
(``TransactionCoordinator.handleVerifyPartitionsInTransaction``): INVALID_REQUEST (empty
id), COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR, INVALID_PRODUCER_ID_MAPPING (unknown id
or another producer id), PRODUCER_FENCED (another epoch), CONCURRENT_TRANSACTIONS (the
transaction is ending), TRANSACTION_ABORTABLE (the partition was not added). The leader maps
these to produce errors as Kafka's AddPartitionsToTxnManager does (notes 5.2).

From TxnOffsetCommit v5 and Produce v12 (TV2, KIP-890 part 2) the question becomes an
order: ``add`` puts the partition in the transaction (Kafka: AddPartitionsToTxn v5 from the
leader) and answers one code.

``CoordinatorVerifier`` is the embedded implementation: a synchronous check of the
coordinator's memory, with no await inside, so a caller that appends right after the
``await`` does so in the same event-loop step as the check (no marker can slip between).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from protocol.errors import ErrorCode

__all__ = ["ADD_RETRY_BACKOFF_MS", "ADD_RETRY_MAX_MS", "CoordinatorVerifier", "TxnVerifier"]

# TV2's add answered CONCURRENT_TRANSACTIONS (the previous transaction's markers still going
# out) is asked again after ``add.partitions.to.txn.retry.backoff.ms`` for at most
# ``add.partitions.to.txn.retry.max.ms`` (Kafka's defaults), by the leader.
ADD_RETRY_BACKOFF_MS = 20
ADD_RETRY_MAX_MS = 100

TopicPartition = tuple[str, int]
VerifyFn = Callable[[str, int, int, Sequence[TopicPartition]], dict[TopicPartition, ErrorCode]]
AddFn = Callable[[str, int, int, Sequence[TopicPartition]], Awaitable[ErrorCode]]


class TxnVerifier(Protocol):
    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]: ...

    async def add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> ErrorCode: ...


class CoordinatorVerifier:
    """Verification against this node's coordinator core (``TransactionCoordinator.verify``)."""

    def __init__(self, verify: VerifyFn) -> None:
        self._verify = verify
        # TV2's add (``TxnRuntime.add_for_leader``), given once the runtime exists.
        self.add_fn: AddFn | None = None

    async def add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> ErrorCode:
        if self.add_fn is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return await self.add_fn(transactional_id, producer_id, producer_epoch, partitions)

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        return self._verify(transactional_id, producer_id, producer_epoch, partitions)
