"""Time for a Kafka Streams application of 10 instances x 50 tasks to reach a steady
assignment (KIP-1071, ``group.protocol=streams``), kgc beside Apache Kafka 4.4 in one run.

How this works: one kgc (``kgc serve``, its defaults) and one Kafka 4.4 broker (KRaft,
default JIT) run side by side; rounds alternate between them. A round creates a 25-partition
input topic and starts ``kgc.streams.StreamsGroupApp`` (tests/jvm): one JVM that, once it
prints ``ready``, is told to start 10 word-count instances of a new application id at once.
The word count has two subtopologies (the source, then the count behind a repartition
topic the coordinator creates), so 50 tasks. The clock runs from the first ``start``
command to the first moment every instance is RUNNING with five active tasks and the ten
together hold all 50, each once (what Kafka's sticky assignor gives 10 equal members);
each line the JVM prints is stamped as it arrives (the JVM reports every 100 ms); the number
of changes of an instance's task set on the way is printed with each round. The JVM is
then killed; the next round uses new topics and a new application id.

Both servers keep their streams-group defaults: 3 s initial rebalance delay, 5 s heartbeat
interval, 45 s session, no standby. Kafka's default JIT warms up over the first rounds;
the median over ``--rounds`` (default 3 per server) is what to quote.

Usage: ``python bench/bench_streams_steady.py [--rounds 3] [--instances 10] [--partitions 25]``
(``scripts/ensure-jvm-deps`` first).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from confluent_kafka.admin import AdminClient, NewTopic
from results import record  # a sibling: bench/ is where this script runs from


class App:
    """The JVM of instances; every printed line kept with the time it arrived."""

    def __init__(self, bootstrap: str, app: str, topic: str, state: Path) -> None:
        from support.kafkaserver import java_command

        cmd = java_command(
            "kgc.streams.StreamsGroupApp",
            bootstrap,
            app,
            topic,
            f"{topic}-out",
            str(state),
            heap="1g",
        )
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self.lines: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append((time.monotonic(), line.rstrip("\n")))

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


def steady_at(lines: list[tuple[float, str]], n: int, tasks: set[str]) -> tuple[float, int] | None:
    """The arrival time of the first line after which the assignment is steady and how many
    changes of an instance's tasks came before it, or None."""
    state: dict[str, str] = {}
    active: dict[str, list[str]] = {}
    share = len(tasks) // n
    changes = 0
    for at, line in lines:
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == "state":
            state[parts[1]] = parts[2]
        elif len(parts) == 3 and parts[0] == "tasks":
            active[parts[1]] = [t for t in parts[2].split(";")[0].split(",") if t]
            changes += 1
        elif parts[0] == "error":
            raise RuntimeError(line)
        else:
            continue
        held = [t for ts in active.values() for t in ts]
        if (
            len(state) == n
            and all(s == "RUNNING" for s in state.values())
            and len(active) == n
            and all(len(ts) == share for ts in active.values())
            and sorted(held) == sorted(tasks)
        ):
            return at, changes
    return None


def one_round(
    bootstrap: str, n: int, partitions: int, work: Path, timeout: float
) -> tuple[float, int]:
    suffix = uuid.uuid4().hex[:8]
    topic, app = f"in-{suffix}", f"steady-{suffix}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(topic, partitions, 1), NewTopic(f"{topic}-out", partitions, 1)]
    for fut in admin.create_topics(new).values():
        fut.result(60)
    tasks = {f"{s}_{p}" for s in (0, 1) for p in range(partitions)}
    jvm = App(bootstrap, app, topic, work / suffix)
    try:
        deadline = time.monotonic() + 60
        while not any(line == "ready" for _, line in list(jvm.lines)):
            if time.monotonic() > deadline:
                raise RuntimeError("the JVM did not start")
            time.sleep(0.05)
        began = time.monotonic()
        for i in range(1, n + 1):
            jvm.send(f"start {i}")
        deadline = began + timeout
        while time.monotonic() < deadline:
            with jvm.lock:
                lines = list(jvm.lines)
            found = steady_at(lines, n, tasks)
            if found is not None:
                return found[0] - began, found[1]
            time.sleep(0.1)
        dump = work / f"{suffix}.lines"
        dump.write_text("".join(f"{at - began:.3f} {line}\n" for at, line in lines))
        raise RuntimeError(f"no steady assignment in {timeout} s (the JVM's lines: {dump})")
    finally:
        jvm.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=3, help="rounds per server")
    ap.add_argument("--instances", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=25, help="input partitions (tasks / 2)")
    ap.add_argument("--timeout", type=float, default=180.0)
    args = ap.parse_args()
    from support.kafkaserver import KafkaServer
    from support.kgc_process import KgcProcess

    work = Path(tempfile.mkdtemp(prefix="bench-streams-steady-"))
    kgc = KgcProcess(work / "kgc")
    kafka = KafkaServer(work / "kafka", fast_start=False)
    kgc.start()
    kafka.start(timeout=180)
    times: dict[str, list[float]] = {"kgc": [], "kafka": []}
    try:
        for r in range(args.rounds):
            for name, server in (("kgc", kgc), ("kafka", kafka)):
                took, changes = one_round(
                    server.bootstrap, args.instances, args.partitions, work, args.timeout
                )
                times[name].append(took)
                print(f"round {r + 1} {name:<6} {took:6.2f} s ({changes} task changes)", flush=True)
    finally:
        kgc.stop()
        kafka.stop()
    tasks = 2 * args.partitions
    print(f"{args.instances} instances x {tasks} tasks, steady assignment, {args.rounds} rounds")
    print(f"{'server':<8} {'median s':>9} {'min-max s':>14}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<8} {med:>9.2f} {min(ts):>6.2f}-{max(ts):<6.2f}")
        record("streams_steady", name, med, "s", "lower")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
