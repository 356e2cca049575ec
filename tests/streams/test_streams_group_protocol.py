"""Kafka Streams 4.4.0 with ``group.protocol=streams`` (KIP-1071) against a real ``kgc serve``.

How this works: one JVM (``kgc.streams.StreamsGroupApp``) runs word-count instances of one
application, each a KafkaStreams with its own state directory and process id, started and
stopped by commands on its stdin; it prints each instance's state and its active and standby
tasks. kgc is the group coordinator: it creates the repartition and changelog topics the
topology asks for (the changelog compacted), assigns the six tasks (two subtopologies, three
partitions) and one standby replica per stateful task (``group.streams.num.standby.replicas``),
moving tasks revoke-before-assign as instances join. The scenario:

0. the source topic is missing when the first instance starts: the heartbeat reports
   MISSING_SOURCE_TOPICS (the client logs it), the instance waits without tasks until the
   test creates the topic (Kafka Streams gives up after a timeout, ~10 s);
1. one instance reaches RUNNING with every task; the internal topics exist with the
   coordinator's partition counts and the client's configs; counts are exact;
2. two more instances join: the active tasks are split over the three, no task is active
   twice, every standby sits on an instance that does not run the task actively; counts
   stay exact with more input; each instance advertises an application.server and sees,
   through Streams' metadata (the heartbeat's endpoints), every instance's active partitions;
   Kafka's kafka-streams-groups tool lists the group (Stable) and describes its members,
   and refuses to delete it or reset its offsets while it is live;
3. kgc is killed (SIGKILL) and started again on the same data: the group is still listed
   (type streams) and the instances keep counting exactly, without a new internal topic;
4. every instance closes and leaves, the group turns Empty, and Kafka's tool resets the
   input offsets to the earliest (a dry run changes nothing, the execute commits as admin:
   no member, epoch -1) and deletes the group (DeleteGroups), its offsets gone with it.

Where it waits, it waits on the printed lines or on the output, never on bare sleeps.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka.admin import KafkaAdminClient
from support.clikit import run_cli
from support.kafkaserver import java_command
from support.kgc_process import KgcProcess
from support.wordcountkit import Cluster

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

PARTITIONS = 3
# Kafka's consumer logs the heartbeat's statuses; MISSING_SOURCE_TOPICS is status 1.
MISSING = "(1) Source topics in are missing."
ALL_TASKS = {f"{s}_{p}" for s in (0, 1) for p in range(PARTITIONS)}


class App:
    """The JVM of streams-protocol instances; its lines collected by a reader thread."""

    def __init__(self, bootstrap: str, app: str, state: Path) -> None:
        cmd = java_command("kgc.streams.StreamsGroupApp", bootstrap, app, "in", "out", str(state))
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self.lines: list[str] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append(line.rstrip("\n"))

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def last(self, prefix: str) -> str | None:
        with self.lock:
            for line in reversed(self.lines):
                if line.startswith(prefix + " "):
                    return line[len(prefix) + 1 :]
        return None

    def tasks(self, n: int) -> tuple[set[str], set[str]]:
        last = self.last(f"tasks {n}")
        if last is None:
            return set(), set()
        active, standby = last.split(";")
        return set(active.split(",")) - {""}, set(standby.split(",")) - {""}

    def logged(self, text: str) -> bool:
        with self.lock:
            return any(text in line for line in self.lines)

    def said(self, line: str) -> bool:
        with self.lock:
            return line in self.lines

    def errors(self) -> list[str]:
        with self.lock:
            return [line for line in self.lines if line.startswith("error ")]

    def output(self) -> str:
        with self.lock:
            return "\n".join(line for line in self.lines[-80:] if "WARN" not in line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def wait_until(what: str, check: Callable[[], bool], app: App, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        assert not app.errors(), f"an instance failed:\n{app.output()}"
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}\n{app.output()}")


def tool_run(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    """kafka-streams-groups.sh (Kafka's StreamsGroupCommand) against ``bootstrap``."""
    cmd = java_command(
        "org.apache.kafka.tools.streams.StreamsGroupCommand", "--bootstrap-server", bootstrap, *args
    )
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def tool(bootstrap: str, *args: str) -> str:
    done = tool_run(bootstrap, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def committed(bootstrap: str, group: str, topic: str) -> list[int]:
    """The group's committed offsets of ``topic`` (an admin OffsetFetch: no member)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)
    finally:
        consumer.close()
    return [tp.offset for tp in got]


def admin_end(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)[1])
    finally:
        consumer.close()


def group_states(bootstrap: str) -> dict[str, str]:
    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {g["group_id"]: g["group_state"] for g in kp.list_groups()}
    finally:
        kp.close()


@pytest.fixture
def app_and_kgc(tmp_path: Path) -> Iterator[tuple[App, KgcProcess, str]]:
    kgc = KgcProcess(
        tmp_path / "data",
        "--group-streams-initial-rebalance-delay-ms",
        "200",
        "--group-streams-num-standby-replicas",
        "1",
        # One-second heartbeats: once the source topic exists the instance needs two of them
        # (the topic seen, then the internal topics created) within Kafka Streams' ~10 s
        # allowance for missing source topics.
        "--group-streams-min-heartbeat-interval-ms",
        "1000",
        "--group-streams-heartbeat-interval-ms",
        "1000",
    )
    kgc.start()
    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
    # The source topic "in" is created by the test, once the group has reported it missing.
    admin.create_topics([NewTopic("out", PARTITIONS, 1)])["out"].result()
    name = f"wc-{uuid.uuid4().hex[:6]}"
    app = App(kgc.bootstrap, name, tmp_path / "state")
    try:
        yield app, kgc, name
    finally:
        app.stop()
        if kgc.alive():
            kgc.stop()


def test_word_count_scaling_and_coordinator_restart(
    app_and_kgc: tuple[App, KgcProcess, str],
) -> None:
    app, kgc, name = app_and_kgc
    bootstrap = kgc.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    expected: dict[str, int] = {}

    def add(words: dict[str, int]) -> None:
        """Each word a record of its own, over the partitions in turn; then the counts."""
        cluster = Cluster(bootstrap, name, "in", "out", partitions=PARTITIONS)
        cluster.produce([w for w, n in sorted(words.items()) for _ in range(n)])
        for w, n in words.items():
            expected[w] = expected.get(w, 0) + n
        wait_until("exact counts", lambda: cluster.counts() == expected, app)

    # 0. The source topic is missing: the heartbeat's status says so, the instance waits
    # (REBALANCING, no task) until the topic is created, then starts.
    app.send("start 1")
    wait_until("the missing source topic reported", lambda: app.logged(MISSING), app)
    assert app.last("state 1") == "REBALANCING" and app.tasks(1) == (set(), set())
    admin.create_topics([NewTopic("in", PARTITIONS, 1)])["in"].result()

    # 1. One instance: every task, internal topics created by the coordinator.
    wait_until("instance 1 runs all tasks", lambda: app.tasks(1)[0] == ALL_TASKS, app)
    repartition, changelog = f"{name}-words-repartition", f"{name}-counts-changelog"
    meta = admin.list_topics(timeout=10).topics
    assert len(meta[repartition].partitions) == PARTITIONS
    assert len(meta[changelog].partitions) == PARTITIONS
    res = ConfigResource(ConfigResource.Type.TOPIC, changelog)
    assert admin.describe_configs([res])[res].result()["cleanup.policy"].value == "compact"
    add({"alpha": 30, "bravo": 20, "charlie": 10})

    # 2. Three instances: actives split, standbys never beside their active.
    app.send("start 2")
    app.send("start 3")

    def spread() -> bool:
        actives = [app.tasks(n)[0] for n in (1, 2, 3)]
        if sorted(len(a) for a in actives) != [2, 2, 2]:
            return False
        if set().union(*actives) != ALL_TASKS:
            return False
        standbys = [app.tasks(n)[1] for n in (1, 2, 3)]
        stateful = {t for t in ALL_TASKS if t.startswith("1_")}
        placed = [t for s in standbys for t in s]
        return sorted(placed) == sorted(stateful) and all(
            not (a & s) for a, s in zip(actives, standbys, strict=True)
        )

    wait_until("tasks spread over three instances with standbys", spread, app)
    # Interactive queries: every instance sees, through the heartbeat's endpoints, each
    # instance's application.server with the partitions of its active tasks.
    sources = {"0": "in", "1": repartition}

    def endpoints() -> str:
        parts = {
            n: ",".join(sorted(f"{sources[t[0]]}:{t[2:]}" for t in app.tasks(n)[0]))
            for n in (1, 2, 3)
        }
        return "|".join(f"localhost:{9100 + n}={parts[n]}" for n in (1, 2, 3))

    wait_until(
        "each instance sees every endpoint's partitions",
        lambda: all(app.last(f"hosts {n}") == endpoints() for n in (1, 2, 3)),
        app,
    )
    add({"alpha": 5, "delta": 7})
    # Kafka's kafka-streams-groups tool reads the group through ListGroups and
    # StreamsGroupDescribe.
    listed = tool(bootstrap, "--list", "--state")
    assert f"{name}" in listed and "Stable" in listed.split(name, 1)[1].splitlines()[0]
    members = tool(bootstrap, "--describe", "--group", name, "--members")
    # A live group can be neither deleted nor reset: the tool reads its state and refuses.
    busy = tool(bootstrap, "--delete", "--group", name)
    assert f"Streams group '{name}' is not EMPTY." in busy, busy
    reset_all = ["--reset-offsets", "--group", name, "--all-input-topics", "--to-earliest"]
    busy = tool(bootstrap, *reset_all, "--execute")
    assert f"the group '{name}' is inactive, but the current state is Stable." in busy, busy
    assert members.count("ACTIVE: ") == 3 and members.count("STANDBY: ") == 3, members
    # kgc's own tool: members with their tasks, the topology's subtopologies.
    described = run_cli(
        "groups", "describe", name, "--output", "json", "--bootstrap-server", bootstrap
    )
    assert described.code == 0, described
    obj = json.loads(described.out)
    assert obj["type"] == "streams" and obj["state"]["state"] == "Stable", obj
    actives = [m["active"] for m in obj["members"]]
    assert sorted(a.count(",") + a.count(";") + 1 for a in actives) == [2, 2, 2], actives
    assert [t["subtopology"] for t in obj["topology"]] == ["0", "1"]

    # 3. The coordinator is killed and comes back on the same data.
    kgc.kill()
    kgc.start()
    add({"echo": 9, "bravo": 1})
    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        listed = [g for g in kp.list_groups() if g["group_id"] == name]
    finally:
        kp.close()
    assert listed == [
        {
            "group_id": name,
            "protocol_type": "streams",
            "group_state": "Stable",
            "group_type": "streams",
        }
    ]
    meta = admin.list_topics(timeout=10).topics
    assert sorted(t for t in meta if t.startswith(name)) == sorted([repartition, changelog])

    # 4. Every instance closes and leaves: the group is Empty, and Kafka's tool resets its
    # offsets (OffsetCommit as admin: no member, epoch -1) and then deletes it (DeleteGroups).
    for n in (1, 2, 3):
        app.send(f"stop {n}")
    wait_until(
        "every instance closed", lambda: all(app.said(f"closed {n}") for n in (1, 2, 3)), app
    )
    wait_until("the group is Empty", lambda: group_states(bootstrap).get(name) == "Empty", app)
    ends = [admin_end(bootstrap, "in", p) for p in range(PARTITIONS)]
    assert committed(bootstrap, name, "in") == ends
    reset = ["--reset-offsets", "--group", name, "--input-topic", "in", "--to-earliest"]
    planned = {(name, "in", str(p), "0") for p in range(PARTITIONS)}

    def rows(out: str) -> set[tuple[str, ...]]:
        return {tuple(r.split()) for r in out.splitlines() if r.startswith(name + " ")}

    dry = tool(bootstrap, *reset, "--dry-run")
    assert "NEW-OFFSET" in dry and rows(dry) == planned, dry
    assert committed(bootstrap, name, "in") == ends, "a dry run changed the offsets"
    done = tool(bootstrap, *reset, "--execute")
    assert "NEW-OFFSET" in done and rows(done) == planned, done
    assert committed(bootstrap, name, "in") == [0] * PARTITIONS
    deleted = tool(bootstrap, "--delete", "--group", name)
    assert f"Deletion of requested streams groups ('{name}') was successful." in deleted
    assert name not in group_states(bootstrap)
    assert committed(bootstrap, name, "in") == [-1001] * PARTITIONS
