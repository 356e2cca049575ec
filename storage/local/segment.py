"""One log segment: ``<base>.log`` plus its sparse ``.index`` and ``.timeindex``.

How this works
--------------
Files are named by the 20-digit zero-padded offset of the segment's first
possible record, as Kafka names them.  The ``.log`` file is a plain
concatenation of v2 record batches.  The index files use Kafka's layouts:

* ``.index``: 8-byte entries (int32 offset relative to the base, int32 file
  position).  Like Kafka, an entry names the *last* offset of the batch that
  starts at that position, and one is added once ``index_interval_bytes``
  have been written since the previous entry, so a lookup is "floor entry,
  then scan a few KiB of batch headers".
* ``.timeindex``: 12-byte entries (int64 max timestamp so far, int32 relative
  offset of the batch that reached it), added together with offset entries
  when the max timestamp grew.

Both indexes are held in memory as sorted lists and appended to disk with
plain writes.  They are derived data: when the segment is recovered after an
unclean shutdown, or an index looks wrong, it is rebuilt from the log file.

Every write goes through ``durability.write_at`` (short writes continued, failures
raised).  An append that fails part-way is undone before the error reaches the caller:
the log file and both index files are cut back to their previous lengths and the
in-memory state restored (``mark`` / ``rollback``), so the next append starts right
after the last whole batch.  If even the cut-back fails, the segment remembers it and
refuses every append until a retry of the cut succeeds (``ensure_cut``): nothing is ever
written after bytes that do not parse.  Readers never look past ``size``.

The segment never fsyncs on its own; ``PartitionLog`` decides when (see
``durability``).  Reads use ``os.pread`` so concurrent readers never share a
file position.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple, Protocol

from storage.files import write_at
from storage.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptBatchError,
    UnsupportedCompressionError,
    iter_record_tuples,
    parse_header,
    verify_crc,
)

__all__ = [
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "TIMEINDEX_SUFFIX",
    "AppendMark",
    "CorruptSegmentError",
    "Damage",
    "LogSegment",
    "SegmentClosedError",
    "Span",
    "parse_segment_name",
    "segment_file_name",
]

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"

_INDEX_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_SCAN_CHUNK = 1 << 20
_LOOKUP_CHUNK = 16 << 10


def segment_file_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_segment_name(name: str, suffix: str = LOG_SUFFIX) -> int | None:
    """Base offset from ``<20 digits><suffix>``, or None for any other name."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


@dataclass(frozen=True, slots=True)
class Damage:
    """Where the valid prefix of a segment ends and why."""

    position: int
    reason: str
    first_bad_offset: int | None
    truncated_bytes: int = 0


class AppendMark(NamedTuple):
    """A segment's state before an append, to undo it (``LogSegment.rollback``).

    A tuple, built with ``tuple.__new__`` (``mark``): one is taken per append."""

    size: int
    next_offset: int
    max_timestamp: int
    first_batch_timestamp: int | None
    bytes_since_entry: int
    entries: int
    times: int


class Span(Protocol):
    """What an append needs of the batch it writes: a ``BatchHeader``, or the log's own
    ``AppendedSpan`` for a batch it encoded itself (no header to parse back)."""

    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def next_offset(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def records_count(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...


class AppendedSpan(NamedTuple):
    """What ``append_records`` knows of a batch it encoded from (key, value) pairs."""

    base_offset: int
    last_offset: int
    size: int
    records_count: int
    max_timestamp: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


_new_mark = tuple.__new__


class LogSegment:
    """A segment's files and in-memory indexes; not thread-safe (one event loop)."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int) -> None:
        self.dir = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        self.index_path = directory / segment_file_name(base_offset, INDEX_SUFFIX)
        self.timeindex_path = directory / segment_file_name(base_offset, TIMEINDEX_SUFFIX)
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        # Base for segment.ms rolling: first batch's max timestamp (Kafka's
        # rollingBasedTimestamp) or the creation time if the segment is empty.
        self.first_batch_timestamp: int | None = None
        self._idx_off: list[int] = []
        self._idx_pos: list[int] = []
        self._time_ts: list[int] = []
        self._time_off: list[int] = []
        self._bytes_since_entry = 0
        self._index_fd = -1
        self._timeindex_fd = -1
        self.dirty = False
        self.index_dirty = False
        self.closed = False
        # (log bytes, index entries, time entries) the files must still be cut back to
        # after a failed write whose cut-back failed too; appends wait until it succeeds.
        self._pending_cut: tuple[int, int, int] | None = None

    # ------------------------------------------------------------ loading

    def load(self, trust_index: bool) -> None:
        """Rebuild in-memory state without CRC checks (files are trusted)."""
        start = 0
        if trust_index and self._load_index_files():
            start = self._idx_pos[-1] if self._idx_pos else 0
            self._scan_tail(start)
        else:
            self._rebuild(verify=False)

    def recover(self) -> Damage | None:
        """CRC-check every batch, rebuild indexes, truncate at the first bad byte."""
        damage = self._rebuild(verify=True)
        if damage is not None:
            damage = replace(damage, truncated_bytes=self.size - damage.position)
            os.ftruncate(self.fd, damage.position)
            self.size = damage.position
            self.dirty = True
        return damage

    def load_checked(self) -> tuple[Damage | None, list[Damage]]:
        """Load the active segment after a clean shutdown: indexes trusted, tail CRC-checked.

        The clean-shutdown marker only promises that the files were fsynced when it was
        written, not that nothing touched them since, so the bytes after the last index
        entry (at most ``index_interval_bytes`` plus one batch, or the whole segment when
        its indexes must be rebuilt) are walked with CRC checks. Returns (torn, corrupt):
        ``torn`` is the truncated tail (bytes that do not parse up to the end of the file,
        already cut off), ``corrupt`` are bad batches followed by good ones (kept, so no
        acknowledged batch after them is dropped; the caller marks the log damaged).
        """
        if self._load_index_files():
            start = self._idx_pos[-1] if self._idx_pos else 0
            first = self.first_header()
            self.first_batch_timestamp = None if first is None else first.max_timestamp
            rebuild = False
        else:
            self._idx_off, self._idx_pos, self._time_ts, self._time_off = [], [], [], []
            self.max_timestamp = -1
            self.first_batch_timestamp = None
            self._bytes_since_entry = 0
            start = 0
            rebuild = True
            self._open_index_fds(truncate=True)
        torn, corrupt, end = self._checked_scan(start, add_entries=rebuild)
        if not rebuild:
            self._bytes_since_entry = end - start
        if torn is not None:
            torn = replace(torn, truncated_bytes=self.size - torn.position)
            self._cut_at(torn.position)
            self.dirty = self.index_dirty = True
        if rebuild:
            self._write_index_files()
        return torn, corrupt

    def _checked_scan(
        self, start: int, *, add_entries: bool
    ) -> tuple[Damage | None, list[Damage], int]:
        """CRC-checked walk from ``start``: (torn tail, corrupt batches kept, end position)."""
        corrupt: list[Damage] = []
        pos = end = start
        while True:
            try:
                for h, p, _ in self.walk(pos, verify=True):
                    self._note_batch(h, p, add_entries=add_entries)
                    end = p + h.size
            except CorruptSegmentError as e:
                bad = self._bad_batch_followed_by_good(e.damage.position)
                if bad is None:
                    return e.damage, corrupt, end
                # A bad batch with good ones after it is rot, not a torn write: keep it
                # (its header still gives its offsets) and carry on after it.
                corrupt.append(e.damage)
                self._note_batch(bad, e.damage.position, add_entries=add_entries)
                pos = end = e.damage.position + bad.size
                continue
            if end != self.size:
                return Damage(end, "incomplete batch at end of file", None), corrupt, end
            return None, corrupt, end

    def _bad_batch_followed_by_good(self, pos: int) -> BatchHeader | None:
        """The header of the bad batch at ``pos`` if a CRC-valid batch follows it, else None."""
        try:
            h = parse_header(os.pread(self.fd, HEADER_SIZE, pos))
        except CorruptBatchError:
            return None
        nxt = pos + h.size
        if h.base_offset < self.next_offset or nxt + HEADER_SIZE > self.size:
            return None
        try:
            n = parse_header(os.pread(self.fd, HEADER_SIZE, nxt))
        except CorruptBatchError:
            return None
        if n.base_offset < h.next_offset or nxt + n.size > self.size:
            return None
        data = os.pread(self.fd, n.size, nxt)
        return h if len(data) == n.size and verify_crc(data, 0, n.size) else None

    def _load_index_files(self) -> bool:
        try:
            raw = self.index_path.read_bytes()
            traw = self.timeindex_path.read_bytes()
        except FileNotFoundError:
            return False
        offs: list[int] = []
        poss: list[int] = []
        for rel, pos in _INDEX_ENTRY.iter_unpack(raw[: len(raw) - len(raw) % 8]):
            if (offs and (rel <= offs[-1] or pos <= poss[-1])) or pos >= self.size or rel < 0:
                return False
            offs.append(rel)
            poss.append(pos)
        if poss:
            # The last entry must point at a real batch ending at that offset;
            # anything else means the index is stale, so rebuild.
            try:
                h = parse_header(os.pread(self.fd, HEADER_SIZE, poss[-1]))
            except CorruptBatchError:
                return False
            if h.last_offset != self.base_offset + offs[-1]:
                return False
        tts: list[int] = []
        toff: list[int] = []
        for ts, rel in _TIME_ENTRY.iter_unpack(traw[: len(traw) - len(traw) % 12]):
            if tts and (ts <= tts[-1] or rel < toff[-1]):
                return False
            tts.append(ts)
            toff.append(rel)
        self._idx_off, self._idx_pos, self._time_ts, self._time_off = offs, poss, tts, toff
        if tts:
            self.max_timestamp = tts[-1]
        self._open_index_fds(truncate=False)
        return True

    def _scan_tail(self, start: int) -> None:
        """Walk batches from ``start`` to EOF to learn next offset and timestamps."""
        first = self.first_header()
        self.first_batch_timestamp = None if first is None else first.max_timestamp
        for h, pos, _ in self.walk(start, verify=False):
            self._note_batch(h, pos, add_entries=False)
        self._bytes_since_entry = self.size - start

    def _rebuild(self, verify: bool) -> Damage | None:
        self._idx_off, self._idx_pos, self._time_ts, self._time_off = [], [], [], []
        self._bytes_since_entry = 0
        self.max_timestamp = -1
        self.next_offset = self.base_offset
        self.first_batch_timestamp = None
        damage: Damage | None = None
        end = 0
        try:
            for h, pos, _ in self.walk(0, verify=verify):
                self._note_batch(h, pos, add_entries=True)
                end = pos + h.size
        except CorruptSegmentError as e:
            damage = e.damage
        if damage is None and end != self.size:
            damage = Damage(end, "incomplete batch at end of file", None)
        self._open_index_fds(truncate=True)
        self._write_index_files()
        return damage

    def _note_batch(self, h: BatchHeader, pos: int, add_entries: bool) -> None:
        if add_entries:
            self._maybe_index(h, pos)
            self._bytes_since_entry += h.size
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = h.max_timestamp
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
        self.next_offset = h.next_offset

    def _maybe_index(self, h: Span, pos: int) -> None:
        if self._bytes_since_entry < self.index_interval_bytes:
            return
        rel = h.last_offset - self.base_offset
        self._idx_off.append(rel)
        self._idx_pos.append(pos)
        ts = max(self.max_timestamp, h.max_timestamp)
        if not self._time_ts or ts > self._time_ts[-1]:
            self._time_ts.append(ts)
            self._time_off.append(rel)
        self._bytes_since_entry = 0

    def _open_index_fds(self, truncate: bool) -> None:
        flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if truncate else 0)
        if self._index_fd < 0:
            self._index_fd = os.open(self.index_path, flags, 0o644)
            self._timeindex_fd = os.open(self.timeindex_path, flags, 0o644)
        elif truncate:
            os.ftruncate(self._index_fd, 0)
            os.ftruncate(self._timeindex_fd, 0)

    def _write_index_files(self) -> None:
        data = b"".join(
            _INDEX_ENTRY.pack(o, p) for o, p in zip(self._idx_off, self._idx_pos, strict=True)
        )
        tdata = b"".join(
            _TIME_ENTRY.pack(t, o) for t, o in zip(self._time_ts, self._time_off, strict=True)
        )
        os.ftruncate(self._index_fd, 0)
        write_at(self._index_fd, data, 0)
        os.ftruncate(self._timeindex_fd, 0)
        write_at(self._timeindex_fd, tdata, 0)
        self.index_dirty = True

    # ------------------------------------------------------------ writing

    def mark(self) -> AppendMark:
        """The current state, for ``rollback`` if what follows must be undone."""
        return _new_mark(
            AppendMark,
            (
                self.size,
                self.next_offset,
                self.max_timestamp,
                self.first_batch_timestamp,
                self._bytes_since_entry,
                len(self._idx_off),
                len(self._time_ts),
            ),
        )

    def rollback(self, mark: AppendMark) -> None:
        """Undo everything appended since ``mark``: memory at once, files cut back.

        Never raises: when the files cannot be cut back now, the segment refuses appends
        until ``ensure_cut`` manages to (readers already stop at the restored ``size``).
        """
        self.size = mark.size
        self.next_offset = mark.next_offset
        self.max_timestamp = mark.max_timestamp
        self.first_batch_timestamp = mark.first_batch_timestamp
        self._bytes_since_entry = mark.bytes_since_entry
        del self._idx_off[mark.entries :], self._idx_pos[mark.entries :]
        del self._time_ts[mark.times :], self._time_off[mark.times :]
        self._pending_cut = (mark.size, mark.entries, mark.times)
        try:
            self.ensure_cut()
        except OSError as e:
            log.error(
                "%s: cannot cut back to %d bytes after a failed write (%r); "
                "appends are refused until it can",
                self.log_path,
                mark.size,
                e,
            )

    def ensure_cut(self) -> None:
        """Finish a pending cut-back of the files; raises OSError while that is impossible."""
        if self._pending_cut is None or self.closed:
            return
        size, entries, times = self._pending_cut
        os.ftruncate(self.fd, size)
        if self._index_fd >= 0:
            os.ftruncate(self._index_fd, entries * _INDEX_ENTRY.size)
            os.ftruncate(self._timeindex_fd, times * _TIME_ENTRY.size)
        self._pending_cut = None
        self.dirty = self.index_dirty = True

    def append(self, batch: bytes, h: Span) -> AppendMark:
        """Write one batch at the end; on OSError the segment is as before, then it raises.

        Returns the state before it (``rollback`` undoes the append)."""
        self.ensure_cut()
        if self._index_fd < 0:
            # A brand-new segment: its (empty) index files start now.
            self._open_index_fds(truncate=True)
        mark = self.mark()
        pos = self.size
        try:
            self._maybe_index(h, pos)
            write_at(self.fd, batch, pos)
            if len(self._idx_off) != mark.entries:
                write_at(
                    self._index_fd,
                    _INDEX_ENTRY.pack(self._idx_off[-1], self._idx_pos[-1]),
                    mark.entries * _INDEX_ENTRY.size,
                )
                self.index_dirty = True
            if len(self._time_ts) != mark.times:
                write_at(
                    self._timeindex_fd,
                    _TIME_ENTRY.pack(self._time_ts[-1], self._time_off[-1]),
                    mark.times * _TIME_ENTRY.size,
                )
        except OSError:
            self.rollback(mark)
            raise
        self.size = pos + len(batch)
        self._bytes_since_entry += len(batch)
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = h.max_timestamp
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
        self.next_offset = h.next_offset
        self.dirty = True
        return mark

    def cut_to_offset(self, offset: int) -> None:
        """Drop every batch holding an offset >= ``offset`` (a cut-back; never raises).

        Unlike ``truncate_at_offset`` nothing is rewritten: the index files are only cut
        short, which needs no free space, so this works on a full disk.
        """
        pos = self.position_for(offset)
        if pos is not None:
            self._cut_at(pos)

    def _cut_at(self, pos: int) -> None:
        """Cut the segment at byte ``pos`` (a batch boundary): memory, then files."""
        i = bisect.bisect_left(self._idx_pos, pos)
        j = bisect.bisect_right(self._time_off, self._idx_off[i - 1]) if i else 0
        del self._idx_off[i:], self._idx_pos[i:]
        del self._time_ts[j:], self._time_off[j:]
        start = self._idx_pos[-1] if self._idx_pos else 0
        self.size = pos
        self.max_timestamp = self._time_ts[-1] if self._time_ts else -1
        self.next_offset = self.base_offset
        self._scan_tail(start)
        self._pending_cut = (pos, i, j)
        try:
            self.ensure_cut()
        except OSError as e:
            log.error("%s: cannot cut back to %d bytes (%r); appends are refused", self, pos, e)
        self.dirty = self.index_dirty = True

    def truncate_at_offset(self, offset: int) -> tuple[int, int | None]:
        """Drop every batch holding an offset >= ``offset``.

        Returns (bytes removed, base offset of the first removed batch or None).
        """
        pos = self.position_for(offset)
        if pos is None:
            return 0, None
        first = parse_header(os.pread(self.fd, HEADER_SIZE, pos), 0)
        removed = self.size - pos
        os.ftruncate(self.fd, pos)
        self.size = pos
        self.dirty = True
        self._rebuild(verify=False)
        return removed, first.base_offset

    # ------------------------------------------------------------ reading

    def walk(
        self, start: int, *, verify: bool, with_data: bool = False, chunk: int = _SCAN_CHUNK
    ) -> Iterator[tuple[BatchHeader, int, bytes | None]]:
        """Yield (header, position, batch bytes if asked) from ``start`` to EOF.

        Raises CorruptSegmentError at the first implausible or CRC-failing batch and
        at a partial batch in the middle; a partial batch at EOF ends the walk
        quietly (the caller compares the end position with the size).
        """
        if self.closed:
            raise SegmentClosedError(str(self.log_path))
        pos = start
        size = self.size
        buf = b""
        buf_at = pos
        prev_next: int | None = None
        while pos < size:
            rel = pos - buf_at
            if len(buf) - rel < HEADER_SIZE:
                if self.closed:
                    # Deleted or replaced while a reader was paused here.
                    raise SegmentClosedError(str(self.log_path))
                buf = os.pread(self.fd, max(chunk, HEADER_SIZE), pos)
                buf_at, rel = pos, 0
                if len(buf) < HEADER_SIZE:
                    return
            try:
                h = parse_header(buf, rel)
            except CorruptBatchError as e:
                raise CorruptSegmentError(Damage(pos, str(e), prev_next)) from None
            end = rel + h.size
            if end > len(buf):
                if self.closed:
                    raise SegmentClosedError(str(self.log_path))
                buf = os.pread(self.fd, max(chunk, h.size), pos)
                buf_at, rel, end = pos, 0, h.size
                if len(buf) < h.size:
                    return
            if prev_next is not None and h.base_offset < prev_next:
                raise CorruptSegmentError(
                    Damage(pos, f"offset {h.base_offset} goes backwards (< {prev_next})", prev_next)
                )
            if h.base_offset < self.base_offset or h.last_offset_delta < 0:
                raise CorruptSegmentError(
                    Damage(pos, f"offset {h.base_offset} outside segment", h.base_offset)
                )
            if verify and not verify_crc(buf, rel, end):
                raise CorruptSegmentError(Damage(pos, "CRC mismatch", h.base_offset))
            yield h, pos, (buf[rel:end] if with_data else None)
            prev_next = h.next_offset
            pos += h.size

    def first_header(self) -> BatchHeader | None:
        if self.size < HEADER_SIZE:
            return None
        try:
            return parse_header(os.pread(self.fd, HEADER_SIZE, 0))
        except CorruptBatchError:
            return None

    def position_for(self, offset: int) -> int | None:
        """File position of the first batch whose last offset is >= ``offset``."""
        if offset >= self.next_offset:
            return None
        i = bisect.bisect_right(self._idx_off, offset - self.base_offset) - 1
        start = self._idx_pos[i] if i >= 0 else 0
        for h, pos, _ in self.walk(start, verify=False, chunk=_LOOKUP_CHUNK):
            if h.last_offset >= offset:
                return pos
        return None

    def read(self, position: int, max_bytes: int) -> bytes:
        """Whole batches from ``position``: at least one, then as many as fit.

        Never reads past ``size``: bytes beyond it belong to a failed write not yet cut
        off. Raises CorruptBatchError when the first batch does not parse or does not fit.
        """
        limit = self.size - position
        if limit < HEADER_SIZE:
            return b""
        data = os.pread(self.fd, min(max(max_bytes, HEADER_SIZE), limit), position)
        if len(data) < HEADER_SIZE:
            return b""
        first = parse_header(data, 0)
        if first.size >= len(data):
            if first.size > limit:
                raise CorruptBatchError(
                    f"batch of {first.size} bytes at position {position} runs past the "
                    f"end of the segment ({self.size} bytes)"
                )
            if first.size > len(data):
                data = os.pread(self.fd, first.size, position)
            return data[: first.size]
        end = 0
        n = len(data)
        while n - end >= LOG_OVERHEAD:
            (length,) = struct.unpack_from(">i", data, end + 8)
            nxt = end + LOG_OVERHEAD + length
            if nxt > n or length <= 0:
                break
            end = nxt
        return data[:end]

    def find_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """First (offset, timestamp) of a record with timestamp >= ``timestamp``."""
        if self.max_timestamp < timestamp:
            return None
        i = bisect.bisect_left(self._time_ts, timestamp) - 1
        start = 0
        if i >= 0:
            # Everything up to this entry's offset is older than the target.
            start = self.position_for(self.base_offset + self._time_off[i]) or 0
        for h, _pos, data in self.walk(start, verify=False, with_data=True):
            if h.max_timestamp < timestamp:
                continue
            assert data is not None
            try:
                for off, ts, _k, _v in iter_record_tuples(data):
                    if ts >= timestamp:
                        return off, ts
            except UnsupportedCompressionError:
                return h.base_offset, h.max_timestamp
        return None

    # ------------------------------------------------------------ lifecycle

    def flush_fds(self, include_index: bool) -> list[int]:
        """Duplicated descriptors to fsync; dups survive a concurrent close()."""
        fds: list[int] = []
        if self.closed:
            return fds
        if self.dirty:
            fds.append(os.dup(self.fd))
            self.dirty = False
        if include_index and self.index_dirty and self._index_fd >= 0:
            fds.append(os.dup(self._index_fd))
            fds.append(os.dup(self._timeindex_fd))
            self.index_dirty = False
        return fds

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for fd in (self.fd, self._index_fd, self._timeindex_fd):
            if fd >= 0:
                os.close(fd)

    def delete_files(self) -> None:
        self.close()
        for p in (self.log_path, self.index_path, self.timeindex_path):
            p.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, next={self.next_offset}, size={self.size})"


class SegmentClosedError(RuntimeError):
    """The segment was closed (deleted, compacted away) while being read."""


class CorruptSegmentError(Exception):
    """A batch that does not parse, or fails its CRC, at ``damage.position``."""

    def __init__(self, damage: Damage) -> None:
        super().__init__(damage.reason)
        self.damage = damage
