"""Log compaction: keep only the latest record per key, in bounded steps.

How this works
--------------
A *pass* (one ``LogCleaner`` per compacted log) follows Kafka's LogCleaner:

1. Fix the cleanable range: every segment except the active one, ending at
   the active segment's base (Kafka's first uncleanable offset).
2. Build the offset map key -> latest offset over that range.
3. Recopy the range, oldest first, in groups of consecutive segments (at most
   ``segment_bytes`` together).  A record survives when it is the latest for
   its key.  Records keep their offsets: a batch whose records all survive is
   copied byte for byte, otherwise it is re-encoded (uncompressed) with the same
   base offset, offset deltas, timestamps and producer fields; an emptied batch
   vanishes.  Compressed batches of any codec are read (storage.record_batch); a
   batch whose records cannot be read (an unknown codec, corrupt compressed bytes,
   more than MAX_DECOMPRESSED_BYTES) is copied as it is and its keys never win.
   Keyless records are dropped, as Kafka does.
4. Tombstones (null value) follow KIP-534: the first pass that rewrites a
   batch holding a surviving tombstone stamps it with a delete horizon
   (``now + delete_retention_ms``, stored as the batch base timestamp with
   attribute bit 6); a later pass drops the tombstone once ``now`` reaches
   the horizon.  Consumers that fall behind by less than
   delete.retention.ms therefore still see deletes.

Transactions (Kafka's CleanedTransactionMetadata and LogCleanerManager.cleanableOffsets,
as far as a log needs them to stay correct):

* a pass never cleans at or past the *first unstable offset* -- the first batch of a
  transaction with no COMMIT/ABORT marker yet anywhere in the log -- so only whole
  segments below it are cleaned (a later marker may still abort what is there);
* records of transactional batches enter the key map only when their COMMIT marker is in
  the range (at the marker, each only if newer than the key's entry): an aborted or still
  undecided write never hides an older committed value of its key;
* aborted batches are kept (readers skip them; only disk is spent), as are transactional
  records whose marker lies past the range; a marker is kept while any record of its
  transaction is, and once none is left it follows a tombstone's delete horizon (stamped on
  the first pass that finds it alone, dropped on a pass after the horizon), so a
  long-lived log does not keep one marker per transaction for ever.

Everything is resumable: ``clean_step(max_bytes)`` reads at most about
``max_bytes`` of log per call (one batch at least), so a server's background
task can interleave cleaning with request handling.  If retention or
truncation removes a segment of the running pass, the pass is abandoned.

Crash safety of one group swap, base ``b`` = the group's first base offset:

1. write ``b.log.cleaned`` and fsync it;
2. write ``b.swapinfo`` (end offset of the group) and fsync it;
3. rename ``.cleaned`` -> ``b.log.swap`` and fsync the directory (commit);
4. delete the group's old segment files, fsync the directory;
5. rename ``.swap`` -> ``b.log``, remove ``.swapinfo``, fsync the directory.

On open, ``complete_pending_swaps`` (``storage.local.recovery``) deletes any ``.cleaned`` (crash before
the commit: old segments intact) and finishes steps 4-5 for any ``.swap``
(crash after the commit: the swap file holds everything the group kept).
Either way the log is the old group or the new one, never a mix.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from storage.files import fsync_dir, read_checkpoint, write_at, write_checkpoint
from storage.local.recovery import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    SWAPINFO_SUFFIX,
    complete_pending_swaps,
)
from storage.local.segment import (
    LOG_SUFFIX,
    LogSegment,
    segment_file_name,
)
from storage.record_batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_DELETE_HORIZON,
    BatchHeader,
    Record,
    UnsupportedCompressionError,
    decode_records,
    encode_batch,
    iter_record_tuples,
)

if TYPE_CHECKING:
    from storage.local.log import PartitionLog

__all__ = [
    "CLEANED_SUFFIX",
    "CLEANER_CHECKPOINT_FILE",
    "SWAPINFO_SUFFIX",
    "SWAP_SUFFIX",
    "CleanerStats",
    "LogCleaner",
    "SimulatedCrash",
    "complete_pending_swaps",
]

logger = logging.getLogger(__name__)

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
CLEANER_HORIZON_FILE = "cleaner-delete-horizon"
_NO_HORIZON = 2**63 - 1
_INT32_MAX = 2**31 - 1


class SimulatedCrash(Exception):
    """Raised by the test hook ``crash_after_step`` to stop a swap half way."""


@dataclass(slots=True)
class CleanerStats:
    passes: int = 0
    aborted_passes: int = 0
    groups_swapped: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    tombstones_dropped: int = 0


@dataclass(slots=True)
class _Pass:
    end_offset: int
    segments: list[LogSegment]
    now: int
    phase: str = "map"
    offset_map: dict[bytes, int] = field(default_factory=dict)
    seg_i: int = 0
    pos: int = 0
    groups: list[list[LogSegment]] = field(default_factory=list)
    # Transactional records of the range awaiting their marker: producer id -> (key, offset).
    txn_keys: dict[int, list[tuple[bytes, int]]] = field(default_factory=dict)
    # Producers whose transaction (the one its next marker ends) kept a record in this pass.
    txn_kept: set[int] = field(default_factory=set)
    group_i: int = 0
    out_fd: int = -1
    out_path: Path | None = None
    out_size: int = 0  # bytes written to out_fd so far
    min_horizon: int = _NO_HORIZON


class LogCleaner:
    """Compacts one PartitionLog; drive it with ``clean_step`` from a background task."""

    def __init__(self, log: PartitionLog, clock: Callable[[], int] | None = None) -> None:
        self.log = log
        self._clock = clock if clock is not None else log._clock
        self._pass: _Pass | None = None
        self.stats = CleanerStats()
        # Test hook: raise SimulatedCrash after this swap step (1..5).
        self.crash_after_step: int | None = None
        self._checkpoint = read_checkpoint(log.dir / CLEANER_CHECKPOINT_FILE, 0)
        self._next_horizon = read_checkpoint(log.dir / CLEANER_HORIZON_FILE, _NO_HORIZON)

    # ------------------------------------------------------------ scheduling

    def dirty_ratio(self) -> float:
        inactive = self.log.segments[:-1]
        total = sum(s.size for s in inactive)
        if total == 0:
            return 0.0
        dirty = sum(s.size for s in inactive if s.next_offset > self._checkpoint)
        return dirty / total

    def needs_cleaning(self) -> bool:
        if not self.log.config.compact or len(self.log.segments) < 2:
            return False
        if self.dirty_ratio() >= self.log.config.min_cleanable_dirty_ratio:
            return True
        # Tombstones whose horizon passed can go even if little is dirty.
        return self._clock() >= self._next_horizon

    def clean_step(self, max_bytes: int = 4 << 20, *, force: bool = False) -> bool:
        """Do up to ~``max_bytes`` of work; True while a pass is still running."""
        if self._pass is None:
            if not (force or self.needs_cleaning()) or len(self.log.segments) < 2:
                return False
            if not self._start_pass(max_bytes):
                return False
        p = self._pass
        assert p is not None
        try:
            if not self._still_valid(p):
                self._abort("log changed under the cleaner")
                return False
            if p.phase == "map":
                self._map_step(p, max_bytes)
            else:
                self._clean_step(p, max_bytes)
        except SimulatedCrash:
            self._pass = None
            raise
        except BaseException:
            self._abort("error")
            raise
        return self._pass is not None

    def clean_all(self, max_bytes: int = 4 << 20) -> None:
        """Run one full pass now (tests, admin tools)."""
        running = self.clean_step(max_bytes, force=True)
        while running:
            running = self.clean_step(max_bytes)

    def _first_unstable_offset(self) -> int | None:
        """The first offset of the earliest transaction without a marker in the log."""
        open_: dict[int, int] = {}
        for seg in self.log.segments:
            for h, _pos, _data in seg.walk(0, verify=False):
                if h.is_transactional:
                    if h.is_control:
                        open_.pop(h.producer_id, None)
                    else:
                        open_.setdefault(h.producer_id, h.base_offset)
        return min(open_.values()) if open_ else None

    def _start_pass(self, max_bytes: int) -> bool:
        """Fix the pass's range; False when nothing below the first unstable offset is
        cleanable (no pass then)."""
        segs = list(self.log.segments[:-1])
        end = self.log.active_segment.base_offset
        unstable = self._first_unstable_offset()
        if unstable is not None:
            segs = [s for s in segs if s.next_offset <= unstable]
            if not segs:
                return False
            end = segs[-1].next_offset
        p = _Pass(end_offset=end, segments=segs, now=self._clock())
        # Groups are fixed up front so each swap stays within one segment's size
        # and a 32-bit relative offset, like Kafka's groupSegmentsBySize; they
        # are also bounded by max_bytes so one group is a few steps of work.
        limit = min(self.log.config.segment_bytes, max(max_bytes, 1))
        group: list[LogSegment] = []
        size = 0
        for s in segs:
            if group and (
                size + s.size > limit or s.next_offset - 1 - group[0].base_offset > _INT32_MAX
            ):
                p.groups.append(group)
                group, size = [], 0
            group.append(s)
            size += s.size
        if group:
            p.groups.append(group)
        self._pass = p
        return True

    def _still_valid(self, p: _Pass) -> bool:
        live = {id(s) for s in self.log.segments}
        if p.phase == "map":
            return all(id(s) in live for s in p.segments[p.seg_i :])
        return all(id(s) in live for g in p.groups[p.group_i :] for s in g)

    def _abort(self, why: str) -> None:
        p = self._pass
        self._pass = None
        self.stats.aborted_passes += 1
        if p is None:
            return
        logger.info("compaction pass of %s abandoned: %s", self.log.dir.name, why)
        if p.out_fd >= 0:
            os.close(p.out_fd)
        if p.out_path is not None:
            p.out_path.unlink(missing_ok=True)

    # ------------------------------------------------------------ phase 1: map

    def _map_step(self, p: _Pass, budget: int) -> None:
        done = 0
        offset_map = p.offset_map
        while p.seg_i < len(p.segments) and done < budget:
            seg = p.segments[p.seg_i]
            for h, pos, data in seg.walk(p.pos, verify=False, with_data=True):
                assert data is not None
                try:
                    if h.is_transactional:
                        _map_transactional(p, h, data)
                    else:
                        for off, _ts, key, _val in iter_record_tuples(data):
                            if key is not None:
                                offset_map[key] = off
                except UnsupportedCompressionError:
                    pass  # such batches are copied verbatim, so their keys never win
                done += h.size
                p.pos = pos + h.size
                if done >= budget:
                    break
            else:
                p.seg_i += 1
                p.pos = 0
        self.stats.bytes_read += done
        if p.seg_i >= len(p.segments):
            p.phase = "clean"
            p.seg_i = 0
            p.pos = 0

    # ------------------------------------------------------------ phase 2: recopy

    def _clean_step(self, p: _Pass, budget: int) -> None:
        group = p.groups[p.group_i]
        if p.out_fd < 0:
            p.out_path = self.log.dir / segment_file_name(group[0].base_offset, CLEANED_SUFFIX)
            p.out_fd = os.open(p.out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            p.out_size = 0
        done = 0
        while p.seg_i < len(group) and done < budget:
            seg = group[p.seg_i]
            out: list[bytes] = []
            for h, pos, data in seg.walk(p.pos, verify=False, with_data=True):
                assert data is not None
                kept = self._filter_batch(p, h, data)
                if kept is not None:
                    out.append(kept)
                done += h.size
                p.pos = pos + h.size
                if done >= budget:
                    break
            else:
                p.seg_i += 1
                p.pos = 0
            if out:
                blob = b"".join(out)
                # Checked: a short write (full disk) raises, and the pass is abandoned
                # with its .cleaned file removed, instead of swapping in a torn segment.
                write_at(p.out_fd, blob, p.out_size)
                p.out_size += len(blob)
                self.stats.bytes_written += len(blob)
        self.stats.bytes_read += done
        if p.seg_i >= len(group):
            self._swap(p, group)
            p.group_i += 1
            p.seg_i = 0
            p.pos = 0
            if p.group_i >= len(p.groups):
                self._finish_pass(p)

    def _filter_batch(self, p: _Pass, h: BatchHeader, data: bytes) -> bytes | None:
        if h.is_control:
            return self._filter_marker(p, h, data)
        try:
            records = decode_records(data)
        except UnsupportedCompressionError:
            if h.is_transactional:
                p.txn_kept.add(h.producer_id)
            return data
        horizon = h.delete_horizon_ms
        kept: list[Record] = []
        has_tombstone = False
        latest = p.offset_map
        for r in records:
            off = h.base_offset + r.offset_delta
            if r.key is None or latest.get(r.key, off) > off:
                self.stats.records_removed += 1
                continue
            if r.value is None:
                if horizon is not None and p.now >= horizon:
                    self.stats.tombstones_dropped += 1
                    self.stats.records_removed += 1
                    continue
                has_tombstone = True
            kept.append(r)
        if not kept:
            return None
        if h.is_transactional:
            p.txn_kept.add(h.producer_id)
        new_horizon = horizon
        if has_tombstone and horizon is None:
            new_horizon = p.now + self.log.config.delete_retention_ms
        if has_tombstone and new_horizon is not None:
            p.min_horizon = min(p.min_horizon, new_horizon)
        if len(kept) == len(records) and new_horizon == horizon:
            return data  # compressed or not, as the producer wrote it
        # A batch that changes is written uncompressed, whatever its codec was: every
        # client reads that, while each codec's framing has readers that refuse some
        # variants (Kafka's Java LZ4 reader, xerial snappy).
        attrs = h.attributes & ~ATTR_COMPRESSION_MASK
        base_ts = h.base_timestamp
        if new_horizon is not None and horizon is None:
            # KIP-534: the base timestamp becomes the horizon, deltas shift so
            # every record keeps its own timestamp.
            kept = _shifted(kept, base_ts - new_horizon)
            base_ts = new_horizon
            attrs |= ATTR_DELETE_HORIZON
        return _rebuilt(h, kept, base_ts, attrs)

    def _filter_marker(self, p: _Pass, h: BatchHeader, data: bytes) -> bytes | None:
        """A control batch: kept while its transaction kept a record; alone, it gets a
        delete horizon and goes once that passed (Kafka's marker removal)."""
        if h.producer_id in p.txn_kept:
            p.txn_kept.discard(h.producer_id)
            return data
        horizon = h.delete_horizon_ms
        if horizon is not None:
            if p.now >= horizon:
                self.stats.records_removed += h.records_count
                return None
            p.min_horizon = min(p.min_horizon, horizon)
            return data
        horizon = p.now + self.log.config.delete_retention_ms
        p.min_horizon = min(p.min_horizon, horizon)
        records = _shifted(decode_records(data), h.base_timestamp - horizon)
        attrs = (h.attributes & ~ATTR_COMPRESSION_MASK) | ATTR_DELETE_HORIZON
        return _rebuilt(h, records, horizon, attrs)

    # ------------------------------------------------------------ swap

    def _step_done(self, step: int) -> None:
        if self.crash_after_step == step:
            raise SimulatedCrash(f"simulated crash after swap step {step}")

    def _swap(self, p: _Pass, group: list[LogSegment]) -> None:
        directory = self.log.dir
        base = group[0].base_offset
        end = group[-1].next_offset
        assert p.out_path is not None
        os.fsync(p.out_fd)
        os.close(p.out_fd)
        p.out_fd = -1
        self._step_done(1)
        write_checkpoint(directory / segment_file_name(base, SWAPINFO_SUFFIX), end, sync=True)
        self._step_done(2)
        swap = directory / segment_file_name(base, SWAP_SUFFIX)
        os.replace(p.out_path, swap)
        p.out_path = None
        fsync_dir(directory)
        self._step_done(3)
        for seg in group:
            seg.delete_files()
        fsync_dir(directory)
        self._step_done(4)
        os.replace(swap, directory / segment_file_name(base, LOG_SUFFIX))
        (directory / segment_file_name(base, SWAPINFO_SUFFIX)).unlink(missing_ok=True)
        fsync_dir(directory)
        self._step_done(5)
        new = LogSegment(directory, base, self.log.config.index_interval_bytes)
        new.load(trust_index=False)
        # Index files were rebuilt from scratch; make them durable with the data.
        fds = new.flush_fds(include_index=True)
        for fd in fds:
            os.fsync(fd)
            os.close(fd)
        self.log.replace_segments(group, new)
        self.stats.groups_swapped += 1

    def _finish_pass(self, p: _Pass) -> None:
        self._pass = None
        self._checkpoint = p.end_offset
        self._next_horizon = p.min_horizon
        write_checkpoint(self.log.dir / CLEANER_CHECKPOINT_FILE, p.end_offset, sync=False)
        write_checkpoint(self.log.dir / CLEANER_HORIZON_FILE, p.min_horizon, sync=False)
        self.stats.passes += 1
        logger.debug("compaction pass of %s done up to %d", self.log.dir.name, p.end_offset)
        if self.log.journal is not None:
            # A remote journal (PostgreSQL) replaces its copy below end_offset by ours.
            self.log.journal.compacted(self.log, p.end_offset)


def _shifted(records: list[Record], shift: int) -> list[Record]:
    """``records`` with timestamp deltas moved by ``shift``: each keeps its timestamp when
    the base timestamp becomes the delete horizon (KIP-534)."""
    return [
        Record(r.offset_delta, r.timestamp_delta + shift, r.key, r.value, r.headers)
        for r in records
    ]


def _rebuilt(h: BatchHeader, records: list[Record], base_ts: int, attributes: int) -> bytes:
    """A batch rewritten at its offsets with its producer fields (uncompressed)."""
    return encode_batch(
        h.base_offset,
        records,
        timestamp_ms=base_ts,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        partition_leader_epoch=h.partition_leader_epoch,
        attributes=attributes,
    )


# Kafka's control record key: (version, type); type 1 is COMMIT, 0 ABORT.
_CONTROL_COMMIT = 1


def _map_transactional(p: _Pass, h: BatchHeader, data: bytes) -> None:
    """A transactional batch in the map phase: its records wait for their marker; a COMMIT
    puts them in the key map (each only where it is the newest), an ABORT drops them."""
    if not h.is_control:
        waiting = p.txn_keys.setdefault(h.producer_id, [])
        for off, _ts, key, _val in iter_record_tuples(data):
            if key is not None:
                waiting.append((key, off))
        return
    waiting = p.txn_keys.pop(h.producer_id, [])
    committed = False
    for _off, _ts, key, _val in iter_record_tuples(data):
        committed = key is not None and int.from_bytes(key[2:4], "big") == _CONTROL_COMMIT
    if not committed:
        return
    offset_map = p.offset_map
    for key, off in waiting:
        if offset_map.get(key, -1) < off:
            offset_map[key] = off
