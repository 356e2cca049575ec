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

Failures stay inside one partition: a log that does not replay leaves its partition FAILED
(its keys answer COORDINATOR_NOT_AVAILABLE, which the leader maps as Kafka's does); a failed
append or fsync answers COORDINATOR_NOT_AVAILABLE and rebuilds the shard from the log, so
memory never holds what the disk does not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence

from coordinator.runtime.replay import CorruptOffsetsLog, verified_batches
from coordinator.share.persister import ReadResult, WriteRequest
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

    async def _load(self, p: int) -> None:
        shard = ShareStateShard(self.updates_per_snapshot)
        try:
            for _ in _replay(self.partitions[p], shard):
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
            self.shards[p] = shard
            self.failed.discard(p)
        self.loaded.setdefault(p, asyncio.Event()).set()

    def _rebuild(self, p: int) -> None:
        """The shard may be ahead of the log (a failed write): replay the log again."""
        shard = ShareStateShard(self.updates_per_snapshot)
        try:
            for _ in _replay(self.partitions[p], shard):
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

    async def _durable(self, p: int, record: Record | None) -> ErrorCode:
        """Append ``record`` to partition ``p`` and wait until it is durable."""
        if record is None:
            return ErrorCode.NO_ERROR
        plog = self.partitions[p]
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

    # -- SharePersister: the group coordinator's calls
    async def initialize(
        self,
        group_id: str,
        topic_id: str,
        partitions: Sequence[int],
        state_epoch: int,
        start_offset: int,
    ) -> dict[int, ErrorCode]:
        async def one(partition: int) -> ErrorCode:
            p, shard = await self._shard(group_id, topic_id, partition)
            if shard is None:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            key = self._key(group_id, topic_id, partition)
            error, record = shard.initialize(key, state_epoch, start_offset, self.clock())
            return error if error else await self._durable(p, record)

        results = await asyncio.gather(*(one(q) for q in partitions))
        return dict(zip(partitions, results, strict=True))

    async def read_summary(
        self, group_id: str, topic_id: str, partitions: Sequence[int]
    ) -> dict[int, tuple[ErrorCode, int, int]]:
        out: dict[int, tuple[ErrorCode, int, int]] = {}
        for partition in partitions:
            _, shard = await self._shard(group_id, topic_id, partition)
            if shard is None:
                out[partition] = (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1)
                continue
            error, state_epoch, _, start, _ = shard.read_summary(
                self._key(group_id, topic_id, partition)
            )
            out[partition] = (error, state_epoch, start)
        return out

    async def delete(
        self, group_id: str, topic_id: str, partitions: Sequence[int]
    ) -> dict[int, ErrorCode]:
        async def one(partition: int) -> ErrorCode:
            p, shard = await self._shard(group_id, topic_id, partition)
            if shard is None:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            return await self._durable(p, shard.delete(self._key(group_id, topic_id, partition)))

        results = await asyncio.gather(*(one(q) for q in partitions))
        return dict(zip(partitions, results, strict=True))

    # -- ShareStateStore: the share-partition leader's calls
    async def read_state(
        self, group_id: str, topic_id: str, partition: int, leader_epoch: int
    ) -> ReadResult:
        p, shard = await self._shard(group_id, topic_id, partition)
        if shard is None:
            return ReadResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1, ())
        result, record = shard.read(
            self._key(group_id, topic_id, partition), leader_epoch, self.clock()
        )
        error = await self._durable(p, record)
        return result if not error else ReadResult(error, -1, -1, ())

    async def write_state(self, group_id: str, topic_id: str, request: WriteRequest) -> ErrorCode:
        p, shard = await self._shard(group_id, topic_id, request.partition)
        if shard is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error, record = shard.write(
            self._key(group_id, topic_id, request.partition), request, self.clock()
        )
        return error if error else await self._durable(p, record)

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
            plog = self.partitions[p]
            if self.shards.get(p) is shard:
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
