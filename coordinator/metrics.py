"""Prometheus metrics for kgc, served over HTTP on ``--metrics-port`` (default 9404, 0 = off).

How this works: everything lives in one ``Metrics`` object with its own
``CollectorRegistry`` (never the global one, so tests can run several servers in one process).

* Per-request accounting is on the hot path (~150k requests/s), so it does not use
  prometheus-client's locked metric children: the server calls ``on_request`` with the API
  key, version, response and start time, which bumps plain integers in a slot cached per
  (API, version) and a per-API latency bucket array. A custom collector turns those into
  ``kgc_requests_total{api,version,error}`` and ``kgc_request_duration_seconds{api}`` at
  scrape time. A request counts under its response's top-level ``error_code`` when the
  response has one (``NONE`` otherwise).
* State that already exists elsewhere is read at scrape time, never mirrored: groups by
  state and members per group (``groups_snapshot()`` of the group core; ``kgc_groups`` keeps
  classic groups, ``kgc_groups_by_type`` has both types, consumer groups from
  ``shard.consumer.groups``), rebalances by cause
  (its ``rebalances`` counters), stored offsets (its ``offsets`` map), log bytes/segments/offsets per partition
  (the ``LogManager``; ``kgc_partition_damaged`` says which logs hold a corrupt batch, and
  ``kgc_offsets_partitions_offline`` how many offsets partitions failed to load), fsync counts and latency (the ``Flusher``'s stats) and compaction
  runs (the cleaners' stats).
* Security (issue 16): ``kgc_connections{listener}`` counts the server's live connections
  by the listener they came on, at scrape time (``watch(server)`` tells the metrics which
  server); ``kgc_authentications_total{listener,mechanism,result}`` counts finished SASL
  exchanges (result ``success`` or ``failure``, re-authentications included), reported by
  each SASL listener's ``on_authentication`` hook, which ``watch`` sets;
  ``kgc_authorization_denied_total{api,resource_type}`` counts the denials the authorizer
  audits (those it also logs on ``kgc.authorizer``): ``count_denials`` wraps its
  ``on_denied`` and asks ``ApiAuthorizer.api_key`` which API's checks are running (checks
  made outside them, none today, would count under ``api="unknown"``).
* A few things are events: connections opened/closed (``on_connection``) or refused for want
  of file descriptors (``on_refused``), offsets-log load
  time per partition (``partition_loaded``), rebalance durations and expired offsets
  (``group_events``, fed the group core's typed events: ``RebalanceStarted`` starts a
  group's clock, ``GroupStable``, ``GroupEmptied`` or ``GroupDeleted`` stops it;
  ``OffsetsExpired`` carries its count) and offset commits (counted from OffsetCommit
  responses in ``on_request``).
* Consumer groups (KIP-848): heartbeats by error code are the ConsumerGroupHeartbeat slots
  of the request accounting (no extra work per heartbeat); fenced members by reason and
  group-epoch bumps by cause come from the ``ConsumerMembersFenced`` and
  ``ConsumerGroupEpochBumped`` events; reconciliations (current-assignment records written by
  heartbeats) are the consumer manager's ``reconciliations`` counter, read at scrape time;
  target-assignment time is observed by wrapping the manager's ``compute_target`` in a timer.
* Consumer lag (``LagTracker``), per (group, topic, partition) with a committed offset:
  ``kgc_consumergroup_committed_offset``, ``kgc_consumergroup_lag`` (records between the
  committed offset and the partition's high watermark, what Fetch serves) and
  ``kgc_consumergroup_lag_seconds``: now minus the timestamp of the record at the committed
  offset -- the oldest record the group has not consumed -- read from the partition's own
  log (the batch holding that offset, found through the segment's offset index; exact,
  where exporters interpolate between sampled offsets), 0 when caught up.
  ``kgc_partition_log_end_offset`` is the high watermark of each partition reported. A
  partition that is not in this node's data plane (a group coordinated here for topics kept
  elsewhere, or a partition another cluster node leads) reports its committed offset only.
  The cost is bounded: the table is computed at scrape time at most once per
  ``LAG_CACHE_MS`` (concurrent scrapes share it), record timestamps are cached per
  (partition, offset) so a group that has not moved costs no read, the work is done in
  slices of ``LAG_SLICE_S`` that yield to the event loop, and at most
  ``metrics.lag.max.series`` (group, topic, partition) entries are reported: admission is
  sticky (a reported series stays while its offset exists), later ones are counted in
  ``kgc_consumergroup_lag_series_dropped``.
* Per-group rebalances by cause, ``kgc_group_rebalances_total{group,cause}``, from the same
  events: a classic group's ``RebalanceStarted`` (``join``, ``leave``, ``session_timeout``,
  ``metadata_change``, ``static_replacement``, ``sync_timeout``), a consumer group's epoch
  bumps (``created``, ``subscription``, ``metadata``, ``regex``) and fencings (one bump,
  counted under the fencing's kind: ``left``, ``session_timeout``, ``rebalance_timeout``...).
  A deleted group's counters go with it.

Exposition: ``serve`` runs prometheus_client's WSGI app (``make_wsgi_app``: OpenMetrics
when the Accept header asks for it, gzip when Accept-Encoding allows, ``name[]``
filtering) on wsgiref's threading server in a daemon thread, so formatting and compressing
a large scrape never run on the event loop. Collection does: the HTTP thread hands the
loop one coroutine (``run_coroutine_threadsafe``) that refreshes the lag table in slices
and then collects every family, so collectors read the group core and the logs from the
thread that mutates them (no locks, no torn reads) and the thread formats the finished
families. The lag families keep plain tuples (``LagRow``) and make their Sample objects only
when the exposition reads them, on the HTTP thread. Measured with 10,000 lag series all
behind (tests/tools/test_metrics_lag.py, a loaded 2-core machine): the first scrape spends
0.6-1.8 s of loop time on the timestamp lookups, in some 350 slices; a later one, with the
timestamps cached, ~30 ms; formatting and gzip take 0.3-0.6 s on the HTTP thread. ``/healthz`` answers ``ok`` once the loop has run a no-op (a stuck loop fails
it, as it fails a scrape: 503 after ``SCRAPE_TIMEOUT_S``).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_args
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Histogram,
    generate_latest,
    make_wsgi_app,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from coordinator.dataplane.plane import high_watermark
from coordinator.group.events import (
    BumpKind,
    ConsumerGroupEpochBumped,
    ConsumerMembersFenced,
    FenceKind,
    GroupDeleted,
    GroupEmptied,
    GroupEvent,
    GroupStable,
    OffsetsExpired,
    RebalanceStarted,
)
from protocol.errors import ErrorCode
from protocol.messages import BY_KEY
from storage.local.log import wall_clock_ms
from storage.offsets_format import OFFSETS_TOPIC
from storage.record_batch import (
    ATTR_LOG_APPEND_TIME,
    CorruptBatchError,
    UnsupportedCompressionError,
    iter_record_tuples,
    parse_header,
)

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

    from coordinator.dataplane import DataPlane
    from coordinator.security import KafkaPrincipal
    from coordinator.security.acl import AclOperation, Authorizer, ResourceType
    from storage.local.log import PartitionLog

log = logging.getLogger("kgc.metrics")

LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
REBALANCE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
CONSUMER_GROUP_STATES = ("Empty", "Assigning", "Reconciling", "Stable", "Dead")
CONSUMER_GROUP_HEARTBEAT_KEY = 68
# Target assignments take microseconds for small groups, up to seconds for 1,000s of members.
ASSIGNMENT_BUCKETS = (0.00005, *(b for b in LATENCY_BUCKETS if b <= 5.0))
# The labels: the events' kinds (coordinator/group/events.py), plus one bump per fencing.
FENCE_REASONS: tuple[str, ...] = get_args(FenceKind)
EPOCH_BUMP_CAUSES: tuple[str, ...] = (*get_args(BumpKind), "members_fenced")
OFFSET_COMMIT_KEYS = frozenset({8, 28})  # OffsetCommit, TxnOffsetCommit
# Consumer lag: the table is recomputed at most this often (scrapes in between share it).
LAG_CACHE_MS = 1000
# Longest run of lag work on the event loop before it yields to other tasks.
LAG_SLICE_S = 0.002
# A batch whose records at or past the committed offset were all compacted away sends the
# lookup on to the next batch; this many at most.
LAG_LOOKUP_BATCHES = 16
# A scrape waits this long for the event loop to collect (503 past it: the loop is stuck).
SCRAPE_TIMEOUT_S = 10.0
_perf_counter = time.perf_counter
_bisect_left = bisect.bisect_left


def api_name(key: int) -> str:
    mod = BY_KEY.get(key)
    if mod is None:
        return f"Api{key}"
    return "".join(part.capitalize() for part in mod.__name__.rsplit(".", 1)[-1].split("_"))


def error_label(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _timed(fn: Callable[..., Any], observe: Callable[[float], None]) -> Callable[..., Any]:
    """``fn``, telling ``observe`` how long each call that returned took (seconds)."""

    def timed(*args: Any) -> Any:
        started = time.perf_counter()
        result = fn(*args)
        observe(time.perf_counter() - started)
        return result

    return timed


class _Latency:
    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0


class _Slot:
    """Counters of one (API, version); ``errors`` by code, ``count`` includes them."""

    __slots__ = ("api", "count", "counts", "errors", "latency", "version")

    def __init__(self, api: str, version: int, latency: _Latency) -> None:
        self.api = api
        self.version = version
        self.count = 0
        self.errors: dict[int, int] = {}
        self.latency = latency
        self.counts = latency.counts  # the API's buckets, shared by its versions


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
    ) -> None:
        self.max_series = max_series
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

        def report(group_id: str, topic: str, partition: int, offset: int) -> None:
            plog = self._served(topic, partition)
            if plog is None:
                add((group_id, topic, str(partition), offset, None, None))
                return
            end = ends.get((topic, partition))
            if end is None:
                end = ends[(topic, partition)] = high_watermark(plog)
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
        waiting: list[tuple[str, str, int, int]] = []
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
                            waiting.append((group_id, topic, partition, entry.offset))
                        continue
                    admitted.add(key)
                kept.add(key)
                report(group_id, topic, partition, entry.offset)
                n += 1
                if n & 3 == 0 and perf() >= slice_end:
                    busy += perf() - slice_start
                    slices += 1
                    yield
                    slice_start = perf()
                    slice_end = slice_start + LAG_SLICE_S
        for group_id, topic, partition, offset in waiting[: max(limit - len(kept), 0)]:
            kept.add((group_id, topic, partition))
            report(group_id, topic, partition, offset)
            dropped -= 1
        self._admitted = kept
        self._timestamps = timestamps
        log_end = GaugeMetricFamily(
            "kgc_partition_log_end_offset",
            "High watermark (what Fetch serves) of each partition a reported group committed",
            labels=["topic", "partition"],
        )
        for (topic, partition), end in sorted(ends.items()):
            log_end.add_metric([topic, str(partition)], end)
        busy += perf() - slice_start
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
        # Fresh from when it is done: a long sliced computation is not redone at once.
        self._table = LagTable(families, self.clock(), dropped, busy, slices)


class Metrics:
    def __init__(
        self,
        *,
        process_metrics: bool = True,
        shard: Any = None,
        logs: Any = None,
        flusher: Any = None,
        cleaners: Callable[[], Iterable[Any]] = list,
        lag_max_series: int = 10000,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        if process_metrics:
            for c in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                self.registry.register(c)
        self._slots: dict[int, _Slot] = {}
        self._latency: dict[str, _Latency] = {}
        self.connections = 0
        self.connections_opened = 0
        self.connections_refused = 0
        self.offset_commits = 0
        self.offsets_expired = 0
        self.partition_load_seconds: dict[int, float] = {}
        self._rebalancing: dict[str, int] = {}  # group -> rebalance start (ms)
        self.rebalance_duration = Histogram(
            "kgc_rebalance_duration_seconds",
            "Time from a group entering PreparingRebalance to it being Stable (or Empty) again",
            buckets=REBALANCE_BUCKETS,
            registry=self.registry,
        )
        # Consumer groups (KIP-848).
        self.members_fenced = dict.fromkeys(FENCE_REASONS, 0)
        self.epoch_bumps = dict.fromkeys(EPOCH_BUMP_CAUSES, 0)
        # Rebalances (classic) and epoch bumps (consumer groups) per group, by cause.
        self.group_rebalances: dict[str, dict[str, int]] = {}
        self.assignment_duration = Histogram(
            "kgc_consumer_group_assignment_duration_seconds",
            "Time to compute a consumer group's target assignment (the server-side assignor)",
            buckets=ASSIGNMENT_BUCKETS,
            registry=self.registry,
        )
        consumer = getattr(shard, "consumer", None)
        if consumer is not None and hasattr(consumer, "compute_target"):
            consumer.compute_target = _timed(
                consumer.compute_target, self.assignment_duration.observe
            )
        # Scrape-time sources (None: not reported).
        self.shard = shard
        self.logs = logs
        self.flusher = flusher
        self.cleaners = cleaners
        # Consumer lag; the app gives it the data plane (``data``) before serving.
        self.lag = LagTracker(lag_max_series)
        self.lag.shard = shard
        self.lag.logs = logs
        self.cluster: Any = None  # coordinator.cluster.Cluster in cluster mode (set by the app)
        # Security: the KafkaServer whose connections are counted per listener (``watch``),
        # SASL exchanges by (listener, mechanism, result), denials by (API, resource type).
        self.server: Any = None
        self.authentications: dict[tuple[str, str, str], int] = {}
        self.denials: dict[tuple[str, str], int] = {}
        self.registry.register(_Collector(self))
        self._http: WSGIServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def data(self) -> DataPlane | None:
        """The data plane whose partitions the lag is measured in."""
        return self.lag.data

    @data.setter
    def data(self, data: DataPlane | None) -> None:
        self.lag.data = data

    # -- hot path
    def on_request(self, key: int, version: int, response: Any, started: float) -> None:
        """Called by the server once per answered request (``started``: perf_counter)."""
        elapsed = _perf_counter() - started
        slot = self._slots.get(key << 8 | version) or self._new_slot(key, version)
        slot.count += 1
        if response.__class__ is not bytes:  # cached encoded bodies are successful answers
            code = getattr(response, "error_code", 0)
            if code:
                slot.errors[code] = slot.errors.get(code, 0) + 1
            elif key in OFFSET_COMMIT_KEYS:
                self._count_commits(response)
        slot.counts[_bisect_left(LATENCY_BUCKETS, elapsed)] += 1
        slot.latency.sum += elapsed

    def _new_slot(self, key: int, version: int) -> _Slot:
        api = api_name(key)
        lat = self._latency.get(api)
        if lat is None:
            lat = self._latency[api] = _Latency()
        slot = self._slots[key << 8 | version] = _Slot(api, version, lat)
        return slot

    def _count_commits(self, response: Any) -> None:
        for topic in getattr(response, "topics", ()):
            for p in topic.partitions:
                if not p.error_code:
                    self.offset_commits += 1

    def on_connection(self, delta: int) -> None:
        self.connections += delta
        if delta > 0:
            self.connections_opened += delta

    def on_refused(self) -> None:
        """A connection was refused for want of file descriptors."""
        self.connections_refused += 1

    # -- security
    def watch(self, server: Any) -> None:
        """Count ``server``'s (a KafkaServer's) connections per listener and the SASL
        exchanges of its listeners; call it once the SASL listeners are attached."""
        self.server = server
        for sasl in server.sasl.values():
            sasl.on_authentication = self.on_authentication

    def on_authentication(self, listener: str, mechanism: str, ok: bool) -> None:
        """A SASL exchange finished on ``listener`` (once per authentication or
        re-authentication; a failure before a mechanism was chosen has mechanism "")."""
        key = (listener, mechanism, "success" if ok else "failure")
        self.authentications[key] = self.authentications.get(key, 0) + 1

    def count_denials(self, authorizer: Authorizer, api_key: Callable[[], int]) -> None:
        """Count ``authorizer``'s audited denials by API and resource type, after whatever
        its ``on_denied`` already does (the ``kgc.authorizer`` log line). ``api_key`` tells
        the API whose checks are running (-1: none)."""
        logged = authorizer.on_denied

        def denied(
            principal: KafkaPrincipal,
            host: str,
            operation: AclOperation,
            resource_type: ResourceType,
            resource_name: str,
        ) -> None:
            if logged is not None:
                logged(principal, host, operation, resource_type, resource_name)
            key = api_key()
            api = api_name(key) if key >= 0 else "unknown"
            label = (api, resource_type.name)
            self.denials[label] = self.denials.get(label, 0) + 1

        authorizer.on_denied = denied

    # -- events
    def partition_loaded(self, partition: int, seconds: float) -> None:
        self.partition_load_seconds[partition] = seconds

    def group_events(self, events: Iterable[GroupEvent], now_ms: int) -> None:
        """Track rebalance durations and expired offsets from the group core's events."""
        for event in events:
            if isinstance(event, RebalanceStarted):
                # A rebalance that restarts before it settled keeps its first start.
                self._rebalancing.setdefault(event.group_id, now_ms)
                self._group_rebalance(event.group_id, event.cause)
            elif isinstance(event, GroupStable | GroupEmptied | GroupDeleted):
                start = self._rebalancing.pop(event.group_id, None)
                if start is not None:
                    self.rebalance_duration.observe(max(now_ms - start, 0) / 1000.0)
                if isinstance(event, GroupDeleted):
                    self.group_rebalances.pop(event.group_id, None)
            elif isinstance(event, OffsetsExpired):
                self.offsets_expired += event.count
                for group_id in event.groups_deleted:
                    self.group_rebalances.pop(group_id, None)
            elif isinstance(event, ConsumerMembersFenced):
                self.members_fenced[event.kind] += len(event.member_ids)
                self.epoch_bumps["members_fenced"] += 1  # one bump for the whole fencing
                self._group_rebalance(event.group_id, event.kind)
            elif isinstance(event, ConsumerGroupEpochBumped):
                self.epoch_bumps[event.kind] += 1
                self._group_rebalance(event.group_id, event.kind)

    def _group_rebalance(self, group_id: str, cause: str) -> None:
        causes = self.group_rebalances.get(group_id)
        if causes is None:
            causes = self.group_rebalances[group_id] = {}
        causes[cause] = causes.get(cause, 0) + 1

    # -- exposition
    def render(self) -> bytes:
        """The text exposition, collected on the calling thread (tests, one-off dumps)."""
        return generate_latest(self.registry)

    async def collect(self) -> list[Metric]:
        """Every family, built on the event loop: the lag table refreshed in slices that
        yield to other tasks, then one pass over the collectors."""
        await self.lag.refresh()
        return list(self.registry.collect())

    async def serve(self, host: str, port: int) -> int:
        """Serve the metrics over HTTP from a daemon thread; returns the bound port.

        prometheus_client's WSGI app does the exposition (content negotiation, gzip); the
        collection runs on this loop (``collect``), the formatting on the HTTP thread.
        """
        self._loop = asyncio.get_running_loop()
        metrics_app = make_wsgi_app(_LoopRegistry(self, self._loop))
        app = _routes(metrics_app, self._loop_alive)
        # Binding resolves the host's name (getaddrinfo, HTTPServer.server_bind): off the loop.
        httpd = self._http = await asyncio.to_thread(_http_server, host, port, app)
        threading.Thread(
            target=httpd.serve_forever, args=(0.2,), name="kgc-metrics-http", daemon=True
        ).start()
        return int(httpd.server_port)

    async def stop(self) -> None:
        httpd, self._http = self._http, None
        if httpd is not None:
            await asyncio.to_thread(httpd.shutdown)  # waits for serve_forever to return
            httpd.server_close()

    def _loop_alive(self) -> bool:
        """From the HTTP thread: whether the event loop runs a no-op within the timeout."""
        loop = self._loop
        if loop is None:
            return False
        done = threading.Event()
        try:
            loop.call_soon_threadsafe(done.set)
        except RuntimeError:  # the loop is closed
            return False
        return done.wait(SCRAPE_TIMEOUT_S)


class MetricsUnavailableError(RuntimeError):
    """The event loop did not collect in time (stuck, or stopped)."""


class _LoopRegistry:
    """What prometheus_client's exposition reads: ``collect`` runs ``Metrics.collect`` on
    the event loop and waits for it on the HTTP thread."""

    def __init__(self, metrics: Metrics, loop: asyncio.AbstractEventLoop) -> None:
        self.metrics = metrics
        self.loop = loop

    def collect(self) -> Iterable[Metric]:
        try:
            future = asyncio.run_coroutine_threadsafe(self.metrics.collect(), self.loop)
        except RuntimeError as e:  # the loop is closed
            raise MetricsUnavailableError(str(e)) from None
        try:
            return future.result(SCRAPE_TIMEOUT_S)
        except TimeoutError:
            future.cancel()
            raise MetricsUnavailableError(
                f"the event loop did not collect within {SCRAPE_TIMEOUT_S:g} s"
            ) from None

    def restricted_registry(self, names: Iterable[str]) -> _Restricted:
        """``?name[]=...``: only the samples named (prometheus_client's query parameter)."""
        return _Restricted(self, frozenset(names))


class _Restricted:
    def __init__(self, registry: _LoopRegistry, names: frozenset[str]) -> None:
        self.registry = registry
        self.names = names

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            samples = [s for s in family.samples if s.name in self.names]
            if samples:
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = samples
                yield kept


def _routes(
    metrics_app: Callable[[WSGIEnvironment, StartResponse], Iterable[bytes]],
    loop_alive: Callable[[], bool],
) -> Callable[[WSGIEnvironment, StartResponse], Iterable[bytes]]:
    """``/healthz`` (the loop answers), everything else prometheus_client's app; a scrape
    the loop cannot collect is a 503, not a traceback."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz":
            ok = loop_alive()
            start_response(
                "200 OK" if ok else "503 Service Unavailable",
                [("Content-Type", "text/plain; charset=utf-8")],
            )
            return [b"ok\n" if ok else b"event loop not responding\n"]
        try:
            return metrics_app(environ, start_response)
        except MetricsUnavailableError as e:
            start_response(
                "503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8")]
            )
            return [f"{e}\n".encode()]

    return app


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _http_server(
    host: str, port: int, app: Callable[[WSGIEnvironment, StartResponse], Iterable[bytes]]
) -> WSGIServer:
    """wsgiref's threading server (prometheus_client's) bound to ``host``: IPv6 for an
    IPv6 host ("::"), IPv4 otherwise."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    server_class = type(
        "MetricsHTTPServer", (ThreadingWSGIServer,), {"address_family": infos[0][0]}
    )
    return make_server(host, port, app, server_class, handler_class=_QuietHandler)


class _Collector(Collector):
    """Builds every scrape-time metric family from the live components."""

    def __init__(self, m: Metrics) -> None:
        self.m = m

    def collect(self) -> Iterator[Metric]:
        yield from self._requests()
        yield from self._connections()
        yield from self._security()
        yield from self._groups()
        yield from self._consumer_groups()
        yield from self._storage()
        yield from self._cluster()
        yield from self._lag()

    def _lag(self) -> Iterator[Metric]:
        table = self.m.lag.table()
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

    def _cluster(self) -> Iterator[Metric]:
        """Cluster mode: the live nodes, what this node leads, the PostgreSQL journal."""
        m = self.m
        if m.cluster is None:
            return
        yield GaugeMetricFamily(
            "kgc_cluster_nodes",
            "Live nodes in the cluster (this node's view)",
            value=len(m.cluster.nodes()),
        )
        led = GaugeMetricFamily(
            "kgc_cluster_partitions_led",
            "Partitions this node leads (holds the lease of and serves)",
            labels=["kind"],
        )
        owned = m.cluster.owned()
        offsets = sum(1 for topic, _p in owned if topic == OFFSETS_TOPIC)
        led.add_metric(["offsets"], offsets)
        led.add_metric(["topic"], len(owned) - offsets)
        yield led
        yield GaugeMetricFamily(
            "kgc_cluster_broker_epoch", "This node's broker epoch", value=m.cluster.broker_epoch
        )
        if m.flusher is not None and m.flusher.journal is not None:
            st = m.flusher.journal.stats  # the PostgreSQL journal's
            yield CounterMetricFamily(
                "kgc_journal_rounds", "Write rounds committed to the database", value=st.rounds
            )
            yield CounterMetricFamily(
                "kgc_journal_rows", "kgc_record_log rows written", value=st.rows
            )
            yield GaugeMetricFamily(
                "kgc_journal_round_max_seconds",
                "Slowest round statement since start",
                value=st.max_latency_ms / 1000.0,
            )
            yield CounterMetricFamily(
                "kgc_journal_trims", "Retention trims applied to the database", value=st.trims
            )
            yield CounterMetricFamily(
                "kgc_journal_compactions",
                "Compacted prefixes rewritten in the database",
                value=st.compactions,
            )
            yield CounterMetricFamily(
                "kgc_journal_maintenance_errors",
                "Failed trims or compaction rewrites (retried)",
                value=st.maintenance_errors,
            )
            yield CounterMetricFamily(
                "kgc_journal_fenced_writes",
                "Partition writes refused because another node holds the lease now",
                value=st.fenced,
            )

    def _requests(self) -> Iterator[Metric]:
        m = self.m
        requests = CounterMetricFamily(
            "kgc_requests",
            "Requests answered, by API, version and top-level error code",
            labels=["api", "version", "error"],
        )
        for slot in sorted(m._slots.values(), key=lambda s: (s.api, s.version)):
            ok = slot.count - sum(slot.errors.values())
            requests.add_metric([slot.api, str(slot.version), "NONE"], ok)
            for code, n in sorted(slot.errors.items()):
                requests.add_metric([slot.api, str(slot.version), error_label(code)], n)
        yield requests
        latency = HistogramMetricFamily(
            "kgc_request_duration_seconds",
            "Time from a request's arrival to its response being ready, by API",
            labels=["api"],
        )
        for api, lat in sorted(m._latency.items()):
            cumulative, buckets = 0, []
            for bound, n in zip((*LATENCY_BUCKETS, float("inf")), lat.counts, strict=True):
                cumulative += n
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            latency.add_metric([api], buckets, lat.sum)
        yield latency
        yield CounterMetricFamily(
            "kgc_offset_commits",
            "Partition offsets committed (OffsetCommit and TxnOffsetCommit)",
            value=m.offset_commits,
        )

    def _connections(self) -> Iterator[Metric]:
        server = self.m.server
        if server is None:
            yield GaugeMetricFamily(
                "kgc_connections", "Open client connections", value=self.m.connections
            )
        else:
            # Read from the server's live connections: every listener, 0 when idle.
            by_listener = dict.fromkeys((li.name for li in server.listenings), 0)
            for conn in server.connections:
                by_listener[conn.listener] = by_listener.get(conn.listener, 0) + 1
            connections = GaugeMetricFamily(
                "kgc_connections", "Open client connections, by listener", labels=["listener"]
            )
            for listener, n in by_listener.items():
                connections.add_metric([listener], n)
            yield connections
        yield CounterMetricFamily(
            "kgc_connections_opened", "Client connections accepted", value=self.m.connections_opened
        )
        yield CounterMetricFamily(
            "kgc_connections_refused",
            "Client connections refused (closed at once) for want of file descriptors",
            value=self.m.connections_refused,
        )

    def _security(self) -> Iterator[Metric]:
        m = self.m
        auth = CounterMetricFamily(
            "kgc_authentications",
            "SASL authentications (and re-authentications) finished, by listener, mechanism "
            "and result (success, failure)",
            labels=["listener", "mechanism", "result"],
        )
        for (listener, mechanism, result), n in sorted(m.authentications.items()):
            auth.add_metric([listener, mechanism, result], n)
        yield auth
        denied = CounterMetricFamily(
            "kgc_authorization_denied",
            "Requests' authorization checks denied (each logged on kgc.authorizer), by API "
            "and resource type",
            labels=["api", "resource_type"],
        )
        for (api, resource_type), n in sorted(m.denials.items()):
            denied.add_metric([api, resource_type], n)
        yield denied

    def _groups(self) -> Iterator[Metric]:
        m = self.m
        shard = m.shard
        if m.partition_load_seconds:
            load = GaugeMetricFamily(
                "kgc_offsets_partition_load_seconds",
                "Time to replay each __consumer_offsets partition at start-up",
                labels=["partition"],
            )
            for p, secs in sorted(m.partition_load_seconds.items()):
                load.add_metric([str(p)], secs)
            yield load
        yield CounterMetricFamily(
            "kgc_offsets_expired", "Committed offsets removed by retention", value=m.offsets_expired
        )
        if shard is None:
            return
        by_state = dict.fromkeys(GROUP_STATES, 0)
        by_consumer_state = dict.fromkeys(CONSUMER_GROUP_STATES, 0)
        members = GaugeMetricFamily("kgc_group_members", "Members of each group", labels=["group"])
        # Classic groups from the classic manager (the shard's snapshot, if it has no such
        # manager); consumer groups from the consumer manager's map, read directly.
        classic = getattr(shard, "classic", None)
        snapshot = classic.groups_snapshot() if classic is not None else shard.groups_snapshot()
        for group_id, state, n_members, *_ in snapshot:
            by_state[state] = by_state.get(state, 0) + 1
            members.add_metric([group_id], n_members)
        consumer = getattr(shard, "consumer", None)
        for group in getattr(consumer, "groups", {}).values():
            state = group.state.value
            by_consumer_state[state] = by_consumer_state.get(state, 0) + 1
            members.add_metric([group.group_id], len(group.members))
        states = GaugeMetricFamily("kgc_groups", "Classic groups by state", labels=["state"])
        for state, n in by_state.items():
            states.add_metric([state], n)
        yield states
        by_type = GaugeMetricFamily(
            "kgc_groups_by_type",
            "Groups by type (classic, consumer) and state",
            labels=["type", "state"],
        )
        for state, n in by_state.items():
            by_type.add_metric(["classic", state], n)
        for state, n in by_consumer_state.items():
            by_type.add_metric(["consumer", state], n)
        yield by_type
        yield members
        rebalances = CounterMetricFamily(
            "kgc_rebalances", "Rebalances started, by cause", labels=["cause"]
        )
        for cause, n in sorted(getattr(shard, "rebalances", {}).items()):
            rebalances.add_metric([cause], n)
        yield rebalances
        per_group = CounterMetricFamily(
            "kgc_group_rebalances",
            "Rebalances per group by cause: a classic group's rebalances, a consumer group's "
            "epoch bumps (created, subscription, metadata, regex) and fencings (left, "
            "session_timeout, ...)",
            labels=["group", "cause"],
        )
        for group_id, causes in m.group_rebalances.items():
            for cause, n in causes.items():
                per_group.add_metric([group_id, cause], n)
        yield per_group
        statuses = getattr(shard, "partitions", None)
        if isinstance(statuses, Mapping):
            yield GaugeMetricFamily(
                "kgc_offsets_partitions_offline",
                "__consumer_offsets partitions whose load failed (their groups answer "
                "NOT_COORDINATOR)",
                value=sum(1 for st in statuses.values() if getattr(st, "value", "") == "failed"),
            )
        offsets = getattr(shard, "offsets", None)
        if isinstance(offsets, Mapping):
            yield GaugeMetricFamily(
                "kgc_offsets_stored",
                "Committed offsets held (group, topic, partition)",
                value=sum(len(v) for v in offsets.values()),
            )

    def _consumer_groups(self) -> Iterator[Metric]:
        """KIP-848 consumer groups: heartbeats, reconciliations, fencing, epochs."""
        m = self.m
        heartbeats = CounterMetricFamily(
            "kgc_consumer_group_heartbeats",
            "ConsumerGroupHeartbeat requests answered, by error code",
            labels=["error"],
        )
        by_error: dict[str, int] = {"NONE": 0}
        for key, slot in m._slots.items():
            if key >> 8 != CONSUMER_GROUP_HEARTBEAT_KEY:
                continue
            by_error["NONE"] += slot.count - sum(slot.errors.values())
            for code, n in slot.errors.items():
                label = error_label(code)
                by_error[label] = by_error.get(label, 0) + n
        for label, n in sorted(by_error.items()):
            heartbeats.add_metric([label], n)
        yield heartbeats
        consumer = getattr(m.shard, "consumer", None)
        yield CounterMetricFamily(
            "kgc_consumer_group_reconciliations",
            "Member assignment changes written (current-assignment records from heartbeats)",
            value=getattr(consumer, "reconciliations", 0),
        )
        fenced = CounterMetricFamily(
            "kgc_consumer_group_members_fenced",
            "Members removed from consumer groups, by reason",
            labels=["reason"],
        )
        for reason, n in m.members_fenced.items():
            fenced.add_metric([reason], n)
        yield fenced
        bumps = CounterMetricFamily(
            "kgc_consumer_group_epoch_bumps",
            "Consumer-group epoch bumps (a new target assignment is due), by cause",
            labels=["cause"],
        )
        for cause, n in m.epoch_bumps.items():
            bumps.add_metric([cause], n)
        yield bumps

    def _storage(self) -> Iterator[Metric]:
        m = self.m
        if m.logs is not None:
            size = GaugeMetricFamily(
                "kgc_log_size_bytes",
                "Bytes on disk per partition log",
                labels=["topic", "partition"],
            )
            segments = GaugeMetricFamily(
                "kgc_log_segments", "Segments per partition log", labels=["topic", "partition"]
            )
            end = GaugeMetricFamily(
                "kgc_log_end_offset",
                "Next offset to be written per partition log",
                labels=["topic", "partition"],
            )
            start = GaugeMetricFamily(
                "kgc_log_start_offset",
                "First offset kept per partition log",
                labels=["topic", "partition"],
            )
            damaged = GaugeMetricFamily(
                "kgc_partition_damaged",
                "1 if a corrupt batch was found in the partition's log (see the ERROR log line)",
                labels=["topic", "partition"],
            )
            for (topic, partition), plog in zip(m.logs.partitions(), m.logs.logs(), strict=True):
                if plog.closed:
                    continue
                labels = [topic, str(partition)]
                size.add_metric(labels, plog.size_bytes)
                segments.add_metric(labels, len(plog.segments))
                end.add_metric(labels, plog.log_end_offset)
                start.add_metric(labels, plog.log_start_offset)
                damaged.add_metric(labels, 0 if plog.damaged is None else 1)
            yield from (size, segments, end, start, damaged)
        if m.flusher is not None:
            st = m.flusher.stats
            yield SummaryMetricFamily(
                "kgc_fsync_duration_seconds",
                "fsync of a partition log (count and total time)",
                count_value=st.fsync_count,
                sum_value=st.total_fsync_latency_ms / 1000.0,
            )
            yield GaugeMetricFamily(
                "kgc_fsync_max_duration_seconds",
                "Slowest fsync since start",
                value=st.max_fsync_latency_ms / 1000.0,
            )
            yield CounterMetricFamily("kgc_fsync_errors", "Failed fsyncs", value=st.errors)
            yield CounterMetricFamily(
                "kgc_flushed_bytes", "Bytes made durable by fsync", value=st.bytes_flushed
            )
        cleaners = list(m.cleaners())
        passes = sum(c.stats.passes for c in cleaners)
        yield CounterMetricFamily(
            "kgc_compaction_runs", "Completed compaction passes", value=passes
        )
        yield CounterMetricFamily(
            "kgc_compaction_aborted_runs",
            "Abandoned compaction passes",
            value=sum(c.stats.aborted_passes for c in cleaners),
        )
        yield CounterMetricFamily(
            "kgc_compaction_records_removed",
            "Records dropped by compaction",
            value=sum(c.stats.records_removed for c in cleaners),
        )
        yield CounterMetricFamily(
            "kgc_compaction_bytes_read",
            "Bytes read by compaction",
            value=sum(c.stats.bytes_read for c in cleaners),
        )
        yield CounterMetricFamily(
            "kgc_compaction_bytes_written",
            "Bytes written by compaction",
            value=sum(c.stats.bytes_written for c in cleaners),
        )
