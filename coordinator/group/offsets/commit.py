"""OffsetCommit: a fast path for the usual request, a general path for everything else.

How this works: ``offset_commit`` tries ``commit_fast`` first -- a v1-v9 request of known
topics and partitions to a loaded, existing group that accepts it, every metadata short --
which answers without the per-partition code table, and returns None, having changed
nothing, for anything else; ``commit_general`` then decides.  Both validate the member
through ``validate_commit``, and the two paths give the same answers and the same records
(tests/group check them against each other).  Every record is encoded before anything
changes: a commit is all-or-nothing.
"""

from __future__ import annotations

import codecs
import struct
from collections.abc import Iterable

from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.state import ClassicGroupState
from coordinator.group.offsets.group import OffsetGroup
from coordinator.group.offsets.manager import (
    OffsetEntry,
    OffsetMetadataManager,
    TopicPartition,
)
from coordinator.group.records import offset_commit_records
from coordinator.group.types import Record, RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

__all__ = [
    "BEFORE_COORDINATOR",
    "commit_fast",
    "commit_general",
    "java_length",
    "metadata_too_large",
    "offset_commit",
    "response_code",
    "validate_commit",
]

_S = ClassicGroupState.STABLE
_P = ClassicGroupState.PREPARING_REBALANCE
_OK = ErrorCode.NO_ERROR

# Codes answered before the coordinator sees a commit (Kafka's KafkaApis): a request-level
# error of the coordinator does not overwrite them.
BEFORE_COORDINATOR = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID)


def response_code(
    codes: dict[tuple[int, int], ErrorCode], key: tuple[int, int], rest: ErrorCode | None
) -> ErrorCode:
    code = codes.get(key)
    if rest is None or code in BEFORE_COORDINATOR:
        assert code is not None
        return code
    return rest


# Looked up at import, not on first use: a codec's module is imported lazily, and an import
# inside a request handler fails (EMFILE) when connections hold every file descriptor.
codecs.lookup("utf-16-le")


def java_length(s: str) -> int:
    # Kafka compares String.length(): UTF-16 code units, not bytes.
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def metadata_too_large(s: str, limit: int) -> bool:
    """``java_length(s) > limit`` without encoding when the answer is plain: a code
    point is one or two UTF-16 units, so ``len(s) <= units <= 2 * len(s)``."""
    n = len(s)
    if n * 2 <= limit:
        return False
    return n > limit or java_length(s) > limit


def validate_commit(
    group: OffsetGroup,
    req: OffsetCommitRequest,
    api_version: int,
    partitions: Iterable[tuple[bytes, int]] | None = None,
) -> ErrorCode | None:
    """The group's verdict on the committing member: the one check of both paths.

    ``partitions``: what would be written, when the caller has listed them (the fast path
    has not: an older member epoch is then refused, and the general path decides).
    """
    return group.validate_offset_commit(
        req.member_id,
        req.group_instance_id,
        req.generation_id_or_member_epoch,
        transactional=False,
        api_version=api_version,
        partitions=partitions,
    )


def _commit_response(
    out: Result,
    reply_to: int,
    req: OffsetCommitRequest,
    names: list[str | None],
    codes: dict[tuple[int, int], ErrorCode],
    rest: ErrorCode | None = None,
) -> Result:
    """Answer an OffsetCommit with ``codes``; ``rest``: the coordinator's error for every
    other partition. (A function of the module, not a closure: built on every commit.)

    In the order of Kafka's OffsetCommitResponse.Builder: the partitions refused before the
    coordinator first (their topics in request order), then the coordinator's, appended to
    their topic when it is already listed; without refused partitions, the coordinator's
    answer as it is (a topic named twice twice). A topic without partitions is left out."""
    topics: list[OffsetCommitResponseTopic] = []
    if not any(c in BEFORE_COORDINATOR for c in codes.values()):
        for i, (t, name) in enumerate(zip(req.topics, names, strict=True)):
            if t.partitions:
                parts = [
                    OffsetCommitResponsePartition(
                        p.partition_index, response_code(codes, (i, p.partition_index), rest)
                    )
                    for p in t.partitions
                ]
                topics.append(OffsetCommitResponseTopic(name or "", t.topic_id, parts))
        out.replies.append((reply_to, OffsetCommitResponse(topics=topics)))
        return out
    by_key: dict[object, OffsetCommitResponseTopic] = {}
    for before in (True, False):
        for i, (t, name) in enumerate(zip(req.topics, names, strict=True)):
            key = i if name is None else name
            for p in t.partitions:
                code = codes.get((i, p.partition_index))
                if (code in BEFORE_COORDINATOR) is not before:
                    continue
                topic = by_key.get(key)
                if topic is None:
                    topic = by_key[key] = OffsetCommitResponseTopic(name or "", t.topic_id, [])
                    topics.append(topic)
                topic.partitions.append(
                    OffsetCommitResponsePartition(
                        p.partition_index, response_code(codes, (i, p.partition_index), rest)
                    )
                )
    out.replies.append((reply_to, OffsetCommitResponse(topics=topics)))
    return out


def offset_commit(
    mgr: OffsetMetadataManager, ctx: RequestContext, req: OffsetCommitRequest, now_ms: int
) -> Result:
    """OffsetCommit: the usual request by the fast path, anything else by the general one.

    ``_commit_fast`` answers the common case -- a v1-v9 request of known topics and
    partitions to a loaded, existing group that accepts it, every metadata short --
    without the per-partition code table; it returns None, having changed nothing,
    whenever the request is anything else, and the general path decides (same answers,
    same records: tests/group check both paths against each other).
    """
    if 1 <= ctx.api_version < 10:
        out = commit_fast(mgr, ctx, req, now_ms)
        if out is not None:
            return out
    return commit_general(mgr, ctx, req, now_ms)


def commit_fast(
    mgr: OffsetMetadataManager, ctx: RequestContext, req: OffsetCommitRequest, now_ms: int
) -> Result | None:
    gid = req.group_id
    partitions = mgr.partitions
    if partitions.precheck(gid) is not None:
        return None  # the general path answers the error
    p = partitions.partition_of(gid)
    group = mgr.find_group(gid)
    if group is None:
        return None  # a new "simple" group or an error: the general path decides
    v = ctx.api_version
    if validate_commit(group, req, v) is not None:
        return None
    expire: int | None = None
    if 2 <= v <= 4 and req.retention_time_ms != -1:
        expire = now_ms + req.retention_time_ms
    half_limit = mgr.config.offset_metadata_max_bytes // 2
    stored: list[tuple[TopicPartition, OffsetEntry]] = []
    answer = []
    bound = mgr.partition_bound
    try:
        for t in req.topics:
            name = t.name
            n = bound(name)
            if len(t.partitions) > 1 and len({rp.partition_index for rp in t.partitions}) < len(
                t.partitions
            ):
                return None  # a partition named twice: the general path keeps the first
            parts = []
            for rp in t.partitions:
                index = rp.partition_index
                if n >= 0 and not 0 <= index < n:
                    return None  # an unknown partition: the general path answers it
                metadata = rp.committed_metadata or ""
                if len(metadata) > half_limit:
                    return None  # perhaps too large: the general path measures it
                ts = rp.commit_timestamp
                if ts == -1:
                    ts = now_ms
                entry = OffsetEntry(
                    rp.committed_offset, rp.committed_leader_epoch, metadata, ts, expire
                )
                stored.append(((name, index), entry))
                parts.append(OffsetCommitResponsePartition(index, _OK))
            if parts:  # Kafka's API layer does not pass a topic without partitions on
                answer.append(OffsetCommitResponseTopic(name, t.topic_id, parts))
        records = offset_commit_records(p, gid, stored)
    except (struct.error, ValueError):
        return None  # a record that cannot be serialized: the general path answers
    out = Result()
    if stored:
        if isinstance(group, ClassicGroup) and (group.state is _S or group.state is _P):
            # With the classic protocol a commit also proves the member is alive.
            member = group.members.get(req.member_id)
            if member is not None:
                mgr.classic.reschedule_heartbeat(out, group, member, now_ms)
        by_group = mgr.offsets.get(gid)
        if not (
            mgr.history
            and mgr.note_changes(out, gid, stored, records, by_group, req.member_id, ctx)
        ):
            if by_group is None:
                by_group = mgr.offsets[gid] = {}
            for tp, entry in stored:
                by_group[tp] = entry
        if mgr.pending_txn_offsets:
            for tp, _ in stored:
                mgr.note_commit(gid, tp)
        out.records = records
    out.replies.append((ctx.reply_to, OffsetCommitResponse(0, answer)))
    return out


def _refused_before_coordinator(
    mgr: OffsetMetadataManager, req: OffsetCommitRequest, v: int
) -> tuple[list[str | None], dict[tuple[int, int], ErrorCode], int]:
    """(each topic's name, the codes of the partitions refused, how many partitions).

    Topics are resolved and unknown partitions answered first, as Kafka's KafkaApis does
    before the coordinator sees the request; the coordinator's codes fill in the rest.
    Codes are keyed by (topic's index in the request, partition): on v10 two unknown ids
    share the empty name.
    """
    names: list[str | None] = [t.name if v < 10 else mgr.topic_name(t.topic_id) for t in req.topics]
    codes: dict[tuple[int, int], ErrorCode] = {}
    wanted = 0
    for i, (t, name) in enumerate(zip(req.topics, names, strict=True)):
        for p in t.partitions:
            wanted += 1
            if name is None:
                codes[(i, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_ID
            elif mgr.unknown_partition(name, p.partition_index):
                codes[(i, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return names, codes, wanted


def _encode_commit(
    mgr: OffsetMetadataManager,
    gid: str,
    req: OffsetCommitRequest,
    names: list[str | None],
    codes: dict[tuple[int, int], ErrorCode],
    v: int,
    now_ms: int,
) -> tuple[list[tuple[str, int, OffsetEntry]], list[Record]] | None:
    """Every record of the commit, encoded before anything changes (a commit is
    all-or-nothing); ``codes`` gets each written partition's code. None when a record
    cannot be serialized."""
    expire: int | None = None
    if 2 <= v <= 4 and req.retention_time_ms != -1:
        expire = now_ms + req.retention_time_ms
    stored: list[tuple[str, int, OffsetEntry]] = []
    records: list[Record] = []
    for i, (t, name) in enumerate(zip(req.topics, names, strict=True)):
        for p in t.partitions:
            key = (i, p.partition_index)
            if key in codes:
                continue
            assert name is not None  # unknown ids have their code already
            metadata = p.committed_metadata or ""
            if metadata and metadata_too_large(metadata, mgr.config.offset_metadata_max_bytes):
                codes[key] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            # (offset, leader epoch, metadata, commit timestamp, expire timestamp); v1
            # carries a commit timestamp per partition (-1: now), as Kafka keeps it.
            entry = OffsetEntry(
                p.committed_offset,
                p.committed_leader_epoch,
                metadata,
                now_ms if p.commit_timestamp == -1 else p.commit_timestamp,
                expire,
            )
            try:
                records.append(mgr.offset_record(gid, name, p.partition_index, entry))
            except (struct.error, ValueError):
                return None
            stored.append((name, p.partition_index, entry))
            codes[key] = ErrorCode.NO_ERROR
    return stored, records


def commit_general(
    mgr: OffsetMetadataManager, ctx: RequestContext, req: OffsetCommitRequest, now_ms: int
) -> Result:
    out = Result()
    v = ctx.api_version
    names, codes, wanted = _refused_before_coordinator(mgr, req, v)
    reply_to = ctx.reply_to
    if len(codes) == wanted:
        # Nothing left for the coordinator (an empty request included): Kafka answers
        # without it, so no group is validated, created or kept alive.
        return _commit_response(out, reply_to, req, names, codes)
    # The empty group id commits: Kafka keeps it "for backwards compatibility".
    gid = req.group_id
    err = mgr.partitions.precheck(gid) if gid else mgr.partitions.availability_error(gid)
    if err is not None:
        return _commit_response(out, reply_to, req, names, codes, err)
    group = mgr.find_group(gid)
    simple: ClassicGroup | None = None  # a new "simple" group, kept if a commit is written
    if group is None:
        if req.generation_id_or_member_epoch >= 0:
            return _commit_response(
                out,
                reply_to,
                req,
                names,
                codes,
                ErrorCode.GROUP_ID_NOT_FOUND if v >= 9 else ErrorCode.ILLEGAL_GENERATION,
            )
        group = simple = ClassicGroup(gid)
    limit = mgr.config.offset_metadata_max_bytes
    err = validate_commit(
        group,
        req,
        v,
        # What would be written (a consumer group checks each partition's assignment
        # epoch when the member epoch is older than the member's).
        (
            (mgr.topic_id(name), p.partition_index)
            for i, (t, name) in enumerate(zip(req.topics, names, strict=True))
            if name is not None
            for p in t.partitions
            if (i, p.partition_index) not in codes
            and not (p.committed_metadata and metadata_too_large(p.committed_metadata, limit))
        ),
    )
    if err is not None:
        return _commit_response(out, reply_to, req, names, codes, err)

    encoded = _encode_commit(mgr, gid, req, names, codes, v, now_ms)
    if encoded is None:
        # Kafka fails the whole write when a record cannot be serialized.
        return _commit_response(out, reply_to, req, names, codes, ErrorCode.UNKNOWN)
    stored, records = encoded
    if simple is not None and stored:
        mgr.classic.groups[gid] = simple
    if isinstance(group, ClassicGroup) and group.is_in(_S, _P):
        # With the classic protocol a commit also proves the member is alive.
        member = group.members.get(req.member_id)
        if member is not None:
            mgr.classic.reschedule_heartbeat(out, group, member, now_ms)
    if mgr.history and stored:
        mgr.note_changes(
            out,
            gid,
            [((topic, partition), entry) for topic, partition, entry in stored],
            records,
            mgr.offsets.get(gid),
            req.member_id,
            ctx,
        )
    by_group = mgr.offsets.setdefault(gid, {}) if stored else None
    for topic, partition, entry in stored:
        assert by_group is not None
        by_group[(topic, partition)] = entry
        if mgr.pending_txn_offsets:
            mgr.note_commit(gid, (topic, partition))
    out.records.extend(records)
    return _commit_response(out, reply_to, req, names, codes)
