"""A real ``kgc serve --kgc-workers N`` for the tests, and what they ask of it.

How this works: ``Workers`` is a ``KgcProcess`` (the supervisor is the process it starts)
on N consecutive free ports for Kafka and N for metrics (worker i on port + i). ``start``
waits until every worker listens; ``wait_loaded`` until no group of any worker answers
COORDINATOR_LOAD_IN_PROGRESS. ``worker_pid`` reads the pid worker i wrote in its lock file
``.lock.w<i>``. ``group_on(i)`` names a group whose offsets partition worker i coordinates,
``partition_on(topic, i)`` a partition of ``topic`` worker i leads (the placement rule),
``txn_id_on(i)`` a transactional id worker i coordinates.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

from coordinator.node.workers.worker import lock_holder
from coordinator.placement import worker_of
from coordinator.tools.client import Connection
from coordinator.txn.coordinator import partition_for_transactional_id
from coordinator.txn.records import TRANSACTION_STATE_TOPIC
from protocol.errors import ErrorCode
from protocol.messages import metadata, offset_fetch
from storage.records import OFFSETS_TOPIC, partition_for
from support.kgc_process import KgcProcess

OFFSETS_PARTITIONS = 50
TXN_STATE_PARTITIONS = 50


def free_ports(n: int) -> int:
    """The first of ``n`` consecutive ports free on 127.0.0.1 now."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + n > 65535:
            continue
        held = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports")


def group_on(worker: int, workers: int, prefix: str = "g") -> str:
    """A group id whose offsets partition ``worker`` coordinates."""
    i = 0
    while True:
        group = f"{prefix}-{i}"
        if worker_of(OFFSETS_TOPIC, partition_for(group, OFFSETS_PARTITIONS), workers) == worker:
            return group
        i += 1


def txn_id_on(worker: int, workers: int, prefix: str = "tx") -> str:
    """A transactional id whose ``__transaction_state`` partition ``worker`` leads."""
    i = 0
    while True:
        tid = f"{prefix}-{i}"
        p = partition_for_transactional_id(tid, TXN_STATE_PARTITIONS)
        if worker_of(TRANSACTION_STATE_TOPIC, p, workers) == worker:
            return tid
        i += 1


def partition_on(topic: str, partitions: int, worker: int, workers: int) -> int:
    for p in range(partitions):
        if worker_of(topic, p, workers) == worker:
            return p
    raise AssertionError(f"no partition of {topic} on worker {worker}")


class Workers(KgcProcess):
    def __init__(
        self, data_dir: Path, *extra: str, workers: int = 2, port: int | None = None
    ) -> None:
        """``port``: the first Kafka port (of ``extra``'s listeners, when they are given)."""
        super().__init__(
            data_dir, "--kgc-workers", str(workers), *extra, port=port or free_ports(workers)
        )
        self.workers = workers
        self.metrics_port = free_ports(workers)

    def bootstrap_of(self, worker: int) -> str:
        return f"127.0.0.1:{self.port + worker}"

    def start(self, timeout: float = 30.0) -> None:
        super().start(timeout)
        for i in range(1, self.workers):
            self.wait_listening(i, timeout)

    def wait_listening(self, worker: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"kgc exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port + worker), timeout=0.2):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"worker {worker} did not listen:\n{self.log()}") from None
                time.sleep(0.05)

    def wait_loaded(self, timeout: float = 30.0) -> None:
        """Every worker's offsets partitions are loaded."""
        for worker in range(self.workers):
            self.wait_worker_loaded(worker, timeout)

    def wait_worker_loaded(self, worker: int, timeout: float = 30.0) -> None:
        groups = []
        seen: set[int] = set()
        i = 0
        while len(seen) < OFFSETS_PARTITIONS:
            g = f"probe-{i}"
            p = partition_for(g, OFFSETS_PARTITIONS)
            if p not in seen and worker_of(OFFSETS_TOPIC, p, self.workers) == worker:
                groups.append(g)
            seen.add(p)
            i += 1
        request = offset_fetch.Request(
            groups=[offset_fetch.OffsetFetchRequestGroup(group_id=g, topics=None) for g in groups]
        )
        deadline = time.monotonic() + timeout
        with Connection.to(self.bootstrap_of(worker)) as c:
            while True:
                _, resp = c.request(offset_fetch.API_KEY, request, version=8)
                codes = {g.error_code for g in resp.groups}
                if codes <= {0}:
                    return
                assert codes <= {0, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}, codes
                if time.monotonic() > deadline:
                    raise RuntimeError(f"worker {worker} not loaded:\n{self.log()}")
                time.sleep(0.02)

    def knows_topic(self, worker: int, topic: str, partitions: int | None = None) -> bool:
        """Whether ``worker``'s Metadata has ``topic`` (with ``partitions``, when given)."""
        with Connection.to(self.bootstrap_of(worker)) as c:
            _, resp = c.request(
                metadata.API_KEY,
                metadata.Request(
                    topics=[metadata.MetadataRequestTopic(name=topic)],
                    allow_auto_topic_creation=False,
                ),
            )
        t = resp.topics[0]
        return t.error_code == 0 and (partitions is None or len(t.partitions) == partitions)

    def wait_topic(self, topic: str, partitions: int | None = None, timeout: float = 5.0) -> None:
        """Until every worker knows ``topic`` (a change through one reaches the others by
        the shared catalog's poll, or at once through the supervisor's hint)."""
        for worker in range(self.workers):
            wait_for(
                f"worker {worker} to know {topic}",
                lambda w=worker: self.knows_topic(w, topic, partitions),  # type: ignore[misc]
                timeout,
            )

    def kill_worker(self, worker: int, timeout: float = 60.0) -> None:
        """SIGKILL worker ``worker`` and wait until its supervisor started it again and it
        listens (its lock file names the new pid once it holds the lock)."""
        old = self.worker_pid(worker)
        os.kill(old, signal.SIGKILL)

        def restarted() -> bool:
            pid = lock_holder(self.data_dir, worker)
            return not pid_alive(old) and pid is not None and pid != old and pid_alive(pid)

        wait_for(f"worker {worker} restarted", restarted, timeout)
        self.wait_listening(worker, timeout)

    def worker_pid(self, worker: int) -> int:
        # A worker starting again truncates its lock file before it writes its pid: the
        # file is read again until the pid is there.
        found: list[int] = []

        def written() -> bool:
            pid = lock_holder(self.data_dir, worker)
            found[:] = [] if pid is None else [pid]
            return bool(found)

        wait_for(f"a pid in .lock.w{worker}", written, 15)
        return found[0]


def kill_node(node: KgcProcess, workers: int) -> None:
    """Kill the supervisor and every worker at once, as a power cut would (no clean stop)."""
    assert node.proc is not None
    pids = []
    if workers > 1:
        assert isinstance(node, Workers)
        os.kill(node.proc.pid, signal.SIGSTOP)  # it can neither restart nor let go of them
        pids = [node.worker_pid(i) for i in range(workers)]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
    node.kill()
    wait_for("every process gone", lambda: not any(pid_alive(p) for p in pids), 15)


def wait_for(what: str, check: object, timeout: float = 15.0) -> None:
    """Poll ``check()`` (a callable) until it is truthy."""
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def report(test: str, *, injected: str, verified: str, lost: int = 0) -> None:
    """The fault suites' one line: the fault, what was checked, acknowledged items lost."""
    print(
        f"[fault] {test}: injected: {injected} | verified: {verified} | acknowledged lost: {lost}"
    )
