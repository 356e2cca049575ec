"""LogManager: every partition log under one data directory.

How this works
--------------
Partition ``<topic>-<n>`` lives in ``<data_dir>/<topic>-<n>/`` (so the offsets
log is ``__consumer_offsets-<n>/``), Kafka's layout.  ``open_all`` recovers
every such directory at start-up; ``close_all`` closes them cleanly so the
next start trusts the files.  Deleting a topic first renames its partition
directories to ``<name>.<id>-delete`` (Kafka's convention; one atomic rename
per partition, then a directory fsync) and only then removes them, so a crash
mid-delete never resurrects a half-deleted partition: leftovers with that
suffix are removed by the next ``open_all``.

Logs are registered with the optional ``Flusher`` so ``stop()`` can fsync them
and interval-policy flushing sees them.

One process per data directory: the constructor takes an exclusive ``flock`` on
``<data_dir>/.lock`` (Kafka's file) before anything in the directory is read, recovered or
deleted, writes the holder's pid and host into it, and keeps the descriptor open for the
life of the process (the kernel releases it when the process dies, however it dies). A
second process is refused with ``DataDirLockedError`` naming the holder. Within one
process the lock is shared by every ``LogManager`` on the directory (tests reopen a
directory after simulating a crash), and ``close_all`` releases it.

With ``kgc.workers`` > 1 the rule is one writer per partition (``coordinator/workers``): the
supervisor holds ``.lock`` for the life of the node (its workers inherit the descriptor, so
the directory stays locked while any of them lives), and worker i's ``LogManager(worker=i)``
takes ``.lock.w<i>`` and writes its own journal, ``journal.w<i>``. A worker opens and creates
only the partitions it owns (its caller's ``config_for`` leaves the others unopened), and
which worker owns a partition is fixed for the supervisor's life. A ``LogManager`` of the
whole directory (``worker=None``, one process) also replays the ``journal.w*`` an earlier
multi-worker run left after a crash.

Each topic partition directory also holds Kafka's ``partition.metadata`` (``version: 0`` and
the topic id in Kafka's base64 form), written atomically when the partition is created, so
the data says which topic it belongs to whatever the catalog says. Deleting a topic renames
its directories to ``<dir>.<topic id hex>-delete``: a crash after the renames leaves proof of
which topic id was being deleted (``pending_deletions``).
"""

from __future__ import annotations

import base64
import errno
import fcntl
import logging
import os
import re
import shutil
import socket
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from storage.files import DataDirError, fsync_dir, replace_file
from storage.interface import kafka_uuid
from storage.local.durability import Flusher
from storage.local.journal import Journal
from storage.local.log import Clock, LogConfig, PartitionLog, wall_clock_ms

__all__ = [
    "DataDirError",
    "DataDirLock",
    "DataDirLockedError",
    "LogManager",
    "PartitionMetadataError",
    "TopicIdMismatchError",
    "kafka_uuid",
    "parse_partition_dir",
    "read_topic_id",
    "write_topic_id",
]

logger = logging.getLogger(__name__)

_DELETE_SUFFIX = "-delete"
LOCK_FILE = ".lock"
JOURNAL_DIR = "journal"
PARTITION_METADATA_FILE = "partition.metadata"
PARTITION_METADATA_VERSION = 0
_FIELD_SEP = re.compile(r":\s+")


class DataDirLockedError(DataDirError):
    """Another live process holds the data directory's lock."""


class TopicIdMismatchError(DataDirError):
    """A partition directory belongs to another topic id than the catalog's."""


class PartitionMetadataError(ValueError):
    """A ``partition.metadata`` file that cannot be read."""


def _parse_kafka_uuid(text: str) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError as e:
        raise PartitionMetadataError(f"topic id {text!r} is not a base64 Uuid") from e
    if len(raw) != 16:
        raise PartitionMetadataError(f"topic id {text!r} is not 16 bytes")
    return raw


def _parse_deleted_dir(name: str) -> tuple[str, bytes] | None:
    """``"t-0.<32 hex>-delete"`` -> ("t", topic id); None for other names (older kgc's too)."""
    if not name.endswith(_DELETE_SUFFIX):
        return None
    stem, dot, tag = name[: -len(_DELETE_SUFFIX)].rpartition(".")
    parsed = parse_partition_dir(stem) if dot else None
    if parsed is None or len(tag) != 32:
        return None
    try:
        return parsed[0], bytes.fromhex(tag)
    except ValueError:
        return None


class DataDirLock:
    """The exclusive ``flock`` on ``<data_dir>/.lock``, shared within this process."""

    _held: ClassVar[dict[Path, DataDirLock]] = {}

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        self._refs = 1

    @classmethod
    def acquire(cls, data_dir: Path, name: str = LOCK_FILE) -> DataDirLock:
        """``name``: the lock file (``.lock.w<i>`` for worker i under kgc.workers)."""
        key = data_dir.resolve()
        path = key / name
        held = cls._held.get(path)
        if held is not None:
            held._refs += 1
            return held
        # Never unlinked: removing it would let a third process lock a new inode while
        # the holder still locks the old one.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 256, 0).decode(errors="replace").strip()
            os.close(fd)
            pid, _, host = holder.partition(" ")
            who = f"process {pid}" if pid.isdigit() else "another process"
            if host and host != socket.gethostname():
                who += f" on host {host}"
            raise DataDirLockedError(
                f"data directory {key} is in use by {who} (lock file {path}); "
                "is another kgc running?"
            ) from None
        except OSError:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            text = f"{os.getpid()} {socket.gethostname()}\n".encode()
            if os.pwrite(fd, text, 0) != len(text):
                raise OSError(errno.EIO, "short write", str(path))
        except OSError:
            os.close(fd)
            raise
        lock = cls._held[path] = cls(path, fd)
        return lock

    def release(self) -> None:
        self._refs -= 1
        if self._refs == 0 and self._fd >= 0:
            self._held.pop(self.path, None)
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = -1


def read_topic_id(part_dir: Path) -> bytes | None:
    """The topic id in ``<part_dir>/partition.metadata``; None when there is no such file.

    Parsed as Kafka's ``PartitionMetadataReadBuffer`` does; raises ``PartitionMetadataError``.
    """
    path = part_dir / PARTITION_METADATA_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise PartitionMetadataError(f"{path}: {e}") from e
    lines = text.split("\n")
    # Kafka splits each line on ":\\s+" and wants exactly two fields.
    version_line = _FIELD_SEP.split(lines[0])
    if len(version_line) != 2 or not version_line[1].isdigit():
        raise PartitionMetadataError(f"{path}: malformed line {lines[0]!r}")
    id_line = _FIELD_SEP.split(lines[1]) if len(lines) > 1 else []
    if len(id_line) != 2:
        raise PartitionMetadataError(f"{path}: malformed line {lines[1:2]!r}")
    topic_id = _parse_kafka_uuid(id_line[1])
    if topic_id == bytes(16):
        raise PartitionMetadataError(f"{path}: invalid topic id {id_line[1]!r}")
    return topic_id


def write_topic_id(part_dir: Path, topic_id: bytes) -> None:
    """Write ``partition.metadata`` atomically: temporary file, fsync, rename, directory fsync."""
    data = f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {kafka_uuid(topic_id)}\n".encode()
    replace_file(part_dir / PARTITION_METADATA_FILE, data)


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``"__consumer_offsets-7"`` -> ("__consumer_offsets", 7); None if not a partition."""
    if name.endswith(_DELETE_SUFFIX) or name.startswith("."):
        return None
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


class LogManager:
    def __init__(
        self,
        data_dir: Path,
        clock: Clock = wall_clock_ms,
        flusher: Flusher | None = None,
        *,
        worker: int | None = None,
    ) -> None:
        """``worker``: worker i of a kgc.workers node (its own lock and journal, see above)."""
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.worker = worker
        # First, before anything in the directory is read, recovered or deleted.
        self._lock: DataDirLock | None = DataDirLock.acquire(
            self.data_dir, LOCK_FILE if worker is None else f"{LOCK_FILE}.w{worker}"
        )
        self._clock = clock
        self.flusher = flusher
        # Shared write-ahead journal for logs configured ``journaled`` (see journal.py);
        # its directory name has no "-<n>" suffix, so it is never taken for a partition.
        self.journal = Journal(
            self.data_dir / (JOURNAL_DIR if worker is None else f"{JOURNAL_DIR}.w{worker}")
        )
        if flusher is not None and flusher.journal is None:  # not given a remote one
            flusher.journal = self.journal
        self._logs: dict[tuple[str, int], PartitionLog] = {}

    def _dir_for(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def _register(
        self, key: tuple[str, int], log: PartitionLog, *, attach: bool = True
    ) -> PartitionLog:
        self._logs[key] = log
        if attach and log.config.journaled and log.config.flush_policy == "batch":
            log.journal = self.journal
        if self.flusher is not None:
            self.flusher.register(log)
        return log

    def open_all(
        self, config_for: Callable[[str, int], LogConfig | None] | None = None
    ) -> list[PartitionLog]:
        """Recover every partition directory; returns the opened logs.

        A partition for which ``config_for`` answers None is left unopened and untouched
        (an offline topic).
        """
        opened = []
        for path in sorted(self.data_dir.iterdir()):
            if not path.is_dir():
                continue
            if path.name.endswith(_DELETE_SUFFIX):
                logger.info("removing partially deleted partition %s", path.name)
                shutil.rmtree(path, ignore_errors=True)
                continue
            parsed = parse_partition_dir(path.name)
            if parsed is None or parsed in self._logs:
                continue
            cfg = config_for(*parsed) if config_for is not None else LogConfig()
            if cfg is None:
                continue
            opened.append(
                self._register(parsed, PartitionLog(path, cfg, self._clock), attach=False)
            )

        # Batches acknowledged through the journal but lost from the segments come back
        # before anything else is appended; only then do the logs journal new appends.
        def lookup(name: str) -> PartitionLog | None:
            return self._logs.get(parse_partition_dir(name) or ("", -1))

        self.journal.replay(lookup)
        if self.worker is None:
            # The workers' journals of an earlier kgc.workers run that stopped uncleanly:
            # this process holds ``.lock``, so no worker writes them any more.
            for path in sorted(self.data_dir.glob(f"{JOURNAL_DIR}.w*")):
                if path.is_dir():
                    Journal(path).replay(lookup)
        for log in opened:
            if log.config.journaled and log.config.flush_policy == "batch":
                log.journal = self.journal
        return opened

    def get_or_create(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        topic_id: bytes | None = None,
    ) -> PartitionLog:
        """The partition's log, created if needed; ``topic_id`` goes to partition.metadata."""
        key = (topic, partition)
        log = self._logs.get(key)
        if log is not None:
            if config is not None:
                log.config = config
            return log
        path = self._dir_for(topic, partition)
        existed = path.exists()
        if existed and topic_id is not None:
            on_disk = read_topic_id(path)
            if on_disk is not None and on_disk != topic_id:
                raise TopicIdMismatchError(
                    f"partition directory {path} belongs to topic id {kafka_uuid(on_disk)}, "
                    f"not {kafka_uuid(topic_id)}"
                )
        log = PartitionLog(path, config or LogConfig(), self._clock)
        if topic_id is not None and not (path / PARTITION_METADATA_FILE).exists():
            write_topic_id(path, topic_id)
        if not existed:
            fsync_dir(self.data_dir)
        return self._register(key, log)

    def fresh(
        self, topic: str, partition: int, config: LogConfig, topic_id: bytes | None = None
    ) -> PartitionLog:
        """An empty log for the partition, whatever was there before (cluster mode).

        In cluster mode the local directory is only a cache of the partition's log in the
        database, never trusted across a change of owner: a node that takes a partition
        over starts it empty and fills it from the database (``storage.postgres``).
        """
        self.forget(topic, partition)
        path = self._dir_for(topic, partition)
        shutil.rmtree(path, ignore_errors=True)
        return self.get_or_create(topic, partition, config, topic_id)

    def drop_cache(self) -> int:
        """Remove every partition directory (cluster mode start-up: the cache is stale)."""
        n = 0
        for path in list(self.data_dir.iterdir()):
            if path.is_dir() and parse_partition_dir(path.name.split(".")[0]) is not None:
                shutil.rmtree(path, ignore_errors=True)
                n += 1
        return n

    def forget(self, topic: str, partition: int) -> PartitionLog | None:
        """Close a partition's log and drop its cache directory (cluster mode, on release)."""
        log = self._logs.pop((topic, partition), None)
        if log is not None:
            if self.flusher is not None:
                self.flusher.unregister(log)
            log.close_without_marker()
            shutil.rmtree(log.dir, ignore_errors=True)
        return log

    def remove_partition(self, topic: str, partition: int) -> bool:
        """Close one partition's log and remove its directory (a partition no process writes
        any more, emptied by its retention); whether there was one.

        As a topic's deletion: the directory is renamed ``<dir>.expired-delete`` (one atomic
        rename, then a directory fsync) before it is removed, so a crash in between leaves a
        name the next ``open_all`` removes, never a half-removed partition it would open.
        The tag is not a topic id: ``pending_deletions`` does not take it for a topic's
        deletion.
        """
        log = self._logs.pop((topic, partition), None)
        if log is not None:
            if self.flusher is not None:
                self.flusher.unregister(log)
            log.close_without_marker()  # nothing is kept: no checkpoint to write
        path = self._dir_for(topic, partition)
        if not path.exists():
            return log is not None
        target = path.with_name(f"{path.name}.expired{_DELETE_SUFFIX}")
        if target.exists():  # an earlier removal, interrupted
            shutil.rmtree(target, ignore_errors=True)
        path.rename(target)
        fsync_dir(self.data_dir)
        shutil.rmtree(target, ignore_errors=True)
        fsync_dir(self.data_dir)
        return True

    def topic_dirs(self) -> dict[str, dict[int, Path]]:
        """Every partition directory on disk, by topic and partition (open or not)."""
        out: dict[str, dict[int, Path]] = {}
        for path in self.data_dir.iterdir():
            parsed = parse_partition_dir(path.name) if path.is_dir() else None
            if parsed is not None:
                out.setdefault(parsed[0], {})[parsed[1]] = path
        return out

    def pending_deletions(self) -> set[tuple[str, bytes]]:
        """(topic, topic id) of each deletion a crash interrupted after its renames."""
        return {
            parsed
            for path in self.data_dir.iterdir()
            if (parsed := _parse_deleted_dir(path.name)) is not None
        }

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def partitions(self) -> list[tuple[str, int]]:
        return sorted(self._logs)

    def logs(self) -> list[PartitionLog]:
        return [self._logs[k] for k in sorted(self._logs)]

    def delete_topic(self, topic: str, topic_id: bytes | None = None) -> int:
        """Remove every partition of ``topic`` (open or not); returns how many.

        With ``topic_id`` the renamed directories carry it, so a crash before the catalog
        forgets the topic leaves proof that this topic's deletion had begun.
        """
        names = [
            p
            for p in self.data_dir.iterdir()
            if p.is_dir() and (parsed := parse_partition_dir(p.name)) and parsed[0] == topic
        ]
        for key in [k for k in self._logs if k[0] == topic]:
            log = self._logs.pop(key)
            if self.flusher is not None:
                self.flusher.unregister(log)
            log.close_without_marker()
        doomed = []
        tag = topic_id.hex() if topic_id is not None else uuid.uuid4().hex
        for p in names:
            target = p.with_name(f"{p.name}.{tag}{_DELETE_SUFFIX}")
            if target.exists():  # the same deletion, interrupted before: already doomed
                shutil.rmtree(target, ignore_errors=True)
            p.rename(target)
            doomed.append(target)
        if doomed:
            fsync_dir(self.data_dir)
        for p in doomed:
            shutil.rmtree(p, ignore_errors=True)
        return len(names)

    def close_all(self) -> None:
        """Clean shutdown: flush, checkpoint and mark every log."""
        for key, log in list(self._logs.items()):
            try:
                log.close()
            except OSError:
                logger.exception("closing log %s-%s failed", *key)
                raise
        self._logs.clear()
        # Every log is fsynced and marked clean: the journal holds nothing needed.
        self.journal.close()
        self.journal.drop(self.journal.files())
        self.release_lock()

    def release_lock(self) -> None:
        """Let another process use the directory (also done by the kernel at exit)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None
