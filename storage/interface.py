"""The storage surface the runtime and the data plane use; the engines implement it.

How this works
--------------
Every partition kgc serves is a ``PartitionLog`` (a Protocol below). The upper layers hold
logs through ``Logs`` (the set of logs: ``storage.local.manager.LogManager`` on disk,
``storage.memory.MemoryLogs`` in tests) and make appends durable through ``Durability``
(``storage.local.durability.Flusher``, ``storage.memory.MemoryDurability``). Only the
assembly names an engine; everything else imports this module, so an engine can be
swapped (the in-memory one runs the runtime and the data plane without a disk).

* write: ``append(batch)`` / ``append_records(records)`` assign offsets and store the batch
  (in the OS page cache; not yet durable);
* durability: ``await Durability.wait_durable(log, offset)`` returns once
  ``offset < log.durable_end``, or raises ``FlushError`` when the round that should have
  made it durable failed and the log was cut back to its durable end;
* read: ``read(offset, max_bytes, max_offset)``, ``iter_batches(from_offset)``,
  ``verified_batches()`` (every CRC checked), ``log_start_offset`` / ``log_end_offset`` /
  ``durable_end``;
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

The Protocols are types only: nothing here runs on the hot path, and this module imports
no engine.
"""

from __future__ import annotations

import base64
import errno
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol, TypeAlias

from storage.record_batch import BatchHeader, CorruptBatchError, Record, parse_header, verify_crc

__all__ = [
    "Clock",
    "CorruptLogError",
    "CutBackHook",
    "Durability",
    "DurabilityStats",
    "FlushError",
    "InvalidBatchError",
    "JournalStats",
    "Lease",
    "LogClosedError",
    "LogConfig",
    "Logs",
    "NotOwnerError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "RecordTooLargeError",
    "RegisteredNode",
    "UnknownTopicError",
    "WriteAheadJournal",
    "kafka_uuid",
    "wall_clock_ms",
]

Clock: TypeAlias = Callable[[], int]


def wall_clock_ms() -> int:
    """Wall-clock time in integer milliseconds: the default clock everywhere."""
    return time.time_ns() // 1_000_000


def kafka_uuid(raw: bytes) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 without padding (topic ids)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class UnknownTopicError(RuntimeError):
    """No topic of that name (Kafka's UNKNOWN_TOPIC_OR_PARTITION): raised by a shared
    catalog's writes, answered by the admin APIs."""


@dataclass(frozen=True, slots=True)
class RegisteredNode:
    """A node of a cluster as the admin APIs report it (DescribeCluster's fenced brokers,
    CreatePartitions' manual assignments): every node ever registered, live or not."""

    node_id: int
    host: str
    port: int
    listeners: str
    rack: str | None


@dataclass(frozen=True, slots=True)
class LogConfig:
    # segment.bytes: 1 GiB for topics; Kafka's offsets topic uses 100 MiB
    # (offsets.topic.segment.bytes).
    segment_bytes: int = 1 << 30
    # segment.ms: roll even if not full (7 days).
    segment_ms: int = 7 * 24 * 3600 * 1000
    # retention.ms: -1 keeps forever; Kafka's topic default is 7 days.
    retention_ms: int = 7 * 24 * 3600 * 1000
    # retention.bytes: -1 means no size limit.
    retention_bytes: int = -1
    # cleanup.policy: "delete", "compact" or "compact,delete".
    cleanup_policy: str = "delete"
    # delete.retention.ms: how long compacted tombstones stay readable.
    delete_retention_ms: int = 86_400_000
    # min.cleanable.dirty.ratio
    min_cleanable_dirty_ratio: float = 0.5
    # max.message.bytes: largest batch accepted by append().
    max_message_bytes: int = 1_048_588
    # index.interval.bytes
    index_interval_bytes: int = 4096
    # Not a Kafka name: "batch" (group commit before acking), "interval"
    # (log.flush.interval.ms / .messages, acks do not wait) or "none".
    flush_policy: str = "batch"
    # log.flush.interval.ms (for flush_policy="interval")
    flush_interval_ms: int = 1000
    # log.flush.interval.messages (for flush_policy="interval")
    flush_interval_messages: int = 2**63 - 1
    # Not a Kafka name: with flush_policy="batch", make appends durable through the
    # shared write-ahead journal (one fsync per round for all such logs; see journal.py).
    journaled: bool = False

    def __post_init__(self) -> None:
        policies = {p.strip() for p in self.cleanup_policy.split(",")}
        if not policies <= {"compact", "delete"} or not policies:
            raise ValueError(f"unknown cleanup.policy {self.cleanup_policy!r}")
        if self.flush_policy not in ("batch", "interval", "none"):
            raise ValueError(f"unknown flush policy {self.flush_policy!r}")
        if self.segment_bytes < 14 or self.index_interval_bytes < 0:
            raise ValueError("segment_bytes / index_interval_bytes out of range")

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy


class OffsetOutOfRangeError(LookupError):
    pass


class InvalidBatchError(ValueError):
    pass


class RecordTooLargeError(InvalidBatchError):
    pass


class LogClosedError(RuntimeError):
    pass


class CorruptLogError(OSError):
    """A read met a batch that does not parse or fails its CRC; the log is now ``damaged``.

    ``verified_batches`` raises it without marking the log: its caller decides.
    """


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


def check_batch(batch: bytes | bytearray | memoryview, max_message_bytes: int) -> BatchHeader:
    """The checks every engine makes before it appends a produced batch, in Kafka's order:
    a v2 header, its length, max.message.bytes, at least one record, the CRC. Returns the
    header; raises ``InvalidBatchError`` (``RecordTooLargeError`` for the size)."""
    try:
        h = parse_header(batch)
    except CorruptBatchError as e:
        raise InvalidBatchError(str(e)) from None
    if h.size != len(batch):
        raise InvalidBatchError(f"batch length says {h.size} bytes, got {len(batch)}")
    check_batch_size(h.size, max_message_bytes)
    if h.records_count <= 0 or h.last_offset_delta < 0:
        raise InvalidBatchError("batch has no records")
    if not verify_crc(batch, 0, h.size):
        raise InvalidBatchError(f"CRC mismatch in batch of {h.size} bytes")
    return h


def check_batch_size(size: int, max_message_bytes: int) -> None:
    if size > max_message_bytes:
        raise RecordTooLargeError(
            f"batch of {size} bytes exceeds max.message.bytes={max_message_bytes}"
        )


def check_durable_wait(log: PartitionLog, offset: int, generation: int | None) -> None:
    """What a wait for ``offset`` of ``log`` fails with at once, on every engine: the offset
    was cut back before it was made durable (a failed round, or a newer generation of the
    log), or it was never appended."""
    if (generation is not None and not log.survived(offset, generation)) or (
        offset >= log.log_end_offset and log.cut_backs
    ):
        raise FlushError(
            f"offset {offset} of {log.dir} was cut back before it was made durable",
            log=log,
            truncated_to=log.log_end_offset,
        )
    if offset >= log.log_end_offset:
        raise ValueError(f"offset {offset} not yet appended to {log.dir}")


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

    def carry(self, log: PartitionLog, offset: int, timestamp_ms: int, value: bytes) -> bool:
        """Journal ``value`` as the record at ``offset`` of ``log`` (its end or past it)
        without its being in the log (its owner appends it later); durable after ``sync``.
        False: this journal does not carry values (nothing written)."""
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


CutBackHook: TypeAlias = Callable[["PartitionLog", int], None]


class CarriedTail(Protocol):
    """Records past a log's end that its journal holds (``WriteAheadJournal.carry``) and
    their owner keeps in memory until it appends them to the log as one batch. The log
    calls ``spill`` before it fsyncs its segments for a journal checkpoint or a close (the
    journal files holding them may be deleted after that), and ``cut`` when it is cut back
    to its durable end (those at or past it are gone with the journal's unsynced part)."""

    @property
    def end(self) -> int:
        """The offset after the last carried record (the log end when there is none)."""
        ...

    def spill(self) -> None:
        """Append every carried record to the log; raises what the append raised."""
        ...

    def cut(self, end: int) -> None:
        """Forget every carried record at or past ``end``."""
        ...


class PartitionLog(Protocol):
    """One partition's append-only log, as the runtime, the data plane and the journals
    use it. ``storage.local.log.PartitionLog`` (segments on disk) and
    ``storage.memory.MemoryLog`` implement it.

    Failure contract: an append stands whole or raises (OSError with the log as before,
    ``InvalidBatchError`` / ``RecordTooLargeError`` for a batch refused); a read never
    returns a batch failing its CRC (``CorruptLogError``, the log marked ``damaged``);
    after a failed sync the log is cut back to ``durable_end`` (``discard_unflushed``),
    ``cut_backs`` grows and every ``on_cut_back`` hook runs with the new end.
    """

    # The journal making this log durable (None: its own syncs do), and the end of what
    # that journal holds durably; written by the journals.
    journal: WriteAheadJournal | None
    journal_durable_end: int
    # Records carried past the log end by its journal (None: none ever are).
    carried: CarriedTail | None
    # Replaced whole when the topic's configs change (AlterConfigs).
    config: LogConfig

    @property
    def dir(self) -> Path:
        """Where the log lives (an engine without files names a pseudo path)."""
        ...

    @property
    def damaged(self) -> str | None:
        """Why the log cannot be trusted past some point, or None while it is healthy."""
        ...

    @property
    def on_cut_back(self) -> list[CutBackHook]: ...
    @property
    def cut_backs(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def durable_end(self) -> int:
        """Exclusive end of the prefix that survives a crash."""
        ...

    @property
    def recovery_point(self) -> int:
        """Exclusive end of the prefix the log's own syncs made durable."""
        ...

    @property
    def unflushed_messages(self) -> int: ...
    @property
    def unflushed_bytes(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def segment_count(self) -> int: ...
    @property
    def closed(self) -> bool: ...

    def append(
        self, batch: bytes | bytearray | memoryview, leader_epoch: int | None = None
    ) -> tuple[int, int]:
        """Store one v2 batch as the next offsets; returns (base_offset, last_offset)."""
        ...

    def append_records(
        self,
        records: Sequence[tuple[bytes | None, bytes | None]] | Sequence[Record],
        timestamp_ms: int | None = None,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        attributes: int = 0,
        partition_leader_epoch: int = -1,
    ) -> tuple[int, int]:
        """Encode ``records`` as one batch and store it; same contract as ``append``."""
        ...

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Whole, CRC-checked batches from the one holding ``offset``, below ``max_offset``."""
        ...

    def iter_batches(self, from_offset: int = 0) -> Iterator[tuple[BatchHeader, bytes]]:
        """(header, batch bytes) from ``from_offset`` (clamped to the log start), unchecked."""
        ...

    def verified_batches(self) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every batch from the log start, CRC-checked; ``CorruptLogError`` at a bad one."""
        ...

    def recent_batch_headers(self, scan_bytes: int) -> Iterator[BatchHeader]:
        """Headers of the newest batches, about ``scan_bytes`` of them (whole segments)."""
        ...

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``."""
        ...

    def offset_for_max_timestamp(self) -> tuple[int, int]:
        """(timestamp, offset) of the record with the largest timestamp, or (-1, -1)."""
        ...

    def segment_points(self) -> list[tuple[int, int, int]]:
        """(base offset, size, last modified ms) per segment: ListOffsets v0's view."""
        ...

    def maybe_roll_by_time(self) -> bool: ...
    def apply_retention(self, now_ms: int | None = None) -> int: ...
    def delete_segments_before(self, offset: int) -> int: ...
    def truncate_to(self, offset: int) -> None: ...
    def survived(self, offset: int, generation: int) -> bool:
        """Whether ``offset``, appended when ``cut_backs`` was ``generation``, is still ours."""
        ...

    def flush(self) -> None:
        """Make everything appended so far durable now; ``FlushError`` after a cut-back."""
        ...

    def discard_unflushed(self) -> int:
        """Cut the log back to ``durable_end`` (after a failed sync); returns the new end."""
        ...

    def mark_damaged(self, reason: str) -> None: ...
    def close(self) -> None: ...


class Logs(Protocol):
    """The set of partition logs a node serves (``<topic>-<partition>``)."""

    @property
    def data_dir(self) -> Path: ...

    def get(self, topic: str, partition: int) -> PartitionLog | None: ...

    def get_or_create(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        topic_id: bytes | None = None,
    ) -> PartitionLog:
        """The log of a partition, created (empty) if it does not exist yet."""
        ...

    def fresh(
        self, topic: str, partition: int, config: LogConfig, topic_id: bytes | None = None
    ) -> PartitionLog:
        """An empty log for a partition taken over, replacing whatever was there."""
        ...

    def forget(self, topic: str, partition: int) -> PartitionLog | None:
        """Stop serving a partition (its log is closed, its data kept)."""
        ...

    def partitions(self) -> list[tuple[str, int]]: ...
    def logs(self) -> Sequence[PartitionLog]: ...
    def delete_topic(self, topic: str, topic_id: bytes | None = None) -> int: ...
    def close_all(self) -> None: ...


@dataclass(slots=True)
class DurabilityStats:
    fsync_count: int = 0  # log flushes (each fsyncs the log's dirty files)
    rounds: int = 0
    bytes_flushed: int = 0
    last_fsync_latency_ms: float = 0.0
    max_fsync_latency_ms: float = 0.0
    total_fsync_latency_ms: float = 0.0
    waiters_released: int = 0
    errors: int = 0


# ``Durability.when_durable``'s continuation: each target's outcome (None: durable), in order.
Then: TypeAlias = Callable[[list[BaseException | None]], None]


class Durability(Protocol):
    """Making appends durable, once per group-commit round (``storage.local.durability``).

    A waiter is released once its offset is below its log's ``durable_end``; when the round
    that should have made it durable failed, it gets ``FlushError`` (its ``log`` and
    ``truncated_to`` say what was cut).
    """

    stats: DurabilityStats
    # The journal the rounds sync (None: none, or each log's own); metrics read its stats.
    journal: WriteAheadJournal | None
    # A round is in flight: what is appended now waits for the next one.
    in_round: bool

    def start(self) -> None: ...
    async def stop(self) -> None: ...
    def register(self, log: PartitionLog) -> None: ...
    def unregister(self, log: PartitionLog) -> None: ...
    def poke(self) -> None:
        """Start a round soon (an interval-policy log has enough unflushed messages)."""
        ...

    def before_next_round(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` right before the next round starts (or at once when none is running)."""
        ...

    async def wait_durable(
        self, log: PartitionLog, offset: int, *, generation: int | None = None
    ) -> None:
        """Return once ``offset`` of ``log`` is durable as its policy defines."""
        ...

    async def wait_durable_many(
        self, targets: list[tuple[PartitionLog, int]], generations: list[int] | None = None
    ) -> None: ...

    def when_durable(self, targets: Sequence[tuple[PartitionLog, int]], then: Then) -> None:
        """Call ``then`` with every target's outcome once the last one is settled."""
        ...
