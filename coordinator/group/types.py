"""Plain data shared by the shard and its runtime: configuration, request context, results.

How this works
--------------
The shard never performs I/O.  Every entry point takes the current time in
milliseconds and returns a ``Result`` describing what the runtime must do:

* ``records``: (offsets-log partition, key, value-or-None) to append, in order;
* ``replies``: (reply_to, response dataclass) to send, but only once
  ``records`` are durable (Kafka completes responses after the append);
* ``wakeup``:  set when this Result armed a timer earlier than any other the
  shard holds: the runtime must wake up by then (``None``: nothing to do).
  The deadlines themselves live in the shard's one timer table (``timers.py``);
* ``events``:  what happened, as typed events (``events.py``) that the
  runtime logs and metrics count;
* ``txn``:     None for the usual Result; a ``TxnBatch`` when its records (all of one
  partition) must be one transactional batch of that producer: a TxnOffsetCommit's
  offsets, or the COMMIT/ABORT control record that ends a transaction there.

The shard's state already reflects the Result when it is returned; if the
append of ``records`` fails, the replies must not be released as they are --
answer them with an error and rebuild the partition from the durable log
(``unload`` / ``begin_load`` / ``replay`` / ``load_complete``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from coordinator.group.events import GroupEvent
from coordinator.history.model import OffsetChange

__all__ = [
    "LOG_STRING_MAX_BYTES",
    "GroupConfig",
    "Record",
    "RequestContext",
    "Result",
    "TxnBatch",
    "log_string_fits",
]

Record = tuple[int, bytes, bytes | None]
"""An offsets-log record: (partition, key, value or None for a tombstone)."""


@dataclass(frozen=True, slots=True)
class GroupConfig:
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2147483647
    offsets_topic_num_partitions: int = 50
    offset_metadata_max_bytes: int = 4096
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600000
    # Not Kafka's: report each commit that changes an offset for the group's history
    # (offsets.history.retention.ms > 0).
    offsets_history: bool = False
    # Kafka's group.classic.new.member.join.timeout (not a public broker config).
    group_new_member_join_timeout_ms: int = 300000
    # Consumer groups (KIP-848), Kafka's group.consumer.* broker settings and defaults.
    consumer_group_session_timeout_ms: int = 45000
    consumer_group_min_session_timeout_ms: int = 45000
    consumer_group_max_session_timeout_ms: int = 60000
    consumer_group_heartbeat_interval_ms: int = 5000
    consumer_group_min_heartbeat_interval_ms: int = 5000
    consumer_group_max_heartbeat_interval_ms: int = 15000
    consumer_group_max_size: int = 2147483647
    consumer_group_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_group_migration_policy: str = "bidirectional"
    # Kafka's internal group.consumer.regex.refresh.interval.ms.
    consumer_group_regex_refresh_interval_ms: int = 600000
    # Streams groups (KIP-1071), Kafka's group.streams.* broker settings and defaults.
    streams_group_session_timeout_ms: int = 45000
    streams_group_heartbeat_interval_ms: int = 5000
    streams_group_max_size: int = 2147483647
    streams_group_num_standby_replicas: int = 0
    streams_group_max_standby_replicas: int = 2
    streams_group_initial_rebalance_delay_ms: int = 3000
    streams_group_assignment_interval_ms: int = 1000
    streams_group_rack_aware_assignment_tags: tuple[str, ...] = ()
    streams_group_task_offset_interval_ms: int = 60000
    streams_group_acceptable_recovery_lag: int = 10000
    # Share groups (KIP-932), Kafka's group.share.* broker settings and defaults.
    share_group_session_timeout_ms: int = 45000
    share_group_min_session_timeout_ms: int = 45000
    share_group_max_session_timeout_ms: int = 60000
    share_group_heartbeat_interval_ms: int = 5000
    share_group_min_heartbeat_interval_ms: int = 5000
    share_group_max_heartbeat_interval_ms: int = 15000
    share_group_max_size: int = 200
    share_group_initialize_retry_interval_ms: int = 30000

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000


class RequestContext(NamedTuple):
    """Who asked (a NamedTuple: built on every request, so it must be cheap)."""

    api_version: int
    client_id: str
    client_host: str
    reply_to: int  # opaque handle from the runtime; a parked request is answered later by it


class TxnBatch(NamedTuple):
    """How a Result's records are written when they belong to a transaction."""

    producer_id: int
    producer_epoch: int
    # True: a control batch (its one record the COMMIT/ABORT marker); False: the
    # transactional offsets of a TxnOffsetCommit.
    control: bool


class Result:
    # A plain class: one is built per request, and literal lists are cheaper than a
    # dataclass's default factories.
    __slots__ = ("events", "history", "records", "replies", "txn", "wakeup")

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.replies: list[tuple[int, object]] = []
        self.wakeup: int | None = None
        self.events: list[GroupEvent] = []
        self.txn: TxnBatch | None = None
        # Committed offsets this Result changes, for the group's history (None: none; a
        # list only when there is one, so a commit without history builds nothing more).
        self.history: list[OffsetChange] | None = None

    def extend(self, other: Result) -> None:
        if (other.txn is not None or self.txn is not None) and other.records:
            # A transactional batch holds one producer's records and nothing else.
            if self.records and self.txn != other.txn:
                raise ValueError("a transactional Result cannot be merged with another")
            self.txn = other.txn
        self.records.extend(other.records)
        self.replies.extend(other.replies)
        if other.wakeup is not None and (self.wakeup is None or other.wakeup < self.wakeup):
            self.wakeup = other.wakeup
        self.events.extend(other.events)
        if other.history:
            if self.history is None:
                self.history = []
            self.history.extend(other.history)

    def __repr__(self) -> str:
        return (
            f"Result(records={self.records!r}, replies={self.replies!r}, "
            f"wakeup={self.wakeup!r}, events={self.events!r}, txn={self.txn!r})"
        )


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
