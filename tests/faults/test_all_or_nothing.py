"""Requests are all-or-nothing, answered with Kafka's error codes on an open connection.

Against a real ``kgc serve``: an OffsetCommit whose group id cannot be written to the offsets
log (longer than its int16 strings allow; a flexible request can carry it) is answered
UNKNOWN_SERVER_ERROR and leaves no offset behind (it used to change the in-memory offsets,
close the connection, and be served by OffsetFetch until a restart); a commit for a topic
or partition that does not exist is answered UNKNOWN_TOPIC_OR_PARTITION; a group id that is
not valid UTF-8 is decoded as Kafka decodes it (U+FFFD for malformed bytes).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.faultkit import report
from support.groupkit import create_topic
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader, decode_response, encode_request
from protocol.messages import offset_commit, offset_fetch

pytestmark = pytest.mark.integration


@pytest.fixture
def kgc(tmp_path: Path) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path / "data")
    proc.start()
    proc.wait_loaded()
    yield proc
    if proc.alive():
        proc.kill()


def commit_request(group: str, topic: str, partition: int, offset: int) -> offset_commit.Request:
    return offset_commit.Request(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            offset_commit.OffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    offset_commit.OffsetCommitRequestPartition(
                        partition_index=partition, committed_offset=offset
                    )
                ],
            )
        ],
    )


def committed(conn: Connection, group: str) -> list[tuple[str, int, int]]:
    resp = conn.call(
        offset_fetch.API_KEY,
        8,
        offset_fetch.Request(
            groups=[offset_fetch.OffsetFetchRequestGroup(group_id=group, topics=None)]
        ),
    )
    g = resp.groups[0]
    assert g.error_code == 0
    return [(t.name, p.partition_index, p.committed_offset) for t in g.topics for p in t.partitions]


def test_unencodable_group_id_is_an_error_code_and_changes_nothing(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "t", 2)
    group = "g" * 40000
    with Connection.to(kgc.bootstrap) as conn:
        resp = conn.call(offset_commit.API_KEY, 8, commit_request(group, "t", 0, 42))
        assert resp.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN
        # Same connection: still open, and nothing was kept.
        assert committed(conn, group) == []
    kgc.stop()
    kgc.start()
    kgc.wait_loaded()  # a raw OffsetFetch during replay answers LOAD_IN_PROGRESS
    with Connection.to(kgc.bootstrap) as conn:
        assert committed(conn, "g" * 40000) == []
    report(
        "test_unencodable_group_id_is_an_error_code_and_changes_nothing",
        injected="OffsetCommit v8 with a 40000-byte group id",
        verified="UNKNOWN_SERVER_ERROR on an open connection; OffsetFetch (before and after "
        "a restart) shows no offset",
    )


def test_commit_to_missing_topic_or_partition(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "t", 2)
    with Connection.to(kgc.bootstrap) as conn:
        for topic, partition in (("nope", 0), ("t", 2)):
            resp = conn.call(
                offset_commit.API_KEY, 8, commit_request("simple", topic, partition, 1)
            )
            code = resp.topics[0].partitions[0].error_code
            assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, (topic, partition)
        resp = conn.call(offset_commit.API_KEY, 8, commit_request("simple", "t", 1, 7))
        assert resp.topics[0].partitions[0].error_code == 0
        assert committed(conn, "simple") == [("t", 1, 7)]
    report(
        "test_commit_to_missing_topic_or_partition",
        injected="OffsetCommit for an unknown topic and for partition 2 of a 2-partition topic",
        verified="UNKNOWN_TOPIC_OR_PARTITION for both, nothing stored; a valid commit stored",
    )


def test_group_id_that_is_not_utf8_is_decoded_as_kafka_does(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "t", 1)
    frame = bytearray(
        encode_request(
            RequestHeader(offset_commit.API_KEY, 7, 1, "c"), commit_request("ab", "t", 0, 9)
        )
    )
    at = frame.index(b"\x00\x02ab")  # v7 is not flexible: int16 length, then the bytes
    frame[at + 2 : at + 4] = b"a\xff"
    with Connection.to(kgc.bootstrap) as conn:
        conn.sock.sendall(bytes(frame))
        _, resp = decode_response(offset_commit.API_KEY, 7, conn.recv_frame())
        assert resp.topics[0].partitions[0].error_code == 0
        assert committed(conn, "a\ufffd") == [("t", 0, 9)]
    report(
        "test_group_id_that_is_not_utf8_is_decoded_as_kafka_does",
        injected="OffsetCommit whose group id bytes are b'a\\xff' (invalid UTF-8)",
        verified="committed under 'a\\ufffd' as Kafka's String decoding gives; connection open",
    )
