"""Making appends durable on the local disk: group commit (one fsync round) for asyncio.

How this works
--------------
``PartitionLog.append`` only writes to the OS.  A request handler that must
not answer before its data is on disk awaits ``Flusher.wait_durable(log,
offset)``.  What that means depends on the log's ``flush_policy``:

* ``"batch"`` (default): the waiter is parked and the flusher task wakes.  A
  round takes *all* parked waiters, captures one ``FlushTicket`` per log
  (everything appended so far), runs the fsyncs off the loop so it keeps serving
  (the journal's and a single log's on the sync thread, ``files.in_sync_thread``;
  several logs' segments in worker threads, to overlap), then releases every
  waiter whose offset is now below the log's recovery point.  Waiters arriving while a round is in flight are
  covered by the next round together, so N concurrent appends cost far fewer
  than N fsyncs (group commit).
* ``"interval"``: Kafka's ``log.flush.interval.ms`` / ``.messages``.  Waiters
  return at once; the flusher fsyncs a log when the interval elapsed or enough
  messages piled up.  The operator accepted losing the tail on power loss.
* ``"none"``: waiters return at once and only ``close()`` / ``stop()`` fsync.

Every byte goes to a file through ``write_at``: it loops on short writes and raises the
OSError (ENOSPC, EIO ...) of a write that fails, so no caller can take a partial write for
a whole one. It calls ``os.pwrite``, the one point fault tests replace.

A failed fsync (of a segment or of the journal): Kafka stops the whole log directory. We
stop only trusting that log's page cache. Everything above its durable end may not be on
disk, so the log is cut back there (``PartitionLog.discard_unflushed``): every waiter of an
offset at or above the cut gets ``FlushError`` (its ``log`` and ``truncated_to`` say what
happened), every callback in ``PartitionLog.on_cut_back`` runs (the data plane and the
offsets runtime rebuild their state from the log), and the next append starts at the cut.
Nothing that was acknowledged is above the durable end, so nothing acknowledged is lost,
and nothing is acknowledged or served that was not made durable first. When the disk
recovers, appends and flushes simply succeed again.

Callers that hold no task (the offsets runtime, once per loop turn) use
``when_durable(targets, then)`` instead of awaiting: the same rule per (log, offset), but
``then`` is called with every target's outcome as soon as the last one is settled, from the
round that settles it (synchronously if all are durable already), with no task, no gather
and no future per target. Each parked waiter remembers ``log.cut_backs`` when it was
parked, so a cut-back fails only the waiters parked before it: records appended after the
cut (a rebuild inside a cut-back hook appends at once) wait for the next round as usual.

While a round is in flight nothing appended can join it, so an appender may hand its
append to ``before_next_round`` instead of making it at once: the offsets runtime gathers
the commits of every loop turn during an fsync into one append per partition, made right
before the round that covers them (one batch, one segment write and one journal record per
partition per round instead of per turn). Replies wait exactly as long as before.

Journaled logs (``log.journal``, a ``storage.interface.WriteAheadJournal``) are made
durable by their journal instead: a round calls ``journal.sync(errors)`` once for all of
them, then ``journal.checkpoint`` when it asks for one. The local journal fsyncs a file;
the PostgreSQL journal (``remote``) runs one fenced statement, and a partition whose lease
was lost fails its waiters with ``NotOwnerError``: the error a journal puts in ``errors``
for a log is the one its waiters get when it cuts that log back.

The file primitives (``write_at``, ``fsync_dir``, checkpoints) live in
``storage/files.py``, below this module, so the log, the journal and the cleaner
import them without importing the flusher.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeAlias, cast

from storage.files import in_sync_thread
from storage.interface import (
    Clock,
    DurabilityStats,
    FlushError,
    PartitionLog,
    Then,
    WriteAheadJournal,
    check_durable_wait,
    wall_clock_ms,
)
from storage.local.flush import FlushTicket, run_tickets

if TYPE_CHECKING:
    from storage.local.log import PartitionLog as LocalLog

__all__ = [
    "FlushError",
    "Flusher",
    "FlusherStats",
]

logger = logging.getLogger(__name__)

FSYNC_THREADS = 4


class Waiter(Protocol):
    """What the flusher settles: an ``asyncio.Future[None]`` or a ``when_durable`` part."""

    def done(self) -> bool: ...
    def set_result(self, result: None, /) -> None: ...
    def set_exception(self, exception: BaseException, /) -> None: ...


# A parked wait: the offset, what to settle, and ``log.cut_backs`` when it was parked.
_Wait: TypeAlias = tuple[int, Waiter, int]


class _Join:
    """``when_durable``'s targets: calls ``then`` once every part is settled."""

    __slots__ = ("left", "outcomes", "then")

    def __init__(self, n: int, then: Then) -> None:
        self.left = n
        self.outcomes: list[BaseException | None] = [None] * n
        self.then = then

    def settle(self, i: int, exc: BaseException | None) -> None:
        self.outcomes[i] = exc
        self.left -= 1
        if self.left == 0:
            try:
                self.then(self.outcomes)
            except Exception:  # the flusher's round must go on for the other waiters
                logger.exception("a when_durable continuation failed")


class _Part:
    """One target of a ``_Join``, parked like a future."""

    __slots__ = ("i", "join", "settled")

    def __init__(self, join: _Join, i: int) -> None:
        self.join = join
        self.i = i
        self.settled = False

    def done(self) -> bool:
        return self.settled

    def set_result(self, result: None, /) -> None:
        self.settled = True
        self.join.settle(self.i, None)

    def set_exception(self, exception: BaseException, /) -> None:
        self.settled = True
        self.join.settle(self.i, exception)


FlusherStats = DurabilityStats  # the name the local engine has always used


class Flusher:
    """One per server; owns the background task doing fsyncs.

    Failure contract: a waiter is released only once its offset is below the log's
    ``durable_end``. When an fsync of a log's segments fails, or the journal's sync
    fails, each affected log is cut back to its durable end
    (``PartitionLog.discard_unflushed``); this flusher is one of the log's
    ``on_cut_back`` hooks and fails every waiter of that log at or above the cut
    (parked, or in the round in flight) with ``FlushError(log=..., truncated_to=...)``.
    Waiters below the cut are released normally. Other parties that derive state from
    the log (the data plane's producer table, the offsets runtime's shard) add their
    own hook to ``PartitionLog.on_cut_back`` or compare ``PartitionLog.cut_backs``.
    """

    def __init__(
        self,
        clock: Clock = wall_clock_ms,
        *,
        remote_only: bool = False,
        journal: WriteAheadJournal | None = None,
    ) -> None:
        """``remote_only`` (cluster mode): only a remote journal makes anything durable; a
        wait on a log without one fails instead of trusting a local fsync, and ``journal``
        is that remote journal, synced every round."""
        self._clock = clock
        self.remote_only = remote_only
        self._waiters: dict[PartitionLog, list[_Wait]] = {}
        # The waiters taken by the round in flight (so a cut-back can fail them too).
        self._inflight: dict[PartitionLog, list[_Wait]] = {}
        self._logs: dict[PartitionLog, int] = {}  # log -> last flush time (ms)
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.stats = FlusherStats()
        # The journal synced every round: the one given, else the LogManager's local one;
        # the journals of the logs in a round (``log.journal``) are synced as well.
        self.journal: WriteAheadJournal | None = journal
        # The errors of the round in flight per log: a cut-back fails waiters with it.
        self._round_errors: dict[PartitionLog, BaseException] = {}
        # A round is running (its fsyncs in flight): what is appended now waits for the
        # next one. ``before_next_round`` callbacks run when that one starts.
        self.in_round = False
        self._before_round: list[Callable[[], None]] = []

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
        if log not in self._logs:
            self._logs[log] = self._clock()
            log.on_cut_back.append(self._cut_back)

    def unregister(self, log: PartitionLog) -> None:
        if self._logs.pop(log, None) is not None:
            with contextlib.suppress(ValueError):
                log.on_cut_back.remove(self._cut_back)
        for _off, fut, _gen in self._waiters.pop(log, []):
            if not fut.done():
                fut.set_exception(FlushError(f"log {log.dir} unregistered before flush", log=log))

    def _cut_back(self, log: PartitionLog, new_end: int) -> None:
        """``on_cut_back`` hook: fail every waiter of ``log`` whose offset was cut.

        Only waiters parked before this cut (``log.cut_backs`` was raised before the hooks
        run): an offset at or above ``new_end`` parked since was appended after the cut.
        """
        cause = self._round_errors.get(log)
        err = f"fsync of {log.dir} failed; the log was cut back to offset {new_end}"
        generation = log.cut_backs
        for table in (self._waiters, self._inflight):
            waiters = table.get(log)
            if not waiters:
                continue
            keep = []
            failed = []
            for wait in waiters:
                if wait[0] < new_end or wait[2] >= generation:
                    keep.append(wait)
                else:
                    failed.append(wait[1])
            table[log] = keep
            for fut in failed:
                if not fut.done():
                    # A journal's own error (NotOwnerError, a database error) when it
                    # gave one, so a fenced partition answers NOT_COORDINATOR.
                    fut.set_exception(
                        cause.for_cut(log, new_end)
                        if isinstance(cause, FlushError)
                        else FlushError(err, log=log, truncated_to=new_end)
                    )

    def before_next_round(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` when the next round starts, before it takes the parked waiters.

        For appends made while a round is in flight (``in_round``): they can only be made
        durable by the next round anyway, so an appender may gather what several loop turns
        produce and append it once, right before that round (what it parks in ``fn`` joins
        the round). The next round starts as soon as the current one ends.
        """
        self._before_round.append(fn)
        self._ensure_started()
        self._wakeup.set()

    def poke(self) -> None:
        """Ask for a round now (e.g. after a burst of interval-policy appends)."""
        self._wakeup.set()

    # ------------------------------------------------------------ waiting

    async def wait_durable(
        self, log: PartitionLog, offset: int, *, generation: int | None = None
    ) -> None:
        """Return once ``offset`` of ``log`` is durable as the log's policy defines.

        ``generation`` is ``log.cut_backs`` read when the offset was appended: if the log
        was cut back below the offset since (before this wait began), FlushError is
        raised instead of waiting for whatever was appended there afterwards.
        """
        fut = self._register_wait(log, offset, generation)
        if fut is not None:
            await fut

    async def wait_durable_many(
        self, targets: list[tuple[PartitionLog, int]], generations: list[int] | None = None
    ) -> None:
        """``wait_durable`` for several logs at once: all join the same fsync round."""
        gens: list[int | None] = list(generations) if generations else [None] * len(targets)
        futs = [
            f
            for f in (
                self._register_wait(log, off, gen)
                for (log, off), gen in zip(targets, gens, strict=True)
            )
            if f is not None
        ]
        for fut in futs:
            await fut

    def when_durable(self, targets: Sequence[tuple[PartitionLog, int]], then: Then) -> None:
        """Call ``then`` once every ``(log, offset)`` of ``targets`` is durable, as
        ``wait_durable`` defines it, with each target's outcome: None, or the exception its
        ``wait_durable`` would raise. Called from the round that settles the last target, or
        before this returns if none has to wait; never raises for a target."""
        if not targets:
            then([])
            return
        join = _Join(len(targets), then)
        for i, (log, offset) in enumerate(targets):
            part = _Part(join, i)
            try:
                wait = self._must_wait(log, offset, None)
            except Exception as exc:
                part.set_exception(exc)
                continue
            if wait:
                self._park(log, offset, part)
            else:
                part.set_result(None)

    def _register_wait(
        self, log: PartitionLog, offset: int, generation: int | None = None
    ) -> asyncio.Future[None] | None:
        if not self._must_wait(log, offset, generation):
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._park(log, offset, fut)
        return fut

    def _must_wait(self, log: PartitionLog, offset: int, generation: int | None) -> bool:
        """Whether a wait for ``offset`` of ``log`` must be parked for a round; raises
        what the wait fails with at once (False: durable already, or the policy does not
        make callers wait)."""
        if self.remote_only and (log.journal is None or not log.journal.remote):
            raise FlushError(f"{log.dir.name} is not journaled in the database", log=log)
        self.register(log)
        check_durable_wait(log, offset, generation)
        if self._stopping:
            if log.journal is not None and log.journal.remote:
                # Only the remote journal makes it durable, and its last round ran.
                raise FlushError(f"offset {offset} of {log.dir}: the flusher is stopping", log=log)
            log.flush()
            return False
        policy = log.config.flush_policy
        if policy != "batch":
            if policy == "interval" and (
                log.unflushed_messages >= log.config.flush_interval_messages
            ):
                self._ensure_started()
                self._wakeup.set()
            return False
        return log.durable_end <= offset

    def _park(self, log: PartitionLog, offset: int, waiter: Waiter) -> None:
        """Hand ``waiter`` to the next round (with the log's cut-back generation)."""
        self._ensure_started()
        waiters = self._waiters.get(log)
        if waiters is None:
            self._waiters[log] = [(offset, waiter, log.cut_backs)]
        else:
            waiters.append((offset, waiter, log.cut_backs))
        self._wakeup.set()

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
            if timeout is None:
                await self._wakeup.wait()  # no timeout context to build every round
            else:
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
        self,
        journal: WriteAheadJournal,
        errors: dict[PartitionLog, BaseException],
    ) -> None:
        """One ``sync`` of ``journal`` (then its checkpoint if due), counted in the stats."""
        st = journal.stats
        rounds, failures = st.rounds, st.errors
        await journal.sync(errors)
        if st.errors == failures and journal.needs_checkpoint():
            logs = [log for log in self._logs if log.journal is journal and not log.closed]
            await journal.checkpoint(logs, errors)
        self.stats.errors += st.errors - failures
        if st.rounds > rounds:
            mine = self.stats
            mine.rounds += 1
            mine.fsync_count += 1
            mine.last_fsync_latency_ms = st.last_latency_ms
            mine.max_fsync_latency_ms = max(mine.max_fsync_latency_ms, st.last_latency_ms)
            mine.total_fsync_latency_ms += st.last_latency_ms

    async def _round(self, *, all_logs: bool) -> None:
        self.in_round = True
        if self._before_round:
            callbacks, self._before_round = self._before_round, []
            for fn in callbacks:
                try:
                    fn()
                except Exception:  # the round must still run for everyone else's waiters
                    logger.exception("a before-round callback failed")
        pending = self._waiters
        self._waiters = {}
        if not self._before_round:
            self._wakeup.clear()  # everything parked so far is in this round
        self._inflight = pending
        try:
            await self._round_of(pending, all_logs=all_logs)
        except asyncio.CancelledError:
            # stop() cancelled the task mid-round: its final round takes these waiters
            # (a journal finishes the sync in flight first), none is left parked.
            for log, waiters in pending.items():
                self._waiters.setdefault(log, []).extend(w for w in waiters if not w[1].done())
            raise
        except Exception as exc:
            # A round that could not even start its fsyncs (e.g. no descriptor left to dup)
            # answers its waiters with an error instead of leaving them parked forever; what
            # they wrote stays appended and is synced by a later round.
            for log, waiters in pending.items():
                for _offset, fut, _gen in waiters:
                    if not fut.done():
                        fut.set_exception(
                            FlushError(f"flush of {log.dir} could not run: {exc!r}", log=log)
                        )
            raise
        finally:
            self._inflight = {}
            self._round_errors = {}
            self.in_round = False

    async def _round_of(
        self,
        pending: dict[PartitionLog, list[_Wait]],
        *,
        all_logs: bool,
    ) -> None:
        targets: dict[PartitionLog, None] = dict.fromkeys(pending)
        if all_logs:
            targets.update(dict.fromkeys(self._logs))
        else:
            targets.update(dict.fromkeys(self._due_interval_logs()))
        tickets: list[FlushTicket[LocalLog]] = []
        for log in targets:
            if log.journal is not None and not all_logs:
                continue  # made durable by the journal's fsync below
            # Registered by this engine's LogManager: its own logs, whose files it fsyncs.
            ticket = cast("LocalLog", log).prepare_flush()
            if ticket is not None:
                tickets.append(ticket)
        errors: dict[PartitionLog, BaseException] = {}
        self._round_errors = errors
        journals: dict[WriteAheadJournal, None] = {}
        if self.journal is not None:
            journals[self.journal] = None
        for log in targets:
            if log.journal is not None:
                journals[log.journal] = None
        for journal in journals:
            # At stop() every log's segments are fsynced below, which makes the local
            # journal's records redundant; a remote journal is the only durable copy.
            if not all_logs or journal.remote:
                await self._sync_journal(journal, errors)
        if tickets:
            self.stats.rounds += 1
            # A few worker threads share the tickets: fsyncs of different files overlap,
            # without one thread hop per partition.
            chunks = [tickets[i::FSYNC_THREADS] for i in range(min(FSYNC_THREADS, len(tickets)))]
            if len(chunks) == 1:
                # One log to fsync (a single produced partition): the sync thread, at a
                # fraction of a thread pool's cost per call (files.in_sync_thread).
                chunk_results = [await in_sync_thread(run_tickets, chunks[0])]
            else:
                chunk_results = await asyncio.gather(
                    *(asyncio.to_thread(run_tickets, c) for c in chunks)
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
                    errors[log] = result
                    self.stats.errors += 1
                    logger.error("fsync of %s failed: %r", log.dir, result)
                    if log.journal is not None:
                        # Durable in the journal up to durable_end; keep its files.
                        log.abort_flush(ticket)
                        log.journal.pin(f"fsync of {log.dir.name} failed")
                    log.discard_unflushed()  # fails the waiters above the cut (hook)
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
            for wait in waiters:
                offset, fut, _gen = wait
                if fut.done():
                    continue
                err = errors.get(log)
                if log.durable_end > offset or log.closed:
                    fut.set_result(None)
                    self.stats.waiters_released += 1
                elif err is not None:
                    fut.set_exception(
                        FlushError(
                            f"fsync of {log.dir} failed: {err!r}",
                            log=log,
                            truncated_to=log.log_end_offset,
                        )
                    )
                else:
                    # Appended after we captured the ticket: next round.
                    self._waiters.setdefault(log, []).append(wait)
                    self._wakeup.set()
