"""Bad input never crashes the server, leaks a connection or disturbs other clients."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.framing import decode_response
from protocol.messages import api_versions, metadata

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path_factory.mktemp("bad") / "data")
    proc.start()
    yield proc
    assert proc.alive(), "the server died during the bad-input tests"
    proc.stop()


def healthy(server: KgcProcess) -> None:
    with Connection.to(server.bootstrap) as c:
        _, resp = c.request(metadata.API_KEY, metadata.Request(topics=[]), version=1)
        assert resp.brokers[0].port == server.port


def raw(server: KgcProcess) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    return s


def closed_by_server(s: socket.socket, timeout: float = 5.0) -> bool:
    s.settimeout(timeout)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def frame(api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    payload = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test" + body
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("size", [-1, -(2**31), 104857601, 2**31 - 1])
def test_bad_size_closes_the_connection(server: KgcProcess, size: int) -> None:
    s = raw(server)
    s.sendall(struct.pack(">i", size) + b"xxxx")
    assert closed_by_server(s)
    healthy(server)


def test_unknown_api_key_closes_the_connection(server: KgcProcess) -> None:
    s = raw(server)
    s.sendall(frame(9999, 0, b""))
    assert closed_by_server(s)
    healthy(server)


def test_unsupported_version_closes_the_connection(server: KgcProcess) -> None:
    s = raw(server)
    s.sendall(frame(metadata.API_KEY, 99, b""))
    assert closed_by_server(s)
    healthy(server)


def test_unsupported_api_versions_version_gets_a_v0_error_response(server: KgcProcess) -> None:
    s = raw(server)
    s.sendall(frame(api_versions.API_KEY, 99, b"\x00\x01\x02", correlation_id=42))
    size = struct.unpack(">i", s.recv(4))[0]
    data = b""
    while len(data) < size:
        data += s.recv(size - len(data))
    cid, resp = decode_response(api_versions.API_KEY, 0, data)
    assert cid == 42
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == [(18, 0, 4)]
    s.close()


def test_garbage_body_with_valid_header_closes_the_connection(server: KgcProcess) -> None:
    s = raw(server)
    # JoinGroup v5 whose group id claims 30000 bytes.
    s.sendall(frame(11, 5, b"\x75\x30abc"))
    assert closed_by_server(s)
    healthy(server)


def test_truncated_frame_then_close_leaks_nothing(server: KgcProcess) -> None:
    for _ in range(50):
        s = raw(server)
        s.sendall(struct.pack(">i", 100) + b"\x00\x12\x00")
        s.close()
    healthy(server)


def test_abandoned_large_frames_give_their_memory_back(server: KgcProcess) -> None:
    # Each announces a 90 MB request, sends 1 MB of it and goes away. The memory reserved
    # for those frames must come back, or the next large request would wait forever.
    from protocol.messages import create_topics

    with Connection.to(server.bootstrap) as c:
        c.request(
            create_topics.API_KEY,
            create_topics.Request(
                topics=[
                    create_topics.CreatableTopic(
                        name="bulky", num_partitions=1, replication_factor=1
                    )
                ]
            ),
        )
    for _ in range(10):
        s = raw(server)
        s.sendall(struct.pack(">i", 90 << 20) + b"\x00\x00\x00\x09" + bytes(1 << 20))
        s.close()
    s = raw(server)
    s.settimeout(30)
    s.sendall(_produce_frame("bulky", 8, value_bytes=60 << 20, acks=-1))
    size = struct.unpack(">i", s.recv(4))[0]
    body = b""
    while len(body) < size:
        body += s.recv(size - len(body))
    assert struct.unpack_from(">i", body)[0] == 8  # answered (the batch is too large)
    s.close()
    healthy(server)


def test_stalled_connection_does_not_block_others(server: KgcProcess) -> None:
    stalled = [raw(server) for _ in range(20)]
    for s in stalled:
        s.sendall(struct.pack(">i", 1000) + b"\x00\x03")  # half a frame, then nothing
    started = time.monotonic()
    for _ in range(20):
        healthy(server)
    assert time.monotonic() - started < 5
    for s in stalled:
        s.close()


def test_pipelined_requests_are_answered_in_order(server: KgcProcess) -> None:
    s = raw(server)
    payload = b"".join(frame(api_versions.API_KEY, 0, b"", correlation_id=i) for i in range(200))
    s.sendall(payload)
    got = []
    buf = b""
    s.settimeout(5)
    while len(got) < 200:
        buf += s.recv(65536)
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
            n = struct.unpack_from(">i", buf)[0]
            got.append(struct.unpack_from(">i", buf, 4)[0])
            buf = buf[4 + n :]
    assert got == list(range(200))
    s.close()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    api_key=st.sampled_from(
        [0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 22, 28, 36, 42, 47, 77]
    ),
    version=st.integers(-2, 20),
    body=st.binary(max_size=300),
)
def test_fuzzed_frames_never_hurt_the_server(
    server: KgcProcess, api_key: int, version: int, body: bytes
) -> None:
    s = raw(server)
    try:
        s.sendall(frame(api_key, version, body))
        s.settimeout(0.05)
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            s.recv(65536)
    finally:
        s.close()
    healthy(server)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.binary(min_size=1, max_size=200))
def test_random_bytes_never_hurt_the_server(server: KgcProcess, data: bytes) -> None:
    s = raw(server)
    try:
        s.sendall(data)
    finally:
        s.close()
    healthy(server)


def test_server_log_names_the_bad_requests(server: KgcProcess) -> None:
    text = Path(server.log_path).read_text()
    assert "closing connection from 127.0.0.1" in text
    assert "Traceback" not in text


def _produce_frame(
    topic: str, correlation_id: int, *, value_bytes: int = 1, acks: int = 0
) -> bytes:
    from protocol.framing import RequestHeader, encode_request
    from protocol.messages import produce
    from storage.record_batch import encode_batch

    batch = encode_batch(0, [(b"k", b"v" * value_bytes)], timestamp_ms=1)
    req = produce.Request(
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            produce.TopicProduceData(
                name=topic, partition_data=[produce.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )
    return encode_request(RequestHeader(produce.API_KEY, 9, correlation_id, "test"), req)


def test_failed_acks0_produce_closes_the_connection_after_earlier_answers(
    server: KgcProcess,
) -> None:
    s = raw(server)
    # An ApiVersions, then a fire-and-forget produce to a topic that does not exist.
    s.sendall(
        frame(api_versions.API_KEY, 0, b"", correlation_id=5) + _produce_frame("no-such-topic", 6)
    )
    s.settimeout(5)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    # The earlier request was answered, then the connection closed: Kafka's acks=0 error signal.
    assert struct.unpack_from(">i", data, 4)[0] == 5
    assert len(data) == 4 + struct.unpack_from(">i", data)[0]
    healthy(server)


def test_successful_acks0_produce_gets_no_answer_and_keeps_the_connection(
    server: KgcProcess,
) -> None:
    from protocol.messages import create_topics

    with Connection.to(server.bootstrap) as c:
        c.request(
            create_topics.API_KEY,
            create_topics.Request(
                topics=[
                    create_topics.CreatableTopic(
                        name="fire", num_partitions=1, replication_factor=1
                    )
                ]
            ),
        )
    s = raw(server)
    s.sendall(_produce_frame("fire", 6) + frame(api_versions.API_KEY, 0, b"", correlation_id=7))
    s.settimeout(5)
    size = struct.unpack(">i", s.recv(4))[0]
    body = b""
    while len(body) < size:
        body += s.recv(size - len(body))
    assert struct.unpack_from(">i", body)[0] == 7  # the only answer is the ApiVersions one
    s.close()
