"""Cluster mode: what this node does when it gains or loses a partition's lease.

How this works: ``coordinator/cluster`` decides which node holds which partition (leases
with fencing epochs in PostgreSQL) and calls ``acquire(lease)`` / ``release(topic, p)``
here. Taking a partition over:

1. the group runtime (``__consumer_offsets``) marks it LOADING at once, so its groups answer
   COORDINATOR_LOAD_IN_PROGRESS instead of NOT_COORDINATOR while it loads;
2. a fresh local log is made for it (the local directory is only a cache, never trusted
   across owners) and filled from the database up to the lease's ``next_offset``
   (``storage.postgres.materialize``);
3. the log is attached to the PostgreSQL journal under the lease's epoch: from now on every
   append is made durable by a round statement that checks that epoch (a node that lost the
   lease can never write);
4. the group runtime replays it into the shard and serves it (timers re-armed), or the data
   plane serves the topic partition (leader epoch = the lease's epoch).

Giving one up (a clean stop, or the cluster moving it to a newer node) runs the same steps
backwards: stop serving (parked requests answer NOT_COORDINATOR / NOT_LEADER_OR_FOLLOWER),
let the writes already appended finish their round, detach, drop the cache. When the journal
finds a write fenced (another node took the partition while this one was paused or cut
off), the partition is dropped the same way at once and the cluster layer is told.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from coordinator import topic_configs
from coordinator.catalog import SharedCatalog, TopicCatalog
from coordinator.config import Settings, offsets_log_config
from storage.interface import Lease
from storage.offsets_format import OFFSETS_TOPIC
from storage.postgres.materialize import materialize

if TYPE_CHECKING:
    from coordinator.dataplane import DataPlane
    from coordinator.runtime.group_runtime import GroupRuntime
    from storage.local.durability import Flusher
    from storage.local.log import PartitionLog
    from storage.local.manager import LogManager
    from storage.postgres.journal import PgJournal

log = logging.getLogger("kgc.cluster")


class PartitionHost:
    def __init__(
        self,
        settings: Settings,
        catalog: TopicCatalog,
        logs: LogManager,
        flusher: Flusher,
        journal: PgJournal,
        groups: GroupRuntime,
        data: DataPlane,
        pool: Any,
        shared: SharedCatalog,
    ) -> None:
        """``pool``: an asyncpg pool for reads (materialising partitions)."""
        self.shared = shared
        # The cluster layer's current broker epoch (the journal's writes carry it).
        self.broker_epoch: Callable[[], int] = lambda: 0
        self.settings = settings
        self.catalog = catalog
        self.logs = logs
        self.flusher = flusher
        self.journal = journal
        self.groups = groups
        self.data = data
        self.pool = pool
        self.hosted: dict[tuple[str, int], PartitionLog] = {}
        self.on_fenced_partition: list[Any] = []  # the cluster layer's callbacks
        journal.on_fenced.append(self._fenced)

    async def acquire(self, lease: Lease) -> None:
        topic, p = lease.topic, lease.partition
        started = time.perf_counter()
        offsets = topic == OFFSETS_TOPIC
        if offsets:
            self.groups.begin_acquire(p)
            cfg = offsets_log_config(self.settings)
            topic_id = None
            info = None
        else:
            info = self.catalog.get(topic)
            if info is None:
                await self.shared.refresh()  # created since our last heartbeat
                info = self.catalog.get(topic)
            if info is None or info.offline is not None:
                log.warning("not serving %s-%d: the topic is not in this node's catalog", topic, p)
                return
            cfg = topic_configs.log_config(self.settings, info.configs)
            topic_id = info.topic_id
        # Nothing serves this log until it is attached to the journal below: the group
        # runtime and the data plane only use logs handed to them by ``acquire``.
        plog = self.logs.fresh(topic, p, cfg, topic_id)
        try:
            async with self.pool.acquire() as conn:
                batches = await materialize(conn, plog, lease)
            self.journal.broker_epoch = self.broker_epoch()
            self.journal.attach(plog, lease)
        except BaseException:
            self.journal.detach(plog)
            self.logs.forget(topic, p)
            if offsets:
                self.groups.release(p)
            raise
        self.hosted[(topic, p)] = plog
        if offsets:
            records = await self.groups.acquire(p, plog, lease.epoch)
            what = f"{records} records"
        else:
            assert info is not None
            self.data.acquire(info, plog, lease.epoch)
            what = f"offsets {plog.log_start_offset}..{plog.log_end_offset}"
        ms = (time.perf_counter() - started) * 1000
        # The cluster layer logs the acquisition itself; this line adds what loading cost.
        log.log(
            logging.INFO if ms >= 1000 else logging.DEBUG,
            "loaded %s-%d at leader epoch %d: %d batches, %s, in %.0f ms",
            topic,
            p,
            lease.epoch,
            batches,
            what,
            ms,
        )

    async def release(self, topic: str, p: int) -> None:
        plog = self.hosted.pop((topic, p), None)
        if topic == OFFSETS_TOPIC:
            self.groups.release(p)
        elif plog is not None:
            self.data.release(plog)
        if plog is None:
            return
        if plog.log_end_offset > plog.durable_end:
            # Appends already made wait for their round: their answers depend on it.
            with contextlib.suppress(Exception):
                await self.flusher.wait_durable(plog, plog.log_end_offset - 1)
        self.journal.detach(plog)
        self.logs.forget(topic, p)
        log.debug("unloaded %s-%d", topic, p)

    def _fenced(self, topic: str, p: int) -> None:
        """A write of ours was refused: another node holds the lease now."""
        log.warning(
            "write to %s-%d refused: another node holds its lease now; stepping down", topic, p
        )
        # The cluster layer unloads it (``release``) through its one transition per
        # partition, so a later take-over never overlaps the unload.
        for callback in self.on_fenced_partition:
            callback(topic, p)
