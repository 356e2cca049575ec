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
batch, offsets already assigned.

When the current file passes ``max_bytes`` the journal rotates: appends go to a new file,
every journaled log is fsynced, then the older files are deleted (``checkpoint``). On
start-up, after the logs have recovered their segments, ``replay`` re-appends each batch
whose offsets are at or past its log's end (lost from the page cache by a power cut), stops
a file at its first torn record, fsyncs the logs and removes the replayed files. A crash at
any point leaves every acknowledged batch in a segment or in a journal file.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import crc32c

from storage.durability import fsync_dir
from storage.record_batch import CorruptBatchError, parse_header

if TYPE_CHECKING:
    from storage.log import PartitionLog

logger = logging.getLogger(__name__)

_HEAD = struct.Struct(">iI")
_H = struct.Struct(">h")
SUFFIX = ".jnl"
DEFAULT_MAX_BYTES = 64 << 20


class Journal:
    def __init__(self, directory: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self._fd = -1
        self._seq = 0
        self.size = 0
        # Logs with batches written since the last sync, and the log end each reached.
        self._unsynced: dict[PartitionLog, int] = {}

    # ------------------------------------------------------------ files

    def files(self) -> list[Path]:
        return sorted(p for p in self.dir.iterdir() if p.name.endswith(SUFFIX))

    def _open_next(self) -> None:
        existing = self.files()
        self._seq = max([int(p.name[: -len(SUFFIX)]) for p in existing] + [self._seq]) + 1
        path = self.dir / f"{self._seq:020d}{SUFFIX}"
        self._fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
        self.size = 0
        fsync_dir(self.dir)  # the new file must exist after a crash

    # ------------------------------------------------------------ writing

    def record(self, log: PartitionLog, batch: bytes) -> None:
        """Append a stored batch of ``log``; durable after the next ``sync``."""
        if self._fd < 0:
            self._open_next()
        name = log.dir.name.encode()
        rest = _H.pack(len(name)) + name + batch
        os.write(self._fd, _HEAD.pack(len(rest) + 4, crc32c.crc32c(rest)) + rest)
        self.size += 8 + len(rest)
        self._unsynced[log] = log.log_end_offset

    def prepare_sync(self) -> tuple[int, dict[PartitionLog, int]] | None:
        """On the loop thread: what the next fsync covers (a dup'd fd and log ends)."""
        if not self._unsynced or self._fd < 0:
            return None
        covered, self._unsynced = self._unsynced, {}
        return os.dup(self._fd), covered

    @staticmethod
    def run_sync(fd: int) -> None:
        """In a worker thread: make everything written before ``prepare_sync`` durable."""
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def complete_sync(covered: dict[PartitionLog, int]) -> None:
        for log, end in covered.items():
            log.journal_durable_end = max(log.journal_durable_end, end)

    def abort_sync(self, covered: dict[PartitionLog, int]) -> None:
        for log, end in covered.items():
            self._unsynced[log] = max(self._unsynced.get(log, 0), end)

    # ------------------------------------------------------------ checkpoints

    def needs_rotation(self) -> bool:
        return self.size >= self.max_bytes

    def rotate(self) -> list[Path]:
        """Start a new file; return the older ones, deletable once every log is fsynced."""
        old = self.files()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._open_next()
        return [p for p in old if p.name != f"{self._seq:020d}{SUFFIX}"]

    def drop(self, paths: list[Path]) -> None:
        for p in paths:
            p.unlink(missing_ok=True)
        fsync_dir(self.dir)

    # ------------------------------------------------------------ recovery

    def replay(self, lookup: Callable[[str], PartitionLog | None]) -> int:
        """Re-append journaled batches missing from their logs; returns how many."""
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
                name = buf[pos + 10 : pos + 10 + n].decode()
                batch = buf[pos + 10 + n : end]
                pos = end
                log = lookup(name)
                if log is None:
                    continue  # the partition was deleted since
                try:
                    base = parse_header(batch).base_offset
                except CorruptBatchError:
                    continue
                if base == log.log_end_offset:
                    log.append(batch)
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
            logger.warning("journal: restored %d batches lost from the segment files", restored)
        if paths:
            self.drop(paths)
        return restored

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
