"""Every history command of ``kgc`` on real groups, printed as an operator sees it.

How this works: two fresh ``kgc serve`` processes (A and B, each on its own local log) are
started; A gets the topic ``orders`` (3 partitions, 30 records each) and B a copy of it
that starts with 7 records of its own (so the same records sit at other offsets there).
Real confluent-kafka consumers of group ``billing`` (subscribed: member ids, client ids
and hosts are recorded) commit twice, a second apart; another group, ``stuck``, keeps
committing the same offset while records arrive (STALL), and a third, ``gone``, commits once
and stops (STOP, with ``--offsets-status-stop-ms`` 15000). Then each command runs as a
subprocess, exactly as typed, and the transcript (command, output, exit status) is printed:
``offsets history`` (table, JSON, one partition, a time window), ``groups history``,
``offsets reset`` then ``offsets undo``, ``offsets restore --as-of`` a time between the two
commits, ``groups describe`` with the STATUS column, the status metrics, ``offsets
translate`` from A to B and back, and the bad inputs (a time before the history, an
unknown group, a group with an active member, an unreachable target), each of which must
exit non-zero and change nothing.

Usage: ``python bench/demo_history.py [--out FILE]`` (the transcript also goes to stdout).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import checkout  # noqa: F401  (puts this checkout and tests/ on the import path)
from confluent_kafka import Consumer, Producer, TopicPartition
from support.kgc_process import KgcProcess

TOPIC = "orders"
PARTITIONS = 3
STOP_MS = 15_000


class Transcript:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, text: str) -> None:
        self.lines.append(text)
        print(text, flush=True)

    def run(self, *args: str, expect_ok: bool = True, show: int | None = None) -> str:
        cmd = ["kgc", *args]
        done = subprocess.run(
            [sys.executable, "-m", "coordinator", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        out = (done.stdout + done.stderr).rstrip("\n")
        shown = out.splitlines()
        if show is not None and len(shown) > show:
            shown = [*shown[:show], f"... ({len(out.splitlines()) - show} more lines)"]
        self.say(f"$ {shlex.join(cmd)}")
        for line in shown:
            self.say(line)
        self.say(f"(exit {done.returncode})\n")
        if expect_ok != (done.returncode == 0):
            raise SystemExit(f"unexpected exit {done.returncode} from {shlex.join(cmd)}:\n{out}")
        return done.stdout


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def produce(bootstrap: str, start: int, n: int, own: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    # an hour ago, the same on both clusters (the copies' timestamps are equal)
    base_ms = (int(time.time()) // 3600 - 1) * 3_600_000
    for part in range(PARTITIONS):
        for i in range(own):  # records only this cluster has, before the copies
            p.produce(TOPIC, key=b"local", value=f"local-{i}".encode(), partition=part)
        for i in range(start, start + n):
            p.produce(
                TOPIC,
                key=f"k{part}-{i}".encode(),
                value=f"order {part}/{i}".encode(),
                partition=part,
                timestamp=base_ms + i * 1000,
            )
    assert p.flush(30) == 0


def consumer(bootstrap: str, group: str, client_id: str) -> Consumer:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": client_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe([TOPIC])
    return c


def consume(c: Consumer, per_partition: int) -> None:
    """Poll until ``per_partition`` more records of each partition were read."""
    want = {p: per_partition for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while any(want.values()):
        if time.monotonic() > deadline:
            raise SystemExit("consumer read too little")
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        part = m.partition()
        assert part is not None
        want[part] -= 1
        if want[part] == 0:
            # stop reading this partition: the commit points exactly past these records
            c.pause([TopicPartition(TOPIC, part)])
    c.resume([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])


def metrics(kgc: KgcProcess, group: str) -> list[str]:
    url = f"http://127.0.0.1:{kgc.metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return [
        line
        for line in text.splitlines()
        if line.startswith(("kgc_consumergroup_partition_status", "kgc_consumergroup_status"))
        and f'group="{group}"' in line
        and line.endswith((" 1", " 1.0"))
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", help="also write the transcript here")
    ap.add_argument("--keep", action="store_true", help="keep the servers' data and logs")
    args = ap.parse_args()
    t = Transcript()
    with tempfile.TemporaryDirectory(prefix="kgc-demo-") as tmp:
        base = tempfile.mkdtemp(prefix="kgc-demo-") if args.keep else tmp
        a = KgcProcess(Path(base) / "a", "--offsets-status-stop-ms", str(STOP_MS))
        b = KgcProcess(Path(base) / "b")
        for k in (a, b):
            k.data_dir.mkdir()
            k.start()
        try:
            demo(t, a, b)
        finally:
            for k in (a, b):
                k.stop()
    if args.out:
        Path(args.out).write_text("\n".join(t.lines) + "\n")


def demo(t: Transcript, a: KgcProcess, b: KgcProcess) -> None:
    A, B = a.bootstrap, b.bootstrap
    t.say(f"# A = kgc serve at {A}, B = kgc serve at {B} (each on its own local log)\n")
    for k in (A, B):
        t.run("topics", "create", TOPIC, "--partitions", str(PARTITIONS), "--bootstrap-server", k)
    produce(A, 0, 30)
    produce(B, 0, 30, own=7)

    t.say(
        "# group billing: one subscribed confluent-kafka consumer commits 10, then 25 a partition"
    )
    c = consumer(A, "billing", "billing-app")
    consume(c, 10)
    c.commit(asynchronous=False)
    first = int(time.time() * 1000)
    time.sleep(1.5)
    between = int(time.time() * 1000)
    time.sleep(1.5)
    consume(c, 15)
    c.commit(asynchronous=False)
    c.close()

    t.run("offsets", "history", "billing", "--bootstrap-server", A)
    out = t.run(
        "offsets", "history", "billing", "--output", "json", "--bootstrap-server", A, show=0
    )
    rows = json.loads(out)
    t.say(f"(JSON: {len(rows)} objects; the first:)")
    t.say(json.dumps(rows[0], indent=2) + "\n")
    t.run("offsets", "history", "billing", "--topic", f"{TOPIC}:1", "--bootstrap-server", A)
    t.run("offsets", "history", "billing", "--from", iso(between), "--bootstrap-server", A)
    t.run("groups", "history", "billing", "--bootstrap-server", A)

    t.say("# a bad reset, undone")
    t.run(
        "offsets",
        "reset",
        "billing",
        "--topic",
        TOPIC,
        "--to-earliest",
        "--execute",
        "--bootstrap-server",
        A,
    )
    t.run("offsets", "undo", "billing", "--dry-run", "--bootstrap-server", A)
    t.run("offsets", "undo", "billing", "--execute", "--bootstrap-server", A)
    t.say(f"# back to a time between the two commits (first commit at {iso(first)})")
    t.run(
        "offsets",
        "restore",
        "billing",
        "--as-of",
        iso(between),
        "--execute",
        "--bootstrap-server",
        A,
    )
    t.run("offsets", "history", "billing", "--from", iso(between), "--bootstrap-server", A)

    t.say("# group gone commits once and stops; group stuck keeps committing offset 5 every")
    t.say(f"# second while records arrive (kgc A runs with --offsets-status-stop-ms {STOP_MS})")
    gone = consumer(A, "gone", "gone-app")
    consume(gone, 5)
    gone.commit(asynchronous=False)
    gone_at = time.monotonic()
    gone.close()
    stuck = consumer(A, "stuck", "stuck-app")
    consume(stuck, 5)
    at5 = [TopicPartition(TOPIC, p, 5) for p in range(PARTITIONS)]
    done = threading.Event()

    def stuck_loop() -> None:
        i = 0
        while not done.is_set():
            stuck.commit(offsets=at5, asynchronous=False)
            stuck.poll(0)  # serves the group's callbacks; the partitions stay paused
            produce(A, 100 + i, 1)
            i += 1
            done.wait(1.0)

    stuck.pause(at5)
    committer = threading.Thread(target=stuck_loop, daemon=True)
    committer.start()
    time.sleep(max(0.0, gone_at + STOP_MS / 1000 + 1 - time.monotonic()))
    t.run("groups", "describe", "stuck", "gone", "billing", "--bootstrap-server", A)
    t.say("$ curl -s http://127.0.0.1:<metrics-port>/metrics | grep status  (the 1s)")
    for line in metrics(a, "stuck") + metrics(a, "gone"):
        t.say(line)
    t.say("")

    t.say("# bad input: one line each, exit non-zero, nothing changed")
    t.run(
        "offsets",
        "restore",
        "billing",
        "--as-of",
        "2020-01-01T00:00:00",
        "--dry-run",
        "--bootstrap-server",
        A,
        expect_ok=False,
    )
    t.run("offsets", "history", "nobody", "--bootstrap-server", A, expect_ok=False)
    t.run(
        "offsets",
        "restore",
        "stuck",
        "--as-of",
        iso(between),
        "--dry-run",
        "--bootstrap-server",
        A,
        expect_ok=False,
    )
    done.set()
    committer.join()
    stuck.close()
    t.run(
        "offsets",
        "translate",
        "billing",
        "--to-bootstrap-server",
        "127.0.0.1:1",
        "--timeout",
        "2",
        "--bootstrap-server",
        A,
        expect_ok=False,
    )

    t.say("# translate: B holds the same records 7 offsets later")
    t.run(
        "offsets",
        "translate",
        "billing",
        "--to-bootstrap-server",
        B,
        "--execute",
        "--bootstrap-server",
        A,
    )
    t.run(
        "offsets",
        "translate",
        "billing",
        "--to-bootstrap-server",
        A,
        "--dry-run",
        "--bootstrap-server",
        B,
    )


if __name__ == "__main__":
    main()
