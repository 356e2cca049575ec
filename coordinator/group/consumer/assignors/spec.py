"""What a server-side assignor is given and what it returns (Kafka's ``GroupSpec``).

How this works: the target-assignment builder (``consumer/target.py``) describes the group
as a ``GroupSpec`` -- every member with its subscribed topic ids and its *previous target*
(what makes an assignor sticky) -- plus a ``SubscribedTopics`` view that answers partition
counts and racks. An assignor is a pure function of the two; it returns, for every member
of the spec, the partitions it should own (topic id -> partition ids). An assignor that
cannot assign raises ``PartitionAssignorError``; the heartbeat then answers
UNKNOWN_SERVER_ERROR and writes nothing, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

__all__ = [
    "Assignment",
    "GroupSpec",
    "MemberSpec",
    "PartitionAssignor",
    "PartitionAssignorError",
    "SubscribedTopics",
    "SubscriptionType",
]

Assignment = dict[bytes, frozenset[int]]
"""Partitions per topic id (topics with no partition are left out)."""


class PartitionAssignorError(Exception):
    """The assignor could not compute an assignment."""


class SubscriptionType(Enum):
    HOMOGENEOUS = "homogeneous"  # every member subscribes to the same topics
    HETEROGENEOUS = "heterogeneous"


@dataclass(frozen=True, slots=True)
class MemberSpec:
    subscribed_topic_ids: frozenset[bytes]
    # The member's previous target assignment (not what it reports owning).
    assigned_partitions: Mapping[bytes, frozenset[int]]
    rack_id: str | None = None
    instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupSpec:
    # Insertion order is the member order the assignors iterate (see each assignor).
    members: Mapping[str, MemberSpec]
    subscription_type: SubscriptionType = SubscriptionType.HOMOGENEOUS
    # topic id -> partition -> member id holding it in the previous target.
    inverted_target: Mapping[bytes, Mapping[int, str]] = field(default_factory=dict)

    def is_partition_assigned(self, topic_id: bytes, partition: int) -> bool:
        return partition in self.inverted_target.get(topic_id, {})


class SubscribedTopics(Protocol):
    def num_partitions(self, topic_id: bytes) -> int:
        """Partition count of the topic, -1 if it does not exist."""
        ...

    def racks_for_partition(self, topic_id: bytes, partition: int) -> frozenset[str]:
        """Racks of the partition's replicas (empty when brokers carry no rack)."""
        ...


class PartitionAssignor(Protocol):
    name: str  # what ServerAssignor / group.consumer.assignors call it

    def assign(self, spec: GroupSpec, topics: SubscribedTopics) -> dict[str, Assignment]:
        """Every member of ``spec`` -> its new target (possibly empty)."""
        ...
