"""Plain data shared by the shard and its runtime: configuration, request context, results.

How this works
--------------
The shard never performs I/O.  Every entry point takes the current time in
milliseconds and returns a ``Result`` describing what the runtime must do:

* ``records``: (offsets-log partition, key, value-or-None) to append, in order;
* ``replies``: (reply_to, response dataclass) to send, but only once
  ``records`` are durable (Kafka completes responses after the append);
* ``timers``:  (key, absolute deadline ms) to arm or re-arm, or (key, None)
  to cancel.  A timer that fires is handed back through ``on_timer``;
* ``events``:  human-readable log lines.

Apply ``timers`` in list order: one Result may cancel and re-arm the same key.
The shard's state already reflects the Result when it is returned; if the
append of ``records`` fails, the replies must not be released as they are --
answer them with an error and rebuild the partition from the durable log
(``unload`` / ``begin_load`` / ``replay`` / ``load_complete``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["GroupConfig", "RequestContext", "Result"]


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
    # Kafka's group.classic.new.member.join.timeout (not a public broker config).
    group_new_member_join_timeout_ms: int = 300000

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000


class RequestContext(NamedTuple):
    """Who asked (a NamedTuple: built on every request, so it must be cheap)."""

    api_version: int
    client_id: str
    client_host: str
    reply_to: int  # opaque handle from the runtime; a parked request is answered later by it


class Result:
    # A plain class: one is built per request, and literal lists are cheaper than a
    # dataclass's default factories.
    __slots__ = ("events", "records", "replies", "timers")

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []
        self.replies: list[tuple[int, object]] = []
        self.timers: list[tuple[str, int | None]] = []
        self.events: list[str] = []

    def extend(self, other: Result) -> None:
        self.records.extend(other.records)
        self.replies.extend(other.replies)
        self.timers.extend(other.timers)
        self.events.extend(other.events)

    def __repr__(self) -> str:
        return (
            f"Result(records={self.records!r}, replies={self.replies!r}, "
            f"timers={self.timers!r}, events={self.events!r})"
        )
