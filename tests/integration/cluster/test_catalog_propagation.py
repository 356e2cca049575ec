"""A topic created on one node is known to the others at once, not a heartbeat later.

Nodes poll the catalog's version at every heartbeat (the truth) and also LISTEN for a
NOTIFY that the creating node sends after its commit (a hint). With a 10 s heartbeat, a
commit to a coordinator on another node right after CreateTopics must not be refused
UNKNOWN_TOPIC_OR_PARTITION for 10 s.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.groupkit import commit_offset, create_topic, wait_until
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.messages import find_coordinator, metadata

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def knows(node: KgcProcess, topic: str) -> bool:
    with Connection.to(node.bootstrap) as conn:
        resp = conn.call(
            metadata.API_KEY,
            9,
            metadata.Request(
                topics=[metadata.MetadataRequestTopic(name=topic)],
                allow_auto_topic_creation=False,
            ),
        )
    return bool(resp.topics[0].error_code == 0 and resp.topics[0].partitions)


def coordinator(node: KgcProcess, group: str) -> int:
    with Connection.to(node.bootstrap) as conn:
        resp = conn.call(
            find_coordinator.API_KEY, 3, find_coordinator.Request(key=group, key_type=0)
        )
    return int(resp.node_id)


def test_a_new_topic_reaches_the_other_node_before_its_heartbeat(
    tmp_path: Path, pg_url: str
) -> None:
    flags = (
        "--storage-url", pg_url,
        "--offsets-topic-num-partitions", "4",
        "--broker-heartbeat-interval-ms", "10000",
        "--broker-session-timeout-ms", "30000",
    )  # fmt: skip
    a = KgcProcess(tmp_path / "a" / "data", "--node-id", "1", *flags)
    b = KgcProcess(tmp_path / "b" / "data", "--node-id", "2", *flags)
    for n in (a, b):
        n.data_dir.parent.mkdir()
        n.start()
    try:
        # Both nodes lead offsets partitions, loaded (FindCoordinator names a node only then).
        wait_until(
            lambda: {coordinator(b, f"g{i}") for i in range(40)} == {1, 2},
            timeout=30,
            what="both nodes coordinating",
        )
        create_topic(a.bootstrap, "fresh", 2)
        created = time.monotonic()
        wait_until(lambda: knows(b, "fresh"), timeout=3, interval=0.02, what="node 2 knows it")
        assert time.monotonic() - created < 3
        # A group node 2 coordinates takes offsets of the topic at once.
        group = next(g for g in (f"g{i}" for i in range(1000)) if coordinator(b, g) == 2)
        with Connection.to(b.bootstrap) as conn:
            assert commit_offset(conn, group, "fresh", 1) == 0
    finally:
        for n in (a, b):
            if n.alive():
                n.stop()
