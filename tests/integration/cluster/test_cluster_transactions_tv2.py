"""TV2 (KIP-890 part 2) on a three-node cluster: KafkaProducer 4.4's transactions when
``transaction.version`` 2 is finalized, the partition led by one node, the transactional
id coordinated by another, the group by a third when the hashes allow.

The Java client then sends no AddPartitionsToTxn or AddOffsetsToTxn: the leader adds its
partition with AddPartitionsToTxn v5 to the coordinator's node, the group coordinator adds
``__consumer_offsets`` the same way from TxnOffsetCommit v5, and every EndTxn (v5) bumps the
epoch. Committed transactions are visible to read_committed, aborted ones are not, and a
transaction left open while its coordinator's node is SIGKILLed is committed through the
node that takes the ``__transaction_state`` partition over.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.clusterkit import Cluster
from support.clustertxnkit import (
    TXN_PARTITIONS,
    pick_txn_id,
    read_committed,
    spread_topic,
    txn_coordinator,
)
from support.javakit import Clients

from coordinator.tools.admin import Admin

pytestmark = [pytest.mark.postgres, pytest.mark.integration, pytest.mark.slow, pytest.mark.kafka]


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path,
        pg_url,
        nodes=3,
        offsets_partitions=6,
        extra=(
            "--transaction-state-log-num-partitions",
            str(TXN_PARTITIONS),
            "--transaction-version",
            "2",
        ),
    )
    try:
        c.start_all()
        yield c
    finally:
        c.close()


@pytest.fixture
def clients() -> Iterator[Clients]:
    c = Clients()
    yield c
    c.close()


def test_java_tv2_transactions_across_nodes_through_a_coordinator_sigkill(
    cluster: Cluster, clients: Clients
) -> None:
    topic, leaders = spread_topic(cluster)
    txn_id, coordinator, leader = pick_txn_id(cluster, leaders)
    partition = next(p for p, n in sorted(leaders.items()) if n == leader)
    groups = [f"g-{i}-{uuid.uuid4().hex[:6]}" for i in range(50)]
    group = next(
        (g for g in groups if cluster.coordinator_of(g) not in (coordinator, leader)),
        next((g for g in groups if cluster.coordinator_of(g) != coordinator), groups[0]),
    )
    # t0 committed, t1 aborted, t2 left open (records and offsets sent) until told.
    args = ["--bootstrap", cluster.all_bootstrap, "--topic", topic, "--partition", str(partition)]
    args += ["--transactional-id", txn_id, "--txns", "3", "--count", "5", "--abort-every", "2"]
    args += ["--group", group, "--stall", "true", "--property", "transaction.timeout.ms=60000"]
    c = clients.start("kgc.clients.Transact", args)
    c.wait_event("stalled", timeout=120)
    assert [t["committed"] for t in c.of("txn")] == [True, False]
    # The protocol spoken: TV2's EndTxn and the leaders' adds, no client add at all.
    node = cluster.nodes[coordinator]
    assert node.requests_total(api="EndTxn", version="5") >= 2
    assert node.requests_total(api="AddPartitionsToTxn", version="5") >= 2
    assert (
        sum(
            cluster.nodes[n].requests_total(api="AddPartitionsToTxn", version=str(v))
            + cluster.nodes[n].requests_total(api="AddOffsetsToTxn")
            for n in cluster.live()
            for v in range(4)
        )
        == 0
    )
    cluster.kill(coordinator)
    c.send("commit")
    assert c.wait_exit(120) == 0, c.describe()
    [late] = c.of("stall-commit")
    assert late.get("ok") is True, late
    committed = {f"t{t}-{i}" for t in (0, 2) for i in range(5)}
    seen = read_committed(cluster, topic, committed, timeout=90)
    assert seen == committed  # nothing of the aborted t1
    with Admin(cluster.nodes[min(cluster.live())].bootstrap) as admin:
        offsets = admin.committed_offsets(group)
    assert {tp: o for tp, (o, _) in offsets.items()} == {(topic, partition): 3}
    assert txn_coordinator(cluster, txn_id) != coordinator
