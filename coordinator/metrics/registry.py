"""The ``Metrics`` object: its registry, the request accounting and the event hooks.

How this works: everything lives in one ``Metrics`` object with its own ``CollectorRegistry``
(never the global one, so tests can run several servers in one process). Components report
to it in three ways:

* per answered request, on the hot path: ``on_request`` bumps the plain counters of
  requests.py;
* per event: connections opened/closed (``on_connection``) or refused for want of file
  descriptors (``on_refused``), offsets-log load time per partition (``partition_loaded``),
  SASL exchanges (``on_authentication``), authorizer denials (``count_denials``), and the
  group core's typed events (``group_events``: ``RebalanceStarted`` starts a group's clock,
  ``GroupStable``, ``GroupEmptied`` or ``GroupDeleted`` stops it; ``OffsetsExpired`` carries
  its count; ``ConsumerMembersFenced`` and ``ConsumerGroupEpochBumped`` count fencings and
  epoch bumps); target-assignment time by wrapping the consumer manager's
  ``compute_target`` in a timer;
* not at all: state that exists elsewhere (the group core, the logs, the flusher, the
  cleaners, the cluster) is read at scrape time by collector.py's families, and consumer lag
  by lag.py's ``LagTracker``.

``serve`` exposes the registry over HTTP (http.py).
"""

from __future__ import annotations

import asyncio
import bisect
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, get_args
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Histogram,
    generate_latest,
    make_wsgi_app,
)
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

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
    ShareGroupEpochBumped,
    ShareMembersFenced,
)
from coordinator.history.status import StatusSettings
from coordinator.metrics.collector import (
    cluster_families,
    connection_families,
    consumer_group_families,
    group_families,
    request_families,
    security_families,
    share_families,
    storage_families,
)
from coordinator.metrics.http import SCRAPE_TIMEOUT_S, LoopRegistry, http_server, routes
from coordinator.metrics.lag import LagTracker, lag_families
from coordinator.metrics.requests import (
    LATENCY_BUCKETS,
    OFFSET_COMMIT_KEYS,
    Latency,
    Slot,
    api_name,
)

if TYPE_CHECKING:
    from coordinator.dataplane import DataPlane
    from coordinator.security import KafkaPrincipal
    from coordinator.security.acl import AclOperation, Authorizer, ResourceType

REBALANCE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# Target assignments take microseconds for small groups, up to seconds for 1,000s of members.
ASSIGNMENT_BUCKETS = (0.00005, *(b for b in LATENCY_BUCKETS if b <= 5.0))
# The labels: the events' kinds (coordinator/group/events.py), plus one bump per fencing.
FENCE_REASONS: tuple[str, ...] = get_args(FenceKind)
EPOCH_BUMP_CAUSES: tuple[str, ...] = (*get_args(BumpKind), "members_fenced")
_perf_counter = time.perf_counter
_bisect_left = bisect.bisect_left


def _timed(fn: Callable[..., Any], observe: Callable[[float], None]) -> Callable[..., Any]:
    """``fn``, telling ``observe`` how long each call that returned took (seconds)."""

    def timed(*args: Any) -> Any:
        started = time.perf_counter()
        result = fn(*args)
        observe(time.perf_counter() - started)
        return result

    return timed


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
        status: StatusSettings | None = None,
    ) -> None:
        """``status``: report each partition's status (Burrow's rules) beside its lag."""
        self.registry = CollectorRegistry(auto_describe=False)
        if process_metrics:
            for c in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                self.registry.register(c)
        self._slots: dict[int, Slot] = {}
        self._latency: dict[str, Latency] = {}
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
        # Share partitions (KIP-932): records by what happened to them (``on_share_event``),
        # and the share sessions open (``share_sessions``, a callable set by the assembly).
        self.share_records: dict[str, int] = {}
        self.share_sessions: Callable[[], int] | None = None
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
        # Consumer lag; the node gives it the data plane (``follow``) before serving.
        self.lag = LagTracker(lag_max_series, status=status)
        self.lag.shard = shard
        self.lag.logs = logs
        self.cluster: Any = None  # coordinator.cluster.Cluster in cluster mode (``follow``)
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

    def _new_slot(self, key: int, version: int) -> Slot:
        api = api_name(key)
        lat = self._latency.get(api)
        if lat is None:
            lat = self._latency[api] = Latency()
        slot = self._slots[key << 8 | version] = Slot(api, version, lat)
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

    def follow(self, data: DataPlane, cluster: Any = None) -> None:
        """Report the lag of the partitions ``data`` serves and, in cluster mode, the
        membership ``cluster``: both are built after these metrics, which the group runtime
        they depend on reports to."""
        self.data = data
        self.cluster = cluster

    def on_share_event(self, key: object, what: str, n: int) -> None:
        """``n`` records of a share partition were acquired, acknowledged, archived,
        released, given back by a member or timed out (``ShareLeader.on_event``)."""
        self.share_records[what] = self.share_records.get(what, 0) + n

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
            elif isinstance(event, ShareMembersFenced):
                self._group_rebalance(event.group_id, event.kind)
            elif isinstance(event, ShareGroupEpochBumped):
                self._group_rebalance(event.group_id, "epoch_bump")

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
        metrics_app = make_wsgi_app(LoopRegistry(self.collect, self._loop))
        app = routes(metrics_app, self._loop_alive)
        # Binding resolves the host's name (getaddrinfo, HTTPServer.server_bind): off the loop.
        httpd = self._http = await asyncio.to_thread(http_server, host, port, app)
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


class _Collector(Collector):
    """Builds every scrape-time metric family from the live components (collector.py)."""

    def __init__(self, m: Metrics) -> None:
        self.m = m

    def collect(self) -> Iterator[Metric]:
        m = self.m
        yield from request_families(m._slots, m._latency, m.offset_commits)
        yield from connection_families(
            m.server, m.connections, m.connections_opened, m.connections_refused
        )
        yield from security_families(m.authentications, m.denials)
        yield from group_families(
            m.shard, m.partition_load_seconds, m.offsets_expired, m.group_rebalances
        )
        yield from consumer_group_families(m._slots, m.shard, m.members_fenced, m.epoch_bumps)
        yield from share_families(m.share_records, m.share_sessions)
        yield from storage_families(m.logs, m.flusher, m.cleaners)
        yield from cluster_families(m.cluster, m.flusher)
        yield from lag_families(m.lag.table())
