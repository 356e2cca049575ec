"""The group history's cost per commit, counted rather than timed (robust to a loaded machine).

How this works: ``bench_history_turn.py``'s runtime (the local engine, real segments, the
journal, real fsyncs) in ONE mode, history on or off, runs ``--turns`` turns of M commits of
P partitions each (every offset moved: each partition a history change), the next turn
once every reply is out. Run it under a counting tool twice, with N and 2N turns, and the
difference over N x M is that tool's count per commit with the start-up cancelled:

- ``valgrind --tool=cachegrind --cache-sim=no``: user-space instructions (``I refs``);
- ``strace -f -c``: system calls by name (the kernel's share: writes, fsyncs, wakeups);
- ``--profile``: Python calls per commit by function (``cProfile``'s call counts, exact).

``--compare`` does the arithmetic itself for the call counts and the system calls (strace
must be installed): it runs each mode twice and prints per-commit counts, off, on, and
the difference. ``PYTHONHASHSEED=0`` keeps the runs identical.

Usage: ``python bench/count_history_turn.py --history on|off [--turns 200] [--members 5]
[--partitions 10] [--profile FILE]``, or ``--compare [--turns 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import checkout  # noqa: F401  (puts this checkout and tests/ on the import path)
from bench_history_turn import request, runtime
from support.runtimekit import call


async def turns(history: bool, n: int, members: int, partitions: int, keep: bool = True) -> None:
    groups = [f"commit-{i}" for i in range(members)]
    with tempfile.TemporaryDirectory() as base:
        rt, flusher = await runtime(history, Path(base), keep)
        try:
            for offset in range(1, n + 1):
                await asyncio.gather(
                    *(call(rt, 8, 8, request(g, partitions, offset)) for g in groups)
                )
        finally:
            await flusher.stop()


def ablate(variant: str) -> None:
    """Take one part of the history's work out (to count what it costs): ``noappend``
    encodes the turn's value but appends nothing, ``noencode`` drops the turn's entries
    unencoded; ``core`` tracks changes in the core only (the runtime keeps no history)."""
    from coordinator.history import codec, store

    if variant == "noencode":
        store.encode = lambda now_ms, entries: b""  # type: ignore[assignment]
    if variant in ("noappend", "noencode"):

        def write(self: store.HistoryLog, now_ms: int, failed: set[int]) -> None:
            changes, self.pending = self.pending, []
            membership, self.pending_membership = self.pending_membership, []
            store.encode(now_ms, [*changes, *(m for _, m in membership)])

        store.HistoryLog.write = write  # type: ignore[assignment,method-assign]
    del codec


def run_one(args: argparse.Namespace) -> None:
    history = args.history == "on"
    if args.variant:
        ablate(args.variant)
    keep = args.variant != "core"
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        asyncio.run(turns(history, args.turns, args.members, args.partitions, keep))
        prof.disable()
        prof.dump_stats(args.profile)
    else:
        asyncio.run(turns(history, args.turns, args.members, args.partitions, keep))


def calls(path: str) -> Counter[str]:
    stats = pstats.Stats(path).stats  # type: ignore[attr-defined]
    out: Counter[str] = Counter()
    for (file, line, name), (_cc, nc, *_rest) in stats.items():
        short = file.split("/wt/histcpu/")[-1].split("site-packages/")[-1]
        out[f"{short}:{line}({name})"] += nc
    return out


def syscalls(out: str) -> Counter[str]:
    found: Counter[str] = Counter()
    for line in out.splitlines():
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
        if m:
            found[m.group(2)] += int(m.group(1))
    return found


def child(mode: str, n: int, args: argparse.Namespace, extra: list[str]) -> list[str]:
    return [
        *extra,
        sys.executable,
        __file__,
        "--history",
        mode,
        "--turns",
        str(n),
        "--members",
        str(args.members),
        "--partitions",
        str(args.partitions),
    ]


def compare(args: argparse.Namespace) -> None:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    commits = args.turns * args.members
    per: dict[str, tuple[Counter[str], Counter[str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("off", "on"):
            got: list[tuple[Counter[str], Counter[str]]] = []
            for n in (args.turns, 2 * args.turns):
                prof = f"{tmp}/{mode}-{n}.prof"
                subprocess.run([*child(mode, n, args, []), "--profile", prof], env=env, check=True)
                subprocess.run(
                    child(mode, n, args, ["strace", "-f", "-c", "-o", f"{tmp}/{mode}-{n}.st"]),
                    env=env,
                    check=True,
                )
                got.append((calls(prof), syscalls(Path(f"{tmp}/{mode}-{n}.st").read_text())))
            (c1, s1), (c2, s2) = got
            c2.subtract(c1)
            s2.subtract(s1)
            per[mode] = (c2, s2)
    (c_off, s_off), (c_on, s_on) = per["off"], per["on"]
    print(f"per commit ({args.members} commits of {args.partitions} partitions a turn)")
    print(f"\n{'system call':<24} {'off':>8} {'on':>8} {'diff':>8}")
    for name in sorted(set(s_off) | set(s_on), key=lambda k: -(s_on[k] - s_off[k])):
        off, on = s_off[name] / commits, s_on[name] / commits
        if abs(on) >= 0.01 or abs(off) >= 0.01:
            print(f"{name:<24} {off:>8.2f} {on:>8.2f} {on - off:>+8.2f}")
    print(f"\n{'Python function (calls added per commit)':<90} {'off':>7} {'on':>7}")
    total_off = sum(c_off.values()) / commits
    total_on = sum(c_on.values()) / commits
    diff = {k: (c_on[k] - c_off[k]) / commits for k in set(c_off) | set(c_on)}
    for name, d in sorted(diff.items(), key=lambda kv: -abs(kv[1])):
        if abs(d) < 0.05:
            break
        print(f"{name[-90:]:<90} {c_off[name] / commits:>7.2f} {c_on[name] / commits:>7.2f}")
    print(f"{'all calls':<90} {total_off:>7.1f} {total_on:>7.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--history", choices=("on", "off"))
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--profile", help="write cProfile stats here")
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--variant", choices=("noappend", "noencode", "core"))
    args = ap.parse_args()
    if args.compare:
        compare(args)
    elif args.history:
        run_one(args)
    else:
        ap.error("--history on|off or --compare")


if __name__ == "__main__":
    main()
