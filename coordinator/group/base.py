"""State and small helpers shared by every concern of the shard.

How this works
--------------
``ShardBase`` owns everything the coordinator knows: groups by id, committed
offsets by group, pending transactional offsets, the load status of each
offsets-log partition and the timers it has armed.  The concern-specific
mixins (join, sync, heartbeat, offsets, admin, replay) all derive from it and
reach the shared state through ``self``.

Timers: the shard remembers, for each key it asked the runtime to arm, the
deadline and what to do when it fires (a ``TimerAction``).  ``on_timer``
ignores keys it does not know and firings earlier than the remembered
deadline, so a runtime that races a re-arm against a firing cannot make the
shard act on a stale timer.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from coordinator.group.classic.group import ClassicGroup
from coordinator.group.types import GroupConfig, Result
from protocol.errors import ErrorCode
from storage.offsets_format import (
    MemberMetadata,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    partition_for,
)

__all__ = [
    "LOG_STRING_MAX_BYTES",
    "OffsetEntry",
    "PartitionStatus",
    "ShardBase",
    "TimerAction",
    "TimerKind",
    "log_string_fits",
]


class TimerKind(Enum):
    JOIN = "join"  # complete the join phase at the rebalance deadline
    INITIAL_JOIN = "initial-join"  # end (or extend) the initial rebalance delay
    SYNC = "sync"  # members that have not synced by now are removed
    HEARTBEAT = "heartbeat"  # session (or new-member join) timeout of a member
    PENDING = "pending"  # a KIP-394 pending member never came back
    EXPIRE_OFFSETS = "expire-offsets"


@dataclass(frozen=True, slots=True)
class TimerAction:
    kind: TimerKind
    group_id: str = ""
    member_id: str = ""
    generation: int = 0


@dataclass(slots=True)
class Timer:
    """A timer the shard wants: its deadline moves in place on every heartbeat."""

    deadline_ms: int
    action: TimerAction


class PartitionStatus(Enum):
    LOADING = "loading"
    LOADED = "loaded"
    # The partition's log could not be replayed (corrupt batch, undecodable record): its
    # groups answer NOT_COORDINATOR, as Kafka's CoordinatorRuntime does in state FAILED.
    FAILED = "failed"


_LOADED = PartitionStatus.LOADED


@dataclass(slots=True)
class OffsetEntry:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None


TopicPartition = tuple[str, int]

# Strings in offsets-log records carry an int16 length (Kafka's non-flexible record schemas).
LOG_STRING_MAX_BYTES = 32767


def log_string_fits(s: str | None, reserve: int = 0) -> bool:
    """Whether ``s`` (plus ``reserve`` bytes) can be written as a string of a log record.

    Requests may carry longer strings (compact strings have a varint length); Kafka then
    fails while serializing the record and answers UNKNOWN_SERVER_ERROR without changing
    its state. Checking up front lets the core refuse before it changes anything.
    """
    if s is None or len(s) * 4 + reserve <= LOG_STRING_MAX_BYTES:
        return True
    try:
        return len(s.encode()) + reserve <= LOG_STRING_MAX_BYTES
    except UnicodeEncodeError:  # a lone surrogate: nothing Kafka could decode either
        return False


def join_key(group_id: str) -> str:
    return f"join-{group_id}"


def sync_key(group_id: str) -> str:
    return f"sync-{group_id}"


def heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"


def pending_key(group_id: str, member_id: str) -> str:
    return f"pending-{group_id}-{member_id}"


EXPIRE_OFFSETS_KEY = "expire-offsets"
REBALANCE_CAUSES = (
    "join",
    "leave",
    "session_timeout",
    "metadata_change",
    "static_replacement",
    "sync_timeout",
)


class ShardBase:
    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        member_id_suffix: Callable[[], str] | None = None,
    ) -> None:
        self.config = config if config is not None else GroupConfig()
        # Injectable so tests get reproducible member ids.
        self._suffix: Callable[[], str] = member_id_suffix or (lambda: str(uuid.uuid4()))
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets: dict[str, dict[TopicPartition, OffsetEntry]] = {}
        # group -> producer id -> partition -> offset, awaiting the transaction's end.
        self.pending_txn_offsets: dict[str, dict[int, dict[TopicPartition, OffsetEntry]]] = {}
        self.partitions: dict[int, PartitionStatus] = {}
        self._timers: dict[str, Timer] = {}
        self._armed: dict[str, int] = {}  # key -> deadline the runtime's timer is armed for
        self.rebalances: dict[str, int] = dict.fromkeys(REBALANCE_CAUSES, 0)
        self._partition_cache: dict[str, int] = {}
        # Partition count of a topic, None if it does not exist (the runtime passes the
        # topic catalog's answer; None here: every topic exists, as in most unit tests).
        # Kafka refuses offsets of unknown partitions before its coordinator sees them.
        self.topic_partitions: Callable[[str], int | None] | None = None

    # ------------------------------------------------------------ partitions

    def partition_of(self, group_id: str) -> int:
        # Hashing the id is on every request's path; ids repeat, so remember them (bounded).
        p = self._partition_cache.get(group_id)
        if p is None:
            if len(self._partition_cache) > 100_000:
                self._partition_cache.clear()
            p = self._partition_cache[group_id] = partition_for(
                group_id, self.config.offsets_topic_num_partitions
            )
        return p

    def _availability_error(self, group_id: str) -> ErrorCode | None:
        """Errors that come before any group logic, in Kafka's order (after INVALID_GROUP_ID)."""
        status = self.partitions.get(self.partition_of(group_id))
        if status is _LOADED:
            return None
        if status is PartitionStatus.LOADING:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NOT_COORDINATOR

    def _unknown_partition(self, topic: str, partition: int) -> bool:
        lookup = self.topic_partitions
        if lookup is None:
            return False
        n = lookup(topic)
        return n is None or not 0 <= partition < n

    def _precheck(self, group_id: str) -> ErrorCode | None:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        p = self._partition_cache.get(group_id)
        if p is not None and self.partitions.get(p) is _LOADED:
            return None  # the usual case, without a further call
        return self._availability_error(group_id)

    # ------------------------------------------------------------ timers

    def _schedule(self, out: Result, key: str, deadline_ms: int, action: TimerAction) -> None:
        timer = self._timers.get(key)
        if timer is None:
            self._timers[key] = Timer(deadline_ms, action)
        else:  # moved in place: every heartbeat comes through here
            timer.deadline_ms = deadline_ms
            timer.action = action
        # A deadline that only moved later (every heartbeat does that) needs no timer
        # operation: the runtime's timer fires at the earlier time and ``on_timer`` re-arms
        # it for the rest.  That keeps the heartbeat's Result free of timer work.
        armed = self._armed.get(key)
        if armed is None or deadline_ms < armed:
            self._armed[key] = deadline_ms
            out.timers.append((key, deadline_ms))

    def _cancel(self, out: Result, key: str) -> None:
        self._timers.pop(key, None)
        if self._armed.pop(key, None) is not None:
            out.timers.append((key, None))

    def pending_timers(self) -> dict[str, int]:
        """Deadline of every armed timer, by key (for tests and diagnostics)."""
        return {k: t.deadline_ms for k, t in self._timers.items()}

    # ------------------------------------------------------------ records

    def _group_metadata_record(
        self, group: ClassicGroup, assignment: dict[str, bytes] | None = None
    ) -> tuple[int, bytes, bytes | None]:
        members = [
            MemberMetadata(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(group.protocol_name),
                assignment=(
                    m.assignment if assignment is None else assignment.get(m.member_id, b"")
                ),
            )
            for m in group.members.values()
        ]
        value = encode_group_metadata_value(
            protocol_type=group.protocol_type or "",
            generation=group.generation,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=(
                -1 if group.state_timestamp_ms is None else group.state_timestamp_ms
            ),
            members=members,
        )
        return (self.partition_of(group.group_id), encode_group_metadata_key(group.group_id), value)

    def _empty_group_metadata_record(
        self, group: ClassicGroup, now_ms: int
    ) -> tuple[int, bytes, bytes | None]:
        # What Kafka writes to make a freshly created group exist in the log.
        value = encode_group_metadata_value(
            protocol_type="",
            generation=0,
            protocol=None,
            leader=None,
            current_state_timestamp=(
                now_ms if group.state_timestamp_ms is None else group.state_timestamp_ms
            ),
            members=[],
        )
        return (self.partition_of(group.group_id), encode_group_metadata_key(group.group_id), value)

    def _group_tombstone(self, group_id: str) -> tuple[int, bytes, bytes | None]:
        return (self.partition_of(group_id), encode_group_metadata_key(group_id), None)

    def _offset_tombstone(
        self, group_id: str, topic: str, partition: int
    ) -> tuple[int, bytes, bytes | None]:
        return (
            self.partition_of(group_id),
            encode_offset_commit_key(group_id, topic, partition),
            None,
        )

    # ------------------------------------------------------------ observability

    def groups_snapshot(self) -> list[tuple[str, str, int, str, str]]:
        """(group id, state, member count, protocol type, protocol name) of every group."""
        return [
            (
                g.group_id,
                g.state.value,
                len(g.members),
                g.protocol_type or "",
                g.protocol_name or "",
            )
            for g in self.groups.values()
        ]
