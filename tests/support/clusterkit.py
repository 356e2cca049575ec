"""A real kgc cluster for tests and benchmarks: N ``kgc serve`` nodes on one PostgreSQL.

How this works: ``Cluster(base_dir, storage_url, nodes=3)`` makes one ``KgcProcess`` per
node id (1..N), each with its own data directory (a local cache) under ``base_dir`` and the
cluster flags (``--node-id``, ``--storage-url``, ``--broker-heartbeat-interval-ms``,
``--broker-session-timeout-ms``). ``start_all()`` starts them all and waits until the cluster
is *ready*: every live node answers, every node's Metadata lists exactly the live nodes as
brokers, and every ``__consumer_offsets`` partition has a live leader that has loaded it
(an OffsetFetch of a probe group hashed to that partition, sent to that leader, answers
neither COORDINATOR_LOAD_IN_PROGRESS nor NOT_COORDINATOR).

The fault injections act on one node: ``kill`` (SIGKILL), ``pause``/``resume``
(SIGSTOP/SIGCONT), ``stop`` (SIGTERM, a graceful hand-off), ``start`` (same node id, data
dir and port), and ``add_node`` (a new node id). Questions asked of the cluster
(``coordinator_of``, ``leader_of``, ``offsets_leaders``) go to a live node the way clients
ask: FindCoordinator and Metadata, with kgc's own blocking client.

``GroupMember`` is a librdkafka consumer in a group that consumes a topic and commits
synchronously after each batch into a shared ``Ledger``, which records every acknowledged
commit (with its time) and every record consumed, and flags a record consumed again below
an offset already acknowledged for its partition (a rewind past a commit).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from coordinator.tools.client import Connection
from protocol.messages import api_versions, find_coordinator, metadata, offset_fetch
from storage.records import partition_for
from support.groupkit import wait_until
from support.kgc_process import KgcProcess, free_port

OFFSETS_TOPIC = "__consumer_offsets"

__all__ = [
    "OFFSETS_TOPIC",
    "Cluster",
    "GroupMember",
    "Ledger",
    "groups_on_distinct_nodes",
    "probe_groups",
]


def probe_groups(num_partitions: int) -> dict[int, str]:
    """One group id hashing to each offsets partition (Kafka's hash of the group id)."""
    probes: dict[int, str] = {}
    i = 0
    while len(probes) < num_partitions:
        probes.setdefault(partition_for(f"probe-{i}", num_partitions), f"probe-{i}")
        i += 1
    return probes


class Cluster:
    def __init__(
        self,
        base_dir: Path,
        storage_url: str,
        nodes: int = 3,
        *,
        heartbeat_interval_ms: int = 500,
        session_timeout_ms: int = 3000,
        offsets_partitions: int = 50,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.base = Path(base_dir)
        self.storage_url = storage_url
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.offsets_partitions = offsets_partitions
        self.extra = extra
        self.nodes: dict[int, KgcProcess] = {}
        self.paused: set[int] = set()
        for node_id in range(1, nodes + 1):
            self._make(node_id)

    # -- lifecycle

    def _make(self, node_id: int) -> KgcProcess:
        port = free_port()
        args = [
            "--node-id",
            str(node_id),
            "--storage-url",
            self.storage_url,
            "--broker-heartbeat-interval-ms",
            str(self.heartbeat_interval_ms),
            "--broker-session-timeout-ms",
            str(self.session_timeout_ms),
            "--offsets-topic-num-partitions",
            str(self.offsets_partitions),
            "--kgc-log-level",
            "INFO",
            *self.extra,
        ]
        proc = KgcProcess(self.base / f"node-{node_id}" / "data", *args, port=port)
        proc.data_dir.mkdir(parents=True, exist_ok=True)
        self.nodes[node_id] = proc
        return proc

    def start_all(self, timeout: float = 60.0) -> Cluster:
        for proc in self.nodes.values():
            proc.start(timeout=timeout)
        self.wait_ready(timeout=timeout)
        return self

    def close(self) -> None:
        """Stop every node that still runs (resumed first if paused); kill what hangs."""
        for proc in self.nodes.values():
            if proc.alive():
                assert proc.proc is not None
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.proc.pid, signal.SIGCONT)
                try:
                    proc.stop(timeout=10)
                except Exception:
                    if proc.alive():
                        proc.kill()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what the cluster looks like

    @property
    def bootstrap(self) -> str:
        """Every node that runs, comma-separated (what a client is configured with)."""
        return ",".join(p.bootstrap for p in self.nodes.values() if p.alive())

    @property
    def all_bootstrap(self) -> str:
        """Every node, running or not (a client that must survive nodes coming and going)."""
        return ",".join(p.bootstrap for p in self.nodes.values())

    def live(self) -> list[int]:
        """Node ids whose process runs and is not paused by us."""
        return [n for n, p in self.nodes.items() if p.alive() and n not in self.paused]

    def node_of_port(self, port: int) -> int:
        for n, p in self.nodes.items():
            if p.port == port:
                return n
        raise KeyError(port)

    def log(self, node: int) -> str:
        return self.nodes[node].log_path.read_text(errors="replace")

    def _ask(self, via: int | None, fn: Any) -> Any:
        """Run ``fn(conn)`` against node ``via`` or the first live node that answers."""
        candidates = [via] if via is not None else self.live()
        last: Exception | None = None
        for n in candidates:
            try:
                with Connection.to(self.nodes[n].bootstrap, timeout=5) as c:
                    return fn(c)
            except OSError as exc:
                last = exc
        raise ConnectionError(f"no live node answered: {last}")

    def metadata(self, topics: list[str] | None, via: int | None = None) -> Any:
        req = metadata.Request(
            topics=None
            if topics is None
            else [metadata.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        return self._ask(via, lambda c: c.request(metadata.API_KEY, req, version=12)[1])

    def brokers(self, via: int | None = None) -> set[int]:
        return {b.node_id for b in self.metadata([], via=via).brokers}

    def leaders(self, topic: str, via: int | None = None) -> dict[int, int]:
        """partition → leader node id (-1 when leaderless), from Metadata."""
        resp = self.metadata([topic], via=via)
        (t,) = resp.topics
        return {p.partition_index: p.leader_id for p in t.partitions}

    def offsets_leaders(self, via: int | None = None) -> dict[int, int]:
        return self.leaders(OFFSETS_TOPIC, via=via)

    def leader_of(self, topic: str, partition: int, via: int | None = None) -> int:
        return self.leaders(topic, via=via)[partition]

    def find_coordinator(self, group: str, via: int | None = None) -> tuple[int, int]:
        """(error code, node id) that FindCoordinator answers for ``group``."""
        req = find_coordinator.Request(key_type=0, coordinator_keys=[group])

        def ask(c: Connection) -> tuple[int, int]:
            _, resp = c.request(find_coordinator.API_KEY, req, version=4)
            (coord,) = resp.coordinators
            return int(coord.error_code), int(coord.node_id)

        result: tuple[int, int] = self._ask(via, ask)
        return result

    def coordinator_of(self, group: str, timeout: float = 30.0) -> int:
        """The live node FindCoordinator names for ``group`` (waits out a hand-over)."""
        found: list[int] = []

        def ready() -> bool:
            try:
                err, node = self.find_coordinator(group)
            except (ConnectionError, OSError):
                return False
            if err == 0 and node in self.live():
                found.append(node)
                return True
            return False

        wait_until(ready, timeout=timeout, interval=0.05, what=f"a live coordinator of {group}")
        return found[-1]

    def wait_topic_led(self, topic: str, timeout: float = 30.0) -> dict[int, int]:
        """Wait until every live node's Metadata gives every partition of ``topic`` the same
        live leader (the catalog reaches nodes at their next heartbeat); return the leaders.
        """
        seen: list[dict[int, int]] = []

        def agreed() -> bool:
            views = []
            for n in self.live():
                try:
                    views.append(self.leaders(topic, via=n))
                except (ConnectionError, OSError, ValueError):
                    return False
            live = set(self.live())
            if not views or not views[0] or any(v != views[0] for v in views):
                return False
            seen.append(views[0])
            return all(n in live for n in views[0].values())

        wait_until(agreed, timeout=timeout, interval=0.05, what=f"leaders for {topic}")
        return seen[-1]

    def offsets_partition(self, group: str) -> int:
        return int(partition_for(group, self.offsets_partitions))

    # -- readiness

    def _answers(self, node: int) -> bool:
        try:
            with Connection.to(self.nodes[node].bootstrap, timeout=2) as c:
                c.call(
                    api_versions.API_KEY,
                    3,
                    api_versions.Request(client_software_name="t", client_software_version="0"),
                )
            return True
        except OSError:
            return False

    def _loaded_at(self, node: int, group: str) -> bool:
        req = offset_fetch.Request(
            groups=[offset_fetch.OffsetFetchRequestGroup(group_id=group, topics=None)]
        )
        try:
            with Connection.to(self.nodes[node].bootstrap, timeout=2) as c:
                _, resp = c.request(offset_fetch.API_KEY, req, version=8)
        except OSError:
            return False
        return bool(resp.groups[0].error_code == 0)

    def not_ready(self) -> str | None:
        """Why the cluster is not ready yet, or None when it is."""
        live = set(self.live())
        for n in sorted(live):
            if not self._answers(n):
                return f"node {n} does not answer"
        for n in sorted(live):
            try:
                seen = self.brokers(via=n)
            except (ConnectionError, OSError) as exc:
                return f"node {n}: Metadata failed: {exc}"
            if seen != live:
                return f"node {n} lists brokers {sorted(seen)}, live are {sorted(live)}"
        try:
            leaders = self.offsets_leaders()
        except (ConnectionError, OSError, ValueError) as exc:
            return f"offsets Metadata failed: {exc}"
        if len(leaders) != self.offsets_partitions:
            return f"Metadata lists {len(leaders)} offsets partitions"
        orphans = sorted(p for p, n in leaders.items() if n not in live)
        if orphans:
            return f"offsets partitions without a live leader: {orphans[:10]}"
        probes = probe_groups(self.offsets_partitions)
        for p, group in probes.items():
            if not self._loaded_at(leaders[p], group):
                return f"offsets partition {p} not loaded at its leader {leaders[p]}"
        return None

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        why: str | None = "not asked yet"
        while time.monotonic() < deadline:
            why = self.not_ready()
            if why is None:
                return
            time.sleep(0.1)
        logs = "\n".join(f"--- node {n}\n{p.log()[-3000:]}" for n, p in self.nodes.items())
        raise AssertionError(f"cluster not ready after {timeout} s: {why}\n{logs}")

    # -- fault injection

    def _pid(self, node: int) -> int:
        proc = self.nodes[node].proc
        assert proc is not None
        return proc.pid

    def kill(self, node: int) -> None:
        """SIGKILL: the node's partitions move after broker.session.timeout.ms."""
        self.paused.discard(node)
        self.nodes[node].kill()

    def pause(self, node: int) -> None:
        """SIGSTOP: the node keeps its sockets and its belief that it owns its partitions."""
        os.kill(self._pid(node), signal.SIGSTOP)
        self.paused.add(node)

    def resume(self, node: int) -> None:
        os.kill(self._pid(node), signal.SIGCONT)
        self.paused.discard(node)

    def stop(self, node: int) -> int:
        """SIGTERM: a graceful hand-off (the node releases its leases before it exits)."""
        return self.nodes[node].stop()

    def start(self, node: int, *, wait: bool = True) -> None:
        self.nodes[node].start()
        if wait:
            self.wait_ready()

    def add_node(self, *, wait: bool = True) -> int:
        node = max(self.nodes) + 1
        self._make(node).start()
        if wait:
            self.wait_ready()
        return node


def groups_on_distinct_nodes(cluster: Cluster, count: int, prefix: str = "g") -> list[str]:
    """``count`` group ids whose coordinators are on as many distinct nodes as possible."""
    chosen: dict[int, str] = {}
    leaders = cluster.offsets_leaders()
    i = 0
    while len(chosen) < min(count, len(set(leaders.values()))) and i < 10_000:
        g = f"{prefix}-{i}"
        chosen.setdefault(leaders[cluster.offsets_partition(g)], g)
        i += 1
    groups = list(chosen.values())
    while len(groups) < count:
        groups.append(f"{prefix}-extra-{len(groups)}")
    return groups


@dataclass
class Ledger:
    """What a group's members were told: acknowledged commits and consumed records.

    ``acked[p]`` is the highest offset acknowledged for partition p, ``ack_times`` the
    monotonic (first try, acknowledgement) times of every acknowledged commit; ``rewinds`` lists every record consumed
    below an offset already acknowledged for its partition (it must stay empty).
    """

    acked: dict[int, int] = field(default_factory=dict)
    ack_times: list[tuple[float, float]] = field(default_factory=list)
    consumed: dict[int, list[int]] = field(default_factory=dict)
    rewinds: list[tuple[int, int, int]] = field(default_factory=list)
    commit_errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_record(self, partition: int, offset: int) -> None:
        with self.lock:
            self.consumed.setdefault(partition, []).append(offset)
            if offset < self.acked.get(partition, -1):
                self.rewinds.append((partition, offset, self.acked[partition]))

    def on_ack(self, offsets: dict[int, int], started: float) -> None:
        now = time.monotonic()
        with self.lock:
            for p, o in offsets.items():
                self.acked[p] = max(o, self.acked.get(p, -1))
            self.ack_times.append((started, now))

    def acks_after(self, t: float) -> list[float]:
        """When the commits first tried after ``t`` were acknowledged, in order."""
        with self.lock:
            return sorted(end for start, end in self.ack_times if start > t)

    def snapshot(self) -> dict[int, int]:
        with self.lock:
            return dict(self.acked)

    def distinct_consumed(self) -> int:
        with self.lock:
            return sum(len(set(v)) for v in self.consumed.values())


class GroupMember(threading.Thread):
    """A librdkafka group member: consume ≤ ``batch`` records, then commit synchronously.

    After every poll it commits its position in every assigned partition it has consumed
    from, even when the poll brought nothing new, so a group keeps committing while its
    topic's leaders move (the failover time measured is the coordinator's alone).
    ``pace`` seconds between polls shapes the workload (a topic must last through a
    failover); it is a rate, not a wait for a condition.
    """

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topic: str,
        ledger: Ledger,
        *,
        batch: int = 20,
        pace: float = 0.02,
        **conf: Any,
    ) -> None:
        super().__init__(daemon=True)
        self.ledger = ledger
        self.topic = topic
        self.batch = batch
        self.pace = pace
        self.stop_flag = threading.Event()
        self.positions: dict[int, int] = {}
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 500,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000,
                **conf,
            }
        )
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.positions = {}

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.positions = {}

    def run(self) -> None:
        while not self.stop_flag.is_set():
            for m in self.consumer.consume(self.batch, 0.1):
                if m.error() is not None:
                    continue
                p, o = m.partition(), m.offset()
                assert p is not None and o is not None
                self.ledger.on_record(p, o)
                self.positions[p] = o + 1
            if self.positions:
                self._commit(dict(self.positions))
            if self.pace:
                self.stop_flag.wait(self.pace)

    def _commit(self, offsets: dict[int, int]) -> None:
        tps = [TopicPartition(self.topic, p, o) for p, o in offsets.items()]
        started = time.monotonic()
        while not self.stop_flag.is_set():
            try:
                result = self.consumer.commit(offsets=tps, asynchronous=False)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                self.ledger.commit_errors.append(str(err))
                # A commit refused because the member lost its partitions (a rebalance) is
                # not retried: the next owner starts from the last acknowledged commit.
                if err is not None and not err.retriable():
                    self.positions = {}
                    return
                self.stop_flag.wait(0.05)
                continue
            if result is not None and any(tp.error is not None for tp in result):
                self.ledger.commit_errors.append(str([tp.error for tp in result]))
                return
            self.ledger.on_ack(offsets, started)
            return

    def close(self) -> None:
        self.stop_flag.set()
        self.join(30)
        self.consumer.close()
