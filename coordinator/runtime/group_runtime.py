"""The group runtime: the only place where the pure group core meets I/O and time.

How this works: a request becomes ``shard.<api>(ctx, request, now_ms)``, which returns a
``Result``: records to append to the offsets log, replies (for this request and perhaps for
requests parked earlier, each identified by the ``reply_to`` handle the runtime gave it) and
timer operations. The runtime

1. keeps one wake-up on the event loop for the earliest deadline of the shard's timer table
   (``coordinator/group/timers.py``: the only table of timers; a Result's ``wakeup`` says
   when a new timer comes before it). When it fires, every due timer is taken from the
   table and handed to ``shard.on_timer``, whose Result is handled like a request's;
   then the wake-up is set for the next deadline;
2. appends the records to their ``__consumer_offsets`` partitions (a write to the OS, in
   order, on the loop thread) and, only once the flusher reports them durable under the
   configured policy, releases the replies. A Result without records replies at once.
   The records of one loop turn are appended together at its end (one batch per
   partition); while an fsync round is in flight, those of every turn until it ends are
   gathered and appended as the next round starts, the only round that can cover them.
   A reply goes out through the request's ``Pending`` (server/handler.py), whose
   callback hands it to the connection right there: releasing a round of commits costs
   no task, no gather and no loop hop per request (``Flusher.when_durable`` calls back
   once per append).

Share groups' ``ShareStateInitializing`` events go to the share coordinator (``share_init.py``).

At start-up every offsets partition is replayed into the shard in the background; until a
partition is loaded, the shard answers COORDINATOR_LOAD_IN_PROGRESS for its groups. Timers
are never persisted: ``load_complete`` re-arms them.

Failures stay inside one offsets partition:

* Replay checks every batch's CRC. A corrupt batch (or a record that does not decode) fails
  that partition's load only: one ERROR line names the file and position, the log is marked
  damaged (metrics and ``kgc health`` report it) and its groups answer NOT_COORDINATOR, as
  Kafka's CoordinatorRuntime answers for a partition whose load failed (state FAILED). We do
  not load the prefix before the damage: that would silently roll back acknowledged commits
  and serve them as if they were current. The other partitions load and serve.
* A failed append (OSError: disk full, I/O error) or a failed fsync (``FlushError``, the log
  cut back to its durable end) answers every reply that depended on that partition's records
  with NOT_COORDINATOR -- Kafka's coordinator maps KAFKA_STORAGE_ERROR to it -- in the
  reply's own shape; replies that depended only on other partitions are released as usual.
  The partition is then rebuilt from its log, so the shard keeps nothing that did not
  become durable. The group history such a round carried goes again with the next write
  (``_history_failed``), but for the partitions whose own records failed.
* A request the shard cannot handle (a bug) is answered UNKNOWN_SERVER_ERROR in its API's
  shape, and the group's partition is rebuilt from the log in case the shard had changed
  part of it: the connection stays open and no half-applied change survives.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from coordinator.group.events import render
from coordinator.group.partitions import PartitionStatus
from coordinator.group.shard import GroupShard, RequestContext, Result
from coordinator.group.types import TxnBatch
from coordinator.history.store import HistoryLog
from coordinator.history.table import HistoryTable
from coordinator.runtime import share_init
from coordinator.runtime.history import Membership, Taken, history_retention
from coordinator.runtime.older_history import OlderHistory
from coordinator.runtime.replay import CorruptOffsetsLog, replay_partition
from coordinator.runtime.responses import storage_error_reply
from coordinator.runtime.txn_commit import Verifier, append_with_txns
from coordinator.server.handler import ClientInfo, Deferred, Pending
from protocol.error_responses import error_response
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from storage.interface import Durability, LogConfig, Logs, PartitionLog, wall_clock_ms
from storage.records import OFFSETS_TOPIC

log = logging.getLogger("kgc.groups")
_new_ctx = tuple.__new__

Clock = Callable[[], int]
# Replies waiting for the records of one Result: the offsets partitions those went to.
_Waiting = tuple[frozenset[int], list[tuple[int, Any]]]
# A reply without records of its own parked behind Results not yet settled: per partition
# the count of settled Results it waits for and of failed ones when it was parked.
_Parked = tuple[dict[int, int], dict[int, int], int, Any]
_TIMERS_PER_TURN = 64
# History of a failed round that no other write took within this long is written again
# by a round of its own (a broken disk then retries at this pace, not in a loop).
_HISTORY_RETRY_S = 1.0


_BATCH_OVERHEAD = 61  # a RecordBatch v2 header
# ``frozenset((p,))`` per offsets partition: what a one-partition Result waits for.
_ONE: dict[int, frozenset[int]] = {}


def _journal_covers(log: PartitionLog, targets: list[tuple[PartitionLog, int]]) -> bool:
    """Whether the fsync that makes ``targets`` durable makes what ``log`` holds durable
    too: a local journal of theirs and its (one file, synced whole; a remote journal's
    round fences each partition on its own)."""
    journal = log.journal
    if journal is None or journal.remote or not targets:
        return False
    for plog, _ in targets:  # noqa: SIM110 (once a round: a loop, no generator's frame)
        if plog.journal is not journal:
            return False
    return True


def _batches(
    records: list[tuple[bytes, bytes | None]], ends: list[tuple[int, int]], config: LogConfig
) -> Iterator[list[tuple[bytes, bytes | None]]]:
    """``records`` in batches under max.message.bytes, cut only where a Result ends.

    Kafka's coordinator runtime does the same: it starts a new batch when an operation's
    records do not fit the current one. One Result larger than the limit is still one
    batch (the log refuses it, and the partition's requests fail as for any failed write).
    """
    limit = config.max_message_bytes - _BATCH_OVERHEAD
    total = 0
    for _, result_size in ends:
        total += result_size
    if total <= limit:
        yield records
        return
    start = cut = 0
    size = 0
    for end, result_size in ends:
        if size and size + result_size > limit:
            yield records[start:cut]
            start, size = cut, 0
        size += result_size
        cut = end
    if start < len(records):
        yield records[start:]


class GroupRuntime:
    def __init__(
        self,
        shard: GroupShard,
        logs: Logs,
        flusher: Durability,
        *,
        num_partitions: int,
        log_config: LogConfig,
        clock: Clock = wall_clock_ms,
        metrics: Any = None,
        hosted: bool = True,
        history: HistoryLog | HistoryTable | None = None,
    ) -> None:
        """``hosted=False`` (cluster mode): no partition is this node's until ``acquire``.
        ``history``: where the groups' history goes (None: none is kept; a HistoryTable in
        cluster mode, set by the cluster node)."""
        self.shard = shard
        self.logs = logs
        self.flusher = flusher
        self.clock = clock
        self.metrics = metrics
        self.num_partitions = num_partitions
        # The groups' history (``coordinator.history``): each turn's offset changes and
        # membership changes, appended beside its offsets batches, durable in their round.
        self.history = history
        # The history this process does not write (a worker count changed between runs):
        # read beside ``history`` by DescribeGroupHistory, set by the node (``older_history``).
        self.older_history: OlderHistory | None = None
        self.membership = Membership()
        # History entries of rounds that failed (the log was cut back, nothing was appended
        # for them), oldest first: the next write puts them before the turn's own.
        self.history_again: list[Taken] = []
        self._history_retry: asyncio.TimerHandle | None = None
        # The offsets partitions this node coordinates, with their logs: all of them on a
        # single node; in cluster mode those whose lease it holds (``acquire``/``release``).
        self.partitions: dict[int, PartitionLog] = (
            {p: logs.get_or_create(OFFSETS_TOPIC, p, log_config) for p in range(num_partitions)}
            if hosted
            else {}
        )
        # The leader epoch each coordinated partition's batches are stamped with, as Kafka's
        # leader stamps what its coordinator appends: 0 on a single node, the lease's epoch
        # in cluster mode (``acquire``).
        self.leader_epochs: dict[int, int] = {}
        self.waiting: dict[int, Pending] = {}
        # Records and replies waiting for this loop turn's append (see ``apply``).
        self.unwritten: dict[int, list[tuple[bytes, bytes | None]]] = {}
        # Where each Result's records end in ``unwritten`` (per partition), and their size:
        # a turn's records are split into batches under max.message.bytes only between
        # Results, so no Result is ever half in the log.
        self.unwritten_ends: dict[int, list[tuple[int, int]]] = {}
        self.unreleased: list[_Waiting] = []
        # The transactional Results among ``unwritten`` (per partition): where their records
        # are, each written as its own batch of its producer (``TxnBatch``).
        self.unwritten_txn: dict[int, list[tuple[int, int, TxnBatch]]] = {}
        # A reply the shard prepared without records (a fetch, a heartbeat) may show records
        # of earlier Results that are not durable yet, and may never be (a failed append, a
        # lease lost meanwhile): such a reply waits until those Results settle, and answers
        # NOT_COORDINATOR if one failed, as Kafka answers a write without records at the
        # commit of the last written offset and reads at the last committed one. Per
        # partition: Results with records issued, settled, and settled as failed.
        self.issued: dict[int, int] = {}
        self.settled: dict[int, int] = {}
        self.settled_failed: dict[int, int] = {}
        self.unsettled = 0
        self.parked: list[_Parked] = []
        self.write_scheduled = False
        # Under the "batch" flush policy replies wait for an fsync round, and records
        # applied while one is in flight wait for the next: those turns are appended
        # together when it starts (``Flusher.before_next_round``). Other policies answer
        # after the append alone, which must not wait for a round.
        self.gather_during_rounds = log_config.flush_policy == "batch"
        # The one wake-up on the loop, for the earliest deadline of ``shard.timers``.
        self._wakeup: asyncio.TimerHandle | None = None
        self._wake_ms: int | None = None
        self.next_handle = 0
        self.background: set[asyncio.Task[None]] = set()
        self.loaded = asyncio.Event()
        # Called with a partition's log when appended records became durable or the
        # partition was released: the data plane wakes fetches of ``__consumer_offsets``.
        self.on_durable: list[Callable[[PartitionLog], None]] = []
        # The transaction coordinator's check of a TxnOffsetCommit (KIP-890 part 1), set by
        # the node when one runs here; None: TxnOffsetCommit goes unverified.
        self.txn_verifier: Verifier | None = None
        # KIP-890 verification guards of TxnOffsetCommits waiting on the coordinator's
        # answer, by (offsets partition, producer id): a marker for that producer clears
        # its guard, so an answer that travelled while the transaction ended opens nothing.
        self.txn_guards: dict[tuple[int, int], object] = {}
        self.share_persister: Any = None  # share_init.py's SharePersister, set by the node
        for p, plog in self.partitions.items():
            # The storage layer calls these after cutting a log back to its durable end
            # (a failed fsync): the shard must forget what the cut removed.
            plog.on_cut_back.append(functools.partial(self._cut_back, p))

    # -- wiring
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
        try:
            result = method(ctx, body, self.clock())
        except Exception:
            return self._handler_failed(header, body)
        if not result.records:
            if self.unsettled:
                return self._park(result, handle)
            replies = result.replies
            if len(replies) == 1 and result.wakeup is None and not result.events:
                reply = replies[0]
                if reply[0] == handle:  # most requests: just our own answer, nothing else
                    return reply[1]
            mine = self._apply_now(result, handle)
            if mine is not None:
                return mine
            fut = self.waiting[handle] = Pending()
            return Deferred(fut)
        fut = self.waiting[handle] = Pending()
        self.apply(result)
        return Deferred(fut)

    def _park(self, result: Result, own: int) -> Any:
        """Hold a records-less Result's replies until the Results issued before it settle."""
        self._side_effects(result)
        settled, failed = self.settled, self.settled_failed
        target = {p: n for p, n in self.issued.items() if settled.get(p, 0) < n}
        failed_before = {p: failed.get(p, 0) for p in target}
        for handle, reply in result.replies:
            self.parked.append((target, failed_before, handle, reply))
        fut = self.waiting[own] = Pending()
        return Deferred(fut)

    def _settle(self, parts: frozenset[int], ok: bool) -> None:
        self.unsettled -= 1
        for p in parts:
            self.settled[p] = self.settled.get(p, 0) + 1
            if not ok:
                self.settled_failed[p] = self.settled_failed.get(p, 0) + 1

    def _release_parked(self) -> None:
        if not self.parked:
            return
        settled, failed = self.settled, self.settled_failed
        still: list[_Parked] = []
        for entry in self.parked:
            target, failed_before, handle, reply = entry
            if any(settled.get(p, 0) < n for p, n in target.items()):
                still.append(entry)
                continue
            lost = {p for p, n in failed_before.items() if failed.get(p, 0) > n}
            self._deliver(
                handle, storage_error_reply(reply, lost, self.shard.partition_of) if lost else reply
            )
        self.parked = still

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
        if result.wakeup is not None or result.events:
            self._side_effects(result)
        if result.history is not None:
            history = self.history
            if history is not None:
                history.pending += result.history  # (``add``, without a call a commit)
        unwritten = self.unwritten
        parts: dict[int, int] = {}
        for partition, key, value in result.records:
            pending = unwritten.get(partition)
            if pending is None:
                pending = unwritten[partition] = []
            pending.append((key, value))
            # Kafka's per-record overhead (varints, attributes) is under 24 bytes.
            parts[partition] = (
                parts.get(partition, 0) + len(key) + (0 if value is None else len(value)) + 24
            )
        for partition, size in parts.items():
            self.unwritten_ends.setdefault(partition, []).append((len(unwritten[partition]), size))
        txn = result.txn
        if txn is not None:
            for partition in parts:  # one: a transaction's batch is on one partition
                end = len(unwritten[partition])
                self.unwritten_txn.setdefault(partition, []).append(
                    (end - len(result.records), end, txn)
                )
        if len(parts) == 1:  # one partition (a usual commit): its set is built once
            (partition,) = parts
            waits = _ONE.get(partition)
            if waits is None:
                waits = _ONE[partition] = frozenset(parts)
        else:
            waits = frozenset(parts)
        self.unreleased.append((waits, result.replies))
        self.unsettled += 1
        issued = self.issued
        for partition in parts:
            issued[partition] = issued.get(partition, 0) + 1
        self._schedule_write()

    def _schedule_write(self) -> None:
        if not self.write_scheduled:
            self.write_scheduled = True
            if self.gather_during_rounds and self.flusher.in_round:
                # An fsync round is in flight: these records can only join the next one,
                # so the turns until then are gathered and appended once, as it starts.
                self.flusher.before_next_round(self._write_unwritten)
            else:
                asyncio.get_running_loop().call_soon(self._write_unwritten)

    def _write_unwritten(self) -> None:
        self.write_scheduled = False
        history = self.history
        if (
            not self.unwritten
            and not self.unreleased
            and not (history and (history.waiting or self.history_again))
        ):
            return  # written early by a rebuild
        batches, self.unwritten = self.unwritten, {}
        ends, self.unwritten_ends = self.unwritten_ends, {}
        txns, self.unwritten_txn = self.unwritten_txn, {}
        waiting, self.unreleased = self.unreleased, []
        now = self.clock()
        pending: dict[int, tuple[PartitionLog, int]] = {}
        failed: set[int] = set()
        for partition, records in batches.items():
            plog = self.partitions.get(partition)
            if plog is None:
                failed.add(partition)  # released meanwhile (cluster mode): not ours now
                continue
            try:
                cuts = ends.get(partition, [])
                epoch = self.leader_epochs.get(partition, 0)
                marked = txns.get(partition)
                if marked is not None:
                    last = append_with_txns(plog, records, cuts, marked, now, epoch, _batches)
                elif (
                    len(cuts) == 1 and cuts[0][1] <= plog.config.max_message_bytes - _BATCH_OVERHEAD
                ):
                    # One Result under the limit (most turns of a partition): one batch,
                    # without the splitting generator.
                    _, last = plog.append_records(
                        records, timestamp_ms=now, partition_leader_epoch=epoch
                    )
                else:
                    for chunk in _batches(records, cuts, plog.config):
                        _, last = plog.append_records(
                            chunk, timestamp_ms=now, partition_leader_epoch=epoch
                        )
            except Exception as exc:
                # The storage layer cut the log back to where it was: none of these
                # records is in it.
                log.error(
                    "appending %d records to offsets partition %d failed: %r; "
                    "its requests are answered NOT_COORDINATOR",
                    len(records),
                    partition,
                    exc,
                )
                failed.add(partition)
                continue
            pending[partition] = (plog, last)
        kept: tuple[PartitionLog, int] | None = None
        carry = False  # the round's journal makes the history durable (_journal_covers)
        taken: Taken = ([], [])
        if history is not None and (
            history.pending or history.pending_membership or self.history_again
        ):  # (``waiting``, without a call a round)
            if self.history_again:
                self._take_history_again(history)
            # What ``write`` takes (it swaps the lists for new ones): a failed round puts
            # these back (``_history_failed``).
            taken = (history.pending, history.pending_membership)
            # (A HistoryTable's values join the partitions' own round: nothing more to wait;
            # its journal puts a failed round's values back itself.)
            # The history of these records joins their fsync round: a reply waits for both.
            # A value its round's journal fdatasync makes durable goes only into that
            # journal; the store appends many rounds' values to the log at once.
            carry = isinstance(history, HistoryLog) and _journal_covers(
                history.plog, list(pending.values())
            )
            try:
                kept = history.write(now, failed, carry)
            except Exception as exc:
                # A storage failure; nothing of the value was written. The turn's records
                # are in their logs already, and cannot be taken out here (the journal may
                # be syncing an earlier round's): failing their replies would answer
                # NOT_COORDINATOR for commits that stand. So they are answered by their own
                # fsync, and their history goes again with the next write (or by a round of
                # its own a second later); a crash before then loses that history.
                log.error("appending the group history failed: %r; it goes again", exc)
                self._history_failed(taken, failed)
        released: list[_Waiting] = waiting
        if failed:
            released = []
            for parts, replies in waiting:
                if parts & failed:
                    self._fail_replies(replies, failed)
                    self._settle(parts, False)
                else:
                    released.append((parts, replies))
            self._rebuild(sorted(failed), "a failed append")
            self._release_parked()
        if released:
            order = list(pending)
            targets = [pending[p] for p in order]
            # Every partition's wait joins the same fsync round; ``_released`` runs when
            # the last is settled (each partition fails on its own; the history's failure
            # fails the partitions it held entries of). A history journaled in the journal
            # of every one of those partitions needs no wait of its own: its record was
            # written before theirs were synced, so the fdatasync that makes them durable
            # makes it durable, and one that fails cuts back every log it held records of,
            # failing their waits (``Journal.discard_unsynced``).
            with_history = kept is not None and not carry
            if with_history:
                assert kept is not None
                targets.append(kept)
            self.flusher.when_durable(
                targets,
                functools.partial(
                    self._released,
                    order,
                    pending,
                    released,
                    taken if kept is not None else None,
                    None if with_history else kept,
                ),
            )
        elif kept is not None:
            # History alone (membership changes without records): made durable by the next
            # round, which this starts; nothing waits on it.
            if isinstance(history, HistoryLog) and kept[1] >= kept[0].log_end_offset:
                # Carried (its partitions' waits all failed): a wait needs it in the log.
                try:
                    history.spill()
                except OSError as exc:
                    log.error("appending carried group history failed: %r", exc)
                    return  # still carried: durable with the journal's next fdatasync
            self.flusher.when_durable([kept], functools.partial(self._history_settled, taken))

    # -- the history of failed rounds
    def _history_settled(self, taken: Taken, outcomes: list[BaseException | None]) -> None:
        """A round that made history alone durable ended (nothing waited on it)."""
        if outcomes[0] is not None:
            log.error("fsync of the group history failed: %r; it goes again", outcomes[0])
            self._history_failed(taken, set())

    def _history_failed(self, taken: Taken, lost: set[int]) -> None:
        """The history entries ``taken`` by a write are not in the log (its append failed,
        or its fsync: the log was cut back). Those of the offsets partitions in ``lost``
        (their records failed too: rebuilt from the log, the changes never happened) are
        dropped; the others -- membership changes without records, offset changes whose
        records are in the log -- go again, before anything gathered since."""
        changes, membership = taken
        if lost:
            changes = [c for c in changes if c.partition not in lost]
            membership = [(p, m) for p, m in membership if p not in lost]
        if not changes and not membership:
            return
        self.history_again.append((changes, membership))
        if self._history_retry is None:
            self._history_retry = asyncio.get_running_loop().call_later(
                _HISTORY_RETRY_S, self._retry_history
            )

    def _retry_history(self) -> None:
        self._history_retry = None
        if self.history_again:
            self._schedule_write()

    def _take_history_again(self, history: HistoryLog | HistoryTable) -> None:
        """Put the failed rounds' entries back before the turn's own, oldest first."""
        again, self.history_again = self.history_again, []
        changes = [c for taken in again for c in taken[0]]
        membership = [m for taken in again for m in taken[1]]
        history.pending = changes + history.pending
        history.pending_membership = membership + history.pending_membership

    def _side_effects(self, result: Result) -> None:
        wakeup = result.wakeup
        if wakeup is not None and (self._wake_ms is None or wakeup < self._wake_ms):
            self._arm(wakeup)
        if result.events:
            for event in result.events:
                log.info("%s", render(event))
            if self.metrics is not None:
                self.metrics.group_events(result.events, self.clock())
            if self.history is not None:
                added = self.membership.record(
                    self.history, result.events, self.shard.partition_of, self.clock()
                )
                if added and not result.records:
                    self._schedule_write()
            if self.share_persister is not None:
                share_init.on_events(self, result.events)

    def _released(
        self,
        order: list[int],
        pending: dict[int, tuple[PartitionLog, int]],
        waiting: list[_Waiting],
        history: Taken | None,
        covered: tuple[PartitionLog, int] | None,
        outcomes: list[BaseException | None],
    ) -> None:
        """The flusher settled every partition of one append: release or fail the replies.
        ``history``: what the round's history record held (None: it had none);
        ``covered``: that record's (log, offset) when the partitions' journal made it
        durable (not a target of its own: its outcome is theirs)."""
        failed: set[int] = set()
        lost: BaseException | None = None
        for p, outcome in zip(order, outcomes, strict=False):
            if outcome is not None:
                self._log_flush_failure(p, outcome)
                failed.add(p)
                lost = outcome
        if history is not None:
            if covered is None:
                lost = outcomes[-1]
            elif lost is not None and covered[0].durable_end > covered[1]:
                lost = None  # the journal's fdatasync held: the history is durable
        if history is not None and lost is not None:
            # The turn's history is not durable: its commits are answered as for their own.
            log.error("fsync of the group history failed: %r", lost)
            self._history_failed(history, failed)
            failed |= set(order)
        if self.on_durable:
            for p, (plog, _) in pending.items():
                if p not in failed:
                    self._announce(plog)
        if not failed:
            # The usual round: everything durable, no intersections to compute.
            waiting_futures = self.waiting
            for parts, replies in waiting:
                self._settle(parts, True)
                for handle, reply in replies:
                    fut = waiting_futures.pop(handle, None)
                    if fut is not None and not fut.done():  # as ``_deliver``
                        fut.set_result(reply)
            self._release_parked()
            return
        for parts, replies in waiting:
            if parts & failed:
                self._fail_replies(replies, failed)
                self._settle(parts, False)
            else:
                self._settle(parts, True)
                for handle, reply in replies:
                    self._deliver(handle, reply)
        self._release_parked()
        # The log was cut back to its durable end: forget what the cut removed (a second
        # rebuild after the storage layer's ``on_cut_back`` call costs only time).
        self._rebuild(sorted(failed), "a failed fsync")

    def _announce(self, plog: PartitionLog) -> None:
        for hook in self.on_durable:
            hook(plog)

    @staticmethod
    def _log_flush_failure(partition: int, exc: BaseException) -> None:
        log.error(
            "fsync of offsets partition %d failed: %r; its requests are answered NOT_COORDINATOR",
            partition,
            exc,
        )

    def _fail_replies(self, replies: list[tuple[int, Any]], failed: set[int]) -> None:
        for handle, reply in replies:
            self._deliver(handle, storage_error_reply(reply, failed, self.shard.partition_of))

    def _deliver(self, handle: int, reply: Any) -> None:
        fut = self.waiting.pop(handle, None)
        if fut is not None and not fut.done():  # done: the connection went away meanwhile
            fut.set_result(reply)

    def _handler_failed(self, header: RequestHeader, body: Any) -> Any:
        group_id = getattr(body, "group_id", None)
        log.exception(
            "api key %d v%d for group %r failed; answering UNKNOWN_SERVER_ERROR",
            header.api_key,
            header.api_version,
            group_id,
        )
        if isinstance(group_id, str):
            p = self.shard.partition_of(group_id)
            if self.shard.partitions.get(p) is PartitionStatus.LOADED:
                # The shard may have changed part of the group before failing.
                self._rebuild([p], "a failed request")
        self._rearm()  # the failed call may have armed a timer its lost Result announced
        return error_response(header.api_key, header.api_version, body, ErrorCode.UNKNOWN)

    # -- transactions
    async def complete_transaction(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> ErrorCode:
        """A transaction marker for offsets partition ``partition`` (Kafka's
        GroupCoordinatorService.completeTransaction): its control batch is appended and the
        producer's pending offsets there committed or dropped; NONE once durable.

        NOT_COORDINATOR when the partition is not this node's (or its write failed: it is
        rebuilt from its log), COORDINATOR_LOAD_IN_PROGRESS while it loads, and the log's
        refusals (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED).
        """
        if partition not in self.partitions:
            return ErrorCode.NOT_COORDINATOR
        try:
            result, err = self.shard.complete_transaction(
                partition, producer_id, producer_epoch, coordinator_epoch, commit, self.clock()
            )
        except Exception:
            log.exception(
                "transaction marker for producer %d on offsets partition %d failed",
                producer_id,
                partition,
            )
            self._rebuild([partition], "a failed transaction marker")
            return ErrorCode.UNKNOWN
        if err is not ErrorCode.NO_ERROR:
            return err
        self.txn_guards.pop((partition, producer_id), None)
        self.next_handle += 1
        handle = self.next_handle
        fut = self.waiting[handle] = Pending()
        result.replies.append((handle, ErrorCode.NO_ERROR))
        self.apply(result)
        outcome: ErrorCode = await fut
        return outcome

    # -- timers
    def _arm(self, deadline_ms: int | None) -> None:
        """Set the loop's one wake-up for ``deadline_ms`` (None: no timer is armed)."""
        if deadline_ms == self._wake_ms:
            return
        if self._wakeup is not None:
            self._wakeup.cancel()
            self._wakeup = None
        self._wake_ms = deadline_ms
        if deadline_ms is not None:
            delay = max(0.0, (deadline_ms - self.clock()) / 1000.0)
            self._wakeup = asyncio.get_running_loop().call_later(delay, self._wake)

    def _rearm(self) -> None:
        """Wake up for the table's earliest deadline (after the shard changed outside a Result)."""
        self._arm(self.shard.timers.next_deadline())

    def _wake(self) -> None:
        self._wakeup = None
        self._wake_ms = None
        now = self.clock()
        timers = self.shard.timers
        # A bounded batch per turn of the loop: a timer that re-arms itself for "now"
        # (a zero timeout) must not keep the loop from serving requests.
        for _ in range(_TIMERS_PER_TURN):
            timer = timers.pop_due(now)
            if timer is None:
                break
            try:
                result = self.shard.on_timer(timer, now)
            except Exception:
                log.exception("timer %s failed", timer.key)
                continue
            self.apply(result)
        self._rearm()

    # -- loading
    async def load(self) -> None:
        """Replay every offsets partition into the shard, yielding to requests in between."""
        try:
            for p in self.partitions:
                self.shard.begin_load(p)
            total = 0
            started = time.perf_counter()
            for p in list(self.partitions):
                t0 = time.perf_counter()
                n = await self._load_partition(p)
                if n is None:
                    continue
                total += n
                if self.metrics is not None:
                    self.metrics.partition_loaded(p, time.perf_counter() - t0)
            log.info(
                "loaded %d offsets-log records from %d partitions in %.2f s",
                total,
                len(self.partitions),
                time.perf_counter() - started,
            )
        finally:
            self.loaded.set()

    def _replay(self, p: int) -> Iterator[int]:
        return replay_partition(
            self.partitions[p],
            functools.partial(self.shard.replay, p),
            self.shard.offset_manager,
            functools.partial(self.shard.replay_txn_batch, p),
        )

    def _load_failed(self, p: int, exc: Exception) -> None:
        plog = self.partitions[p]
        reason = str(exc) if isinstance(exc, CorruptOffsetsLog) else f"{exc!r} in {plog.dir}"
        log.error(
            "offsets partition %d cannot be loaded: %s; its groups answer NOT_COORDINATOR "
            "until the log is repaired (the other partitions are served)",
            p,
            reason,
        )
        plog.mark_damaged(reason)
        now = self.clock()
        self.apply(self.shard.unload(p, now))
        self.shard.fail_load(p)

    def _finish_load(self, p: int) -> None:
        now = self.clock()
        loaded = self.shard.load_complete(p, now)
        if loaded.events:
            for event in loaded.events:
                log.debug("%s", render(event))  # the caller logs one summary line instead
            if self.metrics is not None:
                self.metrics.group_events(loaded.events, now)
            loaded.events = []
        self.apply(loaded)

    # -- cluster mode: partitions come and go with their leases
    def begin_acquire(self, p: int) -> None:
        """This node won ``p``'s lease: its groups answer LOAD_IN_PROGRESS until loaded."""
        self.shard.begin_load(p)

    async def acquire(self, p: int, plog: PartitionLog, leader_epoch: int = 0) -> int:
        """Coordinate offsets partition ``p`` from ``plog`` (its materialised log), writing
        its batches under ``leader_epoch`` (the lease's).

        Replays it into the shard, yielding to requests between chunks, then serves it
        with its timers re-armed; returns the records replayed. A log that cannot be
        replayed leaves the partition FAILED (NOT_COORDINATOR), as at start-up.
        """
        self.partitions[p] = plog
        self.leader_epochs[p] = leader_epoch
        plog.on_cut_back.append(functools.partial(self._cut_back, p))
        self.shard.begin_load(p)
        return await self._load_partition(p) or 0

    async def _load_partition(self, p: int) -> int | None:
        """Replay ``p`` (yielding between chunks) and serve it; the records replayed, or
        None when its log could not be replayed (the partition is FAILED then)."""
        plog = self.partitions[p]
        n = 0
        try:
            for chunk in self._replay(p):
                n += chunk
                await asyncio.sleep(0)
        except Exception as exc:
            self._load_failed(p, exc)
            return None
        if self.partitions.get(p) is plog:  # not released while it loaded (cluster mode)
            self._finish_load(p)
        return n

    def release(self, p: int) -> PartitionLog | None:
        """Stop coordinating ``p`` (its lease goes to another node): parked requests of its
        groups are answered NOT_COORDINATOR and its groups are forgotten; returns its log.
        Records of this loop turn not yet appended are appended first, so their replies
        still follow their durability."""
        if self.unwritten:
            self._write_unwritten()
        now = self.clock()
        if p in self.shard.partitions:
            self.apply(self.shard.unload(p, now))
        self.shard.partitions.pop(p, None)
        plog = self.partitions.pop(p, None)
        self.leader_epochs.pop(p, None)
        if plog is not None:
            self._announce(plog)  # fetches parked on it answer now
        return plog

    def _cut_back(self, p: int, *_args: object) -> None:
        """The storage layer cut partition ``p`` back to its durable end (a failed fsync)."""
        if self.shard.partitions.get(p) is PartitionStatus.LOADED:
            self._rebuild([p], "its log was cut back")

    def _rebuild(self, partitions: Iterable[int], why: str) -> None:
        """The shard may be ahead of the log: rebuild those partitions from the log.

        Parked requests of those groups are answered NOT_COORDINATOR (clients look the
        coordinator up again and retry), as when Kafka's coordinator loses a partition.
        """
        if self.unwritten:
            # Changes of this loop turn not yet appended: append them first, so that the
            # replay below includes them (their replies then wait for durability as usual).
            self._write_unwritten()
        now = self.clock()
        for p in partitions:
            if self.shard.partitions.get(p) is not PartitionStatus.LOADED or (
                p not in self.partitions
            ):
                continue  # failed, being rebuilt already, or released (cluster mode)
            self.apply(self.shard.unload(p, now))
            self.shard.begin_load(p)
            try:
                n = sum(self._replay(p))
            except Exception as exc:
                self._load_failed(p, exc)
                continue
            self._finish_load(p)
            log.warning(
                "offsets partition %d rebuilt from its log (%d records) after %s", p, n, why
            )

    def partition_failed(self, p: int) -> bool:
        """Whether offsets partition ``p`` could not be loaded (its groups are not served)."""
        return self.shard.partitions.get(p) is PartitionStatus.FAILED

    def start(self) -> None:
        task = asyncio.ensure_future(self.load())
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        self.retain_history()

    def retain_history(self) -> None:
        """Apply the history's retention from now on: this process's log, and the older
        logs it holds (``older_history``)."""
        logs: list[HistoryLog | HistoryTable] = [] if self.history is None else [self.history]
        older = self.older_history
        for history in [*logs, *(older.logs if older is not None else ())]:
            # An older log, once emptied, is removed (``OlderHistory.expired``).
            emptied = older.expired if older is not None and history is not self.history else None
            task = asyncio.ensure_future(history_retention(history, self.clock, emptied))
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    def topic_deleted(self, topic: str) -> None:
        self.apply(self.shard.topic_deleted(topic, self.clock()))

    def topics_changed(self, names: list[str], created: bool) -> None:
        """Topics were created, grew or went (the catalog tells): consumer groups look again."""
        self.apply(self.shard.topics_changed(names, created, self.clock()))

    def close(self) -> None:
        if self._wakeup is not None:
            self._wakeup.cancel()
            self._wakeup = None
        if self._history_retry is not None:
            self._history_retry.cancel()
            self._history_retry = None
