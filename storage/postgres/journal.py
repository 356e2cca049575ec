"""PgJournal: PostgreSQL as the remote write-ahead journal of the local partition logs.

How this works
--------------
In cluster mode every partition this node owns is still a local ``PartitionLog`` (a cache
under the data dir); ``attach(log, lease)`` makes this journal the log's ``journal``. Every
batch the log stores is handed to ``record`` and buffered. The ``Flusher`` calls ``sync``
once per group-commit round, and the round becomes durable in ONE statement on ONE
dedicated connection (design notes §7.2): a data-modifying CTE that

1. advances ``kgc_partition.next_offset`` from the expected value to the round's end for
   every partition touched, only where this node still owns the lease
   (``owner_node``, ``owner_broker_epoch``, ``epoch``) and ``next_offset`` is the expected
   one: the fence is in the write itself, so a node that was paused, cut off or replaced
   can never write under an old lease;
2. inserts the round's batches (concatenated, as stored locally; rows capped at ~1 MiB)
   into ``kgc_record_log``, joined to the partitions the UPDATE accepted;
3. inserts the group history noted for those partitions (``note_history``) into
   ``kgc_group_history``, joined the same way (``storage.postgres.rounds``).

Accepted partitions advance ``log.journal_durable_end`` (the Flusher then releases their
waiters). A refused partition lost its lease: its log is cut back to its durable end with
``NotOwnerError`` (its waiters get it), every ``on_fenced`` callback learns
``(topic, partition)``, and it stays refused (``record`` raises) until attached again.

Failures (notes §3.9, pitfalls 6 and 7):

* a database error the server reported (statement timeout, constraint...) rolled the
  statement back: the round's logs are cut back with ``FlushError``; 40001/40P01 are
  retried once first (the CAS on ``next_offset`` makes a retry safe);
* a connection lost during the statement is an ambiguous commit: the old backend is
  terminated (so it cannot commit later), a new connection reads the lease rows, and
  ``next_offset`` = the round's end (same epoch) means it landed, = the expected value
  means it did not (it is tried once more on the new connection, e.g. after a database
  restart killed the idle connection; if that fails too the waiters get FlushError, an
  answer clients retry), anything else means the lease moved (NotOwnerError);
* no database: every waiter fails at once with FlushError and the logs are cut back; the
  next round reconnects by itself (with a backoff), so kgc recovers without a restart.
* a failed round's group history that describes no record of its own (membership changes
  without records) is put back for the partition's next round (``_history_again``); not
  a fenced round's, nor one whose outcome stayed unknown.

Nothing is acknowledged before the statement returned, and no waiter is left parked: every
round ends each touched log either durable or cut back.

Retention and compaction (``storage.postgres.compaction``): ``trim(log, start)`` (the log
start moved) and ``compacted(log, upto)`` (the cleaner finished a pass) note the work on
the partition and wake a background task that runs it on a maintenance connection of its
own, off the commit path: trims delete the rows below the new start and raise the lease's
``log_start_offset``; compactions replace the rows below the cleaned offset by the local
log's cleaned batches. Both are fenced on the lease and leave every row a round may write
untouched. A failure is retried with a backoff while the partition stays attached;
``maintain()`` runs what is pending now (tests, shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import asyncpg

from storage.interface import FlushError, JournalStats, Lease, NotOwnerError, PartitionLog
from storage.postgres import compaction
from storage.postgres.rounds import (
    LEASES_SQL,
    MAX_ROW_BYTES,
    ROUND_SQL,
    Part,
    Round,
    round_args,
    rows_of,
)
from storage.record_batch import verify_crc

__all__ = ["MAX_ROW_BYTES", "PgJournal", "RewriteResult", "TrimResult"]

RewriteResult = compaction.RewriteResult
TrimResult = compaction.TrimResult

logger = logging.getLogger(__name__)

_BACKOFF_MIN_S = 0.05
_BACKOFF_MAX_S = 1.0
_CONNECT_TIMEOUT_S = 2.0
_MAINT_BACKOFF_MAX_S = 5.0


# Errors after which the statement's outcome is unknown (the connection went away).
_AMBIGUOUS = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,
    # Seen once after the server ended the connection at a restart: the next statement on
    # it was refused client-side, its state unknown to us; treat it like a lost connection.
    asyncpg.InternalClientError,
)
_RETRY_ONCE = (asyncpg.SerializationError, asyncpg.DeadlockDetectedError)


def _name_of(log: PartitionLog) -> tuple[str, int]:
    topic, _sep, part = log.dir.name.rpartition("-")
    return topic, int(part) if part.isdigit() else -1


class PgJournal:
    """The PostgreSQL journal of the partitions this node owns (one writer connection)."""

    remote = True  # the local log is a cache: only a committed round is durable

    def __init__(
        self,
        url: str,
        node_id: int,
        *,
        application_name: str,
        statement_timeout_ms: int = 5000,
        maintenance_lock_timeout_ms: int = 2000,
    ) -> None:
        self.url = url
        self.node_id = node_id
        self.application_name = application_name
        self.statement_timeout_ms = statement_timeout_ms
        self.broker_epoch = -1  # set by the cluster layer at registration
        self.on_fenced: list[Callable[[str, int], None]] = []
        self.stats = JournalStats()
        self._conn: Any = None  # asyncpg.Connection (dedicated to the rounds)
        self._parts: dict[PartitionLog, Part] = {}
        self._lock = asyncio.Lock()  # rounds are serial (notes pitfall 5)
        self._backoff_s = 0.0
        self._next_connect = 0.0  # monotonic time before which no reconnect is tried
        self._closed = False
        # Retention and compaction: their own connection and task (never the writer's).
        self.maintenance_application_name = application_name.removesuffix("-writer") + (
            "-maintenance"
        )
        # The maintenance connection never waits long for a lock (a round holds the lease
        # row for a millisecond; longer is a takeover in progress: try again later).
        self.maintenance_lock_timeout_ms = maintenance_lock_timeout_ms
        self._maint_conn: Any = None
        self._maint_lock = asyncio.Lock()  # one trim or compaction at a time
        self._maint_task: asyncio.Task[None] | None = None
        self.last_rewrite: compaction.RewriteResult | None = None
        self.last_trim: compaction.TrimResult | None = None

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._closed = False
        await self._connect()

    async def close(self) -> None:
        self._closed = True
        task, self._maint_task = self._maint_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        maint, self._maint_conn = self._maint_conn, None
        if maint is not None:
            maint.terminate()  # idle, or in a transaction the cancel interrupted: roll back
        async with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                try:
                    await asyncio.wait_for(conn.close(), 2.0)
                except Exception:
                    conn.terminate()

    async def _connect(self) -> Any:
        conn = await asyncpg.connect(
            self.url,
            timeout=_CONNECT_TIMEOUT_S,
            server_settings={
                "application_name": self.application_name,
                "statement_timeout": str(self.statement_timeout_ms),
                "idle_in_transaction_session_timeout": "10000",
            },
        )
        self._conn = conn
        self._backoff_s = 0.0
        return conn

    async def _connection(self) -> Any:
        """The writer connection, reconnecting (at most once per backoff period)."""
        if self._conn is not None and not self._conn.is_closed():
            return self._conn
        self._conn = None
        if self._closed:
            raise FlushError("the PostgreSQL journal is closed")
        now = time.monotonic()
        if now < self._next_connect:
            raise FlushError(
                f"PostgreSQL unavailable (next reconnect in {self._next_connect - now:.2f} s)"
            )
        try:
            return await self._connect()
        except Exception as exc:
            self._backoff_s = min(max(self._backoff_s * 2, _BACKOFF_MIN_S), _BACKOFF_MAX_S)
            self._next_connect = time.monotonic() + self._backoff_s
            raise FlushError(f"PostgreSQL unavailable: {exc!r}") from exc

    def _drop_connection(self) -> int | None:
        """Abandon the writer connection; returns its backend pid (None if unknown)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return None
        pid: int | None = None
        with contextlib.suppress(Exception):
            pid = int(conn.get_server_pid())
        conn.terminate()
        return pid

    # ------------------------------------------------------------ partitions

    def attach(self, log: PartitionLog, lease: Lease) -> None:
        """Journal ``log`` under ``lease``; the log must end at the lease's next_offset."""
        if log.log_end_offset != lease.next_offset:
            raise ValueError(
                f"{log!r} ends at {log.log_end_offset}, the lease of "
                f"{lease.topic}-{lease.partition} at {lease.next_offset}"
            )
        self._parts[log] = Part(lease.topic, lease.partition, lease.epoch, lease.next_offset)
        log.journal = self
        log.journal_durable_end = lease.next_offset

    def detach(self, log: PartitionLog) -> None:
        """Stop journaling ``log`` (hand-off, fencing); anything not yet durable is cut.

        The log keeps this journal, so later appends are refused with NotOwnerError.
        """
        part = self._parts.pop(log, None)
        if part is not None and log.log_end_offset > log.journal_durable_end:
            log.discard_unflushed()

    def lease_of(self, log: PartitionLog) -> tuple[str, int, int] | None:
        """(topic, partition, epoch) ``log`` is journaled under, or None if not attached."""
        part = self._parts.get(log)
        return None if part is None else (part.topic, part.partition, part.epoch)

    def trim(self, log: PartitionLog, before_offset: int) -> None:
        """The log start moved: in the background, delete the rows wholly below
        ``before_offset`` and raise the lease's ``log_start_offset`` (fenced)."""
        part = self._parts.get(log)
        if part is not None:
            part.trim_before = max(part.trim_before or 0, before_offset)
            self._kick()

    def compacted(self, log: PartitionLog, upto: int) -> None:
        """The cleaner finished a pass below ``upto``: in the background, replace the rows
        below it by the log's cleaned batches (fenced; see storage.postgres.compaction)."""
        part = self._parts.get(log)
        if part is not None:
            part.compact_upto = max(part.compact_upto or 0, upto)
            self._kick()

    # ------------------------------------------------------------ WriteAheadJournal

    def _attached(self, log: PartitionLog) -> Part:
        """``log``'s lease state, or NotOwnerError when this node does not hold its lease."""
        part = self._parts.get(log)
        if part is None:
            topic, partition = _name_of(log)
            raise NotOwnerError(
                f"{topic}-{partition}: this node does not hold the partition's lease",
                topic=topic,
                partition=partition,
                log=log,
            )
        return part

    def record(self, log: PartitionLog, batch: bytes) -> None:
        part = self._attached(log)
        part.pending.append(batch)

    def carry(self, log: PartitionLog, offset: int, timestamp_ms: int, value: bytes) -> bool:
        """Not here: a round's rows must hold whole batches (the materialized log)."""
        return False

    def note_history(self, log: PartitionLog, written_ms: int, value: bytes) -> None:
        """Write ``value`` (a group history value of the offsets partition of ``log``) to
        kgc_group_history in the round that makes the log's records so far durable, only
        if that round keeps the lease (``storage.postgres.rounds``). Raises NotOwnerError
        if the log is not attached."""
        part = self._attached(log)
        part.history.append((log.log_end_offset, written_ms, value))

    def discard_unsynced(self) -> list[PartitionLog]:
        """A log was cut back: forget its buffered batches that the cut removed.

        The partitions are independent, so no other log is affected.
        """
        for log, part in self._parts.items():
            if part.pending or part.history:
                end = log.log_end_offset
                part.pending = [b for b in part.pending if _base_of(b) < end]
                # History describes records up to its log end: gone with them.
                part.history = [h for h in part.history if h[0] <= end]
        return []

    def pin(self, reason: str) -> None:
        # A local fsync failed; the database holds everything durable, nothing to keep.
        logger.warning("PostgreSQL journal: local cache: %s", reason)

    def needs_checkpoint(self) -> bool:
        return False

    async def checkpoint(
        self, logs: list[PartitionLog], errors: dict[PartitionLog, BaseException]
    ) -> None:
        return None

    async def sync(self, errors: dict[PartitionLog, BaseException]) -> None:
        """Make everything recorded so far durable in one statement (see the module doc)."""
        # Shielded: a cancelled Flusher round must not abandon a statement half-way (the
        # next round waits on the lock for it to finish).
        await asyncio.shield(self._sync_serial(errors))

    async def _sync_serial(self, errors: dict[PartitionLog, BaseException]) -> None:
        async with self._lock:
            batch = self._capture(errors)
            if batch:
                try:
                    await self._run_round(batch, errors)
                except BaseException as exc:
                    # Whatever escaped, the batches taken for this round are not durable:
                    # cut their logs back now (with their waiters), or the journal and the
                    # logs would disagree on where the next round starts.
                    err = FlushError(f"PostgreSQL round failed: {exc!r}")
                    for r in batch:
                        if r.log not in errors:
                            self._fail(r.log, err, errors)
                    raise
                finally:
                    self._history_again(batch, errors)

    def _history_again(self, batch: list[Round], errors: dict[PartitionLog, BaseException]) -> None:
        """A failed round (rolled back: none of it was written) puts back the history values
        that describe no record of its own -- membership changes without records, noted at
        the round's expected offset -- before anything noted since, for the partition's next
        round. Values following its records go with them (those commits failed, the log
        was cut back); a fenced round's go with the partition (another node's now, which
        writes the group's history from there), and so do those of a round whose outcome
        is unknown (``_resolve`` empties them: it may have landed)."""
        for r in batch:
            err = errors.get(r.log)
            if not r.history or err is None or isinstance(err, NotOwnerError):
                continue
            if self._parts.get(r.log) is not r.part:
                continue
            again = [h for h in r.history if h[0] <= r.expected]
            if again:
                r.part.history[:0] = again

    # ------------------------------------------------------------ the round

    def _capture(self, errors: dict[PartitionLog, BaseException]) -> list[Round]:
        out: list[Round] = []
        for log, part in list(self._parts.items()):
            if not part.pending:
                if part.history:  # history alone: the lease is checked, nothing appended
                    history, part.history = part.history, []
                    out.append(
                        Round(log, part, part.expected, part.expected, log.cut_backs, [], history)
                    )
                continue
            batches, part.pending = part.pending, []
            history, part.history = part.history, []
            try:
                rows, first, new_next = rows_of(batches)
                if first != part.expected:
                    raise ValueError(f"first batch at {first}, expected {part.expected}")
            except ValueError as exc:
                self._fail(log, FlushError(f"{log.dir.name}: {exc}", log=log), errors)
                continue
            out.append(Round(log, part, part.expected, new_next, log.cut_backs, rows, history))
        return out

    async def _run_round(
        self,
        batch: list[Round],
        errors: dict[PartitionLog, BaseException],
        *,
        retry: bool = True,
    ) -> None:
        args = round_args(self.node_id, self.broker_epoch, batch)
        start = time.perf_counter()
        try:
            conn = await self._connection()
        except FlushError as exc:
            self.stats.errors += 1
            for r in batch:
                self._fail(r.log, exc, errors)
            return
        accepted: set[int] | None = None
        for attempt in (1, 2):
            try:
                records = await conn.fetch(
                    ROUND_SQL, *args, timeout=self.statement_timeout_ms / 1000.0 + 2.0
                )
                accepted = {int(rec["i"]) for rec in records}
                break
            except _RETRY_ONCE as exc:
                if attempt == 2:
                    self._failed_round(batch, exc, errors)
                    return
                await asyncio.sleep(random.uniform(0.001, 0.01))
            except _AMBIGUOUS as exc:
                again = await self._resolve(batch, exc, errors)
                if again and retry:
                    # It did not commit (e.g. the connection had died while idle, at a
                    # database restart): one more try on the new connection; the CAS on
                    # next_offset makes it safe.
                    await self._run_round(again, errors, retry=False)
                else:
                    for r in again:
                        err = FlushError(f"PostgreSQL round did not commit: {exc!r}", log=r.log)
                        self._fail(r.log, err, errors)
                return
            except asyncpg.PostgresError as exc:
                self._failed_round(batch, exc, errors)
                return
        assert accepted is not None
        latency_ms = (time.perf_counter() - start) * 1000.0
        st = self.stats
        st.note_round(latency_ms)
        for idx, r in enumerate(batch, start=1):
            if idx in accepted:
                st.rows += len(r.rows)
                st.bytes += sum(len(row[4]) for row in r.rows)
                self._landed(r, errors)
            else:
                self._fence(r, "the lease was lost (owner, epoch or offset moved)", errors)

    def _landed(self, r: Round, errors: dict[PartitionLog, BaseException]) -> None:
        r.part.expected = r.new_next
        if r.log.cut_backs != r.generation:
            # The local log was cut (a local fsync failed) while the round was in flight:
            # the database holds batches the cache no longer has. Only a reload fixes it.
            self._fence(r, "the local log was cut back during a committed round", errors)
            return
        r.log.journal_durable_end = max(r.log.journal_durable_end, r.new_next)

    def _failed_round(
        self, batch: list[Round], exc: BaseException, errors: dict[PartitionLog, BaseException]
    ) -> None:
        logger.error("PostgreSQL journal: round failed: %r", exc)
        self.stats.errors += 1
        err = FlushError(f"PostgreSQL round failed: {exc!r}")
        for r in batch:
            self._fail(r.log, err, errors)

    def _fail(
        self, log: PartitionLog, exc: FlushError, errors: dict[PartitionLog, BaseException]
    ) -> None:
        """Not durable: the waiters get ``exc`` and the log is cut back to its durable end."""
        errors[log] = exc
        log.discard_unflushed()  # also drops the pending batches above the cut

    def _fence(self, r: Round, why: str, errors: dict[PartitionLog, BaseException]) -> None:
        """The round of ``r`` was refused: cut back with NotOwnerError, stay refused."""
        log, part = r.log, r.part
        if self._parts.get(log) is part:
            del self._parts[log]
        self.stats.fenced += 1
        logger.warning(
            "PostgreSQL journal: %s-%d refused at epoch %d: %s",
            part.topic,
            part.partition,
            part.epoch,
            why,
        )
        errors[log] = NotOwnerError(
            f"{part.topic}-{part.partition}: not the owner: {why}",
            topic=part.topic,
            partition=part.partition,
            log=log,
        )
        log.discard_unflushed()
        for cb in list(self.on_fenced):
            try:
                cb(part.topic, part.partition)
            except Exception:
                logger.exception("on_fenced callback failed")

    async def _resolve(
        self, batch: list[Round], exc: BaseException, errors: dict[PartitionLog, BaseException]
    ) -> list[Round]:
        """The connection died during the round statement: did it commit?

        Settles the rounds that landed or were fenced; returns those that did not commit
        (the lease is still ours at the expected offset) and whose log was not cut since.
        """
        logger.warning("PostgreSQL journal: connection lost during a round (%r); resolving", exc)
        self.stats.errors += 1
        old_pid = self._drop_connection()
        try:
            conn = await self._connection()
            if old_pid is not None:
                # The old backend may still be running the statement: end it first, so it
                # cannot commit after we read the lease rows.
                await conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE pid = $1 AND application_name = $2",
                    old_pid,
                    self.application_name,
                )
                for _ in range(100):
                    alive = await conn.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", old_pid
                    )
                    if not alive:
                        break
                    await asyncio.sleep(0.02)
            rows = await conn.fetch(
                LEASES_SQL,
                [r.part.topic for r in batch],
                [r.part.partition for r in batch],
                timeout=self.statement_timeout_ms / 1000.0 + 2.0,
            )
        except Exception as exc2:
            # Unknown outcome: fail the waiters (an error answer is fine, a lost ack is not).
            # If the round did land, the next round's CAS on next_offset refuses it.
            self._drop_connection()
            err = FlushError(f"PostgreSQL round outcome unknown: {exc!r}; then {exc2!r}")
            for r in batch:
                r.history = []  # it may have landed: not written again (``_history_again``)
                self._fail(r.log, err, errors)
            return []
        again: list[Round] = []
        leases = {(row["topic"], row["partition"]): row for row in rows}
        for r in batch:
            row = leases.get((r.part.topic, r.part.partition))
            mine = (
                row is not None
                and row["owner_node"] == self.node_id
                and row["owner_broker_epoch"] == self.broker_epoch
                and row["epoch"] == r.part.epoch
            )
            if mine and row is not None and row["next_offset"] == r.new_next:
                self.stats.rows += len(r.rows)
                self._landed(r, errors)
            elif mine and row is not None and row["next_offset"] == r.expected:
                if r.log.cut_backs == r.generation:
                    again.append(r)
                else:
                    err = FlushError(f"PostgreSQL round did not commit: {exc!r}", log=r.log)
                    self._fail(r.log, err, errors)
            else:
                self._fence(r, "the lease moved while the round's outcome was unknown", errors)
        return again

    # ------------------------------------------------------------ maintenance

    def _kick(self) -> None:
        """Start the maintenance task if it is not running (needs a running loop; without
        one the work waits for ``maintain()``)."""
        if self._closed or (self._maint_task is not None and not self._maint_task.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._maint_task = loop.create_task(self._maintenance_loop())

    def _maintenance_pending(self) -> bool:
        return any(
            p.trim_before is not None or p.compact_upto is not None for p in self._parts.values()
        )

    async def _maintenance_loop(self) -> None:
        delay = 0.0
        while not self._closed and self._maintenance_pending():
            if delay:
                await asyncio.sleep(delay)
            failed = await self.maintain()
            delay = min(max(delay * 2, 0.1), _MAINT_BACKOFF_MAX_S) if failed else 0.0

    async def maintain(self) -> bool:
        """Run every pending trim and compaction once; True if one failed (kept pending).

        A partition detached or fenced meanwhile drops its pending work.
        """
        failed = False
        async with self._maint_lock:
            for log, part in list(self._parts.items()):
                if part.trim_before is not None and self._parts.get(log) is part:
                    failed |= not await self._run_trim(log, part)
                if part.compact_upto is not None and self._parts.get(log) is part:
                    failed |= not await self._run_compaction(log, part)
        return failed

    async def _maint_connection(self) -> Any:
        if self._maint_conn is not None and not self._maint_conn.is_closed():
            return self._maint_conn
        self._maint_conn = await asyncpg.connect(
            self.url,
            timeout=_CONNECT_TIMEOUT_S,
            server_settings={
                "application_name": self.maintenance_application_name,
                "statement_timeout": str(self.statement_timeout_ms),
                "lock_timeout": str(self.maintenance_lock_timeout_ms),
                "idle_in_transaction_session_timeout": "10000",
            },
        )
        return self._maint_conn

    def _maint_failed(self, what: str, part: Part, exc: BaseException) -> None:
        self.stats.maintenance_errors += 1
        if isinstance(exc, _AMBIGUOUS) and self._maint_conn is not None:
            self._maint_conn.terminate()  # a transaction's outcome is decided by the server
            self._maint_conn = None
        logger.warning(
            "PostgreSQL journal: %s of %s-%d failed (retried later): %r",
            what,
            part.topic,
            part.partition,
            exc,
        )

    async def _run_trim(self, log: PartitionLog, part: Part) -> bool:
        before, part.trim_before = part.trim_before, None
        assert before is not None
        try:
            conn = await self._maint_connection()
            result = await compaction.trim(
                conn,
                topic=part.topic,
                partition=part.partition,
                node_id=self.node_id,
                broker_epoch=self.broker_epoch,
                epoch=part.epoch,
                before=before,
            )
        except compaction.FencedError as exc:
            # The next round finds out too and fences the partition; nothing to retry.
            self.stats.maintenance_errors += 1
            logger.warning("PostgreSQL journal: trim refused: %s", exc)
            return True
        except Exception as exc:
            part.trim_before = max(part.trim_before or 0, before)
            self._maint_failed("trim", part, exc)
            return False
        self.stats.trims += 1
        self.last_trim = result
        logger.debug(
            "PostgreSQL journal: %s-%d log start %d (%d rows deleted)",
            part.topic,
            part.partition,
            result.log_start_offset,
            result.rows_deleted,
        )
        return True

    async def _run_compaction(self, log: PartitionLog, part: Part) -> bool:
        upto, part.compact_upto = part.compact_upto, None
        assert upto is not None
        # Only what the database already holds: batches above the durable end may still be
        # in a round (or be cut back).
        upto = min(upto, log.journal_durable_end)
        try:
            conn = await self._maint_connection()
            cut = await compaction.find_cut(conn, part.topic, part.partition, upto)
            if cut is None or cut <= log.log_start_offset or self._parts.get(log) is not part:
                return True  # at most one row below: nothing to gain; or detached
            if log.closed or log.damaged is not None:
                return True
            # Read at once, with no await in between: the cleaner or retention may change
            # the segments at the next await. Every batch's CRC is checked: the database
            # holds the only durable copy, it must never receive a damaged one.
            batches = []
            for h, data in log.iter_batches(0):
                if h.base_offset >= cut:
                    break
                if not verify_crc(data, 0, len(data)):
                    log.mark_damaged(f"CRC mismatch in the batch at offset {h.base_offset}")
                    raise ValueError(f"CRC mismatch in the local batch at {h.base_offset}")
                batches.append((h, data))
            rows = compaction.cleaned_rows(batches, MAX_ROW_BYTES, part.epoch)
            result = await compaction.rewrite(
                conn,
                topic=part.topic,
                partition=part.partition,
                node_id=self.node_id,
                broker_epoch=self.broker_epoch,
                epoch=part.epoch,
                cut=cut,
                rows=rows,
            )
        except compaction.FencedError as exc:
            self.stats.maintenance_errors += 1
            logger.warning("PostgreSQL journal: compaction refused, nothing changed: %s", exc)
            return True
        except ValueError as exc:
            self.stats.maintenance_errors += 1
            logger.error(
                "PostgreSQL journal: compaction of %s-%d skipped: %s",
                part.topic,
                part.partition,
                exc,
            )
            return True
        except Exception as exc:
            part.compact_upto = max(part.compact_upto or 0, upto)
            self._maint_failed("compaction", part, exc)
            return False
        self.stats.compactions += 1
        self.last_rewrite = result
        logger.info(
            "PostgreSQL journal: compacted %s-%d below offset %d: %d rows / %d bytes -> "
            "%d rows / %d bytes",
            part.topic,
            part.partition,
            result.cut,
            result.rows_before,
            result.bytes_before,
            result.rows_after,
            result.bytes_after,
        )
        return True


def _base_of(batch: bytes) -> int:
    return int.from_bytes(batch[:8], "big", signed=True)
