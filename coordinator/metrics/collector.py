"""The scrape-time metric families: state that already exists elsewhere, read, never mirrored.

How this works: each function here builds the families of one area from the live components
and the counters ``Metrics`` (registry.py) keeps; its ``Collector`` calls them in turn on
every scrape, on the event loop.

* Requests (requests.py's slots): ``kgc_requests_total``, ``kgc_request_duration_seconds``,
  and offset commits (counted from OffsetCommit responses by ``on_request``).
* Connections: ``kgc_connections{listener}`` counts the server's live connections by the
  listener they came on (``watch(server)`` tells the metrics which server), plus the
  connections opened and refused for want of file descriptors.
* Security: ``kgc_authentications_total{listener,mechanism,result}`` counts finished SASL
  exchanges (result ``success`` or ``failure``, re-authentications included), reported by
  each SASL listener's ``on_authentication`` hook, which ``watch`` sets;
  ``kgc_authorization_denied_total{api,resource_type}`` counts the denials the authorizer
  audits (those it also logs on ``kgc.authorizer``): ``count_denials`` wraps its
  ``on_denied`` and asks ``ApiAuthorizer.api_key`` which API's checks are running (checks
  made outside them would count under ``api="unknown"``).
* Groups: by state and members per group (``groups_snapshot()`` of the group core;
  ``kgc_groups`` keeps classic groups, ``kgc_groups_by_type`` has both types, consumer groups
  from ``shard.consumer.groups``), rebalances by cause (its ``rebalances`` counters), stored
  offsets (its ``offsets`` map), offsets-log load time per partition, and
  ``kgc_group_rebalances_total{group,cause}``: a classic group's ``RebalanceStarted``
  (``join``, ``leave``, ``session_timeout``, ``metadata_change``, ``static_replacement``,
  ``sync_timeout``), a consumer group's epoch bumps (``created``, ``subscription``,
  ``metadata``, ``regex``) and fencings (one bump, counted under the fencing's kind:
  ``left``, ``session_timeout``, ``rebalance_timeout``...). A deleted group's counters go
  with it.
* Consumer groups (KIP-848): heartbeats by error code (the ConsumerGroupHeartbeat slots),
  fenced members by reason and group-epoch bumps by cause (from the ``ConsumerMembersFenced``
  and ``ConsumerGroupEpochBumped`` events), reconciliations (current-assignment records
  written by heartbeats: the consumer manager's ``reconciliations`` counter).
* Share partitions (KIP-932): ``kgc_share_records_total{event}`` counts records acquired,
  acknowledged, archived, released, given back when a member's session or connection
  closed, and timed out (the share leader's ``on_event``); ``kgc_share_sessions`` the open
  share sessions.
* Storage: log bytes/segments/offsets per partition (the ``LogManager``;
  ``kgc_partition_damaged`` says which logs hold a corrupt batch, and
  ``kgc_offsets_partitions_offline`` how many offsets partitions failed to load), fsync
  counts and latency (the ``Flusher``'s stats) and compaction runs (the cleaners' stats).
* Cluster mode: live nodes, the partitions this node leads, the PostgreSQL journal's stats.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)

from coordinator.group.streams.group import StreamsGroupState
from coordinator.metrics.requests import (
    CONSUMER_GROUP_HEARTBEAT_KEY,
    LATENCY_BUCKETS,
    Latency,
    Slot,
    error_label,
)
from storage.records import OFFSETS_TOPIC

GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
CONSUMER_GROUP_STATES = ("Empty", "Assigning", "Reconciling", "Stable", "Dead")
STREAMS_GROUP_STATES = tuple(s for s in StreamsGroupState if s is not StreamsGroupState.DEAD)
SHARE_GROUP_STATES = ("Empty", "Stable")


def request_families(
    slots: Mapping[int, Slot], latencies: Mapping[str, Latency], offset_commits: int
) -> Iterator[Metric]:
    requests = CounterMetricFamily(
        "kgc_requests",
        "Requests answered, by API, version and top-level error code",
        labels=["api", "version", "error"],
    )
    for slot in sorted(slots.values(), key=lambda s: (s.api, s.version)):
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
    for api, lat in sorted(latencies.items()):
        cumulative, buckets = 0, []
        for bound, n in zip((*LATENCY_BUCKETS, float("inf")), lat.counts, strict=True):
            cumulative += n
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        latency.add_metric([api], buckets, lat.sum)
    yield latency
    yield CounterMetricFamily(
        "kgc_offset_commits",
        "Partition offsets committed (OffsetCommit and TxnOffsetCommit)",
        value=offset_commits,
    )


def connection_families(
    server: Any, connections: int, connections_opened: int, connections_refused: int
) -> Iterator[Metric]:
    if server is None:
        yield GaugeMetricFamily("kgc_connections", "Open client connections", value=connections)
    else:
        # Read from the server's live connections: every listener, 0 when idle.
        by_listener = dict.fromkeys((li.name for li in server.listenings), 0)
        for conn in server.connections:
            by_listener[conn.listener] = by_listener.get(conn.listener, 0) + 1
        family = GaugeMetricFamily(
            "kgc_connections", "Open client connections, by listener", labels=["listener"]
        )
        for listener, n in by_listener.items():
            family.add_metric([listener], n)
        yield family
    yield CounterMetricFamily(
        "kgc_connections_opened", "Client connections accepted", value=connections_opened
    )
    yield CounterMetricFamily(
        "kgc_connections_refused",
        "Client connections refused (closed at once) for want of file descriptors",
        value=connections_refused,
    )


def security_families(
    authentications: Mapping[tuple[str, str, str], int], denials: Mapping[tuple[str, str], int]
) -> Iterator[Metric]:
    auth = CounterMetricFamily(
        "kgc_authentications",
        "SASL authentications (and re-authentications) finished, by listener, mechanism "
        "and result (success, failure)",
        labels=["listener", "mechanism", "result"],
    )
    for (listener, mechanism, result), n in sorted(authentications.items()):
        auth.add_metric([listener, mechanism, result], n)
    yield auth
    denied = CounterMetricFamily(
        "kgc_authorization_denied",
        "Requests' authorization checks denied (each logged on kgc.authorizer), by API "
        "and resource type",
        labels=["api", "resource_type"],
    )
    for (api, resource_type), n in sorted(denials.items()):
        denied.add_metric([api, resource_type], n)
    yield denied


def group_families(
    shard: Any,
    partition_load_seconds: Mapping[int, float],
    offsets_expired: int,
    group_rebalances: Mapping[str, Mapping[str, int]],
) -> Iterator[Metric]:
    shard = shard
    if partition_load_seconds:
        load = GaugeMetricFamily(
            "kgc_offsets_partition_load_seconds",
            "Time to replay each __consumer_offsets partition at start-up",
            labels=["partition"],
        )
        for p, secs in sorted(partition_load_seconds.items()):
            load.add_metric([str(p)], secs)
        yield load
    yield CounterMetricFamily(
        "kgc_offsets_expired", "Committed offsets removed by retention", value=offsets_expired
    )
    if shard is None:
        return
    by_state = dict.fromkeys(GROUP_STATES, 0)
    by_consumer_state = dict.fromkeys(CONSUMER_GROUP_STATES, 0)
    by_share_state = dict.fromkeys(SHARE_GROUP_STATES, 0)
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
    # Streams groups (KIP-1071), by their states' lower-case names as Kafka's metrics name them.
    by_streams_state = {st.lower: 0 for st in STREAMS_GROUP_STATES}
    for sgroup in getattr(getattr(shard, "streams", None), "groups", {}).values():
        sstate = sgroup.state.lower
        by_streams_state[sstate] = by_streams_state.get(sstate, 0) + 1
        members.add_metric([sgroup.group_id], len(sgroup.members))
    share = getattr(shard, "share", None)
    for group in getattr(share, "groups", {}).values():
        state = group.state.value
        by_share_state[state] = by_share_state.get(state, 0) + 1
        members.add_metric([group.group_id], len(group.members))
    states = GaugeMetricFamily("kgc_groups", "Classic groups by state", labels=["state"])
    for state, n in by_state.items():
        states.add_metric([state], n)
    yield states
    by_type = GaugeMetricFamily(
        "kgc_groups_by_type",
        "Groups by type (classic, consumer, streams, share) and state",
        labels=["type", "state"],
    )
    for state, n in by_state.items():
        by_type.add_metric(["classic", state], n)
    for state, n in by_consumer_state.items():
        by_type.add_metric(["consumer", state], n)
    for state, n in by_streams_state.items():
        by_type.add_metric(["streams", state], n)
    for state, n in by_share_state.items():
        by_type.add_metric(["share", state], n)
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
        "session_timeout, ...), a share group's epoch bumps (epoch_bump) and fencings",
        labels=["group", "cause"],
    )
    for group_id, causes in group_rebalances.items():
        for cause, n in causes.items():
            per_group.add_metric([group_id, cause], n)
    yield per_group
    statuses = getattr(shard, "partitions", None)
    if isinstance(statuses, Mapping):
        yield GaugeMetricFamily(
            "kgc_offsets_partitions_offline",
            "__consumer_offsets partitions whose load failed (their groups answer NOT_COORDINATOR)",
            value=sum(1 for st in statuses.values() if getattr(st, "value", "") == "failed"),
        )
    offsets = getattr(shard, "offsets", None)
    if isinstance(offsets, Mapping):
        yield GaugeMetricFamily(
            "kgc_offsets_stored",
            "Committed offsets held (group, topic, partition)",
            value=sum(len(v) for v in offsets.values()),
        )


def consumer_group_families(
    slots: Mapping[int, Slot],
    shard: Any,
    members_fenced: Mapping[str, int],
    epoch_bumps: Mapping[str, int],
) -> Iterator[Metric]:
    """KIP-848 consumer groups: heartbeats, reconciliations, fencing, epochs."""
    heartbeats = CounterMetricFamily(
        "kgc_consumer_group_heartbeats",
        "ConsumerGroupHeartbeat requests answered, by error code",
        labels=["error"],
    )
    by_error: dict[str, int] = {"NONE": 0}
    for key, slot in slots.items():
        if key >> 8 != CONSUMER_GROUP_HEARTBEAT_KEY:
            continue
        by_error["NONE"] += slot.count - sum(slot.errors.values())
        for code, n in slot.errors.items():
            label = error_label(code)
            by_error[label] = by_error.get(label, 0) + n
    for label, n in sorted(by_error.items()):
        heartbeats.add_metric([label], n)
    yield heartbeats
    consumer = getattr(shard, "consumer", None)
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
    for reason, n in members_fenced.items():
        fenced.add_metric([reason], n)
    yield fenced
    bumps = CounterMetricFamily(
        "kgc_consumer_group_epoch_bumps",
        "Consumer-group epoch bumps (a new target assignment is due), by cause",
        labels=["cause"],
    )
    for cause, n in epoch_bumps.items():
        bumps.add_metric([cause], n)
    yield bumps


def share_families(
    records: Mapping[str, int], sessions: Callable[[], int] | None
) -> Iterator[Metric]:
    """Share partitions: records by event, and the share sessions open."""
    counter = CounterMetricFamily(
        "kgc_share_records",
        "Records of share partitions by event: acquired, acknowledged, archived, released "
        "(by an acknowledgement), member_released (session or connection closed), lock_timeout",
        labels=["event"],
    )
    for event, n in sorted(records.items()):
        counter.add_metric([event], n)
    yield counter
    if sessions is not None:
        yield GaugeMetricFamily("kgc_share_sessions", "Open share sessions", value=sessions())


def storage_families(
    logs: Any, flusher: Any, running_cleaners: Callable[[], Iterable[Any]]
) -> Iterator[Metric]:
    if logs is not None:
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
        for (topic, partition), plog in zip(logs.partitions(), logs.logs(), strict=True):
            if plog.closed:
                continue
            labels = [topic, str(partition)]
            size.add_metric(labels, plog.size_bytes)
            segments.add_metric(labels, plog.segment_count)
            end.add_metric(labels, plog.log_end_offset)
            start.add_metric(labels, plog.log_start_offset)
            damaged.add_metric(labels, 0 if plog.damaged is None else 1)
        yield from (size, segments, end, start, damaged)
    if flusher is not None:
        st = flusher.stats
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
    cleaners = list(running_cleaners())
    passes = sum(c.stats.passes for c in cleaners)
    yield CounterMetricFamily("kgc_compaction_runs", "Completed compaction passes", value=passes)
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


def cluster_families(cluster: Any, flusher: Any) -> Iterator[Metric]:
    """Cluster mode: the live nodes, what this node leads, the PostgreSQL journal."""
    if cluster is None:
        return
    yield GaugeMetricFamily(
        "kgc_cluster_nodes",
        "Live nodes in the cluster (this node's view)",
        value=len(cluster.nodes()),
    )
    led = GaugeMetricFamily(
        "kgc_cluster_partitions_led",
        "Partitions this node leads (holds the lease of and serves)",
        labels=["kind"],
    )
    owned = cluster.owned()
    offsets = sum(1 for topic, _p in owned if topic == OFFSETS_TOPIC)
    led.add_metric(["offsets"], offsets)
    led.add_metric(["topic"], len(owned) - offsets)
    yield led
    yield GaugeMetricFamily(
        "kgc_cluster_broker_epoch", "This node's broker epoch", value=cluster.broker_epoch
    )
    if flusher is not None and flusher.journal is not None:
        st = flusher.journal.stats  # the PostgreSQL journal's
        yield CounterMetricFamily(
            "kgc_journal_rounds", "Write rounds committed to the database", value=st.rounds
        )
        yield CounterMetricFamily("kgc_journal_rows", "kgc_record_log rows written", value=st.rows)
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
