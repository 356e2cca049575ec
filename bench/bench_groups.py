"""Group coordination benchmarks: rebalance latency, heartbeat throughput, churn.

(a) rebalance: N members (one connection each, as real clients) join a new group at once
    with group.initial.rebalance.delay.ms=0; time from the first JoinGroup sent to the last
    successful SyncGroup of the final generation.
(b) heartbeat: G groups x M members set up, then pipelined Heartbeat v4 over C connections;
    requests/s and p50/p99, next to ApiVersions on the same server for the ratio.
(c) churn: stable members heartbeat while others join and leave for S seconds; counts
    completed rebalances and any error outside the expected ones (must be zero).

Usage: ``python bench/bench_groups.py [--sizes 10,100,500,1000] [--churn-seconds 30] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

import checkout  # noqa: F401  (puts this checkout and tests/ on the import path)
from aioclient import AsyncConn
from loadgen import LoadResult, run_load
from results import record
from support.kgc_process import KgcProcess

from protocol.errors import ErrorCode
from protocol.framing import RequestHeader, encode_request
from protocol.messages import api_versions, heartbeat, join_group, leave_group, sync_group
from protocol.messages.join_group import JoinGroupRequest, JoinGroupRequestProtocol
from protocol.messages.leave_group import LeaveGroupRequest, MemberIdentity
from protocol.messages.sync_group import SyncGroupRequest, SyncGroupRequestAssignment

HOST = "127.0.0.1"
# A consumer-protocol subscription to one topic (version 0, ["bench"], no user data).
SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x05bench\xff\xff\xff\xff"
EXPECTED = {
    ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.MEMBER_ID_REQUIRED,
    ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.UNKNOWN_MEMBER_ID,
}


class Member:
    def __init__(self, conn: AsyncConn, group: str) -> None:
        self.conn = conn
        self.group = group
        self.member_id = ""
        self.generation = -1
        self.errors: list[int] = []

    async def join_and_sync(self) -> int:
        """Join (re-joining as often as the coordinator asks) until a SyncGroup succeeds."""
        while True:
            resp = await self.conn.call(
                join_group.API_KEY,
                9,
                JoinGroupRequest(
                    group_id=self.group,
                    session_timeout_ms=30000,
                    rebalance_timeout_ms=60000,
                    member_id=self.member_id,
                    protocol_type="consumer",
                    protocols=[JoinGroupRequestProtocol(name="range", metadata=SUBSCRIPTION)],
                ),
            )
            if resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = resp.member_id
                continue
            if resp.error_code:
                self.errors.append(resp.error_code)
                if resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                continue
            self.member_id = resp.member_id
            leader = resp.leader == self.member_id and not resp.skip_assignment
            assignments = (
                [
                    SyncGroupRequestAssignment(
                        member_id=m.member_id, assignment=b"\x00\x00\x00\x00\x00\x00"
                    )
                    for m in resp.members
                ]
                if leader
                else []
            )
            s = await self.conn.call(
                sync_group.API_KEY,
                5,
                SyncGroupRequest(
                    group_id=self.group,
                    generation_id=resp.generation_id,
                    member_id=self.member_id,
                    protocol_type="consumer",
                    protocol_name=resp.protocol_name,
                    assignments=assignments,
                ),
            )
            if s.error_code:
                self.errors.append(s.error_code)
                continue
            self.generation = resp.generation_id
            return self.generation

    async def heartbeat(self) -> int:
        r = await self.conn.call(
            heartbeat.API_KEY,
            4,
            heartbeat.Request(
                group_id=self.group, generation_id=self.generation, member_id=self.member_id
            ),
        )
        if r.error_code:
            self.errors.append(r.error_code)
        return int(r.error_code)

    async def leave(self) -> None:
        await self.conn.call(
            leave_group.API_KEY,
            5,
            LeaveGroupRequest(
                group_id=self.group, members=[MemberIdentity(member_id=self.member_id)]
            ),
        )


async def stay_in_group(
    m: Member, done: asyncio.Event, synced: dict[str, int], interval: float
) -> None:
    await m.join_and_sync()
    synced[m.member_id] = m.generation
    while not done.is_set():
        await asyncio.sleep(interval)
        if done.is_set():
            return
        err = await m.heartbeat()
        if err == ErrorCode.REBALANCE_IN_PROGRESS or err == ErrorCode.ILLEGAL_GENERATION:
            synced.pop(m.member_id, None)
            await m.join_and_sync()
            synced[m.member_id] = m.generation


async def rebalance_latency(port: int, n: int) -> tuple[float, int]:
    conns = await asyncio.gather(*(AsyncConn.open(HOST, port, f"m{i}") for i in range(n)))
    group = f"rebalance-{n}-{random.randrange(1 << 30)}"
    members = [Member(c, group) for c in conns]
    synced: dict[str, int] = {}
    done = asyncio.Event()
    start = time.perf_counter()
    tasks = [asyncio.ensure_future(stay_in_group(m, done, synced, 0.05)) for m in members]
    finished = None
    while time.perf_counter() - start < 120:
        await asyncio.sleep(0.001)
        if len(synced) == n and len(set(synced.values())) == 1:
            finished = time.perf_counter()
            break
    done.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in conns:
        await c.close()
    if finished is None:
        raise RuntimeError(f"{n} members never settled")
    return (finished - start) * 1000, max(synced.values())


async def setup_groups(
    port: int, groups: int, per_group: int, connections: int
) -> list[tuple[str, int, str]]:
    conns = await asyncio.gather(
        *(AsyncConn.open(HOST, port, f"setup{i}") for i in range(groups * per_group))
    )
    members = [
        Member(conns[g * per_group + i], f"hb-{g}") for g in range(groups) for i in range(per_group)
    ]
    synced: dict[str, int] = {}
    done = asyncio.Event()
    tasks = [asyncio.ensure_future(stay_in_group(m, done, synced, 0.2)) for m in members]
    while True:
        await asyncio.sleep(0.05)
        if len(synced) == len(members):
            gens = {}
            for m in members:
                gens.setdefault(m.group, set()).add(synced.get(m.member_id))
            if all(len(v) == 1 for v in gens.values()):
                break
    done.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in conns:
        await c.close()
    return [(m.group, m.generation, m.member_id) for m in members]


def heartbeat_frames(members: list[tuple[str, int, str]]) -> list[bytes]:
    return [
        encode_request(
            RequestHeader(heartbeat.API_KEY, 4, 1, "bench"),
            heartbeat.Request(group_id=g, generation_id=gen, member_id=mid),
        )
        for g, gen, mid in members
    ]


async def churn(port: int, seconds: float) -> tuple[int, list[int], int]:
    group = "churn"
    stable = [Member(await AsyncConn.open(HOST, port, f"stable{i}"), group) for i in range(10)]
    synced: dict[str, int] = {}
    done = asyncio.Event()
    tasks = [asyncio.ensure_future(stay_in_group(m, done, synced, 0.3)) for m in stable]
    unexpected: list[int] = []
    joins = 0

    async def churner(i: int) -> None:
        nonlocal joins
        while not done.is_set():
            m = Member(await AsyncConn.open(HOST, port, f"churn{i}"), group)
            await m.join_and_sync()
            joins += 1
            await asyncio.sleep(random.uniform(1, 3))
            await m.leave()
            unexpected.extend(e for e in m.errors if e not in EXPECTED)
            await m.conn.close()
            await asyncio.sleep(random.uniform(0.2, 1))

    churners = [asyncio.ensure_future(churner(i)) for i in range(4)]
    await asyncio.sleep(seconds)
    done.set()
    await asyncio.gather(*churners, return_exceptions=True)
    await asyncio.gather(*tasks, return_exceptions=True)
    for m in stable:
        unexpected.extend(e for e in m.errors if e not in EXPECTED)
        await m.conn.close()
    generation = max(m.generation for m in stable)
    return generation, unexpected, joins


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="10,100,500,1000")
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--per-group", type=int, default=10)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3, help="alternating heartbeat/ApiVersions runs")
    ap.add_argument("--churn-seconds", type=float, default=30.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        kgc = KgcProcess(
            Path(tmp) / "data",
            "--group-initial-rebalance-delay-ms",
            "0",
            "--kgc-log-level",
            "WARNING",
        )
        kgc.start()
        try:
            print("\n(a) rebalance latency, initial delay 0")
            print(f"{'members':>8} {'settled in ms':>14} {'generation':>11}")
            for n in [int(x) for x in args.sizes.split(",") if x]:
                ms, gen = asyncio.run(rebalance_latency(kgc.port, n))
                print(f"{n:>8} {ms:>14.1f} {gen:>11}")
                record("groups", f"rebalance of {n} members", ms, "ms", "lower")

            members = asyncio.run(
                setup_groups(kgc.port, args.groups, args.per_group, args.connections)
            )
            frames = heartbeat_frames(members)
            av_frame = encode_request(
                RequestHeader(api_versions.API_KEY, 3, 1, "bench"),
                api_versions.Request(client_software_name="b", client_software_version="1"),
            )
            # Alternate the two loads and take medians: the machine is shared and noisy.
            runs: dict[str, list[LoadResult]] = {"hb": [], "av": []}
            for _ in range(args.repeats):
                for name, make in (
                    ("hb", lambda i: frames[i % len(frames)]),
                    ("av", lambda i: av_frame),
                ):
                    runs[name].append(
                        asyncio.run(
                            run_load(
                                HOST,
                                kgc.port,
                                make,
                                connections=args.connections,
                                depth=args.depth,
                                seconds=args.seconds,
                            )
                        )
                    )
            hb, av = (
                sorted(runs[n], key=lambda r: r.rate)[len(runs[n]) // 2] for n in ("hb", "av")
            )
            print(
                f"\n(b) heartbeat, {args.groups} groups x {args.per_group} members, "
                f"{args.connections} connections x {args.depth} in flight, "
                f"median of {args.repeats} alternating runs"
            )
            print(f"{'request':<14} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8}  all runs (req/s)")
            for label, r, name in (("Heartbeat v4", hb, "hb"), ("ApiVersions v3", av, "av")):
                all_runs = ", ".join(f"{x.rate:,.0f}" for x in runs[name])
                print(f"{label:<14} {r.rate:>10.0f} {r.p50:>8.2f} {r.pct(99):>8.2f}  {all_runs}")
                record("groups", label, r.rate, "req/s", "higher")
            print(f"heartbeat / ApiVersions = {hb.rate / av.rate:.2f} (medians)")

            if args.churn_seconds > 0:
                gen, unexpected, joins = asyncio.run(churn(kgc.port, args.churn_seconds))
                print(
                    f"\n(c) churn for {args.churn_seconds:.0f} s: 10 stable members, 4 joining/leaving every 1-3 s"
                )
                print(
                    f"joins by churners: {joins}; final generation (rebalances completed): {gen}; unexpected errors: {len(unexpected)} {sorted(set(unexpected))}"
                )
        finally:
            kgc.stop()


if __name__ == "__main__":
    main()
