"""PartitionLog: a directory of segments forming one partition's append-only log.

How this works
--------------
``<dir>/<20-digit base>.log`` files hold record batches in offset order; the
last one is the *active* segment and the only one written to.  ``append``
patches the batch's base offset (outside the CRC) to the log end offset and
writes it to the OS page cache synchronously; durability is a separate step
(``prepare_flush`` / ``FlushTicket.run`` / ``complete_flush``) so the
``durability.Flusher`` can fsync in a worker thread and group commits.

Small checkpoint files sit next to the segments (``recovery-point``, ``log-start-offset``,
``clean-shutdown``); what they promise and what opening a log does with them after a crash
is ``storage.local.recovery``.

Failures while writing (see ``append``): an append either stands whole or raises
OSError with the log exactly as before (segment, indexes and journal cut back).
After a failed fsync the log is cut back to its durable end
(``discard_unflushed``), since the page cache no longer tells what is on disk;
``on_cut_back`` callbacks learn the new end.  Reads CRC-check every batch they
return; a corrupt one marks the partition ``damaged`` (``CorruptLogError``).

Compaction (``cleaner``) swaps rewritten segments in with ``.cleaned`` and
``.swap`` files; opening a log first finishes or rolls back such a swap.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from storage.files import fsync_dir, write_checkpoint
from storage.interface import (
    CarriedTail,
    Clock,
    CorruptLogError,
    CutBackHook,
    FlushError,
    InvalidBatchError,
    LogClosedError,
    LogConfig,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    WriteAheadJournal,
    check_batch,
    wall_clock_ms,
)
from storage.local import scan
from storage.local.flush import FlushTicket
from storage.local.recovery import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    load_segments,
)
from storage.local.segment import (
    AppendedSpan,
    CorruptSegmentError,
    Damage,
    LogSegment,
    Span,
)
from storage.record_batch import (
    BatchHeader,
    CorruptBatchError,
    Record,
    encode_batch,
    parse_header,
    set_base_offset,
    verify_crc,
)

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "LOG_START_OFFSET_FILE",
    "RECOVERY_POINT_FILE",
    "Clock",
    "CorruptLogError",
    "CutBackHook",
    "FlushTicket",
    "InvalidBatchError",
    "LogClosedError",
    "LogConfig",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "RecordTooLargeError",
    "wall_clock_ms",
]

logger = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
_new_span = tuple.__new__  # AppendedSpan(...) minus the keyword handling: one per commit


class PartitionLog:
    def __init__(
        self,
        directory: Path,
        config: LogConfig | None = None,
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.dir = Path(directory)
        self.config = config or LogConfig()
        self._clock = clock
        self.checkpointed_at = 0.0  # monotonic time of the last recovery-point checkpoint
        self.journal: WriteAheadJournal | None = None  # set for journaled logs
        self.journal_durable_end = 0  # offsets below this are durable in the journal
        # Records past the log end that the journal holds and their owner appends later
        # (the group history's values: ``storage.interface.CarriedTail``).
        self.carried: CarriedTail | None = None
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._created_ms: dict[int, int] = {}
        self._log_start_offset = 0
        self._recovery_point = 0
        self._dirty: dict[int, LogSegment] = {}
        self._dir_dirty = False
        self._unflushed_messages = 0
        self._unflushed_bytes = 0
        self._closed = False
        # Why this partition cannot be trusted past some point (a corrupt batch found at
        # open, replay or read: file and position), or None while it is healthy. The
        # runtime, metrics and ``kgc health`` report it; see ``mark_damaged``.
        self.damaged: str | None = None
        # Called (log, new log end) on the loop thread after every cut-back to the durable
        # end (``discard_unflushed``): the Flusher fails its waiters above the cut, the data
        # plane and the offsets runtime rebuild state derived from the cut records.
        self.on_cut_back: list[CutBackHook] = []
        self.cut_backs = 0  # how many cut-backs so far (state built before one is stale)
        self._cut_ends: list[int] = []  # the log end after each cut-back, in order
        self.dir.mkdir(parents=True, exist_ok=True)
        self._open()

    # ------------------------------------------------------------ properties

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        """Exclusive end of the prefix known to be fsynced."""
        return self._recovery_point

    @property
    def durable_end(self) -> int:
        """Exclusive end of the prefix that survives a crash (segments or journal)."""
        if self.journal is not None and self.journal.remote:
            return self.journal_durable_end  # the local files are only a cache
        return max(self._recovery_point, self.journal_durable_end)

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    @property
    def unflushed_bytes(self) -> int:
        return self._unflushed_bytes

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.dir.name}, start={self._log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self._segments)})"
        )

    # ------------------------------------------------------------ open / recovery

    def _open(self) -> None:
        """Recover the directory (``storage.local.recovery``), then make what was kept
        durable before the recovery-point checkpoint claims it."""
        found = load_segments(self.dir, self.config.index_interval_bytes, self._report_corrupt)
        segs = found.segments
        self._dir_dirty = found.dir_dirty
        now = self._clock()
        self._segments = segs
        self._bases = [s.base_offset for s in segs]
        for s in segs:
            self._created_ms[s.base_offset] = (
                s.first_batch_timestamp if s.first_batch_timestamp is not None else now
            )
        self._log_start_offset = min(
            max(found.start_checkpoint, segs[0].base_offset), self.log_end_offset
        )
        if found.clean:
            self._recovery_point = self.log_end_offset
            if found.repaired:
                # The cut must be durable: bytes after it must not come back after a crash
                # and be taken for a batch that later appends would overwrite half-way.
                self._dirty[segs[-1].base_offset] = segs[-1]
                self.flush()
        else:
            # What recovery kept (and its rebuilt indexes) is made durable
            # before the checkpoint claims it.
            for j, s in enumerate(segs):
                if j >= found.first_recovered:
                    s.dirty = s.index_dirty = True
                    self._dirty[s.base_offset] = s
            self._dir_dirty = True
            self._recovery_point = min(found.recovery_checkpoint, self.log_end_offset)
            self.flush()
        write_checkpoint(self.dir / RECOVERY_POINT_FILE, self._recovery_point, sync=True)
        if found.clean:
            (self.dir / CLEAN_SHUTDOWN_FILE).unlink()
            fsync_dir(self.dir)

    def _report_corrupt(self, seg: LogSegment, damage: Damage) -> None:
        reason = f"{damage.reason} in {seg.log_path} at position {damage.position}"
        if self.damaged is None:
            logger.error(
                "log %s: corrupt batch: %s; the partition is marked damaged "
                "(its fetches answer KAFKA_STORAGE_ERROR)",
                self.dir.name,
                reason,
            )
        self.mark_damaged(reason)

    def mark_damaged(self, reason: str) -> None:
        """Record (once) that a corrupt batch was found; logged at ERROR by the caller."""
        if self.damaged is None:
            self.damaged = reason

    # ------------------------------------------------------------ append

    def append(
        self, batch: bytes | bytearray | memoryview, leader_epoch: int | None = None
    ) -> tuple[int, int]:
        """Store one v2 batch as the next offsets; returns (base_offset, last_offset).

        ``leader_epoch``, when given, is stamped into the batch's partition_leader_epoch,
        as Kafka's leader does on append (clients read it back and commit it, KIP-320);
        None keeps the batch's own (a replayed or materialised batch was stamped already).

        All or nothing: on OSError (ENOSPC, EIO, a short write that cannot be completed)
        the segment file, its indexes and, for a journaled log, the journal are already cut
        back to where they were, the log end is unchanged, and the error is raised; the next
        append starts at the last good position. If the cut-back itself failed, every append
        raises OSError until a retry of the cut succeeds. Durability is separate: see
        ``Flusher.wait_durable``.
        """
        if self._closed:
            raise LogClosedError(str(self.dir))
        h = check_batch(batch, self.config.max_message_bytes)
        base = self.log_end_offset
        epoch = h.partition_leader_epoch if leader_epoch is None else leader_epoch
        if h.base_offset == base and epoch == h.partition_leader_epoch:
            data = bytes(batch)
        else:
            data = set_base_offset(batch, base, epoch)
            h = replace(h, base_offset=base, partition_leader_epoch=epoch)
        return self._store(data, h)

    def _store(self, data: bytes, h: Span) -> tuple[int, int]:
        """Write a validated batch whose base offset is the log end offset."""
        if self._closed:
            raise LogClosedError(str(self.dir))
        base = h.base_offset
        self._segments[-1].ensure_cut()  # a failed cut-back must finish before any append
        self._maybe_roll(h)
        seg = self._segments[-1]
        mark = seg.append(data, h)  # on OSError it has cut itself back
        if self.journal is not None:
            try:
                self.journal.record(self, data)
            except OSError:
                # The journal cut itself back; the segment's copy must not stand either.
                seg.rollback(mark)
                raise
        self._dirty[seg.base_offset] = seg
        self._unflushed_messages += h.records_count
        self._unflushed_bytes += h.size
        return base, h.last_offset

    def start_at(self, offset: int) -> None:
        """Make this EMPTY log start (and end) at ``offset``: a cache filled from elsewhere."""
        if self.size_bytes or self.log_end_offset != self._log_start_offset:
            raise ValueError(f"log {self.dir.name} is not empty")
        if offset != self.log_end_offset:
            self._truncate_fully(offset)

    def restore_run(self, data: bytes, span: BatchHeader) -> None:
        """Store consecutive batches already checked (CRCs, offsets) in one write.

        ``span`` describes the run as one batch (base offset of the first, size of all,
        last offset delta, max timestamp and record count over all): the segment indexes
        the run's start, which a lookup of any offset in it scans from. Materializing a
        log from the PostgreSQL journal uses it; ``append`` is for everything else.
        """
        if span.size != len(data) or span.base_offset < self.log_end_offset:
            raise InvalidBatchError(f"run at {span.base_offset} does not fit {self!r}")
        self._store(data, span)

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
        base = self.log_end_offset
        ts = self._clock() if timestamp_ms is None else timestamp_ms
        batch = encode_batch(
            base,
            records,
            timestamp_ms=ts,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            attributes=attributes,
            partition_leader_epoch=partition_leader_epoch,
        )
        # Built here, so its CRC and offsets need no second look; only the size limit.
        # (key, value) pairs take consecutive offsets at the batch timestamp: what the
        # header says is known without parsing it back (the offsets runtime's path).
        h: Span
        if records and type(records[0]) is tuple:
            n = len(records)
            h = _new_span(AppendedSpan, (base, base + n - 1, len(batch), n, ts))
        else:
            h = parse_header(batch)
        if h.size > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {h.size} bytes exceeds max.message.bytes={self.config.max_message_bytes}"
            )
        return self._store(batch, h)

    def _maybe_roll(self, h: Span) -> None:
        seg = self._segments[-1]
        if seg.size == 0:
            return
        now = self._clock()
        if (
            seg.size + h.size > self.config.segment_bytes
            or now - self._created_ms.get(seg.base_offset, now) >= self.config.segment_ms
            or h.last_offset - seg.base_offset > _INT32_MAX
        ):
            self.roll()

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if empty)."""
        old = self._segments[-1]
        if old.size == 0:
            return old
        new = LogSegment(self.dir, self.log_end_offset, self.config.index_interval_bytes)
        if new.size:
            # A leftover of a cut-back whose file could not be deleted: it holds discarded
            # records at these offsets, never to be read as ours.
            logger.warning("log %s: emptying leftover %s", self.dir.name, new.log_path.name)
            os.ftruncate(new.fd, 0)
            new.size = 0
        # The finished segment's indexes become worth fsyncing now.
        old.index_dirty = True
        self._dirty[old.base_offset] = old
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._created_ms[new.base_offset] = self._clock()
        self._dir_dirty = True
        return new

    def maybe_roll_by_time(self) -> bool:
        """Roll an idle active segment whose segment.ms has passed (for a timer)."""
        seg = self._segments[-1]
        if seg.size and self._clock() - self._created_ms[seg.base_offset] >= self.config.segment_ms:
            self.roll()
            return True
        return False

    # ------------------------------------------------------------ read

    def _segment_index(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Raw batches from the one holding ``offset`` (or the next one present).

        Returns at least one whole batch when any exists at or after the offset (and
        below ``max_offset``, e.g. the durable end), even if larger than ``max_bytes``;
        never a partial batch, never one failing its CRC: a corrupt batch marks the log
        damaged and raises CorruptLogError (an OSError).
        """
        if offset < self._log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} not in [{self._log_start_offset}, {self.log_end_offset}]"
            )
        for seg in self._segments[self._segment_index(offset) :]:
            pos: int | None = 0
            try:
                pos = seg.position_for(offset)
                if pos is not None:
                    return self._checked(seg, pos, seg.read(pos, max_bytes), max_offset)
            except CorruptSegmentError as e:
                raise self._corrupt_read(seg, e.damage) from None
            except CorruptBatchError as e:
                raise self._corrupt_read(seg, Damage(pos or 0, str(e), None)) from None
        return b""

    def _checked(self, seg: LogSegment, pos: int, data: bytes, max_offset: int | None) -> bytes:
        """``data`` up to the first batch at or above ``max_offset``, every batch checked.

        Why check every CRC on the read path (Kafka's broker does not; its consumers do):
        bytes that do not parse make librdkafka abort on an assertion, and bit rot under a
        trusted segment is only ever found by reading it. crc32c runs at several GB/s with
        the SSE4.2/ARMv8 instruction (about 0.1 ms per MiB), small next to sending the
        bytes, so a fetch never hands out a batch that fails its checksum.
        """
        p = 0
        n = len(data)
        prev_next = -1
        while p < n:
            try:
                h = parse_header(data, p)
            except CorruptBatchError as e:
                raise self._corrupt_read(seg, Damage(pos + p, str(e), None)) from None
            if max_offset is not None and h.base_offset >= max_offset:
                break
            end = p + h.size
            if end > n or h.base_offset < prev_next or h.last_offset_delta < 0:
                raise self._corrupt_read(seg, Damage(pos + p, "implausible batch", h.base_offset))
            if not verify_crc(data, p, end):
                raise self._corrupt_read(seg, Damage(pos + p, "CRC mismatch", h.base_offset))
            prev_next = h.next_offset
            p = end
        return data if p == n else data[:p]

    def _corrupt_read(self, seg: LogSegment, damage: Damage) -> CorruptLogError:
        self._report_corrupt(seg, damage)
        return CorruptLogError(
            5,
            f"corrupt batch in {seg.log_path.name} at position {damage.position}: {damage.reason}",
        )

    def iter_batches(self, from_offset: int = 0) -> Iterator[tuple[BatchHeader, bytes]]:
        """Replay (header, batch bytes) from ``from_offset`` (clamped to the log start)."""
        offset = max(from_offset, self._log_start_offset)
        for seg in list(self._segments[self._segment_index(offset) :]):
            pos = seg.position_for(offset)
            if pos is None or seg.closed:
                continue
            for h, _pos, data in seg.walk(pos, verify=False, with_data=True):
                assert data is not None
                yield h, data

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``."""
        for seg in self._segments:
            found = seg.find_timestamp(timestamp)
            if found is not None:
                return max(found[0], self._log_start_offset), found[1]
        return None

    def verified_batches(self) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every batch from the log start, CRC-checked (``scan.verified_batches``)."""
        return scan.verified_batches(list(self._segments), self._log_start_offset)

    def recent_batch_headers(self, scan_bytes: int) -> Iterator[BatchHeader]:
        """Headers of the newest segments within ``scan_bytes`` (the active one always)."""
        return scan.recent_batch_headers(tuple(self._segments), scan_bytes)

    def offset_for_max_timestamp(self) -> tuple[int, int]:
        """(timestamp, offset) of the record with the largest timestamp, or (-1, -1)."""
        return scan.offset_for_max_timestamp(self._segments, self._log_start_offset)

    def segment_points(self) -> list[tuple[int, int, int]]:
        """(base offset, size, last modified ms) per segment, for ListOffsets v0."""
        return scan.segment_points(self._segments)

    # ------------------------------------------------------------ durability

    def prepare_flush(self) -> FlushTicket[PartitionLog] | None:
        """Capture what must be fsynced to make everything appended so far durable.

        Carried records are appended first: a journal checkpoint deletes the journal files
        holding them once this flush succeeds, and a close leaves none to replay."""
        if self._closed:
            return None
        if self.carried is not None:
            self._spill()
        target = self.log_end_offset
        if not self._dirty and not self._dir_dirty and target <= self._recovery_point:
            return None
        active = self._segments[-1]
        fds: list[int] = []
        for seg in self._dirty.values():
            fds.extend(seg.flush_fds(include_index=seg is not active))
        ticket = FlushTicket(
            self, target, fds, self._dir_dirty, self._unflushed_bytes, generation=self.cut_backs
        )
        self._dirty = {}
        self._dir_dirty = False
        self._unflushed_messages = 0
        self._unflushed_bytes = 0
        return ticket

    def _spill(self) -> None:
        assert self.carried is not None
        try:
            self.carried.spill()
        except OSError as e:
            # They are durable in the journal only: its files must outlive this run.
            if self.journal is not None:
                self.journal.pin(f"appending the carried records of {self.dir.name} failed: {e!r}")

    def complete_flush(self, ticket: FlushTicket[PartitionLog]) -> None:
        if ticket.generation != self.cut_backs:
            return  # cut back meanwhile: the offsets it covered may hold other data now
        if ticket.target_offset > self._recovery_point:
            self._recovery_point = min(ticket.target_offset, self.log_end_offset)

    def abort_flush(self, ticket: FlushTicket[PartitionLog]) -> None:
        """Mark everything dirty again so the next flush retries.

        Only for a journaled log whose journal holds the data durably (the journal
        checkpoint); any other failed fsync must ``discard_unflushed``.
        """
        for seg in self._segments:
            if not seg.closed:
                seg.dirty = True
                self._dirty[seg.base_offset] = seg
        self._dir_dirty = True

    def flush(self) -> None:
        """Synchronous fsync of everything appended so far.

        On failure the log is cut back to its durable end (``discard_unflushed``) and
        FlushError is raised.
        """
        ticket = self.prepare_flush()
        if ticket is None:
            return
        ticket.force_checkpoint = True
        try:
            ticket.run()
        except OSError as e:
            self.abort_flush(ticket)
            if self.journal is not None:
                # Below durable_end the journal is the only copy known to be on disk.
                self.journal.pin(f"fsync of {self.dir.name} failed")
            end = self.discard_unflushed()
            raise FlushError(
                f"fsync of {self.dir} failed: {e!r}", log=self, truncated_to=end
            ) from e
        self.complete_flush(ticket)

    def survived(self, offset: int, generation: int) -> bool:
        """Whether ``offset``, appended when ``cut_backs`` was ``generation``, is still ours.

        False once a cut-back since then went to or below it: the offset may now hold
        another batch appended after the cut.
        """
        return all(end > offset for end in self._cut_ends[generation:])

    def discard_unflushed(self) -> int:
        """After a failed fsync: cut the log back to ``durable_end``; returns the new end.

        Linux may drop dirty pages whose write-back failed and report success to the next
        fsync, so nothing above the durable end can be trusted to be on disk. Keeping it
        would let later appends be acknowledged on top of a hole that recovery would cut,
        taking them along. So it goes: segments entirely above are deleted, the last one is
        cut at the batch boundary (a shrink needs no free space), and, for a journaled log,
        the journal's unsynced records too (which cuts back the other logs that had
        records among them). Then every ``on_cut_back`` hook runs with the new end. Never
        raises; a cut the file system refuses is retried before the next append.
        """
        target = self.durable_end
        old_end = self.log_end_offset
        carried = self.carried
        if carried is not None:
            carried.cut(target)  # gone with the journal's unsynced part
        if self._closed or target >= old_end:
            return old_end
        while len(self._segments) > 1 and self._segments[-1].base_offset >= target:
            seg = self._segments.pop()
            self._bases.pop()
            self._created_ms.pop(seg.base_offset, None)
            self._dirty.pop(seg.base_offset, None)
            try:
                seg.delete_files()
            except OSError as e:
                logger.error("log %s: deleting %s failed: %r", self.dir.name, seg.log_path.name, e)
            self._dir_dirty = True
        seg = self._segments[-1]
        seg.cut_to_offset(target)
        seg.next_offset = max(seg.next_offset, min(target, old_end))
        self._dirty[seg.base_offset] = seg
        self._unflushed_messages = self._unflushed_bytes = 0
        # (Carried records were cut at the target above, the new end: none is past it.)
        self.journal_durable_end = min(self.journal_durable_end, self.log_end_offset)
        self.cut_backs += 1
        new_end = self.log_end_offset
        self._cut_ends.append(new_end)
        logger.error(
            "log %s: cut back from offset %d to its durable end %d after a failed write or "
            "fsync; appends continue from there",
            self.dir.name,
            old_end,
            new_end,
        )
        if self.journal is not None:
            for other in self.journal.discard_unsynced():
                if other is not self:
                    other.discard_unflushed()
        for hook in list(self.on_cut_back):
            try:
                hook(self, new_end)
            except Exception:
                logger.exception("log %s: cut-back hook failed", self.dir.name)
        return new_end

    # ------------------------------------------------------------ retention

    def _persist_log_start(self) -> None:
        write_checkpoint(self.dir / LOG_START_OFFSET_FILE, self._log_start_offset, sync=True)

    def _drop_oldest(self) -> LogSegment:
        seg = self._segments.pop(0)
        self._bases.pop(0)
        self._created_ms.pop(seg.base_offset, None)
        self._dirty.pop(seg.base_offset, None)
        return seg

    def delete_segments_before(self, offset: int) -> int:
        """Advance the log start to ``offset`` and delete segments entirely below it.

        The active segment is never deleted.  Returns the number removed.
        """
        offset = min(offset, self.log_end_offset)
        old_start = self._log_start_offset
        if offset > self._log_start_offset:
            self._log_start_offset = offset
        victims: list[LogSegment] = []
        while len(self._segments) > 1 and self._segments[0].next_offset <= self._log_start_offset:
            victims.append(self._drop_oldest())
        if len(self._segments) > 1 or victims:
            # A following segment base is a safe log start for what is left.
            self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self._persist_log_start()
        for seg in victims:
            seg.delete_files()
        if victims:
            fsync_dir(self.dir)
        if self.journal is not None and self._log_start_offset > old_start:
            # A remote journal's copy (PostgreSQL's rows) follows the new log start.
            self.journal.trim(self, self._log_start_offset)
        return len(victims)

    def apply_retention(self, now_ms: int | None = None) -> int:
        """retention.ms / retention.bytes: delete whole old segments.

        The active segment goes too when every record in it has passed retention.ms and is
        durable: it is rolled first and the log start moves to the log end, as Kafka's
        UnifiedLog.deletableSegments does (bounded there by the high watermark), so a quiet
        topic's old records expire.
        """
        if not self.config.delete:
            return 0
        now = self._clock() if now_ms is None else now_ms
        segs = self._segments
        i = 0
        if self.config.retention_ms >= 0:
            i = scan.expired_prefix(segs, self.config.retention_ms, now)
            if i == len(segs):
                if self.durable_end >= self.log_end_offset:
                    self.roll()  # the active segment's records go too
                else:
                    i -= 1
        if self.config.retention_bytes >= 0:
            i = scan.oversize_prefix(segs, i, self.size_bytes, self.config.retention_bytes)
        if i == 0:
            return 0
        return self.delete_segments_before(max(self._log_start_offset, segs[i].base_offset))

    # ------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= ``offset``.

        Batches are atomic: one straddling ``offset`` goes entirely and the log
        end becomes its base offset.  Truncating to or below the first
        segment's base empties the log and restarts it at ``offset``.
        """
        if offset >= self.log_end_offset:
            return
        if offset <= self._segments[0].base_offset:
            self._truncate_fully(offset)
            return
        while self._segments[-1].base_offset >= offset:
            seg = self._segments.pop()
            self._bases.pop()
            self._created_ms.pop(seg.base_offset, None)
            self._dirty.pop(seg.base_offset, None)
            seg.delete_files()
            self._dir_dirty = True
        seg = self._segments[-1]
        _removed, first_removed = seg.truncate_at_offset(offset)
        new_end = offset if first_removed is None else min(offset, first_removed)
        # Kafka semantics: the end moves to the cut even across a compaction gap.
        seg.next_offset = max(seg.next_offset, new_end)
        self._dirty[seg.base_offset] = seg
        self._after_truncation()

    def _truncate_fully(self, offset: int) -> None:
        for seg in self._segments:
            seg.delete_files()
        new = LogSegment(self.dir, offset, self.config.index_interval_bytes)
        self._segments = [new]
        self._bases = [offset]
        self._created_ms = {offset: self._clock()}
        self._dirty = {offset: new}
        self._dir_dirty = True
        self._log_start_offset = offset
        self._persist_log_start()
        self._after_truncation()

    def _after_truncation(self) -> None:
        self._log_start_offset = min(self._log_start_offset, self.log_end_offset)
        self.journal_durable_end = min(self.journal_durable_end, self.log_end_offset)
        if self._recovery_point > self.log_end_offset:
            self._recovery_point = self.log_end_offset
            write_checkpoint(self.dir / RECOVERY_POINT_FILE, self._recovery_point, sync=True)
        self.flush()

    # ------------------------------------------------------------ compaction hook

    def replace_segments(self, old: Sequence[LogSegment], new: LogSegment) -> None:
        """Swap ``old`` (consecutive, not active) for ``new`` in memory.

        The file-level swap is the cleaner's job; this only updates state.
        """
        idx = self._segments.index(old[0])
        if self._segments[idx : idx + len(old)] != list(old) or old[-1] is self._segments[-1]:
            raise ValueError("segments to replace are not a consecutive inactive run")
        new.next_offset = max(new.next_offset, old[-1].next_offset)
        self._segments[idx : idx + len(old)] = [new]
        self._bases = [s.base_offset for s in self._segments]
        for s in old:
            self._dirty.pop(s.base_offset, None)
        self._created_ms.setdefault(new.base_offset, self._clock())

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Flush, checkpoint and leave a clean-shutdown marker."""
        if self._closed:
            return
        # fsync every file, not only those we think are dirty: a flusher
        # thread may still be mid-fsync on data this close must cover.
        for seg in self._segments:
            seg.dirty = seg.index_dirty = True
            self._dirty[seg.base_offset] = seg
        self._dir_dirty = True
        self.flush()
        write_checkpoint(self.dir / RECOVERY_POINT_FILE, self.log_end_offset, sync=True)
        self._persist_log_start()
        for seg in self._segments:
            seg.close()
        write_checkpoint(self.dir / CLEAN_SHUTDOWN_FILE, self.log_end_offset, sync=True)
        fsync_dir(self.dir)
        self._closed = True

    def close_without_marker(self) -> None:
        """Release descriptors as a crash would leave things (tests, fatal errors)."""
        for seg in self._segments:
            seg.close()
        self._closed = True

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        for seg in self._segments:
            seg.close()
        self._closed = True
        shutil.rmtree(self.dir, ignore_errors=True)
        fsync_dir(self.dir.parent)
