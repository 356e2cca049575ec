"""Discovery APIs, Kafka vs kgc: ApiVersions, Metadata, FindCoordinator, DescribeCluster,
DescribeLogDirs, answer by answer.

ApiVersions lists every API a server serves; kgc serves fewer than Kafka (no KRaft, no
share groups), so the scenario records, for each API kgc serves, the range each
server advertises (``Side.note``): a narrower range is then a named difference, argued in
known_differences.toml, and an API Kafka serves beyond kgc's table is not one.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest
from support.diffkit import Runner, Side, run_both
from support.kafkaserver import running_broker
from support.kgc_process import KgcProcess

from coordinator.apis import SUPPORTED
from protocol.messages import (
    BY_KEY,
    api_versions,
    describe_cluster,
    describe_log_dirs,
    find_coordinator,
    metadata,
)
from protocol.primitives import uvarint

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

API_VERSIONS, METADATA, FIND_COORDINATOR = 18, 3, 10
DESCRIBE_CLUSTER, DESCRIBE_LOG_DIRS = 60, 35


def _ranges(resp: api_versions.ApiVersionsResponse) -> dict[str, object]:
    """The ranges advertised for the APIs kgc serves (absent: 'none')."""
    got = {k.api_key: [k.min_version, k.max_version] for k in resp.api_keys}
    return {
        BY_KEY[key].__name__.rsplit(".", 1)[-1]: got.get(key, "none") for key in sorted(SUPPORTED)
    }


def _compact_str(text: str) -> bytes:
    raw = text.encode()
    return uvarint(len(raw) + 1) + raw


def _raw_api_versions(side: Side, version: int) -> api_versions.ApiVersionsResponse | str:
    """ApiVersions at ``version``, one neither server knows: the flexible header and body of
    v3 sent by hand (the codec writes only known versions). A server answers such a request
    in v0's layout (KIP-511)."""
    client_id = b"diff-raw"
    header = struct.pack(">hhih", API_VERSIONS, version, 7, len(client_id)) + client_id + b"\0"
    body = _compact_str("diff") + _compact_str("1.0") + b"\0"
    frame = header + body
    with socket.create_connection(_addr(side.bootstrap), timeout=side.timeout) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        data = _read_frame(s)
    if data is None:
        return "closed"
    (correlation,) = struct.unpack_from(">i", data)
    assert correlation == 7
    resp, _ = api_versions.RESPONSE_DECODERS[0](data, 4)
    return resp


def _addr(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


def _read_frame(s: socket.socket) -> bytes | None:
    def read(n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    size = read(4)
    if size is None:
        return None
    return read(struct.unpack(">i", size)[0])


def api_versions_every_version(side: Side) -> None:
    for v in range(5):
        body = api_versions.ApiVersionsRequest(
            client_software_name="diff-client", client_software_version="1.0.0"
        )
        resp = side.member(f"v{v}").conn.call(API_VERSIONS, v, body)
        side.note(
            f"api_versions.v{v}",
            API_VERSIONS,
            v,
            {"error_code": resp.error_code, "ranges": _ranges(resp)},
        )
        side.note(
            f"api_versions.v{v}.features",
            API_VERSIONS,
            v,
            {
                # By name (Kafka lists them in its maps' order): each feature compared alone.
                "supported_features": {
                    f.name.replace(".", "_"): (f.min_version, f.max_version)
                    for f in resp.supported_features
                },
                "finalized_features_epoch": resp.finalized_features_epoch,
                "finalized_features": {
                    f.name.replace(".", "_"): (f.min_version_level, f.max_version_level)
                    for f in resp.finalized_features
                },
                "zk_migration_ready": resp.zk_migration_ready,
            },
        )
    # KIP-511: the client's software name and version must match Kafka's pattern.
    for name, version in (("bad name!", "1.0"), ("diff", "1.0 beta"), ("", "")):
        resp = side.member("bad-name").conn.call(
            API_VERSIONS,
            3,
            api_versions.ApiVersionsRequest(
                client_software_name=name, client_software_version=version
            ),
        )
        side.note(
            f"api_versions.bad_software_name[{name!r},{version!r}]",
            API_VERSIONS,
            3,
            {
                "error_code": resp.error_code,
                "api_keys": len(resp.api_keys),
                "ranges": _ranges(resp) if resp.api_keys else [],
            },
        )
    # A version neither server serves: UNSUPPORTED_VERSION in v0's layout, naming
    # ApiVersions' own range so the client can retry.
    for v in (6, 127):
        raw = _raw_api_versions(side, v)
        side.note(
            f"api_versions.v{v}_unsupported",
            API_VERSIONS,
            0,
            raw
            if isinstance(raw, str)
            else {
                "error_code": raw.error_code,
                "api_keys": [
                    [k.api_key, k.min_version, k.max_version]
                    for k in raw.api_keys
                    if k.api_key == API_VERSIONS
                ],
                "other_keys": len([k for k in raw.api_keys if k.api_key != API_VERSIONS]),
            },
        )


def _meta(*names: str | None, auto: bool = True, ops: bool = False) -> metadata.MetadataRequest:
    return metadata.MetadataRequest(
        topics=[metadata.MetadataRequestTopic(name=n) for n in names],
        allow_auto_topic_creation=auto,
        include_topic_authorized_operations=ops,
    )


def metadata_topics(side: Side) -> None:
    topic = side.name("meta")
    side.create_topic(topic, 3)
    side.create_topic(side.name("meta-one"), 1)
    for v in (0, 1, 4, 7, 9, 10, 12):
        side.call(METADATA, v, _meta(topic), step=f"metadata.v{v}")
    side.call(METADATA, 12, _meta(topic, side.name("meta-one")), step="metadata.two_topics")
    side.call(METADATA, 12, _meta(topic, topic), step="metadata.same_topic_twice")
    side.call(METADATA, 12, _meta(side.name("nope"), auto=False), step="metadata.unknown_no_auto")
    for bad in ("bad/name", "", "x" * 250, ".."):
        side.call(METADATA, 12, _meta(bad, auto=False), step=f"metadata.name[{bad[:12]!r}]")
    # Authorized operations (v8+): no authorizer, so every operation a topic has.
    for v in (8, 10, 12):
        side.call(METADATA, v, _meta(topic, ops=True), step=f"metadata.v{v}.topic_ops")
    for v in (8, 10):
        side.call(
            METADATA,
            v,
            metadata.MetadataRequest(
                topics=[metadata.MetadataRequestTopic(name=topic)],
                include_cluster_authorized_operations=True,
            ),
            step=f"metadata.v{v}.cluster_ops",
        )
    # By topic id (v12): the id a v12 answer gave, an unknown one, a name with an id.
    topic_id = side.call(METADATA, 12, _meta(topic), step="metadata.id_of").topics[0].topic_id
    side.call(
        METADATA,
        12,
        metadata.MetadataRequest(
            topics=[metadata.MetadataRequestTopic(topic_id=topic_id, name=None)]
        ),
        step="metadata.by_id",
    )
    side.call(
        METADATA,
        12,
        metadata.MetadataRequest(
            topics=[metadata.MetadataRequestTopic(topic_id=b"\x07" * 16, name=None)]
        ),
        step="metadata.by_unknown_id",
    )
    # Internal topics: __consumer_offsets is one once it exists on both sides.
    side.wait_coordinator(side.name("meta-group"))
    resp = side.call(
        METADATA, 12, _meta("__consumer_offsets", auto=False), step="metadata.offsets_topic"
    )
    for t in resp.topics:  # its 50 partitions: only the count and leaders are comparable
        t.partitions = [len(t.partitions), all(p.error_code == 0 for p in t.partitions)]


def metadata_auto_create_first_answer(side: Side) -> None:
    """Kafka's default auto.create.topics.enable=true: the first Metadata naming an unknown
    topic creates it; this is that first answer (v12 with the flag, v3 without it)."""
    side.call(METADATA, 12, _meta(side.name("auto-first")), step="metadata.auto_first")
    side.call(METADATA, 3, _meta(side.name("auto-first-v3")), step="metadata.v3_auto_first")
    side.wait_leaders(side.name("auto-first"), 1)
    side.wait_leaders(side.name("auto-first-v3"), 1)


def metadata_auto_creation(side: Side) -> None:
    """An auto-created topic once created, and what auto-creation does not create."""
    topic, old = side.name("auto"), side.name("auto-v3")
    side.untimed().request(METADATA, _meta(topic), version=12)
    side.untimed().request(METADATA, _meta(old), version=3)
    side.wait_leaders(topic, 1)
    side.wait_leaders(old, 1)
    side.call(METADATA, 12, _meta(topic), step="metadata.auto_created")
    side.call(METADATA, 0, _meta(old), step="metadata.v0_auto_created")
    side.call(METADATA, 12, _meta("bad/auto"), step="metadata.auto_invalid_name")
    side.call(METADATA, 12, _meta("_" * 250), step="metadata.auto_name_too_long")
    side.call(METADATA, 12, _meta(side.name("no-auto"), auto=False), step="metadata.auto_off")


def find_coordinators(side: Side) -> None:
    group = side.name("fc-group")
    side.wait_coordinator(group)
    side.call(FIND_COORDINATOR, 0, find_coordinator.FindCoordinatorRequest(key=group), step="fc.v0")
    for v in (1, 2, 3):
        side.call(
            FIND_COORDINATOR,
            v,
            find_coordinator.FindCoordinatorRequest(key=group, key_type=0),
            step=f"fc.v{v}",
        )
    side.call(
        FIND_COORDINATOR,
        4,
        find_coordinator.FindCoordinatorRequest(
            key_type=0, coordinator_keys=[group, side.name("fc-other"), ""]
        ),
        step="fc.v4.batch",
    )
    side.call(
        FIND_COORDINATOR,
        6,
        find_coordinator.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]),
        step="fc.v6",
    )
    side.call(
        FIND_COORDINATOR,
        3,
        find_coordinator.FindCoordinatorRequest(key="", key_type=0),
        step="fc.v3.empty_key",
    )
    side.call(
        FIND_COORDINATOR,
        3,
        find_coordinator.FindCoordinatorRequest(key=group, key_type=7),
        step="fc.v3.bad_key_type",
    )
    side.call(
        FIND_COORDINATOR,
        4,
        find_coordinator.FindCoordinatorRequest(key_type=9, coordinator_keys=[group]),
        step="fc.v4.bad_key_type",
    )


def _wait_log_dirs(side: Side, topic: str, partitions: int) -> None:
    """Wait until DescribeLogDirs lists every partition (Kafka creates a partition's log a
    moment after Metadata names its leader)."""
    deadline = time.monotonic() + side.timeout
    req = describe_log_dirs.DescribeLogDirsRequest(
        topics=[
            describe_log_dirs.DescribableLogDirTopic(
                topic=topic, partitions=list(range(partitions))
            )
        ]
    )
    while time.monotonic() < deadline:
        _, resp = side.untimed().request(DESCRIBE_LOG_DIRS, req, version=4)
        listed = {p.partition_index for r in resp.results for t in r.topics for p in t.partitions}
        if len(listed) == partitions:
            return
        time.sleep(0.05)
    raise AssertionError(f"{side.label}: {topic}'s logs are not all listed")


def find_transaction_coordinator(side: Side) -> None:
    """A transaction coordinator (key type 1): the leader of the id's __transaction_state
    partition. Kafka creates the topic on the first ask and answers
    COORDINATOR_NOT_AVAILABLE meanwhile: that settles first."""
    key = side.name("txn")
    deadline = time.monotonic() + side.timeout
    while time.monotonic() < deadline:
        # v3's answer names the reason: Kafka's while it creates the topic is the default.
        _, c = side.untimed().request(
            FIND_COORDINATOR,
            find_coordinator.FindCoordinatorRequest(key=key, key_type=1),
            version=3,
        )
        if c.error_code == 0 or c.error_message != "The coordinator is not available.":
            break
        time.sleep(0.1)
    for v in (3, 4):
        side.call(
            FIND_COORDINATOR,
            v,
            find_coordinator.FindCoordinatorRequest(key=key, key_type=1, coordinator_keys=[key]),
            step=f"fc.transaction.v{v}",
        )


def cluster_and_log_dirs(side: Side) -> None:
    topic = side.name("dirs")
    side.create_topic(topic, 2)
    _wait_log_dirs(side, topic, 2)
    for v in (0, 1, 2):
        side.call(
            DESCRIBE_CLUSTER,
            v,
            describe_cluster.DescribeClusterRequest(include_cluster_authorized_operations=True),
            step=f"describe_cluster.v{v}",
        )
    side.call(
        DESCRIBE_CLUSTER,
        1,
        describe_cluster.DescribeClusterRequest(endpoint_type=2),
        step="describe_cluster.controllers",
    )
    side.call(
        DESCRIBE_CLUSTER,
        1,
        describe_cluster.DescribeClusterRequest(endpoint_type=5),
        step="describe_cluster.bad_endpoint_type",
    )
    for v in (1, 2, 4):
        resp = side.call(
            DESCRIBE_LOG_DIRS,
            v,
            describe_log_dirs.DescribeLogDirsRequest(
                topics=[
                    describe_log_dirs.DescribableLogDirTopic(topic=topic, partitions=[0, 1, 5]),
                    describe_log_dirs.DescribableLogDirTopic(
                        topic=side.name("dirs-none"), partitions=[0]
                    ),
                ]
            ),
            step=f"describe_log_dirs.v{v}",
        )
        # Kafka lists a topic's partitions in its hash map's order: no order to compare.
        for result in resp.results:
            for t in result.topics:
                t.partitions.sort(key=lambda p: p.partition_index)


def test_api_versions(diff: Runner) -> None:
    outcome = diff(api_versions_every_version)
    assert outcome.kafka.exchanges[0].response["error_code"] == 0


def test_api_versions_at_transaction_version_1(tmp_path: Path) -> None:
    """Kafka formatted at transaction.version 1 against kgc --transaction-version 1: the
    same features (transaction.version supported 0-2, finalized 1) in every version."""
    kgc = KgcProcess(tmp_path / "data", "--transaction-version", "1")
    with running_broker(features={"transaction.version": 1}) as kafka:
        kgc.start()
        try:
            outcome = run_both(api_versions_every_version, kafka.bootstrap, kgc.bootstrap)
        finally:
            kgc.stop()
    v4 = {e.step: e.response for e in outcome.kafka.exchanges}["api_versions.v4.features"]
    assert v4["finalized_features"]["transaction_version"] == (1, 1)
    assert v4["supported_features"]["transaction_version"] == (0, 2)


def test_metadata_find_coordinator_cluster(diff: Runner) -> None:
    for scenario in (
        metadata_topics,
        metadata_auto_create_first_answer,
        metadata_auto_creation,
        find_coordinators,
        find_transaction_coordinator,
    ):
        diff(scenario)
    outcome = diff(cluster_and_log_dirs)
    assert outcome.kafka.exchanges[0].response.error_code == 0
