"""Server-side assignor benchmark: ``uniform`` and ``range`` on a large consumer group.

Scenarios (issue 15's targets: full < 100 ms, incremental < 10 ms):

* **full**: ``--members`` members (default 1,000), all subscribed to ``--topics`` topics of
  ``--partitions`` partitions each (default 100 x 100 = 10,000 partitions), no previous
  target: the first assignment of the group.
* **join**: the same group balanced (every member's previous target is the assignor's own
  full answer), then one member joins (appended last, with an empty previous target): the
  assignment of the next epoch.
* **join-hetero** / **full-hetero** (uniform only with ``--hetero``): half the members
  subscribe to one more topic than the others, which selects the heterogeneous builder.
* ``--racks N``: members and replicas spread over N racks (uniform's rack-aware deal).

Each case runs ``--runs`` times (spec built outside the timing, GC collected before each
run); the table shows the median and min-max in ms. Exit status 1 if a target is missed
and ``--check`` is given.

Usage: ``python bench/bench_assignors.py [--runs 11] [--members 1000] [--topics 100]
[--partitions 100] [--racks 0] [--hetero] [--check]``
"""

from __future__ import annotations

import argparse
import functools
import gc
import statistics
import sys
import time
from collections.abc import Callable

from results import record  # a sibling: bench/ is where this script runs from

from coordinator.group.consumer.assignors import BUILTIN_ASSIGNORS
from coordinator.group.consumer.assignors.spec import (
    Assignment,
    GroupSpec,
    MemberSpec,
    PartitionAssignor,
    SubscriptionType,
)

TARGET_MS = {"full": 100.0, "join": 10.0}


class Topics:
    def __init__(self, counts: dict[bytes, int], racks: int) -> None:
        self.counts = counts
        self.rack_names = [f"rack-{i}" for i in range(racks)]

    def num_partitions(self, topic_id: bytes) -> int:
        return self.counts.get(topic_id, -1)

    def racks_for_partition(self, topic_id: bytes, partition: int) -> frozenset[str]:
        if not self.rack_names:
            return frozenset()
        # Replication factor 2 over the racks, rotating with the partition.
        n = len(self.rack_names)
        k = (topic_id[0] + partition) % n
        return frozenset({self.rack_names[k], self.rack_names[(k + 1) % n]})


def build_spec(
    members: int,
    topic_ids: list[bytes],
    prev: dict[str, Assignment] | None,
    racks: int,
    hetero: bool,
    extra: str | None = None,
) -> GroupSpec:
    base = frozenset(topic_ids[:-1]) if hetero else frozenset(topic_ids)
    full = frozenset(topic_ids)
    specs: dict[str, MemberSpec] = {}
    ids = [f"member-{i:05d}" for i in range(members)]
    if extra is not None:
        ids.append(extra)
    for i, mid in enumerate(ids):
        subs = full if (not hetero or i % 2 == 0) else base
        specs[mid] = MemberSpec(
            subscribed_topic_ids=subs,
            assigned_partitions=(prev or {}).get(mid, {}),
            rack_id=f"rack-{i % racks}" if racks else None,
        )
    inverted: dict[bytes, dict[int, str]] = {}
    for mid, a in (prev or {}).items():
        for t, ps in a.items():
            inv = inverted.setdefault(t, {})
            for p in ps:
                inv[p] = mid
    kind = SubscriptionType.HETEROGENEOUS if hetero else SubscriptionType.HOMOGENEOUS
    return GroupSpec(members=specs, subscription_type=kind, inverted_target=inverted)


def time_ms(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--racks", type=int, default=0)
    ap.add_argument("--hetero", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()

    topic_ids = [bytes([i % 256, i // 256]) + bytes(14) for i in range(1, args.topics + 1)]
    topics = Topics(dict.fromkeys(topic_ids, args.partitions), args.racks)
    total = args.topics * args.partitions
    print(
        f"{args.members} members, {args.topics} topics x {args.partitions} partitions "
        f"= {total} partitions, racks={args.racks}, "
        f"{'heterogeneous' if args.hetero else 'homogeneous'}, median of {args.runs} runs"
    )
    print(f"{'assignor':<9} {'case':<6} {'median ms':>10} {'min-max ms':>16} {'target':>8}")
    missed = False
    for name, a in BUILTIN_ASSIGNORS.items():
        missed |= run_cases(name, a, args, topic_ids, topics)
    return 1 if (missed and args.check) else 0


def run_cases(
    name: str,
    a: PartitionAssignor,
    args: argparse.Namespace,
    topic_ids: list[bytes],
    topics: Topics,
) -> bool:
    missed = False
    empty = build_spec(args.members, topic_ids, None, args.racks, args.hetero)
    balanced = a.assign(empty, topics)
    joined = build_spec(args.members, topic_ids, balanced, args.racks, args.hetero, "newcomer")
    for case, spec in (("full", empty), ("join", joined)):
        ts = time_ms(functools.partial(a.assign, spec, topics), args.runs)
        med = statistics.median(ts)
        target = TARGET_MS[case]
        ok = med < target
        missed |= not ok
        print(
            f"{name:<9} {case:<6} {med:>10.2f} {min(ts):>7.2f}-{max(ts):<8.2f} "
            f"{'<' + str(int(target)):>6} {'ok' if ok else 'MISSED'}"
        )
        record("assignors", f"{name} {case}", med, "ms", "lower")
    if name == "uniform":
        got = a.assign(joined, topics)
        moved = sum(
            len(ps - got[m].get(t, frozenset()))
            for m, s in joined.members.items()
            for t, ps in s.assigned_partitions.items()
        )
        sizes = [sum(len(ps) for ps in x.values()) for x in got.values()]
        print(
            f"{'':<9} join moved {moved} partitions; sizes {min(sizes)}-{max(sizes)}; "
            f"newcomer {sum(len(ps) for ps in got['newcomer'].values())}"
        )
    return missed


if __name__ == "__main__":
    sys.exit(main())
