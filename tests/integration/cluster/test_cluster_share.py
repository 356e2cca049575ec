"""Share groups on a three-node cluster: confluent-kafka's ShareConsumer (librdkafka 2.16)
through the SIGKILL of a node, with nothing acknowledged delivered again.

The share-partition leader is the data partition's lease holder; the share partition's
state lives in the ``__share_group_state`` partition of "group:topicId:partition", held by
another node (the group id is chosen so), and reached through the share coordinator's
inter-broker APIs. Each test:

1. consumer A accepts offsets 0-39 and releases every later one it sees, each
   acknowledgement confirmed by ``commit_sync`` (so durable), then closes;
2. a holder process acquires the next records and holds them, unacknowledged;
3. the node under test, then the holder, are SIGKILLed;
4. consumer B reads what is left.

Kafka's rules, checked: no offset A acknowledged reaches B; every other offset does.
A delivery count is persisted only when a record is acknowledged, released or times out,
never on acquisition, so:

* the data partition's leader killed: the next leader reads the persisted state, and a
  record the holder had comes back with the persisted count + 1, which is the count the
  holder saw (``test_share_partition_leader_killed``);
* the state partition's holder killed: the share-partition leader lives on, the holder's
  connection closes and its records are released with their counts kept, that release
  written to the state partition's next holder once the lease moved (the persister's
  retries) (``test_share_state_holder_killed``).

About 30-40 s each on two cores (``slow``).

``test_dead_letter_to_another_leader``: a share consumer rejects a record of a partition
whose leader does not lead the dead-letter partition it maps to; the leader sends the copy
to the other node (an acks=-1 Produce over the inter-broker client) and a plain consumer
reads it with Kafka's ``__dlq.errors.*`` headers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from support.clusterkit import Cluster
from support.groupkit import create_topic

from coordinator.share.state_shard import topic_id_str
from coordinator.tools.client import Connection
from protocol.messages import describe_share_group_offsets as dsgo
from protocol.messages import find_coordinator

pytestmark = [pytest.mark.postgres, pytest.mark.integration, pytest.mark.slow]

RECORDS = 100
ACKED = 40  # offsets below are accepted by A, the rest released
DEADLINE_S = 90.0


def state_holder(cluster: Cluster, group: str, topic_id: bytes) -> tuple[int, int]:
    """(error, node id) FindCoordinator key type 2 answers for the group's partition 0."""
    key = f"{group}:{topic_id_str(topic_id)}:0"
    req = find_coordinator.Request(key_type=2, coordinator_keys=[key])

    def ask(c: Connection) -> tuple[int, int]:
        (coord,) = c.request(find_coordinator.API_KEY, req, version=6)[1].coordinators
        return coord.error_code, coord.node_id

    return cluster._ask(None, ask)


def place(cluster: Cluster, topic: str) -> tuple[str, int, int]:
    """A group whose state partition's holder is not the data partition's leader:
    (group, data leader, state holder)."""
    leader = cluster.wait_topic_led(topic)[0]
    (t,) = cluster.metadata([topic]).topics
    for i in range(200):
        group = f"sq-{i}"
        end = time.monotonic() + 30
        while True:
            error, node = state_holder(cluster, group, t.topic_id)
            if error == 0:
                break
            assert time.monotonic() < end, f"no holder for {group}'s state: error {error}"
            time.sleep(0.2)
        if node != leader:
            return group, leader, node
    raise AssertionError("every group's state is on the data leader")


def earliest(bootstrap: str, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(timeout=30)


def consumer(bootstrap: str, group: str, explicit: bool) -> ShareConsumer:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "fetch.wait.max.ms": 100,
        "socket.timeout.ms": 4000,  # a killed node's requests fail over soon
    }
    if explicit:
        config["share.acknowledgement.mode"] = "explicit"
    return ShareConsumer(config)


HOLDER = textwrap.dedent(
    """
    import sys
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                       "share.acknowledgement.mode": "explicit", "fetch.wait.max.ms": 100})
    c.subscribe([sys.argv[3]])
    while True:
        msgs = [m for m in (c.poll(0.5) or []) if m.error() is None]
        if msgs:
            print(" ".join(f"{m.offset()}:{m.delivery_count()}" for m in msgs), flush=True)
            sys.stdin.read()  # hold them until killed
    """
)


def accept_then_release(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """Consumer A: offsets below ACKED accepted, later ones released, each confirmed by
    commit_sync; returns the count each released offset was last delivered with."""
    a = consumer(bootstrap, group, explicit=True)
    a.subscribe([topic])
    acked: set[int] = set()
    released: dict[int, int] = {}
    end = time.monotonic() + DEADLINE_S
    try:
        while len(acked) < ACKED:
            assert time.monotonic() < end, f"A acknowledged only {sorted(acked)}"
            msgs = [m for m in (a.poll(0.2) or []) if m.error() is None]
            for m in msgs:
                kind = AcknowledgeType.ACCEPT if m.offset() < ACKED else AcknowledgeType.RELEASE
                a.acknowledge(m, kind)
            if msgs and all(v is None for v in a.commit_sync(30).values()):
                for m in msgs:
                    if m.offset() < ACKED:
                        acked.add(m.offset())
                    else:
                        released[m.offset()] = m.delivery_count()
    finally:
        a.close()
    return released


def hold(bootstrap: str, group: str, topic: str) -> tuple[subprocess.Popen[bytes], dict[int, int]]:
    """The holder process and the offsets it holds with their delivery counts."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, bootstrap, group, topic],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ},
    )
    assert holder.stdout is not None
    line = holder.stdout.readline().decode()
    held = {int(o): int(c) for o, c in (x.split(":") for x in line.split())}
    assert held, "the holder got nothing"
    return holder, held


def drain(bootstrap: str, group: str, topic: str, want: set[int]) -> dict[int, int]:
    """Consumer B (implicit acknowledgement) until it saw ``want``: offset -> count of its
    first delivery to B (every offset B sees, wanted or not)."""
    b = consumer(bootstrap, group, explicit=False)
    b.subscribe([topic])
    seen: dict[int, int] = {}
    end = time.monotonic() + DEADLINE_S
    try:
        while not want <= set(seen):
            assert time.monotonic() < end, f"B is missing {sorted(want - set(seen))}"
            for m in b.poll(0.2) or []:
                if m.error() is None:
                    seen.setdefault(m.offset(), m.delivery_count())
            b.commit_sync(30)
        # A little longer: an acknowledged record must not come back late either.
        until = time.monotonic() + 2.0
        while time.monotonic() < until:
            for m in b.poll(0.2) or []:
                if m.error() is None:
                    seen.setdefault(m.offset(), m.delivery_count())
    finally:
        b.close()
    return seen


def scenario(cluster: Cluster, topic: str, kill: str) -> None:
    boot = cluster.nodes[min(cluster.live())].bootstrap
    create_topic(boot, topic, 1)
    group, leader, holder_node = place(cluster, topic)
    earliest(cluster.bootstrap, group)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        p.produce(topic, value=f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0

    released = accept_then_release(cluster.bootstrap, group, topic)
    holder, held = hold(cluster.bootstrap, group, topic)
    assert min(held) >= ACKED  # nothing acknowledged was handed out again
    victim = leader if kill == "leader" else holder_node
    # The node first: were the holder first, the leader would release its records on the
    # disconnect (and persist them) before it died.
    cluster.kill(victim)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    started = time.monotonic()
    seen = drain(cluster.bootstrap, group, topic, set(range(ACKED, RECORDS)))
    print(
        f"{kill} (node {victim}) killed: all {RECORDS - ACKED} records back in "
        f"{time.monotonic() - started:.1f} s"
    )
    assert not set(seen) & set(range(ACKED)), "an acknowledged record was delivered again"
    assert set(seen) == set(range(ACKED, RECORDS))
    for offset, count in seen.items():
        if offset not in held:
            assert count == released.get(offset, 0) + 1, (offset, count)
        elif kill == "leader":
            # Its acquisition died with the leader: persisted count + 1, what the holder saw.
            assert count == held[offset], (offset, count, held[offset])
        else:
            # Released on the holder's disconnect with its count kept, and that release
            # written (through the retries) to the next state holder; the leader unloads
            # the share partition as the group's last session here ended, so B's load
            # reads the released count (+1) or, when the read came first, the count
            # persisted before the holder (+1, what the holder saw).
            assert count in (held[offset], held[offset] + 1), (offset, count, held[offset])
    # The offsets as the group's coordinator reports them, its state and data partition on
    # whichever nodes hold them now (the persisted start offset trails one write, as Kafka's).
    error, start, lag = described(cluster, group, topic)
    assert error == 0 and ACKED <= start <= RECORDS and 0 <= lag <= RECORDS - start


def described(cluster: Cluster, group: str, topic: str) -> tuple[int, int, int]:
    """DescribeShareGroupOffsets v1 at the group's coordinator: (error, start offset, lag)
    of partition 0 (its state and its data partition may be on other nodes)."""
    req = dsgo.Request(
        groups=[
            dsgo.DescribeShareGroupOffsetsRequestGroup(
                group_id=group,
                topics=[
                    dsgo.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0])
                ],
            )
        ]
    )
    node = cluster.coordinator_of(group)

    def ask(c: Connection) -> tuple[int, int, int]:
        (t,) = c.request(dsgo.API_KEY, req, version=1)[1].groups[0].topics
        p = t.partitions[0]
        return p.error_code, p.start_offset, p.lag

    return cluster._ask(node, ask)


def test_share_partition_leader_killed(cluster: Cluster) -> None:
    scenario(cluster, "sq-leader", "leader")


def test_share_state_holder_killed(cluster: Cluster) -> None:
    scenario(cluster, "sq-state", "state")


def test_dead_letter_to_another_leader(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    dlq = NewTopic("dlq.sq", 1, 1, config={"errors.deadletterqueue.group.enable": "true"})
    source = NewTopic("sq-dl", 6, 1)
    for fut in admin.create_topics([dlq, source]).values():
        fut.result(timeout=30)
    dlq_leader = cluster.wait_topic_led("dlq.sq")[0]
    # Every source partition maps to dead-letter partition 0 (source % 1): take one led
    # by another node.
    others = {p: n for p, n in cluster.wait_topic_led("sq-dl").items() if n != dlq_leader}
    assert others, f"every partition of sq-dl is led by node {dlq_leader}"
    partition = min(others)
    group = "sq-dlq"
    earliest(cluster.bootstrap, group)
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in (
            ("errors.deadletterqueue.topic.name", "dlq.sq"),
            ("errors.deadletterqueue.copy.record.enable", "true"),
        )
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(timeout=30)
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    p.produce("sq-dl", key=b"k", value=b"v", partition=partition)
    assert p.flush(30) == 0

    c = consumer(cluster.bootstrap, group, explicit=True)
    c.subscribe(["sq-dl"])
    try:
        end = time.monotonic() + DEADLINE_S
        rejected = False
        while not rejected:
            assert time.monotonic() < end, "the share consumer got nothing"
            for m in c.poll(0.2) or []:
                if m.error() is None:
                    c.acknowledge(m, AcknowledgeType.REJECT)
                    rejected = True
        assert all(v is None for v in c.commit_sync(30).values())
    finally:
        c.close()

    reader = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "sq-dlq-reader",
            "auto.offset.reset": "earliest",
        }
    )
    reader.subscribe(["dlq.sq"])
    try:
        end = time.monotonic() + DEADLINE_S
        m: Any = None
        while m is None or m.error() is not None:
            assert time.monotonic() < end, "no dead letter on dlq.sq"
            m = reader.poll(0.2)
    finally:
        reader.close()
    assert (m.partition(), m.key(), m.value()) == (0, b"k", b"v")
    assert dict(m.headers() or []) == {
        "__dlq.errors.topic": b"sq-dl",
        "__dlq.errors.partition": str(partition).encode(),
        "__dlq.errors.offset": b"0",
        "__dlq.errors.group": group.encode(),
        "__dlq.errors.delivery.count": b"1",
        "__dlq.errors.message": b"Offset rejected by client.",
    }
