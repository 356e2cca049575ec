"""KIP-848 consumer-group benchmarks next to the classic path (issue 15, item 8): one run, one table.

How this works
--------------
Every server is a real ``kgc serve`` (``tests/support/kgc_process.py``) with default settings (fsync
per write batch, session timeout 45 s, heartbeat interval 5 s); the only flag is
``--group-initial-rebalance-delay-ms 0``, as ``bench_groups.py`` runs the classic path (it
touches classic groups only). Server CPU is the kgc process's user+system time from
``/proc/<pid>/stat`` (all its threads), read just before and just after a measured window.

1. **Heartbeats.** One server holds ``--groups`` x ``--per-group`` consumer-protocol members
   (ConsumerGroupHeartbeat v1: a full epoch-0 join, then acknowledging heartbeats until every
   group is stable on a topic of ``--per-group`` partitions) and as many classic members
   (``bench_groups.setup_groups``: JoinGroup/SyncGroup). Then, alternately for
   ``--rounds`` rounds, the pipelined load generator (``loadgen.run_load``) sends each
   member's steady partial heartbeat (group id, member id, member epoch only) or its classic
   Heartbeat v4 as fast as the server answers. Each window is preceded by its own warm-up;
   CPU per heartbeat is CPU time over the heartbeats the server counted in the window
   (``kgc_requests_total``), and every one must have been answered without an error.
2. **1,000 members join one group.** A fresh server per round (so no earlier group's
   sessions expire in the window), a topic of ``--join-partitions`` partitions, ``--join-members``
   members on a connection each. The window opens when all the epoch-0 joins are sent at
   once and closes when, as the members see it, all are at one epoch, own disjoint partitions
   and together own the whole topic. Members behave as the Java consumer: a response that
   changes the assignment is applied at once (revoked partitions dropped, new ones taken) and
   acknowledged by a heartbeat carrying the owned partitions straight away; otherwise the
   member waits the heartbeat interval the server gave (5 s by default; ``--join-poll-ms``
   overrides it). ConsumerGroupDescribe afterwards confirms the server's view (STABLE, every
   member at the group epoch = assignment epoch). The classic row is
   ``bench_groups.rebalance_latency`` (1,000 JoinGroup/SyncGroup members, join barrier) on its own
   fresh server, its CPU window around the whole call.
3. **Assignors.** ``bench_assignors``' own spec builder and timer: uniform and range, full
   assignment of ``--assignor-members`` members x 10,000 partitions and one member joining
   that balanced group, timed in this process.

Medians of ``--rounds`` rounds; the last column lists every round. ``--quick`` is a smoke
run at small sizes. Usage: ``python bench/bench_consumer_groups.py [--quick] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import functools
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (puts this checkout and tests/ on the import path)
from aioclient import AsyncConn
from bench_assignors import TARGET_MS, Topics, build_spec, time_ms
from bench_groups import heartbeat_frames, rebalance_latency, setup_groups
from loadgen import LoadResult, run_load
from results import record
from support.kgc_process import KgcProcess

from coordinator.group.consumer.assignors import BUILTIN_ASSIGNORS
from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader, encode_request
from protocol.messages import consumer_group_describe as cgd
from protocol.messages import consumer_group_heartbeat as cgh
from protocol.messages import create_topics

HOST = "127.0.0.1"
CGH_VERSION = 1
# The Java consumer's default max.poll.interval.ms, sent as RebalanceTimeoutMs.
REBALANCE_TIMEOUT_MS = 300_000
_CLK_TCK = os.sysconf("SC_CLK_TCK")
# Closing the logs of 2,000 partitions on SIGTERM takes kgc over 15 s here.
STOP_TIMEOUT_S = 300.0


def server_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all threads, and children it waited for)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the command name: state is field 3, so utime (14) .. cstime (17) are 11..14.
    return sum(int(x) for x in fields[11:15]) / _CLK_TCK


def pid_of(kgc: KgcProcess) -> int:
    assert kgc.proc is not None
    return int(kgc.proc.pid)


@contextlib.contextmanager
def serving(tmp: Path, name: str, *extra: str) -> Iterator[KgcProcess]:
    """A started, loaded ``kgc serve``; its log's tail goes to stderr if the bench fails."""
    kgc = KgcProcess(
        tmp / name, "--group-initial-rebalance-delay-ms", "0", "--kgc-log-level", "WARNING", *extra
    )
    kgc.start()
    try:
        kgc.wait_loaded()
        yield kgc
    except BaseException:
        print(f"--- kgc log ({name}) ---\n{kgc.log()}", file=sys.stderr)
        raise
    finally:
        kgc.stop(STOP_TIMEOUT_S)


def create_topic(kgc: KgcProcess, name: str, partitions: int) -> None:
    # Creating 2,000 partitions' logs takes the server a while: wait for it.
    with Connection.to(kgc.bootstrap, timeout=300) as c:
        _, resp = c.request(
            create_topics.API_KEY,
            create_topics.Request(
                topics=[
                    create_topics.CreatableTopic(
                        name=name, num_partitions=partitions, replication_factor=1
                    )
                ]
            ),
        )
    err = resp.topics[0].error_code
    if err:
        raise RuntimeError(f"CreateTopics {name}: {ErrorCode(err).name}")


def new_member_id() -> str:
    # ConsumerGroupHeartbeat v1: the client makes its member id (KIP-1082), as a Uuid.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


# ---------------------------------------------------------------- a consumer-protocol member

TopicPartition = tuple[bytes, int]


class Progress:
    """What the members own and at which epoch, kept incrementally, as the bench's view.

    ``settled`` holds once every member has joined, all are at one epoch, and the
    partitions they own are disjoint and cover the ``total`` partitions.
    """

    def __init__(self, members: int, total: int) -> None:
        self.members = members
        self.total = total
        self.epochs: dict[str, int] = {}
        self.epoch_count: dict[int, int] = {}
        self.owners: dict[TopicPartition, int] = {}
        self.doubly_owned = 0
        self.settled = asyncio.Event()

    def update(
        self, member_id: str, epoch: int, before: set[TopicPartition], after: set[TopicPartition]
    ) -> None:
        old = self.epochs.get(member_id)
        if old != epoch:
            if old is not None:
                self.epoch_count[old] -= 1
                if not self.epoch_count[old]:
                    del self.epoch_count[old]
            self.epochs[member_id] = epoch
            self.epoch_count[epoch] = self.epoch_count.get(epoch, 0) + 1
        for tp in before - after:
            n = self.owners[tp] - 1
            if n == 1:
                self.doubly_owned -= 1
            if n:
                self.owners[tp] = n
            else:
                del self.owners[tp]
        for tp in after - before:
            n = self.owners.get(tp, 0) + 1
            if n == 2:
                self.doubly_owned += 1
            self.owners[tp] = n
        if (
            len(self.epochs) == self.members
            and len(self.epoch_count) == 1
            and not self.doubly_owned
            and len(self.owners) == self.total
        ):
            self.settled.set()


@dataclass
class ConsumerMember:
    conn: AsyncConn
    group: str
    topic: str
    member_id: str = field(default_factory=new_member_id)
    epoch: int = 0
    owned: set[TopicPartition] = field(default_factory=set)
    # The owned partitions as last sent; the next heartbeat carries them only if changed.
    sent_owned: set[TopicPartition] | None = None
    interval_ms: int = 5000
    heartbeats: int = 0
    errors: list[int] = field(default_factory=list)
    error_notes: list[str] = field(default_factory=list)
    joined_at: float | None = None  # perf_counter() when the first join was answered

    def _owned_field(self) -> list[cgh.TopicPartitions] | None:
        if self.sent_owned == self.owned:
            return None
        by_topic: dict[bytes, list[int]] = {}
        for t, p in self.owned:
            by_topic.setdefault(t, []).append(p)
        return [
            cgh.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in by_topic.items()
        ]

    async def heartbeat(self, progress: Progress | None) -> bool:
        """One heartbeat (a full join at epoch 0); True if the assignment changed."""
        joining = self.epoch == 0
        req = cgh.ConsumerGroupHeartbeatRequest(
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch
        )
        if joining:
            req.rebalance_timeout_ms = REBALANCE_TIMEOUT_MS
            req.subscribed_topic_names = [self.topic]
            req.topic_partitions = []
            self.sent_owned = set()
        else:
            req.topic_partitions = self._owned_field()
        sent = set(self.owned)
        resp = await self.conn.call(cgh.API_KEY, CGH_VERSION, req)
        self.heartbeats += 1
        if resp.error_code:
            self.errors.append(resp.error_code)
            self.error_notes.append(
                f"{self.member_id} heartbeat {self.heartbeats} at epoch {req.member_epoch}: "
                f"{ErrorCode(resp.error_code).name} {resp.error_message or ''}"
            )
            if resp.error_code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
                # Kafka's client gives up what it owns and rejoins at epoch 0.
                before, self.owned, self.epoch = set(self.owned), set(), 0
                if progress is not None:
                    progress.update(self.member_id, -1, before, self.owned)
            return False
        if not joining:
            self.sent_owned = sent
        elif self.joined_at is None:
            self.joined_at = time.perf_counter()
        self.interval_ms = resp.heartbeat_interval_ms
        before = self.owned
        if resp.assignment is not None:
            # Reconcile at once: drop what is no longer assigned, take what is new.
            self.owned = {
                (t.topic_id, p) for t in resp.assignment.topic_partitions for p in t.partitions
            }
        self.epoch = resp.member_epoch
        if progress is not None:
            progress.update(self.member_id, self.epoch, before, self.owned)
        return self.owned != before

    async def run(
        self, progress: Progress | None, stop: asyncio.Event, poll_ms: int | None
    ) -> None:
        """Heartbeat as the Java consumer does until ``stop``: acks at once, else every interval."""
        changed = await self.heartbeat(progress)
        while not stop.is_set():
            if not changed and self.sent_owned == self.owned:
                wait_s = (poll_ms if poll_ms is not None else self.interval_ms) / 1000
                try:
                    await asyncio.wait_for(stop.wait(), wait_s)
                    return
                except TimeoutError:
                    pass
            changed = await self.heartbeat(progress)

    async def leave(self) -> None:
        await self.conn.call(
            cgh.API_KEY,
            CGH_VERSION,
            cgh.ConsumerGroupHeartbeatRequest(
                group_id=self.group, member_id=self.member_id, member_epoch=-1
            ),
        )


async def describe(port: int, group: str) -> cgd.DescribedGroup:
    conn = await AsyncConn.open(HOST, port, "describe")
    try:
        resp = await conn.call(cgd.API_KEY, 1, cgd.ConsumerGroupDescribeRequest(group_ids=[group]))
    finally:
        await conn.close()
    g: cgd.DescribedGroup = resp.groups[0]
    return g


def server_settled(g: cgd.DescribedGroup, members: int, total: int) -> str | None:
    """None if the server agrees the group is stable and fully assigned; else what is off."""
    if g.error_code:
        return f"describe: {ErrorCode(g.error_code).name}"
    if g.group_state != "Stable":
        return f"state {g.group_state}"
    if len(g.members) != members:
        return f"{len(g.members)} members"
    if g.assignment_epoch != g.group_epoch:
        return f"assignment epoch {g.assignment_epoch} != group epoch {g.group_epoch}"
    if any(m.member_epoch != g.group_epoch for m in g.members):
        return "a member is behind the group epoch"
    owned = [
        (t.topic_id, p)
        for m in g.members
        for t in m.assignment.topic_partitions
        for p in t.partitions
    ]
    if len(owned) != total or len(set(owned)) != total:
        return f"{len(set(owned))} of {total} partitions owned ({len(owned)} with repeats)"
    return None


async def settle_consumer_groups(
    port: int, groups: list[str], per_group: int, topic: str, partitions: int, connections: int
) -> list[ConsumerMember]:
    """Join ``per_group`` members to each group over shared connections until all are stable."""
    conns = await asyncio.gather(
        *(AsyncConn.open(HOST, port, f"cg{i}") for i in range(connections))
    )
    members = [
        ConsumerMember(conns[(g * per_group + i) % connections], gid, topic)
        for g, gid in enumerate(groups)
        for i in range(per_group)
    ]
    progress = {gid: Progress(per_group, partitions) for gid in groups}
    stop = asyncio.Event()
    # Setup is not measured: poll every 50 ms instead of waiting the 5 s interval.
    tasks = [asyncio.ensure_future(m.run(progress[m.group], stop, 50)) for m in members]
    await asyncio.wait_for(asyncio.gather(*(p.settled.wait() for p in progress.values())), 120)
    stop.set()
    await asyncio.gather(*tasks)
    for gid in groups:
        off = server_settled(await describe(port, gid), per_group, partitions)
        if off is not None:
            raise RuntimeError(f"{gid} not settled on the server: {off}")
    bad = [e for m in members for e in m.errors]
    if bad:
        raise RuntimeError(f"errors while settling: {sorted({ErrorCode(e).name for e in bad})}")
    for c in conns:
        await c.close()
    return members


def partial_heartbeat_frames(members: Iterable[ConsumerMember]) -> list[bytes]:
    return [
        encode_request(
            RequestHeader(cgh.API_KEY, CGH_VERSION, 1, "bench"),
            cgh.ConsumerGroupHeartbeatRequest(
                group_id=m.group, member_id=m.member_id, member_epoch=m.epoch
            ),
        )
        for m in members
    ]


# ---------------------------------------------------------------- part 1: heartbeats


@dataclass
class HeartbeatRound:
    load: LoadResult
    cpu_s: float
    server_requests: float

    @property
    def cpu_us_per_request(self) -> float:
        return self.cpu_s / self.server_requests * 1e6


def measure_heartbeats(
    kgc: KgcProcess, frames: list[bytes], api: str, args: argparse.Namespace
) -> HeartbeatRound:
    def load(seconds: float) -> LoadResult:
        return asyncio.run(
            run_load(
                HOST,
                kgc.port,
                lambda i: frames[i % len(frames)],
                connections=args.connections,
                depth=args.depth,
                seconds=seconds,
                warmup=0,
            )
        )

    load(args.warmup)
    before_total = kgc.requests_total(api=api)
    before_ok = kgc.requests_total(api=api, error="NONE")
    cpu0 = server_cpu_seconds(pid_of(kgc))
    res = load(args.seconds)
    cpu1 = server_cpu_seconds(pid_of(kgc))
    total = kgc.requests_total(api=api) - before_total
    ok = kgc.requests_total(api=api, error="NONE") - before_ok
    if total != ok or total != res.requests:
        raise RuntimeError(f"{api}: {total} answered, {ok} without error, {res.requests} sent")
    return HeartbeatRound(res, cpu1 - cpu0, total)


def part_heartbeats(tmp: Path, args: argparse.Namespace) -> dict[str, list[HeartbeatRound]]:
    with serving(tmp, "heartbeats") as kgc:
        create_topic(kgc, "hb", args.per_group)
        groups = [f"cg-{g}" for g in range(args.groups)]
        # Consumer members first: their 45 s sessions outlast the classic setup.
        members = asyncio.run(
            settle_consumer_groups(
                kgc.port, groups, args.per_group, "hb", args.per_group, args.connections
            )
        )
        cg_frames = partial_heartbeat_frames(members)
        classic = asyncio.run(setup_groups(kgc.port, args.groups, args.per_group, args.connections))
        classic_frames = heartbeat_frames(classic)
        runs: dict[str, list[HeartbeatRound]] = {"consumer": [], "classic": []}
        for _ in range(args.rounds):
            runs["consumer"].append(
                measure_heartbeats(kgc, cg_frames, "ConsumerGroupHeartbeat", args)
            )
            runs["classic"].append(measure_heartbeats(kgc, classic_frames, "Heartbeat", args))
        return runs


# ---------------------------------------------------------------- part 2: 1,000 members join


@dataclass
class JoinRound:
    wall_s: float
    cpu_s: float
    # From the window's start until the last epoch-0 join was answered (consumer only).
    joins_s: float = 0.0
    heartbeats: int = 0
    epoch: int = 0


async def warm_up(port: int, total: int) -> None:
    """A small group joins and leaves before any window: the server's code paths are warm."""
    warm = [
        ConsumerMember(await AsyncConn.open(HOST, port, f"warm{i}"), "warm", "join")
        for i in range(10)
    ]
    progress = Progress(len(warm), total)
    stop = asyncio.Event()
    tasks = [asyncio.ensure_future(m.run(progress, stop, 20)) for m in warm]
    await asyncio.wait_for(progress.settled.wait(), 60)
    stop.set()
    await asyncio.gather(*tasks)
    for m in warm:
        await m.leave()
        await m.conn.close()


async def consumer_join(port: int, pid: int, group: str, args: argparse.Namespace) -> JoinRound:
    n, total = args.join_members, args.join_partitions
    conns = await asyncio.gather(*(AsyncConn.open(HOST, port, f"consumer-{i}") for i in range(n)))
    members = [ConsumerMember(c, group, "join") for c in conns]
    progress = Progress(n, total)
    stop = asyncio.Event()
    cpu0 = server_cpu_seconds(pid)
    t0 = time.perf_counter()
    tasks = [asyncio.ensure_future(m.run(progress, stop, args.join_poll_ms)) for m in members]
    try:
        await asyncio.wait_for(progress.settled.wait(), args.join_timeout)
    finally:
        t1 = time.perf_counter()
        cpu1 = server_cpu_seconds(pid)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    bad = [e for m in members for e in m.errors]
    if bad:
        notes = [x for m in members for x in m.error_notes]
        raise RuntimeError(f"{len(bad)} errors while joining, e.g. {notes[:5]}")
    g = await describe(port, group)
    off = server_settled(g, n, total)
    if off is not None:
        raise RuntimeError(f"the members saw a settled group, the server did not: {off}")
    # Everyone leaves before the next round's window, so no session expires inside it.
    await asyncio.gather(*(m.leave() for m in members))
    for m in members:
        await m.conn.close()
    joins_s = max(m.joined_at or t1 for m in members) - t0
    return JoinRound(
        t1 - t0, cpu1 - cpu0, joins_s, sum(m.heartbeats for m in members), g.group_epoch
    )


def part_join(tmp: Path, args: argparse.Namespace) -> dict[str, list[JoinRound]]:
    runs: dict[str, list[JoinRound]] = {"consumer": [], "classic": []}
    # One server for the consumer rounds (creating a topic of 2,000 partitions takes it
    # tens of seconds here), a group per round; every member leaves after its round.
    extra = (
        []
        if not args.join_message_max_bytes
        else ["--message-max-bytes", str(args.join_message_max_bytes)]
    )
    with serving(tmp, "join-consumer", *extra) as kgc:
        create_topic(kgc, "join", args.join_partitions)
        asyncio.run(warm_up(kgc.port, args.join_partitions))
        for r in range(args.rounds):
            runs["consumer"].append(
                asyncio.run(consumer_join(kgc.port, pid_of(kgc), f"join-{r}", args))
            )
    for r in range(args.rounds):
        # A fresh server per classic round: closed classic members stay until their
        # sessions expire (30 s), which would land in the next round's window.
        with serving(tmp, f"join-classic-{r}") as kgc:
            asyncio.run(rebalance_latency(kgc.port, 10))  # warm-up, as above
            cpu0 = server_cpu_seconds(pid_of(kgc))
            ms, generation = asyncio.run(rebalance_latency(kgc.port, args.join_members))
            cpu1 = server_cpu_seconds(pid_of(kgc))
            runs["classic"].append(JoinRound(ms / 1000, cpu1 - cpu0, epoch=generation))
    return runs


# ---------------------------------------------------------------- part 3: assignors


def part_assignors(args: argparse.Namespace) -> dict[tuple[str, str], list[float]]:
    topic_ids = [bytes([i % 256, i // 256]) + bytes(14) for i in range(1, args.assignor_topics + 1)]
    topics = Topics(dict.fromkeys(topic_ids, args.assignor_partitions), 0)
    out: dict[tuple[str, str], list[float]] = {}
    for name, a in BUILTIN_ASSIGNORS.items():
        empty = build_spec(args.assignor_members, topic_ids, None, 0, False)
        balanced = a.assign(empty, topics)
        joined = build_spec(args.assignor_members, topic_ids, balanced, 0, False, "newcomer")
        for case, spec in (("full", empty), ("join", joined)):
            out[(name, case)] = time_ms(functools.partial(a.assign, spec, topics), args.rounds)
    return out


# ---------------------------------------------------------------- the table


def median_by(runs: list[Any], key: Callable[[Any], float]) -> Any:
    return sorted(runs, key=key)[len(runs) // 2]


def fmt_runs(values: Iterable[float], f: str) -> str:
    return ", ".join(format(v, f) for v in values)


def table(
    args: argparse.Namespace,
    hb: dict[str, list[HeartbeatRound]] | None,
    join: dict[str, list[JoinRound]] | None,
    assign: dict[tuple[str, str], list[float]] | None,
) -> str:
    rows = [
        "| # | measurement | median | p50 / p99 ms | server CPU | target | every round |",
        "|---|---|---|---|---|---|---|",
    ]
    if hb is not None:
        cg = median_by(hb["consumer"], lambda r: r.load.rate)
        cl = median_by(hb["classic"], lambda r: r.load.rate)
        ratio = cg.load.rate / cl.load.rate
        for label, runs, med, target in (
            (
                "ConsumerGroupHeartbeat v1, partial (id, member id, epoch)",
                hb["consumer"],
                cg,
                f"≥ classic: {ratio:.2f}x {'ok' if ratio >= 1 else 'MISSED'}",
            ),
            ("Heartbeat v4 (classic)", hb["classic"], cl, "—"),
        ):
            cpu = statistics.median(r.cpu_us_per_request for r in runs)
            record("consumer_groups", label, med.load.rate, "req/s", "higher")
            record("consumer_groups", f"{label}, server CPU", cpu, "µs", "lower")
            rows.append(
                f"| 1 | {label}, {args.groups} groups x {args.per_group} members | "
                f"{med.load.rate:,.0f} req/s | {med.load.p50:.2f} / {med.load.pct(99):.2f} | "
                f"{cpu:.0f} µs/heartbeat | {target} | "
                f"{fmt_runs((r.load.rate for r in runs), ',.0f')} req/s; "
                f"{fmt_runs((r.cpu_us_per_request for r in runs), '.0f')} µs |"
            )
    if join is not None:
        n, parts = args.join_members, args.join_partitions
        poll = "server's interval" if args.join_poll_ms is None else f"poll {args.join_poll_ms} ms"
        if args.join_message_max_bytes:
            poll += f"; message.max.bytes={args.join_message_max_bytes}"
        for kind, label in (
            (
                "consumer",
                f"{n:,} members join one consumer group ({parts:,} partitions; {poll}) until all STABLE and every partition owned",
            ),
            (
                "classic",
                f"{n:,} members join one classic group (JoinGroup/SyncGroup) until all synced",
            ),
        ):
            jruns = join[kind]
            cpu = statistics.median(r.cpu_s for r in jruns)
            wall = statistics.median(r.wall_s for r in jruns)
            record("consumer_groups", f"{n} members join one {kind} group", wall, "s", "lower")
            record("consumer_groups", f"{n} members join one {kind} group, CPU", cpu, "s", "lower")
            extra = (
                f"; all joins answered after {fmt_runs((r.joins_s for r in jruns), '.2f')} s"
                f"; heartbeats {fmt_runs((r.heartbeats for r in jruns), 'd')}; group epoch {fmt_runs((r.epoch for r in jruns), 'd')}"
                if kind == "consumer"
                else f"; generation {fmt_runs((r.epoch for r in jruns), 'd')}"
            )
            target = f"< 1 s server: {'ok' if cpu < 1 else 'MISSED'}" if kind == "consumer" else "—"
            rows.append(
                f"| 2 | {label} | {wall:.2f} s wall | — | {cpu:.2f} s | {target} | "
                f"wall {fmt_runs((r.wall_s for r in jruns), '.2f')} s; "
                f"CPU {fmt_runs((r.cpu_s for r in jruns), '.2f')} s{extra} |"
            )
    if assign is not None:
        total = args.assignor_topics * args.assignor_partitions
        for (name, case), ts in assign.items():
            med = statistics.median(ts)
            record("consumer_groups", f"assignor {name} {case}", med, "ms", "lower")
            goal = TARGET_MS[case]
            what = "full assignment" if case == "full" else "one member joins (incremental)"
            rows.append(
                f"| 3 | assignor {name}: {what}, {args.assignor_members:,} members x "
                f"{total:,} partitions | {med:.1f} ms | — | (in process) | "
                f"< {goal:.0f} ms: {'ok' if med < goal else 'MISSED'} | {fmt_runs(ts, '.1f')} ms |"
            )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a short smoke run at small sizes")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per measurement (3)")
    ap.add_argument("--only", default="1,2,3", help="parts to run, e.g. 1,3")
    ap.add_argument("--groups", type=int, default=None)
    ap.add_argument("--per-group", type=int, default=10)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=None, help="per heartbeat window (5)")
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--join-members", type=int, default=None)
    ap.add_argument("--join-partitions", type=int, default=None)
    ap.add_argument(
        "--join-poll-ms",
        type=int,
        default=None,
        help="members' wait between heartbeats when nothing changed (default: the server's interval)",
    )
    ap.add_argument("--join-timeout", type=float, default=300.0)
    ap.add_argument(
        "--join-message-max-bytes",
        type=int,
        default=0,
        help="message.max.bytes of the consumer join server (0: kgc's default, 1 MiB)",
    )
    ap.add_argument("--assignor-members", type=int, default=None)
    ap.add_argument("--assignor-topics", type=int, default=100)
    ap.add_argument("--assignor-partitions", type=int, default=None)
    args = ap.parse_args()
    q = args.quick
    defaults = {
        "rounds": 1 if q else 3,
        "groups": 10 if q else 100,
        "seconds": 1.0 if q else 5.0,
        "join_members": 50 if q else 1000,
        "join_partitions": 100 if q else 2000,
        "assignor_members": 100 if q else 1000,
        "assignor_partitions": 10 if q else 100,
    }
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if q and args.join_poll_ms is None:
        args.join_poll_ms = 100
    parts = {int(x) for x in args.only.split(",") if x}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        hb = part_heartbeats(tmp, args) if 1 in parts else None
        join = part_join(tmp, args) if 2 in parts else None
    assign = part_assignors(args) if 3 in parts else None
    print(
        f"\nkgc serve, default settings (fsync per write batch; group.consumer.session.timeout.ms "
        f"45000, heartbeat interval 5000) and group.initial.rebalance.delay.ms=0; "
        f"{os.cpu_count()} cores shared by server and load generator; median of {args.rounds} "
        f"round(s); heartbeat windows {args.seconds:g} s after {args.warmup:g} s warm-up, "
        f"{args.connections} connections x {args.depth} in flight\n"
    )
    print(table(args, hb, join, assign))
    return 0


if __name__ == "__main__":
    sys.exit(main())
