"""Which node leads each partition: the broker's view of the cluster.

How this works: Metadata and FindCoordinator answer from a ``Placement``. On a single node
(``LocalPlacement``) this node leads every partition at leader epoch 0. In cluster mode the
placement is read from the lease table that ``coordinator/cluster`` refreshes on every
heartbeat: the live nodes are the brokers, a partition's leader is its lease holder and its
leader epoch the lease's fencing epoch; a partition without a live holder has no leader
(clients get LEADER_NOT_AVAILABLE / COORDINATOR_NOT_AVAILABLE and retry, as with Kafka
while a leader is being elected).

With ``kgc.workers`` = N > 1 (``WorkerPlacement``) the node's N worker processes are N
brokers, node ids node.id + i, and each leads a fixed share: partition p of a coordinator's
topic (``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``) and of
``__kgc_group_history`` (worker i writes partition i) is worker p % N's, partition p of any
other topic worker (crc32(topic) + p) % N's (``worker_of``: a topic's partitions go round
the workers from a place its name picks, so every worker gets its share of each topic, of
the groups, transactional ids and share partitions' states). Leader epoch 0, as on one
node: ownership never moves while the node runs.
"""

from __future__ import annotations

import socket
import zlib
from dataclasses import dataclass
from typing import Any, Protocol

from coordinator.config import Settings, parse_listeners
from coordinator.history.model import HISTORY_TOPIC
from coordinator.txn.records import TRANSACTION_STATE_TOPIC
from storage.records import OFFSETS_TOPIC

__all__ = [
    "BrokerNode",
    "ClusterPlacement",
    "LocalPlacement",
    "NodeAddress",
    "Placement",
    "WorkerPlacement",
    "advertised_address",
    "advertised_endpoints",
    "endpoint",
    "leader_of",
    "parse_endpoints",
    "worker_of",
]


# The coordinators' topics, whose keys (groups, transactional ids, share partitions) are
# spread over the partitions by hash already, and the groups' history, whose partition i
# worker i writes: partition p is worker p % N's. The share coordinator's topic is named
# here by value (``share.state_shard`` sits above this module).
COORDINATOR_TOPICS = frozenset(
    (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, "__share_group_state", HISTORY_TOPIC)
)


class BrokerNode(Protocol):
    @property
    def node_id(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def rack(self) -> str | None: ...
    @property
    def endpoints(self) -> tuple[tuple[str, str, int], ...]: ...


@dataclass(frozen=True, slots=True)
class NodeAddress:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, int], ...] = ()  # (listener, host, port) advertised


def parse_endpoints(listeners: str) -> tuple[tuple[str, str, int], ...]:
    """A node's registered advertised listeners, ``NAME://host:port,...``, as (NAME, host,
    port); entries that do not parse are left out (a node's row is data, not config)."""
    out = []
    for item in listeners.split(","):
        name, sep, rest = item.strip().partition("://")
        host, colon, port = rest.rpartition(":")
        if sep and colon and port.isdigit():
            out.append((name.upper(), host.strip("[]"), int(port)))
    return tuple(out)


def endpoint(node: BrokerNode, listener: str) -> tuple[str, int] | None:
    """Where clients of ``listener`` reach ``node``; None when it has no such listener.
    A node without registered endpoints is reached at its one address."""
    if not node.endpoints:
        return node.host, node.port
    for name, host, port in node.endpoints:
        if name == listener:
            return host, port
    return None


class Placement(Protocol):
    """What the broker needs to know about leadership; ``version`` moves when it changes."""

    @property
    def version(self) -> int: ...
    def nodes(self) -> list[BrokerNode]: ...
    def owner(self, topic: str, partition: int) -> BrokerNode | None: ...
    def leader_epoch(self, topic: str, partition: int) -> int: ...
    def serves(self, topic: str, partition: int) -> bool:
        """This node serves the partition now. In cluster mode it can hold a partition's
        lease (``owner`` is this node) while still filling its log from the database."""
        ...


def leader_of(placement: Placement, topic: str, partition: int) -> tuple[int, int]:
    """(leader id, leader epoch) of a partition; (-1, -1) while it has none. What Metadata
    reports and what a NOT_LEADER_OR_FOLLOWER answer hints (apis/leaders.py)."""
    owner = placement.owner(topic, partition)
    if owner is None:
        return -1, -1
    return owner.node_id, placement.leader_epoch(topic, partition)


class LocalPlacement:
    """One node leads everything (the embedded default)."""

    version = 0

    def __init__(self, node: NodeAddress) -> None:
        self.node = node

    def nodes(self) -> list[BrokerNode]:
        return [self.node]

    def owner(self, topic: str, partition: int) -> BrokerNode | None:
        return self.node

    def leader_epoch(self, topic: str, partition: int) -> int:
        return 0

    def serves(self, topic: str, partition: int) -> bool:
        return True


class ClusterPlacement:
    """Cluster mode: the placement the cluster layer read at its last heartbeat."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster  # coordinator.cluster.Cluster

    @property
    def version(self) -> int:
        return int(self.cluster.version)

    def nodes(self) -> list[BrokerNode]:
        return list(self.cluster.nodes())

    def owner(self, topic: str, partition: int) -> BrokerNode | None:
        node: BrokerNode | None = self.cluster.owner(topic, partition)
        return node

    def leader_epoch(self, topic: str, partition: int) -> int:
        return int(self.cluster.leader_epoch(topic, partition))

    def serves(self, topic: str, partition: int) -> bool:
        return bool(self.cluster.owns(topic, partition))


def worker_of(topic: str, partition: int, workers: int) -> int:
    """The worker (0..workers-1) that leads a partition under kgc.workers (module doc)."""
    if workers <= 1:
        return 0
    if topic in COORDINATOR_TOPICS:
        return partition % workers
    return (zlib.crc32(topic.encode()) + partition) % workers


class WorkerPlacement:
    """kgc.workers: worker i (``nodes[i]``) leads the partitions ``worker_of`` gives it."""

    version = 0

    def __init__(self, nodes: list[NodeAddress]) -> None:
        self.workers = nodes

    def nodes(self) -> list[BrokerNode]:
        return list(self.workers)

    def owner(self, topic: str, partition: int) -> BrokerNode | None:
        return self.workers[worker_of(topic, partition, len(self.workers))]

    def leader_epoch(self, topic: str, partition: int) -> int:
        return 0

    def serves(self, topic: str, partition: int) -> bool:
        return True  # each worker opens its own partitions before it listens


def advertised_endpoints(
    settings: Settings, bound_ports: dict[str, int]
) -> dict[str, tuple[str, int]]:
    """The host and port given to clients of each listener, by listener name:
    ``advertised.listeners`` (only the listeners it names are advertised, as in Kafka),
    else every listener's own address, with ``advertised.host``/``advertised.port`` over
    the first one's. A wildcard or empty host is replaced by this host's name, as Kafka
    does; port 0 by the port bound (``bound_ports``)."""
    out: dict[str, tuple[str, int]] = {}
    if settings.advertised_listeners is not None:
        for name, host, port in parse_listeners(
            settings.advertised_listeners, "advertised.listeners"
        ):
            wildcard = host in ("", "0.0.0.0", "::")
            out[name] = (socket.getfqdn() if wildcard else host, port or bound_ports.get(name, 0))
        return out
    for i, spec in enumerate(settings.listener_specs):
        wildcard = spec.host in ("", "0.0.0.0", "::")
        host = settings.advertised_host or (socket.getfqdn() if wildcard else spec.host)
        port = bound_ports.get(spec.name, spec.port)
        if i == 0 and settings.advertised_port:
            port = settings.advertised_port
        out[spec.name] = (host, port)
    return out


def advertised_address(settings: Settings, bound_port: int) -> tuple[str, int]:
    """The host and port given to clients of the first listener (see advertised_endpoints)."""
    first = settings.listener_specs[0].name
    endpoints = advertised_endpoints(settings, {first: bound_port})
    return endpoints.get(first) or next(iter(endpoints.values()))
