"""Which workers a group's history read asks (``runtime.history_writers``), on files in a
test's directory: none while the worker count never changed, the holders of the partitions
a run of another count wrote the group's offsets partition to, every holder of a partition
whose writers are unknown; a run whose entries have expired no longer counts."""

from __future__ import annotations

from pathlib import Path

from coordinator.history.model import HISTORY_TOPIC
from coordinator.placement import worker_of
from coordinator.runtime.history_writers import WRITERS_FILE, holding, read_runs, record

DAY = 86_400_000
RETENTION = 7 * DAY
T0 = 1_764_000_000_000


def part(data: Path, q: int) -> Path:
    d = data / f"{HISTORY_TOPIC}-{q}"
    d.mkdir(exist_ok=True)
    return d


def asked(data: Path, offsets_partition: int, workers: int, me: int, now: int) -> set[int]:
    """What ``Worker._history_holders`` computes."""
    held = holding(data, offsets_partition, now, RETENTION)
    return {worker_of(HISTORY_TOPIC, q, workers) for q in held} - {me}


def test_a_count_that_never_changed_asks_no_worker(tmp_path: Path) -> None:
    for q in range(4):
        record(part(tmp_path, q), 4, T0, had_history=False)
        record(part(tmp_path, q), 4, T0 + DAY, had_history=True)  # a restart: same count
    assert read_runs(part(tmp_path, 0)) == [(4, T0)]
    for p in range(50):
        assert holding(tmp_path, p, T0 + DAY, RETENTION) == {p % 4}
        assert asked(tmp_path, p, 4, p % 4, T0 + DAY) == set()


def test_after_a_change_only_the_holders_of_the_older_runs_partitions_are_asked(
    tmp_path: Path,
) -> None:
    for q in range(2):  # a run of 2 workers, then one of 3
        record(part(tmp_path, q), 2, T0, had_history=False)
    for q in range(3):
        record(part(tmp_path, q), 3, T0 + DAY, had_history=q < 2)
    assert read_runs(part(tmp_path, 1)) == [(2, T0), (3, T0 + DAY)]
    now = T0 + 2 * DAY
    # Offsets partition 5: worker 1 of 2 wrote it to partition 1, worker 2 of 3 writes 2.
    assert holding(tmp_path, 5, now, RETENTION) == {1, 2}
    assert asked(tmp_path, 5, 3, 2, now) == {1}
    # Offsets partition 4: partition 0 (2 workers), partition 1 (3 workers): worker 0 only.
    assert asked(tmp_path, 4, 3, 1, now) == {0}
    # Offsets partition 6: partition 0 in both runs: nobody else.
    assert asked(tmp_path, 6, 3, 0, now) == set()
    # Once the run of 2 ended more than twice the retention ago, only the current count.
    later = T0 + DAY + 2 * RETENTION + 1
    assert asked(tmp_path, 5, 3, 2, later) == set()


def test_fewer_workers_ask_the_holder_of_the_left_over_partitions(tmp_path: Path) -> None:
    for q in range(4):
        record(part(tmp_path, q), 4, T0, had_history=False)
    for q in range(2):
        record(part(tmp_path, q), 2, T0 + DAY, had_history=True)
    now = T0 + 2 * DAY
    # Offsets partition 7: partition 3 (held by worker 3 % 2 = 1) and partition 1.
    assert holding(tmp_path, 7, now, RETENTION) == {1, 3}
    assert asked(tmp_path, 7, 2, 1, now) == set()  # worker 1 holds both itself
    # Offsets partition 6: partition 2 (held by worker 0) and partition 0 (worker 0).
    assert asked(tmp_path, 6, 2, 0, now) == set()
    # Offsets partition 5: partition 1 (worker 1) now, partition 1 before: worker 1 alone.
    assert asked(tmp_path, 5, 2, 1, now) == set()
    # Offsets partition 2 with 2 workers is worker 0's; with 4 it was partition 2: worker 0.
    assert asked(tmp_path, 3, 2, 1, now) == set()


def test_unknown_writers_may_hold_anything(tmp_path: Path) -> None:
    # A partition of a kgc older than the file, and one whose history predates its file.
    part(tmp_path, 1)
    record(part(tmp_path, 0), 2, T0 + DAY, had_history=True)
    assert read_runs(part(tmp_path, 0)) == [(0, 0), (2, T0 + DAY)]
    record(part(tmp_path, 2), 2, T0 + DAY, had_history=False)  # not a partition of 2 now
    now = T0 + 2 * DAY
    assert holding(tmp_path, 4, now, RETENTION) == {0, 1}
    assert asked(tmp_path, 4, 2, 0, now) == {1}
    # The unknown run ended (the count-2 run began) more than twice the retention ago.
    assert holding(tmp_path, 4, T0 + DAY + 2 * RETENTION + 1, RETENTION) == {0, 1}
    (part(tmp_path, 1) / WRITERS_FILE).write_text("garbage\n")  # a line that does not parse
    assert read_runs(part(tmp_path, 1)) == [(0, 0)]
    assert 1 in holding(tmp_path, 3, now, RETENTION)
