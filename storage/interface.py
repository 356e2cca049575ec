"""The storage surface: what the runtime and the data plane use, and the two engines behind it.

How this works
--------------
Every partition kgc serves is a ``storage.local.log.PartitionLog`` on the node's disk:

* write: ``append(batch)`` / ``append_records(records)`` assign offsets and store the batch
  (in the OS page cache; not yet durable);
* durability: ``await Flusher.wait_durable(log, offset)`` (``storage.local.durability``)
  returns once ``offset < log.durable_end``, or raises ``FlushError`` when the round that
  should have made it durable failed and the log was cut back to its durable end;
* read: ``read(offset, max_bytes, max_offset)``, ``iter_batches(from_offset)``,
  ``log_start_offset`` / ``log_end_offset`` / ``durable_end``;
* retention and truncation: ``apply_retention`` / ``delete_segments_before`` /
  ``truncate_to``; compaction is ``storage.local.cleaner``. Both reach the journal: a
  moved log start calls ``journal.trim(log, start)``, a finished cleaner pass
  ``journal.compacted(log, upto)``; the PostgreSQL journal then deletes (or rewrites) its
  rows below, off the commit path, so the database does not grow without bound;
* ``on_cut_back``: callbacks ``(log, new_end)`` run after every cut-back, so state derived
  from the log (the producer table, the offsets shard) is rebuilt.

What "durable" means is the job of a ``WriteAheadJournal`` the log records every stored
batch into (``log.journal``), which the ``Flusher`` syncs once per group-commit round:

* ``storage.local.journal.Journal`` (single node): a file under the data dir, one fdatasync
  per round; the segment files are fsynced at its checkpoints.
* ``storage.postgres.journal.PgJournal`` (cluster mode): PostgreSQL is a remote write-ahead
  journal. One fenced statement per round inserts the round's batches into
  ``kgc_record_log`` and advances each partition's lease; the local log is only a cache
  (``remote = True``: its own fsyncs never count as durable). A partition whose lease was
  lost is refused with ``NotOwnerError``. ``storage.postgres.materialize`` fills a fresh
  local log from the table when a node takes a partition over.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from storage.local.log import PartitionLog

__all__ = [
    "FlushError",
    "JournalStats",
    "Lease",
    "NotOwnerError",
    "WriteAheadJournal",
]


class FlushError(OSError):
    """An offset could not be made durable: its round failed and the log was cut back.

    ``log`` is the log concerned (None when unknown) and ``truncated_to`` its log end after
    the cut (everything from there on was discarded), or None when nothing was cut (e.g.
    the log was unregistered).
    """

    def __init__(
        self, message: str, *, log: PartitionLog | None = None, truncated_to: int | None = None
    ) -> None:
        super().__init__(errno.EIO, message)
        self.log = log
        self.truncated_to = truncated_to

    @property
    def message(self) -> str:
        return str(self.strerror)

    def for_cut(self, log: PartitionLog, truncated_to: int) -> FlushError:
        """A fresh error of the same kind for one waiter of ``log`` cut at ``truncated_to``."""
        return FlushError(self.message, log=log, truncated_to=truncated_to)


class NotOwnerError(FlushError):
    """A write refused because this node no longer holds the partition's lease (fenced).

    Answered to clients as NOT_COORDINATOR / NOT_LEADER_OR_FOLLOWER; the partition stays
    refused until the cluster layer takes it over again (a new lease, a fresh local log).
    """

    def __init__(
        self,
        message: str,
        *,
        topic: str,
        partition: int,
        log: PartitionLog | None = None,
        truncated_to: int | None = None,
    ) -> None:
        super().__init__(message, log=log, truncated_to=truncated_to)
        self.topic = topic
        self.partition = partition

    def for_cut(self, log: PartitionLog, truncated_to: int) -> NotOwnerError:
        return NotOwnerError(
            self.message,
            topic=self.topic,
            partition=self.partition,
            log=log,
            truncated_to=truncated_to,
        )


class Lease(NamedTuple):
    """A partition's lease as read from ``kgc_partition`` when this node took it."""

    topic: str
    partition: int
    epoch: int  # the partition leader epoch (int32), checked by every write
    next_offset: int  # the log end committed in the database
    log_start_offset: int


@dataclass(slots=True)
class JournalStats:
    rounds: int = 0  # syncs that ran (fdatasyncs, or round statements)
    rows: int = 0  # records (local) or kgc_record_log rows (postgres) made durable
    bytes: int = 0
    last_latency_ms: float = 0.0
    max_latency_ms: float = 0.0
    total_latency_ms: float = 0.0
    errors: int = 0  # failed syncs
    fenced: int = 0  # partitions refused because the lease was lost (postgres)
    trims: int = 0  # retention trims applied to the journal's copy (postgres)
    compactions: int = 0  # compacted rewrites of the journal's copy (postgres)
    maintenance_errors: int = 0  # trims / compactions that failed or were fenced

    def note_round(self, latency_ms: float) -> None:
        self.rounds += 1
        self.last_latency_ms = latency_ms
        self.max_latency_ms = max(self.max_latency_ms, latency_ms)
        self.total_latency_ms += latency_ms


class WriteAheadJournal(Protocol):
    """What the ``Flusher`` (and ``PartitionLog``) need from a journal.

    The log calls ``record`` for every batch it stores (an OSError refuses the append)
    and, when it is cut back to its durable end, ``discard_unsynced`` (the logs returned
    are cut back too: their unsynced records shared the discarded part). The Flusher calls
    ``sync`` once per round, then ``checkpoint`` when ``needs_checkpoint()``.
    """

    stats: JournalStats
    # True when the journal is the only durable copy (the local files are a cache whose
    # fsyncs prove nothing); False when fsynced segments are durable too.
    remote: bool

    def record(self, log: PartitionLog, batch: bytes) -> None:
        """Journal a stored batch of ``log`` (offsets assigned); durable after ``sync``."""
        ...

    async def sync(self, errors: dict[PartitionLog, BaseException]) -> None:
        """Make everything recorded so far durable, advancing each log's
        ``journal_durable_end``. On failure, put the error per affected log in ``errors``
        *before* cutting it back (``log.discard_unflushed()``), so that its waiters get
        that error. Never raises for a failed sync."""
        ...

    def needs_checkpoint(self) -> bool: ...

    async def checkpoint(
        self, logs: list[PartitionLog], errors: dict[PartitionLog, BaseException]
    ) -> None:
        """Free journal space once ``logs`` (those it journals) are safe elsewhere."""
        ...

    def discard_unsynced(self) -> list[PartitionLog]:
        """Drop records not known durable; returns the other logs to cut back."""
        ...

    def pin(self, reason: str) -> None:
        """A local fsync of a journaled log failed: keep whatever the journal still holds."""
        ...

    def trim(self, log: PartitionLog, before_offset: int) -> None:
        """``log``'s start moved to ``before_offset`` (retention, DeleteRecords): the
        journal may drop its copy of what lies below. Never raises, never blocks: a remote
        journal does it in the background (its own fenced statement)."""
        ...

    def compacted(self, log: PartitionLog, upto: int) -> None:
        """The cleaner finished a pass over ``log`` below ``upto``: a remote journal
        replaces its copy below ``upto`` by the log's cleaned batches (same offsets), in
        the background and fenced on the lease. Never raises, never blocks."""
        ...
