"""Kafka Streams 4.4.0: an application moved offline from the classic group protocol to the
streams protocol (KIP-1071) and back, against kgc and against the reference Kafka broker.

How this works: ``kgc.streams.WordCount`` (tests/jvm; one JVM per instance, its group protocol
its sixth argument) counts words at-least-once through a repartition topic and a changelog.
Kafka 4.4 allows the move only offline (``GroupMetadataManager``): a streams heartbeat on a
classic group that still has members fails with GROUP_ID_NOT_FOUND ("Group <g> is not a
streams group."), so the streams instance started beside a live classic one gets no task
while the classic one keeps all of them; once the classic group is Empty (Streams' classic
members do not leave on close, so after their 6 s session), the first streams heartbeat
replaces the classic group, keeping its committed offsets, and the streams instance runs
every task on the internal topics the classic run created. Back: a streams member leaves
on close, the group turns Empty at once, and a classic JoinGroup replaces it again.

Each step is checked with exact counts (nothing is killed: no record is processed twice) and
the group's type as ListGroups gives it. Where it waits, it waits on printed lines or on
the group's state and offsets, never on bare sleeps.
"""

from __future__ import annotations

import signal
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient
from support.wordcountkit import (
    ALL_TASKS,
    PARTITIONS,
    Cluster,
    StreamsInstance,
    lines_of,
    wait_until,
)

pytestmark = [pytest.mark.kafka, pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(params=["kgc", "kafka"])
def bootstrap(request: Any) -> str:
    server = request.getfixturevalue("kgc" if request.param == "kgc" else "kafka_broker")
    return str(server.bootstrap)


def group(bootstrap: str, name: str) -> tuple[str, str] | None:
    """The group's (type, state) as ListGroups v5 gives them; None when it is not listed."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        for g in admin.list_groups():
            if g["group_id"] == name:
                return str(g["group_type"]), str(g["group_state"])
    finally:
        admin.close()
    return None


def close(inst: StreamsInstance, instances: list[StreamsInstance]) -> None:
    """SIGTERM: the instance's shutdown hook closes its KafkaStreams cleanly."""
    inst.proc.send_signal(signal.SIGTERM)
    inst.proc.wait(timeout=60)
    inst.reader.join(timeout=10)  # the JVM's last lines, read to its end of output
    assert inst.last("state") == "NOT_RUNNING", inst.output()
    instances.remove(inst)


@pytest.mark.long
def test_offline_migration_classic_to_streams_and_back(
    bootstrap: str, tmp_path: Path, instances: list[StreamsInstance]
) -> None:
    suffix = uuid.uuid4().hex[:8]
    app = f"migrate-{suffix}"
    cluster = Cluster(bootstrap, app, f"lines-{suffix}", f"counts-{suffix}")
    cluster.create_topics()
    topics = (cluster.input, cluster.output)
    expected: Counter[str] = Counter()

    def start(name: str, protocol: str) -> StreamsInstance:
        inst = StreamsInstance(name, (bootstrap, protocol), app, topics, tmp_path / name)
        instances.append(inst)
        return inst

    def count(batch: Counter[str], seed: int) -> None:
        cluster.produce(lines_of(batch, seed))
        expected.update(batch)
        wait_until("the batch committed", cluster.quiesced, 60, instances)
        assert cluster.counts() == dict(expected)

    def runs_all(inst: StreamsInstance) -> bool:
        return inst.running() and inst.tasks() == ALL_TASKS

    # 1. Classic: one instance runs the four tasks; Streams creates the internal topics.
    classic = start("classic", "classic")
    wait_until("the classic instance runs all tasks", lambda: runs_all(classic), 90, instances)
    count(Counter({"alpha": 7, "bravo": 5, "charlie": 3}), seed=1)
    assert group(bootstrap, app) == ("classic", "Stable")
    internal = cluster.internal_topics()
    assert sorted(internal) == [f"{app}-counts-changelog", f"{app}-words-repartition"]

    # 2. Refused while the classic group has a member: the streams instance gets no task
    # (its heartbeats fail, it keeps retrying) and the classic one keeps them all.
    early = start("early", "streams")
    wait_until(
        "the streams instance refused",
        lambda: early.logged("is not a streams group"),
        60,
        [classic],
    )
    assert early.tasks() == set() and classic.tasks() == ALL_TASKS
    assert group(bootstrap, app) == ("classic", "Stable")
    early.stop()
    instances.remove(early)

    # 3. The classic instance closes; its session expires and the group is Empty.
    close(classic, instances)
    wait_until(
        "the classic group Empty",
        lambda: group(bootstrap, app) == ("classic", "Empty"),
        30,
        instances,
    )

    # 4. Streams: the first heartbeat replaces the group, offsets and internal topics kept.
    streams = start("streams", "streams")
    wait_until("the streams instance runs all tasks", lambda: runs_all(streams), 90, instances)
    assert group(bootstrap, app) == ("streams", "Stable")
    assert cluster.internal_topics() == internal
    count(Counter({"alpha": 2, "delta": 4}), seed=2)

    # 5. Back to classic: the streams member leaves on close; a classic JoinGroup replaces
    # the Empty streams group, offsets kept.
    close(streams, instances)
    wait_until(
        "the streams group Empty",
        lambda: group(bootstrap, app) == ("streams", "Empty"),
        30,
        instances,
    )
    again = start("again", "classic")
    wait_until("the classic instance runs all tasks", lambda: runs_all(again), 90, instances)
    assert group(bootstrap, app) == ("classic", "Stable")
    count(Counter({"bravo": 1, "echo": 6}), seed=3)
    assert len(internal) == 2 and all(n == PARTITIONS for n, _ in internal.values())
