"""The shard's timers: one table of deadlines, and a heap that says which comes first.

How this works
--------------
The group core needs timers for session timeouts, join and sync deadlines, KIP-394
pending members and the periodic offset expiration.  Each is a ``Timer`` in one table,
keyed by a string that names what it is for (``heartbeat-<group>-<member>``,
``join-<group>``, ``consumer-session-<group>-<member>``...: every key is built by a
function below, for classic and consumer groups alike), with its deadline and the ``TimerAction`` to take.  The runtime
keeps no timer of its own: it holds a single wake-up on its event loop for
``next_deadline()`` and, when that fires, takes ``pop_due(now)`` timers one by one and
hands each to ``GroupShard.on_timer``.  A test drives the same table with a fake clock.

The heap holds (armed deadline, key) entries, so the next deadline is found without a
scan.  Every heartbeat moves a member's session deadline *later*; doing that costs one
attribute store and no heap operation: the timer keeps its earlier heap entry
(``armed_ms``), and when that entry comes due, ``pop_due`` sees the deadline moved and
pushes a new entry for it instead of firing.  Only a deadline that moves *earlier* (or a
new timer) pushes an entry; if it is the earliest of all, the Result's ``wakeup`` tells the
runtime to wake up sooner.  Cancelling a timer only drops it from the table: its heap
entries are recognised as stale when they come up (the heap is compacted if they pile up).

Invariant: a timer in the table has a heap entry at ``armed_ms`` <= ``deadline_ms``; a
timer taken out of the table has ``armed_ms == REMOVED``, so code that holds on to a
``Timer`` (a member's session timer) may move its deadline in place only while
``deadline >= timer.armed_ms``, and otherwise schedules it again.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from enum import Enum

from coordinator.group.types import Result

__all__ = [
    "EXPIRE_OFFSETS_KEY",
    "REMOVED",
    "Timer",
    "TimerAction",
    "TimerKind",
    "Timers",
    "consumer_classic_join_key",
    "consumer_classic_sync_key",
    "consumer_rebalance_key",
    "consumer_regex_key",
    "consumer_session_key",
    "heartbeat_key",
    "join_key",
    "pending_key",
    "share_session_key",
    "streams_initial_delay_key",
    "streams_rebalance_key",
    "streams_session_key",
    "sync_key",
]

REMOVED = 1 << 62  # armed_ms of a timer that is no longer in the table


class TimerKind(Enum):
    JOIN = "join"  # complete the join phase at the rebalance deadline
    INITIAL_JOIN = "initial-join"  # end (or extend) the initial rebalance delay
    SYNC = "sync"  # members that have not synced by now are removed
    HEARTBEAT = "heartbeat"  # session (or new-member join) timeout of a member
    PENDING = "pending"  # a KIP-394 pending member never came back
    EXPIRE_OFFSETS = "expire-offsets"
    # Consumer groups (KIP-848): a member's session, a revocation that must happen in time
    # (``generation`` holds the member epoch it was armed for), a regex resolution.
    CONSUMER_SESSION = "consumer-session"
    CONSUMER_REBALANCE = "consumer-rebalance"
    CONSUMER_REGEX = "consumer-regex"
    # A classic-protocol member of a consumer group must join / sync in time.
    CONSUMER_CLASSIC_JOIN = "consumer-classic-join"
    CONSUMER_CLASSIC_SYNC = "consumer-classic-sync"
    # Streams groups (KIP-1071): a member's session, a revocation due in time
    # (``generation``: the member epoch it was armed for), a new group's initial delay.
    STREAMS_SESSION = "streams-session"
    STREAMS_REBALANCE = "streams-rebalance"
    STREAMS_INITIAL_DELAY = "streams-initial-delay"
    # Share groups (KIP-932): a member's session.
    SHARE_SESSION = "share-session"


@dataclass(frozen=True, slots=True)
class TimerAction:
    kind: TimerKind
    group_id: str = ""
    member_id: str = ""
    generation: int = 0


class Timer:
    """One deadline of the table (a plain slotted class: heartbeats move it in place)."""

    __slots__ = ("action", "armed_ms", "deadline_ms", "key")

    def __init__(self, key: str, deadline_ms: int, action: TimerAction) -> None:
        self.key = key
        self.deadline_ms = deadline_ms
        self.action = action
        self.armed_ms = REMOVED  # the time of its live heap entry, once it has one

    def __repr__(self) -> str:
        return f"Timer({self.key!r}, deadline_ms={self.deadline_ms}, armed_ms={self.armed_ms})"


def join_key(group_id: str) -> str:
    return f"join-{group_id}"


def sync_key(group_id: str) -> str:
    return f"sync-{group_id}"


def heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"


def pending_key(group_id: str, member_id: str) -> str:
    return f"pending-{group_id}-{member_id}"


EXPIRE_OFFSETS_KEY = "expire-offsets"


# Consumer groups (KIP-848).


def consumer_session_key(group_id: str, member_id: str) -> str:
    return f"consumer-session-{group_id}-{member_id}"


def consumer_rebalance_key(group_id: str, member_id: str) -> str:
    return f"consumer-rebalance-{group_id}-{member_id}"


def consumer_regex_key(group_id: str) -> str:
    return f"consumer-regex-{group_id}"


def consumer_classic_join_key(group_id: str, member_id: str) -> str:
    """A classic-protocol member of a consumer group must join by then."""
    return f"consumer-group-join-{group_id}-{member_id}"


def consumer_classic_sync_key(group_id: str, member_id: str) -> str:
    """A classic-protocol member of a consumer group must sync by then."""
    return f"consumer-group-sync-{group_id}-{member_id}"


# Streams groups (KIP-1071).


def streams_session_key(group_id: str, member_id: str) -> str:
    return f"streams-session-{group_id}-{member_id}"


def streams_rebalance_key(group_id: str, member_id: str) -> str:
    return f"streams-rebalance-{group_id}-{member_id}"


def streams_initial_delay_key(group_id: str) -> str:
    """Kafka's ``initial-rebalance-timeout-<group>``."""
    return f"initial-rebalance-timeout-{group_id}"


# Share groups (KIP-932).


def share_session_key(group_id: str, member_id: str) -> str:
    return f"share-session-{group_id}-{member_id}"


class Timers:
    """The table of every deadline the shard holds (see the module docstring)."""

    __slots__ = ("_heap", "_table")

    def __init__(self) -> None:
        self._table: dict[str, Timer] = {}
        # (armed deadline, key): ties fire in key order, so a run is reproducible.
        self._heap: list[tuple[int, str]] = []

    def __contains__(self, key: str) -> bool:
        return key in self._table

    def schedule(self, out: Result, key: str, deadline_ms: int, action: TimerAction) -> Timer:
        """Arm ``key`` for ``deadline_ms`` (replacing its deadline and action if armed)."""
        timer = self._table.get(key)
        if timer is None:
            timer = self._table[key] = Timer(key, deadline_ms, action)
        else:
            timer.deadline_ms = deadline_ms
            timer.action = action
        if deadline_ms < timer.armed_ms:
            self._push(out, timer, deadline_ms)
        return timer

    def cancel(self, key: str) -> None:
        timer = self._table.pop(key, None)
        if timer is not None:
            timer.armed_ms = REMOVED

    def cancel_group(self, group_id: str) -> None:
        """Cancel every timer acting on ``group_id``."""
        for key in [k for k, t in self._table.items() if t.action.group_id == group_id]:
            self.cancel(key)

    def next_deadline(self) -> int | None:
        """When the earliest timer comes due (perhaps only to be re-armed), or None."""
        heap, table = self._heap, self._table
        while heap:
            at, key = heap[0]
            timer = table.get(key)
            if timer is not None and timer.armed_ms == at:
                return at
            heapq.heappop(heap)  # stale: cancelled, fired, or superseded by an earlier entry
        return None

    def pop_due(self, now_ms: int) -> Timer | None:
        """Take the next timer whose deadline has come out of the table, or None."""
        heap, table = self._heap, self._table
        while heap and heap[0][0] <= now_ms:
            at, key = heapq.heappop(heap)
            timer = table.get(key)
            if timer is None or timer.armed_ms != at:
                continue  # stale entry
            if timer.deadline_ms > now_ms:  # moved later since it was armed
                timer.armed_ms = timer.deadline_ms
                heapq.heappush(heap, (timer.deadline_ms, key))
                continue
            del table[key]
            timer.armed_ms = REMOVED
            return timer
        return None

    def deadlines(self) -> dict[str, int]:
        """Deadline of every timer, by key (for tests and diagnostics)."""
        return {k: t.deadline_ms for k, t in self._table.items()}

    def armed(self) -> dict[str, int]:
        """When each timer's heap entry comes up (at or before its deadline), by key."""
        return {k: t.armed_ms for k, t in self._table.items()}

    def _push(self, out: Result, timer: Timer, at: int) -> None:
        heap = self._heap
        # Earlier than anything else: the runtime's wake-up may be set for later.
        if (not heap or at < heap[0][0]) and (out.wakeup is None or at < out.wakeup):
            out.wakeup = at
        timer.armed_ms = at
        heapq.heappush(heap, (at, timer.key))
        if len(heap) > 2 * len(self._table) + 64:
            # Cancelled timers leave their entries behind: rebuild from the live ones.
            self._heap = [(t.armed_ms, k) for k, t in self._table.items()]
            heapq.heapify(self._heap)
