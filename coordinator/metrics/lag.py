"""Consumer lag per (group, topic, partition) with a committed offset, computed at scrape time.

How this works: ``LagTracker`` reports ``kgc_consumergroup_committed_offset``,
``kgc_consumergroup_lag`` (records between the committed offset and the partition's high
watermark, what Fetch serves) and ``kgc_consumergroup_lag_seconds``: now minus the timestamp
of the record at the committed offset -- the oldest record the group has not consumed --
read from the partition's own log (the batch holding that offset, found through the
segment's offset index; exact, where exporters interpolate between sampled offsets), 0 when
caught up. ``kgc_partition_log_end_offset`` is the high watermark of each partition
reported. A partition that is not in this node's data plane (a group coordinated here for
topics kept elsewhere, or a partition another cluster node leads) reports its committed
offset only.

The cost is bounded: the table is computed at most once per ``LAG_CACHE_MS`` (concurrent
scrapes share it), record timestamps are cached per (partition, offset) so a group that has
not moved costs no read, the work is done in slices of ``LAG_SLICE_S`` that yield to the
event loop, and at most ``metrics.lag.max.series`` (group, topic, partition) entries are
reported: admission is sticky (a reported series stays while its offset exists), later ones
are counted in ``kgc_consumergroup_lag_series_dropped``. The families keep plain tuples
(``LagRow``) and make their Sample objects only when the exposition reads them, on the HTTP
thread. Measured with 10,000 lag series all behind (tests/tools/test_metrics_lag.py, a
loaded 2-core machine): the first scrape spends 0.6-1.8 s of loop time on the timestamp
lookups, in some 350 slices; a later one, with the timestamps cached, ~30 ms.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

from coordinator.dataplane.reads import high_watermark
from coordinator.history.status import StatusSettings, partition_status, worst
from storage.interface import wall_clock_ms
from storage.record_batch import (
    ATTR_LOG_APPEND_TIME,
    CorruptBatchError,
    UnsupportedCompressionError,
    iter_record_tuples,
    parse_header,
)

if TYPE_CHECKING:
    from coordinator.dataplane import DataPlane
    from storage.interface import PartitionLog

log = logging.getLogger("kgc.metrics")

# The table is recomputed at most this often (scrapes in between share it).
LAG_CACHE_MS = 1000
# Longest run of lag work on the event loop before it yields to other tasks.
LAG_SLICE_S = 0.002
# A batch whose records at or past the committed offset were all compacted away sends the
# lookup on to the next batch; this many at most.
LAG_LOOKUP_BATCHES = 16


def record_timestamp(plog: PartitionLog, offset: int, end: int) -> int | None:
    """Timestamp of the first record at or after ``offset`` and below ``end``, from the log.

    The read starts at the batch holding ``offset`` (the segment's offset index, then a
    short walk) and decodes it: a LogAppendTime batch's records all carry its max
    timestamp; a CreateTime record carries its own. When compaction removed every record
    of that batch at or past ``offset`` the next batch is read (``LAG_LOOKUP_BATCHES`` at
    most). A batch whose codec cannot be decoded here answers its base timestamp (its
    first record's, the nearest the header tells). None: nothing there, or unreadable.
    """
    for _ in range(LAG_LOOKUP_BATCHES):
        if offset >= end:
            return None
        try:
            data = plog.read(offset, 1, max_offset=end)  # the whole first batch, one only
            if not data:
                return None
            h = parse_header(data)
            if h.attributes & ATTR_LOG_APPEND_TIME:
                return h.max_timestamp if h.max_timestamp >= 0 else None
            try:
                for off, ts, _key, _value in iter_record_tuples(data):
                    if off >= offset:
                        return ts if ts >= 0 else None
            except UnsupportedCompressionError:
                return h.base_timestamp if h.base_timestamp >= 0 else None
        except (OSError, LookupError, RuntimeError, CorruptBatchError) as e:
            # Closed, truncated, deleted meanwhile or damaged (the read reported the
            # damage): no timestamp this time.
            log.debug("lag: no timestamp at %s offset %d: %r", plog.dir.name, offset, e)
            return None
        offset = h.next_offset
    return None


# One reported (group, topic, partition): its labels, committed offset, lag in records and
# lag in seconds (None: not measured here).
LagRow = tuple[str, str, str, int, int | None, float | None]
_LAG_LABELS = ("group", "topic", "partition")


class _RowFamily(Metric):
    """A gauge family whose samples are made from ``LagRow`` column ``column`` when the
    exposition reads them (on the HTTP thread): building and later freeing 30,000 Sample
    objects and label dicts on the event loop, and the garbage collections they trigger,
    would hold it for tens of milliseconds per scrape; the rows are plain tuples."""

    def __init__(self, name: str, documentation: str, rows: list[LagRow], column: int) -> None:
        super().__init__(name, documentation, "gauge")
        self._rows = rows
        self._column = column

    @property
    def samples(self) -> list[Sample]:
        name, col = self.name, self._column
        return [
            Sample(name, dict(zip(_LAG_LABELS, row[:3], strict=True)), row[col])  # type: ignore[arg-type]
            for row in self._rows
            if row[col] is not None
        ]

    @samples.setter
    def samples(self, _value: list[Sample]) -> None:
        pass  # Metric.__init__ sets an empty list; the rows are the samples


@dataclass(slots=True)
class LagTable:
    """One computation of the lag families; read-only once built (scrapes share it)."""

    families: list[Metric]
    computed_ms: int  # when it was finished (its lag seconds are as of when it began)
    dropped: int  # (group, topic, partition) entries left out by the cap
    busy_seconds: float  # time spent on the event loop building it
    slices: int  # how many runs of work that took, each at most about LAG_SLICE_S


class LagTracker:
    """Consumer lag per (group, topic, partition), computed at scrape time (module docstring).

    ``shard`` gives the committed offsets (its ``offsets`` map), ``data`` the partitions
    this node serves (a ``DataPlane``); without one, ``logs`` (a ``LogManager``) is taken
    to serve every log it holds.
    """

    def __init__(
        self,
        max_series: int,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        cache_ms: int = LAG_CACHE_MS,
        status: StatusSettings | None = None,
    ) -> None:
        self.max_series = max_series
        # Each partition's status (``coordinator.history.status``), None: not reported. Its
        # lag at the last offset changes seen by the tables: (offset, lags), per key.
        self.status = status
        self._lags: dict[tuple[str, str, int], tuple[int, list[int]]] = {}
        self.clock = clock
        self.cache_ms = cache_ms
        self.shard: Any = None
        self.data: DataPlane | None = None
        self.logs: Any = None
        self._table: LagTable | None = None
        self._refreshing: asyncio.Future[None] | None = None
        # Keys reported so far: they keep their place while their offset exists.
        self._admitted: set[tuple[str, str, int]] = set()
        # (log, offset) -> record timestamp (-1: none there); only last table's entries.
        self._timestamps: dict[tuple[PartitionLog, int], int] = {}

    @property
    def enabled(self) -> bool:
        return self.max_series > 0 and isinstance(getattr(self.shard, "offsets", None), Mapping)

    @property
    def last(self) -> LagTable | None:
        """The last table computed (fresh or not)."""
        return self._table

    def _fresh(self) -> bool:
        t = self._table
        return t is not None and 0 <= self.clock() - t.computed_ms < self.cache_ms

    def table(self) -> LagTable | None:
        """The current table; recomputed now, in one go, if stale (``refresh`` slices it)."""
        if not self.enabled:
            return None
        if not self._fresh() and self._refreshing is None:
            for _ in self._compute():
                pass
        return self._table

    async def refresh(self) -> None:
        """Recompute the table if stale, yielding to the loop between slices of work;
        concurrent callers wait for the same computation."""
        if not self.enabled or self._fresh():
            return
        running = self._refreshing
        if running is not None:
            await asyncio.shield(running)
            return
        done = self._refreshing = asyncio.get_running_loop().create_future()
        try:
            for _ in self._compute():
                await asyncio.sleep(0)
        finally:
            self._refreshing = None
            done.set_result(None)

    def _served(self, topic: str, partition: int) -> PartitionLog | None:
        data = self.data
        if data is not None:
            plog = data.logs.get(topic, partition)
            if plog is None or plog.closed:
                return None
            # Cluster mode: only partitions whose lease this node holds are its to read.
            if not data.hosted and plog not in data.leader_epochs:
                return None
            return plog
        if self.logs is not None:
            plog = self.logs.get(topic, partition)
            return None if plog is None or plog.closed else plog
        return None

    def _compute(self) -> Generator[None, None, None]:
        """Build a new table; yields whenever a slice of work has run ``LAG_SLICE_S``."""
        perf = time.perf_counter
        slice_start = perf()
        slice_end = slice_start + LAG_SLICE_S
        busy = 0.0
        now = self.clock()
        rows: list[LagRow] = []
        add = rows.append
        ends: dict[tuple[str, int], int] = {}
        old_timestamps = self._timestamps
        timestamps: dict[tuple[PartitionLog, int], int] = {}
        status = self.status
        statuses: list[tuple[str, str, str, str]] = []
        old_lags = self._lags
        lags: dict[tuple[str, str, int], tuple[int, list[int]]] = {}
        unchanged = getattr(getattr(self.shard, "offset_manager", None), "unchanged", {})

        judge = functools.partial(_judge, status, now, old_lags, lags, statuses, unchanged)

        def report(group_id: str, topic: str, partition: int, entry: Any) -> None:
            offset = entry.offset
            plog = self._served(topic, partition)
            if plog is None:
                add((group_id, topic, str(partition), offset, None, None))
                return
            end = ends.get((topic, partition))
            if end is None:
                end = ends[(topic, partition)] = high_watermark(plog)
            if status is not None:
                judge(group_id, topic, partition, entry, plog, end)
            behind = max(end - offset, 0)
            if behind == 0:
                add((group_id, topic, str(partition), offset, 0, 0.0))
                return
            # Records below the log start are gone: the oldest unconsumed one still there
            # is the log start's.
            at = (plog, max(offset, plog.log_start_offset))
            ts = timestamps.get(at)
            if ts is None:
                ts = old_timestamps.get(at)
                if ts is None:
                    found = record_timestamp(plog, at[1], end)
                    ts = -1 if found is None else found
                timestamps[at] = ts
            seconds = max(now - ts, 0) / 1000.0 if ts >= 0 else None
            add((group_id, topic, str(partition), offset, behind, seconds))

        # Admission: keys reported last time keep their place; new ones take free places
        # in the order met. ``admitted`` still counts last table's keys not met yet, so
        # places freed by entries gone since then go, at the end, to the first keys that
        # waited (at most ``limit`` of them are remembered).
        admitted = self._admitted
        kept: set[tuple[str, str, int]] = set()
        waiting: list[tuple[str, str, int, Any]] = []
        limit = self.max_series
        dropped = 0
        n = 0
        slices = 1
        offsets: Mapping[str, Mapping[tuple[str, int], Any]] = self.shard.offsets
        for group_id in list(offsets):
            parts = offsets.get(group_id)
            if not parts:
                continue
            for (topic, partition), entry in list(parts.items()):
                key = (group_id, topic, partition)
                if key not in admitted:
                    if len(admitted) >= limit:
                        dropped += 1
                        if len(waiting) < limit:
                            waiting.append((group_id, topic, partition, entry))
                        continue
                    admitted.add(key)
                kept.add(key)
                report(group_id, topic, partition, entry)
                n += 1
                if n & 3 == 0 and perf() >= slice_end:
                    busy += perf() - slice_start
                    slices += 1
                    yield
                    slice_start = perf()
                    slice_end = slice_start + LAG_SLICE_S
        for group_id, topic, partition, entry in waiting[: max(limit - len(kept), 0)]:
            kept.add((group_id, topic, partition))
            report(group_id, topic, partition, entry)
            dropped -= 1
        self._admitted = kept
        self._timestamps = timestamps
        self._lags = lags
        families = _families(rows, ends)
        if status is not None:
            families += _status_families(statuses)
        busy += perf() - slice_start
        # Fresh from when it is done: a long sliced computation is not redone at once.
        self._table = LagTable(families, self.clock(), dropped, busy, slices)


def _judge(
    status: Any,
    now: int,
    old_lags: dict[tuple[str, str, int], tuple[int, list[int]]],
    lags: dict[tuple[str, str, int], tuple[int, list[int]]],
    statuses: list[tuple[str, str, str, str]],
    unchanged: Any,
    group_id: str,
    topic: str,
    partition: int,
    entry: Any,
    plog: PartitionLog,
    end: int,
) -> None:
    """A partition's status from its lag now and at its last offset changes (kept in
    ``lags`` for the next table)."""
    assert status is not None
    key = (group_id, topic, partition)
    offset = entry.offset
    seen = old_lags.get(key)
    behind = max(end - offset, 0)
    before = [] if seen is None else seen[1]  # the lags at earlier offset changes
    if seen is not None and seen[0] != offset:  # moved since the last table: a sample
        seen = (offset, [*before[-status.window_commits :], behind])
    else:
        seen = (offset, before)
    lags[key] = seen
    statuses.append(
        (
            group_id, topic, str(partition),
            partition_status(
                status, now, offset, entry.commit_timestamp_ms,
                unchanged.get(group_id, {}).get((topic, partition), 0),
                plog.log_start_offset, end, before,
            ),
        )
    )  # fmt: skip


def _families(rows: list[LagRow], ends: dict[tuple[str, int], int]) -> list[Metric]:
    """The lag families over ``rows``, and the high watermark of each partition read."""
    log_end = GaugeMetricFamily(
        "kgc_partition_log_end_offset",
        "High watermark (what Fetch serves) of each partition a reported group committed",
        labels=["topic", "partition"],
    )
    for (topic, partition), end in sorted(ends.items()):
        log_end.add_metric([topic, str(partition)], end)
    families: list[Metric] = [
        _RowFamily(
            "kgc_consumergroup_committed_offset",
            "Offset committed by the group (the next record it will consume)",
            rows,
            3,
        ),
        _RowFamily(
            "kgc_consumergroup_lag",
            "Records between the committed offset and the partition's high watermark",
            rows,
            4,
        ),
        _RowFamily(
            "kgc_consumergroup_lag_seconds",
            "Age of the oldest record the group has not consumed (now minus the timestamp "
            "of the record at its committed offset, read from the log); 0 when caught up",
            rows,
            5,
        ),
        log_end,
    ]
    return families


def _status_families(statuses: list[tuple[str, str, str, str]]) -> list[Metric]:
    """Each partition's status and each group's worst, as 1 under a ``status`` label."""
    partition = GaugeMetricFamily(
        "kgc_consumergroup_partition_status",
        "A group's partition's status by Burrow's rules (OK, WARN, STALL, STOP, ERR; "
        "docs/history.md): 1 under its status",
        labels=["group", "topic", "partition", "status"],
    )
    by_group: dict[str, list[str]] = {}
    for group_id, topic, p, st in statuses:
        partition.add_metric([group_id, topic, p, st], 1)
        by_group.setdefault(group_id, []).append(st)
    group = GaugeMetricFamily(
        "kgc_consumergroup_status",
        "A group's status: its worst partition's (OK < WARN < STALL < STOP < ERR), 1 under it",
        labels=["group", "status"],
    )
    for group_id, sts in sorted(by_group.items()):
        group.add_metric([group_id, worst(sts)], 1)
    return [partition, group]


def lag_families(table: LagTable | None) -> Iterator[Metric]:
    """The last lag table's families and what it cost (none while lag is not measured)."""
    if table is None:
        return
    yield from table.families
    yield GaugeMetricFamily(
        "kgc_consumergroup_lag_series_dropped",
        "(group, topic, partition) entries with a committed offset left out of the lag "
        "metrics by metrics.lag.max.series",
        value=table.dropped,
    )
    yield GaugeMetricFamily(
        "kgc_consumergroup_lag_compute_seconds",
        "Event-loop time spent building the last lag table",
        value=table.busy_seconds,
    )
