"""Clients older than Kafka 4's floor (KIP-896) produce, consume and commit against kgc.

How this works: kafka-python 2.0.2 (2020; it speaks the 0.8-0.10 protocol when told an old
``api_version``) is installed with pip into this module's own temporary directory -- never
over the repository's kafka-python 3 -- and runs in subprocesses with that directory first
on ``PYTHONPATH``. librdkafka (confluent-kafka) runs with ``api.version.request=false`` and
an old ``broker.version.fallback``, the settings of clients of brokers before 0.10. Each
old client produces (magic 0 or 1 message sets, compressed or not), consumes in a group
(or in assign() mode for the 0.8 protocols) and commits; the test checks every record
comes back with its offset and timestamp, the old client reads its own commits back, a
modern client sees the same committed offsets (one store for old and new versions), and a
restarted old member resumes exactly at its commits. kgc counts what it served, so each
case also asserts the old versions were the ones used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, Producer, TopicPartition
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.messages import create_topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 3
N = 300

PRODUCER = r"""
import json, sys, time
from kafka import KafkaProducer
bootstrap, topic, api, codec, n, first = sys.argv[1:7]
p = KafkaProducer(bootstrap_servers=bootstrap, api_version=tuple(json.loads(api)),
                  compression_type=None if codec == "none" else codec, linger_ms=20,
                  key_serializer=str.encode, value_serializer=str.encode)
futures = [(i, p.send(topic, key=f"k{i % 7}", value=f"v{i}")) for i in range(int(first), int(first) + int(n))]
p.flush()
out = []
for i, f in futures:
    m = f.get(timeout=30)
    out.append([f"v{i}", m.partition, m.offset, m.timestamp])
p.close()
print(json.dumps(out))
"""

GROUP_CONSUMER = r"""
import json, sys, time
from kafka import KafkaConsumer, TopicPartition
bootstrap, topic, group, api, n = sys.argv[1:6]
c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, api_version=tuple(json.loads(api)),
                  auto_offset_reset="earliest", enable_auto_commit=False,
                  session_timeout_ms=10000, max_poll_interval_ms=10000, heartbeat_interval_ms=500)
got = []
deadline = time.monotonic() + 60
while len(got) < int(n) and time.monotonic() < deadline:
    for tp, recs in c.poll(timeout_ms=500).items():
        got += [[tp.partition, r.offset, r.key.decode(), r.value.decode(), r.timestamp] for r in recs]
    c.commit()
committed = {p: c.committed(TopicPartition(topic, p)) for p in sorted(c.partitions_for_topic(topic))}
c.close()
print(json.dumps({"records": got, "committed": committed}))
"""

ASSIGNED_CONSUMER = r"""
import json, sys, time
from kafka import KafkaConsumer, TopicPartition
bootstrap, topic, group, api, n, partitions = sys.argv[1:7]
c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, api_version=tuple(json.loads(api)),
                  auto_offset_reset="earliest", enable_auto_commit=False)
tps = [TopicPartition(topic, p) for p in range(int(partitions))]
c.assign(tps)
before = {tp.partition: c.committed(tp) for tp in tps}
got = []
deadline = time.monotonic() + 60
while len(got) < int(n) and time.monotonic() < deadline:
    for tp, recs in c.poll(timeout_ms=500).items():
        got += [[tp.partition, r.offset, r.key.decode(), r.value.decode(), r.timestamp] for r in recs]
c.commit()
committed = {tp.partition: c.committed(tp) for tp in tps}
c.close()
print(json.dumps({"records": got, "committed": committed, "before": before}))
"""


@pytest.fixture(scope="module")
def old_kafka_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kafka-python 2.0.2 in a directory of its own (the repository keeps kafka-python 3)."""
    target = tmp_path_factory.mktemp("kafka-python-2.0.2")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--target",
            str(target),
            "kafka-python==2.0.2",
        ],
        check=True,
        timeout=600,
    )
    return target


@pytest.fixture(scope="module")
def kgc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path_factory.mktemp("kgc") / "data")
    proc.start()
    proc.wait_loaded()
    yield proc
    if proc.alive():
        proc.stop()


def create_topic(kgc: KgcProcess, name: str, version: int = 2) -> None:
    with Connection.to(kgc.bootstrap) as c:
        topic = create_topics.CreatableTopic(
            name=name, num_partitions=PARTITIONS, replication_factor=1
        )
        _, resp = c.request(
            create_topics.API_KEY,
            create_topics.Request(topics=[topic], timeout_ms=10_000),
            version=version,
        )
        assert resp.topics[0].error_code == 0, resp


def run_old(target: Path, script: str, *args: object) -> Any:
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def served(kgc: KgcProcess, api: str, version: int) -> float:
    return kgc.requests_total(api=api, version=str(version))


def modern_committed(kgc: KgcProcess, group: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": kgc.bootstrap, "group.id": group})
    try:
        parts = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        return {tp.partition: tp.offset for tp in parts}
    finally:
        c.close()


def modern_read(kgc: KgcProcess, topic: str, n: int) -> list[tuple[int, int, str, int]]:
    """(partition, offset, value, timestamp) of the first ``n`` records, read with Fetch v4+."""
    c = Consumer(
        {
            "bootstrap.servers": kgc.bootstrap,
            "group.id": "modern-reader",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out = []
    try:
        while len(out) < n:
            m = c.poll(30)
            assert m is not None, f"read {len(out)} of {n}"
            assert m.error() is None, m.error()
            out.append((m.partition(), m.offset(), m.value().decode(), m.timestamp()[1]))
    finally:
        c.close()
    return out


def check_round_trip(produced: list[list[Any]], consumed: list[list[Any]], magic: int) -> None:
    by_value = {v: (p, o, ts) for v, p, o, ts in produced}
    assert len(consumed) == len(produced)
    for p, o, _k, v, ts in consumed:
        assert by_value[v][:2] == (p, o), v
        if magic == 0:
            assert ts in (None, -1)  # magic 0 has no timestamps
        else:
            assert ts == by_value[v][2] and ts > 0  # the producer's create time, kept
    for p in range(PARTITIONS):
        offsets = sorted(o for q, o, *_ in consumed if q == p)
        assert offsets == list(range(len(offsets)))


# (api_version, codec, the magic it writes and reads, the Produce, Fetch and JoinGroup
# versions it uses)
GROUP_CASES = [
    ((0, 9), "none", 0, 1, 1, 0),
    ((0, 9), "lz4", 0, 1, 1, 0),  # magic 0's LZ4 frame with Kafka's wrong header checksum
    ((0, 10), "none", 1, 2, 2, 0),
    ((0, 10), "gzip", 1, 2, 2, 0),
    ((0, 10, 1), "snappy", 1, 2, 3, 1),
]


@pytest.mark.parametrize(
    ("api", "codec", "magic", "produce_v", "fetch_v", "join_v"),
    GROUP_CASES,
    ids=[f"{'.'.join(map(str, c[0]))}-{c[1]}" for c in GROUP_CASES],
)
def test_kafka_python_2_group(
    old_kafka_python: Path,
    kgc: KgcProcess,
    api: tuple[int, ...],
    codec: str,
    magic: int,
    produce_v: int,
    fetch_v: int,
    join_v: int,
) -> None:
    topic = f"old-{'-'.join(map(str, api))}-{codec}"
    group = f"g-{topic}"
    create_topic(kgc, topic)
    before = {
        ("Produce", produce_v): served(kgc, "Produce", produce_v),
        ("Fetch", fetch_v): served(kgc, "Fetch", fetch_v),
        ("JoinGroup", join_v): served(kgc, "JoinGroup", join_v),
        ("OffsetCommit", 2): served(kgc, "OffsetCommit", 2),
        ("OffsetFetch", 1): served(kgc, "OffsetFetch", 1),
    }
    api_json = json.dumps(api)
    produced = run_old(old_kafka_python, PRODUCER, kgc.bootstrap, topic, api_json, codec, N, 0)
    out = run_old(old_kafka_python, GROUP_CONSUMER, kgc.bootstrap, topic, group, api_json, N)
    check_round_trip(produced, out["records"], magic)
    ends = {p: 1 + max(o for q, o, *_ in out["records"] if q == p) for p in range(PARTITIONS)}
    # The old client reads its own commits back, and a modern one sees the same offsets.
    assert {int(p): o for p, o in out["committed"].items()} == ends
    assert modern_committed(kgc, group, topic) == ends
    # Stored as v2 batches: a modern consumer reads the same records, offsets and timestamps.
    stored = modern_read(kgc, topic, N)
    by_value = {v: (p, o, ts) for v, p, o, ts in produced}
    for p, o, v, ts in stored:
        assert by_value[v][:2] == (p, o)
        assert ts == (by_value[v][2] if magic else -1)
    # A restarted old member resumes at its commits: only the new records come.
    more = run_old(old_kafka_python, PRODUCER, kgc.bootstrap, topic, api_json, codec, 5, N)
    again = run_old(old_kafka_python, GROUP_CONSUMER, kgc.bootstrap, topic, group, api_json, 5)
    assert sorted(r[3] for r in again["records"]) == sorted(v for v, *_ in more)
    for (name, v), n in before.items():
        assert served(kgc, name, v) > n, f"{name} v{v} was not used"


@pytest.mark.parametrize(
    ("api", "commit_v", "fetch_offsets_v"),
    [((0, 8, 1), 0, 0), ((0, 8, 2), 1, 1)],
    ids=["0.8.1", "0.8.2"],
)
def test_kafka_python_2_assign_mode_commits(
    old_kafka_python: Path,
    kgc: KgcProcess,
    api: tuple[int, ...],
    commit_v: int,
    fetch_offsets_v: int,
) -> None:
    """The 0.8 protocols: no group membership, OffsetCommit v0/v1 and OffsetFetch v0/v1
    (Produce v0, Fetch v0, ListOffsets v0, Metadata v0)."""
    topic = f"old-{'-'.join(map(str, api))}"
    group = f"g-{topic}"
    create_topic(kgc, topic, version=0)  # CreateTopics v0, as old admin tools send it
    commits = served(kgc, "OffsetCommit", commit_v)
    fetches = served(kgc, "OffsetFetch", fetch_offsets_v)
    produce0, fetch0, list0 = (
        served(kgc, "Produce", 0),
        served(kgc, "Fetch", 0),
        served(kgc, "ListOffsets", 0),
    )
    api_json = json.dumps(api)
    produced = run_old(old_kafka_python, PRODUCER, kgc.bootstrap, topic, api_json, "gzip", N, 0)
    out = run_old(
        old_kafka_python, ASSIGNED_CONSUMER, kgc.bootstrap, topic, group, api_json, N, PARTITIONS
    )
    assert all(o is None for o in out["before"].values())  # nothing committed yet
    check_round_trip(produced, out["records"], magic=0)
    ends = {p: 1 + max(o for q, o, *_ in out["records"] if q == p) for p in range(PARTITIONS)}
    assert {int(p): o for p, o in out["committed"].items()} == ends
    assert modern_committed(kgc, group, topic) == ends
    assert served(kgc, "OffsetCommit", commit_v) > commits
    assert served(kgc, "OffsetFetch", fetch_offsets_v) > fetches
    assert served(kgc, "Produce", 0) > produce0
    assert served(kgc, "Fetch", 0) > fetch0
    assert served(kgc, "ListOffsets", 0) > list0


def test_librdkafka_with_broker_version_fallback_0_9(kgc: KgcProcess) -> None:
    """librdkafka told the broker is 0.9 (no ApiVersions): message format 0 on Produce v1 and
    Fetch v1, Metadata v0, ListOffsets v0, JoinGroup v0, OffsetCommit v2, OffsetFetch v1.
    (With a fallback of 0.10 or later librdkafka 2.x asks ApiVersions anyway, 0.10 brokers
    answering it, and speaks today's versions.)"""
    topic = "rdkafka-0.9"
    group = f"g-{topic}"
    create_topic(kgc, topic)
    old = {"api.version.request": False, "broker.version.fallback": "0.9.0"}
    used = [
        ("Produce", 1),
        ("Fetch", 1),
        ("Metadata", 0),
        ("ListOffsets", 0),
        ("JoinGroup", 0),
        ("SyncGroup", 0),
        ("OffsetCommit", 2),
        ("OffsetFetch", 1),
    ]
    before = {k: served(kgc, *k) for k in used}
    apis_asked = served(kgc, "ApiVersions", 3) + served(kgc, "ApiVersions", 0)
    p = Producer({"bootstrap.servers": kgc.bootstrap, **old, "linger.ms": 10})
    for i in range(N):
        p.produce(topic, key=f"k{i % 7}", value=f"v{i}")
    assert p.flush(30) == 0
    del p
    c = Consumer(
        {
            "bootstrap.servers": kgc.bootstrap,
            **old,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10_000,
        }
    )
    c.subscribe([topic])
    got: list[tuple[int, int, str, int]] = []
    try:
        while len(got) < N:
            m = c.poll(30)
            assert m is not None, f"consumed {len(got)} of {N}"
            assert m.error() is None, m.error()
            got.append((m.partition(), m.offset(), m.value().decode(), m.timestamp()[0]))
            if len(got) % 50 == 0 or len(got) == N:
                c.commit(asynchronous=False)
        committed = c.committed([TopicPartition(topic, q) for q in range(PARTITIONS)], timeout=30)
    finally:
        c.close()
    assert sorted(v for _, _, v, _ in got) == sorted(f"v{i}" for i in range(N))
    assert {ts_type for *_, ts_type in got} == {TIMESTAMP_NOT_AVAILABLE}  # magic 0
    for q in range(PARTITIONS):
        assert sorted(o for pp, o, _, _ in got if pp == q) == list(
            range(sum(1 for pp, *_ in got if pp == q))
        )
    ends = {q: 1 + max(o for pp, o, _, _ in got if pp == q) for q in range(PARTITIONS)}
    assert {tp.partition: tp.offset for tp in committed} == ends
    for k, n in before.items():
        assert served(kgc, *k) > n, f"{k[0]} v{k[1]} was not used"
    # It never asked (a modern client, next, does).
    assert served(kgc, "ApiVersions", 3) + served(kgc, "ApiVersions", 0) == apis_asked
    assert modern_committed(kgc, group, topic) == ends
