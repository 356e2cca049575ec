"""Resource limits: request memory is bounded across connections; running out of file
descriptors refuses new connections and never fails work on an open one.

How this works: each test runs a real ``kgc serve`` and talks to it over raw sockets with
kgc's small client (so the test controls exactly which connections exist and what each has
sent). Memory is read from ``/proc/<pid>/status`` (VmHWM is the peak resident set).
Descriptor shortage is made with ``prlimit`` on the running server: lowering its
RLIMIT_NOFILE to just above what it holds (the reserve kgc keeps for its logs then refuses
connections) or to exactly what it holds (accept() itself fails with EMFILE). Imports are
watched with an audit hook installed through ``sitecustomize`` in the server process.
"""

from __future__ import annotations

import os
import re
import resource
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.faultkit import report
from support.groupkit import Member, commit_offset, create_topic, fetch_offset, wait_until
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader, decode_response, encode_request
from protocol.messages import api_versions, fetch, heartbeat, offset_commit, produce
from storage.record_batch import encode_batch

pytestmark = pytest.mark.integration

MiB = 1 << 20


def status_kib(pid: int, field: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    assert m, text
    return int(m.group(1))


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def metric(kgc: KgcProcess, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{kgc.metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    assert m, f"{name} not in the metrics"
    return float(m.group(1))


def read_response(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        chunks = []
        while n:
            chunk = sock.recv(min(n, MiB))
            if not chunk:
                raise ConnectionError("closed by the server")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    return exactly(struct.unpack(">i", exactly(4))[0])


def produce_frame(topic: str, value_bytes: int, correlation_id: int) -> bytes:
    batch = encode_batch(0, [(None, b"x" * value_bytes)], timestamp_ms=int(time.time() * 1000))
    req = produce.Request(
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            produce.TopicProduceData(
                name=topic, partition_data=[produce.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )
    return encode_request(RequestHeader(produce.API_KEY, 9, correlation_id, "big"), req)


def produce_one(conn: Connection, topic: str, value: bytes) -> int:
    batch = encode_batch(0, [(None, value)], timestamp_ms=int(time.time() * 1000))
    _, resp = conn.request(
        produce.API_KEY,
        produce.Request(
            acks=-1,
            timeout_ms=10000,
            topic_data=[
                produce.TopicProduceData(
                    name=topic,
                    partition_data=[produce.PartitionProduceData(index=0, records=batch)],
                )
            ],
        ),
    )
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == 0, part
    return int(part.base_offset)


def fetch_values(conn: Connection, topic: str) -> int:
    """How many bytes of records a Fetch from offset 0 returns."""
    _, resp = conn.request(
        fetch.API_KEY,
        fetch.Request(
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=MiB,
            topics=[
                fetch.FetchTopic(
                    topic=topic,
                    partitions=[
                        fetch.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=MiB)
                    ],
                )
            ],
        ),
        version=11,
    )
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0, part
    return len(part.records or b"")


def heartbeat_answered(conn: Connection) -> int:
    _, resp = conn.request(
        heartbeat.API_KEY,
        heartbeat.Request(group_id="nobody", generation_id=1, member_id="m"),
    )
    return int(resp.error_code)


# ------------------------------------------------------------------ memory


@pytest.fixture
def kgc(tmp_path: Path) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path / "data")
    proc.start()
    proc.wait_loaded()
    yield proc
    if proc.alive():
        proc.stop()


class BigSender(threading.Thread):
    """Sends all of one large frame but its last byte, waits, then the rest; reads the answer."""

    def __init__(self, port: int, frame: bytes, release: threading.Event) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.frame = frame
        self.release = release
        self.sent = 0
        self.held = threading.Event()  # all but the last byte went out
        self.answer: bytes | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            view = memoryview(self.frame)
            while self.sent < len(view) - 1:
                self.sent += self.sock.send(view[self.sent : min(self.sent + MiB, len(view) - 1)])
            self.held.set()
            self.release.wait()
            self.sock.sendall(view[-1:])
            self.answer = read_response(self.sock)
        except BaseException as exc:
            self.error = exc
        finally:
            self.sock.close()


def test_queued_request_memory_is_bounded_across_connections(kgc: KgcProcess) -> None:
    """10 connections each send a 90 MB produce request and hold its last byte back.

    Before the bound the server buffered all ten: ~1 GB resident. Now frames over 1 MiB
    share 3/4 of queued.max.request.bytes (256 MiB) strictly, so two 90 MB frames are
    buffered at once and the rest wait in the kernel. A heartbeat and a commit on another
    connection are answered meanwhile, and every large request is answered in the end.
    """
    assert kgc.proc is not None
    pid = kgc.proc.pid
    create_topic(kgc.bootstrap, "big", 1)
    small = Connection.to(kgc.bootstrap, timeout=10)
    small.negotiate()
    assert commit_offset(small, "g", "big", 1) == 0  # a commit before, for a baseline
    baseline_kib = status_kib(pid, "VmRSS")

    frame = produce_frame("big", 90 * MiB, correlation_id=1)
    release = threading.Event()
    senders = [BigSender(kgc.port, frame, release) for _ in range(10)]
    for s in senders:
        s.start()
    try:
        # Wait until the senders stop making progress: the server reads no more for now.
        # A sender blocked in send() (its bytes wait in the kernel) has no event to wait on,
        # so 2 s without progress is the only way to tell; the failure this test looks for
        # (every frame buffered: all senders held) ends the wait at once.
        last, still_since = -1, time.monotonic()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            progress = sum(s.sent for s in senders)
            if all(s.held.is_set() for s in senders):
                break
            if progress != last:
                last, still_since = progress, time.monotonic()
            elif time.monotonic() - still_since > 2.0:
                break
            time.sleep(0.05)
        held = sum(s.held.is_set() for s in senders)
        holding_kib = status_kib(pid, "VmRSS")
        # Small requests on another connection are answered while the large ones wait.
        started = time.monotonic()
        assert heartbeat_answered(small) == ErrorCode.UNKNOWN_MEMBER_ID
        assert commit_offset(small, "g", "big", 2) == 0
        small_ms = (time.monotonic() - started) * 1000
    finally:
        release.set()
        for s in senders:
            s.join(120)
    errors = [s.error for s in senders if s.error is not None]
    assert not errors, errors
    codes = []
    for s in senders:
        assert s.answer is not None
        _, resp = decode_response(produce.API_KEY, 9, s.answer)
        codes.append(resp.responses[0].partition_responses[0].error_code)
    assert codes == [ErrorCode.MESSAGE_SIZE_TOO_LARGE] * 10  # answered, as Kafka answers it
    peak_kib = status_kib(pid, "VmHWM")
    grown_mib = (peak_kib - baseline_kib) / 1024
    # The stated bound: queued requests hold at most the pool + 1 MiB (RequestQueue), plus
    # the copy of the one frame being decoded (at most socket.request.max.bytes, 100 MiB).
    bound_mib = 256 + 1 + 100
    report(
        "test_queued_request_memory_is_bounded_across_connections",
        injected="10 connections x 90 MB produce requests, last byte held back",
        verified=(
            f"{held}/10 fully buffered while held; RSS {holding_kib // 1024} MB while held, "
            f"peak {peak_kib // 1024} MB (+{grown_mib:.0f} MB <= {bound_mib} MB); "
            f"heartbeat+commit meanwhile in {small_ms:.0f} ms; all 10 answered"
        ),
    )
    assert held < 10, "every large frame was buffered at once"
    assert grown_mib <= bound_mib, f"peak grew by {grown_mib:.0f} MiB"
    assert fetch_offset(small, "g")[1] == 2
    small.close()


def test_a_request_larger_than_the_pool_is_served_alone(tmp_path: Path) -> None:
    """A pool smaller than one request still serves it when nothing else is queued."""
    kgc = KgcProcess(tmp_path / "data", "--queued-max-request-bytes", str(4 * MiB))
    kgc.start()
    kgc.wait_loaded()
    try:
        create_topic(kgc.bootstrap, "big", 1)
        with socket.create_connection(("127.0.0.1", kgc.port), timeout=30) as s:
            s.sendall(produce_frame("big", 20 * MiB, correlation_id=3))
            _, resp = decode_response(produce.API_KEY, 9, read_response(s))
        assert (
            resp.responses[0].partition_responses[0].error_code == ErrorCode.MESSAGE_SIZE_TOO_LARGE
        )
        with Connection.to(kgc.bootstrap) as c:
            c.negotiate()
            assert commit_offset(c, "g", "big", 5) == 0
    finally:
        assert kgc.stop() == 0
    report(
        "test_a_request_larger_than_the_pool_is_served_alone",
        injected="a 20 MB request with queued.max.request.bytes = 4 MB",
        verified="answered (MESSAGE_SIZE_TOO_LARGE), then a commit answered",
    )


def test_queued_max_requests_bounds_fsync_waits_not_rebalances(tmp_path: Path) -> None:
    """With queued.max.requests = 2, pipelined commits are read two at a time and all
    answered in order; a group of 6 members still rebalances, because a JoinGroup parked
    until the others join gives its place back (as in Kafka, where it has left the queue)."""
    kgc = KgcProcess(tmp_path / "data", "--queued-max-requests", "2")
    kgc.start()
    kgc.wait_loaded()
    members: list[Member] = []
    try:
        create_topic(kgc.bootstrap, "orders", 6)
        conns = [Connection.to(kgc.bootstrap, timeout=10) for _ in range(3)]
        for c in conns:
            c.negotiate()
        # v10 names topics by id; these requests name them (v9, what librdkafka sends).
        version = min(conns[0].version_for(offset_commit.API_KEY), 9)
        sent: list[list[int]] = [[] for _ in conns]
        for n in range(20):
            for i, c in enumerate(conns):
                body = offset_commit.Request(
                    group_id=f"pipelined-{i}",
                    generation_id_or_member_epoch=-1,
                    topics=[
                        offset_commit.OffsetCommitRequestTopic(
                            name="orders",
                            partitions=[
                                offset_commit.OffsetCommitRequestPartition(
                                    partition_index=0, committed_offset=n
                                )
                            ],
                        )
                    ],
                )
                sent[i].append(c.send(offset_commit.API_KEY, version, body))
        for i, c in enumerate(conns):
            for cid in sent[i]:
                got, resp = decode_response(offset_commit.API_KEY, version, c.recv_frame())
                assert got == cid
                assert resp.topics[0].partitions[0].error_code == 0
            assert fetch_offset(c, f"pipelined-{i}")[1] == 19
            c.close()
        members = [Member(kgc, "crowd", "range") for _ in range(6)]
        wait_until(
            lambda: sorted(len(m.partitions()) for m in members) == [1] * 6,
            timeout=60,
            what="six members with one partition each",
        )
    finally:
        for m in members:
            m.close()
        assert kgc.stop() == 0
    report(
        "test_queued_max_requests_bounds_fsync_waits_not_rebalances",
        injected="queued.max.requests = 2; 3 connections x 20 pipelined commits; a 6-member group",
        verified="every commit answered in order and stored; the group rebalanced to 1 partition each",
    )


# ------------------------------------------------------------------ file descriptors


def try_connect(kgc: KgcProcess) -> Connection | None:
    """A connection that answered ApiVersions, or None if the server refused it."""
    try:
        c = Connection.to(kgc.bootstrap, timeout=5)
    except OSError:
        return None
    try:
        c.call(api_versions.API_KEY, 0, api_versions.Request())
    except (OSError, ConnectionError):
        c.close()
        return None
    return c


def set_fd_limit(pid: int, soft: int) -> None:
    """Lower the soft limit only: raising it back later needs no privilege."""
    _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))


def refusal_lines(kgc: KgcProcess) -> int:
    return kgc.log_path.read_text(errors="replace").count("refusing new connections")


def test_short_of_descriptors_refuses_connections_and_serves_open_ones(
    kgc: KgcProcess,
) -> None:
    assert kgc.proc is not None
    pid = kgc.proc.pid
    create_topic(kgc.bootstrap, "t", 1)
    work = Connection.to(kgc.bootstrap, timeout=10)
    work.negotiate()
    # Room for about 15 connections above the reserve kgc keeps for its logs (64 here).
    set_fd_limit(pid, open_fds(pid) + 80)
    conns: list[Connection] = []
    refused = 0
    for _ in range(100):  # more than the limit allows: without the reserve, all of them
        c = try_connect(kgc)
        if c is None:
            refused += 1
        else:
            conns.append(c)
    assert conns and refused >= 60, (len(conns), refused)
    # Work on the open connection goes on: the group's first commit, its read-back, a
    # produce and a fetch (the first commit used to import a codec, and fail with EMFILE).
    assert commit_offset(work, "g", "t", 7) == 0
    assert fetch_offset(work, "g")[1] == 7
    produce_one(work, "t", b"still served")
    assert fetch_values(work, "t") > 0
    assert heartbeat_answered(work) == ErrorCode.UNKNOWN_MEMBER_ID
    # Descriptors free up: connections are accepted again.
    for c in conns:
        c.close()
    # (The server sees the closes a moment later: attempts until then are refused too.)
    while (c := try_connect(kgc)) is None:
        refused += 1
        assert refused < 1000, "never accepted again"
    c.close()
    assert refusal_lines(kgc) == 1, "refusals are logged once, not per connection"
    assert "accepting connections again" in kgc.log_path.read_text()
    assert metric(kgc, "kgc_connections_refused_total") == refused
    assert kgc.stop() == 0
    report(
        "test_short_of_descriptors_refuses_connections_and_serves_open_ones",
        injected="RLIMIT_NOFILE lowered to leave ~15 connections; 100 connection attempts",
        verified=(
            f"{len(conns)} accepted, {refused} refused (metric {refused}, one log line); "
            "commit, offset fetch, produce, fetch and heartbeat on an open connection answered; "
            "accepting again after connections closed"
        ),
    )


def lowest_free_fd(pid: int) -> int:
    used = {int(name) for name in os.listdir(f"/proc/{pid}/fd")}
    return min(set(range(len(used) + 1)) - used)


def test_accept_failing_with_emfile_refuses_and_recovers(kgc: KgcProcess) -> None:
    """No descriptor left at all (the limit lowered under the server): accept() fails with
    EMFILE. The waiting client is closed at once, not left hanging in the backlog; reads on
    the open connection go on; accepting resumes when the limit is back.

    Writes are not tried while no descriptor at all is left: an fsync round dups the
    journal's descriptor. Keeping descriptors for the logs is the reserve's job (the test
    above); this is the case where something outside lowered the limit under the server.
    """
    assert kgc.proc is not None
    pid = kgc.proc.pid
    create_topic(kgc.bootstrap, "t", 1)
    work = Connection.to(kgc.bootstrap, timeout=10)
    work.negotiate()
    assert commit_offset(work, "g", "t", 1) == 0
    produce_one(work, "t", b"before")
    limit_before = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    set_fd_limit(pid, lowest_free_fd(pid))  # the next descriptor the server opens fails
    try:
        outcomes = []
        for _ in range(5):
            started = time.monotonic()
            outcomes.append((try_connect(kgc) is None, time.monotonic() - started))
        assert all(refused for refused, _ in outcomes), outcomes
        assert all(took < 2 for _, took in outcomes), outcomes  # told at once, not hanging
        assert fetch_offset(work, "g")[1] == 1
        assert fetch_values(work, "t") > 0
        assert heartbeat_answered(work) == ErrorCode.UNKNOWN_MEMBER_ID
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, limit_before)
    c = try_connect(kgc)
    assert c is not None
    c.close()
    assert commit_offset(work, "g", "t", 3) == 0
    assert fetch_offset(work, "g")[1] == 3
    work.close()
    assert metric(kgc, "kgc_connections_refused_total") == 5
    assert refusal_lines(kgc) == 1
    assert "out of file descriptors" in kgc.log_path.read_text()
    assert kgc.stop() == 0
    report(
        "test_accept_failing_with_emfile_refuses_and_recovers",
        injected="RLIMIT_NOFILE lowered to the lowest free descriptor; 5 connection attempts",
        verified="5 refused at once (counted, one log line); offset fetch, fetch, heartbeat "
        "answered meanwhile; accepted again (and a commit answered) once the limit was back",
    )


# ------------------------------------------------------------------ imports

SITECUSTOMIZE = """
import sys

def _report_imports(event, args):
    if event == "import":
        sys.stderr.write("IMPORT " + str(args[0]) + "\\n")

sys.addaudithook(_report_imports)
"""


def test_serving_requests_imports_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An import opens files; one inside a request handler fails when descriptors run out.
    Every module a running server needs is imported before it listens."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", str(hook))
    kgc = KgcProcess(tmp_path / "data")
    kgc.start()
    try:
        _workload(kgc)
    finally:
        assert kgc.stop() == 0
    text = kgc.log_path.read_text(errors="replace")
    serving = text[text.index("kgc listening") :]
    late = sorted({line.split()[1] for line in serving.splitlines() if line.startswith("IMPORT ")})
    report(
        "test_serving_requests_imports_nothing",
        injected="an audit hook reporting every import in the server process",
        verified=f"modules imported while serving: {late or 'none'}",
    )
    assert not late, f"imported while serving requests: {late}"


def _workload(kgc: KgcProcess) -> None:
    from confluent_kafka import Consumer, Producer
    from kafka import KafkaConsumer

    create_topic(kgc.bootstrap, "w", 2)
    producer = Producer({"bootstrap.servers": kgc.bootstrap, "enable.idempotence": True})
    for i in range(50):
        producer.produce("w", key=b"k%d" % i, value=b"v%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": kgc.bootstrap,
            "group.id": "imports",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["w"])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 50 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and not msg.error():
            seen += 1
            consumer.commit(msg, asynchronous=False)
    consumer.close()
    assert seen == 50
    kc: Any = KafkaConsumer(
        "w", bootstrap_servers=kgc.bootstrap, group_id="imports-kp", auto_offset_reset="earliest"
    )
    kc.poll(5000)
    kc.commit()
    kc.close()
    with Connection.to(kgc.bootstrap) as c:
        c.negotiate()
        assert heartbeat_answered(c) == ErrorCode.UNKNOWN_MEMBER_ID
        assert commit_offset(c, "simple", "w", 1) == 0
        assert fetch_offset(c, "simple")[1] == 1
    metric(kgc, "kgc_connections_opened_total")
