"""kafka-verifiable-producer and kafka-verifiable-consumer against kgc while kgc restarts.

A producer (acks=all; the tool sends without retries) writes 2,000 records over about ten
seconds; two groups, one classic and one consumer-protocol (KIP-848), each of two verifiable
consumers committing after every batch, read them. Meanwhile kgc is stopped and started twice: once cleanly (SIGTERM),
once killed (SIGKILL). The tools print every event as a JSON line; a poller asks kgc for the
groups' committed offsets every 100 ms. Checked:

* every record the producer got an acknowledgement for was consumed by each group;
* committed offsets never go backwards, as kgc answers them over time, and an offset a
  consumer was told was committed is never answered lower afterwards (across the restarts);
* at the end each group has committed the log end of every partition (a consumer-protocol
  member's commit with an older epoch is accepted for partitions it has held since, KIP-1251).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import pytest
from support.kafkaserver import java_command
from support.kgc_process import KgcProcess
from support.tools_kit import VERIFIABLE_CONSUMER, VERIFIABLE_PRODUCER
from support.tools_setup import committed, create_topic, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

TOPIC = "kt.verifiable.t"
PARTITIONS = 3
MESSAGES = 2000
GROUPS = {"kt.verifiable.classic": "classic", "kt.verifiable.consumer": "consumer"}


@dataclass
class Tool:
    """A tool process whose JSON event lines are collected, each with its arrival time."""

    name: str
    proc: subprocess.Popen[str]
    events: list[tuple[float, dict]] = field(default_factory=list)  # type: ignore[type-arg]
    thread: threading.Thread | None = None

    @classmethod
    def start(cls, name: str, main: str, *args: str) -> Tool:
        proc = subprocess.Popen(
            java_command(main, *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        tool = cls(name, proc)
        tool.thread = threading.Thread(target=tool._read, daemon=True)
        tool.thread.start()
        return tool

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append((time.monotonic(), json.loads(line)))

    def named(self, name: str) -> list[tuple[float, dict]]:  # type: ignore[type-arg]
        return [(t, e) for t, e in list(self.events) if e.get("name") == name]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.thread is not None:
            self.thread.join(10)


def consumed_by(consumers: list[Tool]) -> set[tuple[int, int]]:
    """(partition, offset) of every record the consumers printed as consumed (batches are
    runs of consecutive offsets)."""
    consumed: set[tuple[int, int]] = set()
    for c in consumers:
        for _, e in c.named("records_consumed"):
            for p in e["partitions"]:
                assert p["count"] == p["maxOffset"] - p["minOffset"] + 1, p
                consumed.update(
                    (p["partition"], o) for o in range(p["minOffset"], p["maxOffset"] + 1)
                )
    return consumed


class Poller:
    """Asks kgc for the groups' committed offsets every 100 ms: (asked at, group, offsets)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.seen: list[tuple[float, str, dict[tuple[str, int], int]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.1):
            for group in GROUPS:
                asked = time.monotonic()
                try:
                    offsets = committed(self.bootstrap, group)
                except (OSError, AssertionError):
                    continue  # kgc is down, or its offsets are still loading
                self.seen.append((asked, group, offsets))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


def test_nothing_acknowledged_is_lost_while_kgc_restarts(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, TOPIC, PARTITIONS)
    boot = ["--bootstrap-server", kgc.bootstrap]
    consumers = [
        Tool.start(
            f"{group}-{i}",
            VERIFIABLE_CONSUMER,
            *boot,
            "--topic",
            TOPIC,
            "--group-id",
            group,
            "--group-protocol",
            protocol,
            "--reset-policy",
            "earliest",
            # A consumer-protocol member takes its session timeout from the group.
            *(["--session-timeout", "10000"] if protocol == "classic" else []),
        )
        for group, protocol in GROUPS.items()
        for i in range(2)
    ]
    poller = Poller(kgc.bootstrap)
    producer = Tool.start(
        "producer",
        VERIFIABLE_PRODUCER,
        *boot,
        "--topic",
        TOPIC,
        "--max-messages",
        str(MESSAGES),
        "--throughput",
        "200",
        "--acks",
        "-1",
        "--repeating-keys",  # keyed, so every partition gets records
        "30",
    )
    try:
        # Restart kgc twice while records flow and both groups consume: cleanly, then killed.
        for acked, restart in ((MESSAGES // 4, kgc.stop), (MESSAGES // 2, kgc.kill)):
            wait_until(
                f"{acked} records acknowledged and consumed in each group",
                lambda n=acked: (
                    len(producer.named("producer_send_success")) >= n
                    and all(
                        consumed_by([c for c in consumers if c.name.startswith(g)]) for g in GROUPS
                    )
                ),
                timeout=60,
            )
            restart()
            kgc.start()
        assert producer.proc.wait(120) == 0
        acked_offsets = {
            (e["partition"], e["offset"]) for _, e in producer.named("producer_send_success")
        }
        # The tool sends with retries=0: records in flight when kgc goes away fail (and are
        # not acknowledged); most are.
        assert len(acked_offsets) >= MESSAGES * 3 // 4, producer.named("producer_send_error")
        for group in GROUPS:
            ours = [c for c in consumers if c.name.startswith(group)]
            wait_until(
                f"{group} consumed every acknowledged record",
                lambda ours=ours: not acked_offsets - consumed_by(ours),
                timeout=90,
            )
        want: dict[tuple[str, int], int] = {}
        for part, offset in acked_offsets:
            want[(TOPIC, part)] = max(want.get((TOPIC, part), 0), offset + 1)
        for group in GROUPS:
            wait_until(
                f"{group} committed the log end",
                lambda g=group: committed(kgc.bootstrap, g) == want,
                timeout=60,
            )
    finally:
        producer.stop()
        for c in consumers:
            c.stop()
        poller.close()

    for group in GROUPS:
        ours = [c for c in consumers if c.name.startswith(group)]
        consumed = consumed_by(ours)
        missing = acked_offsets - consumed
        assert not missing, f"{group}: {len(missing)} acknowledged records never consumed"

        # Committed offsets, as kgc answered them over time, never went backwards.
        latest: dict[tuple[str, int], int] = {}
        answers = [(t, offsets) for t, g, offsets in poller.seen if g == group]
        assert answers, f"{group}: the poller got no answer"
        for t, offsets in answers:
            for tp, offset in offsets.items():
                assert offset >= latest.get(tp, -1), f"{group} {tp} went back to {offset} at {t}"
                latest[tp] = offset
        # No commit a consumer was told succeeded was answered lower later (restarts included).
        confirmed = defaultdict(list)
        for c in ours:
            for t, e in c.named("offsets_committed"):
                if e["success"]:
                    for o in e["offsets"]:
                        confirmed[(o["topic"], o["partition"])].append((t, o["offset"]))
        assert confirmed, f"{group}: no commit succeeded"
        for tp, commits in confirmed.items():
            for t_commit, offset in commits:
                later = [offsets[tp] for t, offsets in answers if t > t_commit and tp in offsets]
                assert all(v >= offset for v in later), (
                    f"{group} {tp}: {offset} lost after {t_commit}"
                )
