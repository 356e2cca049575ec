"""``__consumer_offsets`` as a read-only topic, as Kafka shows it to its clients.

How this works
--------------
kgc keeps every group's metadata and committed offsets in an offsets log whose partitions
hold Kafka record batches with Kafka's key and value layouts (``storage/records/offsets.py``,
``storage/records/consumer_group.py``). Tools such as Burrow, kminion (offsets-topic mode)
and ``kafka-console-consumer --formatter`` read Kafka's ``__consumer_offsets`` topic to
follow commits, so kgc serves the same log under the same name:

* **Metadata** lists it (also in all-topics requests, as Kafka does) with
  ``is_internal=true``, offsets.topic.num.partitions partitions, the node coordinating
  each partition as its leader and ``offsets_topic_id(cluster.id)`` as its topic id. Kafka
  gives the topic a random id when it creates it; kgc's offsets log exists from the start,
  so its id is derived from the cluster id: the same on every node of a cluster and across
  restarts.
* **Fetch** and **ListOffsets** read the partition's log where the group runtime keeps it
  (``GroupRuntime.partitions``: every partition on a single node, in cluster mode those
  whose lease this node holds; elsewhere NOT_LEADER_OR_FOLLOWER). The high watermark is
  the data plane's (``reads.high_watermark``): the durable end, so a reader sees a commit
  only once the coordinator could acknowledge it (in cluster mode, once PostgreSQL holds
  it). Compaction and tombstones are the offsets log's own, so what is read is what Kafka's
  log cleaner would leave. Long polls wake when the runtime's appends become durable
  (``GroupRuntime.on_durable``) and when a partition is handed to another node.
* **Writes are refused** as Kafka refuses them: Produce gets INVALID_TOPIC_EXCEPTION (17,
  ``ErrorCode.INVALID_TOPIC``) with no message (ReplicaManager's "Cannot append to internal
  topic", ``hasCustomErrorMessage`` false); CreateTopics gets TOPIC_ALREADY_EXISTS;
  DeleteRecords gets INVALID_TOPIC_EXCEPTION (ReplicaManager's "Cannot delete records of
  internal topic"). Kafka's controller would delete the topic, or add partitions to it;
  kgc keeps every group there and places groups by the partition count, so DeleteTopics
  and CreatePartitions get POLICY_VIOLATION with a message saying why (``admin_refusal``;
  CreatePartitions and DeleteRecords are answered in ``apis/partitions``). It is never
  created as a data topic.

Authorization is the data plane's and the broker's (``apis/data.py``, ``apis/topics.py``):
READ on TOPIC ``__consumer_offsets`` for Fetch, DESCRIBE for Metadata and ListOffsets, as
in Kafka.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from coordinator.catalog import TopicInfo
from protocol.errors import ErrorCode
from storage.interface import kafka_uuid
from storage.records import OFFSETS_TOPIC

if TYPE_CHECKING:
    from coordinator.runtime.group_runtime import GroupRuntime
    from storage.interface import PartitionLog

__all__ = [
    "OFFSETS_TOPIC",
    "OffsetsTopic",
    "admin_refusal",
    "is_offsets_topic",
    "offsets_topic_id",
]

# A fixed namespace for the derived topic id (uuid5 of the cluster id under it).
_ID_NAMESPACE = uuid.UUID("6b9c1f5e-3c7a-5d2e-9a41-0c5f2e8b7d13")
_ZERO_ID = bytes(16)

# What DeleteTopics, CreatePartitions and DeleteRecords on the offsets topic answer.
_REFUSALS = {
    "delete_topic": (
        ErrorCode.POLICY_VIOLATION,
        f"kgc does not delete {OFFSETS_TOPIC}: it holds every group's metadata and "
        "committed offsets",
    ),
    "create_partitions": (
        ErrorCode.POLICY_VIOLATION,
        f"kgc does not change the partition count of {OFFSETS_TOPIC}: it is "
        "offsets.topic.num.partitions, which places every group",
    ),
    "delete_records": (
        ErrorCode.INVALID_TOPIC,
        f"Cannot delete records of internal topic {OFFSETS_TOPIC}",
    ),
}


def offsets_topic_id(cluster_id: str) -> bytes:
    """The offsets topic's id (16 bytes) for ``cluster_id``: stable, and never one Kafka's
    ``Uuid`` rules out (zero, the metadata topic's, or one whose text starts with '-')."""
    n = 0
    while True:
        raw = uuid.uuid5(_ID_NAMESPACE, f"{cluster_id}/{OFFSETS_TOPIC}/{n}").bytes
        if raw != _ZERO_ID and not kafka_uuid(raw).startswith("-"):
            return raw
        n += 1


def is_offsets_topic(name: str | None, topic_id: bytes | None, offsets_id: bytes) -> bool:
    """Whether a request's topic entry (by name, or by id when the name is empty) is it."""
    if name:
        return name == OFFSETS_TOPIC
    return topic_id is not None and topic_id == offsets_id


def admin_refusal(operation: str) -> tuple[ErrorCode, str]:
    """(error code, message) answering an admin ``operation`` on ``__consumer_offsets``:
    "delete_topic", "create_partitions" or "delete_records" (see the module docstring).

    For the admin handlers, before they touch a topic named ``OFFSETS_TOPIC`` (or whose
    id is ``offsets_topic_id``); DeleteRecords answers the code alone (its response has
    no message field).
    """
    return _REFUSALS[operation]


class OffsetsTopic:
    """The offsets log's partitions as the data plane reads them."""

    def __init__(
        self,
        groups: GroupRuntime,
        cluster_id: str,
        *,
        lease_of: Callable[[PartitionLog], tuple[str, int, int] | None] | None = None,
    ) -> None:
        """``lease_of`` (cluster mode, ``PgJournal.lease_of``): the (topic, partition,
        epoch) a log is journaled under; its fencing epoch is the partition's leader epoch,
        as Metadata reports it. Without one (a single node) the leader epoch is 0."""
        self.groups = groups
        self.topic_id = offsets_topic_id(cluster_id)
        # What the data plane's lookups see; never put in the catalog.
        self.info = TopicInfo(OFFSETS_TOPIC, self.topic_id, groups.num_partitions)
        self._lease_of = lease_of

    def names(self, name: str | None, topic_id: bytes | None) -> bool:
        return is_offsets_topic(name, topic_id, self.topic_id)

    def log(self, partition: int) -> PartitionLog | None:
        """The partition's log if this node coordinates it, else None."""
        plog = self.groups.partitions.get(partition)
        return None if plog is None or plog.closed else plog

    def leader_epoch(self, plog: PartitionLog) -> int:
        lease = self._lease_of(plog) if self._lease_of is not None else None
        return 0 if lease is None else lease[2]

    def watch(self, wake: Callable[[PartitionLog], None]) -> None:
        """Call ``wake(log)`` when records of a partition become readable or it is released."""
        self.groups.on_durable.append(wake)
