"""A 2-worker kgc is routed as a 2-broker cluster: Metadata, FindCoordinator, wrong-owner answers.

A real ``kgc serve --kgc-workers 2``: Metadata from either worker lists both brokers (node
ids 0 and 1, ports port and port + 1) and each partition's leader by the placement rule;
FindCoordinator names the group's (or transactional id's) worker from either; a request for a partition or group
another worker leads is answered NOT_LEADER_OR_FOLLOWER / NOT_COORDINATOR, as Kafka answers
a client that went to the wrong broker; and each worker writes only its own partitions.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.groupkit import commit_offset, create_topic
from support.workerskit import Workers, group_on, partition_on, txn_id_on

from coordinator.placement import worker_of
from coordinator.share.state_shard import SHARE_STATE_TOPIC, partition_for, topic_id_str
from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import (
    fetch,
    find_coordinator,
    init_producer_id,
    join_group,
    metadata,
    produce,
)
from storage.record_batch import encode_batch

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    proc = Workers(tmp_path_factory.mktemp("workers") / "data")
    proc.start()
    proc.wait_loaded()
    yield proc
    if proc.alive():
        assert proc.stop() == 0


def test_metadata_lists_every_worker_and_each_partitions_owner(node: Workers) -> None:
    create_topic(node.bootstrap, "routed", 8)
    node.wait_topic("routed")
    for worker in (0, 1):
        with Connection.to(node.bootstrap_of(worker)) as c:
            _, resp = c.request(
                metadata.API_KEY,
                metadata.Request(topics=[metadata.MetadataRequestTopic(name="routed")]),
            )
        brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        assert brokers == {0: ("127.0.0.1", node.port), 1: ("127.0.0.1", node.port + 1)}
        assert resp.controller_id == 0
        (topic,) = resp.topics
        leaders = {p.partition_index: p.leader_id for p in topic.partitions}
        assert leaders == {p: worker_of("routed", p, 2) for p in range(8)}
        assert set(leaders.values()) == {0, 1}  # both workers lead a share


def assert_coordinator(node: Workers, key: str, key_type: int, owner: int) -> None:
    """FindCoordinator (v6: every key type) from either worker names worker ``owner``."""
    for asked in (0, 1):
        with Connection.to(node.bootstrap_of(asked)) as c:
            _, resp = c.request(
                find_coordinator.API_KEY,
                find_coordinator.Request(key_type=key_type, coordinator_keys=[key]),
                version=6,
            )
        (coord,) = resp.coordinators
        assert coord.error_code == 0
        assert (coord.node_id, coord.port) == (owner, node.port + owner)


def test_find_coordinator_names_the_groups_worker_from_either(node: Workers) -> None:
    for owner in (0, 1):
        assert_coordinator(node, group_on(owner, 2, "fc"), 0, owner)


def test_transactional_ids_are_coordinated_by_their_state_partitions_worker(
    node: Workers,
) -> None:
    """FindCoordinator key type 1 names the worker of the id's ``__transaction_state``
    partition (p % 2) from either worker; InitProducerId there gives a producer id, at the
    other worker NOT_COORDINATOR."""
    for owner in (0, 1):
        tid = txn_id_on(owner, 2, "fc-tx")
        assert_coordinator(node, tid, 1, owner)
        request = init_producer_id.Request(transactional_id=tid, transaction_timeout_ms=60000)
        with Connection.to(node.bootstrap_of(1 - owner)) as c:
            _, wrong = c.request(init_producer_id.API_KEY, request)
        assert wrong.error_code == ErrorCode.NOT_COORDINATOR
        with Connection.to(node.bootstrap_of(owner)) as c:
            for _ in range(200):  # the worker's state partitions load in the background
                _, resp = c.request(init_producer_id.API_KEY, request)
                if resp.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                    break
        assert resp.error_code == 0
        assert resp.producer_id >= 0


def test_share_partitions_states_are_kept_by_their_state_partitions_worker(
    node: Workers,
) -> None:
    """FindCoordinator key type 2 (v6, what brokers ask) names the worker of the share
    partition's ``__share_group_state`` partition (p % 2) from either worker."""
    tid = topic_id_str(bytes(range(16)))
    owners = set()
    for partition in range(8):
        key = f"sg:{tid}:{partition}"
        owner = worker_of(SHARE_STATE_TOPIC, partition_for(*key.split(":")[:2], partition, 50), 2)
        owners.add(owner)
        assert_coordinator(node, key, 2, owner)
    assert owners == {0, 1}


def test_group_requests_to_the_wrong_worker_are_not_coordinator(node: Workers) -> None:
    create_topic(node.bootstrap, "wrong-group", 1)
    node.wait_topic("wrong-group")
    group = group_on(1, 2, "wrong")
    with Connection.to(node.bootstrap_of(0)) as c:
        assert commit_offset(c, group, "wrong-group", 5) == ErrorCode.NOT_COORDINATOR
        _, resp = c.request(
            join_group.API_KEY,
            join_group.Request(
                group_id=group,
                session_timeout_ms=10000,
                rebalance_timeout_ms=10000,
                member_id="",
                protocol_type="consumer",
                protocols=[join_group.JoinGroupRequestProtocol(name="range", metadata=b"")],
            ),
        )
        assert resp.error_code == ErrorCode.NOT_COORDINATOR
    with Connection.to(node.bootstrap_of(1)) as c:
        assert commit_offset(c, group, "wrong-group", 5) == 0


def _produce(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    batch = encode_batch(0, [(None, b"v")], timestamp_ms=0)
    with Connection.to(bootstrap) as c:
        _, resp = c.request(
            produce.API_KEY,
            produce.Request(
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    produce.TopicProduceData(
                        name=topic,
                        partition_data=[
                            produce.PartitionProduceData(index=partition, records=batch)
                        ],
                    )
                ],
            ),
        )
    pr = resp.responses[0].partition_responses[0]
    return pr.error_code, pr.base_offset


def test_produce_to_the_wrong_worker_is_not_leader(node: Workers) -> None:
    create_topic(node.bootstrap, "wrong-leader", 6)
    node.wait_topic("wrong-leader")
    for owner in (0, 1):
        p = partition_on("wrong-leader", 6, owner, 2)
        other = 1 - owner
        assert _produce(node.bootstrap_of(other), "wrong-leader", p) == (
            ErrorCode.NOT_LEADER_FOR_PARTITION,
            -1,
        )
        assert _produce(node.bootstrap_of(owner), "wrong-leader", p) == (0, 0)


def test_each_worker_writes_only_its_own_journal_and_lock(node: Workers) -> None:
    data = node.data_dir
    assert {p.name for p in data.glob(".lock*")} == {".lock", ".lock.w0", ".lock.w1"}
    pids = {node.worker_pid(0), node.worker_pid(1)}
    assert len(pids) == 2 and node.proc is not None and node.proc.pid not in pids
    # The supervisor holds the data directory's lock for its life.
    assert (data / ".lock").read_text().split()[0] == str(node.proc.pid)


def test_the_wrong_worker_names_the_leader_and_its_endpoint(node: Workers) -> None:
    """KIP-951: Produce v12 and Fetch v17 refused NOT_LEADER_OR_FOLLOWER carry the leader
    (CurrentLeader) and its address (NodeEndpoints), so the client goes there without a
    Metadata round; the leader itself answers them."""
    create_topic(node.bootstrap, "hinted", 4)
    node.wait_topic("hinted")
    with Connection.to(node.bootstrap_of(0)) as c:
        _, meta = c.request(
            metadata.API_KEY,
            metadata.Request(topics=[metadata.MetadataRequestTopic(name="hinted")]),
        )
    topic_id = meta.topics[0].topic_id
    batch = encode_batch(0, [(None, b"v")], timestamp_ms=0)
    for owner in (0, 1):
        p = partition_on("hinted", 4, owner, 2)
        with Connection.to(node.bootstrap_of(1 - owner)) as c:
            _, prod = c.request(
                produce.API_KEY,
                produce.Request(
                    acks=-1,
                    timeout_ms=5000,
                    topic_data=[
                        produce.TopicProduceData(
                            name="hinted",
                            partition_data=[produce.PartitionProduceData(index=p, records=batch)],
                        )
                    ],
                ),
                version=12,
            )
            _, fetched = c.request(
                fetch.API_KEY,
                fetch.Request(
                    max_wait_ms=0,
                    min_bytes=1,
                    max_bytes=1 << 20,
                    topics=[
                        fetch.FetchTopic(
                            topic_id=topic_id,
                            partitions=[
                                fetch.FetchPartition(
                                    partition=p, fetch_offset=0, partition_max_bytes=1024
                                )
                            ],
                        )
                    ],
                ),
                version=17,
            )
        pr = prod.responses[0].partition_responses[0]
        pd = fetched.responses[0].partitions[0]
        assert (pr.error_code, pd.error_code) == (ErrorCode.NOT_LEADER_FOR_PARTITION,) * 2
        assert (pr.current_leader.leader_id, pr.current_leader.leader_epoch) == (owner, 0)
        assert (pd.current_leader.leader_id, pd.current_leader.leader_epoch) == (owner, 0)
        leader = (owner, "127.0.0.1", node.port + owner, None)
        for endpoints in (prod.node_endpoints, fetched.node_endpoints):
            assert [(e.node_id, e.host, e.port, e.rack) for e in endpoints] == [leader]
        with Connection.to(node.bootstrap_of(owner)) as c:
            _, prod = c.request(
                produce.API_KEY,
                produce.Request(
                    acks=-1,
                    timeout_ms=5000,
                    topic_data=[
                        produce.TopicProduceData(
                            name="hinted",
                            partition_data=[produce.PartitionProduceData(index=p, records=batch)],
                        )
                    ],
                ),
                version=12,
            )
        assert prod.responses[0].partition_responses[0].error_code == 0
        assert prod.node_endpoints == []
