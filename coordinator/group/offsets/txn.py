"""TxnOffsetCommit, and the end of a transaction.

How this works: there is no transaction coordinator here.  Transactional offsets are held
in memory per producer id (``pending_txn_offsets``) until ``end_transaction`` writes them
(committed) or drops them (aborted).  While held they make ``require_stable`` fetches
answer UNSTABLE_OFFSET_COMMIT and keep the partition from expiring.  A stale member epoch
answers ILLEGAL_GENERATION, as Kafka's OffsetMetadataManager maps it.
"""

from __future__ import annotations

import struct

from coordinator.group.classic.group import ClassicGroup
from coordinator.group.offsets.commit import (
    java_length,
    response_code,
)
from coordinator.group.offsets.manager import (
    OffsetEntry,
    OffsetMetadataManager,
)
from coordinator.group.types import RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

__all__ = ["end_transaction", "txn_offset_commit"]


def txn_offset_commit(
    mgr: OffsetMetadataManager, ctx: RequestContext, req: TxnOffsetCommitRequest, now_ms: int
) -> Result:
    out = Result()
    codes: dict[tuple[int, int], ErrorCode] = {}
    wanted = 0
    for i, t in enumerate(req.topics):
        for p in t.partitions:
            wanted += 1
            if mgr.unknown_partition(t.name, p.partition_index):
                codes[(i, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def respond(rest: ErrorCode | None = None) -> Result:
        topics = [
            TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=response_code(codes, (i, p.partition_index), rest),
                    )
                    for p in t.partitions
                ],
            )
            for i, t in enumerate(req.topics)
        ]
        out.replies.append((ctx.reply_to, TxnOffsetCommitResponse(topics=topics)))
        return out

    if len(codes) == wanted:
        return respond()  # nothing left for the coordinator, as in offset_commit
    err = mgr.partitions.precheck(req.group_id)
    if err is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and ctx.api_version < 2:
        # Kafka's KafkaApis: producers before 2.0 (v0-1) could crash on this code.
        err = ErrorCode.COORDINATOR_NOT_AVAILABLE
    if err is not None:
        return respond(err)
    gid = req.group_id
    group = mgr.find_group(gid)
    simple: ClassicGroup | None = None
    if group is None:
        if req.generation_id >= 0:
            return respond(ErrorCode.ILLEGAL_GENERATION)
        group = simple = ClassicGroup(gid)
    limit = mgr.config.offset_metadata_max_bytes
    err = group.validate_offset_commit(
        req.member_id,
        req.group_instance_id,
        req.generation_id,
        transactional=True,
        api_version=ctx.api_version,
        partitions=(
            (mgr.topic_id(t.name), p.partition_index)
            for i, t in enumerate(req.topics)
            for p in t.partitions
            if (i, p.partition_index) not in codes
            and java_length(p.committed_metadata or "") <= limit
        ),
    )
    if err is ErrorCode.STALE_MEMBER_EPOCH:
        err = ErrorCode.ILLEGAL_GENERATION  # Kafka maps it for TxnOffsetCommit
    if err is not None:
        return respond(err)
    held: dict[tuple[str, int], OffsetEntry] = {}
    for i, t in enumerate(req.topics):
        for p in t.partitions:
            key = (i, p.partition_index)
            if key in codes:
                continue
            metadata = p.committed_metadata or ""
            if java_length(metadata) > mgr.config.offset_metadata_max_bytes:
                codes[key] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            entry = OffsetEntry(p.committed_offset, p.committed_leader_epoch, metadata, now_ms)
            try:
                # Written when the transaction commits: it must be encodable then.
                mgr.offset_record(gid, t.name, p.partition_index, entry)
            except (struct.error, ValueError):
                return respond(ErrorCode.UNKNOWN)
            held[(t.name, p.partition_index)] = entry
            codes[key] = ErrorCode.NO_ERROR
    if held:
        if simple is not None:
            mgr.classic.groups[gid] = simple
        mgr.pending_txn_offsets.setdefault(gid, {}).setdefault(req.producer_id, {}).update(held)
    return respond()


def end_transaction(
    mgr: OffsetMetadataManager, producer_id: int, committed: bool, now_ms: int
) -> Result:
    """The transaction of ``producer_id`` ended: write its offsets if it committed.

    Stands in for the transaction markers Kafka's transaction coordinator writes.
    """
    out = Result()
    for gid in list(mgr.pending_txn_offsets):
        by_producer = mgr.pending_txn_offsets[gid]
        parts = by_producer.pop(producer_id, None)
        if not by_producer:
            del mgr.pending_txn_offsets[gid]
        if parts is None or not committed:
            continue
        mgr.ensure_group(gid)
        for (topic, partition), entry in parts.items():
            mgr.store_offset(out, gid, topic, partition, entry)
    return out
