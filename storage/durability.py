"""Making appends durable: group commit for asyncio, plus small fsync helpers.

How this works
--------------
``PartitionLog.append`` only writes to the OS.  A request handler that must
not answer before its data is on disk awaits ``Flusher.wait_durable(log,
offset)``.  What that means depends on the log's ``flush_policy``:

* ``"batch"`` (default): the waiter is parked and the flusher task wakes.  A
  round takes *all* parked waiters, captures one ``FlushTicket`` per log
  (everything appended so far), runs the fsyncs in worker threads so the event
  loop keeps serving, then releases every waiter whose offset is now below the
  log's recovery point.  Waiters arriving while a round is in flight are
  covered by the next round together, so N concurrent appends cost far fewer
  than N fsyncs (group commit).
* ``"interval"``: Kafka's ``log.flush.interval.ms`` / ``.messages``.  Waiters
  return at once; the flusher fsyncs a log when the interval elapsed or enough
  messages piled up.  The operator accepted losing the tail on power loss.
* ``"none"``: waiters return at once and only ``close()`` / ``stop()`` fsync.

A failed fsync is reported to that round's waiters of the log (and the log's
dirty state restored so the next round retries); after such an error the
page cache may have dropped the data, so callers should treat it as fatal,
as Kafka does.

Checkpoint files (small integers) are written to a temp file and renamed, so
a reader sees either the old or the new value; ``sync=True`` also fsyncs the
file and its directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.journal import Journal
    from storage.log import FlushTicket, PartitionLog

__all__ = [
    "FlushError",
    "Flusher",
    "FlusherStats",
    "fsync_dir",
    "read_checkpoint",
    "write_checkpoint",
]

logger = logging.getLogger(__name__)

_tmp_counter = itertools.count()


def fsync_dir(path: Path | str) -> None:
    """fsync a directory so creations, renames and deletions in it are durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(path: Path, value: int, *, sync: bool) -> None:
    """Atomically replace ``path`` with ``value`` (format: version line, value line)."""
    # Unique temp names: the flusher thread and the loop may write concurrently.
    tmp = path.with_name(
        f"{path.name}.{os.getpid()}.{threading.get_ident()}.{next(_tmp_counter)}.tmp"
    )
    try:
        with open(tmp, "wb") as f:
            f.write(f"0\n{value}\n".encode())
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except FileNotFoundError:
        # The partition directory was deleted under us; nothing to record.
        return
    if sync:
        fsync_dir(path.parent)


def read_checkpoint(path: Path, default: int) -> int:
    try:
        lines = path.read_text().split()
    except FileNotFoundError:
        return default
    if len(lines) == 2 and lines[0] == "0":
        try:
            return int(lines[1])
        except ValueError:
            pass
    logger.warning("ignoring unreadable checkpoint %s", path)
    return default


FSYNC_THREADS = 4


def _run_tickets(tickets: list[FlushTicket]) -> list[BaseException | None]:
    """Run fsync tickets in one worker thread; an error fails only its own ticket."""
    out: list[BaseException | None] = []
    for t in tickets:
        try:
            t.run()
            out.append(None)
        except Exception as exc:
            out.append(exc)
    return out


class FlushError(OSError):
    """fsync failed; the data may not be durable."""


@dataclass(slots=True)
class FlusherStats:
    fsync_count: int = 0  # log flushes (each fsyncs the log's dirty files)
    rounds: int = 0
    bytes_flushed: int = 0
    last_fsync_latency_ms: float = 0.0
    max_fsync_latency_ms: float = 0.0
    total_fsync_latency_ms: float = 0.0
    waiters_released: int = 0
    errors: int = 0


Clock = Callable[[], int]


def wall_clock_ms() -> int:
    """Wall-clock time in integer milliseconds: the default clock everywhere."""
    return time.time_ns() // 1_000_000


class Flusher:
    """One per server; owns the background task doing fsyncs."""

    def __init__(self, clock: Clock = wall_clock_ms) -> None:
        self._clock = clock
        self._waiters: dict[PartitionLog, list[tuple[int, asyncio.Future[None]]]] = {}
        self._logs: dict[PartitionLog, int] = {}  # log -> last flush time (ms)
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.stats = FlusherStats()
        self.journal: Journal | None = None  # set by the LogManager when logs are journaled

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._stopping = False
            self._task = asyncio.get_running_loop().create_task(self._run(), name="kgc-flusher")

    async def stop(self) -> None:
        """Finish outstanding waiters, fsync every known log, end the task."""
        self._stopping = True
        self._wakeup.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._round(all_logs=True)

    def register(self, log: PartitionLog) -> None:
        self._logs.setdefault(log, self._clock())

    def unregister(self, log: PartitionLog) -> None:
        self._logs.pop(log, None)
        for _off, fut in self._waiters.pop(log, []):
            if not fut.done():
                fut.set_exception(FlushError(f"log {log.dir} unregistered before flush"))

    def poke(self) -> None:
        """Ask for a round now (e.g. after a burst of interval-policy appends)."""
        self._wakeup.set()

    # ------------------------------------------------------------ waiting

    async def wait_durable(self, log: PartitionLog, offset: int) -> None:
        """Return once ``offset`` of ``log`` is durable as the log's policy defines."""
        fut = self._register_wait(log, offset)
        if fut is not None:
            await fut

    async def wait_durable_many(self, targets: list[tuple[PartitionLog, int]]) -> None:
        """``wait_durable`` for several logs at once: all join the same fsync round."""
        futs = [f for f in (self._register_wait(log, off) for log, off in targets) if f is not None]
        for fut in futs:
            await fut

    def _register_wait(self, log: PartitionLog, offset: int) -> asyncio.Future[None] | None:
        self.register(log)
        if offset >= log.log_end_offset:
            raise ValueError(f"offset {offset} not yet appended to {log.dir}")
        if self._stopping:
            log.flush()
            return None
        policy = log.config.flush_policy
        if policy != "batch":
            if policy == "interval" and (
                log.unflushed_messages >= log.config.flush_interval_messages
            ):
                self._ensure_started()
                self._wakeup.set()
            return None
        if log.durable_end > offset:
            return None
        self._ensure_started()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(log, []).append((offset, fut))
        self._wakeup.set()
        return fut

    def _ensure_started(self) -> None:
        if self._task is None and not self._stopping:
            self.start()

    # ------------------------------------------------------------ the task

    def _interval_timeout(self) -> float | None:
        intervals = [
            log.config.flush_interval_ms
            for log in self._logs
            if log.config.flush_policy == "interval" and not log.closed
        ]
        return min(intervals) / 1000.0 if intervals else None

    async def _run(self) -> None:
        while True:
            timeout = self._interval_timeout()
            try:
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()
            except TimeoutError:
                pass
            self._wakeup.clear()
            try:
                await self._round(all_logs=False)
            except Exception:  # never let the flusher die silently
                logger.exception("flusher round failed")

    def _due_interval_logs(self) -> list[PartitionLog]:
        now = self._clock()
        due = []
        for log, last in self._logs.items():
            cfg = log.config
            if cfg.flush_policy != "interval" or log.closed:
                continue
            if log.unflushed_messages >= cfg.flush_interval_messages or (
                now - last >= cfg.flush_interval_ms and log.unflushed_bytes > 0
            ):
                due.append(log)
        return due

    async def _sync_journal(
        self, journal: Journal, errors: dict[PartitionLog, BaseException]
    ) -> None:
        prepared = journal.prepare_sync()
        if prepared is not None:
            fd, covered = prepared
            start = time.perf_counter()
            try:
                await asyncio.to_thread(journal.run_sync, fd)
            except OSError as exc:
                journal.abort_sync(covered)
                logger.error("fsync of the journal failed: %r", exc)
                self.stats.errors += 1
                errors.update(dict.fromkeys(covered, exc))
                return
            journal.complete_sync(covered)
            st = self.stats
            st.rounds += 1
            st.fsync_count += 1
            st.last_fsync_latency_ms = (time.perf_counter() - start) * 1000.0
            st.max_fsync_latency_ms = max(st.max_fsync_latency_ms, st.last_fsync_latency_ms)
            st.total_fsync_latency_ms += st.last_fsync_latency_ms
        if journal.needs_rotation():
            # Checkpoint: new appends go to a new file; once every journaled log's
            # segments are fsynced, the older journal files hold nothing needed.
            old = journal.rotate()
            logs = [log for log in self._logs if log.journal is journal and not log.closed]
            tickets = [t for t in (log.prepare_flush() for log in logs) if t is not None]
            results = await asyncio.to_thread(_run_tickets, tickets)
            if any(r is not None for r in results):
                for t, r in zip(tickets, results, strict=True):
                    if r is not None:
                        t.log.abort_flush(t)
                logger.error(
                    "journal checkpoint: segment fsync failed; keeping %d journal files", len(old)
                )
                return
            for t in tickets:
                t.log.complete_flush(t)
            await asyncio.to_thread(journal.drop, old)

    async def _round(self, *, all_logs: bool) -> None:
        pending = self._waiters
        self._waiters = {}
        targets: dict[PartitionLog, None] = dict.fromkeys(pending)
        if all_logs:
            targets.update(dict.fromkeys(self._logs))
        else:
            targets.update(dict.fromkeys(self._due_interval_logs()))
        tickets: list[FlushTicket] = []
        for log in targets:
            if log.journal is not None and not all_logs:
                continue  # made durable by the journal's fsync below
            ticket = log.prepare_flush()
            if ticket is not None:
                tickets.append(ticket)
        errors: dict[PartitionLog, BaseException] = {}
        if self.journal is not None and not all_logs:
            await self._sync_journal(self.journal, errors)
        if tickets:
            self.stats.rounds += 1
            # A few worker threads share the tickets: fsyncs of different files overlap,
            # without one thread hop per partition.
            chunks = [tickets[i::FSYNC_THREADS] for i in range(min(FSYNC_THREADS, len(tickets)))]
            chunk_results = await asyncio.gather(
                *(asyncio.to_thread(_run_tickets, c) for c in chunks)
            )
            by_ticket = {
                id(t): r
                for c, rs in zip(chunks, chunk_results, strict=True)
                for t, r in zip(c, rs, strict=True)
            }
            results = [by_ticket[id(t)] for t in tickets]
            now = self._clock()
            for ticket, result in zip(tickets, results, strict=True):
                log = ticket.log
                if isinstance(result, BaseException):
                    log.abort_flush(ticket)
                    errors[log] = result
                    self.stats.errors += 1
                    logger.error("fsync of %s failed: %r", log.dir, result)
                    continue
                log.complete_flush(ticket)
                self._logs[log] = now
                st = self.stats
                st.fsync_count += 1
                st.bytes_flushed += ticket.bytes
                st.last_fsync_latency_ms = ticket.latency_ms
                st.max_fsync_latency_ms = max(st.max_fsync_latency_ms, ticket.latency_ms)
                st.total_fsync_latency_ms += ticket.latency_ms
        for log, waiters in pending.items():
            for offset, fut in waiters:
                if fut.done():
                    continue
                err = errors.get(log)
                if err is not None:
                    fut.set_exception(FlushError(f"fsync of {log.dir} failed: {err!r}"))
                elif log.durable_end > offset or log.closed:
                    fut.set_result(None)
                    self.stats.waiters_released += 1
                else:
                    # Appended after we captured the ticket: next round.
                    self._waiters.setdefault(log, []).append((offset, fut))
                    self._wakeup.set()
