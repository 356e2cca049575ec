"""Offsets answers shaped as Kafka's API layer shapes them (found by the differential suite):
partitions refused before the coordinator come first, the empty group id commits, and a
coordinator error on OffsetDelete replaces the per-partition answers."""

from __future__ import annotations

from support.group_context import GroupContext, offset_delete

from protocol.errors import ErrorCode
from protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)

UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _commit(h: GroupContext, group: str, topics: list[tuple[str, list[int]]], **kw: int) -> list:  # type: ignore[type-arg]
    ctx = h.ctx(9)
    req = OffsetCommitRequest(
        group_id=group,
        topics=[
            OffsetCommitRequestTopic(
                name=t, partitions=[OffsetCommitRequestPartition(p, 1) for p in ps]
            )
            for t, ps in topics
        ],
        **kw,
    )
    h.apply(h.shard.offset_commit(ctx, req, h.now))
    resp = h.reply(ctx.reply_to)
    assert isinstance(resp, OffsetCommitResponse)
    return [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in resp.topics
    ]


def test_commit_answers_refused_partitions_first() -> None:
    # Kafka's OffsetCommitResponse.Builder: KafkaApis adds the unknown topics and partitions,
    # then merges the coordinator's answer (appended to a topic already there).
    h = GroupContext(topic_partitions={"a": 2, "b": 1}.get)
    got = _commit(h, "g", [("b", [0]), ("a", [0, 5, 1]), ("nope", [3]), ("a", [])])
    assert got == [("a", [(5, UNKNOWN), (0, 0), (1, 0)]), ("nope", [(3, UNKNOWN)]), ("b", [(0, 0)])]
    # A coordinator error goes on the partitions it saw, after the refused ones.
    got = _commit(h, "g2", [("a", [0, 7])], generation_id_or_member_epoch=3, member_id="m")
    assert got == [("a", [(7, UNKNOWN), (0, ErrorCode.GROUP_ID_NOT_FOUND)])]


def test_commit_with_the_empty_group_id_is_served() -> None:
    # GroupCoordinatorService.commitOffsets: "for backwards compatibility, we support offset
    # commits for the empty groupId" (fetches too).
    h = GroupContext()
    assert h.commit("", {("t", 0): 42}) == {("t", 0): 0}
    assert h.committed("", "t", 0) == 42


def test_offset_delete_orders_refused_partitions_first_and_group_errors_win() -> None:
    h = GroupContext(topic_partitions={"a": 2, "b": 1}.get)
    h.commit("g", {("a", 0): 1, ("b", 0): 1})
    resp = offset_delete(h, "g", {"b": [0], "a": [0, 9]})
    assert resp.error_code == 0
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in resp.topics
    ] == [
        ("a", [(9, UNKNOWN), (0, 0)]),
        ("b", [(0, 0)]),
    ]
    # The coordinator is asked even when every partition was refused: its error replaces
    # the refused partitions (OffsetDeleteResponse.Builder.merge).
    resp = offset_delete(h, "unknown-group", {"nope": [0], "a": [5]})
    assert resp.error_code == ErrorCode.GROUP_ID_NOT_FOUND and resp.topics == []
    resp = offset_delete(h, "g", {"nope": [0]})
    assert resp.error_code == 0
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in resp.topics
    ] == [("nope", [(0, UNKNOWN)])]
