"""The group runtime: the only place where the pure group core meets I/O and time.

How this works: a request becomes ``shard.<api>(ctx, request, now_ms)``, which returns a
``Result``: records to append to the offsets log, replies (for this request and perhaps for
requests parked earlier, each identified by the ``reply_to`` handle the runtime gave it) and
timer operations. The runtime

1. arms or cancels the timers on the event loop (a firing timer calls ``shard.on_timer`` and
   is handled like a request);
2. appends the records to their ``__consumer_offsets`` partitions (a write to the OS, in
   order, on the loop thread) and, only once the flusher reports them durable under the
   configured policy, releases the replies. A Result without records replies at once.

At start-up every offsets partition is replayed into the shard in the background; until a
partition is loaded, the shard answers COORDINATOR_LOAD_IN_PROGRESS for its groups. Timers
are never persisted: ``load_complete`` re-arms them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from coordinator.group.shard import GroupShard, RequestContext, Result
from coordinator.server import ClientInfo
from protocol.framing import RequestHeader
from protocol.messages import (
    delete_groups,
    describe_groups,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    offset_commit,
    offset_delete,
    offset_fetch,
    sync_group,
    txn_offset_commit,
)
from storage.durability import Flusher
from storage.log import LogConfig, PartitionLog, wall_clock_ms
from storage.manager import LogManager
from storage.offsets_format import OFFSETS_TOPIC
from storage.record_batch import iter_record_tuples

log = logging.getLogger("kgc.groups")
_new_ctx = tuple.__new__

Clock = Callable[[], int]


class GroupRuntime:
    def __init__(
        self,
        shard: GroupShard,
        logs: LogManager,
        flusher: Flusher,
        *,
        num_partitions: int,
        log_config: LogConfig,
        clock: Clock = wall_clock_ms,
        metrics: Any = None,
    ) -> None:
        self.shard = shard
        self.logs = logs
        self.flusher = flusher
        self.clock = clock
        self.metrics = metrics
        self.partitions: list[PartitionLog] = [
            logs.get_or_create(OFFSETS_TOPIC, p, log_config) for p in range(num_partitions)
        ]
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        # Records and replies waiting for this loop turn's append (see ``apply``).
        self.unwritten: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.unreleased: list[tuple[int, Any]] = []
        self.write_scheduled = False
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.next_handle = 0
        self.background: set[asyncio.Task[None]] = set()
        self.loaded = asyncio.Event()

    # -- wiring
    def handlers(self) -> dict[int, Callable[[RequestHeader, Any, ClientInfo], Any]]:
        s = self.shard
        table: dict[int, Callable[..., Result]] = {
            join_group.API_KEY: s.join_group,
            sync_group.API_KEY: s.sync_group,
            heartbeat.API_KEY: s.heartbeat,
            leave_group.API_KEY: s.leave_group,
            offset_commit.API_KEY: s.offset_commit,
            txn_offset_commit.API_KEY: s.txn_offset_commit,
            offset_fetch.API_KEY: s.offset_fetch,
            offset_delete.API_KEY: s.offset_delete,
            describe_groups.API_KEY: s.describe_groups,
            list_groups.API_KEY: s.list_groups,
            delete_groups.API_KEY: s.delete_groups,
        }

        return {key: functools.partial(self.call, method) for key, method in table.items()}

    # -- requests
    def call(
        self, method: Callable[..., Result], header: RequestHeader, body: Any, client: ClientInfo
    ) -> Any:
        self.next_handle += 1
        handle = self.next_handle
        # Kafka reports hosts as Java's InetAddress.toString(): "/127.0.0.1".
        # tuple.__new__ skips the NamedTuple's Python-level __new__: this runs per request.
        ctx = _new_ctx(
            RequestContext, (header.api_version, client.client_id, client.java_host, handle)
        )
        result = method(ctx, body, self.clock())
        if not result.records:
            replies = result.replies
            if len(replies) == 1 and not result.timers and not result.events:
                reply = replies[0]
                if reply[0] == handle:  # most requests: just our own answer, nothing else
                    return reply[1]
            mine = self._apply_now(result, handle)
            if mine is not None:
                return mine
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self.waiting[handle] = fut
            return fut
        fut = asyncio.get_running_loop().create_future()
        self.waiting[handle] = fut
        self.apply(result)
        return fut

    def _apply_now(self, result: Result, own: int) -> Any:
        """Apply a Result that has no records; return the reply for ``own`` if present."""
        self._side_effects(result)
        mine = None
        for handle, reply in result.replies:
            if handle == own:
                mine = reply
            else:
                self._deliver(handle, reply)
        return mine

    def apply(self, result: Result) -> None:
        """Apply a Result from a request or a timer: timers now, replies after durability.

        Records of every Result applied during one turn of the event loop are appended
        together (one batch per offsets partition) and made durable together, so many
        concurrent commits cost one write and one fsync wait, not one each.
        """
        if not result.records:
            self._apply_now(result, -1)
            return
        self._side_effects(result)
        for partition, key, value in result.records:
            self.unwritten.setdefault(partition, []).append((key, value))
        self.unreleased.extend(result.replies)
        if not self.write_scheduled:
            self.write_scheduled = True
            asyncio.get_running_loop().call_soon(self._write_unwritten)

    def _write_unwritten(self) -> None:
        self.write_scheduled = False
        batches, self.unwritten = self.unwritten, {}
        replies, self.unreleased = self.unreleased, []
        now = self.clock()
        pending: list[tuple[PartitionLog, int]] = []
        failed: list[int] = []
        for partition, records in batches.items():
            plog = self.partitions[partition]
            try:
                _, last = plog.append_records(records, timestamp_ms=now)
            except Exception:
                log.exception("appending to offsets partition %d failed", partition)
                failed.append(partition)
                continue
            pending.append((plog, last))
        if failed:
            # The replies of this turn cannot tell which partition they depended on, so
            # none is sent as a success; the connection closes and the clients retry.
            for handle, _ in replies:
                fut = self.waiting.pop(handle, None)
                if fut is not None and not fut.done():
                    fut.set_exception(RuntimeError("offsets log append failed"))
            self._rebuild(failed)
            return
        task = asyncio.ensure_future(self._release_when_durable(pending, replies))
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def _side_effects(self, result: Result) -> None:
        for key, deadline in result.timers:
            self._set_timer(key, deadline)
        for line in result.events:
            log.info("%s", line)
        if result.events and self.metrics is not None:
            self.metrics.group_events(result.events, self.shard.groups, self.clock())

    async def _release_when_durable(
        self, pending: list[tuple[PartitionLog, int]], replies: list[tuple[int, Any]]
    ) -> None:
        try:
            await self.flusher.wait_durable_many(pending)
        except Exception as exc:
            log.exception("fsync of the offsets log failed")
            for handle, _ in replies:
                fut = self.waiting.pop(handle, None)
                if fut is not None and not fut.done():
                    fut.set_exception(exc)
            return
        for handle, reply in replies:
            self._deliver(handle, reply)

    def _deliver(self, handle: int, reply: Any) -> None:
        fut = self.waiting.pop(handle, None)
        if fut is not None and not fut.done():  # done: the connection went away meanwhile
            fut.set_result(reply)

    # -- timers
    def _set_timer(self, key: str, deadline_ms: int | None) -> None:
        # The shard emits an operation only when a deadline moves earlier or is cancelled;
        # one that moved later is re-armed by the shard when this timer fires.
        handle = self.timers.pop(key, None)
        if handle is not None:
            handle.cancel()
        if deadline_ms is not None:
            delay = max(0.0, (deadline_ms - self.clock()) / 1000.0)
            self.timers[key] = asyncio.get_running_loop().call_later(delay, self._fire, key)

    def _fire(self, key: str) -> None:
        self.timers.pop(key, None)
        try:
            result = self.shard.on_timer(key, self.clock())
        except Exception:
            log.exception("timer %s failed", key)
            return
        self.apply(result)

    # -- loading
    async def load(self) -> None:
        """Replay every offsets partition into the shard, yielding to requests in between."""
        for p in range(len(self.partitions)):
            self.shard.begin_load(p)
        total = 0
        started = time.perf_counter()
        for p in range(len(self.partitions)):
            t0 = time.perf_counter()
            n = 0
            for chunk in self._replay(p):
                n += chunk
                await asyncio.sleep(0)
            self._finish_load(p)
            total += n
            if self.metrics is not None:
                self.metrics.partition_loaded(p, time.perf_counter() - t0)
        log.info(
            "loaded %d offsets-log records from %d partitions in %.2f s",
            total,
            len(self.partitions),
            time.perf_counter() - started,
        )
        self.loaded.set()

    def _replay(self, p: int) -> Iterator[int]:
        """Feed partition ``p`` of the log to the shard; yields record counts between chunks."""
        n = 0
        for _header, batch in self.partitions[p].iter_batches(0):
            for _offset, _ts, key, value in iter_record_tuples(batch):
                if key is not None:
                    self.shard.replay(p, key, value)
                    n += 1
            if n >= 20000:
                yield n
                n = 0
        yield n

    def _finish_load(self, p: int) -> None:
        loaded = self.shard.load_complete(p, self.clock())
        for line in loaded.events:
            log.debug("%s", line)  # the caller logs one summary line instead
        loaded.events.clear()
        self.apply(loaded)

    def _rebuild(self, partitions: Iterable[int]) -> None:
        """After a failed append the shard is ahead of the log: rebuild it from the log.

        Parked requests of those groups are answered NOT_COORDINATOR (clients look the
        coordinator up again and retry), as when Kafka's coordinator loses a partition.
        """
        now = self.clock()
        for p in partitions:
            self.apply(self.shard.unload(p, now))
            self.shard.begin_load(p)
            n = sum(self._replay(p))
            self._finish_load(p)
            log.warning(
                "offsets partition %d rebuilt from its log (%d records) after a failed append", p, n
            )

    def start(self) -> None:
        task = asyncio.ensure_future(self.load())
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def topic_deleted(self, topic: str) -> None:
        self.apply(self.shard.topic_deleted(topic, self.clock()))

    def close(self) -> None:
        for handle in self.timers.values():
            handle.cancel()
        self.timers.clear()
