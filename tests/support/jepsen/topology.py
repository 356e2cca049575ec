"""Proxy-mode topology: three ``kgc serve`` cluster nodes and one PostgreSQL, every link proxied.

How this works: ``ProxyTopology(run_dir).start()`` starts a PostgreSQL of its own
(``pgserver.PgServer``, fsync on), then per node two ``FaultProxy`` links in the harness's
event loop: ``client[n]`` (clients -> node n) and ``db[n]`` (node n -> PostgreSQL). Node n is
started with ``--storage-url`` naming its ``db[n]`` proxy and ``--advertised-host/port``
naming its ``client[n]`` proxy, so Metadata and FindCoordinator send every client through
the proxies, and a client re-discovering a coordinator reconnects through them too.

The node processes are spawned from the loop's own thread with ``PR_SET_PDEATHSIG`` =
SIGKILL (the kernel ends them if the harness dies, even by SIGKILL; the signal follows the
spawning *thread*, hence never from a worker thread). PostgreSQL daemonizes, so its
postmaster pid is written to ``run_dir/pids`` with the nodes' and ``sweep`` ends what a
crashed earlier run left there. ``close()`` heals every link, resumes what is paused, kills
every node by pid, stops PostgreSQL immediately and closes the proxies; it is idempotent.

Readiness and control questions (``wait_ready``, ``find_coordinator``) go to the nodes'
own ports through ``clusterkit.Cluster``, never through a proxy, so a faulty link never
blinds the harness. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from support.clusterkit import Cluster
from support.jepsen.proxy import PASS, FaultProxy
from support.kgc_process import KgcProcess, free_port
from support.pgserver import PgServer

_PR_SET_PDEATHSIG = 1
# Share members a restart or a coordinator move leaves behind hold their partitions until
# their session expires (members are persisted; Kafka does the same): short sessions, as
# the harness's broker session is, so a share group moves on within a run.
SHARE_FLAGS = (
    "--group-share-min-session-timeout-ms",
    "6000",
    "--group-share-session-timeout-ms",
    "6000",
    "--group-share-min-heartbeat-interval-ms",
    "1000",
    "--group-share-heartbeat-interval-ms",
    "1000",
)


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class JepsenNode(KgcProcess):
    """A ``kgc serve`` that dies with the harness (PDEATHSIG) and starts without blocking."""

    def spawn(self, flags: list[str], log: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "coordinator", "serve", *flags],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
            preexec_fn=_die_with_parent,
        )

    # Extra environment of the node process (libfaketime for clock faults).
    env: dict[str, str] = {}

    async def start_async(self, timeout: float = 30.0) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = self.spawn(self.serve_flags(), log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kgc exited with {self.proc.returncode}:\n{self.log()}")
            try:
                host = self.bootstrap.rsplit(":", 1)[0]
                _, w = await asyncio.wait_for(asyncio.open_connection(host, self.port), 1)
                w.close()
                return
            except (OSError, TimeoutError):
                await asyncio.sleep(0.05)
        # Ended by pid, so that a later start never runs beside it on the same data dir.
        self.proc.kill()
        self.proc.wait()
        raise RuntimeError(f"kgc did not listen on {self.port} in {timeout} s:\n{self.log()}")


class ProxiedCluster(Cluster):
    """``clusterkit.Cluster`` whose node n reaches PostgreSQL at ``db_ports[n]`` and is
    advertised at ``client_ports[n]``."""

    def __init__(
        self,
        base_dir: Path,
        pg: PgServer,
        node_ports: dict[int, int],
        client_ports: dict[int, int],
        db_ports: dict[int, int],
        **kw: int,
    ) -> None:
        self.pg = pg
        self.node_ports, self.client_ports, self.db_ports = node_ports, client_ports, db_ports
        super().__init__(base_dir, pg.url, nodes=len(node_ports), **kw)  # type: ignore[arg-type]

    def _make(self, node_id: int) -> KgcProcess:
        url = f"postgresql://{self.pg.user}@127.0.0.1:{self.db_ports[node_id]}/{self.pg.database}"
        args = [
            "--node-id",
            str(node_id),
            "--storage-url",
            url,
            "--advertised-host",
            "127.0.0.1",
            "--advertised-port",
            str(self.client_ports[node_id]),
            "--broker-heartbeat-interval-ms",
            str(self.heartbeat_interval_ms),
            "--broker-session-timeout-ms",
            str(self.session_timeout_ms),
            "--offsets-topic-num-partitions",
            str(self.offsets_partitions),
            "--kgc-log-level",
            "INFO",
            *SHARE_FLAGS,
            *self.extra,
        ]
        proc = JepsenNode(
            self.base / f"node-{node_id}" / "data", *args, port=self.node_ports[node_id]
        )
        proc.data_dir.mkdir(parents=True, exist_ok=True)
        self.nodes[node_id] = proc
        return proc


def _children(pid: int) -> list[int]:
    """Direct children of ``pid``, from /proc (PostgreSQL's backends and workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def sweep(run_dir: Path) -> list[int]:
    """End the processes an earlier, crashed run of this directory left (its ``pids`` file)."""
    ended = []
    pids = run_dir / "pids"
    if pids.exists():
        for line in pids.read_text().split():
            pid = int(line)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
                ended.append(pid)
        pids.unlink()
    return ended


class ProxyTopology:
    """Mode P: nodes 1..n and PostgreSQL on loopback, each link through a ``FaultProxy``."""

    mode = "proxy"

    def __init__(
        self,
        run_dir: Path,
        nodes: int = 3,
        *,
        heartbeat_interval_ms: int = 500,
        session_timeout_ms: int = 3000,
        offsets_partitions: int = 12,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.node_ids = list(range(1, nodes + 1))
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.offsets_partitions = offsets_partitions
        # PostgreSQL runs as the postgres user when we are root: its directory is one of its
        # own outside run_dir (a test's tmp dir is private to root); its log is copied back.
        self.pg = PgServer(Path(tempfile.mkdtemp(prefix="kgcj-pg-")))
        self.client: dict[int, FaultProxy] = {}
        self.db: dict[int, FaultProxy] = {}
        self.cluster: ProxiedCluster | None = None
        self.pg_paused: list[int] = []
        self.faketime: str | None = None
        self._closed = False

    # -- lifecycle

    async def start(self, timeout: float = 90.0) -> ProxyTopology:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        sweep(self.run_dir)
        await asyncio.to_thread(self.pg.start)
        self._record_pids()
        node_ports = {n: free_port() for n in self.node_ids}
        for n in self.node_ids:
            self.client[n] = await FaultProxy("127.0.0.1", node_ports[n]).start()
            self.db[n] = await FaultProxy("127.0.0.1", self.pg.port).start()
        self.cluster = ProxiedCluster(
            self.run_dir,
            self.pg,
            node_ports,
            {n: p.port for n, p in self.client.items()},
            {n: p.port for n, p in self.db.items()},
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            session_timeout_ms=self.session_timeout_ms,
            offsets_partitions=self.offsets_partitions,
        )
        for n in self.node_ids:
            await self.start_node(n)
        await self.wait_ready(timeout)
        return self

    def _record_pids(self) -> None:
        pids = [p for p in [self.pg.postmaster_pid()] if p]
        if self.cluster is not None:
            pids += [p.proc.pid for p in self.cluster.nodes.values() if p.proc is not None]
        (self.run_dir / "pids").write_text("".join(f"{p}\n" for p in pids))

    async def start_node(self, n: int) -> None:
        assert self.cluster is not None
        node = self.cluster.nodes[n]
        assert isinstance(node, JepsenNode)
        node.env = self._clock_env(n)
        await node.start_async()
        self._record_pids()

    async def wait_ready(self, timeout: float = 90.0) -> None:
        assert self.cluster is not None
        await asyncio.to_thread(self.cluster.wait_ready, timeout)

    async def close(self) -> None:
        """Heal, resume, kill by pid, stop PostgreSQL, close the proxies. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for proxy in [*self.client.values(), *self.db.values()]:
            proxy.set_mode(PASS)
        self.resume_pg()
        if self.cluster is not None:
            for n, node in self.cluster.nodes.items():
                if node.proc is not None and node.proc.poll() is None:
                    _signal(node.proc.pid, signal.SIGCONT)
                    node.kill()
                self.cluster.paused.discard(n)
        await asyncio.to_thread(self.pg.stop, "immediate")
        await asyncio.to_thread(self.pg.kill)
        with contextlib.suppress(OSError):
            shutil.copyfile(self.pg.logfile, self.run_dir / "postgres.log")
        shutil.rmtree(self.pg.base, ignore_errors=True)
        for proxy in [*self.client.values(), *self.db.values()]:
            await proxy.close()
        with contextlib.suppress(FileNotFoundError):
            (self.run_dir / "pids").unlink()

    # -- addresses

    def bootstrap(self) -> str:
        """What a client is configured with: every node's client proxy."""
        return ",".join(f"127.0.0.1:{p.port}" for p in self.client.values())

    def addresses(self) -> set[tuple[str, int]]:
        """Every address a client of this run may dial (the client proxies)."""
        return {("127.0.0.1", p.port) for p in self.client.values()}

    def node_of_address(self, host: str, port: int) -> int:
        for n, p in self.client.items():
            if ("127.0.0.1", p.port) == (host, port):
                return n
        raise KeyError(f"{host}:{port}")

    # -- node faults

    def alive(self, n: int) -> bool:
        assert self.cluster is not None
        return self.cluster.nodes[n].alive()

    def kill(self, n: int) -> None:
        assert self.cluster is not None
        if self.cluster.nodes[n].alive():
            self.cluster.kill(n)

    def pause(self, n: int) -> None:
        assert self.cluster is not None
        self.cluster.pause(n)

    def resume(self, n: int) -> None:
        assert self.cluster is not None
        if self.cluster.nodes[n].alive():
            self.cluster.resume(n)
        self.cluster.paused.discard(n)

    # -- clock faults (libfaketime in the node, the harness's own clock untouched)

    def enable_clock_faults(self) -> None:
        """Start nodes under libfaketime, each reading its offset from a file of its own
        (re-read every second); the monotonic clock stays true, the wall clock moves."""
        assert self.cluster is None, "before start()"
        self.faketime = faketime_library()
        if self.faketime is None:
            raise RuntimeError("no libfaketime (scripts/ensure-jepsen-tools)")

    def clock_file(self, n: int) -> Path:
        return self.run_dir / f"node-{n}.faketime"

    def set_clock(self, n: int, offset: str) -> None:
        """Node n's wall clock at ``offset`` seconds from true ("+30", "-120", "+0")."""
        path = self.clock_file(n)
        path.with_suffix(".tmp").write_text(offset + "\n")
        path.with_suffix(".tmp").replace(path)

    def _clock_env(self, n: int) -> dict[str, str]:
        if self.faketime is None:
            return {}
        self.set_clock(n, "+0")
        return {
            "LD_PRELOAD": self.faketime,
            "FAKETIME_TIMESTAMP_FILE": str(self.clock_file(n)),
            "FAKETIME_CACHE_DURATION": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    # -- PostgreSQL faults

    async def stop_pg(self) -> None:
        await asyncio.to_thread(self.pg.stop, "immediate")

    async def start_pg(self) -> None:
        if self.pg.postmaster_pid() is None or not _running(self.pg.postmaster_pid()):
            await asyncio.to_thread(self.pg._pg_ctl_start)
            self._record_pids()

    def pause_pg(self) -> None:
        pid = self.pg.postmaster_pid()
        if pid is None:
            return
        self.pg_paused = [pid, *_children(pid)]
        _signal(pid, signal.SIGSTOP)  # first, so it forks no new backend meanwhile
        for child in self.pg_paused[1:]:
            _signal(child, signal.SIGSTOP)

    def resume_pg(self) -> None:
        for pid in reversed(self.pg_paused):
            _signal(pid, signal.SIGCONT)
        self.pg_paused = []

    async def terminate_sessions(self) -> str:
        """``pg_terminate_backend`` of every kgc session (the nodes reconnect)."""
        sql = (
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            f"WHERE datname = '{self.pg.database}' AND pid <> pg_backend_pid()"
        )
        out = await asyncio.to_thread(self.pg.psql, "postgres", sql)
        return out.strip()


def faketime_library() -> str | None:
    """Debian's libfaketime, when installed."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    return str(found[0]) if found else None


def _running(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
