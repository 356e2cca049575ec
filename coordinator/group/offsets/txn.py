"""TxnOffsetCommit, and the end of a transaction on an offsets partition.

How this works (Kafka's OffsetMetadataManager.commitTransactionalOffset and
CoordinatorRuntime.completeTransaction): a TxnOffsetCommit is checked as Kafka checks it
-- the partition's load status, the group (an unknown group with generation -1 becomes a
"simple" classic group; the group type's ``validate_offset_commit`` with
``transactional=True`` judges the member fields: a classic group's generation and static
member, a consumer group's member epoch, a stale one answered ILLEGAL_GENERATION), each
partition's metadata size, then the producer epoch the offsets partition last saw -- and
its offsets become one transactional batch of the producer (``Result.txn``), pending in
the manager until the transaction ends.  While pending they make ``require_stable``
fetches answer UNSTABLE_OFFSET_COMMIT and keep the partition from expiring.

``complete_transaction`` is the marker the transaction coordinator sends to an offsets
partition: after the log's checks (producer epoch, coordinator epoch) the COMMIT/ABORT
control record is the Result's one record, written as a control batch, and the
producer's pending offsets there are committed or dropped at once (the reply waits for
the record's durability; a failed write rebuilds the partition from its log).
"""

from __future__ import annotations

import struct

from coordinator.group.classic.group import ClassicGroup
from coordinator.group.offsets.commit import (
    BEFORE_COORDINATOR,
    java_length,
    response_code,
)
from coordinator.group.offsets.manager import (
    OffsetEntry,
    OffsetMetadataManager,
    TopicPartition,
)
from coordinator.group.partitions import PartitionStatus
from coordinator.group.records import end_txn_marker_record
from coordinator.group.types import Record, RequestContext, Result, TxnBatch
from coordinator.history.model import TRANSACTION_CLIENT, OffsetChange
from protocol.errors import ErrorCode
from protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

__all__ = ["complete_transaction", "txn_offset_commit", "txn_response"]


def txn_response(
    req: TxnOffsetCommitRequest,
    codes: dict[tuple[int, int], ErrorCode],
    rest: ErrorCode | None = None,
) -> TxnOffsetCommitResponse:
    """The answer: ``codes`` by (topic's index, partition), ``rest`` for the partitions the
    coordinator saw without one of their own.

    In the order of Kafka's TxnOffsetCommitResponse.Builder: the partitions refused before
    the coordinator (unknown ones) first, topics in request order, then the coordinator's,
    appended to their topic when it is already listed."""
    topics: list[TxnOffsetCommitResponseTopic] = []
    by_name: dict[str, TxnOffsetCommitResponseTopic] = {}
    for before in (True, False):
        for i, t in enumerate(req.topics):
            for p in t.partitions:
                key = (i, p.partition_index)
                if (codes.get(key) in BEFORE_COORDINATOR) is not before:
                    continue
                topic = by_name.get(t.name)
                if topic is None:
                    topic = by_name[t.name] = TxnOffsetCommitResponseTopic(name=t.name)
                    topics.append(topic)
                topic.partitions.append(
                    TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=response_code(codes, key, rest),
                    )
                )
    return TxnOffsetCommitResponse(topics=topics)


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
        out.replies.append((ctx.reply_to, txn_response(req, codes, rest)))
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
    simple, err = _validate_group(mgr, ctx, req, codes)
    if err is not None:
        return respond(err)
    held: list[tuple[tuple[str, int], OffsetEntry]] = []
    records: list[Record] = []
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
                records.append(mgr.offset_record(gid, t.name, p.partition_index, entry))
            except (struct.error, ValueError):
                return respond(ErrorCode.UNKNOWN)
            held.append(((t.name, p.partition_index), entry))
            codes[key] = ErrorCode.NO_ERROR
    if not held:
        return respond()
    if mgr.producer_epoch_error(
        mgr.partitions.partition_of(gid), req.producer_id, req.producer_epoch
    ):
        # The offsets log refuses a batch of an older epoch than it last saw from this
        # producer (a delayed commit of a fenced producer), failing the whole write.
        for key in [k for k, c in codes.items() if c is not ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]:
            del codes[key]
        return respond(ErrorCode.INVALID_PRODUCER_EPOCH)
    if simple is not None:
        mgr.classic.groups[gid] = simple
    for tp, entry in held:
        mgr.add_pending(gid, req.producer_id, req.producer_epoch, tp, entry)
    out.records = records
    out.txn = TxnBatch(req.producer_id, req.producer_epoch, False)
    return respond()


def _validate_group(
    mgr: OffsetMetadataManager,
    ctx: RequestContext,
    req: TxnOffsetCommitRequest,
    codes: dict[tuple[int, int], ErrorCode],
) -> tuple[ClassicGroup | None, ErrorCode | None]:
    """Kafka's validateTransactionalOffsetCommit: (the "simple" group to create, if any;
    the error for every partition, if any)."""
    gid = req.group_id
    group = mgr.find_group(gid)
    simple: ClassicGroup | None = None
    if group is None:
        if req.generation_id >= 0:
            return None, ErrorCode.ILLEGAL_GENERATION
        group = simple = ClassicGroup(gid)
    limit = mgr.config.offset_metadata_max_bytes
    # Every group type judges the member fields itself (OffsetGroup.validate_offset_commit):
    # a new group type plugs its epoch checks in there.
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
    return simple, err


def complete_transaction(
    mgr: OffsetMetadataManager,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
) -> tuple[Result, ErrorCode]:
    """A COMMIT/ABORT marker for ``producer_id`` on offsets partition ``partition``.

    (Result, NONE): the Result's one record is the control record, its pending offsets
    there are committed or dropped already; (empty Result, error) when the partition is
    not served here (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) or the log's checks
    refuse the marker (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED).
    """
    out = Result()
    status = mgr.partitions.get(partition)
    if status is not PartitionStatus.LOADED:
        if status is PartitionStatus.LOADING:
            return out, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return out, ErrorCode.NOT_COORDINATOR
    err = mgr.marker_error(partition, producer_id, producer_epoch, coordinator_epoch)
    if err is not None:
        return out, err
    before = _committed_before(mgr, partition, producer_id) if commit and mgr.history else None
    mgr.end_txn(partition, producer_id, producer_epoch, coordinator_epoch, commit)
    if before:
        _note_txn_changes(mgr, out, producer_id, before)
    out.records.append(end_txn_marker_record(partition, commit, coordinator_epoch))
    out.txn = TxnBatch(producer_id, producer_epoch, True)
    return out, ErrorCode.NO_ERROR


def _committed_before(
    mgr: OffsetMetadataManager, partition: int, producer_id: int
) -> dict[str, dict[TopicPartition, OffsetEntry]]:
    """The committed offsets, before the marker, of the groups on ``partition`` that hold
    pending offsets of ``producer_id``."""
    partition_of = mgr.partitions.partition_of
    return {
        gid: dict(mgr.offsets.get(gid, {}))
        for gid, by_producer in mgr.pending_txn_offsets.items()
        if producer_id in by_producer and partition_of(gid) == partition
    }


def _note_txn_changes(
    mgr: OffsetMetadataManager,
    out: Result,
    producer_id: int,
    before: dict[str, dict[TopicPartition, OffsetEntry]],
) -> None:
    """The offsets a COMMIT marker made visible, to the history: one change per group, who
    being the transaction (``TRANSACTION_CLIENT`` and the producer id; no member, no host)."""
    for gid, old in before.items():
        now = mgr.offsets.get(gid, {})
        moved = [(tp, e) for tp, e in now.items() if old.get(tp) is not e]
        moved = [(tp, e) for tp, e in moved if tp not in old or old[tp].offset != e.offset]
        if not moved:
            continue
        if out.history is None:
            out.history = []
        out.history.append(
            OffsetChange(
                mgr.partitions.partition_of(gid), gid, "",
                f"{TRANSACTION_CLIENT} {producer_id}", "",
                [mgr.offset_record(gid, tp[0], tp[1], e) for tp, e in moved],
                [old[tp].offset if tp in old else -1 for tp, _e in moved],
                [0] * len(moved),
            )
        )  # fmt: skip
