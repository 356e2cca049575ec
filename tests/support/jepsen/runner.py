"""One Jepsen-style run, and a matrix of them: topology, workload, nemesis, heal, final, check.

How this works. ``run_once(config)`` makes the run directory, writes ``run.json`` (seed,
configuration, the nemesis plan) before anything starts, brings up the topology, sets the
workload up, then runs the workload's threads and the nemesis side by side for
``duration`` s. Then it heals everything, waits until the cluster is ready again (the
recovery time is measured), lets the workload do its final reads, audits what PostgreSQL
holds (``audit.py``: no batch under an older lease epoch after a newer one), stops every
process, and checks the history (``history.jsonl``, written as it happens) with the workload's checker.
``result.json`` holds the verdict. A watchdog bounds the whole run at twice the planned
duration plus a fixed margin; cleanup runs in a ``finally``.

``python -m support.jepsen.runner`` (``scripts/jepsen``) runs a matrix: every workload x
fault set, each ``--duration`` s with seed ``--seed`` + its index, and prints the table
(mode, workload, faults, seconds, ops, anomalies), on ``--topology`` cluster (three nodes
and PostgreSQL) or embedded (one node on its local log, ``embedded.py``); ``--runs`` names
the runs instead (``topology/workload/faults,...``) and ``--parallel`` runs that many at once
(namespace mode gives each its own subnet). ``--replay DIR`` runs a directory's ``run.json``
again with the same seed and plan.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from support.jepsen.audit import audit
from support.jepsen.embedded import EmbeddedTopology, disk_unavailable
from support.jepsen.history import History, pair_ops, read_history
from support.jepsen.membership import Membership
from support.jepsen.nemesis import FAULT_SETS, Nemesis, heal_all, plan, usable
from support.jepsen.netns import NetnsTopology, Network, netem_available, sweep
from support.jepsen.netns import available as netns_unavailable
from support.jepsen.queue import Queue
from support.jepsen.registers import Registers
from support.jepsen.share import Share
from support.jepsen.topology import ProxyTopology, faketime_library
from support.jepsen.txn import Transactions
from support.jepsen.workload import Ctx, Workload

ROOT = Path(__file__).resolve().parents[3]
WORKLOADS = ("registers", "membership", "queue", "transactions", "share")


def make_workload(name: str) -> Workload:
    if name == "registers":
        return Registers()
    if name == "membership":
        return Membership()
    if name == "queue":
        return Queue()
    if name == "transactions":
        return Transactions()
    if name == "share":
        return Share()
    raise ValueError(f"unknown workload {name}")


@dataclass
class RunConfig:
    workload: str
    faults: str
    duration: float
    seed: int
    run_dir: Path
    nodes: int = 3
    session_timeout_ms: int = 3000
    heartbeat_interval_ms: int = 500
    mode: str = "proxy"
    net: int = 0  # namespace mode: the run's 10.213.<net>.0/24
    topology: str = "cluster"  # or "embedded": one node on its local log (embedded.py)


@dataclass
class RunResult:
    config: dict[str, Any]
    seconds: float = 0.0
    ops: int = 0
    anomalies: list[str] = field(default_factory=list)
    detail: list[str] = field(default_factory=list)
    faults_applied: int = 0
    nemesis_errors: list[str] = field(default_factory=list)
    recovery_s: float | None = None
    audit: list[str] = field(default_factory=list)
    audited_batches: int = 0
    error: str | None = None

    @property
    def valid(self) -> bool:
        return not self.anomalies and self.error is None

    def row(self) -> str:
        c = self.config
        verdict = ",".join(self.anomalies) or ("ERROR" if self.error else "none")
        return (
            f"{_mode(c):<9} {c['workload']:<12} {c['faults']:<8} {self.seconds:>7.1f} "
            f"{self.ops:>7} {self.faults_applied:>5}  {verdict}  seed={c['seed']}"
        )


def _mode(c: dict[str, Any]) -> str:
    return str(c["mode"]) + ("/emb" if c.get("topology") == "embedded" else "")


HEADER = (
    f"{'mode':<9} {'workload':<12} {'faults':<8} {'seconds':>7} {'ops':>7} {'acts':>5}  anomalies"
)


def _topology(config: RunConfig) -> ProxyTopology:
    kw = {
        "heartbeat_interval_ms": config.heartbeat_interval_ms,
        "session_timeout_ms": config.session_timeout_ms,
    }
    if config.topology == "embedded":
        net = Network(config.net) if config.mode == "netns" else None
        return EmbeddedTopology(config.run_dir, net, **kw)
    if config.mode == "netns":
        return NetnsTopology(config.run_dir, Network(config.net), **kw)
    return ProxyTopology(config.run_dir, config.nodes, **kw)


async def _run(config: RunConfig, result: RunResult) -> None:
    run_dir = config.run_dir
    faults = usable(FAULT_SETS[config.faults], config.mode, config.topology)
    if config.topology == "embedded" and disk_unavailable() is not None:
        raise RuntimeError(f"no disk for the embedded topology: {disk_unavailable()}")
    if config.mode == "netns" and not netem_available():
        faults = tuple(f for f in faults if f != "delay")  # no tc netem in this kernel
    if "clock" in faults and faketime_library() is None:
        subprocess.run([str(ROOT / "scripts" / "ensure-jepsen-tools")], check=False)
        if faketime_library() is None:
            faults = tuple(f for f in faults if f != "clock")  # no libfaketime here
    actions = plan(
        config.seed,
        faults,
        config.duration,
        session_ms=config.session_timeout_ms,
        nodes=1 if config.topology == "embedded" else config.nodes,
    )
    (run_dir / "run.json").write_text(
        json.dumps({"config": result.config, "plan": [asdict(a) for a in actions]}, indent=1)
    )
    topology = _topology(config)
    if "clock" in faults:
        topology.enable_clock_faults()
    history = History(run_dir / "history.jsonl")
    workload = make_workload(config.workload)
    try:
        await topology.start()
        ctx = Ctx(topology, history, random.Random(config.seed))
        await workload.setup(ctx)
        start = time.monotonic()
        ctx.deadline = start + config.duration
        nemesis = Nemesis(topology, history, actions)
        await asyncio.gather(workload.run(ctx), nemesis.run(start, ctx.deadline))
        result.faults_applied = nemesis.applied
        result.nemesis_errors = nemesis.errors
        healed = time.monotonic()
        await heal_all(topology)
        await topology.wait_ready(120)
        # wait_ready judges the live nodes only: one that exited after its restart (as a
        # node refused at registration did) would pass unseen.
        dead = [n for n in topology.node_ids if not topology.alive(n)]
        if dead:
            raise RuntimeError(f"node(s) {dead} exited after the heal (see their logs)")
        result.recovery_s = round(time.monotonic() - healed, 2)
        await workload.final(ctx)
        if not isinstance(topology, EmbeddedTopology):  # the lease audit reads PostgreSQL
            result.audit, result.audited_batches = await audit(topology.pg.url)
    finally:
        history.close()
        await topology.close()
    ops = pair_ops(read_history(run_dir / "history.jsonl"))
    verdict = await asyncio.to_thread(workload.check, ops)
    result.ops = verdict["ops"]
    result.anomalies = list(verdict["anomalies"])
    result.anomalies += sorted({f"fencing-{a.split()[0]}" for a in result.audit})
    result.detail = list(verdict["detail"]) + result.audit[:20]


async def run_once(config: RunConfig, margin: float = 300.0) -> RunResult:
    config.run_dir.mkdir(parents=True, exist_ok=True)
    cfg = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()}
    result = RunResult(cfg)
    began = time.monotonic()
    try:
        await asyncio.wait_for(_run(config, result), 2 * config.duration + margin)
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        result.detail.append(traceback.format_exc())
    result.seconds = round(time.monotonic() - began, 1)
    (config.run_dir / "result.json").write_text(json.dumps(asdict(result), indent=1))
    return result


def _network(config: RunConfig, attempts: int = 3) -> Network:
    """The run's network; on a failed ``ip`` (seen once with two runs creating theirs at the
    same moment) the half-made one is gone (``Network.create``) and another subnet is tried."""
    for attempt in range(attempts):
        try:
            return Network(config.net).create()
        except subprocess.CalledProcessError:
            if attempt == attempts - 1:
                raise
            config.net = 20 + (config.net + 97) % 200
    raise AssertionError("unreachable")


def run_in_namespaces(config: RunConfig) -> RunResult:
    """Mode N: make the network, run the harness inside its ``-cli`` namespace, destroy it."""
    sweep()
    config.run_dir.mkdir(parents=True, exist_ok=True)
    config.net = config.net or (os.getpid() % 200) + 20
    network = _network(config)
    saved = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()}
    (config.run_dir / "config.json").write_text(json.dumps(saved))
    inner = [sys.executable, "-m", "support.jepsen.runner", "--inner", str(config.run_dir)]
    try:
        subprocess.run(
            ["ip", "netns", "exec", network.ns("cli"), *inner],
            timeout=2 * config.duration + 400,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pass  # the run's own watchdog failed: its result says so, or there is none
    finally:
        network.destroy()
    try:
        saved_result = json.loads((config.run_dir / "result.json").read_text())
    except (OSError, ValueError):
        return RunResult(saved, error="the run inside the namespaces left no result")
    return RunResult(**saved_result)


def _inner(run_dir: Path) -> int:
    saved = json.loads((run_dir / "config.json").read_text())
    saved["run_dir"] = Path(saved["run_dir"])
    result = asyncio.run(run_once(RunConfig(**saved)))
    return 0 if result.valid else 1


def _one(config: RunConfig) -> RunResult:
    if config.mode == "netns":
        return run_in_namespaces(config)
    return asyncio.run(run_once(config))


def _run_all(configs: list[RunConfig], parallel: int) -> list[RunResult]:
    """Every run, ``parallel`` at once, each row printed as it ends; results in order."""
    from concurrent.futures import ThreadPoolExecutor

    def one(config: RunConfig) -> RunResult:
        r = _one(config)
        lines = [f"{r.row()} -> {config.run_dir}"]
        lines += ["    " + (d.splitlines()[-1] if r.error else d) for d in r.detail[:10]]
        print("\n".join(lines), flush=True)
        return r

    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(one, configs))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/jepsen", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help=",".join(WORKLOADS))
    ap.add_argument("--faults", default="process,db,net", help="of " + ",".join(FAULT_SETS))
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of faults per run")
    ap.add_argument("--seed", type=int, default=None, help="the first run's (random if absent)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/kgcj-runs"), help="run directories")
    ap.add_argument("--replay", type=Path, default=None, help="a run directory to run again")
    ap.add_argument(
        "--mode", choices=("proxy", "netns"), default="proxy", help="netns: as root, namespaces"
    )
    ap.add_argument(
        "--topology", choices=("cluster", "embedded"), default="cluster", help="of the matrix"
    )
    ap.add_argument(
        "--runs",
        default=None,
        help="instead of the matrix, runs as topology/workload/faults,... "
        "(e.g. embedded/queue/disk,cluster/registers/net)",
    )
    ap.add_argument("--parallel", type=int, default=1, help="runs at once (namespace mode)")
    ap.add_argument("--inner", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.inner is not None:
        return _inner(args.inner)
    if args.mode == "netns":
        subprocess.run([str(ROOT / "scripts" / "ensure-jepsen-tools")], check=False)
        why = netns_unavailable()
        if why is not None:
            print(f"namespace mode is not available here: {why}", file=sys.stderr)
            return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    configs: list[RunConfig] = []
    if args.replay is not None:
        saved = json.loads((args.replay / "run.json").read_text())["config"]
        saved["run_dir"] = args.replay.with_name(args.replay.name + "-replay")
        configs.append(RunConfig(**saved))
    else:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        runs: list[list[str]] = [
            [args.topology, w, f] for w in args.workloads.split(",") for f in args.faults.split(",")
        ]
        if args.runs:
            runs = [[*r.split("/"), "", ""][:3] for r in args.runs.split(",")]
        for i, (topo, w, f) in enumerate(runs):
            run_dir = args.dir / f"kgcj-{stamp}-{topo}-{w}-{f}-{seed + i}"
            configs.append(
                RunConfig(w, f, args.duration, seed + i, run_dir, mode=args.mode, topology=topo)
            )
            if args.mode == "netns":  # distinct subnets, so runs may overlap
                configs[-1].net = 20 + (os.getpid() + i) % 200
    print(HEADER, flush=True)
    results = _run_all(configs, max(1, args.parallel))
    print("\n" + HEADER)
    for r in results:
        print(r.row())
    return 0 if all(r.valid for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
