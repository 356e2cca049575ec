"""A partition's status, as Burrow evaluates a consumer: OK, WARN, STALL, STOP, ERR.

How this works: ``partition_status`` reads what a group's history and the partition's log
say now -- the committed offset, when it was last committed, how many commits in a row kept
it, the log's start and end, and the lag the partition had at each of its recent offset
changes -- and applies Burrow's rules (its evaluator's checks), first match wins:

* **ERR**: the committed offset is outside the log (below its start or past its end): the
  consumer will reset or fail when it resumes.
* **OK**: no lag.
* **STOP**: lag, and no commit at all for ``offsets.status.stop.ms``: the consumer is gone or
  hung.
* **STALL**: lag, commits arriving, but the last ``offsets.status.window.commits`` commits all
  committed the same offset: the consumer is alive and stuck (a poison record, a blocked
  handler).
* **WARN**: lag that did not decrease across the last ``offsets.status.window.commits``
  offset changes while the offset moved: the consumer commits but falls behind.
* **OK** otherwise.

``worst`` orders them for a group's status (OK < WARN < STALL < STOP < ERR).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

__all__ = ["STATUSES", "StatusSettings", "partition_status", "worst"]

STATUSES = ("OK", "WARN", "STALL", "STOP", "ERR")


@dataclass(frozen=True, slots=True)
class StatusSettings:
    window_commits: int = 5  # offsets.status.window.commits
    stop_ms: int = 300_000  # offsets.status.stop.ms


def partition_status(
    s: StatusSettings,
    now_ms: int,
    committed: int,
    last_commit_ms: int,
    unchanged_commits: int,
    log_start: int,
    log_end: int,
    lags: Sequence[int],
) -> str:
    """``lags``: the partition's lag at each of its recent offset changes, oldest first."""
    if committed < log_start or committed > log_end:
        return "ERR"
    lag = log_end - committed
    if lag <= 0:
        return "OK"
    if now_ms - last_commit_ms > s.stop_ms:
        return "STOP"
    if unchanged_commits >= s.window_commits - 1:
        return "STALL"
    recent = [*lags[-s.window_commits :], lag]
    if len(recent) >= min(3, s.window_commits) and all(b >= a for a, b in pairwise(recent)):
        return "WARN"
    return "OK"


def worst(statuses: Iterable[str]) -> str:
    """A group's status: its worst partition's (OK for none)."""
    return max(statuses, key=STATUSES.index, default="OK")
