"""Committed offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, retention.

How this works
--------------
Offsets live in ``self.offsets[group][(topic, partition)]``; every change is
also emitted as an OffsetCommit record (or a tombstone) for the offsets log.

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

Retention (KIP-211), on the ``expire-offsets`` timer: an Empty group's
offsets expire offsets.retention.minutes after the group became Empty; a
group without protocol type ("simple") expires each offset that long after
its commit; a Stable "consumer" group with a known subscription expires
offsets of topics it no longer subscribes to.  Offsets with an explicit
expire timestamp use it.  A group whose offsets are all gone and that is
Empty is deleted (metadata tombstone).
"""

from __future__ import annotations

import codecs
import struct

from coordinator.group.base import EXPIRE_OFFSETS_KEY, OffsetEntry, TimerAction, TimerKind
from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.join import validate_member
from coordinator.group.classic.rebalance import RebalanceCore
from coordinator.group.classic.state import GroupState
from coordinator.group.types import RequestContext, Result
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
from storage.offsets_format import encode_offset_commit_key, encode_offset_commit_value

__all__ = ["OffsetsMixin"]

_P = GroupState.PREPARING_REBALANCE
_C = GroupState.COMPLETING_REBALANCE
_S = GroupState.STABLE
_E = GroupState.EMPTY
_D = GroupState.DEAD

# A fetched partition: (partition, offset, leader epoch, metadata, error).
_Fetched = tuple[int, int, int, str, int]


def validate_offset_commit(
    group: ClassicGroup,
    member_id: str,
    instance_id: str | None,
    generation: int,
    transactional: bool,
) -> ErrorCode | None:
    if group.is_in(_D):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if generation < 0 and group.is_in(_E):
        return None  # admin client or a consumer without group management
    if generation >= 0 or member_id != "" or instance_id is not None:
        err = validate_member(group, member_id, instance_id)
        if err is not None:
            return err
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
    elif not transactional and not group.is_in(_E):
        return ErrorCode.UNKNOWN_MEMBER_ID
    if not transactional and group.is_in(_C):
        return ErrorCode.REBALANCE_IN_PROGRESS
    return None


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


class OffsetsMixin(RebalanceCore):
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
        err = self._precheck(req.group_id)
        if err is not None:
            return respond(err)
        gid = req.group_id
        generation = req.generation_id_or_member_epoch
        group = self.groups.get(gid)
        new_group = group is None
        if group is None:
            if generation >= 0:
                return respond(
                    ErrorCode.GROUP_ID_NOT_FOUND if v >= 9 else ErrorCode.ILLEGAL_GENERATION
                )
            group = ClassicGroup(gid)  # kept only if the commit is written (below)
        err = validate_offset_commit(
            group, req.member_id, req.group_instance_id, generation, transactional=False
        )
        if err is not None:
            return respond(err)

        # Encode every record before changing anything: a commit is all-or-nothing.
        expire: int | None = None
        if 2 <= v <= 4 and req.retention_time_ms != -1:
            expire = now_ms + req.retention_time_ms
        stored: list[tuple[str, int, OffsetEntry]] = []
        records: list[tuple[int, bytes, bytes | None]] = []
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
            self.groups[gid] = group
        member = group.members.get(req.member_id)
        if member is not None and group.is_in(_S, _P):
            # With the classic protocol a commit also proves the member is alive.
            self._reschedule_heartbeat(out, group, member, now_ms)
        by_group = self.offsets.setdefault(gid, {}) if stored else None
        for topic, partition, entry in stored:
            assert by_group is not None
            by_group[(topic, partition)] = entry
        out.records.extend(records)
        return respond()

    def _offset_record(
        self, group_id: str, topic: str, partition: int, entry: OffsetEntry
    ) -> tuple[int, bytes, bytes | None]:
        return (
            self.partition_of(group_id),
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
            out.records.append(self._offset_tombstone(group_id, topic, partition))
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
        err = self._precheck(req.group_id)
        if err is not None:
            return respond(err)
        gid = req.group_id
        group = self.groups.get(gid)
        new_group = group is None
        if group is None:
            if req.generation_id >= 0:
                return respond(ErrorCode.ILLEGAL_GENERATION)
            group = ClassicGroup(gid)
        err = validate_offset_commit(
            group, req.member_id, req.group_instance_id, req.generation_id, transactional=True
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
                self.groups[gid] = group
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
            if gid not in self.groups:
                self.groups[gid] = ClassicGroup(gid)
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
        err = self._availability_error(group_id)
        if err is not None:
            return err, []
        group = self.groups.get(group_id)
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
        err = self._precheck(req.group_id)
        if err is not None:
            return whole(err)
        gid = req.group_id
        group = self.groups.get(gid)
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
            if self._availability_error(gid) is not None:
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
            out.events.append(
                f"topic {topic} deleted: {len(out.records)} committed offsets removed"
            )
        return out

    # ------------------------------------------------------------ retention

    def _arm_expiration(self, out: Result, now_ms: int) -> None:
        self._schedule(
            out,
            EXPIRE_OFFSETS_KEY,
            now_ms + self.config.offsets_retention_check_interval_ms,
            TimerAction(TimerKind.EXPIRE_OFFSETS),
        )

    def _expire_offsets(self, out: Result, now_ms: int) -> None:
        expired_total = 0
        deleted: list[str] = []
        for gid in list(self.groups):
            if self._availability_error(gid) is not None:
                continue
            before = len(out.records)
            all_gone = self._cleanup_expired_offsets(out, gid, now_ms)
            expired_total += len(out.records) - before
            group = self.groups[gid]
            if all_gone and group.is_in(_E):
                self._delete_group(out, group, now_ms)
                deleted.append(gid)
        if expired_total or deleted:
            out.events.append(
                f"offset expiration: {expired_total} offsets expired, groups deleted: "
                + (", ".join(deleted) or "none")
            )
        self._arm_expiration(out, now_ms)

    def _cleanup_expired_offsets(self, out: Result, group_id: str, now_ms: int) -> bool:
        """Tombstone expired offsets; True if the group has no offsets left at all."""
        offsets = self.offsets.get(group_id)
        if offsets is None:
            return not self._has_pending_txn(group_id)
        group = self.groups[group_id]
        retention = self.config.offsets_retention_ms

        if group.protocol_type:
            if group.is_in(_E):
                state_ts = group.state_timestamp_ms

                def base(e: OffsetEntry) -> int:
                    return e.commit_timestamp_ms if state_ts is None else state_ts
            elif (
                group.uses_consumer_protocol()
                and group.subscribed_topics is not None
                and group.is_in(_S)
            ):

                def base(e: OffsetEntry) -> int:
                    return e.commit_timestamp_ms
            else:
                return False
        else:

            def base(e: OffsetEntry) -> int:
                return e.commit_timestamp_ms

        all_expired = True
        for (topic, partition), entry in list(offsets.items()):
            if group.is_subscribed_to(topic) or self._has_pending_txn(group_id, (topic, partition)):
                all_expired = False
                continue
            if entry.expire_timestamp_ms is not None:
                expired = now_ms >= entry.expire_timestamp_ms
            else:
                expired = now_ms - base(entry) >= retention
            if expired:
                self._delete_offset(out, group_id, topic, partition)
            else:
                all_expired = False
        return all_expired and not self._has_pending_txn(group_id)

    def _delete_group(self, out: Result, group: ClassicGroup, now_ms: int) -> None:
        """Tombstone a group and all its offsets and forget it."""
        gid = group.group_id
        for topic, partition in list(self.offsets.get(gid, {})):
            self._delete_offset(out, gid, topic, partition)
        self._drop_pending_txn(gid)
        out.records.append(self._group_tombstone(gid))
        group.transition_to(_D, now_ms)
        for key in [k for k, t in self._timers.items() if t.action.group_id == gid]:
            self._cancel(out, key)
        del self.groups[gid]
