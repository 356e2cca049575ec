"""The streams sticky task assignor (KIP-1071) on a large group: 1,000 members x 10,000 tasks.

Scenarios:

* **full**: ``--members`` members (default 1,000) on ``--processes`` processes (default
  250, so four stream threads each), ``--subtopologies`` subtopologies (default 10, half of
  them stateful) of ``--tasks`` tasks each (default 1,000: 10,000 active tasks), no
  previous target: the group's first assignment.
* **join**: that group balanced (every member's previous target is the full answer), then
  one member of a new process joins: the assignment of the next epoch.
* **standby**: as full, with ``--standbys`` standby replicas (default 1).

Each case runs ``--runs`` times (input built outside the timing, GC collected before each
run); the table shows the median and min-max in ms, and records them for bench/regress.py.

With ``--kafka``, Kafka 4.4's own ``StickyTaskAssignor`` (the group-coordinator jar, called by
``kgc.streams.StreamsAssignorBench`` from tests/jvm; ``scripts/ensure-jvm-deps`` builds it)
runs the same cases on the same input in one JVM (default flags: tiered JIT, a 2 GB heap),
each first ``--runs`` times untimed to warm the JIT up as a running broker has, and its
figures are printed beside kgc's.

Usage: ``python bench/bench_streams_assignor.py [--runs 5] [--members 1000]
[--processes 250] [--subtopologies 10] [--tasks 1000] [--standbys 1] [--kafka]``
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from results import record  # a sibling: bench/ is where this script runs from

from coordinator.group.streams.assignor import (
    AssignmentMember,
    MemberTasks,
    SubtopologySpec,
    assign,
)


def time_ms(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def members(
    n: int, processes: int, previous: dict[str, MemberTasks] | None
) -> list[AssignmentMember]:
    out = []
    for i in range(n):
        mid = f"member-{i}"
        prev = previous.get(mid) if previous is not None else None
        out.append(
            AssignmentMember(
                mid,
                f"process-{i % processes}",
                prev.active if prev is not None else {},
                prev.standby if prev is not None else {},
            )
        )
    return out


def kafka_figures(args: argparse.Namespace) -> dict[str, tuple[float, float, float]]:
    """Kafka's StickyTaskAssignor on the same cases: case -> (median, min, max) ms."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from support.kafkaserver import classpath

    cmd = ["java", "-Xmx2g", "-cp", classpath(), "kgc.streams.StreamsAssignorBench"]
    cmd += [str(args.runs), str(args.members), str(args.processes)]
    cmd += [str(args.subtopologies), str(args.tasks), str(args.standbys)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=True)
    out: dict[str, tuple[float, float, float]] = {}
    for line in done.stdout.splitlines():
        name, *rest = line.split()
        if name == "moved":
            print(f"kafka join moved {rest[0]} active tasks; newcomer got {rest[2]}")
        else:
            med, lo, hi = (float(x) for x in rest)
            out[name] = (med, lo, hi)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--processes", type=int, default=250)
    ap.add_argument("--subtopologies", type=int, default=10)
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--standbys", type=int, default=1)
    ap.add_argument("--kafka", action="store_true", help="Kafka 4.4's assignor beside kgc's")
    args = ap.parse_args()
    subs = [
        SubtopologySpec(str(i), args.tasks, stateful=i % 2 == 1) for i in range(args.subtopologies)
    ]
    print(
        f"{args.members} members on {args.processes} processes, {args.subtopologies} "
        f"subtopologies x {args.tasks} tasks, median of {args.runs} runs"
    )
    kafka = kafka_figures(args) if args.kafka else {}
    head = f"{'case':<8} {'median ms':>10} {'min-max ms':>18}"
    print(head + (f" {'Kafka median':>13} {'Kafka min-max':>18}" if kafka else ""))
    fresh = members(args.members, args.processes, None)
    balanced = assign(fresh, subs, 0)
    joined = [
        *members(args.members, args.processes, balanced),
        AssignmentMember("newcomer", "process-new"),
    ]
    cases: dict[str, Callable[[], object]] = {
        "full": lambda: assign(fresh, subs, 0),
        "join": lambda: assign(joined, subs, 0),
        "standby": lambda: assign(fresh, subs, args.standbys),
    }
    for case, fn in cases.items():
        ts = time_ms(fn, args.runs)
        med = statistics.median(ts)
        line = f"{case:<8} {med:>10.1f} {min(ts):>8.1f}-{max(ts):<9.1f}"
        if case in kafka:
            k_med, k_lo, k_hi = kafka[case]
            line += f" {k_med:>13.1f} {k_lo:>8.1f}-{k_hi:<9.1f}"
        print(line)
        record("streams_assignor", case, med, "ms", "lower")
    got = assign(joined, subs, 0)
    moved = sum(
        len(set(ps) - set(got[m.member_id].active.get(s, [])))
        for m in joined
        for s, ps in m.active_tasks.items()
    )
    print(
        f"join moved {moved} active tasks; newcomer got {sum(len(p) for p in got['newcomer'].active.values())}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
