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

Usage: ``python bench/bench_history_turn.py [--members 1] [--partitions 10] [--turns 50]
[--batches 40]``.
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


async def runtime(history: bool, base: Path, keep: bool = True) -> tuple[GroupRuntime, Flusher]:
    """A runtime on the local engine in ``base``; ``keep`` False: the core tracks the
    history but the runtime keeps none (to count the core's share)."""
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
        history=HistoryLog(logs, HISTORY_LOG) if history and keep else None,
    )
    await rt.load()
    return rt, flusher


async def measure(args: argparse.Namespace) -> dict[bool, list[tuple[float, float]]]:
    """Per batch of turns: (main thread, process) CPU us per commit, history off and on."""
    groups = [f"commit-{i}" for i in range(args.members)]
    out: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as off_dir, tempfile.TemporaryDirectory() as on_dir:
        rts = {False: await runtime(False, Path(off_dir)), True: await runtime(True, Path(on_dir))}
        offset = 0
        try:
            for batch in range(args.batches + 2):  # the first two warm up
                for history in (False, True) if batch % 2 == 0 else (True, False):
                    rt = rts[history][0]
                    thread0, process0 = time.thread_time(), time.process_time()
                    for _ in range(args.turns):
                        offset += 1
                        await asyncio.gather(
                            *(call(rt, 8, 8, request(g, args.partitions, offset)) for g in groups)
                        )
                    n = args.turns * args.members
                    if batch >= 2:
                        out[history].append(
                            (
                                (time.thread_time() - thread0) / n * 1e6,
                                (time.process_time() - process0) / n * 1e6,
                            )
                        )
        finally:
            for _rt, flusher in rts.values():
                await flusher.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--members", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--turns", type=int, default=50, help="turns a batch")
    ap.add_argument("--batches", type=int, default=40, help="batches each, alternated")
    args = ap.parse_args()
    out = asyncio.run(measure(args))
    print(
        f"{args.members} commit(s) of {args.partitions} partitions a turn, {args.batches} "
        f"batches of {args.turns} turns each, alternated; CPU us per commit:"
    )
    summary: dict[bool, tuple[float, float]] = {}
    for history in (False, True):
        thread = sorted(t for t, _p in out[history])
        process = sorted(p for _t, p in out[history])
        p10 = len(thread) // 10
        summary[history] = (thread[p10], process[p10])
        print(
            f"  history {'on ' if history else 'off'}: main thread p10 {thread[p10]:.1f} "
            f"median {statistics.median(thread):.1f}; process p10 {process[p10]:.1f} "
            f"median {statistics.median(process):.1f}"
        )
    (t_off, p_off), (t_on, p_on) = summary[False], summary[True]
    print(
        f"history's cost (p10): main thread {t_on - t_off:+.1f} us ({(t_on / t_off - 1) * 100:+.1f}%), "
        f"process {p_on - p_off:+.1f} us ({(p_on / p_off - 1) * 100:+.1f}%)"
    )


if __name__ == "__main__":
    main()
