"""AlterShareGroupOffsets and DeleteShareGroupOffsets against a real ``kgc serve``, with a
confluent-kafka ShareConsumer reading from where the offsets were set (Kafka's
ShareConsumerTest testSharePartitionLagAfterAlterShareGroupOffsets,
ShareGroupCommandTest's alter and delete cases)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, ShareConsumer
from support.groupkit import create_topic
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import alter_share_group_offsets as asgo
from protocol.messages import delete_share_group_offsets as dsgo_del
from protocol.messages import describe_share_group_offsets as dsgo

pytestmark = pytest.mark.integration


@pytest.fixture
def kgc(tmp_path: Path) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path / "data")
    proc.start()
    proc.wait_loaded()
    yield proc
    if proc.alive():
        proc.kill()


def alter(conn: Connection, group: str, topic: str, offsets: dict[int, int]) -> Any:
    req = asgo.AlterShareGroupOffsetsRequest(
        group_id=group,
        topics=[
            asgo.AlterShareGroupOffsetsRequestTopic(
                topic_name=topic,
                partitions=[
                    asgo.AlterShareGroupOffsetsRequestPartition(p, o) for p, o in offsets.items()
                ],
            )
        ],
    )
    return conn.call(asgo.API_KEY, 0, req)


def describe(conn: Connection, group: str) -> list[tuple[str, int, int, int]]:
    req = dsgo.DescribeShareGroupOffsetsRequest(
        groups=[dsgo.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]
    )
    r = conn.call(dsgo.API_KEY, 1, req)
    return [
        (t.topic_name, p.partition_index, p.start_offset, p.lag)
        for t in r.groups[0].topics
        for p in t.partitions
    ]


def delete(conn: Connection, group: str, *topics: str) -> Any:
    req = dsgo_del.DeleteShareGroupOffsetsRequest(
        group_id=group, topics=[dsgo_del.DeleteShareGroupOffsetsRequestTopic(t) for t in topics]
    )
    return conn.call(dsgo_del.API_KEY, 0, req)


def test_alter_then_consume_then_delete(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "ao", 1)
    p = Producer({"bootstrap.servers": kgc.bootstrap})
    for i in range(10):
        p.produce("ao", value=f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0
    with Connection.to(kgc.bootstrap) as conn:
        r = alter(conn, "g-ao", "ao", {0: 5, 3: 0})
        assert r.error_code == 0
        assert [(x.partition_index, x.error_code) for x in r.responses[0].partitions] == [
            (0, 0),
            (3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        assert alter(conn, "g-ao", "nope", {0: 0}).responses[0].partitions[0].error_code == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        assert describe(conn, "g-ao") == [("ao", 0, 5, 5)]
    c = ShareConsumer(
        {"bootstrap.servers": kgc.bootstrap, "group.id": "g-ao", "fetch.wait.max.ms": 100}
    )
    c.subscribe(["ao"])
    seen: list[int] = []
    try:
        end = time.monotonic() + 60
        while len(seen) < 5:
            assert time.monotonic() < end
            seen += [m.offset() for m in c.poll(0.5) or [] if m.error() is None]
        with Connection.to(kgc.bootstrap) as conn:
            assert alter(conn, "g-ao", "ao", {0: 0}).error_code == ErrorCode.NON_EMPTY_GROUP
            assert delete(conn, "g-ao", "ao").error_code == ErrorCode.NON_EMPTY_GROUP
        c.commit_sync()
    finally:
        c.close()
    assert sorted(seen) == [5, 6, 7, 8, 9]  # from where the offsets were set
    with Connection.to(kgc.bootstrap) as conn:
        end = time.monotonic() + 30
        while True:  # the member's leave reaches the group a moment after close
            r = delete(conn, "g-ao", "ao")
            if r.error_code != ErrorCode.NON_EMPTY_GROUP or time.monotonic() > end:
                break
            time.sleep(0.1)
        assert r.error_code == 0 and r.responses[0].error_code == 0, r
        assert describe(conn, "g-ao") == []
        r = delete(conn, "g-ao", "ao")
        assert r.responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert r.responses[0].error_message == "There is no offset information to delete."
        assert delete(conn, "g-none", "ao").error_code == ErrorCode.GROUP_ID_NOT_FOUND
