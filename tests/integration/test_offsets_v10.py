"""OffsetCommit/OffsetFetch at Kafka 4.1's versions against a real ``kgc serve``.

How this works: a confluent-kafka (librdkafka) consumer commits and fetches through the
versions it negotiates from what kgc advertises (its protocol debug log names them), and a
second consumer resumes from those offsets. kgc's own wire client then speaks the versions
librdkafka does not send (OffsetCommit/OffsetFetch v10 with topic ids, DescribeGroups v6)
to the same server: offsets committed by id are the ones librdkafka fetches by name.
"""

from __future__ import annotations

import logging
import re
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.groupkit import create_topic, wait_until
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import describe_groups, metadata, offset_commit, offset_fetch

pytestmark = pytest.mark.integration

TOPIC = "ledger"
PARTITIONS = 2
UNKNOWN_ID = b"\x42" * 16


class ProtocolLog(logging.Handler):
    """librdkafka's protocol debug lines: which request went out at which version."""

    def __init__(self) -> None:
        super().__init__()
        self.guard = threading.Lock()  # not ``lock``: Handler.handle holds that one
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with self.guard:
            self.lines.append(record.getMessage())

    def versions(self, request: str) -> set[int]:
        pattern = re.compile(rf"Sent {request}Request \(v(\d+),")
        with self.guard:
            return {int(m.group(1)) for line in self.lines if (m := pattern.search(line))}


def consumer(kgc: KgcProcess, group: str, log: ProtocolLog | None = None) -> Consumer:
    conf = {
        "bootstrap.servers": kgc.bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if log is None:
        return Consumer(conf)
    logger = logging.getLogger(f"rdkafka.{group}.{id(log)}")
    logger.addHandler(log)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return Consumer({**conf, "debug": "protocol"}, logger=logger)


def produce(kgc: KgcProcess, per_partition: int) -> None:
    p = Producer({"bootstrap.servers": kgc.bootstrap})
    for i in range(per_partition * PARTITIONS):
        p.produce(TOPIC, value=f"v{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(15) == 0


def consume(c: Consumer, n: int, timeout: float = 40.0) -> list[tuple[int, int]]:
    """(partition, offset) of the next ``n`` records."""
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        assert time.monotonic() < deadline, f"consumed {len(got)} of {n}"
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            partition, offset = m.partition(), m.offset()
            assert partition is not None and offset is not None
            got.append((partition, offset))
    return got


def committed(c: Consumer) -> dict[int, int]:
    tps = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=15)
    assert all(tp.error is None for tp in tps), tps
    return {tp.partition: tp.offset for tp in tps}


def topic_id(conn: Connection, name: str) -> bytes:
    resp = conn.call(
        metadata.API_KEY, 12, metadata.Request(topics=[metadata.MetadataRequestTopic(name=name)])
    )
    (t,) = resp.topics
    assert t.error_code == 0 and t.topic_id != bytes(16), t
    return bytes(t.topic_id)


def test_librdkafka_commits_fetches_and_resumes(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, TOPIC, PARTITIONS)
    produce(kgc, per_partition=5)
    log = ProtocolLog()
    c = consumer(kgc, "resume", log)
    try:
        c.subscribe([TOPIC])
        consume(c, 6)
        c.commit(asynchronous=False)
        first = committed(c)
        assert sum(first.values()) == 6 and all(o >= 0 for o in first.values())
    finally:
        c.close()
    # librdkafka's newest versions of both: v9, which carries the member epoch (v10 is not
    # in librdkafka 2.16); they are inside what kgc advertises.
    assert log.versions("OffsetCommit") == {9}, log.versions("OffsetCommit")
    assert log.versions("OffsetFetch") == {9}, log.versions("OffsetFetch")

    again = consumer(kgc, "resume")
    try:
        again.subscribe([TOPIC])
        rest = consume(again, 4)
        # It starts where the group committed: every record after, none before.
        assert sorted(rest) == sorted((p, o) for p in range(PARTITIONS) for o in range(first[p], 5))
    finally:
        again.close()


def test_v10_by_topic_id_against_a_real_server_agrees_with_librdkafka(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, TOPIC, PARTITIONS)
    with Connection.to(kgc.bootstrap) as conn:
        assert conn.version_for(offset_commit.API_KEY) == 10
        assert conn.version_for(offset_fetch.API_KEY) == 10
        ledger = topic_id(conn, TOPIC)
        # Find the coordinator's readiness: the offsets log loads after kgc listens.
        kgc.wait_loaded()
        commit = offset_commit.Request(
            group_id="by-id",
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                offset_commit.OffsetCommitRequestTopic(
                    topic_id=ledger,
                    partitions=[
                        offset_commit.OffsetCommitRequestPartition(0, 17, committed_metadata="a"),
                        offset_commit.OffsetCommitRequestPartition(1, 23),
                        offset_commit.OffsetCommitRequestPartition(9, 1),
                    ],
                ),
                offset_commit.OffsetCommitRequestTopic(
                    topic_id=UNKNOWN_ID,
                    partitions=[offset_commit.OffsetCommitRequestPartition(0, 1)],
                ),
            ],
        )
        resp = conn.call(offset_commit.API_KEY, 10, commit)
        assert {
            (bytes(t.topic_id), p.partition_index): p.error_code
            for t in resp.topics
            for p in t.partitions
        } == {
            (ledger, 0): 0,
            (ledger, 1): 0,
            (ledger, 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            (UNKNOWN_ID, 0): ErrorCode.UNKNOWN_TOPIC_ID,
        }

        fetch = offset_fetch.Request(
            groups=[
                offset_fetch.OffsetFetchRequestGroup(
                    group_id="by-id",
                    topics=[
                        offset_fetch.OffsetFetchRequestTopics(
                            topic_id=UNKNOWN_ID, partition_indexes=[0]
                        ),
                        offset_fetch.OffsetFetchRequestTopics(
                            topic_id=ledger, partition_indexes=[0, 1]
                        ),
                    ],
                )
            ]
        )
        (g,) = conn.call(offset_fetch.API_KEY, 10, fetch).groups
        assert g.error_code == 0
        assert [
            (bytes(t.topic_id), p.partition_index, p.committed_offset, p.metadata, p.error_code)
            for t in g.topics
            for p in t.partitions
        ] == [
            (ledger, 0, 17, "a", 0),
            (ledger, 1, 23, "", 0),
            (UNKNOWN_ID, 0, -1, "", ErrorCode.UNKNOWN_TOPIC_ID),
        ]
        all_topics = offset_fetch.Request(
            groups=[offset_fetch.OffsetFetchRequestGroup(group_id="by-id", topics=None)]
        )
        (g_all,) = conn.call(offset_fetch.API_KEY, 10, all_topics).groups
        assert [(bytes(t.topic_id), len(t.partitions)) for t in g_all.topics] == [(ledger, 2)]

        # DescribeGroups v6: an unknown group is an error now; v5 says Dead as before.
        v6 = conn.call(describe_groups.API_KEY, 6, describe_groups.Request(groups=["nobody"]))
        assert [(d.group_state, d.error_code, d.error_message) for d in v6.groups] == [
            ("Dead", ErrorCode.GROUP_ID_NOT_FOUND, "Group nobody not found.")
        ]
        v5 = conn.call(describe_groups.API_KEY, 5, describe_groups.Request(groups=["nobody"]))
        assert [(d.group_state, d.error_code) for d in v5.groups] == [("Dead", 0)]

    # librdkafka fetches by name (v9) what was committed by id.
    c = consumer(kgc, "by-id")
    try:
        wait_until(lambda: committed(c) == {0: 17, 1: 23}, timeout=20, what="offsets by name")
    finally:
        c.close()
