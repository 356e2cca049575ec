"""Share consumers (KIP-932) against kgc and Apache Kafka 4.4: throughput and ack latency.

How this works: each target server (``kgc``: ``kgc serve`` with the default flush policy,
fsync per round; ``kafka``: Apache Kafka 4.4.0 from ``tests/jvm``, KRaft, one node) is started
alone, in turn, so the two never share the machine's two cores. For each scenario (1 or 3
share consumers x 1 or 4 partitions) a fresh topic gets ``--records`` records of 100 bytes,
the group's ``share.auto.offset.reset`` is set to earliest, and the consumers -- separate
processes, confluent-kafka's ``ShareConsumer`` in implicit mode (each poll accepts the
previous one's records) -- consume until every record was delivered. The consumers poll
in rounds, all at once (``poll(0.2)``, ``fetch.wait.max.ms`` 100), so a round lasts as long
as its slowest poll. Measuring starts once every consumer has been served a record
(``Consumers.warm``): members that joined before the partitions' share state was
initialized are assigned them only at their next heartbeat, up to 5 s later. Reported:
records acquired and acknowledged per second (wall clock, from the measured records'
production starting to the last of them delivered), the server's CPU seconds over that
time and records per server CPU-second, how many consumers were served in that window,
and how long after the consumers started the last of them was first served. The
acknowledgement latency is a single explicit-mode consumer calling ``commit_sync`` after
each poll (each ShareAcknowledge is durable before it is answered): p50/p99 of that call.

``--cases 3x1 --rounds 5`` runs only the named scenarios (consumers x partitions, ``ack``),
in rounds that alternate which target goes first (each round starts the servers afresh),
and prints each scenario's median; every poll's record count is kept, so the output also
says how many polls of the measured window came back empty and how many records a
non-empty one held.

    python bench/bench_share.py [--records 20000] [--targets kgc,kafka] [--cases 3x1] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

CONSUMER = textwrap.dedent(
    """
    import json, sys, time
    from confluent_kafka import ShareConsumer
    bootstrap, group, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    explicit = sys.argv[5] == "explicit"
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "fetch.wait.max.ms": 100}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    c = ShareConsumer(conf)
    c.subscribe([topic])
    print("ready", flush=True)
    got, lat, last, first = 0, [], time.time(), 0.0
    while True:
        line = sys.stdin.readline()  # "poll": one round; "stop": finish
        if line.strip() == "stop":
            break
        t0 = time.time()
        msgs = [m for m in (c.poll(0.2) or []) if m.error() is None]
        poll_ms = (time.time() - t0) * 1000
        if explicit and msgs:
            for m in msgs:
                c.acknowledge(m)
            t0 = time.perf_counter()
            c.commit_sync()
            lat.append((time.perf_counter() - t0) * 1000)
        got += len(msgs)
        if msgs:
            last = time.time()
            first = first or last
        lats = lat[-1:] if explicit and msgs else []  # this poll's commit_sync
        print(json.dumps({"got": got, "last": last, "lat": lats, "n": len(msgs), "ms": poll_ms, "first": first}), flush=True)
    c.close()
    """
)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (/proc/<pid>/stat), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Target:
    name: str
    bootstrap: str
    pid: int
    stop: Callable[[], None]


def start_kgc(workdir: Path) -> Target:
    from support.kgc_process import KgcProcess

    kgc = KgcProcess(workdir / "kgc")
    kgc.start()
    kgc.wait_loaded()
    assert kgc.proc is not None
    return Target("kgc", kgc.bootstrap, kgc.proc.pid, kgc.stop)


def start_kafka(workdir: Path) -> Target:
    from support.kafkaserver import KafkaServer

    kafka = KafkaServer(
        workdir / "kafka", overrides={"group.initial.rebalance.delay.ms": "0"}, fast_start=False
    )
    kafka.start(timeout=180)
    assert kafka.proc is not None
    return Target("kafka", kafka.bootstrap, kafka.proc.pid, kafka.stop)


def prepare(t: Target, topic: str, group: str, partitions: int) -> None:
    """The topic, and the group's share.auto.offset.reset set to earliest."""
    admin = AdminClient({"bootstrap.servers": t.bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(60)
    entry = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(60)


def produce(t: Target, topic: str, partitions: int, records: int) -> None:
    p = Producer({"bootstrap.servers": t.bootstrap, "linger.ms": 20, "batch.num.messages": 1000})
    value = b"x" * 100
    for i in range(records):
        p.produce(topic, value=value, partition=i % partitions)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(120) == 0


class Consumers:
    """Share consumers in their own processes, polled in rounds."""

    def __init__(self, t: Target, topic: str, group: str, n: int, explicit: bool) -> None:
        mode = "explicit" if explicit else "implicit"
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", CONSUMER, t.bootstrap, group, topic, "0", mode],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(n)
        ]
        for p in self.procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        self.got = [0] * n
        self.last = [0.0] * n
        self.first = [0.0] * n  # when each consumer was first served a record
        self.started = time.time()
        self.lat: list[float] = []
        # Per poll: (consumer, records it returned, its duration in ms).
        self.polls: list[tuple[int, int, float]] = []

    def poll(self, which: list[int]) -> None:
        """One round: the consumers ``which`` poll once each, at the same time."""
        for i in which:
            stdin = self.procs[i].stdin
            assert stdin is not None
            stdin.write("poll\n")
            stdin.flush()
        for i in which:
            stdout = self.procs[i].stdout
            assert stdout is not None
            line = json.loads(stdout.readline())
            self.got[i], self.last[i], self.first[i] = line["got"], line["last"], line["first"]
            self.lat.extend(line["lat"])
            self.polls.append((i, line["n"], line["ms"]))

    def until(self, total: int, deadline_s: float = 300) -> None:
        deadline = time.time() + deadline_s
        while sum(self.got) < total:
            assert time.time() < deadline, f"{sum(self.got)} of {total} records"
            self.poll(list(range(len(self.procs))))

    def warm(self, produce_more: Callable[[], int], deadline_s: float = 120) -> int:
        """Until every consumer has been served a record, so each has its assignment (a
        member learns it at its next heartbeat, up to the 5 s heartbeat interval after the
        share state is initialized): each round ``produce_more`` adds records and only the
        consumers not served yet poll. The records produced."""
        deadline = time.time() + deadline_s
        produced = 0
        while min(self.got) == 0:
            assert time.time() < deadline, f"consumers served: {self.got}"
            produced += produce_more()
            self.poll([i for i, g in enumerate(self.got) if g == 0])
        return produced

    def close(self) -> None:
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write("stop\n")
            p.stdin.flush()
        for p in self.procs:
            p.wait(60)


def scenario(
    t: Target, name: str, consumers: int, partitions: int, records: int, explicit: bool
) -> dict[str, float]:
    """Every consumer joined and served first (``Consumers.warm``: warm-up records, one per
    partition a round), then ``records`` produced and consumed: end to end, the server's CPU
    over that window. Measuring once only one consumer had been served let the window hold
    1, 2 or 3 fetching consumers, by the phase of their heartbeats."""
    prepare(t, name, name, partitions)
    group = Consumers(t, name, name, consumers, explicit)

    def one_per_partition() -> int:
        produce(t, name, partitions, partitions)
        return partitions

    try:
        warm = group.warm(one_per_partition)
        group.until(warm)
        group.lat.clear()
        group.polls.clear()
        cpu0, start = cpu_seconds(t.pid), time.time()
        produce(t, name, partitions, records)
        group.until(warm + records)
        cpu = cpu_seconds(t.pid) - cpu0
        elapsed = max(max(group.last) - start, 1e-6)
    finally:
        group.close()
    out = {"records": float(records), "seconds": elapsed, "rate": records / elapsed}
    out["server_cpu_s"] = cpu
    out["per_cpu_s"] = records / cpu if cpu > 0 else 0.0
    full = [n for _, n, _ in group.polls if n > 0]
    out["polls"] = float(len(group.polls))
    out["empty_polls"] = float(len(group.polls) - len(full))
    out["records_per_full_poll"] = statistics.mean(full) if full else 0.0
    out["rounds"] = float(len(group.polls) // consumers)
    out["consumers_served"] = float(len({i for i, n, _ in group.polls if n > 0}))
    # From the consumers started to the last of them served its first record.
    out["all_served_s"] = max(group.first) - group.started
    if group.lat:
        lat = sorted(group.lat)
        out["ack_p50_ms"] = statistics.median(lat)
        out["ack_p99_ms"] = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return out


def run_case(t: Target, case: str, records: int) -> tuple[str, dict[str, float]]:
    if case == "ack":
        label = "explicit acks, commit_sync per poll"
        return label, scenario(t, "ack", 1, 1, min(records, 5000), True)
    consumers, partitions = (int(x) for x in case.split("x"))
    label = f"{consumers} consumer(s) x {partitions} partition(s)"
    return label, scenario(t, f"s-{case.replace('x', '-')}", consumers, partitions, records, False)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--targets", default="kgc,kafka")
    ap.add_argument("--cases", default="1x1,1x4,3x1,3x4,ack")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    starters = {"kgc": start_kgc, "kafka": start_kafka}
    targets = args.targets.split(",")
    cases = args.cases.split(",")
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    for k in range(args.rounds):
        order = targets if k % 2 == 0 else targets[::-1]
        print(f"round {k + 1}: load average {os.getloadavg()}", flush=True)
        for name in order:
            with tempfile.TemporaryDirectory(prefix="bench-share-") as tmp:
                (Path(tmp) / name).mkdir()
                t = starters[name](Path(tmp) / name)
                try:
                    for case in cases:
                        label, r = run_case(t, case, args.records)
                        runs.setdefault((name, label), []).append(r)
                        print(name, label, json.dumps(r), flush=True)
                finally:
                    t.stop()
    print()
    print(
        "| target | scenario | records/s | server CPU s | records per server CPU-s "
        "| ack p50 ms | ack p99 ms | empty polls | records per non-empty poll "
        "| consumers served | all served after s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (name, label), rs in runs.items():
        r = {key: statistics.median(x[key] for x in rs) for key in rs[0]}
        p50 = f"{r['ack_p50_ms']:.1f}" if "ack_p50_ms" in r else ""
        p99 = f"{r['ack_p99_ms']:.1f}" if "ack_p99_ms" in r else ""
        print(
            f"| {name} | {label} | {r['rate']:.0f} | {r['server_cpu_s']:.2f} | "
            f"{r['per_cpu_s']:.0f} | {p50} | {p99} | "
            f"{r['empty_polls']:.0f} of {r['polls']:.0f} | {r['records_per_full_poll']:.0f} | "
            f"{r['consumers_served']:.0f} | {r['all_served_s']:.1f} |"
        )
    if args.rounds > 1:
        print(f"medians of {args.rounds} rounds; per round (records/s):")
        for (name, label), rs in runs.items():
            print(f"  {name} {label}: " + ", ".join(f"{x['rate']:.0f}" for x in rs))


if __name__ == "__main__":
    main()
