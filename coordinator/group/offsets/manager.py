"""OffsetMetadataManager: the committed offsets of one shard, their replay and their expiry.

How this works: ``offsets[group][(topic, partition)]`` holds every committed offset, and
``pending_txn_offsets`` the transactional ones awaiting their transaction's end.  Every
change goes through the primitives here (``store_offset``, ``delete_offset``, replay),
which emit or apply the matching OffsetCommit record.  The APIs are functions of the
manager in the modules beside it (``commit.py``, ``fetch.py``, ``txn.py``, ``delete.py``),
bound by the shard; this module imports none of them.  Retention is here too:
``cleanup_expired_offsets`` runs on the shard's ``expire-offsets`` timer.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.group.classic.manager import ClassicGroupManager
from coordinator.group.events import TopicOffsetsDeleted
from coordinator.group.offsets.group import OffsetGroup
from coordinator.group.partitions import Partitions
from coordinator.group.records import OffsetEntry, offset_commit_record, offset_commit_tombstone
from coordinator.group.topics import TopicsImage
from coordinator.group.types import GroupConfig, Record, Result
from storage.records import OffsetCommitKey, decode_offset_commit_value

__all__ = ["ZERO_ID", "OffsetEntry", "OffsetMetadataManager", "TopicPartition"]

ZERO_ID = bytes(16)  # Kafka's Uuid.ZERO_UUID: "no topic id"

TopicPartition = tuple[str, int]


class OffsetMetadataManager:
    def __init__(
        self,
        config: GroupConfig,
        partitions: Partitions,
        classic: ClassicGroupManager,
        *,
        topic_partitions: Callable[[str], int | None] | None = None,
        topics: TopicsImage | None = None,
        find_group: Callable[[str], OffsetGroup | None] | None = None,
    ) -> None:
        self.config = config
        self.partitions = partitions
        self.classic = classic
        self.offsets: dict[str, dict[TopicPartition, OffsetEntry]] = {}
        # group -> producer id -> partition -> offset, awaiting the transaction's end.
        self.pending_txn_offsets: dict[str, dict[int, dict[TopicPartition, OffsetEntry]]] = {}
        # Partition count of a topic, None if it does not exist (the catalog's answer;
        # None here: every topic exists, as in most unit tests). Kafka refuses offsets of
        # unknown partitions before its coordinator sees them.
        self._topic_partitions = topic_partitions
        # The topics by name and id: resolves v10's topic ids, and when given, answers
        # partition counts (``topic_partitions`` then only covers names it does not know).
        # Without it a v10 request's ids are all unknown. Public: set by whoever builds it.
        self.topics = topics
        # A group of any type by id, None if there is none: the one lookup every API here
        # goes through (the classic groups when not given).
        self.find_group: Callable[[str], OffsetGroup | None] = (
            find_group if find_group is not None else classic.groups.get
        )

    def unknown_partition(self, topic: str, partition: int) -> bool:
        n = self.partition_bound(topic)
        return n >= 0 and not 0 <= partition < n

    def partition_bound(self, topic: str) -> int:
        """The partitions of ``topic`` are ``0 <= p < bound`` (0 for an unknown topic), or
        every partition exists when the bound is -1 (no topic table to ask)."""
        if self.topics is not None:
            image = self.topics.topic(topic)
            if image is not None:
                return image.num_partitions
            if self._topic_partitions is None:
                return 0
        lookup = self._topic_partitions
        if lookup is None:
            return -1
        n = lookup(topic)
        return 0 if n is None else n

    def topic_name(self, topic_id: bytes) -> str | None:
        """The name of the topic with ``topic_id``; None if unknown (or the zero id)."""
        if topic_id == ZERO_ID or self.topics is None:
            return None
        image = self.topics.topic_by_id(topic_id)
        return None if image is None else image.name

    def topic_id(self, name: str) -> bytes:
        """The id of topic ``name``; ZERO_ID if unknown."""
        image = None if self.topics is None else self.topics.topic(name)
        return ZERO_ID if image is None else image.topic_id

    def offset_record(
        self, group_id: str, topic: str, partition: int, entry: OffsetEntry
    ) -> Record:
        return offset_commit_record(
            self.partitions.partition_of(group_id), group_id, topic, partition, entry
        )

    def store_offset(
        self, out: Result, group_id: str, topic: str, partition: int, entry: OffsetEntry
    ) -> None:
        record = self.offset_record(group_id, topic, partition, entry)  # encode first
        self.offsets.setdefault(group_id, {})[(topic, partition)] = entry
        out.records.append(record)

    def delete_offset(self, out: Result, group_id: str, topic: str, partition: int) -> None:
        offsets = self.offsets.get(group_id)
        if offsets is not None and offsets.pop((topic, partition), None) is not None:
            out.records.append(
                offset_commit_tombstone(
                    self.partitions.partition_of(group_id), group_id, topic, partition
                )
            )
            if not offsets:
                del self.offsets[group_id]

    def has_pending_txn(self, group_id: str, tp: tuple[str, int] | None = None) -> bool:
        by_producer = self.pending_txn_offsets.get(group_id)
        if not by_producer:
            return False
        if tp is None:
            return True
        return any(tp in parts for parts in by_producer.values())

    def ensure_group(self, group_id: str) -> None:
        """Offsets are being written for ``group_id``: a group without one gets a "simple"
        classic group, as Kafka's replay does."""
        if self.find_group(group_id) is None:
            self.classic.get_or_create_group(group_id)

    def drop_pending_txn(self, group_id: str, tp: tuple[str, int] | None = None) -> None:
        by_producer = self.pending_txn_offsets.get(group_id)
        if by_producer is None:
            return
        if tp is None:
            del self.pending_txn_offsets[group_id]
            return
        for pid in list(by_producer):
            by_producer[pid].pop(tp, None)
            if not by_producer[pid]:
                del by_producer[pid]
        if not by_producer:
            del self.pending_txn_offsets[group_id]

    def topic_deleted(self, topic: str, now_ms: int) -> Result:
        """Tombstone every group's offsets of a deleted topic (Kafka's onPartitionsDeleted)."""
        out = Result()
        for gid in list(self.offsets):
            if self.partitions.availability_error(gid) is not None:
                continue
            for t, p in [tp for tp in self.offsets[gid] if tp[0] == topic]:
                self.delete_offset(out, gid, t, p)
        for gid in list(self.pending_txn_offsets):
            for pid, parts in list(self.pending_txn_offsets[gid].items()):
                for tp in [tp for tp in parts if tp[0] == topic]:
                    del parts[tp]
                if not parts:
                    del self.pending_txn_offsets[gid][pid]
            if not self.pending_txn_offsets[gid]:
                del self.pending_txn_offsets[gid]
        if out.records:
            out.events.append(TopicOffsetsDeleted(topic, len(out.records)))
        return out

    # ------------------------------------------------------------ retention

    def cleanup_expired_offsets(self, out: Result, group_id: str, now_ms: int) -> bool:
        """Tombstone expired offsets; True if the group has no offsets left at all."""
        offsets = self.offsets.get(group_id)
        if offsets is None:
            return not self.has_pending_txn(group_id)
        group = self.find_group(group_id)
        if group is None:
            return False  # offsets are replayed with their group: nothing to judge them by
        base = group.offset_expiration_base()
        if base is None:
            return False
        retention = self.config.offsets_retention_ms
        all_expired = True
        for (topic, partition), entry in list(offsets.items()):
            if group.is_subscribed_to(topic) or self.has_pending_txn(group_id, (topic, partition)):
                all_expired = False
                continue
            if entry.expire_timestamp_ms is not None:
                expired = now_ms >= entry.expire_timestamp_ms
            else:
                expired = now_ms - base(entry.commit_timestamp_ms) >= retention
            if expired:
                self.delete_offset(out, group_id, topic, partition)
            else:
                all_expired = False
        return all_expired and not self.has_pending_txn(group_id)

    def delete_all_offsets(self, out: Result, group_id: str) -> None:
        """Tombstone every offset of a group being deleted, and drop its pending ones."""
        for topic, partition in list(self.offsets.get(group_id, {})):
            self.delete_offset(out, group_id, topic, partition)
        self.drop_pending_txn(group_id)

    # ------------------------------------------------------------ replay

    def replay(self, k: OffsetCommitKey, value: bytes | None) -> None:
        """Apply an OffsetCommit record: set one offset, or (tombstone) remove it."""
        tp = (k.topic, k.partition)
        if value is None:
            offsets = self.offsets.get(k.group)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del self.offsets[k.group]
            return
        v = decode_offset_commit_value(value)
        self.ensure_group(k.group)
        self.offsets.setdefault(k.group, {})[tp] = OffsetEntry(
            offset=v.offset,
            leader_epoch=v.leader_epoch,
            metadata=v.metadata,
            commit_timestamp_ms=v.commit_timestamp,
            expire_timestamp_ms=None if v.expire_timestamp == -1 else v.expire_timestamp,
        )

    def forget(self, group_id: str) -> None:
        """Drop a group's offsets from memory (its partition is no longer ours)."""
        self.offsets.pop(group_id, None)
        self.pending_txn_offsets.pop(group_id, None)
