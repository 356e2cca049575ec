"""The answers the runtime makes up itself: a group API failing as a whole, or on storage.

How this works: the group core prepares every answer, but two failures happen outside it.
A request whose handler raised (a bug) is answered ``error_response(..., UNKNOWN)`` in its
API's shape (``protocol/error_responses.py``). Replies whose records could not be appended or made durable are turned into
``storage_error_reply``: NOT_COORDINATOR where the records went to a failed partition
(Kafka's coordinator maps KAFKA_STORAGE_ERROR to it), the rest kept as prepared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from coordinator.group.share.offsets_admin import OffsetsStep
from protocol.errors import ErrorCode
from protocol.messages import (
    consumer_group_heartbeat,
    delete_groups,
    heartbeat,
    join_group,
    leave_group,
    offset_commit,
    offset_delete,
    offset_fetch,
    share_group_heartbeat,
    streams_group_heartbeat,
    sync_group,
    txn_offset_commit,
)

__all__ = ["STORAGE_FAILED", "storage_error_reply"]

STORAGE_FAILED = ErrorCode.NOT_COORDINATOR  # Kafka: KAFKA_STORAGE_ERROR -> NOT_COORDINATOR


def storage_error_reply(reply: Any, failed: set[int], partition_of: Callable[[str], int]) -> Any:
    """``reply`` (a success prepared by the shard) as the answer to a storage failure."""
    code = STORAGE_FAILED
    if isinstance(reply, ErrorCode):  # a transaction marker's outcome (complete_transaction)
        return code
    if isinstance(reply, delete_groups.Response):
        # One DeleteGroups may span partitions: only groups of failed ones fail.
        return delete_groups.Response(
            throttle_time_ms=reply.throttle_time_ms,
            results=[
                delete_groups.DeletableGroupResult(group_id=r.group_id, error_code=code)
                if partition_of(r.group_id) in failed
                else r
                for r in reply.results
            ],
        )
    if isinstance(reply, offset_commit.Response | txn_offset_commit.Response):
        topics: list[Any] = []
        for t in reply.topics:
            parts: list[Any] = [
                dataclasses.replace(
                    p,
                    # Answered before the coordinator (unknown topic, v10 unknown topic id).
                    error_code=p.error_code
                    if p.error_code
                    in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID)
                    else code,
                )
                for p in t.partitions
            ]
            topics.append(dataclasses.replace(t, partitions=parts))  # type: ignore[arg-type]
        return dataclasses.replace(reply, topics=topics)  # type: ignore[arg-type]
    if isinstance(reply, join_group.Response):
        return join_group.Response(error_code=code, member_id=reply.member_id)
    if isinstance(reply, sync_group.Response):
        return sync_group.Response(error_code=code)
    if isinstance(reply, heartbeat.Response):
        return heartbeat.Response(error_code=code)
    if isinstance(reply, leave_group.Response):
        return leave_group.Response(error_code=code)
    if isinstance(reply, offset_delete.Response):
        return offset_delete.Response(error_code=code)
    if isinstance(reply, consumer_group_heartbeat.Response):
        return consumer_group_heartbeat.Response(error_code=code)
    if isinstance(reply, streams_group_heartbeat.Response):
        return streams_group_heartbeat.Response(error_code=code)
    if isinstance(reply, share_group_heartbeat.Response):
        return share_group_heartbeat.Response(error_code=code)
    if isinstance(reply, offset_fetch.Response):
        return _offset_fetch_failed(reply, failed, partition_of)
    if isinstance(reply, OffsetsStep):  # AlterShareGroupOffsets' and DeleteShareGroupOffsets'
        return reply._replace(error=code)
    return reply  # answers that never depend on records (describe, list)


def _offset_fetch_failed(
    reply: offset_fetch.Response, failed: set[int], partition_of: Callable[[str], int]
) -> offset_fetch.Response:
    """A fetch prepared while records it may show were not durable, and some failed: the
    groups of failed partitions answer NOT_COORDINATOR (v8+ names its groups; before, the
    one group's error, or each partition's before v2, where there is no top-level code)."""
    code = STORAGE_FAILED
    if reply.groups:
        return dataclasses.replace(
            reply,
            groups=[
                offset_fetch.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code)
                if partition_of(g.group_id) in failed
                else g
                for g in reply.groups
            ],
        )
    topics = [
        dataclasses.replace(
            t,
            partitions=[
                dataclasses.replace(p, committed_offset=-1, metadata="", error_code=code)
                for p in t.partitions
            ],
        )
        for t in reply.topics
    ]
    return dataclasses.replace(reply, error_code=code, topics=topics)
