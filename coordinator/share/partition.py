"""One share partition's in-flight records, pure (Kafka's SharePartition, without its I/O).

How this works: a share partition (group, topic, partition) keeps the records between its
start offset (SPSO: the lowest offset not yet in a terminal state) and ``next_offset`` (one
past the highest offset ever acquired; Kafka's SPEO + 1) in ``records``, one ``InFlight``
per offset. An offset of that window without an entry is in the *gap window* (a hole of
the persisted state after a load): never delivered, acquired as new. Record states (Kafka's
RecordState ids):

=========  ==  =====================================================================
AVAILABLE   0  can be acquired (released, timed out, or never delivered)
ACQUIRED    1  locked by one member until its lock's deadline; never persisted
ACKNOWLEDGED 2 terminal: accepted
ARCHIVING   3  rejected, or delivered ``delivery_count_limit`` times, while the group has a
               dead-letter topic (KIP-1191): its copy is being written there
ARCHIVED    4  terminal: rejected, a gap, or delivered ``delivery_count_limit`` times
=========  ==  =====================================================================

* ``acquire`` hands out whole log batches from the batches the runtime read at
  ``fetch_offset()``: AVAILABLE records inside the window again (delivery count + 1, merged
  into ranges of equal counts) and new records past it (count 1, ranges cut at the log
  batch that starts ``batch_size`` or more past the range's first offset), while the window
  (``next_offset - start_offset``) stays under ``group.share.partition.max.record.locks``.
  ``max_records`` is soft: the batch holding the last allowed offset is taken whole. Each
  call's records share one lock whose deadline is ``now + lock duration``.
* ``acknowledge`` checks every offset of every batch (all or nothing per partition): at or
  past ``next_offset`` is INVALID_REQUEST; not ACQUIRED, held by another member, or already
  mid-transition is INVALID_RECORD_STATE; offsets below SPSO are skipped. It marks the
  offsets pending and returns the state batches to persist; ``commit`` applies them once
  durable (the runtime answers after), ``rollback`` drops them after a failed write. A
  pending offset can be neither acquired nor acknowledged again, so a released record is
  not redelivered before its release is durable.
* Throttled redelivery (Kafka 4.2+): a cached batch holding records delivered at least
  ``max(2, ceil(limit / 2))`` times is acquired per offset and only first in a fetch
  (after other records the fetch stops); from its first such record on at most
  ``max(1, batch size >> (count - that + 1))`` of it, and a record on its last attempt
  only alone (first of its batch, and the batch's last this fetch). A poison record so
  reaches its limit quickly, alone.
* A move to AVAILABLE (release, lock timeout, member release) becomes ARCHIVED when the
  delivery count has reached the limit: a record is delivered at most that many times. The
  count grows on acquisition only.
* ``expire`` (lock timeouts) and ``release_member`` (session or connection closed) move the
  member's ACQUIRED records back, count unchanged; their changes are persisted by the
  runtime, and stand even if that write fails, as in Kafka.
* Dead letters (``dlq`` set: the group names a dead-letter topic): a REJECT, or a move to
  AVAILABLE at the delivery limit, goes to ARCHIVING instead of ARCHIVED, persisted so.
  ``take_archiving`` hands the runtime the ARCHIVING ranges not yet handed out (after a
  load too: what a crash interrupted is resumed); ``archived`` moves them on once their
  copy is written (or has failed for good, as Kafka archives regardless). ARCHIVING is not
  terminal: SPSO waits for it, so a crash before the copy loses nothing.
* After every change SPSO moves past the run of terminal offsets at its start (stopping at
  a gap-window hole), and entries below it are dropped.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from coordinator.share.persister import (
    ACKNOWLEDGED,
    ARCHIVED,
    ARCHIVING,
    AVAILABLE,
    PersisterBatch,
)
from protocol.errors import ErrorCode

ACQUIRED = 1

# AcknowledgeTypes of ShareFetch/ShareAcknowledge.
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4


@dataclass(slots=True, eq=False)
class Lock:
    """An acquisition lock: the records one acquisition handed to one member."""

    member: str
    deadline: int
    offsets: list[int] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class CacheBatch:
    """Kafka's in-flight batch: records acquired (or loaded) together, handled as one
    until an operation touches part of it; from then on (``diverged``) per offset. Only the
    error messages of acknowledgements show the difference."""

    first: int
    last: int
    diverged: bool = False


@dataclass(slots=True)
class InFlight:
    state: int
    count: int
    lock: Lock | None = None
    batch: CacheBatch | None = None
    # The state an acknowledgement moves it to once durable (None: none in flight).
    pending: int | None = None
    # Its lock ran out while its acknowledgement was being persisted.
    expired: bool = False
    # ARCHIVING: rejected by a consumer (else: the delivery limit); handed to the runtime.
    rejected: bool = False
    dead_lettered: bool = False


# An acquired range as ShareFetch returns it: first, last, delivery count.
Acquired = tuple[int, int, int]

# What throttled redelivery makes of a record: acquire it, skip its batch, stop.
_GO, _SKIP, _STOP = 0, 1, 2


@dataclass(slots=True)
class _Throttle:
    """One acquisition's throttling state for the cached batch it is in (Kafka's
    acquireSubsetBatchRecords locals)."""

    batch: CacheBatch | None = None
    on: bool = False  # the batch holds records delivered at least half the limit
    taken: int = 0  # acquired from this batch
    most: int | None = None  # at most this many from it
    skip: bool = False  # the rest of the batch waits for the next fetch


class DeadLetter(NamedTuple):
    """ARCHIVING offsets with one delivery count and cause, for the dead-letter topic."""

    first: int
    last: int
    delivery_count: int
    rejected: bool  # a consumer rejected them (else: the delivery limit was reached)


class SharePartition:
    """The in-flight window of one share partition (see the module docstring)."""

    def __init__(
        self,
        start_offset: int,
        batches: Iterable[PersisterBatch] = (),
        *,
        delivery_count_limit: int = 5,
        max_in_flight: int = 2000,
        dlq: bool = False,
    ) -> None:
        self.start_offset = start_offset
        self.delivery_count_limit = delivery_count_limit
        # The group names a dead-letter topic (its config, read again before each change).
        self.dlq = dlq
        self.max_in_flight = max_in_flight
        self.records: dict[int, InFlight] = {}
        self.next_offset = start_offset
        for b in batches:
            cb = CacheBatch(max(b.first_offset, start_offset), b.last_offset)
            for o in range(cb.first, b.last_offset + 1):
                self.records[o] = InFlight(
                    b.delivery_state,
                    b.delivery_count,
                    batch=cb,
                    rejected=b.delivery_count < delivery_count_limit,
                )
            self.next_offset = max(self.next_offset, b.last_offset + 1)
        self.locks: list[tuple[int, int, Lock]] = []  # (deadline, sequence, lock) heap
        # Kafka's message for the last refused acknowledgement.
        self.error_message: str | None = None
        self._seq = 0
        self._advance()

    # -- reading
    def fetch_offset(self) -> int:
        """Where the next fetch reads: the first AVAILABLE (or gap) offset of the window,
        else ``next_offset``."""
        for o in range(self.start_offset, self.next_offset):
            r = self.records.get(o)
            if r is None or (r.state == AVAILABLE and r.pending is None):
                return o
        return self.next_offset

    def can_acquire(self) -> bool:
        """Kafka's canAcquireRecords: room in the window, or AVAILABLE records inside it."""
        if self.next_offset - self.start_offset < self.max_in_flight:
            return True
        return self.fetch_offset() < self.next_offset

    def next_deadline(self) -> int | None:
        return self.locks[0][0] if self.locks else None

    def delivery_complete_count(self) -> int:
        """Terminal offsets at or past SPSO (for the lag Kafka reports)."""
        return sum(1 for r in self.records.values() if r.state in (ACKNOWLEDGED, ARCHIVED))

    def held_by(self, member: str) -> int:
        return sum(
            1
            for r in self.records.values()
            if r.state == ACQUIRED and r.lock and r.lock.member == member
        )

    # -- acquiring
    def acquire(
        self,
        member: str,
        log_batches: Sequence[tuple[int, int]],
        max_records: int,
        batch_size: int,
        now_ms: int,
        lock_duration_ms: int,
        *,
        record_limit: bool = False,
        aborted: frozenset[int] = frozenset(),
    ) -> list[Acquired]:
        """Acquire from ``log_batches`` ((base offset, last offset) of the log batches read
        at ``fetch_offset()``, in order) for ``member``; the acquired ranges.

        ``record_limit`` (ShareFetch v2's acquire mode 1): at most ``max_records`` offsets,
        cutting a log batch where the limit falls, in one range. ``aborted``: base offsets
        of batches of aborted transactions (read_committed): their records are archived,
        never delivered, and cut out of the ranges."""
        lock = Lock(member, now_ms + lock_duration_ms)
        out: list[Acquired] = []
        fresh: list[bool] = []  # per range of ``out``: new records (else redelivered)
        touched: set[CacheBatch] = set()  # cached batches some records were taken from
        cb: CacheBatch | None = None  # the cached batch new records join
        taken = 0
        budget = max(max_records, 1)
        stop = False
        throttle = _Throttle()
        for base, last in log_batches:
            if taken >= budget:
                break
            if last < self.start_offset:
                continue
            if base in aborted:
                self._archive_aborted(base, last)
                continue
            # Records of this batch inside the window: the AVAILABLE ones again.
            o = max(base, self.start_offset)
            while o <= last and o < self.next_offset:
                if record_limit and taken >= budget:
                    stop = True
                    break
                r = self.records.get(o)
                if r is None:
                    r = self.records[o] = InFlight(AVAILABLE, 0)
                if r.state == AVAILABLE and r.pending is None:
                    if record_limit and out and (out[-1][1] != o - 1 or out[-1][2] != r.count + 1):
                        stop = True  # record_limit: one range only
                        break
                    verdict = self._throttle(throttle, r, o, last, taken)
                    if verdict == _STOP:
                        stop = True
                        break
                    if verdict == _SKIP:
                        o += 1
                        continue
                    throttle.taken += 1
                    if throttle.on and (
                        throttle.taken == throttle.most
                        or r.count + 1 == self.delivery_count_limit > 2  # its last attempt
                    ):
                        throttle.skip = True  # the rest of the batch: next fetch
                    if r.batch is not None:
                        touched.add(r.batch)
                    r.state, r.count, r.lock = ACQUIRED, r.count + 1, lock
                    r.expired = False
                    lock.offsets.append(o)
                    taken += 1
                    if out and not fresh[-1] and out[-1][1] == o - 1 and out[-1][2] == r.count:
                        out[-1] = (out[-1][0], o, r.count)
                    else:
                        out.append((o, o, r.count))
                        fresh.append(False)
                o += 1
            if stop:
                break
            if last < self.next_offset:
                continue
            # New records: the whole batch, while the window has room.
            if self.next_offset - self.start_offset >= self.max_in_flight:
                break
            first = max(base, self.next_offset)
            if record_limit:
                if taken >= budget or (out and (out[-1][1] != first - 1 or out[-1][2] != 1)):
                    break
                last = min(last, first + budget - taken - 1)
            taken += last - first + 1
            self.next_offset = last + 1
            # A new range starts at the log batch lying batch_size or more past the first
            # offset of the current one.
            if (
                out
                and out[-1][1] == first - 1
                and out[-1][2] == 1
                and (record_limit or (fresh[-1] and base - out[-1][0] < max(batch_size, 1)))
            ):
                out[-1] = (out[-1][0], last, 1)
            else:
                out.append((first, last, 1))
                fresh.append(True)
                cb = None
            if cb is None or not fresh[-1]:
                cb = CacheBatch(first, last)
            cb.last = last
            for o in range(first, last + 1):
                self.records[o] = InFlight(ACQUIRED, 1, lock, batch=cb)
                lock.offsets.append(o)
        self._hold(lock, touched)
        return out

    def _throttle(self, th: _Throttle, r: InFlight, o: int, last: int, taken: int) -> int:
        """Kafka 4.2+'s throttled redelivery of records delivered often: whether ``r`` (at
        ``o``, AVAILABLE) is acquired (_GO), skipped with the rest of its cached batch
        (_SKIP), or ends the acquisition (_STOP)."""
        cb = r.batch
        limit = self.delivery_count_limit
        at_least = max(2, -(-limit // 2))  # Kafka's throttleRecordsDeliveryLimit
        if cb is not th.batch:
            th.batch, th.taken, th.most, th.skip = cb, 0, None, False
            th.on = cb is not None and any(
                (x := self.records.get(k)) is not None
                and x.count >= at_least
                and (cb.diverged or x.state == AVAILABLE)
                for k in range(max(cb.first, o), min(cb.last, last) + 1)
            )
            if th.on and taken > 0:
                return _STOP  # a throttled batch comes after other records: next fetch
        if th.skip:
            return _SKIP
        if not th.on or cb is None:
            return _GO
        if limit > 2 and r.count == limit - 1 and th.taken > 0:
            th.skip = True  # on its last delivery attempt: delivered alone, next fetch
            return _SKIP
        if r.count >= at_least and th.most is None:
            th.most = max(1, (cb.last - cb.first + 1) >> (r.count - at_least + 1))
        return _GO

    def _hold(self, lock: Lock, touched: set[CacheBatch]) -> None:
        """The acquisition's lock armed; a cached batch only partly taken is tracked per
        offset from now on."""
        for b in touched:
            if any(
                (r := self.records.get(o)) is None or r.lock is not lock
                for o in range(max(b.first, self.start_offset), b.last + 1)
            ):
                b.diverged = True
        if lock.offsets:
            self._seq += 1
            heapq.heappush(self.locks, (lock.deadline, self._seq, lock))

    def _archive_aborted(self, base: int, last: int) -> None:
        """A batch of an aborted transaction: its records archived as they come in."""
        for o in range(max(base, self.start_offset), last + 1):
            r = self.records.get(o)
            if r is None or (r.state == AVAILABLE and r.pending is None):
                self.records[o] = InFlight(ARCHIVED, r.count if r is not None else 0)
        self.next_offset = max(self.next_offset, last + 1)
        self._advance()

    # -- acknowledging
    def acknowledge(
        self, member: str, batches: Sequence[tuple[int, int, Sequence[int]]]
    ) -> tuple[ErrorCode, list[PersisterBatch]]:
        """Check ``batches`` ((first, last, ack types) each) and mark their offsets pending;
        (NO_ERROR, the state batches to persist) or (the error, []) with nothing changed
        and Kafka's message in ``error_message``."""
        changes: list[tuple[int, int, bool]] = []  # (offset, new state, rejected)
        seen: set[int] = set()
        self.error_message = None
        for first, last, types in batches:
            if last < self.start_offset:
                continue  # acknowledged below SPSO: ignored
            error = self._locate(first, last)
            if error is not None:
                return error, []
            o = max(first, self.start_offset)
            while o <= last:
                r = self.records.get(o)
                cb = r.batch if r is not None else None
                whole = (
                    cb is not None
                    and len(types) == 1
                    and first <= cb.first
                    and cb.last <= last
                    and cb.first >= self.start_offset
                    and not cb.diverged
                )
                if whole and cb is not None and r is not None:
                    if r.state != ACQUIRED or r.pending is not None or r.lock is None:
                        return self._refuse("The batch is not in the acquired state.")
                    if r.lock.member != member:
                        return self._refuse("Member is not the owner of batch record", False)
                    span = range(cb.first, cb.last + 1)
                else:
                    if cb is not None and not cb.diverged:
                        head = self.records.get(max(cb.first, self.start_offset))
                        if head is None or head.state != ACQUIRED:
                            return self._refuse("The subset batch is not in the acquired state.")
                        cb.diverged = True  # from now on per offset, as Kafka's
                    end = last if cb is None else min(last, cb.last)
                    span = range(o, end + 1)
                for off in span:
                    rec = self.records.get(off)
                    if (
                        rec is None
                        or rec.state != ACQUIRED
                        or rec.pending is not None
                        or off in seen
                    ):
                        return self._refuse("The offset is not acquired.")
                    if rec.lock is None or rec.lock.member != member:
                        return self._refuse("Member is not the owner of offset", False)
                    ack = types[0] if len(types) == 1 else types[off - first]
                    if ack == ACCEPT:
                        new = ACKNOWLEDGED
                    elif ack == REJECT and self.dlq:
                        new = ARCHIVING
                    elif ack in (GAP, REJECT):
                        new = ARCHIVED
                    elif ack == RELEASE:
                        new = self._released(rec)
                    else:
                        self.error_message = f"Invalid acknowledge type: {list(types)}"
                        return ErrorCode.INVALID_REQUEST, []
                    seen.add(off)
                    changes.append((off, new, ack == REJECT))
                o = span.stop
        for o, new, rejected in changes:
            r = self.records[o]
            r.pending, r.rejected = new, rejected
        return ErrorCode.NO_ERROR, _state_batches(
            (o, new, self.records[o].count) for o, new, _ in changes
        )

    def _locate(self, first: int, last: int) -> ErrorCode | None:
        """Kafka's fetch of the cached batches for [first, last]: nothing at or before
        ``first`` (SPSO not inside), or either end past the acquired records."""
        if first > self.start_offset and not any(
            o in self.records
            for o in range(self.start_offset, min(first, self.next_offset - 1) + 1)
        ):
            self.error_message = (
                "Batch record not found. The request batch offsets are not found in the cache."
            )
            return ErrorCode.INVALID_RECORD_STATE
        if first >= self.next_offset:
            self.error_message = (
                "Batch record not found. The first offset in request is past acquired records."
            )
            return ErrorCode.INVALID_REQUEST
        if last >= self.next_offset:
            self.error_message = (
                "Batch record not found. The last offset in request is past acquired records."
            )
            return ErrorCode.INVALID_REQUEST
        return None

    def _refuse(self, why: str, prefixed: bool = True) -> tuple[ErrorCode, list[PersisterBatch]]:
        self.error_message = f"The batch cannot be acknowledged. {why}" if prefixed else why
        return ErrorCode.INVALID_RECORD_STATE, []

    def renew(
        self,
        member: str,
        batches: Sequence[tuple[int, int]],
        now_ms: int,
        lock_duration_ms: int,
        *,
        enabled: bool = True,
    ) -> ErrorCode:
        """RENEW (ShareFetch/ShareAcknowledge v2): restart the locks of the member's records.
        Kafka checks each record is acquired by the member first, then the group's
        ``share.renew.acknowledge.enable``; an error leaves every lock as it was, with
        Kafka's message in ``error_message``."""
        offsets = []
        self.error_message = None
        for first, last in batches:
            for o in range(max(first, self.start_offset), last + 1):
                r = self.records.get(o)
                if r is None or r.state != ACQUIRED or r.pending is not None:
                    return self._refuse("The offset is not acquired.")[0]
                if r.lock is None or r.lock.member != member:
                    return self._refuse("Member is not the owner of offset", False)[0]
                if not enabled:
                    return self._refuse(
                        "Renewing acquisition locks is not enabled for the group.", False
                    )[0]
                offsets.append(o)
        if offsets:
            lock = Lock(member, now_ms + lock_duration_ms, offsets)
            for o in offsets:
                self.records[o].lock = lock
            self._seq += 1
            heapq.heappush(self.locks, (lock.deadline, self._seq, lock))
        return ErrorCode.NO_ERROR

    def commit(self, batches: Sequence[PersisterBatch]) -> None:
        """The pending changes of ``batches`` are durable: they take effect."""
        for b in batches:
            for o in range(b.first_offset, b.last_offset + 1):
                r = self.records.get(o)
                if r is None or r.pending is None:
                    continue
                r.state, r.pending, r.lock, r.expired = r.pending, None, None, False
        self._advance()

    def rollback(self, batches: Sequence[PersisterBatch]) -> list[PersisterBatch]:
        """The write of ``batches`` failed: the records stay ACQUIRED, or, when their lock
        ran out meanwhile, go back as a timeout would (returned, to be persisted)."""
        released = []
        for b in batches:
            for o in range(b.first_offset, b.last_offset + 1):
                r = self.records.get(o)
                if r is None or r.pending is None:
                    continue
                r.pending = None
                if r.expired:
                    r.state, r.lock, r.expired = self._released(r), None, False
                    released.append((o, r.state, r.count))
        self._advance()
        return _state_batches(released)

    # -- giving records back
    def _released(self, r: InFlight) -> int:
        r.rejected = False
        if r.count < self.delivery_count_limit:
            return AVAILABLE
        return ARCHIVING if self.dlq else ARCHIVED

    # -- dead letters
    def take_archiving(self) -> list[DeadLetter]:
        """The ARCHIVING ranges not handed out yet (durably ARCHIVING: none pending), now
        handed out; each range has one delivery count and one cause."""
        out: list[DeadLetter] = []
        for o in range(self.start_offset, self.next_offset):
            r = self.records.get(o)
            if r is None or r.state != ARCHIVING or r.pending is not None or r.dead_lettered:
                continue
            r.dead_lettered = True
            if out and out[-1].last == o - 1 and out[-1][2:] == (r.count, r.rejected):
                out[-1] = out[-1]._replace(last=o)
            else:
                out.append(DeadLetter(o, o, r.count, r.rejected))
        return out

    def archived(self, first: int, last: int) -> list[PersisterBatch]:
        """The dead-letter copies of [first, last] are written (or failed for good): its
        ARCHIVING records are ARCHIVED; the state batches to persist."""
        changed: list[tuple[int, int, int]] = []
        for o in range(first, last + 1):
            r = self.records.get(o)
            if r is not None and r.state == ARCHIVING and r.pending is None:
                r.state = ARCHIVED
                changed.append((o, ARCHIVED, r.count))
        self._advance()
        return _state_batches(changed)

    def expire(self, now_ms: int) -> list[PersisterBatch]:
        """Locks due by ``now_ms`` run out: their ACQUIRED records go back (AVAILABLE, or
        ARCHIVED at the limit or below SPSO); the state batches to persist."""
        changed: list[tuple[int, int, int]] = []
        while self.locks and self.locks[0][0] <= now_ms:
            _, _, lock = heapq.heappop(self.locks)
            for o in lock.offsets:
                r = self.records.get(o)
                if r is None or r.lock is not lock or r.state != ACQUIRED:
                    continue
                if r.pending is not None:
                    r.expired = True  # settled by commit or rollback
                    continue
                if o < self.start_offset:
                    del self.records[o]  # below the log start: archived, nothing to persist
                    continue
                r.state, r.lock = self._released(r), None
                changed.append((o, r.state, r.count))
        self._advance()
        return _state_batches(changed)

    def release_member(self, member: str) -> list[PersisterBatch]:
        """Everything ``member`` holds goes back, count unchanged (its session or
        connection closed); the state batches to persist."""
        changed: list[tuple[int, int, int]] = []
        for o in range(self.start_offset, self.next_offset):
            r = self.records.get(o)
            if (
                r is None
                or r.state != ACQUIRED
                or r.pending is not None
                or r.lock is None
                or r.lock.member != member
            ):
                continue
            r.state, r.lock = self._released(r), None
            changed.append((o, r.state, r.count))
        self._advance()
        return _state_batches(changed)

    def log_start_moved(self, log_start: int) -> list[PersisterBatch]:
        """Retention or DeleteRecords moved the log start past SPSO: AVAILABLE records
        below it are archived and SPSO jumps to it (ACQUIRED ones are archived when their
        lock ends, their acknowledgements ignored)."""
        if log_start <= self.start_offset:
            return []
        for o in range(self.start_offset, min(log_start, self.next_offset)):
            r = self.records.get(o)
            if r is None or (r.state != ACQUIRED and r.pending is None):
                self.records.pop(o, None)
        self.start_offset = log_start
        self.next_offset = max(self.next_offset, log_start)
        self._advance()
        return []

    def _advance(self) -> None:
        """SPSO past the terminal run at its start; entries below it dropped."""
        o = self.start_offset
        records = self.records
        while o < self.next_offset:
            r = records.get(o)
            if r is None or r.state not in (ACKNOWLEDGED, ARCHIVED):
                break
            del records[o]
            o += 1
        self.start_offset = o
        if o == self.next_offset:
            # The window is empty; ACQUIRED records below SPSO (log start moved) remain
            # only until their lock ends.
            for k in [k for k in records if k < o and records[k].state != ACQUIRED]:
                del records[k]


def _state_batches(changes: Iterable[tuple[int, int, int]]) -> list[PersisterBatch]:
    """(offset, state, count) in offset order as coalesced persisted batches."""
    out: list[PersisterBatch] = []
    for o, state, count in sorted(changes):
        if out:
            last = out[-1]
            if (
                last.last_offset == o - 1
                and last.delivery_state == state
                and last.delivery_count == count
            ):
                out[-1] = last._replace(last_offset=o)
                continue
        out.append(PersisterBatch(o, o, state, count))
    return out
