"""OffsetDelete: remove a group's offsets of topics it does not use.

How this works: unknown topics and partitions are refused first (Kafka's KafkaApis), the
group decides whether offsets may be deleted at all, and each partition of a topic the
group subscribes to answers GROUP_SUBSCRIBED_TO_TOPIC; the others are tombstoned.
"""

from __future__ import annotations

from coordinator.group.offsets.manager import (
    OffsetMetadataManager,
)
from coordinator.group.types import RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)

__all__ = ["offset_delete"]


def offset_delete(
    mgr: OffsetMetadataManager, ctx: RequestContext, req: OffsetDeleteRequest, now_ms: int
) -> Result:
    out = Result()

    def whole(code: ErrorCode) -> Result:
        out.replies.append((ctx.reply_to, OffsetDeleteResponse(error_code=code)))
        return out

    # Unknown topics and partitions are refused first, as Kafka's KafkaApis does; the
    # coordinator is asked even when nothing is left, and its error replaces them.
    unknown = {
        (t.name, p.partition_index)
        for t in req.topics
        for p in t.partitions
        if mgr.unknown_partition(t.name, p.partition_index)
    }
    err = mgr.partitions.precheck(req.group_id)
    if err is not None:
        return whole(err)
    gid = req.group_id
    group = mgr.find_group(gid)
    if group is None:
        return whole(ErrorCode.GROUP_ID_NOT_FOUND)
    err = group.validate_offset_delete()
    if err is not None:
        return whole(err)

    # In the order of Kafka's OffsetDeleteResponse.Builder: the refused partitions first,
    # then the coordinator's answer merged by topic name.
    topics: list[OffsetDeleteResponseTopic] = []
    by_name: dict[str, OffsetDeleteResponseTopic] = {}
    for refused in (True, False):
        for t in req.topics:
            subscribed = group.is_subscribed_to(t.name)
            for p in t.partitions:
                if ((t.name, p.partition_index) in unknown) is not refused:
                    continue
                if refused:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif subscribed:
                    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    code = ErrorCode.NO_ERROR
                    if mgr.history:
                        mgr.note_delete(out, gid, (t.name, p.partition_index), ctx)
                    mgr.delete_offset(out, gid, t.name, p.partition_index)
                topic = by_name.get(t.name)
                if topic is None:
                    topic = by_name[t.name] = OffsetDeleteResponseTopic(name=t.name)
                    topics.append(topic)
                topic.partitions.append(
                    OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                )
    out.replies.append((ctx.reply_to, OffsetDeleteResponse(error_code=0, topics=topics)))
    return out
