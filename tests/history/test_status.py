"""Burrow's rules for a partition's status, on the pure evaluator."""

from __future__ import annotations

import pytest

from coordinator.history.status import StatusSettings, partition_status, worst

S = StatusSettings(window_commits=5, stop_ms=60_000)
NOW = 1_000_000


def status(
    committed: int = 100,
    last_commit_ago: int = 1_000,
    unchanged: int = 0,
    start: int = 0,
    end: int = 150,
    lags: list[int] | None = None,
) -> str:
    return partition_status(
        S, NOW, committed, NOW - last_commit_ago, unchanged, start, end, lags or []
    )


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"committed": 151}, "ERR"),  # past the log end
        ({"start": 120}, "ERR"),  # below the log start (retention passed it)
        ({"end": 100}, "OK"),  # caught up
        ({"end": 100, "last_commit_ago": 10**9}, "OK"),  # idle but nothing to consume
        ({"last_commit_ago": 60_001}, "STOP"),
        ({"last_commit_ago": 60_001, "unchanged": 10}, "STOP"),
        ({"unchanged": 4}, "STALL"),  # the last 5 commits kept the offset
        ({"unchanged": 3}, "OK"),
        ({"lags": [10, 20, 30, 40]}, "WARN"),  # lag 50 now: never decreasing
        ({"lags": [10, 60, 30, 40]}, "OK"),  # it went down once
        ({"lags": [50, 50]}, "WARN"),  # three samples, flat
        ({"lags": [50]}, "OK"),  # too few samples to say
    ],
)
def test_burrows_rules(kw: dict[str, int | list[int]], expected: str) -> None:
    assert status(**kw) == expected  # type: ignore[arg-type]


def test_a_groups_status_is_its_worst_partitions() -> None:
    assert worst(["OK", "STALL", "WARN"]) == "STALL"
    assert worst(["OK", "ERR", "STOP"]) == "ERR"
    assert worst([]) == "OK"
