"""What the workers of a kgc.workers node share: the data directory's state files.

How this works: the embedded stores keep their state in one file each, rewritten whole and
crash-safely on every change (temporary file, fsync, rename, directory fsync):
``topics.json`` (the topic catalog), ``acls.json``, ``scram-credentials.json``,
``group_configs.json`` and ``producer-id-block``. With several worker processes each file
has several writers, so every change goes through ``SharedFiles.changing``:

1. take an exclusive ``flock`` on ``<data_dir>/.shared.lock`` (one lock for every file;
   changes are rare and short, and one lock cannot deadlock);
2. reload the file if another worker changed it since this one last read it, so the change
   applies to the current state (two workers creating the same topic: the second finds it);
3. change and write it with the store's own code;
4. set the file's mtime strictly past the one it had (``os.utime``), release the lock.

Every worker polls the files' (inode, size, mtime) every ``POLL_MS`` and reloads a file
whose triple moved, through the store's normal installation path, so the change reaches
the same callbacks as a local one (the catalog's ``on_change``/``on_configs``, the
authorizer, the group core). A change made through one worker is therefore seen by the
others within ~0.1 s, like the PostgreSQL catalog's version poll in cluster mode; and
usually within a millisecond, because the changing worker tells its supervisor, which has
the others poll at once (a hint, like cluster mode's NOTIFY: the poll is the truth). Step 4
makes every change visible to the poll even when two changes of the same size land within
the file system's timestamp granularity on a reused inode. A file that cannot be read on a
reload (edited by hand) keeps the last state and logs one ERROR per change.

Nothing here ever holds the lock across a suspension of the event loop: the stores' change
methods are synchronous (or coroutines that never suspend), so a worker never blocks its loop
on a lock it holds itself. Within a process the lock is re-entrant.

Producer ids: each worker takes blocks of ``PRODUCER_ID_BLOCK`` ids from the one counter in
``producer-id-block`` (the file a single process uses: the end of the last block handed
out), under the lock, fsynced before any id of the block is used, so two workers never hand
out the same id and a later single-process run continues past every block.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from coordinator.catalog import TopicCatalog, TopicExistsError, TopicInfo
from coordinator.config import Settings
from coordinator.dataplane.producers import ClusterProducerIds
from coordinator.group_configs import LocalGroupConfigs
from coordinator.security.acl import AclBinding, AclBindingFilter
from coordinator.security.acl_store import ACL_FILE, LocalAclStore
from coordinator.security.credentials import LocalCredentialStore, ScramChange
from storage.files import read_checkpoint, write_checkpoint

__all__ = [
    "POLL_MS",
    "SHARED_LOCK",
    "SharedFiles",
    "WorkerAclStore",
    "WorkerCatalog",
    "WorkerCredentialStore",
    "WorkerGroupConfigs",
    "shared_producer_ids",
]

log = logging.getLogger("kgc.workers")

SHARED_LOCK = ".shared.lock"
POLL_MS = 100

Key = tuple[int, int, int] | None  # (inode, size, mtime ns); None: no file


def stat_key(path: Path) -> Key:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


@dataclass(slots=True)
class _Watch:
    reload: Callable[[], None]
    key: Key


class SharedFiles:
    """The lock, the change protocol and the poll over the shared files (module doc)."""

    def __init__(self, data_dir: Path, poll_ms: int = POLL_MS) -> None:
        self.lock_path = Path(data_dir) / SHARED_LOCK
        self.poll_s = poll_ms / 1000
        self.watched: dict[Path, _Watch] = {}
        self._fd = -1
        self._depth = 0
        self._task: asyncio.Task[None] | None = None
        # Told after this process changed a file: the worker tells its supervisor, which
        # has the other workers poll at once (the poll stays the truth; this only spares
        # them the wait for it).
        self.on_changed: Callable[[], None] | None = None

    def watch(self, path: Path, reload: Callable[[], None], key: Key) -> None:
        """Reload ``path``'s store with ``reload`` whenever another worker changes it;
        ``key``: the file's ``stat_key`` taken before the store read it (a change landing
        in between is then reloaded by the first poll)."""
        self.watched[path] = _Watch(reload, key)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The exclusive lock over every shared file (re-entrant within this process)."""
        if self._depth == 0:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # the holder only writes a small file
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                os.close(self._fd)  # closing the descriptor drops the flock
                self._fd = -1

    @contextlib.contextmanager
    def changing(self, path: Path) -> Iterator[None]:
        """Change ``path`` (a watched file) as the module doc says: under the lock, from
        its current content, the change stamped so that every other worker sees it."""
        with self.locked():
            watch = self.watched[path]
            key = stat_key(path)
            if key != watch.key:
                watch.key = key
                watch.reload()
            try:
                yield
            finally:
                after = stat_key(path)
                if after != key and after is not None:
                    after = self._stamp(path, key)
                watch.key = after
        if watch.key != key and self.on_changed is not None:
            self.on_changed()

    @staticmethod
    def _stamp(path: Path, before: Key) -> Key:
        floor = before[2] + 1 if before is not None else 0
        st = os.stat(path)
        ns = max(time.time_ns(), st.st_mtime_ns, floor)
        os.utime(path, ns=(ns, ns))
        return stat_key(path)

    def poll(self) -> None:
        """Reload every watched file that another worker changed since it was read."""
        for path, watch in self.watched.items():
            key = stat_key(path)
            if key == watch.key:
                continue
            watch.key = key  # stat first: a change after it is seen by the next poll
            try:
                watch.reload()
            except Exception as exc:
                log.error("reloading %s changed by another worker failed: %s", path, exc)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="kgc-shared-poll")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            self.poll()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class WorkerCatalog(TopicCatalog):
    """The topic catalog in ``topics.json`` shared by the workers (module doc).

    Changes run under ``SharedFiles.changing``: a topic another worker created meanwhile is
    ``TopicExistsError``, one it deleted or grew meanwhile is an ``OSError`` (answered
    KAFKA_STORAGE_ERROR; the client retries against the current state).
    """

    def __init__(self, path: Path, files: SharedFiles) -> None:
        key = stat_key(path)
        super().__init__(path)
        self.files = files
        files.watch(path, self.reload, key)

    def reload(self) -> None:
        """Take the file's catalog whole; callbacks as ``install`` tells them."""
        assert self.path is not None
        fresh = TopicCatalog(self.path)
        self._kept = fresh._kept
        self.install(list(fresh.topics.values()))

    def _existing(self, name: str) -> TopicInfo:
        info = self.topics.get(name)
        if info is None:
            raise OSError(f"topic {name!r} was deleted through another worker meanwhile")
        return info

    def create(
        self, name: str, num_partitions: int, configs: dict[str, str] | None = None
    ) -> TopicInfo:
        assert self.path is not None
        with self.files.changing(self.path):
            if name in self.topics:
                raise TopicExistsError(name)
            return super().create(name, num_partitions, configs)

    def create_partitions(self, name: str, num_partitions: int) -> TopicInfo:
        assert self.path is not None
        with self.files.changing(self.path):
            info = self._existing(name)
            if info.num_partitions >= num_partitions:
                raise OSError(
                    f"topic {name!r} has {info.num_partitions} partitions now (changed through "
                    "another worker meanwhile)"
                )
            return super().create_partitions(name, num_partitions)

    def alter_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        assert self.path is not None
        with self.files.changing(self.path):
            self._existing(name)
            return super().alter_configs(name, configs)

    def delete(self, name: str) -> TopicInfo | None:
        assert self.path is not None
        with self.files.changing(self.path):
            return super().delete(name)


class WorkerAclStore(LocalAclStore):
    """``acls.json`` shared by the workers: the authorizer of each follows every change."""

    def __init__(self, data_dir: Path, files: SharedFiles) -> None:
        key = stat_key(data_dir / ACL_FILE)
        super().__init__(data_dir)
        self.files = files
        files.watch(self.path, self.reload, key)

    def reload(self) -> None:
        self._install(self._load())

    async def create(self, bindings: list[AclBinding]) -> None:
        # LocalAclStore.create never suspends (its asyncio lock is free: no change of this
        # process suspends while holding it), so the file lock spans no other task.
        with self.files.changing(self.path):
            await super().create(bindings)

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        with self.files.changing(self.path):
            return await super().delete(filters)


class WorkerCredentialStore(LocalCredentialStore):
    """``scram-credentials.json`` shared by the workers: SASL/SCRAM on every worker sees a
    user added through any of them."""

    def __init__(self, path: Path, files: SharedFiles) -> None:
        key = stat_key(path)
        super().__init__(path)
        self.files = files
        files.watch(path, self.reload, key)

    def reload(self) -> None:
        self._creds = self._load() if self.path.exists() else {}

    def apply(self, changes: list[ScramChange]) -> set[int]:
        with self.files.changing(self.path):
            return super().apply(changes)


class WorkerGroupConfigs(LocalGroupConfigs):
    """``group_configs.json`` shared by the workers: each group's coordinator applies the
    configs set through any worker."""

    def __init__(self, settings: Settings, path: Path, files: SharedFiles) -> None:
        key = stat_key(path)
        super().__init__(settings, path)
        self.files = files
        files.watch(path, self.reload, key)

    def reload(self) -> None:
        self._install(LocalGroupConfigs(self.settings, self.path).configs)

    async def set(self, group: str, configs: dict[str, str]) -> None:
        # LocalGroupConfigs.set never suspends: the file lock spans no other task.
        with self.files.changing(self.path):
            await super().set(group, configs)


def shared_producer_ids(files: SharedFiles, path: Path) -> ClusterProducerIds:
    """Producer ids in blocks from the counter in ``path`` (module doc)."""

    async def take_block(block: int, floor: int) -> int:
        with files.locked():
            start = max(read_checkpoint(path, 0), floor + 1)
            write_checkpoint(path, start + block, sync=True)
        return start

    return ClusterProducerIds(take_block)
