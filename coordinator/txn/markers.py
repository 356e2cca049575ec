"""The transaction coordinator's view of marker delivery (the seam to the log).

How this works: once a PrepareCommit/PrepareAbort record is durable, the coordinator hands
one ``TxnMarker`` per transaction to a ``MarkerWriter``, which writes a COMMIT or ABORT
control batch into every partition of the transaction and answers per partition:

* NONE once the marker is durable in that partition;
* UNKNOWN_TOPIC_OR_PARTITION for a partition that no longer exists: done as well (Kafka's
  marker sender treats a partition without a leader at all as finished);
* a retriable code (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, COORDINATOR_LOAD_IN_PROGRESS,
  COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR): the coordinator sends that partition again;
* INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED: this coordinator is stale; it
  stops marking the transaction, which stays in Prepare* until the next owner re-drives it.

This is Kafka's TransactionMarkerRequestCompletionHandler's table (``MARKER_DONE``,
``MARKER_RETRY``, ``MARKER_FENCED`` below). The embedded writer appends in-process
(``coordinator/dataplane/markers.py``); in cluster mode a writer sends WriteTxnMarkers to
each partition's leader. A marker is idempotent: a duplicate completes nothing new.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from protocol.errors import ErrorCode

__all__ = [
    "MARKER_DONE",
    "MARKER_FENCED",
    "MARKER_RETRY",
    "MarkerWriter",
    "TxnMarker",
    "marker_outcome",
]

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One transaction's end, to be written into each of its partitions."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool  # True = COMMIT, False = ABORT
    partitions: tuple[TopicPartition, ...]  # (topic, partition)
    # The transaction version the markers are written under (WriteTxnMarkers v2's field):
    # 0 for the TV1 protocol, whose marker check at the leader is "epoch >= current".
    transaction_version: int = 0


class MarkerWriter(Protocol):
    async def write_markers(self, marker: TxnMarker) -> dict[TopicPartition, ErrorCode]:
        """Write ``marker`` into each of its partitions; one code per partition."""
        ...


# Partition results that finish the partition.
MARKER_DONE = frozenset(
    {
        ErrorCode.NO_ERROR,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        ErrorCode.UNSUPPORTED_VERSION,
    }
)
# Results after which the partition is sent again (a fresh leader lookup in cluster mode).
MARKER_RETRY = frozenset(
    {
        ErrorCode.NOT_LEADER_FOR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NETWORK_EXCEPTION,
    }
)
# Results that mean this coordinator (or this marker's epoch) is stale: stop marking.
MARKER_FENCED = frozenset(
    {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED}
)


def marker_outcome(code: ErrorCode) -> str:
    """``"done"``, ``"retry"`` or ``"fenced"`` for one partition's result.

    Kafka throws IllegalStateException for anything else (CORRUPT_MESSAGE,
    MESSAGE_TOO_LARGE...: a bug); kgc retries those, with the sender's backoff, rather
    than leave the transaction's partitions pinned for good.
    """
    if code in MARKER_DONE:
        return "done"
    if code in MARKER_FENCED:
        return "fenced"
    return "retry"
