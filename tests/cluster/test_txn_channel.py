"""TV2's add routed to the transactional id's coordinator (``RoutedVerifier.add``): on this
node through the runtime's own add, elsewhere as AddPartitionsToTxn v5 over the peers'
client, with CONCURRENT_TRANSACTIONS asked again for Kafka's 100 ms and the peers'
failures as the verification maps them. The peer here answers from a script (the wire
path itself is exercised against a real kgc in test_peers.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coordinator.cluster.peers import PeerUnavailable
from coordinator.cluster.txn_channel import RoutedVerifier
from coordinator.placement import NodeAddress
from protocol.errors import ErrorCode
from protocol.messages import add_partitions_to_txn as apt

E = ErrorCode
PARTS = [("orders", 0), ("orders", 1)]


class Led:
    def __init__(self, node: NodeAddress | None) -> None:
        self.node = node

    def owner(self, topic: str, partition: int) -> NodeAddress | None:
        return self.node


class ScriptedPeers:
    """Answers each AddPartitionsToTxn with the next code of ``codes`` for every partition
    (an exception is raised instead), and keeps what was sent."""

    def __init__(self, *codes: int | Exception, top: int = 0) -> None:
        self.codes = list(codes)
        self.top = top
        self.sent: list[tuple[int, int, int, Any]] = []

    async def send(self, node: int, key: int, version: int, request: Any) -> Any:
        self.sent.append((node, key, version, request))
        code = self.codes.pop(0)
        if isinstance(code, Exception):
            raise code
        (t,) = request.transactions
        return apt.AddPartitionsToTxnResponse(
            error_code=self.top,
            results_by_transaction=[
                apt.AddPartitionsToTxnResult(
                    transactional_id=t.transactional_id,
                    topic_results=[
                        apt.AddPartitionsToTxnTopicResult(
                            name=x.name,
                            results_by_partition=[
                                apt.AddPartitionsToTxnPartitionResult(
                                    partition_index=p, partition_error_code=code
                                )
                                for p in x.partitions
                            ],
                        )
                        for x in t.topics
                    ],
                )
            ],
        )


def routed(leader: NodeAddress | None, peers: Any, serves: bool = False) -> RoutedVerifier:
    def local(txn: str, pid: int, epoch: int, parts: Sequence[tuple[str, int]]) -> Any:
        raise AssertionError("the add never takes the verification's path")

    v = RoutedVerifier(1, lambda _: 0, lambda: Led(leader), lambda _: serves, peers, local, "ts")
    return v


OTHER = NodeAddress(2, "127.0.0.1", 1)
SELF = NodeAddress(1, "127.0.0.1", 1)


async def test_without_an_add_there_is_none() -> None:
    peers = ScriptedPeers()
    assert await routed(OTHER, peers).add("t", 5, 0, PARTS) == E.COORDINATOR_NOT_AVAILABLE
    assert peers.sent == []


async def test_the_add_on_this_node_is_the_runtimes() -> None:
    calls: list[tuple[str, int, int, list[tuple[str, int]]]] = []

    async def add(txn: str, pid: int, epoch: int, parts: Sequence[tuple[str, int]]) -> ErrorCode:
        calls.append((txn, pid, epoch, list(parts)))
        return E.NO_ERROR

    for leader, serves in ((SELF, False), (None, True)):
        v = routed(leader, ScriptedPeers(), serves)
        v.add_fn = add
        assert await v.add("t", 5, 3, PARTS) == E.NO_ERROR
    assert calls == [("t", 5, 3, PARTS)] * 2
    v = routed(None, ScriptedPeers(), serves=False)
    v.add_fn = add
    assert await v.add("t", 5, 3, PARTS) == E.COORDINATOR_NOT_AVAILABLE


async def _remote_add(peers: ScriptedPeers) -> ErrorCode:
    async def add(txn: str, pid: int, epoch: int, parts: Sequence[tuple[str, int]]) -> ErrorCode:
        raise AssertionError("the coordinator is another node's")

    v = routed(OTHER, peers)
    v.add_fn = add
    return await v.add("t", 5, 3, PARTS)


async def test_a_remote_add_is_add_partitions_to_txn_v5() -> None:
    peers = ScriptedPeers(E.NO_ERROR)
    assert await _remote_add(peers) == E.NO_ERROR
    ((node, key, version, request),) = peers.sent
    assert (node, key, version) == (2, apt.API_KEY, 5)
    (t,) = request.transactions
    assert (t.transactional_id, t.producer_id, t.producer_epoch, t.verify_only) == (
        "t",
        5,
        3,
        False,
    )
    assert [(x.name, x.partitions) for x in t.topics] == [("orders", [0, 1])]


async def test_concurrent_transactions_is_asked_again_for_100_ms() -> None:
    peers = ScriptedPeers(E.CONCURRENT_TRANSACTIONS, E.CONCURRENT_TRANSACTIONS, E.NO_ERROR)
    assert await _remote_add(peers) == E.NO_ERROR
    assert len(peers.sent) == 3
    peers = ScriptedPeers(*[E.CONCURRENT_TRANSACTIONS] * 10)
    assert await _remote_add(peers) == E.CONCURRENT_TRANSACTIONS
    assert len(peers.sent) == 6  # at 0, 20, ..., 100 ms


async def test_remote_refusals_and_failures() -> None:
    assert await _remote_add(ScriptedPeers(E.PRODUCER_FENCED)) == E.PRODUCER_FENCED
    assert await _remote_add(ScriptedPeers(PeerUnavailable("gone"))) == E.NETWORK_EXCEPTION
    hidden = ScriptedPeers(E.NO_ERROR, top=E.CLUSTER_AUTHORIZATION_FAILED)
    assert await _remote_add(hidden) == E.INVALID_TXN_STATE
