"""Leader hints (KIP-951): where a partition refused as NOT_LEADER_OR_FOLLOWER is led now.

How this works: as Kafka 4.4's KafkaApis does after its replica manager answers, each
partition of a Produce (v10+), Fetch (v16+), ShareFetch or ShareAcknowledge answer whose
error is NOT_LEADER_OR_FOLLOWER (for Fetch and the share APIs also FENCED_LEADER_EPOCH;
Produce only the former) gets ``CurrentLeader`` {LeaderId, LeaderEpoch} from the placement,
and the answer's ``NodeEndpoints`` lists that leader's host, port and rack as the request's
listener reaches it (Kafka's getAliveBrokerNode(leaderId, listenerName)), once per node.
A partition without a leader is told (-1, -1) and adds no endpoint; a leader without the
request's listener adds none either. The client then sends to the new leader without a
Metadata round. The hints are added around the handler (``hinted``), so the data plane and
the share partitions, which know only that they do not serve a partition, stay as they are.
Every Produce and Fetch of a node that does not lead everything passes through it, so it is
kept cheap: an answer is filled in place (a deferred one by a callback on the handler's own
future, which runs before the transport's), and only a refused partition costs a lookup; an
answer with none keeps its empty NodeEndpoints (bench/count_leader_hints.py counts the toll).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from coordinator.apis.parts import Factory, Parts
from coordinator.catalog import TopicCatalog
from coordinator.placement import LocalPlacement, Placement, endpoint, leader_of
from coordinator.server.handler import ClientInfo, Deferred, Handler, HandlerResult
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import fetch, produce, share_acknowledge, share_fetch
from storage.records import OFFSETS_TOPIC

__all__ = ["TopicNames", "hinted", "with_leader_hints"]

_NOT_LEADER = ErrorCode.NOT_LEADER_FOR_PARTITION  # Kafka 2.6+'s NOT_LEADER_OR_FOLLOWER
_FENCED = ErrorCode.FENCED_LEADER_EPOCH
_REFUSED = (_NOT_LEADER, _FENCED)


class TopicNames:
    """A topic's name from the id an answer names it by (Fetch v13+, the share APIs)."""

    def __init__(self, catalog: TopicCatalog, offsets_topic_id: bytes) -> None:
        self.catalog = catalog
        self.offsets_topic_id = offsets_topic_id

    def name(self, name: str, topic_id: bytes) -> str | None:
        if name:
            return name
        if topic_id == self.offsets_topic_id:
            return OFFSETS_TOPIC
        info = self.catalog.by_id.get(topic_id)
        return None if info is None else info.name


class _Hints:
    """One answer's hints: sets each refused partition's CurrentLeader, gathers endpoints."""

    def __init__(self, placement: Placement, listener: str) -> None:
        self.placement = placement
        self.listener = listener
        self.nodes: dict[int, tuple[str, int, str | None]] = {}
        self.used = False  # a partition was hinted: the answer gets NodeEndpoints

    def leader(self, topic: str | None, partition: int) -> tuple[int, int]:
        if topic is None:
            return -1, -1
        leader_id, epoch = leader_of(self.placement, topic, partition)
        if leader_id >= 0 and leader_id not in self.nodes:
            for node in self.placement.nodes():
                if node.node_id == leader_id:
                    address = endpoint(node, self.listener)
                    if address is not None:
                        self.nodes[leader_id] = (address[0], address[1], node.rack)
                    break
        return leader_id, epoch

    def endpoints(self, cls: Any) -> list[Any]:
        return [
            cls(node_id=i, host=host, port=port, rack=rack)
            for i, (host, port, rack) in sorted(self.nodes.items())
        ]


def _produce(hints: _Hints, names: TopicNames, resp: Any) -> None:
    for t in resp.responses:
        for p in t.partition_responses:
            if p.error_code == _NOT_LEADER:
                topic = names.name(t.name, t.topic_id)
                p.current_leader = produce.LeaderIdAndEpoch(*hints.leader(topic, p.index))
                hints.used = True
    if hints.used:
        resp.node_endpoints = hints.endpoints(produce.NodeEndpoint)


def _fetch(hints: _Hints, names: TopicNames, resp: Any) -> None:
    for t in resp.responses:
        for p in t.partitions:
            if p.error_code in _REFUSED:
                topic = names.name(t.topic, t.topic_id)
                leader = hints.leader(topic, p.partition_index)
                p.current_leader = fetch.LeaderIdAndEpoch(*leader)
                hints.used = True
    if hints.used:
        resp.node_endpoints = hints.endpoints(fetch.NodeEndpoint)


def _share(module: Any) -> Any:
    def fill(hints: _Hints, names: TopicNames, resp: Any) -> None:
        for t in resp.responses:
            for p in t.partitions:
                if p.error_code in _REFUSED:
                    topic = names.name("", t.topic_id)
                    leader = hints.leader(topic, p.partition_index)
                    p.current_leader = module.LeaderIdAndEpoch(*leader)
                    hints.used = True
        if hints.used:
            resp.node_endpoints = hints.endpoints(module.NodeEndpoint)

    return fill


# API key -> (first version with the fields, how an answer is filled)
_APIS: dict[int, tuple[int, Any]] = {
    produce.API_KEY: (10, _produce),
    fetch.API_KEY: (16, _fetch),
    share_fetch.API_KEY: (0, _share(share_fetch)),
    share_acknowledge.API_KEY: (0, _share(share_acknowledge)),
}

_DATA_APIS = (produce.API_KEY, fetch.API_KEY)


def hinted(api_key: int, handler: Handler, placement: Placement, names: TopicNames) -> Handler:
    """``handler`` with leader hints added to its answers (module doc)."""
    since, fill = _APIS[api_key]

    def add(listener: str, resp: Any) -> None:
        # Bytes, an Outcome or a legacy shape have no partitions to hint; an answer
        # without partitions (a whole-request error) walks an empty list.
        if hasattr(resp, "node_endpoints"):
            fill(_Hints(placement, listener), names, resp)

    def call(header: RequestHeader, req: Any, client: ClientInfo) -> HandlerResult:
        result = handler(header, req, client)
        if header.api_version < since:
            return result
        if type(result) is not Deferred:
            add(client.listener, result)
            return result
        # Filled in place by a callback on the handler's own future, added before the
        # transport's (which it adds once this returns), so it runs first: asyncio runs a
        # future's callbacks in the order they were added, a Pending runs them in that
        # order inside set_result. No second future, so no second loop hop per answer.
        result.future.add_done_callback(partial(_when_answered, add, client.listener))
        return result

    return call


def _when_answered(add: Callable[[str, Any], None], listener: str, future: Any) -> None:
    if not future.cancelled() and future.exception() is None:
        add(listener, future.result())


def with_leader_hints(api_key: int, factory: Factory) -> Factory:
    """The API table's factory for ``api_key`` with leader hints from the broker's placement
    (a node without a broker part, some tests', answers without them)."""

    def build(p: Parts) -> Handler:
        handler = factory(p)
        if p.broker is None:
            return handler
        if isinstance(p.broker.placement, LocalPlacement) and api_key in _DATA_APIS:
            # One node leading everything never refuses a Produce or Fetch as not the
            # leader: its hot path is left without the extra step.
            return handler
        names = TopicNames(p.broker.catalog, p.broker.offsets_topic_id)
        return hinted(api_key, handler, p.broker.placement, names)

    return build
