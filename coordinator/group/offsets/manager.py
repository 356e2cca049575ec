"""OffsetMetadataManager: the committed offsets of one shard, their replay and their expiry.

How this works: ``offsets[group][(topic, partition)]`` holds every committed offset, and
``pending_txn_offsets[group][producer id]`` the transactional ones awaiting their
transaction's end (Kafka's pendingTransactionalOffsets and openTransactions).  Every
change goes through the primitives here (``store_offset``, ``delete_offset``, replay),
which emit or apply the matching OffsetCommit record.

Transactions.  A TxnOffsetCommit's records are one transactional batch of its producer;
replaying such a record (``replay_pending``) adds a pending offset, and the COMMIT or
ABORT control batch that ends the transaction on an offsets partition
(``replay_end_txn``) moves that producer's pending offsets of the partition's groups into
the committed ones, or drops them.  A commit moves an offset only if its record comes
after the record of the offset committed there (Kafka compares record offsets); the
shard applies records in the order they are appended, so an order number taken when a
pending or plain commit is applied (``_seq``) decides the same way, live and on replay.
The numbers are kept only while a partition has pending offsets.  A tombstone removes
the committed offset and every pending one of its partition.  Per offsets partition and
producer the epoch and coordinator epoch last written are kept (``txn_producers``,
Kafka's producer state of ``__consumer_offsets``): an older epoch is refused
(INVALID_PRODUCER_EPOCH), a marker of an older coordinator too
(TRANSACTION_COORDINATOR_FENCED).  The APIs are functions of the
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
from coordinator.group.types import GroupConfig, Record, RequestContext, Result
from coordinator.history.model import EXPIRED_CLIENT, OffsetChange
from protocol.errors import ErrorCode
from storage.records import OffsetCommitKey, decode_offset_commit_value

__all__ = ["ZERO_ID", "OffsetEntry", "OffsetMetadataManager", "TopicPartition"]

ZERO_ID = bytes(16)  # Kafka's Uuid.ZERO_UUID: "no topic id"

TopicPartition = tuple[str, int]

# The usual commit's OffsetChange built as the tuple it is, without the NamedTuple's
# ``__new__`` (a Python function: a frame a commit).
_new_change = tuple.__new__


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
        # The group history (``coordinator.history``): commits that change an offset are
        # reported in the Result; those that do not are counted here until the next change
        # carries the count.
        self.history = config.offsets_history
        self.unchanged: dict[str, dict[TopicPartition, int]] = {}
        # group -> producer id -> partition -> offset, awaiting the transaction's end.
        self.pending_txn_offsets: dict[str, dict[int, dict[TopicPartition, OffsetEntry]]] = {}
        # The order in which pending offsets, and the committed offsets of partitions with
        # pending ones, were written (see the module's docstring).
        self._seq = 0
        self._pending_seq: dict[tuple[int, str, TopicPartition], int] = {}
        self._committed_seq: dict[tuple[str, TopicPartition], int] = {}
        # offsets partition -> producer id -> [producer epoch, coordinator epoch (-1: no
        # marker yet), 1 while its transaction is open there], from the transactional
        # batches and markers written there.
        self.txn_producers: dict[int, dict[int, list[int]]] = {}
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
        if self.pending_txn_offsets:
            self.note_commit(group_id, (topic, partition))
        out.records.append(record)

    def note_changes(
        self,
        out: Result,
        group_id: str,
        stored: list[tuple[TopicPartition, OffsetEntry]],
        records: list[Record],
        by_group: dict[TopicPartition, OffsetEntry] | None,
        member_id: str,
        ctx: RequestContext,
    ) -> bool:
        """Before a commit's entries (written as ``records``, one each) replace
        ``by_group``'s: report the offsets it changes to the history (one tuple for the
        request), count the commits that change nothing. True: the entries are in
        ``by_group`` already (the usual commit stores each as it compares it: one loop a
        commit, not two); the caller stores them otherwise."""
        counts = self.unchanged.get(group_id)
        previous: list[int] = []
        start = 0
        if not counts and by_group is not None:
            # The usual commit: every offset moves and no unchanged commit waits to be
            # counted (the loop below, for the rest, does twice the steps per partition).
            lookup = by_group.get
            append = previous.append
            for tp, entry in stored:
                old = lookup(tp)
                if old is None:
                    append(-1)
                else:
                    offset = old.offset
                    if offset == entry.offset:
                        break
                    append(offset)
                by_group[tp] = entry
            else:
                if out.history is None:
                    out.history = []
                out.history.append(
                    _new_change(
                        OffsetChange,
                        (
                            records[0][0], group_id, member_id, ctx.client_id, ctx.client_host,
                            records, previous, [0] * len(previous),
                        ),
                    )
                )  # fmt: skip
                return True
            # An unchanged one: the ones before it moved (stored, in ``previous``); the
            # loop below goes on from it.
            start = len(previous)
        counted: list[tuple[int, int]] = []  # (index among the changed, commits unchanged)
        changed = records
        get = None if by_group is None else by_group.get
        for i, (tp, entry) in enumerate(stored[start:] if start else stored, start):
            old = None if get is None else get(tp)
            if old is None:
                previous.append(-1)
            elif old.offset != entry.offset:
                previous.append(old.offset)
            else:
                if changed is records:  # the first unchanged one: keep the changed ones apart
                    changed = records[:i]
                if counts is None:
                    counts = self.unchanged[group_id] = {}
                counts[tp] = counts.get(tp, 0) + 1
                continue
            if counts:
                n = counts.pop(tp, 0)
                if n:
                    counted.append((len(previous) - 1, n))
            if changed is not records:
                changed.append(records[i])
        if changed:
            unchanged = [0] * len(previous)
            for at, n in counted:
                unchanged[at] = n
            if out.history is None:
                out.history = []
            out.history.append(
                OffsetChange(
                    changed[0][0], group_id, member_id, ctx.client_id, ctx.client_host, changed,
                    previous, unchanged,
                )
            )  # fmt: skip
        return False

    def note_delete(
        self, out: Result, group_id: str, tp: TopicPartition, ctx: RequestContext
    ) -> None:
        """An admin's OffsetDelete is about to remove ``tp``'s offset: keep it in the history."""
        self.note_removal(out, group_id, tp, ctx.client_id, ctx.client_host)

    def note_removal(
        self, out: Result, group_id: str, tp: TopicPartition, client_id: str, host: str
    ) -> None:
        """``tp``'s offset is about to be removed, by an admin or by the retention
        (``EXPIRED_CLIENT``): keep it in the history, with the offset it had."""
        old = self.offsets.get(group_id, {}).get(tp)
        if old is None:
            return
        if out.history is None:
            out.history = []
        counts = self.unchanged.get(group_id)
        tombstone = offset_commit_tombstone(
            self.partitions.partition_of(group_id), group_id, tp[0], tp[1]
        )
        out.history.append(
            OffsetChange(
                tombstone[0], group_id, "", client_id, host, [tombstone],
                [old.offset], [0 if counts is None else counts.pop(tp, 0)],
            )
        )  # fmt: skip

    def delete_offset(self, out: Result, group_id: str, topic: str, partition: int) -> None:
        """Tombstone a committed or pending offset (Kafka writes one for either)."""
        tp = (topic, partition)
        offsets = self.offsets.get(group_id)
        committed = offsets is not None and offsets.pop(tp, None) is not None
        if offsets is not None and not offsets:
            del self.offsets[group_id]
        pending = self.has_pending_txn(group_id, tp)
        if committed or pending:
            out.records.append(
                offset_commit_tombstone(
                    self.partitions.partition_of(group_id), group_id, topic, partition
                )
            )
        if pending:
            self.drop_pending_txn(group_id, tp)

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
        """Forget pending offsets of a group (of one partition, or all of them): what a
        tombstone does to them (Kafka's openTransactions.clear)."""
        by_producer = self.pending_txn_offsets.get(group_id)
        if by_producer is None:
            return
        for pid in list(by_producer):
            parts = by_producer[pid]
            for one in list(parts) if tp is None else [tp]:
                if parts.pop(one, None) is not None:
                    self._pending_seq.pop((pid, group_id, one), None)
            if not parts:
                del by_producer[pid]
        for one in (
            [tp] if tp is not None else [k[1] for k in self._committed_seq if k[0] == group_id]
        ):
            self._committed_seq.pop((group_id, one), None)
        if not by_producer:
            del self.pending_txn_offsets[group_id]

    # ------------------------------------------------------------ transactions

    def note_commit(self, group_id: str, tp: TopicPartition) -> None:
        """A plain commit of ``tp`` was applied: it is newer than every pending offset."""
        if self.has_pending_txn(group_id, tp):
            self._seq += 1
            self._committed_seq[(group_id, tp)] = self._seq

    def producer_epoch_error(self, partition: int, producer_id: int, epoch: int) -> bool:
        """Whether ``epoch`` is older than the one last written by this producer on the
        offsets partition (Kafka's log refuses it: INVALID_PRODUCER_EPOCH)."""
        state = self.txn_producers.get(partition, {}).get(producer_id)
        return state is not None and epoch < state[0]

    def txn_open(self, partition: int, producer_id: int, epoch: int) -> bool:
        """Whether the producer's transaction at ``epoch`` is open on the offsets partition
        (its offsets written, its marker not yet): Kafka's hasOngoingTransaction."""
        state = self.txn_producers.get(partition, {}).get(producer_id)
        return state is not None and state[0] == epoch and state[2] == 1

    def marker_error(
        self, partition: int, producer_id: int, epoch: int, coordinator_epoch: int
    ) -> ErrorCode | None:
        """Kafka's checks of a marker's append (ProducerAppendInfo.appendEndTxnMarker):
        the producer's epoch, then the coordinator's."""
        state = self.txn_producers.get(partition, {}).get(producer_id)
        if state is None:
            return None
        if epoch < state[0]:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if coordinator_epoch < state[1]:
            return ErrorCode.TRANSACTION_COORDINATOR_FENCED
        return None

    def _producer_wrote(
        self, partition: int, producer_id: int, epoch: int, coordinator_epoch: int = -1
    ) -> None:
        """A transactional batch (coordinator epoch -1) or a marker of the producer."""
        marker = coordinator_epoch >= 0
        by_pid = self.txn_producers.setdefault(partition, {})
        state = by_pid.get(producer_id)
        open_ = 0 if marker else 1
        if state is None:
            by_pid[producer_id] = [epoch, coordinator_epoch, open_]
            return
        state[0] = max(state[0], epoch)
        state[2] = open_
        if marker:
            state[1] = coordinator_epoch

    def add_pending(
        self, group_id: str, producer_id: int, epoch: int, tp: TopicPartition, entry: OffsetEntry
    ) -> None:
        """A transactional offset was written (or replayed): pending until its marker."""
        self.ensure_group(group_id)
        self.pending_txn_offsets.setdefault(group_id, {}).setdefault(producer_id, {})[tp] = entry
        self._seq += 1
        self._pending_seq[(producer_id, group_id, tp)] = self._seq
        self._producer_wrote(self.partitions.partition_of(group_id), producer_id, epoch)

    def end_txn(
        self, partition: int, producer_id: int, epoch: int, coordinator_epoch: int, commit: bool
    ) -> int:
        """A COMMIT/ABORT marker of ``producer_id`` on offsets partition ``partition`` was
        written (or replayed): Kafka's replayEndTransactionMarker. Returns how many
        offsets became committed."""
        self._producer_wrote(partition, producer_id, epoch, coordinator_epoch)
        partition_of = self.partitions.partition_of
        moved = 0
        for gid in [g for g in self.pending_txn_offsets if partition_of(g) == partition]:
            by_producer = self.pending_txn_offsets[gid]
            parts = by_producer.pop(producer_id, None)
            if parts is None:
                continue
            for tp, entry in parts.items():
                seq = self._pending_seq.pop((producer_id, gid, tp), 0)
                if commit and self._committed_seq.get((gid, tp), -1) < seq:
                    self.offsets.setdefault(gid, {})[tp] = entry
                    moved += 1
                    if any(tp in other for other in by_producer.values()):
                        self._committed_seq[(gid, tp)] = seq
                if not any(tp in other for other in by_producer.values()):
                    self._committed_seq.pop((gid, tp), None)
            if not by_producer:
                del self.pending_txn_offsets[gid]
        return moved

    def topic_deleted(self, topic: str, now_ms: int) -> Result:
        """Tombstone every group's offsets of a deleted topic (Kafka's onPartitionsDeleted)."""
        out = Result()
        for gid in [*self.offsets, *(g for g in self.pending_txn_offsets if g not in self.offsets)]:
            if self.partitions.availability_error(gid) is not None:
                continue
            for t, p in sorted(tp for tp in self._offset_partitions(gid) if tp[0] == topic):
                self.delete_offset(out, gid, t, p)
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
                if self.history:
                    self.note_removal(out, group_id, (topic, partition), EXPIRED_CLIENT, "")
                self.delete_offset(out, group_id, topic, partition)
            else:
                all_expired = False
        return all_expired and not self.has_pending_txn(group_id)

    def _offset_partitions(self, group_id: str) -> list[TopicPartition]:
        """The partitions of a group with a committed offset, then those with only
        pending ones (Kafka's deleteAllOffsets order)."""
        tps = list(self.offsets.get(group_id, {}))
        seen = set(tps)
        for parts in self.pending_txn_offsets.get(group_id, {}).values():
            for tp in parts:
                if tp not in seen:
                    seen.add(tp)
                    tps.append(tp)
        return tps

    def delete_all_offsets(self, out: Result, group_id: str) -> None:
        """Tombstone every offset of a group being deleted, committed or pending."""
        for topic, partition in self._offset_partitions(group_id):
            self.delete_offset(out, group_id, topic, partition)

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
            if self.pending_txn_offsets:
                self.drop_pending_txn(k.group, tp)
            return
        entry = _entry(value)
        self.ensure_group(k.group)
        self.offsets.setdefault(k.group, {})[tp] = entry
        if self.pending_txn_offsets:
            self.note_commit(k.group, tp)

    def replay_pending(
        self, producer_id: int, epoch: int, k: OffsetCommitKey, value: bytes | None
    ) -> None:
        """Apply an OffsetCommit record of a transactional batch: a pending offset (a
        tombstone, which no transaction writes, acts as anywhere else)."""
        if value is None:
            self.replay(k, None)
            return
        self.add_pending(k.group, producer_id, epoch, (k.topic, k.partition), _entry(value))

    def forget(self, group_id: str) -> None:
        """Drop a group's offsets from memory (its partition is no longer ours)."""
        self.offsets.pop(group_id, None)
        if group_id in self.pending_txn_offsets:
            self.drop_pending_txn(group_id)

    def forget_partition(self, partition: int) -> None:
        """Drop the producer state of an offsets partition no longer ours."""
        self.txn_producers.pop(partition, None)


def _entry(value: bytes) -> OffsetEntry:
    v = decode_offset_commit_value(value)
    return OffsetEntry(
        offset=v.offset,
        leader_epoch=v.leader_epoch,
        metadata=v.metadata,
        commit_timestamp_ms=v.commit_timestamp,
        expire_timestamp_ms=None if v.expire_timestamp == -1 else v.expire_timestamp,
    )
