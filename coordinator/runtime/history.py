"""The group history's side of the runtime: membership changes from the core's events.

How this works: ``Membership.changes`` maps a typed event of the group core
(``group/events.py``) to the ``MembershipChange`` entries the history keeps: a classic
group's rebalance start (its cause and the member that caused it, read from the core's
reason), the generation that completed (members, duration since the rebalance started),
the group stable or emptied; a consumer group's epoch bumps and fenced members; members
removed or expired; the group deleted. Events that say nothing about one group (offsets
expired, a partition loaded) keep nothing. The rebalance start times live here, in
memory: a rebalance that straddles a restart has no duration (-1).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable

from coordinator.group.events import (
    ConsumerGroupEpochBumped,
    ConsumerMembersFenced,
    GenerationCompleted,
    GroupDeleted,
    GroupEmptied,
    GroupEvent,
    GroupStable,
    MembersRemoved,
    PendingMemberExpired,
    RebalanceStarted,
    StaticMemberReplaced,
)
from coordinator.history.model import MembershipChange, OffsetChange
from coordinator.history.store import HistoryLog
from coordinator.history.table import HistoryTable

__all__ = ["Membership", "Taken", "history_merge", "history_retention"]

log = logging.getLogger("kgc.history")

# What one history write took: the turn's offset changes and its membership changes, each
# with its offsets partition (``HistoryLog.pending``/``pending_membership``).
Taken = tuple[list[OffsetChange], list[tuple[int, MembershipChange]]]

# "member <id> joined ...", "leader <id> rejoined", "members left the group: <id>, ..."
_MEMBER = re.compile(r"\b(?:member|leader|members left the group:) ([^\s,]+)")


def _member_in(reason: str) -> str:
    m = _MEMBER.search(reason)
    return m.group(1) if m else ""


class Membership:
    """Turns events into membership changes, remembering when each rebalance started."""

    def __init__(self) -> None:
        self.started: dict[str, int] = {}

    def record(
        self,
        history: HistoryLog | HistoryTable,
        events: list[GroupEvent],
        partition_of: Callable[[str], int],
        now_ms: int,
    ) -> bool:
        """Add the membership changes of ``events`` to ``history``; whether there were any."""
        added = False
        for event in events:
            for change in self.changes(event, now_ms):
                history.add_membership(partition_of(change.group_id), change)
                added = True
        return added

    def changes(self, event: GroupEvent, now_ms: int) -> list[MembershipChange]:
        def change(
            gid: str,
            kind: str,
            generation: int,
            cause: str = "",
            reason: str = "",
            member: str = "",
            members: int = -1,
            duration: int = -1,
        ) -> list[MembershipChange]:
            return [
                MembershipChange(
                    now_ms, gid, kind, generation, cause, reason, member, members, duration
                )
            ]

        match event:
            case RebalanceStarted(gid, generation, cause, reason):
                self.started.setdefault(gid, now_ms)
                return change(
                    gid, "rebalance_started", generation, cause, reason, _member_in(reason)
                )
            case GenerationCompleted(gid, generation, reason, members, _protocol, leader):
                start = self.started.get(gid)
                return change(
                    gid,
                    "generation_completed",
                    generation,
                    "",
                    reason,
                    leader or "",
                    members,
                    -1 if start is None else now_ms - start,
                )
            case GroupStable(gid, generation, leader, members, _unassigned):
                start = self.started.pop(gid, None)
                return change(
                    gid,
                    "stable",
                    generation,
                    member=leader,
                    members=members,
                    duration=-1 if start is None else now_ms - start,
                )
            case GroupEmptied(gid, generation, reason):
                start = self.started.pop(gid, None)
                return change(
                    gid,
                    "emptied",
                    generation,
                    reason=reason,
                    members=0,
                    duration=-1 if start is None else now_ms - start,
                )
            case MembersRemoved(gid, member_ids):
                return [
                    MembershipChange(now_ms, gid, "members_removed", -1, "", "", m, -1, -1)
                    for m in member_ids
                ]
            case PendingMemberExpired(gid, member_id):
                return change(gid, "member_expired", -1, "join_timeout", member=member_id)
            case StaticMemberReplaced(gid, instance_id, old_id, new_id):
                return change(
                    gid,
                    "static_replaced",
                    -1,
                    "static_replacement",
                    f"static member {instance_id} replaced {old_id}",
                    new_id,
                )
            case GroupDeleted(gid):
                self.started.pop(gid, None)
                return change(gid, "deleted", -1)
            case ConsumerGroupEpochBumped(gid, epoch, cause, kind):
                return change(gid, "epoch_bumped", epoch, kind, cause, _member_in(cause))
            case ConsumerMembersFenced(gid, epoch, member_ids, reason, kind):
                return [
                    MembershipChange(now_ms, gid, "members_fenced", epoch, kind, reason, m, -1, -1)
                    for m in member_ids
                ]
        return []


async def history_retention(
    history: HistoryLog | HistoryTable,
    clock: Callable[[], int],
    emptied: Callable[[HistoryLog], bool] | None = None,
) -> None:
    """Delete the history past ``offsets.history.retention.ms`` (a log's segments, a table's
    rows), as often as a tenth of it (at least every second, at most every five minutes).
    ``emptied`` (a log no process writes: ``OlderHistory.expired``) is asked after each
    pass; True (the log was removed) ends the task."""
    interval = min(max(history.retention_ms // 10, 1000), 300_000) / 1000.0
    what = "segment(s)" if isinstance(history, HistoryLog) else "row(s)"
    while True:
        try:
            done = history.apply_retention(clock())
            n = done if isinstance(done, int) else await done
        except Exception:  # the database is away: the next pass tries again
            log.exception("history retention failed")
            n = 0
        if n:
            log.info("history retention deleted %d %s", n, what)
        if emptied is not None and isinstance(history, HistoryLog) and emptied(history):
            return
        await asyncio.sleep(interval)


async def history_merge(history: HistoryTable, clock: Callable[[], int]) -> None:
    """Merge the cluster table's round rows older than ``offsets.history.merge.lag.ms``
    (``HistoryTable.apply_merge``), every half of it (at least every 100 ms, at most every
    minute): a merged row then spans about half the lag."""
    interval = min(max(history.merge_lag_ms // 2, 100), 60_000) / 1000.0
    while True:
        try:
            n = await history.apply_merge(clock())
        except Exception:  # the database is away: the next pass tries again
            log.exception("history merge failed")
            n = 0
        if n:
            log.debug("history merge replaced %d row(s)", n)
        await asyncio.sleep(interval)
