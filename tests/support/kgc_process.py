"""Run a real ``kgc serve`` process for integration tests.

How this works: each ``KgcProcess`` picks a free loopback port, starts
``python -m coordinator serve`` on it with its own data directory, and waits until the
port accepts connections. ``stop()`` sends SIGTERM (clean shutdown), ``kill()`` SIGKILL
(a crash); ``start()`` again reuses the same data directory and port.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KgcProcess:
    def __init__(self, data_dir: Path, *extra: str, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.metrics_port = free_port()
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"kgc-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def serve_flags(self) -> list[str]:
        """The flags of ``kgc serve`` for this process."""
        return [
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--metrics-port",
            str(self.metrics_port),
            "--group-initial-rebalance-delay-ms",
            "100",
            *self.extra,
        ]

    def spawn(self, flags: list[str], log: IO[bytes]) -> subprocess.Popen[bytes]:
        """Start ``kgc serve`` with ``flags``, its output to ``log`` (bench/trees.py starts
        another source tree's server here)."""
        return subprocess.Popen(
            [sys.executable, "-m", "coordinator", "serve", *flags],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def start(self, timeout: float = 20.0) -> None:
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = self.spawn(self.serve_flags(), log)
        # Both ports: kgc's Kafka listeners accept a moment before its metrics endpoint is
        # bound, and tests scrape /metrics right after start.
        deadline = time.monotonic() + timeout
        metrics_port = self.metrics_port
        if "--metrics-port" in self.extra:  # a later flag wins, as argparse reads it
            at = len(self.extra) - 1 - self.extra[::-1].index("--metrics-port")
            metrics_port = int(self.extra[at + 1])
        waiting = [self.port] + ([metrics_port] if metrics_port else [])
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kgc exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", waiting[0]), timeout=0.2):
                    waiting.pop(0)
                    if not waiting:
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"kgc did not start listening on {waiting}:\n{self.log()}")

    def wait_loaded(self, timeout: float = 30.0) -> None:
        """Wait until every offsets partition is loaded (no group answers LOAD_IN_PROGRESS).

        kgc listens before its offsets log is replayed and answers
        COORDINATOR_LOAD_IN_PROGRESS meanwhile, which real clients retry; a test that sends
        raw group requests right after ``start`` waits for this first.
        """
        from coordinator.tools.client import Connection
        from protocol.errors import ErrorCode
        from protocol.messages import offset_fetch
        from storage.records import partition_for

        n = 50
        if "--offsets-topic-num-partitions" in self.extra:
            n = int(self.extra[self.extra.index("--offsets-topic-num-partitions") + 1])
        probes: dict[int, str] = {}
        i = 0
        while len(probes) < n:
            probes.setdefault(partition_for(f"probe-{i}", n), f"probe-{i}")
            i += 1
        request = offset_fetch.Request(
            groups=[
                offset_fetch.OffsetFetchRequestGroup(group_id=g, topics=None)
                for g in probes.values()
            ]
        )
        deadline = time.monotonic() + timeout
        with Connection.to(self.bootstrap) as c:
            while True:
                _, resp = c.request(offset_fetch.API_KEY, request, version=8)
                if all(g.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS for g in resp.groups):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"offsets log not loaded after {timeout} s:\n{self.log()}")
                time.sleep(0.02)

    def requests_total(self, **labels: str) -> float:
        """``kgc_requests_total`` summed over the series whose labels include ``labels``.

        What the server answered, counted by the server: a test waits on these counters
        (e.g. "every member has heartbeated five times since") instead of sleeping.
        """
        from prometheus_client.parser import text_string_to_metric_families

        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
        want = set(labels.items())
        return sum(
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "kgc_requests_total" and want <= set(s.labels.items())
        )

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
