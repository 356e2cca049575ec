"""Which worker counts wrote each history partition: whom a group's history read must ask.

How this works: under ``kgc.workers`` a group of offsets partition p is coordinated, in a
run of N workers, by worker p % N, which writes its history to history partition p % N. So
history partition q holds some of p's groups only if a run of some count M wrote q and
p % M == q. Each process records, in its own history partition's directory, the worker
counts of the runs that wrote it (``history.writers``: one line ``<count> <since ms>`` per
run whose count differed from the one before, written atomically -- temporary file, fsync,
rename, directory fsync -- before the process writes any history, ``record``). A partition
written before this file existed gets a first line of count 0: unknown, it may hold any
group's history.

``holding`` reads every history partition's file (a few bytes each; at most one file per
partition ever written) and gives the partitions that may hold p's groups. A run's line is
kept while its end (the next line's since) is within twice the retention of now: after
that its entries have expired (the retention deletes a segment a tenth of the retention
after its last entry passed it, checking every tenth), so it no longer counts. A partition
without a file (``record`` failed half-way, or a process older than this file that still
writes it) may hold anything too. The worker holding q is q % N (``placement.worker_of``).
"""

from __future__ import annotations

from pathlib import Path

from coordinator.history.model import HISTORY_TOPIC
from storage.files import replace_file

__all__ = ["UNKNOWN", "WRITERS_FILE", "holding", "read_runs", "record"]

WRITERS_FILE = "history.writers"
# A run whose worker count was not recorded: it may have written any group's history.
UNKNOWN = 0

Run = tuple[int, int]  # (worker count, since ms)


def read_runs(part_dir: Path) -> list[Run] | None:
    """The runs recorded in ``part_dir`` (None: no file; a line that does not parse is
    taken as an unknown run)."""
    try:
        text = (part_dir / WRITERS_FILE).read_text()
    except FileNotFoundError:
        return None
    runs: list[Run] = []
    for line in text.splitlines():
        fields = line.split()
        try:
            count, since = int(fields[0]), int(fields[1])
        except (IndexError, ValueError):
            count, since = UNKNOWN, 0
        runs.append((max(count, UNKNOWN), since))
    return runs


def record(part_dir: Path, workers: int, now_ms: int, had_history: bool) -> None:
    """Record that a run of ``workers`` writes the history partition of ``part_dir`` from
    ``now_ms`` on (``had_history``: the partition holds entries already). Raises the
    OSError of a write that failed (nothing is then written under this count: the caller
    does not start)."""
    runs = read_runs(part_dir)
    if runs is None:
        runs = [(UNKNOWN, 0)] if had_history else []
    if runs and runs[-1][0] == workers:
        return  # the same count as the run before: nothing new to say
    runs.append((workers, now_ms))
    data = "".join(f"{count} {since}\n" for count, since in runs).encode()
    # a leftover .tmp is removed by the log's open
    replace_file(part_dir / WRITERS_FILE, data)


def _counts(runs: list[Run] | None, now_ms: int, retention_ms: int) -> set[int] | None:
    """The counts whose entries may still be kept (None: any)."""
    if runs is None:
        return None
    horizon = now_ms - 2 * retention_ms
    counts: set[int] = set()
    for i, (count, _since) in enumerate(runs):
        if i + 1 < len(runs) and runs[i + 1][1] < horizon:
            continue  # ended long enough ago: its entries have expired
        if count == UNKNOWN:
            return None
        counts.add(count)
    return counts


def holding(data_dir: Path, offsets_partition: int, now_ms: int, retention_ms: int) -> set[int]:
    """The history partitions on disk that may hold groups of ``offsets_partition``."""
    prefix = HISTORY_TOPIC + "-"
    out: set[int] = set()
    for path in data_dir.iterdir():
        name = path.name
        if not name.startswith(prefix) or not name[len(prefix) :].isdigit():
            continue
        q = int(name[len(prefix) :])
        counts = _counts(read_runs(path), now_ms, retention_ms)
        if counts is None or any(offsets_partition % m == q for m in counts):
            out.add(q)
    return out
