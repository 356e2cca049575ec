"""Transactions on a three-node cluster: confluent-kafka's transactional producer against
partitions led by several nodes, through kills of the coordinator and of a leader.

Each test starts its own cluster (6 offsets and 6 ``__transaction_state`` partitions,
500 ms heartbeats, 3 s sessions) and a 6-partition topic, so a transaction's partitions,
its coordinator and its group's coordinator sit on different nodes; the coordinator's
markers then travel as WriteTxnMarkers between nodes. read_committed consumers check what
is visible: every record of a committed transaction, none of an aborted one.

* commit and abort across the nodes, with ``send_offsets_to_transaction`` (the
  ``__consumer_offsets`` marker goes to the group coordinator's node);
* the coordinator SIGKILLed after EndTxn(commit) was answered, while a leader it must mark
  is paused: the node that takes the ``__transaction_state`` partition over reloads the
  PrepareCommit and sends the markers; everything becomes visible;
* the coordinator SIGKILLed before EndTxn: the producer's commit goes to the new
  coordinator, and the transaction ends all-or-nothing (what the producer was told
  committed is visible, else nothing of it);
* a partition leader paused after PrepareCommit and SIGKILLed before it got its marker:
  the marker reaches the partition's new leader;
* the coordinator SIGSTOPped past its lease with markers pending (a zombie): the next
  holder completes the transaction and serves the producer's next ones; once SIGCONTed the
  zombie's markers are fenced by coordinator epoch, nothing aborted shown, nothing lost.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from support.clusterkit import Cluster
from support.clustertxnkit import (
    PARTITIONS,
    TXN_PARTITIONS,
    pick_txn_id,
    read_committed,
    spread_topic,
    txn_coordinator,
)

pytestmark = [pytest.mark.postgres, pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path,
        pg_url,
        nodes=3,
        offsets_partitions=6,
        extra=("--transaction-state-log-num-partitions", str(TXN_PARTITIONS)),
    )
    try:
        c.start_all()
        yield c
    finally:
        c.close()


def producer(cluster: Cluster, txn_id: str) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": cluster.all_bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 60000,
            "socket.timeout.ms": 4000,
            "retry.backoff.ms": 50,
        }
    )
    p.init_transactions(30)
    return p


def send(
    p: Producer, topic: str, partitions: list[int], tag: str, per_partition: int = 3
) -> set[str]:
    values = set()
    for part in partitions:
        for i in range(per_partition):
            value = f"{tag}-{part}-{i}"
            p.produce(topic, value=value.encode(), partition=part)
            values.add(value)
    p.flush(30)
    return values


def test_commit_and_abort_across_nodes(cluster: Cluster) -> None:
    topic, leaders = spread_topic(cluster)
    txn_id, coordinator, _ = pick_txn_id(cluster, leaders)
    p = producer(cluster, txn_id)
    # A group coordinated elsewhere (when one is): its offsets partition's marker travels too.
    groups = [f"g-{i}-{uuid.uuid4().hex[:6]}" for i in range(50)]
    group = next((g for g in groups if cluster.coordinator_of(g) != coordinator), groups[0])
    p.begin_transaction()
    committed = send(p, topic, list(range(PARTITIONS)), "committed")
    c = Consumer({"bootstrap.servers": cluster.all_bootstrap, "group.id": group})
    try:
        p.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 42)], c.consumer_group_metadata(), 30
        )
    finally:
        c.close()
    started = time.monotonic()
    p.commit_transaction(30)
    print(
        f"\nEndTxn(commit) across {len(set(leaders.values()))} leaders: {time.monotonic() - started:.3f} s"
    )
    p.begin_transaction()
    aborted = send(p, topic, list(range(PARTITIONS)), "aborted")
    p.abort_transaction(30)
    p.begin_transaction()
    sentinel = send(p, topic, list(range(PARTITIONS)), "after", per_partition=1)
    p.commit_transaction(30)
    seen = read_committed(cluster, topic, committed | sentinel)
    assert not seen & aborted
    # The transactional offset reached the group's coordinator, wherever it runs.
    c = Consumer({"bootstrap.servers": cluster.all_bootstrap, "group.id": group})
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], 30)
        assert tp.offset == 42
    finally:
        c.close()


def test_coordinator_killed_after_end_txn(cluster: Cluster) -> None:
    topic, leaders = spread_topic(cluster)
    txn_id, coordinator, held_back = pick_txn_id(cluster, leaders)
    p = producer(cluster, txn_id)
    p.begin_transaction()
    values = send(p, topic, list(range(PARTITIONS)), "v")
    # The leader paused: its marker cannot land before the coordinator dies.
    cluster.pause(held_back)
    try:
        p.commit_transaction(30)  # answered once PrepareCommit is durable
        cluster.kill(coordinator)
        killed = time.monotonic()
    finally:
        cluster.resume(held_back)
    seen = read_committed(cluster, topic, values, timeout=90)
    assert seen == values
    print(f"\ncoordinator SIGKILLed -> committed data visible in {time.monotonic() - killed:.1f} s")
    assert txn_coordinator(cluster, txn_id) != coordinator


def test_coordinator_killed_before_end_txn(cluster: Cluster) -> None:
    topic, leaders = spread_topic(cluster)
    txn_id, coordinator, _ = pick_txn_id(cluster, leaders)
    p = producer(cluster, txn_id)
    p.begin_transaction()
    values = send(p, topic, list(range(PARTITIONS)), "v")
    cluster.kill(coordinator)
    try:
        p.commit_transaction(60)
        committed = True
    except KafkaException:
        committed = False
        p.abort_transaction(60)
    # A later transaction of another producer shows where the read may stop.
    other = producer(cluster, f"{txn_id}-after")
    other.begin_transaction()
    sentinel = send(other, topic, list(range(PARTITIONS)), "after", per_partition=1)
    other.commit_transaction(60)
    seen = read_committed(cluster, topic, sentinel | (values if committed else set()), 90)
    shown = seen & values
    assert shown in (set(), values), f"partly visible: {len(shown)} of {len(values)}"
    if committed:
        assert shown == values
    # The producer's end went to the node that took the id's partition over.
    assert txn_coordinator(cluster, txn_id) != coordinator
    print(f"transaction {'committed' if committed else 'aborted'} on the new coordinator")


def test_leader_killed_before_its_marker(cluster: Cluster) -> None:
    topic, leaders = spread_topic(cluster)
    txn_id, coordinator, victim = pick_txn_id(cluster, leaders)
    assert victim != coordinator  # the coordinator lives on and retries the marker itself
    p = producer(cluster, txn_id)
    p.begin_transaction()
    values = send(p, topic, list(range(PARTITIONS)), "v")
    cluster.pause(victim)
    try:
        p.commit_transaction(30)  # answered once PrepareCommit is durable
    finally:
        cluster.kill(victim)  # SIGKILL of the paused process: it never wrote the marker
    killed = time.monotonic()
    seen = read_committed(cluster, topic, values, timeout=90)
    assert seen == values
    print(f"\nleader SIGKILLed -> committed data visible in {time.monotonic() - killed:.1f} s")
    new_leaders = cluster.wait_topic_led(topic)
    assert victim not in new_leaders.values()


def test_zombie_coordinator_is_fenced(cluster: Cluster) -> None:
    """The coordinator's node SIGSTOPped past its lease with a transaction's markers still to
    send (a leader paused, so one cannot land first): another node takes the id over and
    completes it, the producer goes on there (a transaction aborted, one committed); then the
    zombie is SIGCONTed, its markers and writes at the old coordinator epoch fenced. Nothing
    aborted is shown, nothing committed lost."""
    topic, leaders = spread_topic(cluster)
    txn_id, coordinator, held_back = pick_txn_id(cluster, leaders)
    p = producer(cluster, txn_id)
    everywhere = list(range(PARTITIONS))
    p.begin_transaction()
    first = send(p, topic, everywhere, "first")
    cluster.pause(held_back)
    try:
        p.commit_transaction(30)  # answered once PrepareCommit is durable
        cluster.pause(coordinator)  # the zombie: it still believes it holds the id
    finally:
        cluster.resume(held_back)
    try:
        assert txn_coordinator(cluster, txn_id, timeout=60) != coordinator
        read_committed(cluster, topic, first, timeout=90)
        p.begin_transaction()
        aborted = send(p, topic, everywhere, "aborted")
        p.abort_transaction(60)
        p.begin_transaction()
        second = send(p, topic, everywhere, "second")
        p.commit_transaction(60)
    finally:
        cluster.resume(coordinator)
    cluster.wait_ready(90)
    p.begin_transaction()
    third = send(p, topic, everywhere, "third", per_partition=1)
    p.commit_transaction(60)
    seen = read_committed(cluster, topic, first | second | third, timeout=90)
    assert not seen & aborted, sorted(seen & aborted)[:10]
    assert seen == first | second | third
