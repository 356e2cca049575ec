"""Kafka's ``kafka-streams-groups`` tool on an inactive streams group, Kafka 4.4 vs kgc.

How this works: on each side a streams group is made by one StreamsGroupHeartbeat member
(the word-count topology of test_streams_heartbeat: the coordinator creates its repartition
and changelog topics) that then leaves, so the group is Empty with its topology kept; its
offsets of the 2-partition input topic (ten records a partition, one a minute from an hour
ago) are set by an admin OffsetCommit. Then the tool (Kafka's own
StreamsGroupCommand, one JVM per command) runs every reset specification as a dry run --
to an offset, shifted, to a datetime, by a duration, to the latest (one partition), to the
current, exported as CSV and read back with --from-file -- then one --execute,
--delete-offsets of one partition and --delete with --delete-all-internal-topics. Each
command's output and exit code is recorded, and after the execute, the offsets and which
internal topics remain, and that none remains after the delete; both sides must agree. The two sides run at once (JVM starts
dominate).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from support.diffkit import Runner, Side
from support.diffstreamskit import (
    LEAVE,
    SG_HEARTBEAT,
    join,
    topology,
    wait_source_seen,
)
from support.kafkaserver import java_command

from protocol.messages import metadata

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

# Record i of a partition is i minutes after BASE_MS, an hour ago on the minute: recent
# enough that neither server's retention (7 days) deletes them mid-scenario, the same on
# both sides (one process runs both).
BASE_MS = (int(time.time()) // 60 - 60) * 60000
RECORDS = 10


def tool(side: Side, step: str, *args: str) -> str:
    """Run the tool against ``side`` and record what it printed and its exit code."""
    cmd = java_command(
        "org.apache.kafka.tools.streams.StreamsGroupCommand",
        "--bootstrap-server",
        side.bootstrap,
        *args,
    )
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    lines = [line.rstrip() for line in (done.stdout + done.stderr).splitlines()]
    lines = [line for line in lines if line and "WARN" not in line]
    # A table's rows come in the order of a map of the tool's, which varies from run to run
    # on either server: compared sorted.
    side.note(step, 0, 0, {"code": done.returncode, "out": lines[:1] + sorted(lines[1:])})
    return "\n".join(lines)


def committed(side: Side, group: str, topic: str) -> dict[str, int]:
    """The group's committed offset per partition of ``topic`` (keys as text: compared)."""
    admin = AdminClient({"bootstrap.servers": side.bootstrap})
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {
        str(tp.partition): tp.offset for tp in fut.result(30).topic_partitions if tp.topic == topic
    }


def existing(side: Side, topics: list[str]) -> list[str]:
    _, meta = side.untimed().request(
        metadata.API_KEY,
        metadata.MetadataRequest(
            topics=[metadata.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        ),
    )
    return sorted(t.name for t in meta.topics if t.error_code == 0)


def prepare(side: Side, app: str, source: str) -> list[str]:
    """The Empty streams group ``app`` with its offsets; returns its internal topics."""
    side.create_topic(source, 2)
    producer = Producer({"bootstrap.servers": side.bootstrap, "acks": "all"})
    for p in range(2):
        for i in range(RECORDS):
            producer.produce(source, value=b"w", partition=p, timestamp=BASE_MS + i * 60000)
    assert producer.flush(30) == 0
    wait_source_seen(side, source)
    side.wait_coordinator(app)
    conn = side.untimed()
    first = conn.call(SG_HEARTBEAT, 1, join(app, "m1", topology(source, app)))
    assert first.error_code == 0, first
    internal = [f"{app}-counts-changelog", f"{app}-words-repartition"]
    for topic in internal:
        side.wait_leaders(topic, 2)
    conn.call(SG_HEARTBEAT, 1, join(app, "m1", None, **LEAVE))
    admin = AdminClient({"bootstrap.servers": side.bootstrap})
    offsets = [TopicPartition(source, 0, 8), TopicPartition(source, 1, 6)]
    fut = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(app, offsets)])[app]
    fut.result(30)
    return internal


def tools(side: Side) -> None:
    app, source = side.name("sgtool"), side.name("sgtool-in")
    internal = prepare(side, app, source)
    reset = ["--reset-offsets", "--group", app]
    one = ["--input-topic", source]
    tool(side, "to_offset", *reset, *one, "--to-offset", "3", "--dry-run")
    tool(side, "shift_by", *reset, "--all-input-topics", "--shift-by", "-2", "--dry-run")
    # The tool reads a datetime without a zone as UTC.
    at = datetime.fromtimestamp(BASE_MS / 1000 + 300, UTC).strftime("%Y-%m-%dT%H:%M:%S.000")
    tool(side, "to_datetime", *reset, *one, "--to-datetime", at, "--dry-run")
    tool(side, "by_duration", *reset, *one, "--by-duration", "P3650D", "--dry-run")
    tool(side, "to_latest", *reset, "--input-topic", f"{source}:0", "--to-latest", "--dry-run")
    tool(side, "to_current", *reset, "--all-input-topics", "--to-current", "--dry-run")
    csv = tool(
        side, "export", *reset, "--all-input-topics", "--to-offset", "4", "--dry-run", "--export"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write("\n".join(line for line in csv.splitlines() if line.count(",") == 2) + "\n")
    tool(side, "from_file", *reset, "--from-file", f.name, "--dry-run")
    Path(f.name).unlink()
    side.note("committed_before", 0, 0, committed(side, app, source))
    tool(side, "execute", *reset, *one, "--to-offset", "3", "--execute")
    side.note("committed_after_execute", 0, 0, committed(side, app, source))
    # Whether the execute also deletes the group's internal topics (its help says so) is
    # compared, not asserted: Kafka 4.4's tool keeps them when the scope is one input topic.
    side.note("internal_after_execute", 0, 0, existing(side, internal))
    tool(side, "delete_offsets", "--delete-offsets", "--group", app, "--input-topic", f"{source}:1")
    side.note("committed_after_delete_offsets", 0, 0, committed(side, app, source))
    tool(side, "delete", "--delete", "--group", app, "--delete-all-internal-topics")
    # DeleteTopics has answered; Kafka's Metadata follows the deletion a moment later.
    deadline = time.monotonic() + 15
    while existing(side, internal) and time.monotonic() < deadline:
        time.sleep(0.1)
    side.note("internal_after_delete", 0, 0, existing(side, internal))


def test_streams_groups_tool_resets_and_deletes(diff_shared: Runner) -> None:
    outcome = diff_shared(tools, parallel=True)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}

    def new_offsets(step: str) -> list[str]:
        return [row.split()[-1] for row in steps[step]["out"][1:]]

    # Sorted rows: partition 0, then 1.
    assert new_offsets("to_offset") == ["3", "3"]
    assert new_offsets("shift_by") == ["6", "4"]
    assert new_offsets("to_datetime") == ["5", "5"]
    assert new_offsets("by_duration") == ["0", "0"]
    assert new_offsets("to_latest") == ["10"]
    assert new_offsets("to_current") == ["8", "6"]
    assert new_offsets("from_file") == ["4", "4"]
    assert steps["committed_before"] == {"0": 8, "1": 6}
    assert steps["committed_after_execute"] == {"0": 3, "1": 3}
    assert steps["committed_after_delete_offsets"] == {"0": 3}
    assert steps["internal_after_delete"] == []
