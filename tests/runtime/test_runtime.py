"""The group runtime around the pure shard: durability before replies, and failed appends."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from coordinator.group.shard import GroupConfig, GroupShard
from coordinator.runtime import GroupRuntime
from coordinator.server import ClientInfo
from protocol.framing import RequestHeader
from protocol.messages import offset_commit, offset_fetch
from protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from storage.durability import Flusher
from storage.log import LogConfig
from storage.manager import LogManager

CLIENT = ClientInfo("test", "127.0.0.1", 1, 1)
PARTITIONS = 4


def commit(group: str, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)
                ],
            )
        ],
    )


async def runtime(tmp_path: Path) -> tuple[GroupRuntime, Flusher, LogManager]:
    flusher = Flusher()
    logs = LogManager(tmp_path, flusher=flusher)
    rt = GroupRuntime(
        GroupShard(GroupConfig(offsets_topic_num_partitions=PARTITIONS)),
        logs,
        flusher,
        num_partitions=PARTITIONS,
        log_config=LogConfig(cleanup_policy="compact", journaled=True),
    )
    await rt.load()
    return rt, flusher, logs


async def call(rt: GroupRuntime, api_key: int, version: int, body: Any) -> Any:
    result = rt.handlers()[api_key](RequestHeader(api_key, version, 1, "test"), body, CLIENT)
    return await result if isinstance(result, asyncio.Future) else result


def fetched(rt: GroupRuntime, group: str) -> int:
    req = offset_fetch.Request(
        groups=[offset_fetch.OffsetFetchRequestGroup(group_id=group, topics=None)]
    )
    resp = rt.handlers()[offset_fetch.API_KEY](
        RequestHeader(offset_fetch.API_KEY, 8, 1, "t"), req, CLIENT
    )
    parts = [p for t in resp.groups[0].topics for p in t.partitions]
    return parts[0].committed_offset if parts else -1


async def test_commit_reply_waits_for_the_log_and_is_replayable(tmp_path: Path) -> None:
    rt, flusher, logs = await runtime(tmp_path)
    resp = await call(rt, offset_commit.API_KEY, 8, commit("g", 5))
    assert resp.topics[0].partitions[0].error_code == 0
    plog = rt.partitions[rt.shard.partition_of("g")]
    assert plog.durable_end == plog.log_end_offset > 0  # durable before the reply left
    await flusher.stop()
    logs.close_all()
    rt2, flusher2, logs2 = await runtime(tmp_path)
    assert fetched(rt2, "g") == 5
    await flusher2.stop()
    logs2.close_all()


async def test_failed_append_fails_the_reply_and_rebuilds_from_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt, flusher, logs = await runtime(tmp_path)
    await call(rt, offset_commit.API_KEY, 8, commit("g", 5))
    plog = rt.partitions[rt.shard.partition_of("g")]

    def broken(*a: object, **k: object) -> tuple[int, int]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plog, "append_records", broken)
    with pytest.raises(RuntimeError, match="append failed"):
        await call(rt, offset_commit.API_KEY, 8, commit("g", 9))
    # The shard had applied offset 9; it was rebuilt from the log, which has 5.
    assert fetched(rt, "g") == 5
    monkeypatch.undo()
    resp = await call(rt, offset_commit.API_KEY, 8, commit("g", 11))
    assert resp.topics[0].partitions[0].error_code == 0
    assert fetched(rt, "g") == 11
    await flusher.stop()
    logs.close_all()
