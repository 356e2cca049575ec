"""The regression check: every other benchmark under bench/, before and after, alternately.

How this works
--------------
Two kgc trees (``--tree NAME=PATH[:PYTHON]``, as in bench_peer; ``bench/trees.py`` prepares
an old revision or the compiled venv) are compared with the *current* benchmark scripts, so
both sides are measured by the same harness. For each tree a harness directory
(``/tmp/kgc-trees/harness-<name>``) holds a copy of this checkout's ``bench/*.py`` and
``tests/support/*.py`` (the helpers the benchmarks import: kgc_process, pgserver, groupkit,
certkit, ... -- not the test folders, so ``tests/storage`` shadows nothing) and symlinks
``coordinator``, ``storage`` and ``protocol`` to the tree's (none for a ``:PYTHON`` tree:
its site-packages hold kgc). A benchmark runs as ``PYTHON harness/bench/<bench>.py`` with
cwd = the harness and PYTHONPATH = the harness alone, so both the benchmark's in-process
code and every ``python -m coordinator serve`` it starts are the tree's: checked before the
first run by importing kgc there and refusing modules from anywhere else. When the tree's
``kgc serve`` knows a flag only by its older name (``--log-level`` before ``--kgc-log-level``),
the harness's ``sitecustomize.py`` renames it in ``sys.argv`` of ``python -m coordinator
serve`` (only there; see ``trees.RENAMED``).

Each benchmark records its headline figures through ``bench/results.py`` into the file
named by ``KGC_BENCH_RESULTS``. For each round (``--rounds``), each benchmark runs on both
trees back to back, the order alternating by round (so drifting background load hits both
sides). The table gives, per figure, the median of each side over the rounds, the ratio
after/before, and a flag: ``WORSE`` when the after side is worse by more than
``--threshold`` (10%) *and* beyond the noise -- every after round worse than every before
round (with one round the threshold alone decides, marked ``(1 round)``); ``worse?`` when
worse by more than the threshold but within the rounds' spread. Every round's value is
listed. A benchmark that fails is listed with its log's tail and makes the exit status 1.

Not run (printed with the reason): bench_peer (its own interleaved before/after run:
``bench_peer.py --tree ...``), bench_audit (Spark: a JVM and minutes per run; the audit
reads the logs offline, off the server's paths), bench_cluster (three kgc nodes, failover
and a 1M-record load on PostgreSQL: many minutes; its commit path, the PostgreSQL journal,
is measured by bench_pg_journal), bench_fsync (the disk's latency, not kgc's), and the
tools (loadgen, peerload, aioclient, profile_commit, flamegraph, trees, results, checkout).

Sizes are small (the whole run ~20-25 min with 3 rounds on 2 shared cores): the figures
find regressions, they are not the benchmarks' headline sizes. ``--scale smoke`` is a
tooling check of a minute or two per tree.

Run: ``python bench/regress.py --tree before=PATH --tree after=PATH[:PYTHON] [--rounds 3]
[--benches codec,commit,...] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from results import ENV
from trees import RENAMED, ROOT, TREES, Tree

# bench name -> (script, args at the regress scale, args at the smoke scale)
BENCHES: dict[str, tuple[str, list[str], list[str]]] = {
    "codec": ("bench_codec.py", ["--runs", "5", "--run-time", "0.1"], ["--runs", "2", "--run-time", "0.02"]),
    "storage_load": (
        "bench_storage_load.py",
        ["--records", "300000", "--groups", "3000"],
        ["--records", "20000", "--groups", "200"],
    ),
    "assignors": ("bench_assignors.py", ["--runs", "5"], ["--runs", "1", "--members", "50", "--topics", "5", "--partitions", "10"]),
    "server": ("bench_server.py", ["--seconds", "3"], ["--seconds", "0.5"]),
    "groups": (
        "bench_groups.py",
        ["--sizes", "10,100", "--repeats", "2", "--seconds", "2", "--churn-seconds", "0"],
        ["--sizes", "5", "--groups", "5", "--per-group", "2", "--connections", "4", "--repeats", "1", "--seconds", "0.5", "--churn-seconds", "0"],
    ),
    "commit": (
        "bench_commit.py",
        ["--members", "50", "--seconds", "2", "--records", "200000", "--groups", "2000"],
        ["--members", "5", "--seconds", "0.5", "--records", "5000", "--groups", "50"],
    ),
    "dataplane": (
        "bench_dataplane.py",
        ["--messages", "20000", "--targets", "kgc-batch"],
        ["--messages", "2000", "--targets", "kgc-batch"],
    ),
    "consumer_groups": (
        "bench_consumer_groups.py",
        ["--quick"],
        ["--quick", "--groups", "2", "--join-members", "5", "--join-partitions", "10", "--seconds", "0.5"],
    ),
    "recovery": (
        "bench_recovery.py",
        ["--groups", "50", "--rounds", "12", "--records", "2000", "--repeat", "1"],
        ["--groups", "5", "--rounds", "12", "--records", "100", "--repeat", "1"],
    ),
    "security": (
        "bench_security.py",
        ["--groups", "10", "--per-group", "10", "--connections", "20", "--rounds", "1", "--seconds", "2", "--conn-seconds", "2", "--conn-workers", "8", "--acls", "200"],
        ["--groups", "2", "--per-group", "2", "--connections", "4", "--rounds", "1", "--seconds", "0.5", "--conn-seconds", "0.5", "--conn-workers", "2", "--acls", "20"],
    ),
    "pg_journal": (
        "bench_pg_journal.py",
        ["--appenders", "1,20", "--seconds", "2"],
        ["--appenders", "1", "--seconds", "0.5"],
    ),
}  # fmt: skip
SKIPPED = {
    "bench_peer": "its own interleaved before/after run (bench_peer.py --tree NAME=PATH, targets kgc@NAME)",
    "bench_audit": "Spark (a JVM, minutes per run); the audit reads the logs offline, off the server's paths",
    "bench_cluster": "3 kgc nodes, failover and a 1M-record load on PostgreSQL (many minutes); its commit path, the PostgreSQL journal, is bench_pg_journal's",
    "bench_fsync": "the disk's write + fdatasync latency, not kgc's (the same for every tree)",
}  # fmt: skip


def harness(tree: Tree) -> tuple[Path, dict[str, str]]:
    """The harness directory of ``tree`` (see the module docstring) and its environment."""
    h = TREES / f"harness-{tree.name}"
    if h.exists():
        shutil.rmtree(h)
    (h / "bench").mkdir(parents=True)
    (h / "tests" / "support").mkdir(parents=True)
    for f in (ROOT / "bench").glob("*.py"):
        shutil.copy2(f, h / "bench" / f.name)
    for f in (ROOT / "tests" / "support").glob("*.py"):
        shutil.copy2(f, h / "tests" / "support" / f.name)
    if tree.path is not None:
        for package in ("coordinator", "storage", "protocol"):
            (h / package).symlink_to(tree.path / package, target_is_directory=True)
    renames = {
        new: old
        for new, old in RENAMED.items()
        if new not in tree.serve_flags and old in tree.serve_flags
    }
    if renames:
        (h / "sitecustomize.py").write_text(
            f'"""regress.py harness of tree {tree.name}: its kgc serve knows these flags by\n'
            'their older names; renamed in `python -m coordinator serve` only."""\n\n'
            "import sys\n\n"
            f"RENAMED = {renames!r}\n"
            'if sys.argv[:2] == ["-m", "serve"]:\n'
            "    sys.argv[:] = [RENAMED.get(a, a) for a in sys.argv]\n"
        )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", ENV)}
    env.update(PYTHONPATH=str(h), PYTHONNOUSERSITE="1", PYTHONUNBUFFERED="1")
    return h, env


@dataclass
class Run:
    bench: str
    tree: str
    round: int
    seconds: float
    ok: bool
    log: Path
    figures: list[dict[str, Any]]


def run_bench(
    bench: str,
    tree: Tree,
    rnd: int,
    home: Path,
    env: dict[str, str],
    args: argparse.Namespace,
    logs: Path,
) -> Run:
    script, regress_args, smoke_args = BENCHES[bench]
    out = logs / f"r{rnd}-{bench}-{tree.name}.jsonl"
    log = logs / f"r{rnd}-{bench}-{tree.name}.log"
    out.unlink(missing_ok=True)
    cmd = [tree.python, str(home / "bench" / script)]
    cmd += smoke_args if args.scale == "smoke" else regress_args
    t = time.monotonic()
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n\n")
        f.flush()
        try:
            r = subprocess.run(
                cmd,
                cwd=home,
                env={**env, ENV: str(out)},
                stdout=f,
                stderr=subprocess.STDOUT,
                timeout=args.timeout,
            )
            ok = r.returncode == 0
        except subprocess.TimeoutExpired:
            f.write(f"\nregress: timed out after {args.timeout:g} s\n")
            ok = False
    figures = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    if not figures:
        ok = False
    return Run(bench, tree.name, rnd, time.monotonic() - t, ok, log, figures)


def verdict(
    before: list[float], after: list[float], better: str, threshold: float
) -> tuple[float, str]:
    """(after/before of the medians, flag)."""
    b, a = statistics.median(before), statistics.median(after)
    if b == 0 or a != a or b != b:
        return float("nan"), ""
    r = a / b
    worse = r < 1 - threshold if better == "higher" else r > 1 + threshold
    if not worse:
        return r, ""
    if len(before) < 2 or len(after) < 2:
        return r, "WORSE (1 round)"
    beyond = max(after) < min(before) if better == "higher" else min(after) > max(before)
    return r, "WORSE" if beyond else "worse?"


def table(runs: list[Run], before: str, after: str, threshold: float) -> str:
    values: dict[tuple[str, str], dict[str, list[float]]] = {}
    meta: dict[tuple[str, str], tuple[str, str]] = {}
    for run in runs:
        for fig in run.figures:
            key = (run.bench, fig["measure"])
            values.setdefault(key, {}).setdefault(run.tree, []).append(float(fig["value"]))
            meta[key] = (fig["unit"], fig["better"])
    out = [
        f"| bench | measure | unit | {before} | {after} | {after}/{before} | flag | every round ({before}; {after}) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (bench, measure), by_tree in values.items():
        unit, better = meta[(bench, measure)]
        b, a = by_tree.get(before, []), by_tree.get(after, [])
        if not b or not a:
            cells = [
                f"{statistics.median(b):.4g}" if b else "—",
                f"{statistics.median(a):.4g}" if a else "—",
                "n/a",
                "missing",
            ]
        else:
            r, flag = verdict(b, a, better, threshold)
            cells = [
                f"{statistics.median(b):.4g}",
                f"{statistics.median(a):.4g}",
                f"{r:.2f}",
                flag,
            ]
        rounds = ", ".join(f"{v:.4g}" for v in b) + "; " + ", ".join(f"{v:.4g}" for v in a)
        arrow = "↑" if better == "higher" else "↓"
        out.append(
            f"| {bench} | {measure} | {unit} ({arrow} better) | "
            + " | ".join(cells)
            + f" | {rounds} |"
        )
    return "\n".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH[:PYTHON]")
    ap.add_argument("--before", help="the tree compared against (default: the first --tree)")
    ap.add_argument("--after", help="the tree under test (default: the second --tree)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--benches", default=",".join(BENCHES), help="comma-separated")
    ap.add_argument("--scale", choices=["regress", "smoke"], default="regress")
    ap.add_argument("--threshold", type=float, default=0.10, help="worse by more than this")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per benchmark run")
    ap.add_argument("--logs", type=Path, default=TREES / "regress-logs")
    ap.add_argument("--json", type=Path, help="save every run's figures here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    trees = {t.name: t for t in map(Tree.parse, args.tree)}
    names = list(trees)
    if len(names) < 2 and not (args.before and args.after):
        raise SystemExit("give two trees: --tree before=PATH --tree after=PATH[:PYTHON]")
    before = args.before or names[0]
    after = args.after or names[1]
    for n in (before, after):
        if n not in trees:
            raise SystemExit(f"no --tree {n}=...")
    benches = [b for b in args.benches.split(",") if b]
    for b in benches:
        if b not in BENCHES:
            raise SystemExit(f"unknown bench {b!r} ({', '.join(BENCHES)})")
    for name, why in SKIPPED.items():
        print(f"not run: {name}: {why}")
    homes: dict[str, tuple[Path, dict[str, str]]] = {}
    for n in (before, after):
        home, env = harness(trees[n])
        homes[n] = (home, env)
        print(trees[n].check(home, env).replace(f"tree {n}:", f"tree {n} (harness {home}):"))
    args.logs.mkdir(parents=True, exist_ok=True)
    print(
        f"regress: {', '.join(benches)}; {args.rounds} rounds, {before} and {after} alternately "
        f"({args.scale} sizes); logs in {args.logs}",
        flush=True,
    )
    runs: list[Run] = []
    for rnd in range(1, args.rounds + 1):
        order = [before, after] if rnd % 2 else [after, before]
        for bench in benches:
            for n in order:
                home, env = homes[n]
                run = run_bench(bench, trees[n], rnd, home, env, args, args.logs)
                runs.append(run)
                status = "ok" if run.ok else f"FAILED (log: {run.log})"
                print(
                    f"round {rnd}/{args.rounds} {bench:<16} {n:<10} {run.seconds:6.1f} s, "
                    f"{len(run.figures)} figures, {status}",
                    flush=True,
                )
    print(f"\n## Regression check: medians of {args.rounds} rounds, {after} against {before}\n")
    print(table(runs, before, after, args.threshold))
    failed = [r for r in runs if not r.ok]
    for r in failed:
        tail = r.log.read_text(errors="replace")[-2000:]
        print(f"\n--- failed: {r.bench} on {r.tree}, round {r.round} ({r.log}) ---\n{tail}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "argv": sys.argv,
                    "before": before,
                    "after": after,
                    "trees": {n: [str(t.path), t.python] for n, t in trees.items()},
                    "runs": [
                        {
                            "bench": r.bench,
                            "tree": r.tree,
                            "round": r.round,
                            "seconds": r.seconds,
                            "ok": r.ok,
                            "log": str(r.log),
                            "figures": r.figures,
                        }
                        for r in runs
                    ],
                },
                indent=1,
            )
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
