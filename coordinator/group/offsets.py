"""Committed offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, retention.

How this works
--------------
``OffsetMetadataManager`` (Kafka's OffsetMetadataManager) owns the committed
offsets, ``offsets[group][(topic, partition)]``; every change is also emitted as
an OffsetCommit record (or a tombstone) for the offsets log.  Groups are not
its own: it asks the ``ClassicGroupManager`` for them (and creates "simple"
groups through it), and each group validates a commit itself
(``ClassicGroup.validate_offset_commit``).

OffsetCommit validation follows Kafka's ClassicGroup.validateOffsetCommit:
an unknown group is created as a "simple" group when the generation is -1
(admin tools, assign()-mode consumers) and rejected otherwise
(ILLEGAL_GENERATION, v9+ GROUP_ID_NOT_FOUND); an Empty group accepts
generation -1 without member id; otherwise the member must be known (static
fencing applies) and of the current generation; CompletingRebalance answers
REBALANCE_IN_PROGRESS.  A commit from a member of a Stable or
PreparingRebalance group also re-arms its session timer, as Kafka does for
the classic protocol.  Request-level errors apply to every partition;
OFFSET_METADATA_TOO_LARGE is per partition.  Values are written as v3, or v1
when a v2-v4 request sets retention_time_ms (v1 alone carries an expire
timestamp).

Transactional commits have no transaction coordinator here: they are held
in memory per producer id until ``end_transaction`` commits (records are
then written) or aborts them.  While held they make ``require_stable``
fetches answer UNSTABLE_OFFSET_COMMIT and keep the partition from expiring.

Retention (KIP-211), on the shard's ``expire-offsets`` timer:
``cleanup_expired_offsets`` removes a group's expired offsets, counted from
when the group says (``ClassicGroup.offset_expiration_base``: since it became
Empty, or since the commit); offsets with an explicit expire timestamp use it.
The shard then deletes groups left Empty without offsets.
"""

from __future__ import annotations

import codecs
import struct
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.manager import ClassicGroupManager
from coordinator.group.classic.state import ClassicGroupState
from coordinator.group.events import TopicOffsetsDeleted
from coordinator.group.partitions import Partitions
from coordinator.group.types import GroupConfig, Record, RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from protocol.messages.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)
from protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from storage.offsets_format import (
    OffsetCommitKey,
    decode_offset_commit_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)

__all__ = ["OffsetEntry", "OffsetMetadataManager"]

_P = ClassicGroupState.PREPARING_REBALANCE
_C = ClassicGroupState.COMPLETING_REBALANCE
_S = ClassicGroupState.STABLE
_E = ClassicGroupState.EMPTY
_D = ClassicGroupState.DEAD

# A fetched partition: (partition, offset, leader epoch, metadata, error).
_Fetched = tuple[int, int, int, str, int]
TopicPartition = tuple[str, int]


@dataclass(slots=True)
class OffsetEntry:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None


def _code(
    codes: dict[tuple[str, int], ErrorCode], tp: tuple[str, int], rest: ErrorCode | None
) -> ErrorCode:
    code = codes.get(tp)
    if rest is None or code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        assert code is not None
        return code
    return rest


# Looked up at import, not on first use: a codec's module is imported lazily, and an import
# inside a request handler fails (EMFILE) when connections hold every file descriptor.
codecs.lookup("utf-16-le")


def _java_length(s: str) -> int:
    # Kafka compares String.length(): UTF-16 code units, not bytes.
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


class OffsetMetadataManager:
    def __init__(
        self,
        config: GroupConfig,
        partitions: Partitions,
        classic: ClassicGroupManager,
        *,
        topic_partitions: Callable[[str], int | None] | None = None,
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

    def _unknown_partition(self, topic: str, partition: int) -> bool:
        lookup = self._topic_partitions
        if lookup is None:
            return False
        n = lookup(topic)
        return n is None or not 0 <= partition < n

    # ------------------------------------------------------------ commit

    def offset_commit(self, ctx: RequestContext, req: OffsetCommitRequest, now_ms: int) -> Result:
        out = Result()
        v = ctx.api_version
        # Partitions of unknown topics are answered first, as Kafka's KafkaApis does before
        # the coordinator sees the request; the coordinator's codes fill in the rest.
        codes: dict[tuple[str, int], ErrorCode] = {}
        wanted = 0
        for t in req.topics:
            for p in t.partitions:
                wanted += 1
                if self._unknown_partition(t.name, p.partition_index):
                    codes[(t.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        def respond(rest: ErrorCode | None = None) -> Result:
            """Answer with ``codes``; ``rest``: the coordinator's error for every other one."""
            topics = []
            for t in req.topics:
                parts = [
                    OffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=_code(codes, (t.name, p.partition_index), rest),
                    )
                    for p in t.partitions
                ]
                topics.append(
                    OffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id, partitions=parts)
                )
            out.replies.append((ctx.reply_to, OffsetCommitResponse(topics=topics)))
            return out

        if wanted and len(codes) == wanted:
            return respond()
        err = self.partitions.precheck(req.group_id)
        if err is not None:
            return respond(err)
        gid = req.group_id
        generation = req.generation_id_or_member_epoch
        group = self.classic.groups.get(gid)
        new_group = group is None
        if group is None:
            if generation >= 0:
                return respond(
                    ErrorCode.GROUP_ID_NOT_FOUND if v >= 9 else ErrorCode.ILLEGAL_GENERATION
                )
            group = ClassicGroup(gid)  # kept only if the commit is written (below)
        err = group.validate_offset_commit(
            req.member_id, req.group_instance_id, generation, transactional=False
        )
        if err is not None:
            return respond(err)

        # Encode every record before changing anything: a commit is all-or-nothing.
        expire: int | None = None
        if 2 <= v <= 4 and req.retention_time_ms != -1:
            expire = now_ms + req.retention_time_ms
        stored: list[tuple[str, int, OffsetEntry]] = []
        records: list[Record] = []
        for t in req.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if tp in codes:
                    continue
                metadata = p.committed_metadata or ""
                if _java_length(metadata) > self.config.offset_metadata_max_bytes:
                    codes[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                    continue
                entry = OffsetEntry(
                    offset=p.committed_offset,
                    leader_epoch=p.committed_leader_epoch,
                    metadata=metadata,
                    commit_timestamp_ms=now_ms,
                    expire_timestamp_ms=expire,
                )
                try:
                    records.append(self._offset_record(gid, t.name, p.partition_index, entry))
                except (struct.error, ValueError):
                    # Kafka fails the whole write when a record cannot be serialized.
                    return respond(ErrorCode.UNKNOWN)
                stored.append((t.name, p.partition_index, entry))
                codes[tp] = ErrorCode.NO_ERROR
        if new_group and stored:
            self.classic.groups[gid] = group
        member = group.members.get(req.member_id)
        if member is not None and group.is_in(_S, _P):
            # With the classic protocol a commit also proves the member is alive.
            self.classic.reschedule_heartbeat(out, group, member, now_ms)
        by_group = self.offsets.setdefault(gid, {}) if stored else None
        for topic, partition, entry in stored:
            assert by_group is not None
            by_group[(topic, partition)] = entry
        out.records.extend(records)
        return respond()

    def _offset_record(
        self, group_id: str, topic: str, partition: int, entry: OffsetEntry
    ) -> Record:
        return (
            self.partitions.partition_of(group_id),
            encode_offset_commit_key(group_id, topic, partition),
            encode_offset_commit_value(
                entry.offset,
                entry.metadata,
                entry.commit_timestamp_ms,
                leader_epoch=entry.leader_epoch,
                expire_timestamp=entry.expire_timestamp_ms,
            ),
        )

    def _store_offset(
        self, out: Result, group_id: str, topic: str, partition: int, entry: OffsetEntry
    ) -> None:
        record = self._offset_record(group_id, topic, partition, entry)  # encode first
        self.offsets.setdefault(group_id, {})[(topic, partition)] = entry
        out.records.append(record)

    def _delete_offset(self, out: Result, group_id: str, topic: str, partition: int) -> None:
        offsets = self.offsets.get(group_id)
        if offsets is not None and offsets.pop((topic, partition), None) is not None:
            out.records.append(
                (
                    self.partitions.partition_of(group_id),
                    encode_offset_commit_key(group_id, topic, partition),
                    None,
                )
            )
            if not offsets:
                del self.offsets[group_id]

    def _has_pending_txn(self, group_id: str, tp: tuple[str, int] | None = None) -> bool:
        by_producer = self.pending_txn_offsets.get(group_id)
        if not by_producer:
            return False
        if tp is None:
            return True
        return any(tp in parts for parts in by_producer.values())

    # ------------------------------------------------------------ transactional commit

    def txn_offset_commit(
        self, ctx: RequestContext, req: TxnOffsetCommitRequest, now_ms: int
    ) -> Result:
        out = Result()
        codes: dict[tuple[str, int], ErrorCode] = {}
        wanted = 0
        for t in req.topics:
            for p in t.partitions:
                wanted += 1
                if self._unknown_partition(t.name, p.partition_index):
                    codes[(t.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        def respond(rest: ErrorCode | None = None) -> Result:
            topics = [
                TxnOffsetCommitResponseTopic(
                    name=t.name,
                    partitions=[
                        TxnOffsetCommitResponsePartition(
                            partition_index=p.partition_index,
                            error_code=_code(codes, (t.name, p.partition_index), rest),
                        )
                        for p in t.partitions
                    ],
                )
                for t in req.topics
            ]
            out.replies.append((ctx.reply_to, TxnOffsetCommitResponse(topics=topics)))
            return out

        if wanted and len(codes) == wanted:
            return respond()
        err = self.partitions.precheck(req.group_id)
        if err is not None:
            return respond(err)
        gid = req.group_id
        group = self.classic.groups.get(gid)
        new_group = group is None
        if group is None:
            if req.generation_id >= 0:
                return respond(ErrorCode.ILLEGAL_GENERATION)
            group = ClassicGroup(gid)
        err = group.validate_offset_commit(
            req.member_id, req.group_instance_id, req.generation_id, transactional=True
        )
        if err is not None:
            return respond(err)
        held: dict[tuple[str, int], OffsetEntry] = {}
        for t in req.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if tp in codes:
                    continue
                metadata = p.committed_metadata or ""
                if _java_length(metadata) > self.config.offset_metadata_max_bytes:
                    codes[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                    continue
                entry = OffsetEntry(p.committed_offset, p.committed_leader_epoch, metadata, now_ms)
                try:
                    # Written when the transaction commits: it must be encodable then.
                    self._offset_record(gid, t.name, p.partition_index, entry)
                except (struct.error, ValueError):
                    return respond(ErrorCode.UNKNOWN)
                held[tp] = entry
                codes[tp] = ErrorCode.NO_ERROR
        if held:
            if new_group:
                self.classic.groups[gid] = group
            self.pending_txn_offsets.setdefault(gid, {}).setdefault(req.producer_id, {}).update(
                held
            )
        return respond()

    def end_transaction(self, producer_id: int, committed: bool, now_ms: int) -> Result:
        """The transaction of ``producer_id`` ended: write its offsets if it committed.

        Stands in for the transaction markers Kafka's transaction coordinator writes.
        """
        out = Result()
        for gid in list(self.pending_txn_offsets):
            by_producer = self.pending_txn_offsets[gid]
            parts = by_producer.pop(producer_id, None)
            if not by_producer:
                del self.pending_txn_offsets[gid]
            if parts is None or not committed:
                continue
            self.classic.get_or_create_group(gid)
            for (topic, partition), entry in parts.items():
                self._store_offset(out, gid, topic, partition, entry)
        return out

    # ------------------------------------------------------------ fetch

    def offset_fetch(self, ctx: RequestContext, req: OffsetFetchRequest, now_ms: int) -> Result:
        out = Result()
        v = ctx.api_version
        if v >= 8:
            groups = []
            for g in req.groups:
                wanted = (
                    None
                    if g.topics is None
                    else [(t.name, list(t.partition_indexes)) for t in g.topics]
                )
                err, fetched = self._fetch_group(g.group_id, wanted, req.require_stable)
                groups.append(
                    OffsetFetchResponseGroup(
                        group_id=g.group_id,
                        error_code=err,
                        topics=[
                            OffsetFetchResponseTopics(
                                name=name,
                                partitions=[
                                    OffsetFetchResponsePartitions(
                                        partition_index=p,
                                        committed_offset=o,
                                        committed_leader_epoch=e,
                                        metadata=m,
                                        error_code=c,
                                    )
                                    for p, o, e, m, c in parts
                                ],
                            )
                            for name, parts in fetched
                        ],
                    )
                )
            out.replies.append((ctx.reply_to, OffsetFetchResponse(groups=groups)))
            return out

        # v0-v1 cannot express "all topics"; treat an absent list as empty there.
        wanted_single = (
            None
            if req.topics is None and v >= 2
            else [(t.name, list(t.partition_indexes)) for t in (req.topics or [])]
        )
        err, fetched = self._fetch_group(req.group_id, wanted_single, req.require_stable)
        if err != ErrorCode.NO_ERROR and v < 2:
            # No top-level error code before v2: the error goes on every partition.
            fetched = [
                (name, [(p, -1, -1, "", err) for p in parts])
                for name, parts in (wanted_single or [])
            ]
        elif err != ErrorCode.NO_ERROR:
            fetched = []
        resp = OffsetFetchResponse(
            error_code=err if v >= 2 else 0,
            topics=[
                OffsetFetchResponseTopic(
                    name=name,
                    partitions=[
                        OffsetFetchResponsePartition(
                            partition_index=p,
                            committed_offset=o,
                            committed_leader_epoch=e,
                            metadata=m,
                            error_code=c,
                        )
                        for p, o, e, m, c in parts
                    ],
                )
                for name, parts in fetched
            ],
        )
        out.replies.append((ctx.reply_to, resp))
        return out

    def _fetch_group(
        self,
        group_id: str,
        wanted: list[tuple[str, list[int]]] | None,
        require_stable: bool,
    ) -> tuple[ErrorCode, list[tuple[str, list[_Fetched]]]]:
        # An empty group id is served (Kafka keeps that for backward compatibility).
        err = self.partitions.availability_error(group_id)
        if err is not None:
            return err, []
        group = self.classic.groups.get(group_id)
        offsets = {} if group is None or group.is_in(_D) else self.offsets.get(group_id, {})

        def one(topic: str, partition: int) -> _Fetched | None:
            if require_stable and self._has_pending_txn(group_id, (topic, partition)):
                return (partition, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
            entry = offsets.get((topic, partition))
            if entry is None:
                return None
            return (partition, entry.offset, entry.leader_epoch, entry.metadata, 0)

        result: list[tuple[str, list[_Fetched]]] = []
        if wanted is None:
            by_topic: dict[str, list[_Fetched]] = {}
            for topic, partition in sorted(offsets):
                got = one(topic, partition)
                if got is not None:
                    by_topic.setdefault(topic, []).append(got)
            result = list(by_topic.items())
        else:
            for topic, partitions in wanted:
                parts: list[_Fetched] = []
                for partition in partitions:
                    got = one(topic, partition)
                    parts.append(got if got is not None else (partition, -1, -1, "", 0))
                result.append((topic, parts))
        return ErrorCode.NO_ERROR, result

    # ------------------------------------------------------------ delete

    def offset_delete(self, ctx: RequestContext, req: OffsetDeleteRequest, now_ms: int) -> Result:
        out = Result()

        def whole(code: ErrorCode) -> Result:
            out.replies.append((ctx.reply_to, OffsetDeleteResponse(error_code=code)))
            return out

        # Unknown topics are answered first, as Kafka's KafkaApis does.
        unknown = {
            (t.name, p.partition_index)
            for t in req.topics
            for p in t.partitions
            if self._unknown_partition(t.name, p.partition_index)
        }
        if unknown and len(unknown) == sum(len(t.partitions) for t in req.topics):
            out.replies.append(
                (
                    ctx.reply_to,
                    OffsetDeleteResponse(
                        error_code=0,
                        topics=[
                            OffsetDeleteResponseTopic(
                                name=t.name,
                                partitions=[
                                    OffsetDeleteResponsePartition(
                                        partition_index=p.partition_index,
                                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                    )
                                    for p in t.partitions
                                ],
                            )
                            for t in req.topics
                        ],
                    ),
                )
            )
            return out
        err = self.partitions.precheck(req.group_id)
        if err is not None:
            return whole(err)
        gid = req.group_id
        group = self.classic.groups.get(gid)
        if group is None or group.is_in(_D):
            return whole(ErrorCode.GROUP_ID_NOT_FOUND)
        if group.is_in(_S, _P, _C) and not group.uses_consumer_protocol():
            return whole(ErrorCode.NON_EMPTY_GROUP)

        topics = []
        for t in req.topics:
            subscribed = group.is_subscribed_to(t.name)
            parts = []
            for p in t.partitions:
                if (t.name, p.partition_index) in unknown:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif subscribed:
                    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    code = ErrorCode.NO_ERROR
                    self._delete_offset(out, gid, t.name, p.partition_index)
                    self._drop_pending_txn(gid, (t.name, p.partition_index))
                parts.append(
                    OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                )
            topics.append(OffsetDeleteResponseTopic(name=t.name, partitions=parts))
        out.replies.append((ctx.reply_to, OffsetDeleteResponse(error_code=0, topics=topics)))
        return out

    def _drop_pending_txn(self, group_id: str, tp: tuple[str, int] | None = None) -> None:
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
                self._delete_offset(out, gid, t, p)
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
            return not self._has_pending_txn(group_id)
        group = self.classic.groups[group_id]
        base = group.offset_expiration_base()
        if base is None:
            return False
        retention = self.config.offsets_retention_ms
        all_expired = True
        for (topic, partition), entry in list(offsets.items()):
            if group.is_subscribed_to(topic) or self._has_pending_txn(group_id, (topic, partition)):
                all_expired = False
                continue
            if entry.expire_timestamp_ms is not None:
                expired = now_ms >= entry.expire_timestamp_ms
            else:
                expired = now_ms - base(entry.commit_timestamp_ms) >= retention
            if expired:
                self._delete_offset(out, group_id, topic, partition)
            else:
                all_expired = False
        return all_expired and not self._has_pending_txn(group_id)

    def delete_all_offsets(self, out: Result, group_id: str) -> None:
        """Tombstone every offset of a group being deleted, and drop its pending ones."""
        for topic, partition in list(self.offsets.get(group_id, {})):
            self._delete_offset(out, group_id, topic, partition)
        self._drop_pending_txn(group_id)

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
        self.classic.get_or_create_group(k.group)
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
