"""Share consumers (KIP-932) against kgc and Apache Kafka 4.4: throughput and ack latency.

How this works: each target server (``kgc``: ``kgc serve`` with the default flush policy,
fsync per round; ``kafka``: Apache Kafka 4.4.0 from ``tests/jvm``, KRaft, one node) is started
alone, in turn, so the two never share the machine's two cores. For each scenario (1 or 3
share consumers x 1 or 4 partitions) a fresh topic gets ``--records`` records of 100 bytes,
the group's ``share.auto.offset.reset`` is set to earliest, and the consumers -- separate
processes, confluent-kafka's ``ShareConsumer`` in implicit mode (each poll accepts the
previous one's records) -- consume until every record was delivered. Reported: records
acquired and acknowledged per second (wall clock, from the first consumer starting to the
last record delivered), the server's CPU seconds over that time and records per server
CPU-second. The acknowledgement latency is a single explicit-mode consumer calling
``commit_sync`` after each poll (each ShareAcknowledge is durable before it is answered):
p50/p99 of that call.

    python bench/bench_share.py [--records 20000] [--targets kgc,kafka]
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
    got, lat, last = 0, [], time.time()
    while True:
        line = sys.stdin.readline()  # "poll": one round; "stop": finish
        if line.strip() == "stop":
            break
        msgs = [m for m in (c.poll(0.2) or []) if m.error() is None]
        if explicit and msgs:
            for m in msgs:
                c.acknowledge(m)
            t0 = time.perf_counter()
            c.commit_sync()
            lat.append((time.perf_counter() - t0) * 1000)
        got += len(msgs)
        if msgs:
            last = time.time()
        print(json.dumps({"got": got, "last": last, "lat": lat[-len(msgs):] if explicit else []}), flush=True)
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
        self.lat: list[float] = []

    def until(self, total: int, deadline_s: float = 300) -> None:
        deadline = time.time() + deadline_s
        while sum(self.got) < total:
            assert time.time() < deadline, f"{sum(self.got)} of {total} records"
            for p in self.procs:
                assert p.stdin is not None
                p.stdin.write("poll\n")
                p.stdin.flush()
            for i, p in enumerate(self.procs):
                assert p.stdout is not None
                line = json.loads(p.stdout.readline())
                self.got[i], self.last[i] = line["got"], line["last"]
                self.lat.extend(line["lat"])

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
    """Consumers joined and served first (one warm-up record per partition), then
    ``records`` produced and consumed: end to end, the server's CPU over that window."""
    prepare(t, name, name, partitions)
    group = Consumers(t, name, name, consumers, explicit)
    try:
        produce(t, name, partitions, partitions)
        group.until(partitions)
        group.lat.clear()
        cpu0, start = cpu_seconds(t.pid), time.time()
        produce(t, name, partitions, records)
        group.until(partitions + records)
        cpu = cpu_seconds(t.pid) - cpu0
        elapsed = max(max(group.last) - start, 1e-6)
    finally:
        group.close()
    out = {"records": float(records), "seconds": elapsed, "rate": records / elapsed}
    out["server_cpu_s"] = cpu
    out["per_cpu_s"] = records / cpu if cpu > 0 else 0.0
    if group.lat:
        lat = sorted(group.lat)
        out["ack_p50_ms"] = statistics.median(lat)
        out["ack_p99_ms"] = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--targets", default="kgc,kafka")
    args = ap.parse_args()
    starters = {"kgc": start_kgc, "kafka": start_kafka}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-share-") as tmp:
        for name in args.targets.split(","):
            (Path(tmp) / name).mkdir()
            t = starters[name](Path(tmp) / name)
            try:
                for consumers in (1, 3):
                    for partitions in (1, 4):
                        label = f"{consumers} consumer(s) x {partitions} partition(s)"
                        r = scenario(
                            t,
                            f"s-{consumers}-{partitions}",
                            consumers,
                            partitions,
                            args.records,
                            False,
                        )
                        rows.append((name, label, r))
                        print(name, label, json.dumps(r), flush=True)
                label = "explicit acks, commit_sync per poll"
                r = scenario(t, "ack", 1, 1, min(args.records, 5000), True)
                rows.append((name, label, r))
                print(name, label, json.dumps(r), flush=True)
            finally:
                t.stop()
    print()
    print(
        "| target | scenario | records/s | server CPU s | records per server CPU-s | ack p50 ms | ack p99 ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, label, r in rows:
        p50 = f"{r['ack_p50_ms']:.1f}" if "ack_p50_ms" in r else ""
        p99 = f"{r['ack_p99_ms']:.1f}" if "ack_p99_ms" in r else ""
        print(
            f"| {name} | {label} | {r['rate']:.0f} | {r['server_cpu_s']:.2f} | "
            f"{r['per_cpu_s']:.0f} | {p50} | {p99} |"
        )


if __name__ == "__main__":
    main()
