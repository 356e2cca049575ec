"""Transactions across the nodes of a cluster: markers to each leader, verification at the coordinator.

How this works: a transaction's partitions, its ``__transaction_state`` partition and its
groups' ``__consumer_offsets`` partitions may each be led by another node. Two seams of
the transaction code reach across, both over the inter-broker channel (``peers.py``):

* ``ClusterMarkers`` is the transaction runtime's ``MarkerWriter`` (Kafka's
  TransactionMarkerChannelManager). For each partition of a marker it asks the placement
  who leads it now: this node (or nobody known) -> the data plane's own marker write,
  which answers NOT_LEADER_OR_FOLLOWER for a partition it does not serve and
  UNKNOWN_TOPIC_OR_PARTITION for one that no longer exists; another live node -> one
  WriteTxnMarkers (key 27, v2) per node with all of that node's partitions. A peer that
  cannot be reached, times out or leaves a partition out of its answer gives those
  partitions NETWORK_EXCEPTION. The runtime retries every retriable partition after its
  backoff, and each retry looks the leader up again, so a marker follows a leader that
  moved or was killed to the new one. The receiving leader fences by coordinator epoch
  (the ``__transaction_state`` lease epoch carried in the marker: a stale coordinator gets
  TRANSACTION_COORDINATOR_FENCED) and by producer epoch, as Kafka's log does.
* ``RoutedVerifier`` is the partition leader's KIP-890 part 1 check (Kafka's
  AddPartitionsToTxnManager): the transactional id's ``__transaction_state`` partition
  gives the coordinator; on this node the coordinator's memory answers at once, elsewhere
  one AddPartitionsToTxn v4 ``VerifyOnly`` (the batch form Kafka's brokers send) goes to
  it. No known coordinator answers COORDINATOR_NOT_AVAILABLE; a peer failure
  NETWORK_EXCEPTION; a top-level error every partition (CLUSTER_AUTHORIZATION_FAILED as
  INVALID_TXN_STATE, as Kafka hides it from the producer). The leader's translation of
  these to produce or TxnOffsetCommit errors is unchanged (``dataplane/txnlog.py``,
  ``runtime/txn_commit.py``); the verification guard taken before the question makes a
  marker that lands while the answer travels win.
* ``RoutedVerifier.add`` is TV2's add by the leader (Produce v12+) or the group
  coordinator (TxnOffsetCommit v5), routed the same way: on the coordinator's node the
  runtime's own add (``add_fn``), elsewhere one AddPartitionsToTxn v5 (``VerifyOnly``
  false, CLUSTER_ACTION) to it, whose answer is mapped as the verification's. A
  CONCURRENT_TRANSACTIONS answer (the previous transaction's markers still going out) is
  asked again every ``add.partitions.to.txn.retry.backoff.ms`` for at most
  ``add.partitions.to.txn.retry.max.ms``, as Kafka's leader does. Without ``add_fn``
  there is no add: COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from coordinator.cluster.peers import PeerClient, PeerError
from coordinator.placement import BrokerNode
from coordinator.txn.markers import TxnMarker
from coordinator.txn.verify import ADD_RETRY_BACKOFF_MS, ADD_RETRY_MAX_MS, AddFn
from protocol.errors import ErrorCode
from protocol.messages import add_partitions_to_txn as apt
from protocol.messages import write_txn_markers as wtm

__all__ = ["ClusterMarkers", "RoutedVerifier"]

log = logging.getLogger("kgc.txn")
E = ErrorCode
TopicPartition = tuple[str, int]
# One partition's marker written by this node's data plane: (topic, partition, producer id,
# producer epoch, coordinator epoch, commit, transaction version) -> its code.
WriteMarker = Callable[[str, int, int, int, int, bool, int], Awaitable[ErrorCode]]
# The coordinator's verification on this node.
LocalVerify = Callable[[str, int, int, Sequence[TopicPartition]], dict[TopicPartition, ErrorCode]]
WRITE_TXN_MARKERS_VERSION = 2
ADD_PARTITIONS_VERIFY_VERSION = 4
ADD_PARTITIONS_VERSION = 5  # TV2: the leader's add


class Leaders(Protocol):
    """Who leads a partition now (the placement)."""

    def owner(self, topic: str, partition: int) -> BrokerNode | None: ...


class ClusterMarkers:
    """The ``MarkerWriter`` of a cluster node (module docstring)."""

    def __init__(
        self,
        node_id: int,
        leaders: Callable[[], Leaders | None],
        peers: PeerClient,
        write_local: WriteMarker,
    ) -> None:
        self.node_id = node_id
        self.leaders = leaders
        self.peers = peers
        self.write_local = write_local

    async def write_markers(self, marker: TxnMarker) -> dict[TopicPartition, ErrorCode]:
        leaders = self.leaders()
        local: list[TopicPartition] = []
        remote: dict[int, list[TopicPartition]] = {}
        for topic, partition in marker.partitions:
            owner = leaders.owner(topic, partition) if leaders is not None else None
            if owner is None or owner.node_id == self.node_id:
                local.append((topic, partition))
            else:
                remote.setdefault(owner.node_id, []).append((topic, partition))
        jobs = [self._local(marker, tp) for tp in local]
        jobs += [self._remote(marker, node, tps) for node, tps in remote.items()]
        out: dict[TopicPartition, ErrorCode] = {}
        for part in await asyncio.gather(*jobs):
            out.update(part)
        return out

    async def _local(
        self, marker: TxnMarker, tp: TopicPartition
    ) -> dict[TopicPartition, ErrorCode]:
        try:
            code = await self.write_local(
                tp[0],
                tp[1],
                marker.producer_id,
                marker.producer_epoch,
                marker.coordinator_epoch,
                marker.commit,
                marker.transaction_version,
            )
        except Exception as exc:  # a storage failure: retried by the sender
            log.error("writing the marker of %s failed: %r", tp, exc)
            code = E.KAFKA_STORAGE_ERROR
        return {tp: ErrorCode(code)}

    async def _remote(
        self, marker: TxnMarker, node_id: int, tps: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        topics: dict[str, list[int]] = {}
        for topic, partition in tps:
            topics.setdefault(topic, []).append(partition)
        request = wtm.WriteTxnMarkersRequest(
            markers=[
                wtm.WritableTxnMarker(
                    producer_id=marker.producer_id,
                    producer_epoch=marker.producer_epoch,
                    transaction_result=marker.commit,
                    topics=[
                        wtm.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                        for t, ps in topics.items()
                    ],
                    coordinator_epoch=marker.coordinator_epoch,
                    transaction_version=marker.transaction_version,
                )
            ]
        )
        out = dict.fromkeys(tps, E.NETWORK_EXCEPTION)
        try:
            response = await self.peers.send(
                node_id, wtm.API_KEY, WRITE_TXN_MARKERS_VERSION, request
            )
        except PeerError as exc:
            log.info("markers to node %d not delivered: %s; retrying", node_id, exc)
            return out
        for result in response.markers:
            if result.producer_id != marker.producer_id:
                continue
            for t in result.topics:
                for p in t.partitions:
                    if (t.name, p.partition_index) in out:
                        out[(t.name, p.partition_index)] = _code(p.error_code)
        if E.CLUSTER_AUTHORIZATION_FAILED in out.values():
            # Retried like any other refusal, but nothing will change until an operator acts.
            log.error(
                "node %d refused this node's transaction markers (CLUSTER_AUTHORIZATION_FAILED): "
                "the inter-broker principal needs CLUSTER_ACTION (super.users)",
                node_id,
            )
        return out


class RoutedVerifier:
    """The KIP-890 part 1 check from a partition leader of a cluster (module docstring)."""

    def __init__(
        self,
        node_id: int,
        coordinator_partition: Callable[[str], int],
        leaders: Callable[[], Leaders | None],
        serves: Callable[[int], bool],
        peers: PeerClient,
        local: LocalVerify,
        transaction_state_topic: str,
    ) -> None:
        """``coordinator_partition``: a transactional id's ``__transaction_state`` partition;
        ``serves``: whether this node's coordinator has that partition loaded or loading."""
        self.node_id = node_id
        self.coordinator_partition = coordinator_partition
        self.leaders = leaders
        self.serves = serves
        self.peers = peers
        self.local = local
        self.topic = transaction_state_topic
        # TV2's add on this node's coordinator (``TxnRuntime.add_for_leader``), given once
        # the runtime exists; None: no add (the verification only).
        self.add_fn: AddFn | None = None

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        node = self._coordinator_node(transactional_id)
        if node is None:
            return dict.fromkeys(partitions, E.COORDINATOR_NOT_AVAILABLE)
        if node == self.node_id:
            return self.local(transactional_id, producer_id, producer_epoch, partitions)
        return await self._ask(
            node, transactional_id, producer_id, producer_epoch, partitions, verify_only=True
        )

    async def add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> ErrorCode:
        """TV2's add of ``partitions`` to the producer's transaction: one code."""
        if self.add_fn is None:
            return E.COORDINATOR_NOT_AVAILABLE
        waited = 0
        while True:
            node = self._coordinator_node(transactional_id)
            if node is None:
                return E.COORDINATOR_NOT_AVAILABLE
            if node == self.node_id:  # the runtime retries there itself
                return await self.add_fn(transactional_id, producer_id, producer_epoch, partitions)
            codes = await self._ask(
                node, transactional_id, producer_id, producer_epoch, partitions, verify_only=False
            )
            code = next((c for c in codes.values() if c != E.NO_ERROR), E.NO_ERROR)
            if code != E.CONCURRENT_TRANSACTIONS or waited >= ADD_RETRY_MAX_MS:
                return code
            await asyncio.sleep(ADD_RETRY_BACKOFF_MS / 1000)
            waited += ADD_RETRY_BACKOFF_MS

    def _coordinator_node(self, transactional_id: str) -> int | None:
        """The node whose coordinator holds the id (this node's id when it is this one, or
        when nobody is known to but this node has it loading); None: nobody."""
        partition = self.coordinator_partition(transactional_id)
        leaders = self.leaders()
        owner = leaders.owner(self.topic, partition) if leaders is not None else None
        if owner is None:
            return self.node_id if self.serves(partition) else None
        return owner.node_id

    async def _ask(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
        verify_only: bool,
    ) -> dict[TopicPartition, ErrorCode]:
        """One AddPartitionsToTxn to another node's coordinator: v4 ``VerifyOnly`` or v5's
        add; the answer per partition as Kafka's AddPartitionsToTxnManager reads it."""
        topics: dict[str, list[int]] = {}
        for topic, p in partitions:
            topics.setdefault(topic, []).append(p)
        request = apt.AddPartitionsToTxnRequest(
            transactions=[
                apt.AddPartitionsToTxnTransaction(
                    transactional_id=transactional_id,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    verify_only=verify_only,
                    topics=[
                        apt.AddPartitionsToTxnTopic(name=t, partitions=ps)
                        for t, ps in topics.items()
                    ],
                )
            ]
        )
        version = ADD_PARTITIONS_VERIFY_VERSION if verify_only else ADD_PARTITIONS_VERSION
        try:
            response = await self.peers.send(node, apt.API_KEY, version, request)
        except PeerError as exc:
            log.info(
                "AddPartitionsToTxn v%d of %r to node %d failed: %s",
                version,
                transactional_id,
                node,
                exc,
            )
            return dict.fromkeys(partitions, E.NETWORK_EXCEPTION)
        if response.error_code:
            code = _code(response.error_code)
            # Kafka: the producer is never shown the brokers' own authorization failure.
            if code == E.CLUSTER_AUTHORIZATION_FAILED:
                log.error(
                    "node %d refused this node's AddPartitionsToTxn (CLUSTER_AUTHORIZATION_FAILED): "
                    "the inter-broker principal needs CLUSTER_ACTION (super.users)",
                    node,
                )
                code = E.INVALID_TXN_STATE
            return dict.fromkeys(partitions, code)
        out: dict[TopicPartition, ErrorCode] = {}
        for result in response.results_by_transaction:
            if result.transactional_id != transactional_id:
                continue
            for t in result.topic_results:
                for p in t.results_by_partition:
                    out[(t.name, p.partition_index)] = _code(p.partition_error_code)
        # A partition the answer left out was not verified: retriable, as a lost answer.
        return {tp: out.get(tp, E.NETWORK_EXCEPTION) for tp in partitions}


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return E.UNKNOWN
