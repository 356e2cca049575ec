"""Namespace mode (root): every node, PostgreSQL and the harness in a network namespace of its own.

How this works. ``Network(r)`` builds, with ``ip`` only, the namespaces ``kgcj-<r>-sw`` (a
bridge, no address), ``-pg``, ``-n1``..``-n3`` and ``-cli``, each joined to the bridge by a
veth pair, with the addresses 10.213.<r>.2 (PostgreSQL), .11-.13 (nodes) and .100 (the
harness). No namespace has a route beyond that /24, nothing is added to the root namespace
but the namespace handles, and the subnet is refused if the root namespace routes it.
``Network.destroy`` deletes the namespaces (their veths, iptables rules and qdiscs go with
them); ``sweep`` deletes those of earlier runs whose harness is gone (each run records its
pid in ``/run/kgcj/<r>``), so a crashed harness leaves nothing behind for long.

``NetnsTopology`` is ``ProxyTopology``'s interface in this network: the harness process runs
inside ``-cli`` (``runner`` re-executes itself there with ``ip netns exec``), PostgreSQL
inside ``-pg`` (``pg_hba`` trusting the run's /24), node n inside ``-n<n>`` listening on
10.213.<r>.1n:9092 and advertising it. ``client[n]``, ``db[n]`` and ``peer[(n, m)]`` (node n
to node m: the inter-broker channel, ``coordinator/cluster/peers.py``) are ``IptablesLink``s
with the proxies' ``set_mode``: ``drop``/``blackhole`` are iptables DROP rules in node n's
namespace for the peer's address (client .100, PostgreSQL .2), ``reset`` answers TCP with
RST, ``loss`` drops each packet at random with a probability (iptables ``-m statistic --mode
random``: loss needs no tc netem), ``pass`` removes them; ``delay`` needs tc netem
(``sch_netem``), probed once, and the nemesis leaves delays out where the kernel lacks it
(this machine's kernel has none: delay is tested through proxy mode only).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

from support.jepsen.proxy import DELAY, MODES, PASS, RESET
from support.jepsen.topology import (
    SHARE_FLAGS,
    JepsenNode,
    ProxiedCluster,
    ProxyTopology,
    _die_with_parent,
)
from support.kgc_process import KgcProcess
from support.pgserver import PgServer

PREFIX = "kgcj-"
RUNS = Path("/run/kgcj")
NODE_PORT = 9092
PG_PORT = 5432
LOSS = "loss"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=30)


def in_ns(ns: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", ns, *cmd], check=check, capture_output=True, text=True, timeout=30
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _ns_pids(ns: str) -> list[int]:
    out = _ip("netns", "pids", ns, check=False).stdout
    return [int(x) for x in out.split()]


def available() -> str | None:
    """Why namespace mode cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root"
    probe = f"{PREFIX}probe-{os.getpid()}"
    if _ip("netns", "add", probe, check=False).returncode != 0:
        return "ip netns add failed"
    try:
        if in_ns(probe, "iptables", "-S", check=False).returncode != 0:
            return "no iptables (scripts/ensure-jepsen-tools)"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def netem_available() -> bool:
    probe = f"{PREFIX}netem-{os.getpid()}"
    _ip("netns", "add", probe, check=False)
    try:
        in_ns(probe, "ip", "link", "set", "lo", "up", check=False)
        qdisc = ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]
        return in_ns(probe, *qdisc, check=False).returncode == 0
    finally:
        _ip("netns", "del", probe, check=False)


def sweep() -> list[str]:
    """Delete the namespaces of runs whose harness process is gone; their processes first."""
    removed = []
    owners: dict[str, int] = {}
    if RUNS.is_dir():
        for f in RUNS.iterdir():
            with contextlib.suppress(ValueError, OSError):
                owners[f.name] = int(f.read_text())
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        ns = line.split()[0] if line.split() else ""
        if not ns.startswith(PREFIX):
            continue
        run = ns[len(PREFIX) :].split("-")[0]
        owner = owners.get(run)
        if owner is not None and _alive(owner):
            continue
        for pid in _ns_pids(ns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        _ip("netns", "del", ns, check=False)
        removed.append(ns)
    for run, owner in owners.items():
        if not _alive(owner):
            with contextlib.suppress(OSError):
                (RUNS / run).unlink()
    return removed


class Network:
    ROLES = ("pg", "n1", "n2", "n3", "cli")

    def __init__(self, r: int) -> None:
        if not 1 <= r <= 254:
            raise ValueError("r is the third byte of 10.213.r.0/24")
        self.r = r
        self.subnet = f"10.213.{r}."

    def ns(self, role: str) -> str:
        return f"{PREFIX}{self.r}-{role}"

    def ip_of(self, role: str) -> str:
        last = {"pg": 2, "cli": 100}.get(role) or 10 + int(role[1:])
        return f"{self.subnet}{last}"

    def create(self) -> Network:
        if self.subnet in _ip("route", "show", check=False).stdout:
            raise RuntimeError(f"{self.subnet}0/24 is routed in the root namespace: pick another r")
        RUNS.mkdir(parents=True, exist_ok=True)
        (RUNS / str(self.r)).write_text(str(os.getpid()))
        sw = self.ns("sw")
        try:
            _ip("netns", "add", sw)
            _ip("-n", sw, "link", "add", "br0", "type", "bridge")
            _ip("-n", sw, "link", "set", "br0", "up")
            for role in self.ROLES:
                ns = self.ns(role)
                _ip("netns", "add", ns)
                port = f"s-{role}"
                _ip(
                    "-n",
                    sw,
                    "link",
                    "add",
                    port,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    ns,
                )
                _ip("-n", sw, "link", "set", port, "master", "br0", "up")
                _ip("-n", ns, "addr", "add", f"{self.ip_of(role)}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.destroy()
            raise
        return self

    def destroy(self) -> None:
        for role in (*self.ROLES, "sw"):
            ns = self.ns(role)
            for pid in _ns_pids(ns):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
            _ip("netns", "del", ns, check=False)
        with contextlib.suppress(OSError):
            (RUNS / str(self.r)).unlink()


class IptablesLink:
    """A link cut inside ``ns`` for traffic to and from ``peer``, with FaultProxy's modes."""

    def __init__(self, ns: str, peer: str, dev: str = "eth0", netem: bool = False) -> None:
        self.ns, self.peer, self.dev, self.netem = ns, peer, dev, netem
        self.mode = PASS
        self.chain = f"KGCJ-{peer.rsplit('.', 1)[1]}"
        in_ns(ns, "iptables", "-N", self.chain)
        in_ns(ns, "iptables", "-A", "INPUT", "-s", peer, "-j", self.chain)
        in_ns(ns, "iptables", "-A", "OUTPUT", "-d", peer, "-j", self.chain)

    def set_mode(self, mode: str, delay_ms: float = 0.0) -> None:
        """``delay_ms`` is the delay of ``delay``, the drop probability of ``loss``."""
        if mode not in MODES and mode != LOSS:
            raise ValueError(f"unknown mode {mode!r}")
        in_ns(self.ns, "iptables", "-F", self.chain)
        if self.mode == DELAY:
            in_ns(self.ns, "tc", "qdisc", "del", "dev", self.dev, "root", check=False)
        self.mode = mode
        if mode == PASS:
            return
        if mode == DELAY:
            if not self.netem:
                raise RuntimeError("no tc netem in this kernel")
            in_ns(
                self.ns,
                "tc",
                "qdisc",
                "add",
                "dev",
                self.dev,
                "root",
                "netem",
                "delay",
                f"{int(delay_ms)}ms",
            )
            return
        if mode == LOSS:
            p = f"{min(max(delay_ms, 0.0), 1.0):.4f}"
            drop = ["-m", "statistic", "--mode", "random", "--probability", p, "-j", "DROP"]
            in_ns(self.ns, "iptables", "-A", self.chain, *drop)
            return
        if mode == RESET:
            # The RSTs the REJECT rule sends leave through OUTPUT, which jumps here too.
            rst = ["-p", "tcp", "--tcp-flags", "RST", "RST", "-j", "RETURN"]
            in_ns(self.ns, "iptables", "-A", self.chain, *rst)
            reject = ["-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"]
            in_ns(self.ns, "iptables", "-A", self.chain, *reject)
        in_ns(self.ns, "iptables", "-A", self.chain, "-j", "DROP")

    async def close(self) -> None:
        return None


class NsNode(JepsenNode):
    """A ``kgc serve`` in its node's namespace, on its own address."""

    def __init__(self, data_dir: Path, *extra: str, ns: str, host: str) -> None:
        super().__init__(data_dir, *extra, port=NODE_PORT)
        self.ns, self.host = ns, host

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def serve_flags(self) -> list[str]:
        return ["--host", self.host, "--advertised-host", self.host, *super().serve_flags()]

    def spawn(self, flags: list[str], log: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            ["ip", "netns", "exec", self.ns, sys.executable, "-m", "coordinator", "serve", *flags],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=_die_with_parent,
        )


class NsPg(PgServer):
    """PostgreSQL in the ``-pg`` namespace, listening on its address, trusting the run's /24."""

    def __init__(self, base_dir: Path, ns: str, host: str) -> None:
        super().__init__(base_dir, port=PG_PORT)
        self.ns, self.host = ns, host

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.database}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(a) for a in args]
        if self._as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(
            ["ip", "netns", "exec", self.ns, *cmd],
            check=check,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def _pg_ctl_start(self) -> None:
        hba = self.data / "pg_hba.conf"
        line = f"host all all {self.host.rsplit('.', 1)[0]}.0/24 trust\n"
        if line not in hba.read_text():
            with hba.open("a") as fh:
                fh.write(line)
        opts = (
            f"-p {self.port} -k {self.base} -c listen_addresses={self.host} "
            "-c max_connections=200 -c shared_buffers=128MB -c idle_in_transaction_session_timeout=10s"
        )
        self._chown()
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.logfile),
            "-o",
            opts,
            "-w",
            "-t",
            "60",
            "start",
        )


class NsCluster(ProxiedCluster):
    def __init__(self, base_dir: Path, pg: PgServer, network: Network, **kw: int) -> None:
        self.network = network
        ports = {n: NODE_PORT for n in (1, 2, 3)}
        super().__init__(base_dir, pg, ports, ports, {n: PG_PORT for n in (1, 2, 3)}, **kw)

    def _make(self, node_id: int) -> KgcProcess:
        role = f"n{node_id}"
        args = [
            "--node-id",
            str(node_id),
            "--storage-url",
            self.pg.url,
            "--broker-heartbeat-interval-ms",
            str(self.heartbeat_interval_ms),
            "--broker-session-timeout-ms",
            str(self.session_timeout_ms),
            "--offsets-topic-num-partitions",
            str(self.offsets_partitions),
            "--kgc-log-level",
            "INFO",
            *SHARE_FLAGS,
        ]
        proc = NsNode(
            self.base / f"node-{node_id}" / "data",
            *args,
            ns=self.network.ns(role),
            host=self.network.ip_of(role),
        )
        proc.data_dir.mkdir(parents=True, exist_ok=True)
        self.nodes[node_id] = proc
        return proc


class NetnsTopology(ProxyTopology):
    """Mode N, run from inside the network's ``-cli`` namespace."""

    mode = "netns"

    def __init__(self, run_dir: Path, network: Network, **kw: int) -> None:
        super().__init__(run_dir, 3, **kw)
        self.network = network
        self.netem = netem_available()
        # (n, m): node n's side of its link to node m (the inter-broker channel)
        self.peer: dict[tuple[int, int], IptablesLink] = {}
        shutil.rmtree(self.pg.base, ignore_errors=True)  # the loopback one is not used
        self.pg = NsPg(
            Path(tempfile.mkdtemp(prefix="kgcj-pg-")), network.ns("pg"), network.ip_of("pg")
        )

    async def start(self, timeout: float = 90.0) -> NetnsTopology:
        import asyncio

        self.run_dir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(self.pg.start)
        self._record_pids()
        net = self.network
        for n in self.node_ids:
            ns = net.ns(f"n{n}")
            self.client[n] = IptablesLink(ns, net.ip_of("cli"), netem=self.netem)  # type: ignore[assignment]
            self.db[n] = IptablesLink(ns, net.ip_of("pg"), netem=self.netem)  # type: ignore[assignment]
            for m in self.node_ids:
                if m != n:
                    self.peer[(n, m)] = IptablesLink(ns, net.ip_of(f"n{m}"))
        self.cluster = NsCluster(
            self.run_dir,
            self.pg,
            net,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            session_timeout_ms=self.session_timeout_ms,
            offsets_partitions=self.offsets_partitions,
        )
        for n in self.node_ids:
            await self.start_node(n)
        await self.wait_ready(timeout)
        return self

    def addresses(self) -> set[tuple[str, int]]:
        return {(self.network.ip_of(f"n{n}"), NODE_PORT) for n in self.node_ids}

    def node_of_address(self, host: str, port: int) -> int:
        for n in self.node_ids:
            if (self.network.ip_of(f"n{n}"), NODE_PORT) == (host, port):
                return n
        raise KeyError(f"{host}:{port}")
