"""OffsetFetch, every version: one group (v0-v7) or many (v8+), topics by name or (v10) by id.

How this works: each group is answered by ``_fetch_group`` (Kafka's fetchOffsets, or
fetchAllOffsets when no topics are named) after the group validates the fetching member;
v10's topic ids are resolved through the topics image first, and unknown ids answer
UNKNOWN_TOPIC_ID after the coordinator's topics, as Kafka's KafkaApis does.
"""

from __future__ import annotations

from coordinator.group.offsets.manager import (
    ZERO_ID,
    OffsetMetadataManager,
)
from coordinator.group.types import RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)

__all__ = ["offset_fetch"]

# A fetched partition: (partition, offset, leader epoch, metadata, error).
_Fetched = tuple[int, int, int, str, int]
# A fetched topic: (name, topic id -- ZERO_ID when the request named it, partitions).
_FetchedTopic = tuple[str, bytes, list[_Fetched]]


def offset_fetch(
    mgr: OffsetMetadataManager, ctx: RequestContext, req: OffsetFetchRequest, now_ms: int
) -> Result:
    out = Result()
    v = ctx.api_version
    if v >= 8:
        groups = []
        for g in req.groups:
            err, fetched = _group_topics(
                mgr, v, g.group_id, g.member_id, g.member_epoch, g.topics, req.require_stable
            )
            groups.append(
                OffsetFetchResponseGroup(
                    group_id=g.group_id,
                    error_code=err,
                    topics=[
                        OffsetFetchResponseTopics(
                            name=name,
                            topic_id=topic_id,
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
                        for name, topic_id, parts in fetched
                    ],
                )
            )
        out.replies.append((ctx.reply_to, OffsetFetchResponse(groups=groups)))
        return out

    # v0-v1 cannot express "all topics"; treat an absent list as empty there.
    wanted_single = (
        None
        if req.topics is None and v >= 2
        else [(t.name, ZERO_ID, list(t.partition_indexes)) for t in (req.topics or [])]
    )
    err, fetched = _fetch_group(mgr, req.group_id, None, -1, v, wanted_single, req.require_stable)
    if err != ErrorCode.NO_ERROR and v < 2:
        # No top-level error code before v2: the error goes on every partition.
        fetched = [
            (name, topic_id, [(p, -1, -1, "", err) for p in parts])
            for name, topic_id, parts in (wanted_single or [])
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
            for name, _, parts in fetched
        ],
    )
    out.replies.append((ctx.reply_to, resp))
    return out


def _group_topics(
    mgr: OffsetMetadataManager,
    v: int,
    group_id: str,
    member_id: str | None,
    member_epoch: int,
    topics: list[OffsetFetchRequestTopics] | None,
    require_stable: bool,
) -> tuple[ErrorCode, list[_FetchedTopic]]:
    """One group of a v8+ fetch, with v10's topic ids (Kafka's KafkaApis part)."""
    if v < 10:
        wanted = (
            None
            if topics is None
            else [(t.name, ZERO_ID, list(t.partition_indexes)) for t in topics]
        )
        return _fetch_group(mgr, group_id, member_id, member_epoch, v, wanted, require_stable)
    if topics is None:
        err, fetched = _fetch_group(mgr, group_id, member_id, member_epoch, v, None, require_stable)
        # Answered by id: a topic without one (deleted since) cannot be named on v10.
        by_id = [(name, mgr.topic_id(name), parts) for name, _, parts in fetched]
        return err, [t for t in by_id if t[1] != ZERO_ID]
    known: list[tuple[str, bytes, list[int]]] = []
    unknown: list[_FetchedTopic] = []
    for t in topics:
        name = mgr.topic_name(t.topic_id)
        if name is None:
            # Kafka answers these after the coordinator's topics (offset -1, no epoch).
            unknown.append(
                (
                    "",
                    t.topic_id,
                    [(p, -1, -1, "", ErrorCode.UNKNOWN_TOPIC_ID) for p in t.partition_indexes],
                )
            )
        else:
            known.append((name, t.topic_id, list(t.partition_indexes)))
    err, fetched = _fetch_group(mgr, group_id, member_id, member_epoch, v, known, require_stable)
    if err != ErrorCode.NO_ERROR:
        return err, fetched
    return err, fetched + unknown


def _fetch_group(
    mgr: OffsetMetadataManager,
    group_id: str,
    member_id: str | None,
    member_epoch: int,
    api_version: int,
    wanted: list[tuple[str, bytes, list[int]]] | None,
    require_stable: bool,
) -> tuple[ErrorCode, list[_FetchedTopic]]:
    """Kafka's fetchOffsets (``wanted``: (name, id to echo, partitions)) or, when
    ``wanted`` is None, fetchAllOffsets (topics answered with ZERO_ID)."""
    # An empty group id is served (Kafka keeps that for backward compatibility).
    err = mgr.partitions.availability_error(group_id)
    if err is not None:
        return err, []
    group = mgr.find_group(group_id)
    if group is not None:
        err = group.validate_offset_fetch(member_id, member_epoch, api_version)
        if err is ErrorCode.GROUP_ID_NOT_FOUND:
            group = None  # answered as a group that does not exist
        elif err is not None:
            return err, []
    offsets = {} if group is None else mgr.offsets.get(group_id, {})

    def one(topic: str, partition: int) -> _Fetched | None:
        if require_stable and mgr.has_pending_txn(group_id, (topic, partition)):
            return (partition, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
        entry = offsets.get((topic, partition))
        if entry is None:
            return None
        return (partition, entry.offset, entry.leader_epoch, entry.metadata, 0)

    result: list[_FetchedTopic] = []
    if wanted is None:
        by_topic: dict[str, list[_Fetched]] = {}
        for topic, partition in sorted(offsets):
            got = one(topic, partition)
            if got is not None:
                by_topic.setdefault(topic, []).append(got)
        result = [(name, ZERO_ID, parts) for name, parts in by_topic.items()]
    else:
        for topic, topic_id, partitions in wanted:
            parts: list[_Fetched] = []
            for partition in partitions:
                got = one(topic, partition)
                parts.append(got if got is not None else (partition, -1, -1, "", 0))
            result.append((topic, topic_id, parts))
    return ErrorCode.NO_ERROR, result
