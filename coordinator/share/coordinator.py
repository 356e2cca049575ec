"""The share coordinator's runtime: ``__share_group_state`` on a log, served as the persister.

How this works: the share state lives in the internal topic ``__share_group_state``
(``share.coordinator.state.topic.num.partitions`` partitions, 50 by default; a key's
partition is Kafka's ``abs(hash("<group>:<topicId>:<partition>")) % n``), one
``ShareStateShard`` per partition. At start every partition is replayed into its shard in
the background (every batch CRC-checked); an operation on a partition waits for its load.
An operation asks the shard, which checks, builds the one record and applies it; the record
is appended to the partition's log and the answer returned only once the flusher reports it
durable (Kafka answers a write once it is committed), so an acknowledgement the leader
reports as done survives a crash.

In cluster mode (``hosted`` False) a partition is served only while this node holds its
lease: ``acquire`` replays the materialised log into a fresh shard, ``release`` stops serving
it (operations still waiting on it, and later ones, answer NOT_COORDINATOR; ``holds`` tells
the API handlers and the router which partitions are here).

Failures stay inside one partition: a log that does not replay leaves its partition FAILED
(its keys answer COORDINATOR_NOT_AVAILABLE, which the leader maps as Kafka's does); a failed
append or fsync answers COORDINATOR_NOT_AVAILABLE and rebuilds the shard from the log, so
memory never holds what the disk does not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TypeVar

from coordinator.runtime.replay import CorruptOffsetsLog, verified_batches
from coordinator.share.persister import ReadResult, WriteRequest
from coordinator.share.remote import RETRIABLE, RemoteShareState
from coordinator.share.state_shard import (
    SHARE_STATE_TOPIC,
    Key,
    Record,
    ShareStateShard,
    partition_for,
    topic_id_bytes,
)
from protocol.errors import ErrorCode
from storage.interface import Clock, Durability, LogConfig, Logs, PartitionLog, wall_clock_ms
from storage.record_batch import key_values

log = logging.getLogger("kgc.share")

T = TypeVar("T")


class ShareCoordinator:
    """Serves ``SharePersister`` and ``ShareStateStore`` from ``__share_group_state``."""

    def __init__(
        self,
        logs: Logs,
        flusher: Durability,
        *,
        num_partitions: int,
        updates_per_snapshot: int,
        log_config: LogConfig,
        clock: Clock = wall_clock_ms,
        hosted: bool = True,
        topic_exists: Callable[[bytes], bool] | None = None,
    ) -> None:
        """``topic_exists`` (by topic id): the state of a deleted topic's partitions is
        tombstoned when the catalog reports a deletion (``topics_changed``)."""
        self.logs = logs
        self.flusher = flusher
        self.num_partitions = num_partitions
        self.updates_per_snapshot = updates_per_snapshot
        self.log_config = log_config
        self.clock = clock
        self.partitions: dict[int, PartitionLog] = {}
        self.shards: dict[int, ShareStateShard] = {}
        self.loaded: dict[int, asyncio.Event] = {}
        self.failed: set[int] = set()
        self.background: set[asyncio.Task[None]] = set()
        self.topic_exists = topic_exists
        # Cluster mode: the partitions other nodes hold, reached through their APIs; the
        # retries of Kafka's persister (PersisterStateManager) on the errors it retries.
        self.remote: RemoteShareState | None = None
        # Its MAX_FIND_COORD_ATTEMPTS, REQUEST_BACKOFF_MS doubling up to REQUEST_BACKOFF_MAX_MS:
        # about 15 s, past a failed node's session timeout and the load of its partitions.
        self.retry_attempts = 5
        self.retry_backoff_ms = 1000
        self.retry_backoff_max_ms = 30000
        if hosted:
            for p in range(num_partitions):
                self.partitions[p] = logs.get_or_create(SHARE_STATE_TOPIC, p, log_config)
                self.loaded[p] = asyncio.Event()

    # -- loading
    def start(self) -> None:
        task = asyncio.ensure_future(self._load_all())
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _load_all(self) -> None:
        for p in sorted(self.partitions):
            await self._load(p)

    # -- cluster mode: partitions come and go with their leases
    def holds(self, p: int) -> bool:
        """This node serves (or is loading) state partition ``p``."""
        return p in self.loaded

    def partition_of(self, group_id: str, topic_id: str, partition: int) -> int:
        return partition_for(group_id, topic_id, partition, self.num_partitions)

    def held_elsewhere(self, group_id: str, topic_id: str, partition: int) -> bool:
        return self.remote is not None and not self.holds(
            self.partition_of(group_id, topic_id, partition)
        )

    async def acquire(self, p: int, plog: PartitionLog) -> int:
        """Serve state partition ``p`` from ``plog`` (its materialised log): replayed
        (yielding between chunks); returns the records replayed."""
        self.partitions[p] = plog
        self.loaded[p] = asyncio.Event()
        return await self._load(p)

    def release(self, p: int) -> None:
        """Stop serving ``p`` (its lease went): operations waiting on it answer NOT_COORDINATOR."""
        self.partitions.pop(p, None)
        self.shards.pop(p, None)
        self.failed.discard(p)
        event = self.loaded.pop(p, None)
        if event is not None:
            event.set()

    async def _load(self, p: int) -> int:
        shard = ShareStateShard(self.updates_per_snapshot)
        plog = self.partitions[p]
        n = 0
        try:
            for chunk in _replay(plog, shard):
                n += chunk
                await asyncio.sleep(0)
        except Exception as exc:
            log.error(
                "%s-%d cannot be loaded: %s; its share partitions are not served",
                SHARE_STATE_TOPIC,
                p,
                exc,
            )
            self.failed.add(p)
        else:
            if self.partitions.get(p) is not plog:  # released while it loaded
                return n
            self.shards[p] = shard
            self.failed.discard(p)
        self.loaded.setdefault(p, asyncio.Event()).set()
        return n

    def _rebuild(self, p: int) -> None:
        """The shard may be ahead of the log (a failed write): replay the log again."""
        shard = ShareStateShard(self.updates_per_snapshot)
        plog = self.partitions.get(p)
        if plog is None:  # released meanwhile
            return
        try:
            for _ in _replay(plog, shard):
                pass
        except Exception as exc:
            log.error("%s-%d cannot be rebuilt: %s", SHARE_STATE_TOPIC, p, exc)
            self.shards.pop(p, None)
            self.failed.add(p)
            return
        self.shards[p] = shard

    async def _shard(
        self, group_id: str, topic_id: str, partition: int
    ) -> tuple[int, ShareStateShard | None]:
        p = partition_for(group_id, topic_id, partition, self.num_partitions)
        event = self.loaded.get(p)
        if event is None:
            return p, None
        await event.wait()
        return p, self.shards.get(p)

    def _missing(self, p: int) -> ErrorCode:
        """The error of a partition without a shard: not here (cluster mode), or FAILED."""
        return (
            ErrorCode.COORDINATOR_NOT_AVAILABLE if p in self.loaded else ErrorCode.NOT_COORDINATOR
        )

    async def _durable(self, p: int, record: Record | None) -> ErrorCode:
        """Append ``record`` to partition ``p`` and wait until it is durable."""
        if record is None:
            return ErrorCode.NO_ERROR
        plog = self.partitions.get(p)
        if plog is None:  # released while the operation waited
            return ErrorCode.NOT_COORDINATOR
        generation = plog.cut_backs
        try:
            _, last = plog.append_records([record], self.clock())
        except Exception as exc:  # disk full, I/O error, closed log: the state is rebuilt
            log.error("append to %s-%d failed: %r", SHARE_STATE_TOPIC, p, exc)
            self._rebuild(p)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        shard = self.shards.get(p)
        if shard is not None:
            shard.appended(record, last)
        self.flusher.poke()
        try:
            await self.flusher.wait_durable(plog, last, generation=generation)
        except Exception as exc:  # the log was cut back to its durable end
            log.error("%s-%d did not become durable: %r", SHARE_STATE_TOPIC, p, exc)
            if p in self.shards:
                self._rebuild(p)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NO_ERROR

    @staticmethod
    def _key(group_id: str, topic_id: str, partition: int) -> Key:
        return (group_id, topic_id_bytes(topic_id), partition)

    # -- routing (cluster mode): a partition another node holds goes to it
    async def _routed(
        self,
        p: int,
        here: Callable[[], Awaitable[T]],
        there: Callable[[RemoteShareState], Awaitable[T]],
        error_of: Callable[[T], ErrorCode],
    ) -> T:
        """``here()`` when this node holds ``p`` (or on one node), else ``there(remote)``;
        the errors Kafka's persister retries are retried with a growing backoff, the holder
        looked up again each time."""
        remote = self.remote
        if remote is None:
            return await here()
        backoff_ms = self.retry_backoff_ms
        for attempt in range(self.retry_attempts):
            result = await (here() if self.holds(p) else there(remote))
            if error_of(result) not in RETRIABLE or attempt + 1 == self.retry_attempts:
                return result
            await asyncio.sleep(backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, self.retry_backoff_max_ms)
        raise AssertionError("unreachable")  # retry_attempts >= 1

    # -- SharePersister: the group coordinator's calls
    async def initialize(
        self,
        group_id: str,
        topic_id: str,
        partitions: Sequence[int],
        state_epoch: int,
        start_offset: int,
    ) -> dict[int, ErrorCode]:
        async def here(partition: int) -> ErrorCode:
            p, shard = await self._shard(group_id, topic_id, partition)
            if shard is None:
                return self._missing(p)
            key = self._key(group_id, topic_id, partition)
            error, record = shard.initialize(key, state_epoch, start_offset, self.clock())
            return error if error else await self._durable(p, record)

        async def one(q: int) -> ErrorCode:
            p = self.partition_of(group_id, topic_id, q)
            return await self._routed(
                p,
                lambda: here(q),
                lambda r: r.initialize(p, group_id, topic_id, q, state_epoch, start_offset),
                _itself,
            )

        results = await asyncio.gather(*(one(q) for q in partitions))
        return dict(zip(partitions, results, strict=True))

    async def read_summary(
        self, group_id: str, topic_id: str, partitions: Sequence[int]
    ) -> dict[int, tuple[ErrorCode, int, int]]:
        full = await self.read_summaries(group_id, topic_id, partitions)
        return {q: (error, state, start) for q, (error, state, _, start, _) in full.items()}

    async def read_summaries(
        self, group_id: str, topic_id: str, partitions: Sequence[int]
    ) -> dict[int, tuple[ErrorCode, int, int, int, int]]:
        """ReadShareGroupStateSummary whole: (error, state epoch, leader epoch, start
        offset, delivery complete count) per partition."""

        async def here(partition: int) -> tuple[ErrorCode, int, int, int, int]:
            p, shard = await self._shard(group_id, topic_id, partition)
            if shard is None:
                return (self._missing(p), -1, -1, -1, -1)
            return shard.read_summary(self._key(group_id, topic_id, partition))

        async def one(q: int) -> tuple[ErrorCode, int, int, int, int]:
            p = self.partition_of(group_id, topic_id, q)
            return await self._routed(
                p, lambda: here(q), lambda r: r.read_summary(p, group_id, topic_id, q), _first
            )

        results = await asyncio.gather(*(one(q) for q in partitions))
        return dict(zip(partitions, results, strict=True))

    async def delete(
        self, group_id: str, topic_id: str, partitions: Sequence[int]
    ) -> dict[int, ErrorCode]:
        async def here(partition: int) -> ErrorCode:
            p, shard = await self._shard(group_id, topic_id, partition)
            if shard is None:
                return self._missing(p)
            return await self._durable(p, shard.delete(self._key(group_id, topic_id, partition)))

        async def one(q: int) -> ErrorCode:
            p = self.partition_of(group_id, topic_id, q)
            return await self._routed(
                p, lambda: here(q), lambda r: r.delete(p, group_id, topic_id, q), _itself
            )

        results = await asyncio.gather(*(one(q) for q in partitions))
        return dict(zip(partitions, results, strict=True))

    # -- ShareStateStore: the share-partition leader's calls
    async def read_state(
        self, group_id: str, topic_id: str, partition: int, leader_epoch: int
    ) -> ReadResult:
        async def here() -> ReadResult:
            p, shard = await self._shard(group_id, topic_id, partition)
            if shard is None:
                return ReadResult(self._missing(p), -1, -1, ())
            result, record = shard.read(
                self._key(group_id, topic_id, partition), leader_epoch, self.clock()
            )
            error = await self._durable(p, record)
            return result if not error else ReadResult(error, -1, -1, ())

        p = self.partition_of(group_id, topic_id, partition)
        return await self._routed(
            p,
            here,
            lambda r: r.read_state(p, group_id, topic_id, partition, leader_epoch),
            _first,
        )

    async def write_state(self, group_id: str, topic_id: str, request: WriteRequest) -> ErrorCode:
        async def here() -> ErrorCode:
            p, shard = await self._shard(group_id, topic_id, request.partition)
            if shard is None:
                return self._missing(p)
            error, record = shard.write(
                self._key(group_id, topic_id, request.partition), request, self.clock()
            )
            return error if error else await self._durable(p, record)

        p = self.partition_of(group_id, topic_id, request.partition)
        return await self._routed(
            p, here, lambda r: r.write_state(p, group_id, topic_id, request), _itself
        )

    def summary(
        self, group_id: str, topic_id: str, partition: int
    ) -> tuple[int, int, int, int] | None:
        p = partition_for(group_id, topic_id, partition, self.num_partitions)
        shard = self.shards.get(p)
        if shard is None:
            return None
        s = shard.states.get(self._key(group_id, topic_id, partition))
        if s is None:
            return None
        return s.state_epoch, s.leader_epoch, s.start_offset, s.delivery_complete_count

    # -- topics deleted (Kafka's ShareCoordinatorService.onTopicsDeleted)
    def topics_changed(self, names: list[str], created: bool) -> None:
        """The catalog changed: the state of every partition of a deleted topic goes."""
        if created or self.topic_exists is None:
            return
        exists = self.topic_exists
        gone = [
            (p, key)
            for p, shard in self.shards.items()
            for key in shard.states
            if not exists(key[1])
        ]
        if not gone:
            return

        async def delete() -> None:
            for p, key in gone:
                shard = self.shards.get(p)
                if shard is not None:
                    await self._durable(p, shard.delete(key))

        task = asyncio.ensure_future(delete())
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    # -- pruning
    async def prune(self) -> int:
        """Kafka's cold snapshots and pruning: a key with updates after its last snapshot
        gets a fresh one, then each partition's log start moves to the lowest offset any
        key still needs (whole segments below it are deleted). Returns segments deleted."""
        deleted = 0
        for p, shard in list(self.shards.items()):
            now = self.clock()
            for key in list(shard.states):
                record = shard.cold_snapshot(key, now)
                if record is not None and await self._durable(p, record) != ErrorCode.NO_ERROR:
                    break
            plog = self.partitions.get(p)
            if plog is not None and self.shards.get(p) is shard:
                target = shard.prunable_offset(plog.log_end_offset)
                if target > plog.log_start_offset:
                    deleted += plog.delete_segments_before(target)
        return deleted

    def start_pruning(self, interval_ms: int) -> None:
        """share.coordinator.state.topic.prune.interval.ms"""

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_ms / 1000)
                try:
                    await self.prune()
                except Exception:
                    log.exception("pruning %s failed", SHARE_STATE_TOPIC)

        task = asyncio.ensure_future(loop())
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def close(self) -> None:
        for task in list(self.background):
            task.cancel()


def _itself(error: ErrorCode) -> ErrorCode:
    return error


def _first(result: tuple[ErrorCode, int, int, int, int] | ReadResult) -> ErrorCode:
    error: ErrorCode = result[0]
    return error


def _replay(plog: PartitionLog, shard: ShareStateShard) -> Iterator[int]:
    """Replay a partition into ``shard`` with each record's offset, every batch checked;
    yields between chunks."""
    if plog.damaged is not None:
        raise CorruptOffsetsLog(plog.damaged)
    n = 0
    for header, batch in verified_batches(plog):
        for i, (key, value) in enumerate(key_values(batch)):
            if key is not None:
                shard.replay(key, value, header.base_offset + i)
                n += 1
        if n >= 5000:
            yield n
            n = 0
    yield n
