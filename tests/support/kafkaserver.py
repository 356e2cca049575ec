"""A real Apache Kafka broker for tests: the reference kgc is compared with.

How this works: ``tests/jvm/pom.xml`` pins Apache Kafka's artifacts (``scripts/ensure-jvm-deps``
resolves them into ``~/.m2`` and writes their classpath to ``tests/jvm/target/classpath.txt``).
``KafkaServer(base_dir).start()`` writes a ``server.properties`` for KRaft combined mode (one
process is both controller and broker, node id 1, replication factors 1), formats its log
directory with ``kafka.tools.StorageTool format --standalone`` and starts ``kafka.Kafka`` on
free loopback ports, waiting until its log says the broker is up and the listener accepts.
``stop()`` sends SIGTERM (Kafka's controlled shutdown) and waits; ``destroy()`` also removes
the directory. ``java_command(main, *args)`` builds the command line for any main class on
the same classpath (Kafka's tools, the Java test clients of ``tests/jvm/src``).

Settings that change what a client sees are the ones kgc's tests run with, so the two
servers can be compared answer by answer: ``group.initial.rebalance.delay.ms`` is kgc's test
value (100 ms) and the offsets topic keeps Kafka's 50 partitions. ``overrides`` adds or
replaces any property (a benchmark sets ``log.flush.interval.messages=1``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "JVM_DIR",
    "KafkaServer",
    "classpath",
    "java_command",
    "running_broker",
]

JVM_DIR = Path(__file__).resolve().parent.parent / "jvm"
CLASSPATH_FILE = JVM_DIR / "target" / "classpath.txt"
CLASSES_DIR = JVM_DIR / "target" / "classes"
LOG4J_CONFIG = JVM_DIR / "log4j2.properties"


def classpath() -> str:
    """The pinned Kafka jars and the compiled test clients, as one ``-cp`` value."""
    if not CLASSPATH_FILE.exists():
        raise RuntimeError(
            f"{CLASSPATH_FILE} is missing: run scripts/ensure-jvm-deps (scripts/test does)"
        )
    return f"{CLASSES_DIR}{os.pathsep}{CLASSPATH_FILE.read_text().strip()}"


def java_command(
    main: str,
    *args: str,
    heap: str = "256m",
    log_dir: Path | None = None,
    jvm_args: Sequence[str] = (),
) -> list[str]:
    """The command running ``main`` from the pinned classpath, quiet logging (warnings only);
    ``jvm_args`` go before the classpath (system properties such as Kafka 4's
    ``org.apache.kafka.sasl.oauthbearer.allowed.urls``)."""
    java = shutil.which("java") or "java"
    jvm = [
        java,
        f"-Xmx{heap}",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Xshare:auto",
        f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
        "-Djava.awt.headless=true",
    ]
    if log_dir is not None:
        jvm.append(f"-Dkafka.logs.dir={log_dir}")
    return [*jvm, *jvm_args, "-cp", classpath(), main, *args]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KafkaServer:
    """One Apache Kafka broker+controller process (KRaft combined mode) on loopback."""

    def __init__(
        self,
        base_dir: Path,
        *,
        port: int | None = None,
        overrides: dict[str, str] | None = None,
        heap: str = "768m",
        fast_start: bool = True,
        features: dict[str, int] | None = None,
    ) -> None:
        self.base = Path(base_dir)
        self.port = port or _free_port()
        self.controller_port = _free_port()
        self.log_dirs = self.base / "logs"
        self.config_file = self.base / "server.properties"
        self.log_path = self.base / "kafka.out"
        self.overrides = dict(overrides or {})
        self.heap = heap
        # C1 only starts the JVM about twice as fast on two cores; a benchmark wants C2.
        self.fast_start = fast_start
        # Feature levels set at format (kafka-storage format --feature name=level), e.g.
        # transaction.version 1 instead of the release's default 2.
        self.features = dict(features or {})
        self.cluster_id = _cluster_id()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_seconds = 0.0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def properties(self) -> dict[str, str]:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.log_dirs),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "50",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "100",
            "auto.create.topics.enable": "true",
            "num.network.threads": "2",
            "num.io.threads": "4",
        }
        props.update(self.overrides)
        return props

    def _write_config(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        text = "".join(f"{k}={v}\n" for k, v in self.properties().items())
        self.config_file.write_text(text)

    def _java(self, main: str, *args: str, heap: str) -> list[str]:
        cmd = java_command(main, *args, heap=heap, log_dir=self.base)
        if not self.fast_start:
            cmd = [c for c in cmd if c not in ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")]
        return cmd

    def format(self) -> None:
        self._write_config()
        cmd = self._java(
            "kafka.tools.StorageTool",
            "format",
            "--cluster-id",
            self.cluster_id,
            "--config",
            str(self.config_file),
            "--standalone",
            "--ignore-formatted",
            *(a for name, level in self.features.items() for a in ("--feature", f"{name}={level}")),
            heap="128m",
        )
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed:\n{done.stdout}\n{done.stderr}")

    def start(self, timeout: float = 90.0) -> KafkaServer:
        began = time.monotonic()
        if not (self.log_dirs / "meta.properties").exists():
            self.format()
        else:
            self._write_config()
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                self._java("kafka.Kafka", str(self.config_file), heap=self.heap),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = began + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Kafka exited with {self.proc.returncode}:\n{self.log()}")
            if "Kafka Server started" in self.log() and self._accepts():
                self.start_seconds = time.monotonic() - began
                return self
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"Kafka did not start within {timeout}s:\n{self.log()}")

    def _accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def rss_bytes(self) -> int:
        """The broker process's resident memory (``/proc``), 0 when it is not running."""
        if self.proc is None or self.proc.poll() is not None:
            return 0
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes in URL-safe base64 without padding (22 chars).

    Never one starting with '-': kafka-storage's argument parser takes it for an option (1
    id in 64), which Kafka's own ``Uuid.randomUuid`` avoids the same way.
    """
    import base64

    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


@contextlib.contextmanager
def running_broker(prefix: str = "kgc-kafka-", **kw: Any) -> Iterator[KafkaServer]:
    """A broker in a fresh temporary directory (not pytest's: fixtures of any scope use it),
    started, and destroyed with its directory when the block ends or the start fails."""
    server = KafkaServer(Path(tempfile.mkdtemp(prefix=prefix)), **kw)
    try:
        server.start()
        yield server
    finally:
        server.destroy()
