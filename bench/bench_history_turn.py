"""The group history's CPU per commit, in-process: the runtime's turn with history on and off.

How this works: ``bench_history.py`` measures a whole ``kgc serve``, whose CPU per commit
depends on how many commits a round gathers -- and that moves with the machine's load by
more than the history costs (±25 % a round on the shared machine). Here the turns are
fixed: a ``GroupRuntime`` on the local engine (real segments, the journal, real fsyncs) in
a temporary directory receives, per turn, one OffsetCommit of P partitions from each of M
groups (simple groups, generation -1, every offset moved: each one a history change), sent
through the API table as the server does, and the next turn starts once every reply is
out (after the fsync round). The process's CPU time (all threads: time.process_time) over
N turns, divided by the commits, is the runtime's CPU per commit; history off and on
alternate, R rounds each, and the medians are compared. What it leaves out (the network,
request decoding, response encoding) is the same with history on or off, so the
difference is the history's cost; the ratio is to the runtime's share only, an upper
bound of the server's.

Usage: ``python bench/bench_history_turn.py [--members 5] [--partitions 10] [--turns 2000]
[--rounds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import checkout  # noqa: F401  (puts this checkout and tests/ on the import path)
from support.runtimekit import call

from coordinator.group.shard import GroupConfig, GroupShard
from coordinator.history.store import HistoryLog
from coordinator.runtime import GroupRuntime
from protocol.messages import offset_commit
from storage.interface import LogConfig
from storage.local.durability import Flusher
from storage.local.manager import LogManager

OFFSETS_PARTITIONS = 50
OFFSETS_LOG = LogConfig(cleanup_policy="compact", journaled=True)
HISTORY_LOG = LogConfig(retention_ms=7 * 86_400_000, segment_ms=86_400_000, journaled=True)


def request(group: str, partitions: int, offset: int) -> offset_commit.OffsetCommitRequest:
    return offset_commit.OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            offset_commit.OffsetCommitRequestTopic(
                name="bench",
                partitions=[
                    offset_commit.OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=offset, committed_metadata="m"
                    )
                    for p in range(partitions)
                ],
            )
        ],
    )


async def one(history: bool, args: argparse.Namespace, base: Path) -> float:
    """CPU us per commit over ``args.turns`` turns."""
    flusher = Flusher()
    logs = LogManager(base, flusher=flusher)
    rt = GroupRuntime(
        GroupShard(
            GroupConfig(offsets_topic_num_partitions=OFFSETS_PARTITIONS, offsets_history=history),
            topic_partitions=lambda topic: 1000,
        ),
        logs,
        flusher,
        num_partitions=OFFSETS_PARTITIONS,
        log_config=OFFSETS_LOG,
        history=HistoryLog(logs, HISTORY_LOG) if history else None,
    )
    await rt.load()
    groups = [f"commit-{i}" for i in range(args.members)]
    try:
        for warm in range(50):
            await asyncio.gather(
                *(call(rt, 8, 8, request(g, args.partitions, warm)) for g in groups)
            )
        start = time.process_time()
        for turn in range(args.turns):
            await asyncio.gather(
                *(call(rt, 8, 8, request(g, args.partitions, 100 + turn)) for g in groups)
            )
        used = time.process_time() - start
    finally:
        await flusher.stop()
        logs.close_all()
    return used / (args.turns * args.members) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--turns", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    cpu: dict[bool, list[float]] = {False: [], True: []}
    print(f"{'round':>5} {'history':>8} {'cpu us/commit':>14}")
    for r in range(args.rounds):
        for history in (False, True) if r % 2 == 0 else (True, False):
            with tempfile.TemporaryDirectory() as tmp:
                us = asyncio.run(one(history, args, Path(tmp)))
            cpu[history].append(us)
            print(f"{r:>5} {'on' if history else 'off':>8} {us:>14.1f}")
    off, on = statistics.median(cpu[False]), statistics.median(cpu[True])
    print(
        f"\nmedian runtime CPU per commit ({args.members} commits of {args.partitions} "
        f"partitions a turn): off {off:.1f} us, on {on:.1f} us ({(on / off - 1) * 100:+.1f}%)"
    )


if __name__ == "__main__":
    main()
