"""Drive the Java test clients (``tests/jvm/src/main/java/kgc/clients``) from pytest.

How this works: each program is a JVM started with ``kafkaserver.java_command`` on the pinned
Kafka 4.4.0 classpath. It prints one JSON object per line; a reader thread collects them into
``JavaClient.events`` under a condition variable, so a test waits for the event it expects
(``wait_for``) with a deadline instead of sleeping. Commands go to the program's standard
input (``send``). Standard error (the client's warnings) goes to a file shown when a wait
fails. ``config`` is a client.properties path applied to every client the program creates,
so the same scenario runs over PLAINTEXT here and over SASL/TLS elsewhere.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from support.kafkaserver import java_command

Event = dict[str, Any]
Partition = tuple[str, int]


class JavaClient:
    """One running Java test program, its JSON events, its standard input."""

    def __init__(self, main: str, args: Iterable[str], *, name: str = "") -> None:
        self.name = name or main.rsplit(".", 1)[-1]
        self.events: list[Event] = []
        self._cond = threading.Condition()
        # Kept open for the child to write to; removed by kill().
        self._err = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix="java-client-", suffix=".err", delete=False
        )
        self.proc = subprocess.Popen(
            java_command(main, *args, heap="192m"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "raw", "line": line}
            with self._cond:
                self.events.append(event)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def stderr(self) -> str:
        return Path(self._err.name).read_text(errors="replace")[-4000:]

    def describe(self) -> str:
        return (
            f"{self.name} (exit {self.proc.poll()}) events:\n"
            + "\n".join(json.dumps(e) for e in self.events[-40:])
            + f"\nstderr:\n{self.stderr()}"
        )

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def mark(self) -> int:
        with self._cond:
            return len(self.events)

    def wait_for(
        self, pred: Callable[[Event], bool], *, after: int = 0, timeout: float = 45.0
    ) -> Event:
        """The first event at index >= ``after`` matching ``pred``; fails after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            i = after
            while True:
                while i < len(self.events):
                    if pred(self.events[i]):
                        return self.events[i]
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"no matching event from {self.describe()}")
                self._cond.wait(min(left, 0.5))

    def wait_event(self, name: str, *, after: int = 0, timeout: float = 45.0) -> Event:
        return self.wait_for(lambda e: e.get("event") == name, after=after, timeout=timeout)

    def of(self, name: str) -> list[Event]:
        with self._cond:
            return [e for e in self.events if e.get("event") == name]

    def request(self, command: str, reply: str, timeout: float = 30.0) -> Event:
        """Send ``command`` and wait for the ``reply`` event it causes."""
        at = self.mark()
        self.send(command)
        return self.wait_event(reply, after=at, timeout=timeout)

    def wait_exit(self, timeout: float = 60.0) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"did not exit: {self.describe()}") from None
        self._reader.join(10)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._reader.join(10)
        Path(self._err.name).unlink(missing_ok=True)


def common_args(bootstrap: str, config: Path | None) -> list[str]:
    args = ["--bootstrap", bootstrap]
    if config is not None:
        args += ["--config", str(config)]
    return args


class Clients:
    """Starts the Java programs of one test and kills whatever is left at its end."""

    def __init__(self, config: Path | None = None) -> None:
        self.config = config
        self.running: list[JavaClient] = []

    def start(self, main: str, args: Iterable[str], name: str = "") -> JavaClient:
        c = JavaClient(main, args, name=name)
        self.running.append(c)
        return c

    def consumer(
        self,
        bootstrap: str,
        group: str,
        *,
        topics: Iterable[str] = (),
        pattern: str | None = None,
        re2_pattern: str | None = None,
        protocol: str = "classic",
        assignor: str | None = None,
        instance_id: str | None = None,
        client_id: str | None = None,
        max_records: int | None = None,
        timeout_ms: int = 90_000,
        properties: dict[str, str] | None = None,
    ) -> JavaClient:
        args = [*common_args(bootstrap, self.config), "--group", group, "--protocol", protocol]
        if topics:
            args += ["--topics", ",".join(topics)]
        if pattern is not None:
            args += ["--pattern", pattern]
        if re2_pattern is not None:
            args += ["--re2-pattern", re2_pattern]
        for flag, value in (
            ("--assignor", assignor),
            ("--instance-id", instance_id),
            ("--client-id", client_id),
            ("--max-records", None if max_records is None else str(max_records)),
        ):
            if value is not None:
                args += [flag, value]
        args += ["--timeout-ms", str(timeout_ms)]
        # A classic member learns of a rebalance from its next heartbeat: every 500 ms rather
        # than the default 3 s keeps the scenarios short (a consumer-protocol member is paced
        # by the server's group.consumer.heartbeat.interval.ms instead).
        settings = {"heartbeat.interval.ms": "500"} if protocol == "classic" else {}
        settings.update(properties or {})
        for k, v in settings.items():
            args += ["--property", f"{k}={v}"]
        return self.start("kgc.clients.Consume", args, name=client_id or group)

    def share_consumer(
        self,
        bootstrap: str,
        group: str,
        topics: Iterable[str],
        *,
        mode: str = "implicit",
        release_first: Iterable[int] = (),
        release_always: Iterable[int] = (),
        reject: Iterable[int] = (),
        hold: bool = False,
        name: str = "",
        timeout_ms: int = 90_000,
    ) -> JavaClient:
        """A KafkaShareConsumer (``kgc.clients.ShareConsume``): implicit or explicit
        acknowledgement, explicit ones per offset (released once, always, or rejected)."""
        args = [*common_args(bootstrap, self.config), "--group", group]
        args += ["--topics", ",".join(topics), "--mode", mode, "--timeout-ms", str(timeout_ms)]
        for flag, offsets in (
            ("--release-first", release_first),
            ("--release-always", release_always),
            ("--reject", reject),
        ):
            if offsets:
                args += [flag, ",".join(str(o) for o in offsets)]
        if hold:
            args += ["--hold", "true"]
        return self.start("kgc.clients.ShareConsume", args, name=name or group)

    def produce(
        self,
        bootstrap: str,
        topic: str,
        count: int,
        *,
        compression: Iterable[str] = ("none",),
        keys: Iterable[str] | None = None,
        idempotent: bool = True,
        partition: int | None = None,
        value_prefix: str = "v-",
        timeout: float = 90.0,
        expect_ok: bool = True,
    ) -> list[Event]:
        """Runs Produce to the end (``topic`` may name several, comma-separated). The
        acknowledgements, every record acknowledged; or with ``expect_ok=False`` the refusals
        (``nack`` events, each with the error class the client raised), at least one."""
        args = [*common_args(bootstrap, self.config), "--topic", topic, "--count", str(count)]
        args += ["--compression", ",".join(compression), "--idempotent", str(idempotent).lower()]
        args += ["--value-prefix", value_prefix]
        if keys is not None:
            args += ["--keys", ",".join(keys)]
        if partition is not None:
            args += ["--partition", str(partition)]
        c = self.start("kgc.clients.Produce", args)
        rc = c.wait_exit(timeout)
        if not expect_ok:
            assert rc == 1 and c.of("nack"), c.describe()
            return c.of("nack")
        assert rc == 0, c.describe()
        return c.of("ack")

    def admin(
        self, bootstrap: str, steps: Iterable[dict[str, Any]], timeout: float = 120.0
    ) -> list[Event]:
        """Runs Admin over ``steps`` (one JVM); one result event per step, in order."""
        args = [*common_args(bootstrap, self.config), *(json.dumps(s) for s in steps)]
        c = self.start("kgc.clients.Admin", args)
        rc = c.wait_exit(timeout)
        assert rc == 0, c.describe()
        return c.of("result")

    def admin_session(self, bootstrap: str) -> AdminSession:
        """Admin reading its steps from standard input: one step, one answer, interleaved."""
        return AdminSession(self.start("kgc.clients.Admin", common_args(bootstrap, self.config)))

    def close(self) -> None:
        for c in self.running:
            c.kill()


class AdminSession:
    def __init__(self, client: JavaClient) -> None:
        self.client = client

    def __call__(self, op: str, **args: Any) -> Event:
        at = self.client.mark()
        self.client.send(json.dumps({"op": op, **args}))
        return self.client.wait_event("result", after=at, timeout=60)

    def ok(self, op: str, **args: Any) -> Any:
        """The call's result; fails the test when the call as a whole failed."""
        r = self(op, **args)
        assert r["ok"], r
        return r["result"]


def status(client: JavaClient) -> Event:
    return client.request("status", "status")


def assignment(client: JavaClient) -> set[Partition]:
    return {(t, p) for t, p in status(client)["assignment"]}


def wait_assignments(
    members: list[JavaClient], expected: set[Partition], timeout: float = 60.0
) -> list[set[Partition]]:
    """Wait until the members' assignments are disjoint, non-empty and cover ``expected``."""
    deadline = time.monotonic() + timeout
    while True:
        current = [assignment(m) for m in members]
        union: set[Partition] = set().union(*current)
        disjoint = sum(len(a) for a in current) == len(union)
        if union == expected and disjoint and all(current):
            return current
        if time.monotonic() > deadline:
            raise AssertionError(
                f"assignments {current} never covered {sorted(expected)} disjointly:\n"
                + "\n".join(m.describe() for m in members)
            )
        time.sleep(0.2)  # polling the members' state with a deadline
