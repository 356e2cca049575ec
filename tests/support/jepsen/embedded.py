"""The embedded topology: one ``kgc serve`` on its local log, no PostgreSQL, and its disk faults.

How this works. ``EmbeddedTopology`` has ``ProxyTopology``'s interface with one node (node id
1) started without ``--storage-url``, so the group coordinator and the data plane keep
everything in the local engine (segments, the offsets journal, group-commit fsync). Its data
directory lies on a ``Disk``: a small ext4 filesystem of the run's own (an image file in the
run directory, ``mkfs.ext4 -m 0`` so root gets no reserved blocks, loop-mounted), so the
nemesis can fill it and free it again without touching any other filesystem. The node's log
stays in the run directory, so a full disk never silences it.

The client link is a ``FaultProxy`` (proxy mode) or an ``IptablesLink`` in the node's
namespace (namespace mode: the node runs in ``-n1``); there is no database link, and the
PostgreSQL faults are no-ops the runner leaves out of the plan.

Disk faults:
- ``fill``: a filler file takes every free block (``posix_fallocate`` of what ``statvfs``
  says is free, then small writes until ENOSPC, bounded); ``free`` deletes it. Writes and
  fsyncs of the node then fail with ENOSPC until it is freed.
- ``tear``: after a kill -9, the tail a crash mid-write leaves: to the newest journal file
  and to the active segment of a few partitions a partial record is appended (a length or
  batch header promising more bytes than follow, then random bytes), or a whole record with
  a wrong checksum. Only bytes past each file's end are written: every byte that was there,
  and with it every byte that was fsynced (acknowledged), stays as it was. Recovery must cut
  the tail and lose nothing acknowledged.

The mount point is recorded in ``run_dir/mounts`` before mounting; ``sweep_mounts``
unmounts what a crashed run left there (in namespace mode the mount lives in the harness's
own mount namespace and goes with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
import shutil
import signal
import struct
import subprocess
from pathlib import Path

from storage.record_batch import CorruptBatchError, iter_batches
from support.clusterkit import Cluster
from support.jepsen.netns import IptablesLink, Network, NsNode, netem_available
from support.jepsen.proxy import PASS, FaultProxy
from support.jepsen.topology import SHARE_FLAGS, JepsenNode, ProxyTopology, sweep
from support.kgc_process import KgcProcess, free_port

NODE = 1


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60)


def disk_unavailable() -> str | None:
    """Why a loop-mounted filesystem cannot be made here, or None."""
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("mkfs.ext4") is None or shutil.which("losetup") is None:
        return "no mkfs.ext4 / losetup"
    if not Path("/dev/loop-control").exists():
        return "no loop devices"
    return None


def sweep_mounts(run_dir: Path) -> list[str]:
    """Unmount what an earlier, crashed run of ``run_dir`` left mounted."""
    record = run_dir / "mounts"
    done = []
    if record.exists():
        for line in record.read_text().split():
            if os.path.ismount(line):
                subprocess.run(["umount", "-l", line], check=False, timeout=60)
                done.append(line)
        record.unlink()
    return done


class Disk:
    """A ``size_mb`` ext4 filesystem in ``run_dir/disk.img`` mounted at ``run_dir/disk``."""

    def __init__(self, run_dir: Path, size_mb: int = 192) -> None:
        self.run_dir = run_dir
        self.image = run_dir / "disk.img"
        self.mount = run_dir / "disk"
        self.size_mb = size_mb
        self.filler = self.mount / "filler"
        self.mounted = False

    def create(self) -> Disk:
        sweep_mounts(self.run_dir)
        with open(self.image, "wb") as fh:
            fh.truncate(self.size_mb << 20)
        _run("mkfs.ext4", "-q", "-F", "-m", "0", str(self.image))
        self.mount.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "mounts").write_text(f"{self.mount}\n")
        _run("mount", "-o", "loop", str(self.image), str(self.mount))
        self.mounted = True
        return self

    def fill(self) -> int:
        """Take every free block; return the bytes taken."""
        st = os.statvfs(self.mount)
        taken = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            with contextlib.suppress(OSError):
                free = st.f_bavail * st.f_frsize
                if free > 0:
                    os.posix_fallocate(fd, 0, free)
            chunk = b"\0" * 4096
            for _ in range(1 << 16):  # what fallocate left (metadata rounding), bounded
                try:
                    taken += os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
            taken = os.fstat(fd).st_size
        finally:
            os.close(fd)
        return taken

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()

    def full(self) -> bool:
        return self.filler.exists()

    def destroy(self) -> None:
        self.free()
        if self.mounted or os.path.ismount(self.mount):
            subprocess.run(["umount", str(self.mount)], check=False, timeout=60)
            if os.path.ismount(self.mount):
                subprocess.run(["umount", "-l", str(self.mount)], check=False, timeout=60)
        self.mounted = False
        with contextlib.suppress(FileNotFoundError):
            (self.run_dir / "mounts").unlink()
        with contextlib.suppress(FileNotFoundError):
            self.image.unlink()


# -- torn tails


def _torn_journal_record(rng: random.Random) -> bytes:
    """A journal record cut short: its length promises more than follows."""
    length = rng.randrange(200, 4000)
    body = rng.randbytes(rng.randrange(0, length - 8))
    return struct.pack(">iI", length, rng.getrandbits(32)) + body


def _garbled_journal_record(rng: random.Random) -> bytes:
    """A whole journal record whose checksum does not match its bytes."""
    name = b"__consumer_offsets-0"
    rest = struct.pack(">h", len(name)) + name + rng.randbytes(rng.randrange(61, 300))
    return struct.pack(">iI", len(rest) + 4, rng.getrandbits(32)) + rest


def _torn_batch(rng: random.Random, base_offset: int) -> bytes:
    """A record batch cut short (header says ``length``, fewer bytes follow) or garbled."""
    length = rng.randrange(70, 2000)
    # baseOffset, batchLength, partitionLeaderEpoch, magic 2: the header of a real batch.
    head = struct.pack(">qiib", base_offset, length, 0, 2)
    if rng.random() < 0.5:
        return head + rng.randbytes(rng.randrange(0, length - 6))
    return head + rng.randbytes(length - 5)  # whole, but its CRC cannot match


def _next_offset(segment: Path) -> int:
    """The offset the segment's next batch would start at (after its last whole batch), so a
    torn batch there looks like the append a crash cut short."""
    data = segment.read_bytes()
    at = 0
    with contextlib.suppress(ValueError):
        at = int(segment.name.split(".")[0])
    with contextlib.suppress(CorruptBatchError, ValueError, struct.error):
        for header, _, _ in iter_batches(data):
            at = header.next_offset
    return at


def tear(data_dir: Path, rng: random.Random, partitions: int = 4) -> list[str]:
    """Append torn tails past the end of the newest journal file and of the active segment
    of up to ``partitions`` partition logs; return what was torn (relative paths)."""
    torn: list[str] = []
    journals = sorted(data_dir.rglob("journal/*.jnl"))
    if journals:
        j = journals[-1]
        tail = _torn_journal_record(rng) if rng.random() < 0.6 else _garbled_journal_record(rng)
        with open(j, "ab") as fh:
            fh.write(tail)
        torn.append(f"{j.relative_to(data_dir)}+{len(tail)}")
    logs: dict[Path, Path] = {}
    for seg in sorted(data_dir.rglob("*.log")):
        if seg.parent.name != "journal" and seg.stat().st_size > 0:
            logs[seg.parent] = seg  # sorted: the last is the active segment
    for seg in rng.sample(sorted(logs.values()), min(partitions, len(logs))):
        tail = _torn_batch(rng, _next_offset(seg))
        with open(seg, "ab") as fh:
            fh.write(tail)
        torn.append(f"{seg.relative_to(data_dir)}+{len(tail)}")
    return torn


# -- the topology


class EmbeddedCluster(Cluster):
    """``clusterkit.Cluster`` of one embedded node (no storage URL) on ``data_dir``."""

    def __init__(
        self,
        run_dir: Path,
        data_dir: Path,
        node_port: int,
        client_port: int,
        network: Network | None,
        **kw: int,
    ) -> None:
        self.data_dir, self.node_port, self.client_port = data_dir, node_port, client_port
        self.network = network
        super().__init__(run_dir, "", nodes=1, **kw)  # type: ignore[arg-type]

    def _make(self, node_id: int) -> KgcProcess:
        args = [
            "--node-id",
            str(node_id),
            "--offsets-topic-num-partitions",
            str(self.offsets_partitions),
            "--kgc-log-level",
            "INFO",
            *SHARE_FLAGS,
        ]
        proc: JepsenNode
        if self.network is not None:
            role = f"n{node_id}"
            proc = NsNode(
                self.data_dir,
                *args,
                ns=self.network.ns(role),
                host=self.network.ip_of(role),
            )
        else:
            args += ["--advertised-host", "127.0.0.1", "--advertised-port", str(self.client_port)]
            proc = JepsenNode(self.data_dir, *args, port=self.node_port)
        proc.log_path = self.base / f"kgc-node-{node_id}.log"  # off the disk that fills up
        self.nodes[node_id] = proc
        return proc


class EmbeddedTopology(ProxyTopology):
    """One embedded node on a disk of its own; proxy mode, or namespace mode in ``network``."""

    def __init__(self, run_dir: Path, network: Network | None = None, **kw: int) -> None:
        super().__init__(run_dir, 1, **kw)
        shutil.rmtree(self.pg.base, ignore_errors=True)  # no PostgreSQL here
        self.network = network
        self.mode = "netns" if network is not None else "proxy"
        self.disk = Disk(self.run_dir)
        self.torn: list[list[str]] = []

    async def start(self, timeout: float = 90.0) -> EmbeddedTopology:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        sweep(self.run_dir)
        await asyncio.to_thread(self.disk.create)
        data = self.disk.mount / "data"
        data.mkdir(exist_ok=True)
        node_port = free_port()
        if self.network is not None:
            net = self.network
            link = IptablesLink(net.ns("n1"), net.ip_of("cli"), netem=netem_available())
            self.client[NODE] = link  # type: ignore[assignment]
            client_port = 0
        else:
            self.client[NODE] = await FaultProxy("127.0.0.1", node_port).start()
            client_port = self.client[NODE].port
        self.cluster = EmbeddedCluster(  # type: ignore[assignment]
            self.run_dir,
            data,
            node_port,
            client_port,
            self.network,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            session_timeout_ms=self.session_timeout_ms,
            offsets_partitions=self.offsets_partitions,
        )
        await self.start_node(NODE)
        await self.wait_ready(timeout)
        return self

    def _record_pids(self) -> None:
        pids = []
        if self.cluster is not None:
            pids = [p.proc.pid for p in self.cluster.nodes.values() if p.proc is not None]
        (self.run_dir / "pids").write_text("".join(f"{p}\n" for p in pids))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for proxy in self.client.values():
            proxy.set_mode(PASS)
        if self.cluster is not None:
            for node in self.cluster.nodes.values():
                if node.proc is not None and node.proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(node.proc.pid, signal.SIGCONT)
                    node.kill()
        for proxy in self.client.values():
            await proxy.close()
        await asyncio.to_thread(self.disk.destroy)
        with contextlib.suppress(FileNotFoundError):
            (self.run_dir / "pids").unlink()

    def addresses(self) -> set[tuple[str, int]]:
        if self.network is not None:
            return {(self.network.ip_of("n1"), self.cluster_port())}
        return super().addresses()

    def cluster_port(self) -> int:
        assert self.cluster is not None
        return self.cluster.nodes[NODE].port

    def node_of_address(self, host: str, port: int) -> int:
        if (host, port) in self.addresses():
            return NODE
        raise KeyError(f"{host}:{port}")

    # -- disk faults

    def fill_disk(self) -> int:
        return self.disk.fill()

    def free_disk(self) -> None:
        self.disk.free()

    def tear(self, rng: random.Random) -> list[str]:
        """kill -9 the node and leave torn tails behind; the nemesis restarts it."""
        self.kill(NODE)
        torn = tear(self.disk.mount / "data", rng)
        self.torn.append(torn)
        return torn

    # -- no PostgreSQL

    async def stop_pg(self) -> None:
        return None

    async def start_pg(self) -> None:
        return None

    def pause_pg(self) -> None:
        return None

    def resume_pg(self) -> None:
        return None

    async def terminate_sessions(self) -> str:
        return "0"
