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
  target-assignment time is observed through the manager's ``on_target_computed`` hook.

The HTTP endpoint runs on the server's own event loop (``serve``), so collectors read the
group core and the logs from the thread that mutates them: no locks, no torn reads.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, get_args

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Histogram,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
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
)
from protocol.errors import ErrorCode
from protocol.messages import BY_KEY
from storage.offsets_format import OFFSETS_TOPIC

if TYPE_CHECKING:
    from coordinator.security import KafkaPrincipal
    from coordinator.security.acl import AclOperation, Authorizer, ResourceType

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


class Metrics:
    def __init__(
        self,
        *,
        process_metrics: bool = True,
        shard: Any = None,
        logs: Any = None,
        flusher: Any = None,
        cleaners: Callable[[], Iterable[Any]] = list,
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
        self.assignment_duration = Histogram(
            "kgc_consumer_group_assignment_duration_seconds",
            "Time to compute a consumer group's target assignment (the server-side assignor)",
            buckets=ASSIGNMENT_BUCKETS,
            registry=self.registry,
        )
        consumer = getattr(shard, "consumer", None)
        if consumer is not None and hasattr(consumer, "on_target_computed"):
            consumer.on_target_computed = self.assignment_duration.observe
        # Scrape-time sources (None: not reported).
        self.shard = shard
        self.logs = logs
        self.flusher = flusher
        self.cleaners = cleaners
        self.cluster: Any = None  # coordinator.cluster.Cluster in cluster mode (set by the app)
        # Security: the KafkaServer whose connections are counted per listener (``watch``),
        # SASL exchanges by (listener, mechanism, result), denials by (API, resource type).
        self.server: Any = None
        self.authentications: dict[tuple[str, str, str], int] = {}
        self.denials: dict[tuple[str, str], int] = {}
        self.registry.register(_Collector(self))
        self._http: asyncio.Server | None = None

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
            elif isinstance(event, GroupStable | GroupEmptied | GroupDeleted):
                start = self._rebalancing.pop(event.group_id, None)
                if start is not None:
                    self.rebalance_duration.observe(max(now_ms - start, 0) / 1000.0)
            elif isinstance(event, OffsetsExpired):
                self.offsets_expired += event.count
            elif isinstance(event, ConsumerMembersFenced):
                self.members_fenced[event.kind] += len(event.member_ids)
                self.epoch_bumps["members_fenced"] += 1  # one bump for the whole fencing
            elif isinstance(event, ConsumerGroupEpochBumped):
                self.epoch_bumps[event.kind] += 1

    # -- exposition
    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def serve(self, host: str, port: int) -> int:
        """Serve ``GET /metrics`` on the running loop; returns the bound port."""
        self._http = await asyncio.start_server(self._handle, host, port, reuse_address=True)
        sockets = self._http.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    async def stop(self) -> None:
        if self._http is not None:
            self._http.close()
            await self._http.wait_closed()
            self._http = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            parts = request.split(b"\r\n", 1)[0].split()
            method, path = (parts[0], parts[1].split(b"?")[0]) if len(parts) >= 2 else (b"", b"")
            if method not in (b"GET", b"HEAD"):
                status, ctype, body = (
                    "405 Method Not Allowed",
                    "text/plain",
                    b"method not allowed\n",
                )
            elif path in (b"/metrics", b"/"):
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, self.render()
            elif path == b"/healthz":
                status, ctype, body = "200 OK", "text/plain", b"ok\n"
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"try /metrics\n"
            head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            writer.write(head.encode() + (body if method != b"HEAD" else b""))
            await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ConnectionError,
        ):
            pass
        except Exception:
            log.exception("metrics request failed")
        finally:
            writer.close()


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
