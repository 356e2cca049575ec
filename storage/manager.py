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
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from storage.durability import Flusher, fsync_dir
from storage.journal import Journal
from storage.log import Clock, LogConfig, PartitionLog, wall_clock_ms

__all__ = ["LogManager", "parse_partition_dir"]

logger = logging.getLogger(__name__)

_DELETE_SUFFIX = "-delete"


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
        self, data_dir: Path, clock: Clock = wall_clock_ms, flusher: Flusher | None = None
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._clock = clock
        self.flusher = flusher
        # Shared write-ahead journal for logs configured ``journaled`` (see journal.py);
        # its directory name has no "-<n>" suffix, so it is never taken for a partition.
        self.journal = Journal(self.data_dir / "journal")
        if flusher is not None:
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
        self, config_for: Callable[[str, int], LogConfig] | None = None
    ) -> list[PartitionLog]:
        """Recover every partition directory; returns the opened logs."""
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
            opened.append(
                self._register(parsed, PartitionLog(path, cfg, self._clock), attach=False)
            )
        # Batches acknowledged through the journal but lost from the segments come back
        # before anything else is appended; only then do the logs journal new appends.
        self.journal.replay(lambda name: self._logs.get(parse_partition_dir(name) or ("", -1)))
        for log in opened:
            if log.config.journaled and log.config.flush_policy == "batch":
                log.journal = self.journal
        return opened

    def get_or_create(
        self, topic: str, partition: int, config: LogConfig | None = None
    ) -> PartitionLog:
        key = (topic, partition)
        log = self._logs.get(key)
        if log is not None:
            if config is not None:
                log.config = config
            return log
        path = self._dir_for(topic, partition)
        existed = path.exists()
        log = PartitionLog(path, config or LogConfig(), self._clock)
        if not existed:
            fsync_dir(self.data_dir)
        return self._register(key, log)

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def partitions(self) -> list[tuple[str, int]]:
        return sorted(self._logs)

    def logs(self) -> list[PartitionLog]:
        return [self._logs[k] for k in sorted(self._logs)]

    def delete_topic(self, topic: str) -> int:
        """Remove every partition of ``topic`` (open or not); returns how many."""
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
        for p in names:
            target = p.with_name(f"{p.name}.{uuid.uuid4().hex}{_DELETE_SUFFIX}")
            p.rename(target)
            doomed.append(target)
        if doomed:
            fsync_dir(self.data_dir)
        for p in doomed:
            shutil.rmtree(p, ignore_errors=True)
        return len(names)

    def flush_all(self) -> None:
        for log in self._logs.values():
            log.flush()

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
