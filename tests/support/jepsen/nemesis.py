"""The nemesis: a seeded, replayable schedule of faults, applied to a topology and healed.

How this works. ``plan(seed, faults, duration, session_ms, nodes)`` draws the whole schedule
up front from ``random.Random(seed)``, so a printed seed replays the same faults at the same
times: ``warmup`` s without faults, then periods of ``period`` s; one period in four is
quiet, the others pick a non-empty subset of the allowed fault kinds and, inside the
period, one fault after another (never two at once, so the cluster always has a way back),
each with its target, its parameters and how long it lasts before it is healed. The last
``quiet`` s of the run have no fault.

Fault kinds (``FAULTS``), by role:
- node: ``kill`` (SIGKILL, restarted after the duration), ``pause`` (SIGSTOP past the broker
  session timeout, then SIGCONT: the zombie owner wakes up);
- PostgreSQL: ``pg-kill`` (``pg_ctl stop -m immediate``, started again after the duration),
  ``pg-pause`` (SIGSTOP of the postmaster and every backend), ``pg-terminate``
  (``pg_terminate_backend`` of every kgc session, instant);
- links, through the proxies: ``link-db`` (node n cut from PostgreSQL: drop, black-hole or
  reset), ``link-client`` (clients cut from node n), ``split`` (a minority of one node cut
  from both PostgreSQL and the clients, the majority untouched), ``delay`` (every link of one
  node, or of all, delayed);
- clock: ``clock`` (one node's wall clock jumped by -120 s to +1 h through libfaketime, the
  monotonic clock left true; back to true when healed);
- ``link-node``: node n cut from every other node (iptables DROP both ways in its
  namespace; clients and PostgreSQL still reach it), namespace mode only: in proxy mode the
  nodes reach each other through the client proxies;
- packet loss: ``loss`` (every link of one node, or of all, drops packets at random with
  probability 5 %, 20 % or 50 %: iptables ``statistic``, namespace mode only);
- the embedded engine's disk (``embedded.py``): ``disk-full`` (the node's filesystem filled
  to the last block, freed when healed), ``torn`` (kill -9, torn tails appended past the end
  of its journal and segments, restarted after the duration).

``usable(faults, mode, topology)`` leaves out what a topology cannot do: the embedded one has
no PostgreSQL, no database links and no minority to split off; only namespace mode drops
packets (a TCP proxy cannot lose one); the disk faults need the embedded engine.

``Nemesis.run`` applies the plan against the run's clock (after a restart it waits, bounded,
until the cluster serves again and moves the rest of the plan by that long), records each fault in the history
as one op of process ``NEMESIS`` (invoke when it starts, ``info`` when healed) and stops at
the run's end; ``heal_all`` then undoes whatever is left (links pass, SIGCONT, PostgreSQL and
every node running) before the final reads.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from support.jepsen.embedded import EmbeddedTopology
from support.jepsen.history import History
from support.jepsen.netns import LOSS
from support.jepsen.proxy import BLACKHOLE, DELAY, DROP, PASS, RESET
from support.jepsen.topology import ProxyTopology

NEMESIS = -1

FAULTS = (
    "kill",
    "pause",
    "pg-kill",
    "pg-pause",
    "pg-terminate",
    "link-db",
    "link-client",
    "split",
    "delay",
    "clock",
    "loss",
    "link-node",
    "disk-full",
    "torn",
)
FAULT_SETS: dict[str, tuple[str, ...]] = {
    "none": (),
    "process": ("kill", "pause"),
    "db": ("pg-kill", "pg-pause", "pg-terminate", "link-db"),
    "net": ("link-db", "link-client", "split", "delay", "loss", "link-node"),
    "disk": ("disk-full", "torn", "kill", "pause"),
    "clock": ("clock",),
    "all": FAULTS,
}


@dataclass
class Action:
    at: float  # seconds after the run's start
    fault: str
    target: int | None  # a node id, or None (PostgreSQL, or every node)
    duration: float
    params: dict[str, Any] = field(default_factory=dict)


def _draw(rng: random.Random, fault: str, nodes: list[int], session_s: float) -> Action:
    node = rng.choice(nodes)
    if fault == "kill":
        return Action(0, fault, node, rng.uniform(1, 5))
    if fault == "pause":
        return Action(0, fault, node, rng.uniform(1.2, 2.0) * session_s)
    if fault == "pg-kill":
        return Action(0, fault, None, rng.uniform(2, 8))
    if fault == "pg-pause":
        return Action(0, fault, None, rng.uniform(0.5, 2.0) * session_s)
    if fault == "pg-terminate":
        return Action(0, fault, None, 0.0)
    if fault in ("link-db", "link-client"):
        mode = rng.choice((DROP, BLACKHOLE, RESET))
        return Action(0, fault, node, rng.uniform(0.5, 2.0) * session_s, {"mode": mode})
    if fault == "split":
        return Action(0, fault, node, rng.uniform(1.2, 2.0) * session_s, {"mode": DROP})
    if fault == "delay":
        target = node if rng.random() < 0.5 else None
        ms = rng.choice((20, 50, 100, 300))
        return Action(0, fault, target, rng.uniform(3, 8), {"delay_ms": ms})
    if fault == "clock":
        offset = rng.choice(("+30", "-30", "+300", "-120", "+3600"))
        return Action(0, fault, node, rng.uniform(5, 15), {"offset": offset})
    if fault == "loss":
        target = node if rng.random() < 0.5 else None
        p = rng.choice((0.05, 0.2, 0.5))
        return Action(0, fault, target, rng.uniform(3, 10), {"probability": p})
    if fault == "link-node":
        mode = rng.choice((DROP, RESET))
        return Action(0, fault, node, rng.uniform(0.5, 2.0) * session_s, {"mode": mode})
    if fault == "disk-full":
        return Action(0, fault, node, rng.uniform(2, 10))
    if fault == "torn":
        return Action(0, fault, node, rng.uniform(0.5, 3), {"seed": rng.randrange(2**31)})
    raise ValueError(f"unknown fault {fault}")


RESTARTS = frozenset({"kill", "pause", "torn", "pg-kill"})
CLUSTER_ONLY = frozenset({"pg-kill", "pg-pause", "pg-terminate", "link-db", "split", "link-node"})
EMBEDDED_ONLY = frozenset({"disk-full", "torn"})


def usable(faults: tuple[str, ...], mode: str, topology: str) -> tuple[str, ...]:
    """The faults of ``faults`` that a ``topology`` ("cluster"/"embedded") in ``mode`` has."""
    out = []
    for f in faults:
        if topology == "embedded" and f in CLUSTER_ONLY:
            continue
        if topology != "embedded" and f in EMBEDDED_ONLY:
            continue
        if mode != "netns" and f in ("loss", "link-node"):
            continue
        out.append(f)
    return tuple(out)


def plan(
    seed: int,
    faults: tuple[str, ...],
    duration: float,
    *,
    session_ms: int = 3000,
    nodes: int = 3,
    warmup: float = 5.0,
    period: float = 20.0,
    quiet: float = 5.0,
) -> list[Action]:
    """The schedule for a run, the same for the same arguments."""
    rng = random.Random(seed)
    node_ids = list(range(1, nodes + 1))
    actions: list[Action] = []
    end = duration - quiet
    t = warmup
    free = warmup  # when the last fault is healed
    while t < end and faults:
        period_end = min(t + period, end)
        if rng.random() >= 0.25:
            kinds = rng.sample(faults, rng.randint(1, len(faults)))
            at = max(t, free) + rng.uniform(0.5, 3.0)
            while at < period_end:
                action = _draw(rng, rng.choice(kinds), node_ids, session_ms / 1000)
                action.at = round(at, 3)
                action.duration = round(min(action.duration, max(end - action.at, 0.0)), 3)
                actions.append(action)
                free = action.at + action.duration
                at = free + rng.uniform(1.0, 4.0)
        t = period_end
    return actions


class Nemesis:
    def __init__(self, topology: ProxyTopology, history: History, actions: list[Action]) -> None:
        self.topology = topology
        self.history = history
        self.actions = actions
        self.applied = 0
        self.errors: list[str] = []

    async def run(self, start: float, stop: float) -> None:
        """Apply the plan against the run clock (``time.monotonic()``), up to ``stop``."""
        lag = 0.0  # how far the plan has slipped behind restarts that took longer
        for action in self.actions:
            wait = start + action.at + lag - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if time.monotonic() >= stop:
                return
            self.history.invoke(NEMESIS, action.fault, None, asdict(action))
            try:
                await self.begin(action)
                await asyncio.sleep(min(action.duration, max(stop - time.monotonic(), 0)))
                await self.end(action)
            except Exception as exc:  # recorded; heal_all tries again at the end
                self.errors.append(f"{action}: {type(exc).__name__}: {exc}")
            self.history.info(NEMESIS, {"healed": action.fault})
            self.applied += 1
            if action.fault in RESTARTS:
                lag += await self._settle(stop)

    async def _settle(self, stop: float) -> float:
        """After a restart, wait (bounded) until the cluster serves again, so the next fault
        hits a running system rather than one still starting (a loaded machine can take
        tens of seconds); the plan's later faults move by as long as this took."""
        began = time.monotonic()
        try:
            await asyncio.wait_for(self.topology.wait_ready(60), max(stop - began, 0.1))
        except (AssertionError, TimeoutError, OSError) as exc:
            self.errors.append(f"not ready after a restart: {type(exc).__name__}: {exc}"[:300])
        return time.monotonic() - began

    def _links(self, action: Action) -> list[Any]:
        t = self.topology
        n = action.target
        if action.fault == "link-db":
            return [t.db[n]] if n in t.db else []
        if action.fault == "link-client":
            return [t.client[n]] if n in t.client else []
        if action.fault == "link-node":
            peers: dict[tuple[int, int], Any] = getattr(t, "peer", {})
            return [link for (a, b), link in peers.items() if n in (a, b)]
        if n is not None:  # split, or delay / loss of one node
            return [link for link in (t.db.get(n), t.client.get(n)) if link is not None]
        return [*t.db.values(), *t.client.values()]

    async def begin(self, action: Action) -> None:
        t = self.topology
        f = action.fault
        if f == "kill" and action.target is not None:
            t.kill(action.target)
        elif f == "pause" and action.target is not None:
            t.pause(action.target)
        elif f == "pg-kill":
            await t.stop_pg()
        elif f == "pg-pause":
            t.pause_pg()
        elif f == "pg-terminate":
            action.params["terminated"] = await t.terminate_sessions()
        elif f == "clock" and action.target is not None:
            t.set_clock(action.target, action.params["offset"])
        elif f == "delay":
            for link in self._links(action):
                link.set_mode(DELAY, action.params["delay_ms"])
        elif f == "loss":
            for link in self._links(action):
                link.set_mode(LOSS, action.params["probability"])
        elif f == "disk-full" and isinstance(t, EmbeddedTopology):
            action.params["filled"] = await asyncio.to_thread(t.fill_disk)
        elif f == "torn" and isinstance(t, EmbeddedTopology):
            rng = random.Random(action.params["seed"])
            action.params["torn"] = await asyncio.to_thread(t.tear, rng)
        else:
            for link in self._links(action):
                link.set_mode(action.params["mode"])

    async def end(self, action: Action) -> None:
        t = self.topology
        f = action.fault
        if f == "kill" and action.target is not None:
            if not t.alive(action.target):
                await t.start_node(action.target)
        elif f == "pause" and action.target is not None:
            t.resume(action.target)
        elif f == "pg-kill":
            await t.start_pg()
        elif f == "pg-pause":
            t.resume_pg()
        elif f == "clock" and action.target is not None:
            t.set_clock(action.target, "+0")
        elif f == "disk-full" and isinstance(t, EmbeddedTopology):
            t.free_disk()
        elif f == "torn" and action.target is not None:
            if not t.alive(action.target):
                await t.start_node(action.target)
        elif f != "pg-terminate":
            for link in self._links(action):
                link.set_mode(PASS)


async def heal_all(topology: ProxyTopology) -> None:
    """Every link passes, nothing is paused, PostgreSQL and every node run."""
    peers: dict[tuple[int, int], Any] = getattr(topology, "peer", {})
    for link in [*topology.db.values(), *topology.client.values(), *peers.values()]:
        link.set_mode(PASS)
    topology.resume_pg()
    await topology.start_pg()
    if isinstance(topology, EmbeddedTopology):
        topology.free_disk()
    if topology.faketime is not None:
        for n in topology.node_ids:
            topology.set_clock(n, "+0")
    for n in topology.node_ids:
        topology.resume(n)
        if not topology.alive(n):
            await topology.start_node(n)
