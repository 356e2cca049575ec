"""A write-ahead journal shared by many partition logs: one fsync per group-commit round.

How this works
--------------
The offsets log has 50 partitions, and a burst of commits from many groups touches most of
them. Making each commit durable by fsyncing every touched segment costs one fsync per
partition per round; on one disk those fsyncs queue up. A journaled log therefore also
appends every batch it stores to ``<data_dir>/journal/<20-digit seq>.jnl`` and a round
fsyncs only the journal: the batches are durable there, while the segment files stay in
the page cache (``PartitionLog.durable_end`` covers both).

Record: ``int32 length | uint32 crc32c(rest) | int16 name length | name | batch``, where
name is the partition directory (``__consumer_offsets-7``) and batch is the stored record
batch, offsets already assigned. A *carried* record (``carry``) holds one record value that
is not in its log's segments yet: ``int16 -1 - name length | name | int64 offset | int64
timestamp | value``. The negative length tells it apart (a batch record's is never
negative; replay code older than carried records reads an empty name there, finds no log
and skips it). The group history carries its value this way each round and its store
appends many rounds' values to the segment as one batch later (``coordinator.history.store``).

When the current file passes ``max_bytes`` the journal rotates: appends go to a new file,
every journaled log is fsynced, then the older files are deleted (``checkpoint``). On
start-up, after the logs have recovered their segments, ``replay`` re-appends each batch
(and each carried value) whose offsets are at its log's end (lost from the page cache by a
power cut, or never appended to the segment), skips those already there, stops
a file at its first torn record, fsyncs the logs and removes the replayed files. A crash at
any point leaves every acknowledged batch in a segment or in a journal file.

Failures: records are written with ``durability.write_at`` at the journal's end; a write
that fails is cut back (the file truncated to its previous size) before the error reaches
``PartitionLog.append``, which then cuts back its segment too. A failed fdatasync (or a
failed sync of the old file at rotation) means nothing written since the last good sync
can be trusted: ``discard_unsynced`` truncates the file to its synced size and returns
every log that had records in the discarded part, and each of them is cut back to its
durable end. When the segments of journaled logs fail to fsync at a checkpoint, the
journal files are the only safe copy: ``pin`` keeps every journal file until the next
start replays them.

The ``Flusher`` drives it through ``storage.interface.WriteAheadJournal`` (``sync`` once a
round, ``checkpoint`` when the file is full), the protocol the PostgreSQL journal
implements too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

import crc32c

from storage.files import fsync_dir, in_sync_thread, write_at
from storage.interface import JournalStats, PartitionLog
from storage.local.flush import run_tickets
from storage.record_batch import CorruptBatchError, parse_header

if TYPE_CHECKING:
    from storage.local.log import PartitionLog as LocalLog

logger = logging.getLogger(__name__)

_HEAD = struct.Struct(">iI")
_H = struct.Struct(">h")
_CARRIED = struct.Struct(">qq")  # a carried record's offset and timestamp
SUFFIX = ".jnl"
DEFAULT_MAX_BYTES = 64 << 20


class Journal:
    # Fsynced segments are durable too: the journal only has to cover what they do not.
    remote = False

    def __init__(self, directory: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self._fd = -1
        self._seq = 0
        self.size = 0
        self.synced_size = 0  # bytes of the current file known to be durable
        # Logs with batches written since the last sync, and the log end each reached.
        self._unsynced: dict[PartitionLog, int] = {}
        # What the sync in flight covers (logs, file size), and a counter of discards so
        # a sync that raced one does not vouch for records it no longer covers.
        self._syncing: tuple[dict[PartitionLog, int], int] | None = None
        self._discards = 0
        self._cut_pending = False  # a failed write's cut-back failed too; retry first
        self.pinned: str | None = None  # why old files must be kept until the next start
        # Each log's record prefix (``int16 name length | name``), built once.
        self._names: dict[PartitionLog, bytes] = {}
        self._carried_names: dict[PartitionLog, bytes] = {}  # the same for carried records
        self.stats = JournalStats()

    # ------------------------------------------------------------ files

    def files(self) -> list[Path]:
        return sorted(p for p in self.dir.iterdir() if p.name.endswith(SUFFIX))

    def _open_next(self) -> None:
        existing = self.files()
        self._seq = max([int(p.name[: -len(SUFFIX)]) for p in existing] + [self._seq]) + 1
        path = self.dir / f"{self._seq:020d}{SUFFIX}"
        self._fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        self.size = self.synced_size = 0
        fsync_dir(self.dir)  # the new file must exist after a crash

    # ------------------------------------------------------------ writing

    def record(self, log: PartitionLog, batch: bytes) -> None:
        """Append a stored batch of ``log``; durable after the next ``sync``.

        On OSError the file is cut back to its previous size (or, if even that fails, the
        next record retries the cut before writing) and the error is raised.
        """
        prefix = self._names.get(log)
        if prefix is None:
            name = log.dir.name.encode()
            prefix = self._names[log] = _H.pack(len(name)) + name
        self._write(prefix, batch)
        self._unsynced[log] = log.log_end_offset

    def carry(self, log: PartitionLog, offset: int, timestamp_ms: int, value: bytes) -> bool:
        """Journal ``value`` as the record at ``offset`` of ``log`` (its log end or past
        it), not stored in the log: durable after the next ``sync``, which advances the
        log's ``journal_durable_end`` past it. Its owner appends it to the log before
        the journal file holding it can be deleted (``PartitionLog.carried``); until then
        replay restores it. Same failure contract as ``record``."""
        prefix = self._carried_names.get(log)
        if prefix is None:
            name = log.dir.name.encode()
            prefix = self._carried_names[log] = _H.pack(-1 - len(name)) + name
        self._write(prefix + _CARRIED.pack(offset, timestamp_ms), value)
        self._unsynced[log] = offset + 1
        return True

    def _write(self, prefix: bytes, body: bytes) -> None:
        if self._fd < 0:
            self._open_next()
        if self._cut_pending:
            os.ftruncate(self._fd, self.size)
            self._cut_pending = False
        # The CRC runs on over the prefix into the body: no copy of the two joined.
        crc = crc32c.crc32c(body, crc32c.crc32c(prefix))
        length = len(prefix) + len(body)
        try:
            write_at(self._fd, b"".join((_HEAD.pack(length + 4, crc), prefix, body)), self.size)
        except OSError:
            self._cut_to(self.size)
            raise
        self.size += 8 + length

    def _cut_to(self, size: int) -> None:
        self.size = size
        try:
            os.ftruncate(self._fd, size)
        except OSError as e:
            self._cut_pending = True
            logger.error(
                "journal: cannot cut back to %d bytes (%r); retrying before writing", size, e
            )

    def prepare_sync(self) -> tuple[int, dict[PartitionLog, int]] | None:
        """On the loop thread: what the next fsync covers (a dup'd fd and log ends)."""
        if not self._unsynced or self._fd < 0:
            return None
        # dup first: if it fails (EMFILE) the writes stay unsynced for the next round.
        fd = os.dup(self._fd)
        covered, self._unsynced = self._unsynced, {}
        self._syncing = (covered, self.size)
        return fd, covered

    @staticmethod
    def run_sync(fd: int) -> None:
        """In a worker thread: make everything written before ``prepare_sync`` durable."""
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def complete_sync(self, covered: dict[PartitionLog, int]) -> None:
        syncing, self._syncing = self._syncing, None
        if syncing is None or syncing[0] is not covered:
            return  # discarded while in flight: those records are gone
        self.synced_size = max(self.synced_size, syncing[1])
        for log, end in covered.items():
            log.journal_durable_end = max(log.journal_durable_end, end)

    def discard_unsynced(self) -> list[PartitionLog]:
        """Drop every record not known durable; returns the logs that had some.

        After a failed sync (or a log cut back for another reason) those records may or
        may not reach the disk; left in the file, a later replay could restore batches
        whose offsets were since reused. The caller cuts each returned log back to its
        durable end.
        """
        logs = dict.fromkeys(self._unsynced)
        if self._syncing is not None:
            logs.update(dict.fromkeys(self._syncing[0]))
            self._syncing = None
        self._unsynced = {}
        if self._fd >= 0 and self.size > self.synced_size:
            self._cut_to(self.synced_size)
        self._discards += 1
        return list(logs)

    async def sync(self, errors: dict[PartitionLog, BaseException]) -> None:
        """One fdatasync (on the sync thread, ``files.in_sync_thread``) for everything
        recorded so far.

        On failure every log with records not known durable is cut back to its durable
        end, with the error in ``errors``.
        """
        prepared = self.prepare_sync()
        if prepared is None:
            return
        fd, covered = prepared
        start = time.perf_counter()
        try:
            await in_sync_thread(self.run_sync, fd)
        except OSError as exc:
            self._failed(exc, errors)
            return
        self.complete_sync(covered)
        self.stats.rows += len(covered)
        self.stats.note_round((time.perf_counter() - start) * 1000.0)

    def _failed(self, exc: OSError, errors: dict[PartitionLog, BaseException]) -> None:
        logger.error("fsync of the journal failed: %r", exc)
        self.stats.errors += 1
        for log in self.discard_unsynced():
            errors[log] = exc
            log.discard_unflushed()

    def trim(self, log: PartitionLog, before_offset: int) -> None:
        """Nothing to do: the log's own checkpointed start covers retention."""

    def compacted(self, log: PartitionLog, upto: int) -> None:
        """Nothing to do: the cleaned segments are the durable copy."""

    def pin(self, reason: str) -> None:
        """Keep every journal file (no checkpoint drops them) until the next start."""
        if self.pinned is None:
            logger.error("journal: keeping every journal file until restart: %s", reason)
        self.pinned = reason

    # ------------------------------------------------------------ checkpoints

    def needs_rotation(self) -> bool:
        return self.size >= self.max_bytes

    def needs_checkpoint(self) -> bool:
        return self.needs_rotation()

    async def checkpoint(
        self, logs: list[PartitionLog], errors: dict[PartitionLog, BaseException]
    ) -> None:
        """New appends go to a new file; once every journaled log's segments (``logs``)
        are fsynced, the older journal files hold nothing needed and are deleted."""
        try:
            old = self.rotate()
        except OSError as exc:
            self._failed(exc, errors)
            return
        # The logs it journals are this engine's own (the LogManager attaches them).
        flushed = (cast("LocalLog", log).prepare_flush() for log in logs)
        tickets = [t for t in flushed if t is not None]
        results = await asyncio.to_thread(run_tickets, tickets)
        if any(r is not None for r in results):
            for t, r in zip(tickets, results, strict=True):
                if r is not None:
                    t.log.abort_flush(t)
            # The journal holds these batches durably; after a failed fsync the segments'
            # page cache may not match the disk, so the journal files stay until the next
            # start replays them (a retried fsync may lie).
            self.pin("a segment fsync failed at a journal checkpoint")
            return
        for t in tickets:
            t.log.complete_flush(t)
        await asyncio.to_thread(self.drop, old)

    def rotate(self) -> list[Path]:
        """Start a new file; return the older ones, deletable once every log is fsynced.

        The current file is synced first: records written since the last sync belong
        to logs whose next sync will be of the new file. Raises OSError if that fails
        (nothing changed; the caller treats it as a failed sync).
        """
        old = self.files()
        if self._fd >= 0:
            os.fdatasync(self._fd)
            self.synced_size = self.size
            os.close(self._fd)
            self._fd = -1
        self._open_next()
        return [p for p in old if p.name != f"{self._seq:020d}{SUFFIX}"]

    def drop(self, paths: list[Path]) -> None:
        if self.pinned is not None:
            logger.warning("journal: keeping %d file(s): %s", len(paths), self.pinned)
            return
        for p in paths:
            p.unlink(missing_ok=True)
        fsync_dir(self.dir)

    # ------------------------------------------------------------ recovery

    def replay(self, lookup: Callable[[str], PartitionLog | None]) -> int:
        """Re-append journaled batches and carried values missing from their logs;
        returns how many."""
        paths = self.files()
        touched: dict[PartitionLog, None] = {}
        restored = 0
        for path in paths:
            buf = path.read_bytes()
            pos = 0
            while pos + 8 <= len(buf):
                length, crc = _HEAD.unpack_from(buf, pos)
                end = pos + 4 + length
                if length < 6 or end > len(buf) or crc32c.crc32c(buf[pos + 8 : end]) != crc:
                    logger.warning(
                        "journal %s: torn or corrupt record at byte %d; ignoring the %d bytes after it",
                        path.name,
                        pos,
                        len(buf) - pos,
                    )
                    break
                n = _H.unpack_from(buf, pos + 8)[0]
                carried = n < 0
                if carried:
                    n = -1 - n
                name = buf[pos + 10 : pos + 10 + n].decode()
                body = buf[pos + 10 + n : end]
                pos = end
                log = lookup(name)
                if log is None:
                    continue  # the partition was deleted since
                if carried:
                    base, ts = _CARRIED.unpack_from(body)
                else:
                    try:
                        base = parse_header(body).base_offset
                    except CorruptBatchError:
                        continue
                if base == log.log_end_offset:
                    if carried:
                        log.append_records([(None, body[_CARRIED.size :])], timestamp_ms=ts)
                    else:
                        log.append(body)
                    touched[log] = None
                    restored += 1
                elif base > log.log_end_offset:
                    logger.error(
                        "journal %s: %s is missing offsets %d..%d; cannot restore past the gap",
                        path.name,
                        name,
                        log.log_end_offset,
                        base - 1,
                    )
        for log in touched:
            log.flush()
        if restored:
            logger.warning(
                "journal: restored %d batches or carried values lost from the segment files",
                restored,
            )
        if paths:
            self.drop(paths)
        return restored

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
