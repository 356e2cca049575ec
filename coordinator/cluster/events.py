"""What cluster membership reports it did: typed events and their one rendering.

How this works: ``Cluster`` builds one of these frozen dataclasses for every membership
event and logs ``render(event)`` on ``kgc.cluster`` (INFO, WARNING for an outage), so a
log line and a test read the same facts. Events are rare (registration, ownership moves,
outages), never per heartbeat.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ClusterEvent",
    "DatabaseBack",
    "DatabaseUnreachable",
    "LeaseDeadlinePassed",
    "NodeFenced",
    "NodeRegistered",
    "PartitionAcquired",
    "PartitionLost",
    "PartitionReleased",
    "render",
]


@dataclass(frozen=True, slots=True)
class NodeRegistered:
    node_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class NodeFenced:
    """A node's registration was fenced: by this node (its session expired) or itself."""

    node_id: int
    broker_epoch: int
    by_node: int  # the node that noticed: itself when its heartbeat was refused


@dataclass(frozen=True, slots=True)
class PartitionAcquired:
    topic: str
    partition: int
    epoch: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class PartitionReleased:
    """Given back on purpose: a hand-off to the node that should own it, or a stop."""

    topic: str
    partition: int
    epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class PartitionLost:
    """Taken over by another node, or its topic deleted, while this node held it."""

    topic: str
    partition: int
    epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class LeaseDeadlinePassed:
    """No heartbeat succeeded within the session timeout: this node stops serving."""

    node_id: int
    partitions: int
    since_ms: int  # how long since the last successful heartbeat was sent


@dataclass(frozen=True, slots=True)
class DatabaseUnreachable:
    node_id: int
    error: str


@dataclass(frozen=True, slots=True)
class DatabaseBack:
    node_id: int
    outage_ms: int


ClusterEvent = (
    NodeRegistered
    | NodeFenced
    | PartitionAcquired
    | PartitionReleased
    | PartitionLost
    | LeaseDeadlinePassed
    | DatabaseUnreachable
    | DatabaseBack
)


def render(event: ClusterEvent) -> str:
    match event:
        case NodeRegistered(node_id, broker_epoch):
            return f"node {node_id} registered with broker epoch {broker_epoch}"
        case NodeFenced(node_id, broker_epoch, by_node) if by_node == node_id:
            return (
                f"node {node_id} was fenced (broker epoch {broker_epoch} refused): "
                "stopped serving, registering again"
            )
        case NodeFenced(node_id, broker_epoch, by_node):
            return (
                f"node {node_id} (broker epoch {broker_epoch}) fenced by node {by_node}: "
                "its session expired"
            )
        case PartitionAcquired(topic, partition, epoch, next_offset):
            return (
                f"partition {topic}-{partition} acquired at epoch {epoch} (log end {next_offset})"
            )
        case PartitionReleased(topic, partition, epoch, reason):
            return f"partition {topic}-{partition} released at epoch {epoch} ({reason})"
        case PartitionLost(topic, partition, epoch, reason):
            return f"partition {topic}-{partition} lost at epoch {epoch} ({reason})"
        case LeaseDeadlinePassed(node_id, partitions, since_ms):
            return (
                f"node {node_id}: no heartbeat succeeded for {since_ms} ms: stopped serving "
                f"{partitions} partitions until the database answers"
            )
        case DatabaseUnreachable(node_id, error):
            return f"node {node_id}: database unreachable ({error}); retrying every heartbeat"
        case DatabaseBack(node_id, outage_ms):
            return f"node {node_id}: database reachable again after {outage_ms} ms"
    raise AssertionError(event)
