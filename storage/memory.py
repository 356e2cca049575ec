"""An in-memory storage engine: the runtime and the data plane tested without a disk.

How this works
--------------
The three parts of ``storage.interface`` over plain lists, in the spirit of Kafka's
``InMemoryPartitionWriter``:

* ``MemoryLog`` keeps a partition's batches as bytes in offset order. It checks and stamps
  an appended batch as the local log does (size, CRC, base offset, leader epoch), serves
  reads of whole batches from the one holding an offset, CRC-checks what it serves and
  marks itself ``damaged`` on a bad batch. The whole log is one "segment": retention
  drops whole batches (never the newest), as a log whose batches each fill a segment.
* ``MemoryLogs`` is the set of logs; ``data_dir`` is a pseudo path nothing writes to.
* ``MemoryDurability`` settles waits in rounds, as the ``Flusher`` does, but a round only
  moves each waiting log's ``durable_end`` to its end. With ``auto=True`` (the default) a
  round runs on the next loop turn after something waits, so waits complete at once; with
  ``auto=False`` nothing is durable until the test calls ``run_round()``, which lets a test
  hold replies back. ``fail_next_round(log, error)`` makes the next round fail that log:
  it is cut back to its durable end, its ``on_cut_back`` hooks run and its waiters get
  ``FlushError`` (or the error given, when it is one), the local engine's contract.

``MemoryLogs.reopen()`` gives the logs a restart after a crash would find (each log's
durable prefix); ``corrupt(offset)`` flips a byte of the batch holding ``offset`` (a test of the damaged
path). Nothing here is used by ``kgc serve``.
"""

from __future__ import annotations

import asyncio
import bisect
import errno
import functools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from storage.interface import (
    CarriedTail,
    Clock,
    CorruptLogError,
    CutBackHook,
    Durability,
    DurabilityStats,
    FlushError,
    LogClosedError,
    LogConfig,
    Logs,
    OffsetOutOfRangeError,
    PartitionLog,
    Then,
    WriteAheadJournal,
    check_batch,
    check_batch_size,
    check_durable_wait,
    wall_clock_ms,
)
from storage.record_batch import (
    ATTR_LOG_APPEND_TIME,
    BatchHeader,
    Record,
    UnsupportedCompressionError,
    encode_batch,
    iter_record_tuples,
    parse_header,
    set_base_offset,
    verify_crc,
)

__all__ = ["MemoryDurability", "MemoryLog", "MemoryLogs"]

_ROOT = Path("memory")


class MemoryLog:
    """One partition's log in memory (``storage.interface.PartitionLog``)."""

    def __init__(
        self, name: str, config: LogConfig | None = None, clock: Clock = wall_clock_ms
    ) -> None:
        self.dir = _ROOT / name
        self.config = config or LogConfig()
        self._clock = clock
        self.journal: WriteAheadJournal | None = None
        self.journal_durable_end = 0
        self.carried: CarriedTail | None = None  # no journal here carries records
        self.damaged: str | None = None
        self.on_cut_back: list[CutBackHook] = []
        self.cut_backs = 0
        self._cut_ends: list[int] = []
        self._batches: list[bytes] = []
        self._bases: list[int] = []  # base offset of each batch
        self._headers: list[BatchHeader] = []
        self._start = 0
        self._end = 0
        self._durable = 0
        self._unflushed_messages = 0
        self._unflushed_bytes = 0
        self._modified_ms = clock()
        self._closed = False

    def __repr__(self) -> str:
        return f"MemoryLog({self.dir.name}, start={self._start}, end={self._end})"

    # ------------------------------------------------------------ state

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._end

    @property
    def durable_end(self) -> int:
        return max(self._durable, self.journal_durable_end)

    @property
    def recovery_point(self) -> int:
        return self._durable

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    @property
    def unflushed_bytes(self) -> int:
        return self._unflushed_bytes

    @property
    def size_bytes(self) -> int:
        return sum(len(b) for b in self._batches)

    @property
    def segment_count(self) -> int:
        return 1

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------ append

    def append(
        self, batch: bytes | bytearray | memoryview, leader_epoch: int | None = None
    ) -> tuple[int, int]:
        if self._closed:
            raise LogClosedError(str(self.dir))
        h = check_batch(batch, self.config.max_message_bytes)
        epoch = h.partition_leader_epoch if leader_epoch is None else leader_epoch
        return self._store(set_base_offset(batch, self._end, epoch))

    def append_records(
        self,
        records: Sequence[tuple[bytes | None, bytes | None]] | Sequence[Record],
        timestamp_ms: int | None = None,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        attributes: int = 0,
        partition_leader_epoch: int = -1,
    ) -> tuple[int, int]:
        if self._closed:
            raise LogClosedError(str(self.dir))
        batch = encode_batch(
            self._end,
            records,
            timestamp_ms=self._clock() if timestamp_ms is None else timestamp_ms,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            attributes=attributes,
            partition_leader_epoch=partition_leader_epoch,
        )
        check_batch_size(len(batch), self.config.max_message_bytes)
        return self._store(batch)

    def _store(self, data: bytes) -> tuple[int, int]:
        h = parse_header(data)
        self._batches.append(data)
        self._bases.append(h.base_offset)
        self._headers.append(h)
        self._end = h.next_offset
        self._unflushed_messages += h.records_count
        self._unflushed_bytes += h.size
        self._modified_ms = self._clock()
        return h.base_offset, h.last_offset

    # ------------------------------------------------------------ read

    def _index(self, offset: int) -> int:
        """Index of the batch holding ``offset``, or of the first one after it."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            return 0
        return i if self._headers[i].next_offset > offset else i + 1

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        if offset < self._start or offset > self._end:
            raise OffsetOutOfRangeError(f"offset {offset} not in [{self._start}, {self._end}]")
        out: list[bytes] = []
        size = 0
        for i in range(self._index(offset), len(self._batches)):
            h, data = self._headers[i], self._batches[i]
            if max_offset is not None and h.base_offset >= max_offset:
                break
            if out and size + len(data) > max_bytes:
                break
            if not verify_crc(data, 0, len(data)):
                reason = f"CRC mismatch at offset {h.base_offset}"
                self.mark_damaged(f"{reason} in {self.dir}")
                raise CorruptLogError(errno.EIO, f"corrupt batch in {self.dir.name}: {reason}")
            out.append(data)
            size += len(data)
        return b"".join(out)

    def iter_batches(self, from_offset: int = 0) -> Iterator[tuple[BatchHeader, bytes]]:
        start = self._index(max(from_offset, self._start))
        for i in range(start, len(self._batches)):
            yield self._headers[i], self._batches[i]

    def verified_batches(self) -> Iterator[tuple[BatchHeader, bytes]]:
        for h, data in self.iter_batches(self._start):
            if not verify_crc(data, 0, len(data)):
                raise CorruptLogError(
                    errno.EIO, f"CRC mismatch in {self.dir} at offset {h.base_offset}"
                )
            yield h, data

    def recent_batch_headers(self, scan_bytes: int) -> Iterator[BatchHeader]:
        # One segment: the active one is always scanned whole.
        return iter(list(self._headers))

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        for h, data in self.iter_batches(self._start):
            if h.max_timestamp < timestamp:
                continue
            try:
                for off, ts, _k, _v in iter_record_tuples(data):
                    if ts >= timestamp:
                        return max(off, self._start), ts
            except UnsupportedCompressionError:
                return max(h.base_offset, self._start), h.max_timestamp
        return None

    def offset_for_max_timestamp(self) -> tuple[int, int]:
        best: tuple[BatchHeader, bytes] | None = None
        for h, data in self.iter_batches(self._start):
            if h.max_timestamp >= 0 and (best is None or h.max_timestamp > best[0].max_timestamp):
                best = h, data
        if best is None:
            return -1, -1
        h, data = best
        if h.attributes & ATTR_LOG_APPEND_TIME:
            return h.max_timestamp, max(h.base_offset, self._start)
        try:
            for off, ts, _k, _v in iter_record_tuples(data):
                if ts == h.max_timestamp and off >= self._start:
                    return ts, off
        except UnsupportedCompressionError:
            pass
        return h.max_timestamp, h.last_offset

    def segment_points(self) -> list[tuple[int, int, int]]:
        return [(self._start, self.size_bytes, self._modified_ms)]

    # ------------------------------------------------------------ retention and truncation

    def maybe_roll_by_time(self) -> bool:
        return False

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Drop whole batches (never the newest) past retention.ms or beyond retention.bytes."""
        if not self.config.delete or len(self._headers) < 2:
            return 0
        now = self._clock() if now_ms is None else now_ms
        i = 0
        if self.config.retention_ms >= 0:
            while (
                i < len(self._headers) - 1
                and now - self._headers[i].max_timestamp > self.config.retention_ms
            ):
                i += 1
        if self.config.retention_bytes >= 0:
            excess = sum(len(b) for b in self._batches[i:]) - self.config.retention_bytes
            while i < len(self._headers) - 1 and excess - len(self._batches[i]) >= 0:
                excess -= len(self._batches[i])
                i += 1
        if i == 0:
            return 0
        return self.delete_segments_before(self._bases[i])

    def delete_segments_before(self, offset: int) -> int:
        """Advance the log start to ``offset``; drop the batches entirely below it."""
        offset = min(offset, self._end)
        self._start = max(self._start, offset)
        n = 0
        while n < len(self._headers) - 1 and self._headers[n].next_offset <= self._start:
            n += 1
        self._drop_first(n)
        return n

    def _drop_first(self, n: int) -> None:
        del self._batches[:n], self._bases[:n], self._headers[:n]

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= ``offset`` (a straddling one whole);
        at or below the first batch the log empties and restarts at ``offset``."""
        if offset >= self._end:
            return
        if not self._headers or offset <= self._headers[0].base_offset:
            self._batches, self._bases, self._headers = [], [], []
            self._start = self._end = offset
        else:
            i = bisect.bisect_right([h.next_offset for h in self._headers], offset)
            cut = min(offset, self._headers[i].base_offset) if i < len(self._headers) else offset
            del self._batches[i:], self._bases[i:], self._headers[i:]
            self._end = max(self._headers[-1].next_offset if self._headers else self._start, cut)
            self._start = min(self._start, self._end)
        self._durable = min(self._durable, self._end)
        self.journal_durable_end = min(self.journal_durable_end, self._end)

    # ------------------------------------------------------------ durability

    def survived(self, offset: int, generation: int) -> bool:
        return all(end > offset for end in self._cut_ends[generation:])

    def flush(self) -> None:
        self._durable = self._end
        self._unflushed_messages = self._unflushed_bytes = 0

    def discard_unflushed(self) -> int:
        """Cut back to ``durable_end`` and run every ``on_cut_back`` hook."""
        target = self.durable_end
        if self._closed or target >= self._end:
            return self._end
        keep = bisect.bisect_left(self._bases, target)
        del self._batches[keep:], self._bases[keep:], self._headers[keep:]
        self._end = max(target, self._start)
        self.journal_durable_end = min(self.journal_durable_end, self._end)
        self._unflushed_messages = self._unflushed_bytes = 0
        self.cut_backs += 1
        self._cut_ends.append(self._end)
        for hook in list(self.on_cut_back):
            hook(self, self._end)
        return self._end

    def mark_damaged(self, reason: str) -> None:
        if self.damaged is None:
            self.damaged = reason

    def close(self) -> None:
        self.flush()
        self._closed = True

    # ------------------------------------------------------------ test hooks

    def restore(self, crashed: MemoryLog) -> None:
        """Take what survives a crash of ``crashed``: its batches below its durable end."""
        end = crashed.durable_end
        self._start = self._end = min(crashed.log_start_offset, end)
        for h, data in crashed.iter_batches(crashed.log_start_offset):
            if h.next_offset > end:
                break
            self._store(data)
        self._durable = self._end
        self._unflushed_messages = self._unflushed_bytes = 0

    def corrupt(self, offset: int) -> None:
        """Flip the last byte of the batch holding ``offset``: its CRC no longer matches."""
        i = self._index(offset)
        data = bytearray(self._batches[i])
        data[-1] ^= 0xFF
        self._batches[i] = bytes(data)


class MemoryLogs:
    """The set of logs (``storage.interface.Logs``), keyed by (topic, partition)."""

    def __init__(self, clock: Clock = wall_clock_ms) -> None:
        self.data_dir = _ROOT
        self._clock = clock
        self._logs: dict[tuple[str, int], MemoryLog] = {}

    def get(self, topic: str, partition: int) -> MemoryLog | None:
        return self._logs.get((topic, partition))

    def get_or_create(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        topic_id: bytes | None = None,
    ) -> MemoryLog:
        log = self._logs.get((topic, partition))
        if log is None:
            log = self._logs[(topic, partition)] = MemoryLog(
                f"{topic}-{partition}", config, self._clock
            )
        return log

    def fresh(
        self, topic: str, partition: int, config: LogConfig, topic_id: bytes | None = None
    ) -> MemoryLog:
        self._logs.pop((topic, partition), None)
        return self.get_or_create(topic, partition, config, topic_id)

    def forget(self, topic: str, partition: int) -> MemoryLog | None:
        log = self._logs.pop((topic, partition), None)
        if log is not None:
            log.close()
        return log

    def partitions(self) -> list[tuple[str, int]]:
        return list(self._logs)

    def logs(self) -> list[MemoryLog]:
        return list(self._logs.values())

    def delete_topic(self, topic: str, topic_id: bytes | None = None) -> int:
        doomed = [key for key in self._logs if key[0] == topic]
        for key in doomed:
            self._logs.pop(key).close()
        return len(doomed)

    def close_all(self) -> None:
        for log in self._logs.values():
            log.close()

    def reopen(self) -> MemoryLogs:
        """The logs as a restart after a crash finds them: each keeps its durable prefix."""
        again = MemoryLogs(self._clock)
        for (topic, partition), log in self._logs.items():
            copy = again.get_or_create(topic, partition, log.config)
            copy.restore(log)
        return again


# A parked wait: the offset, what settles it, and ``log.cut_backs`` when it was parked.
_Settle = Callable[[BaseException | None], None]
_Wait = tuple[int, _Settle, int]


class MemoryDurability:
    """Durability in rounds with no I/O (``storage.interface.Durability``)."""

    def __init__(self, *, auto: bool = True) -> None:
        self.auto = auto
        self.stats = DurabilityStats()
        self.journal: WriteAheadJournal | None = None
        self.in_round = False
        self._logs: dict[PartitionLog, None] = {}
        self._waiters: dict[PartitionLog, list[_Wait]] = {}
        self._before_round: list[Callable[[], None]] = []
        self._failures: dict[PartitionLog, BaseException] = {}
        # While set, every round fails every log it covers (a disk that keeps failing).
        self.failing: BaseException | None = None
        self._scheduled = False
        self._stopping = False

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._stopping = False

    async def stop(self) -> None:
        self.run_round()
        self._stopping = True

    def register(self, log: PartitionLog) -> None:
        self._logs[log] = None

    def unregister(self, log: PartitionLog) -> None:
        self._logs.pop(log, None)
        for _off, settle, _gen in self._waiters.pop(log, []):
            settle(FlushError(f"log {log.dir} unregistered before flush", log=log))

    def poke(self) -> None:
        self._schedule()

    def before_next_round(self, fn: Callable[[], None]) -> None:
        self._before_round.append(fn)
        self._schedule()

    def fail_next_round(self, log: PartitionLog, error: BaseException | None = None) -> None:
        """The next round fails ``log``: cut back to its durable end, its waiters fail."""
        self._failures[log] = error or OSError(errno.EIO, f"sync of {log.dir} failed")

    # ------------------------------------------------------------ waiting

    async def wait_durable(
        self, log: PartitionLog, offset: int, *, generation: int | None = None
    ) -> None:
        if not self._must_wait(log, offset, generation):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._park(log, offset, functools.partial(_settle_future, fut))
        await fut

    async def wait_durable_many(
        self, targets: list[tuple[PartitionLog, int]], generations: list[int] | None = None
    ) -> None:
        gens: list[int | None] = list(generations) if generations else [None] * len(targets)
        futs = []
        for (log, offset), gen in zip(targets, gens, strict=True):
            if self._must_wait(log, offset, gen):
                fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._park(log, offset, functools.partial(_settle_future, fut))
                futs.append(fut)
        for f in futs:
            await f

    def when_durable(self, targets: Sequence[tuple[PartitionLog, int]], then: Then) -> None:
        if not targets:
            then([])
            return
        outcomes: list[BaseException | None] = [None] * len(targets)
        left = [len(targets)]

        def settle(i: int, exc: BaseException | None) -> None:
            outcomes[i] = exc
            left[0] -= 1
            if left[0] == 0:
                then(outcomes)

        for i, (log, offset) in enumerate(targets):
            try:
                wait = self._must_wait(log, offset, None)
            except Exception as exc:
                settle(i, exc)
                continue
            if wait:
                self._park(log, offset, functools.partial(settle, i))
            else:
                settle(i, None)

    def _must_wait(self, log: PartitionLog, offset: int, generation: int | None) -> bool:
        """The local Flusher's rule: raise what the wait fails with, else whether to park."""
        self.register(log)
        check_durable_wait(log, offset, generation)
        if self._stopping:
            log.flush()
            return False
        if log.config.flush_policy != "batch":
            return False
        return log.durable_end <= offset

    def _park(self, log: PartitionLog, offset: int, settle: _Settle) -> None:
        self._waiters.setdefault(log, []).append((offset, settle, log.cut_backs))
        self._schedule()

    def _schedule(self) -> None:
        if self.auto and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._auto_round)

    def _auto_round(self) -> None:
        self._scheduled = False
        self.run_round()

    # ------------------------------------------------------------ rounds

    def run_round(self) -> None:
        """One round: the ``before_next_round`` callbacks, then every waiting log is made
        durable to its end (or cut back, if ``fail_next_round`` named it) and its waiters
        are settled."""
        self.in_round = True
        try:
            callbacks, self._before_round = self._before_round, []
            for fn in callbacks:
                fn()
            waiting, self._waiters = self._waiters, {}
            if waiting:
                self.stats.rounds += 1
            for log, waits in waiting.items():
                self._settle_log(log, waits)
        finally:
            self.in_round = False

    def _settle_log(self, log: PartitionLog, waits: list[_Wait]) -> None:
        error = self._failures.pop(log, None) or self.failing
        if error is None:
            self.stats.fsync_count += 1
            self.stats.bytes_flushed += log.unflushed_bytes
            log.flush()
        else:
            self.stats.errors += 1
            log.discard_unflushed()
        end = log.durable_end
        for offset, settle, generation in waits:
            if offset < end and log.survived(offset, generation):
                self.stats.waiters_released += 1
                settle(None)
            elif isinstance(error, FlushError):
                settle(error.for_cut(log, log.log_end_offset))
            else:
                settle(
                    FlushError(
                        f"sync of {log.dir} failed; the log was cut back to offset "
                        f"{log.log_end_offset}",
                        log=log,
                        truncated_to=log.log_end_offset,
                    )
                )


def _settle_future(fut: asyncio.Future[None], exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)


if TYPE_CHECKING:
    # Never run: mypy proves that each class fits its Protocol.
    _LOG: PartitionLog = MemoryLog("check")
    _LOGS: Logs = MemoryLogs()
    _DURABILITY: Durability = MemoryDurability()
