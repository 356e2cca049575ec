"""What a group's history holds: offset changes and membership changes.

How this works: ``OffsetChange`` is what the group core reports for a request that moved committed
offsets (or an admin delete), one per request with its partitions in parallel lists and the
OffsetCommit records it writes, so the commit path builds no object per partition.
``MembershipChange`` is a rebalance step or an epoch bump, made by the runtime from the
core's typed events. Read back, an offset change becomes an ``OffsetHistoryEntry``, stamped
with the time it was written (the append time of its turn).

Who committed: the member id, client id and host of the request; a commit outside a
generation (generation -1, no member id: ``kgc offsets reset``, Kafka's tools) is an
"admin" commit, the kind ``kgc offsets undo`` reverts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

__all__ = [
    "DELETED",
    "EXPIRED_CLIENT",
    "HISTORY_TOPIC",
    "MEMBERSHIP_KINDS",
    "TRANSACTION_CLIENT",
    "LogRecord",
    "MembershipChange",
    "OffsetChange",
    "OffsetHistoryEntry",
]

# The log the history lives in: one partition per offsets partition, deleted by time.
HISTORY_TOPIC = "__kgc_group_history"

# An offset change whose ``offset`` is this removed the committed offset (OffsetDelete).
DELETED = -1

# The client id of an offset removed by the offsets retention (``offsets.retention.minutes``):
# the coordinator's own change, no member and no client's (``offsets undo`` leaves it be).
EXPIRED_CLIENT = "(expired)"
# The client id of offsets a transaction's COMMIT marker made visible (TxnOffsetCommit's
# offsets, kept when they count, not when they were sent), followed by the producer id.
TRANSACTION_CLIENT = "(transaction)"

MEMBERSHIP_KINDS = (
    "rebalance_started",
    "generation_completed",
    "stable",
    "emptied",
    "members_removed",
    "member_expired",
    "static_replaced",
    "deleted",
    "epoch_bumped",
    "members_fenced",
)


# An offsets-log record as the core builds it: (offsets partition, key, value or None).
LogRecord = tuple[int, bytes, bytes | None]


class OffsetChange(NamedTuple):
    """The offsets one request changed in one group, as the core reports them: one tuple
    per request (built on the commit path), its partitions in parallel lists. ``records``
    are the very OffsetCommit records (Kafka's key and value) the request writes to the
    offsets log for them -- already encoded, so keeping them costs the commit path nothing
    per partition -- or an admin delete's tombstone."""

    partition: int  # the group's offsets partition
    group_id: str
    member_id: str  # "" outside a generation: an admin commit
    client_id: str
    host: str
    records: Sequence[LogRecord]
    previous: list[int]  # each one's offset before (-1: none)
    unchanged: list[int]  # each one's commits of the same offset since its change before


class OffsetHistoryEntry(NamedTuple):
    """An offset change read back from the history, with the time it was written."""

    timestamp_ms: int
    group_id: str
    topic: str
    partition: int
    offset: int
    previous: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    member_id: str
    client_id: str
    host: str
    unchanged: int

    @property
    def admin(self) -> bool:
        return not self.member_id


class MembershipChange(NamedTuple):
    """A step of a group's membership: a rebalance's start and end, an epoch bump, members
    leaving or timing out. ``timestamp_ms`` is when it happened (the runtime's clock)."""

    timestamp_ms: int
    group_id: str
    kind: str  # one of MEMBERSHIP_KINDS
    generation: int  # a classic group's generation, a consumer group's epoch
    cause: str  # join, leave, session_timeout, ... (the metric label), or ""
    reason: str  # the core's words for a human
    member_id: str  # the member that caused it, or ""
    members: int  # members after it (-1: not known)
    duration_ms: int  # a completed rebalance's duration (-1: not one)
