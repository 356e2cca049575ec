"""Idempotent-producer state: producer ids, per-partition sequence checking and dedupe.

How this works: every partition keeps a ``PartitionProducers`` table, producer id ->
``ProducerEntry`` (current epoch, metadata of its last five batches, last append time).
Before a batch carrying a producer id is appended, ``check`` decides, as Kafka's
ProducerStateManager does:

* a batch whose (epoch, first sequence, last sequence) equals one of the cached five is a
  retry of something already written: the caller answers with that batch's original offsets
  and no error (Kafka >= 2.x; DUPLICATE_SEQUENCE_NUMBER is never returned);
* an epoch older than the producer's current one is fenced (INVALID_PRODUCER_EPOCH);
* a new epoch must start at sequence 0, and within an epoch the first sequence must follow
  the last one (wrapping at 2^31-1); otherwise OUT_OF_ORDER_SEQUENCE_NUMBER. A producer the
  partition does not know (new, or its state expired) may start at any sequence.

Transactions (``transactions.PartitionTxns``, ``txns``): a producer with an open
transaction here may only write transactional batches (INVALID_TXN_STATE otherwise); its
first transactional batch opens the transaction; an end-transaction marker (``check_marker``
/ ``record_marker``) is fenced by the producer epoch (INVALID_PRODUCER_EPOCH) and the
coordinator epoch (TRANSACTION_COORDINATOR_FENCED), closes the transaction and takes the
marker's epochs, as Kafka's ProducerAppendInfo.appendEndTxnMarker.

``record`` updates the table once the batch is in the log. The tables are rebuilt when a
log opens by replaying it from its start (``replay``: batch headers, and the marker of each
control batch; no checks), and producers are forgotten when retention removes everything
they wrote or they have been idle for producer.id.expiration.ms, unless a transaction of
theirs is still open here. ``ProducerIdAllocator`` hands out producer ids from blocks
whose end is persisted before use, so an id is never reused across restarts.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.dataplane.transactions import PartitionTxns, parse_marker
from protocol.errors import ErrorCode
from storage.files import read_checkpoint, write_checkpoint
from storage.interface import PartitionLog
from storage.record_batch import BatchHeader

log = logging.getLogger("kgc.data")

INT32_MAX = 2**31 - 1
NO_EPOCH = -1
NO_SEQUENCE = -1
CACHED_BATCHES = 5  # Kafka's NUM_BATCHES_TO_RETAIN (max.in.flight.requests.per.connection)
PRODUCER_ID_BLOCK = 1000


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """Sequence of a batch's last record; sequences wrap from 2^31-1 to 0."""
    if base_sequence > INT32_MAX - last_offset_delta:
        return last_offset_delta - (INT32_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = NO_EPOCH
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))
    last_append_ms: int = 0
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1  # first offset of its open transaction here, or -1
    last_timestamp: int = -1  # of its last batch or marker (DescribeProducers)
    last_marker_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMeta | None:
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


@dataclass(frozen=True, slots=True)
class Verdict:
    """Outcome of ``check``: an error code, or a duplicate to answer with, or neither."""

    error: int = ErrorCode.NO_ERROR
    message: str | None = None
    duplicate: BatchMeta | None = None


OK = Verdict()


class PartitionProducers:
    """Producer state of one partition."""

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}
        self.txns = PartitionTxns()

    def __len__(self) -> int:
        return len(self.entries)

    def check(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        last_offset_delta: int,
        transactional: bool = False,
    ) -> Verdict:
        if producer_id < 0:
            return OK
        entry = self.entries.get(producer_id)
        if entry is None:
            return OK
        first_seq = base_sequence
        last_seq = last_sequence(base_sequence, last_offset_delta)
        dup = entry.find_duplicate(epoch, first_seq, last_seq)
        if dup is not None:
            return Verdict(duplicate=dup)
        if epoch < entry.epoch:
            return Verdict(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"Epoch of producer {producer_id} is {epoch}, which is smaller than the last seen epoch {entry.epoch}",
            )
        if epoch != entry.epoch:
            if first_seq != 0 and entry.epoch != NO_EPOCH:
                return Verdict(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"Invalid sequence number for new epoch of producer {producer_id}: {epoch} (request epoch), "
                    f"{first_seq} (seq. number), {entry.epoch} (current producer epoch)",
                )
            return self._check_txn(entry, transactional)
        if entry.epoch != NO_EPOCH and not in_sequence(entry.last_seq, first_seq):
            return Verdict(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"Out of order sequence number for producer {producer_id}: {first_seq} (incoming seq. number), "
                f"{entry.last_seq} (current end sequence number)",
            )
        return self._check_txn(entry, transactional)

    @staticmethod
    def _check_txn(entry: ProducerEntry, transactional: bool) -> Verdict:
        if entry.current_txn_first_offset >= 0 and not transactional:
            return Verdict(
                ErrorCode.INVALID_TXN_STATE,
                f"Expected transactional write from producer {entry.producer_id}",
            )
        return OK

    def check_header(self, h: BatchHeader) -> Verdict:
        return self.check(
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.last_offset_delta,
            h.is_transactional,
        )

    def in_transaction(self, producer_id: int, epoch: int) -> bool:
        """Whether the producer has a transaction open here at exactly ``epoch``."""
        entry = self.entries.get(producer_id)
        return entry is not None and entry.epoch == epoch and entry.current_txn_first_offset >= 0

    def is_empty(self, producer_id: int) -> bool:
        """Whether no batch of the producer at its current epoch is known here (Kafka's
        ProducerStateEntry.isEmpty)."""
        entry = self.entries.get(producer_id)
        return entry is None or not entry.batches

    def epoch_of(self, producer_id: int) -> int:
        entry = self.entries.get(producer_id)
        return NO_EPOCH if entry is None else entry.epoch

    def check_marker(
        self, producer_id: int, epoch: int, coordinator_epoch: int, transaction_version: int = 0
    ) -> Verdict:
        """Kafka's appendEndTxnMarker checks: an older epoch is refused; under TV2 (whose
        markers carry the bumped epoch) an equal one too, unless no transaction is open
        (a retried marker); then a newer coordinator epoch than the marker's fences it."""
        entry = self.entries.get(producer_id)
        if entry is None:
            return OK
        stale = (
            epoch < entry.epoch
            if transaction_version < 2
            else epoch < entry.epoch
            or (epoch == entry.epoch and entry.current_txn_first_offset >= 0)
        )
        if stale:
            return Verdict(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"Epoch of producer {producer_id} is {epoch}, which is smaller than the last seen epoch {entry.epoch}",
            )
        if entry.coordinator_epoch > coordinator_epoch:
            return Verdict(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"Invalid coordinator epoch for producerId {producer_id}: {coordinator_epoch} "
                f"(zombie), {entry.coordinator_epoch} (current)",
            )
        return OK

    def record_marker(
        self,
        producer_id: int,
        epoch: int,
        coordinator_epoch: int,
        commit: bool,
        offset: int,
        timestamp: int,
        now_ms: int,
        transaction_version: int = 0,
    ) -> None:
        """Note a COMMIT/ABORT marker now in the log at ``offset``."""
        entry = self.entries.get(producer_id)
        if entry is None:
            entry = self.entries[producer_id] = ProducerEntry(producer_id)
        if entry.current_txn_first_offset >= 0:
            self.txns.complete(producer_id, entry.current_txn_first_offset, offset, not commit)
        if epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = -1
        entry.last_timestamp = timestamp
        entry.last_marker_offset = offset
        entry.last_append_ms = now_ms
        guard = self.txns.verifying.get(producer_id)
        # A TV2 marker carries the bumped epoch, which the producer's next transaction
        # already uses: a guard taken at that epoch is the next transaction's and stays
        # (Kafka's UnifiedLog.updateProducers).
        if guard is not None and not (transaction_version >= 2 and guard.epoch == epoch):
            del self.txns.verifying[producer_id]

    def record(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        first_offset: int,
        last_offset: int,
        now_ms: int,
        transactional: bool = False,
        timestamp: int = -1,
    ) -> None:
        """Note a batch now in the log (after ``check`` passed, or while replaying the log)."""
        if producer_id < 0:
            return
        entry = self.entries.get(producer_id)
        if entry is None:
            entry = self.entries[producer_id] = ProducerEntry(producer_id)
        if epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        delta = last_offset - first_offset
        entry.batches.append(
            BatchMeta(base_sequence, last_sequence(base_sequence, delta), first_offset, last_offset)
        )
        entry.last_append_ms = now_ms
        entry.last_timestamp = timestamp
        if transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self.txns.begin(producer_id, first_offset)

    def record_header(self, h: BatchHeader, now_ms: int) -> None:
        self.record(
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.base_offset,
            h.last_offset,
            now_ms,
            h.is_transactional,
            h.max_timestamp,
        )

    def record_appended(self, h: BatchHeader, base: int, last: int, now_ms: int) -> None:
        """Note a produced batch (header ``h``) just stored at ``base``..``last``."""
        self.record(
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            base,
            last,
            now_ms,
            h.is_transactional,
            h.max_timestamp,
        )

    def replay(self, h: BatchHeader, batch: bytes, now_ms: int) -> None:
        """Rebuild from one batch of the log, in log order (no checks, as Kafka's recovery)."""
        if h.producer_id < 0:
            return
        if not h.is_control:
            self.record_header(h, now_ms)
            return
        marker = parse_marker(batch)
        if marker is not None:
            self.record_marker(
                h.producer_id,
                h.producer_epoch,
                marker.coordinator_epoch,
                marker.commit,
                h.base_offset,
                h.max_timestamp,
                now_ms,
            )

    def prune(self, log_start_offset: int, now_ms: int, expiration_ms: int) -> int:
        """Forget producers with nothing left in the log or idle too long, unless a
        transaction of theirs is open here; returns how many."""
        doomed = [
            pid
            for pid, e in self.entries.items()
            if e.current_txn_first_offset < 0
            and (
                max(e.last_offset, e.last_marker_offset) < log_start_offset
                or now_ms - e.last_append_ms > expiration_ms
            )
        ]
        for pid in doomed:
            # Its verification guard stays (a batch of its next transaction may be waiting
            # for the coordinator's add) and expires on its own, as Kafka's do.
            del self.entries[pid]
        self.txns.forget_before(log_start_offset)
        self.txns.expire_guards(now_ms, expiration_ms)
        return len(doomed)


# In a partition directory: the offset of the first transactional batch or marker ever
# written there (absent: none ever was, and producer state needs only the log's tail).
TRANSACTIONAL_SINCE_FILE = "transactional-since"
PRODUCER_STATE_SCAN_BYTES = 128 << 20  # the tail replayed when no transaction ever was


def note_transactional(plog: PartitionLog, offset: int) -> None:
    """Record (durably, once) that ``plog`` holds transactional data from ``offset`` on."""
    path = plog.dir / TRANSACTIONAL_SINCE_FILE
    if plog.dir.is_dir() and not path.exists():
        write_checkpoint(path, offset, sync=True)


def rebuild_producers(
    plog: PartitionLog, now_ms: int, note_producer_id: Callable[[int], None], full: bool = False
) -> PartitionProducers:
    """Producer state replayed from the log: the newest ``PRODUCER_STATE_SCAN_BYTES`` for
    sequences, and, when the partition ever held transactional data (or ``full``), everything
    from its first transactional batch: open transactions and the aborted index may reach
    back anywhere. A failure is logged and leaves what was read so far."""
    table = PartitionProducers()
    try:
        start = plog.log_start_offset
        if not full:
            tail = next(iter(plog.recent_batch_headers(PRODUCER_STATE_SCAN_BYTES)), None)
            start = plog.log_end_offset if tail is None else tail.base_offset
            since = read_checkpoint(plog.dir / TRANSACTIONAL_SINCE_FILE, -1)
            if since >= 0:
                start = min(start, max(since, plog.log_start_offset))
        for h, batch in plog.iter_batches(start):
            if h.producer_id >= 0:
                table.replay(h, batch, now_ms)
                note_producer_id(h.producer_id)
    except Exception:
        log.exception(
            "rebuilding producer state of %s failed; continuing without it", plog.dir.name
        )
    return table


class ProducerIdAllocator:
    """Producer ids for InitProducerId, unique across restarts.

    The end of the block in use is persisted (fsynced) before any id from it is handed out;
    after a restart allocation resumes at that end, so a crash only skips ids.
    """

    def __init__(self, path: Path, block: int = PRODUCER_ID_BLOCK) -> None:
        self.path = path
        self.block = block
        self.next_id = read_checkpoint(path, 0)
        self.block_end = self.next_id

    def ensure_above(self, producer_id: int) -> None:
        """Never hand out ``producer_id`` or anything below it (ids found in the logs)."""
        if producer_id >= self.next_id:
            self.next_id = producer_id + 1
            self.block_end = min(self.block_end, self.next_id)

    def allocate(self) -> int:
        if self.next_id >= self.block_end:
            self.block_end = self.next_id + self.block
            write_checkpoint(self.path, self.block_end, sync=True)
        pid = self.next_id
        self.next_id += 1
        return pid


class ClusterProducerIds:
    """Cluster mode: producer ids taken in blocks from the database's one counter, so two
    nodes never hand out the same id (a producer keeps its id when a partition moves)."""

    def __init__(
        self, take_block: Callable[[int, int], Awaitable[int]], block: int = PRODUCER_ID_BLOCK
    ) -> None:
        self.take_block = take_block  # (block size, floor) -> first id of the block
        self.block = block
        self.floor = -1
        self.next_id = 0
        self.block_end = 0
        self.lock = asyncio.Lock()

    def ensure_above(self, producer_id: int) -> None:
        self.floor = max(self.floor, producer_id)
        if self.next_id <= producer_id:
            self.block_end = self.next_id  # this block is behind: take a new one

    async def allocate(self) -> int:
        async with self.lock:
            if self.next_id >= self.block_end:
                self.next_id = await self.take_block(self.block, self.floor)
                self.block_end = self.next_id + self.block
            pid = self.next_id
            self.next_id += 1
            return pid
