"""Kafka's Java client through a SIGKILL of its groups' coordinator in a kgc cluster.

How this works: three ``kgc serve`` nodes on the session's PostgreSQL (``clusterkit``, 3 s
session timeout, 500 ms heartbeats) and one JVM (``kgc.secure.ClusterGroup``) running a
producer (acks=all, idempotent) writing steadily to a 6-partition topic and two groups of two
consumers each, one per protocol: ``group.protocol=classic`` and ``consumer`` (KIP-848).
The two group ids are chosen so the same node coordinates both. Each member commits its
positions synchronously after every poll; the JVM counts what was acknowledged.

The test lets the groups consume and commit, then pauses commits (the JVM answers once the
commits in flight have returned, with each group's acknowledged offsets), SIGKILLs the
coordinator, and reads the groups' committed offsets from the node that takes over: they must
be at least the acknowledged ones (nothing acknowledged lost in the failover; with commits
paused, a lost commit cannot be hidden by a later one). Commits resume; the groups must find
the new coordinator by themselves and get commits acknowledged, and keep consuming. At the
end the producer stops, every record the producer was told was written must have been
consumed by each group, and each group's committed offsets (as the AdminClient lists them)
are the log end.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from support.clusterkit import Cluster
from support.groupkit import create_topic, wait_until
from support.kafkaserver import java_command

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import offset_fetch

pytestmark = [pytest.mark.kafka, pytest.mark.integration, pytest.mark.postgres]

PARTITIONS = 6
MEMBERS = 2
# What a client retries after asking FindCoordinator again (a hand-over in progress).
RETRIABLE = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
}


class Driver:
    """The JVM's standard input (commands) and output (events, read by a thread)."""

    def __init__(self, cmd: list[str], log: Path) -> None:
        self.stderr: IO[bytes] = open(log, "wb")  # noqa: SIM115 (closed in close())
        self.log = log
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True
        )
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                with self.lock:
                    self.events.append(json.loads(line))

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def last(self, event: str) -> dict[str, Any] | None:
        with self.lock:
            for e in reversed(self.events):
                if e["event"] == event:
                    return e
        return None

    def wait_for(
        self, event: str, timeout: float, ok: Callable[[dict[str, Any]], bool] = lambda e: True
    ) -> dict[str, Any]:
        found: list[dict[str, Any]] = []

        def seen() -> bool:
            assert self.proc.poll() is None or event == "finished", self.tail()
            e = self.last(event)
            if e is not None and ok(e):
                found.append(e)
                return True
            return False

        try:
            wait_until(seen, timeout=timeout, interval=0.05, what=f"the JVM's {event}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last progress {self.last('progress')}") from None
        return found[-1]

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        self.stderr.close()


def same_coordinator_groups(cluster: Cluster, prefix: str) -> tuple[str, str]:
    """Two group ids whose offsets partitions the same node leads."""
    leaders = cluster.offsets_leaders()
    first = f"{prefix}-classic"
    node = leaders[cluster.offsets_partition(first)]
    for i in range(10_000):
        second = f"{prefix}-consumer-{i}"
        if leaders[cluster.offsets_partition(second)] == node:
            return first, second
    raise AssertionError("no second group on the same coordinator")


def committed_at_coordinator(cluster: Cluster, group: str) -> tuple[int, dict[int, int]]:
    """(node, committed offsets) from the node coordinating ``group``, asked as a client
    does: FindCoordinator, then OffsetFetch there, again while that node is not (yet) it."""
    found: list[tuple[int, dict[int, int]]] = []

    def fetched() -> bool:
        node = cluster.coordinator_of(group, timeout=60)
        try:
            with Connection.to(cluster.nodes[node].bootstrap, timeout=5) as c:
                _, resp = c.request(
                    offset_fetch.API_KEY,
                    offset_fetch.Request(
                        groups=[offset_fetch.OffsetFetchRequestGroup(group_id=group, topics=None)]
                    ),
                    version=8,
                )
        except OSError:  # the node went away between the two questions
            return False
        (g,) = resp.groups
        if g.error_code in RETRIABLE:
            return False
        assert g.error_code == 0, g
        found.append(
            (node, {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions})
        )
        return True

    wait_until(fetched, timeout=60, interval=0.05, what=f"{group}'s offsets at its coordinator")
    return found[-1]


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, pg_url, nodes=3)
    try:
        c.start_all()
        yield c
    finally:
        c.close()


def test_java_groups_survive_sigkill_of_their_coordinator(cluster: Cluster, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    topic = f"java-failover-{tag}"
    create_topic(cluster.nodes[1].bootstrap, topic, PARTITIONS)
    cluster.wait_topic_led(topic)
    classic, consumer = same_coordinator_groups(cluster, f"java-{tag}")
    groups = (classic, consumer)
    victim = cluster.coordinator_of(classic)
    assert cluster.coordinator_of(consumer) == victim

    cmd = java_command(
        "kgc.secure.ClusterGroup",
        cluster.all_bootstrap,
        topic,
        str(PARTITIONS),
        str(MEMBERS),
        f"{classic}:classic",
        f"{consumer}:consumer",
    )
    jvm = Driver(cmd, tmp_path / "jvm.log")
    try:

        def busy(floor: int, commits: str, n: int) -> Callable[[dict[str, Any]], bool]:
            return lambda e: all(
                e["groups"][g]["records"] >= floor and e["groups"][g][commits] >= n for g in groups
            )

        # Both groups consume and commit before the fault.
        jvm.wait_for("progress", timeout=60, ok=busy(200, "commits", 10))
        jvm.send("pause")
        acked = jvm.wait_for("paused", timeout=60)["acked"]
        assert all(acked[g] for g in groups), acked
        before = jvm.last("progress")
        assert before is not None

        cluster.kill(victim)
        killed = time.monotonic()
        # What the new coordinator holds: at least every commit acknowledged before the kill.
        # (The victim's partitions are spread over the others: each group's own new node.)
        new: dict[str, int] = {}
        for g in groups:
            new[g], got = committed_at_coordinator(cluster, g)
            assert new[g] != victim
            behind = {
                p: (got.get(int(p)), o) for p, o in acked[g].items() if got.get(int(p), -1) < o
            }
            assert not behind, f"{g}: committed offsets behind acknowledged ones: {behind}"

        jvm.send("resume")
        # The groups find the new coordinator themselves: commits acknowledged again, and
        # records keep coming (the producer writes through the failover).
        floor = max(before["groups"][g]["records"] for g in groups) + 200
        jvm.wait_for("progress", timeout=90, ok=busy(floor, "commits_after_resume", 5))
        took = time.monotonic() - killed
        after = jvm.last("progress")
        assert after is not None and after["produced"] > before["produced"]

        jvm.send("finish")
        done = jvm.wait_for("finished", timeout=120)
        assert jvm.proc.wait(30) == 0, jvm.tail()
    finally:
        jvm.close()

    print(f"\nSIGKILL of coordinator node {victim}: groups committing again on {new} "
          f"within {took:.1f} s; {done['produced']} records produced")  # fmt: skip
    assert not done["produce_errors"], done["produce_errors"]
    ends = done["log_end"]
    assert len(ends) == PARTITIONS and all(o > 0 for o in ends.values()), ends
    for g in groups:
        report = done["groups"][g]
        assert report["missing_count"] == 0, (g, report)  # every acknowledged record consumed
        assert report["committed"] == ends, (g, report)  # and committed, to the log end
        assert all(report["committed"][p] >= o for p, o in acked[g].items()), (g, report)
        assert not [e for e in report["errors"] if e.startswith("member died")], (g, report)
