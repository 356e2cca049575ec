"""A group runtime on a real log, and requests sent to it through the API table.

How this works: the runtime tests check the runtime's contract with an engine (replies
after durability, replay, failed appends), so they build a ``GroupRuntime`` over the
in-memory engine (``storage/memory.py``) or the local engine in a test's directory, load
it, and send requests through ``coordinator.apis.handlers`` as the server does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.apis import Parts, handlers
from coordinator.group.shard import GroupConfig, GroupShard
from coordinator.runtime import GroupRuntime
from coordinator.server.handler import ClientInfo, Deferred
from protocol.framing import RequestHeader
from protocol.messages import offset_commit
from storage.interface import Durability, LogConfig, Logs
from storage.local.durability import Flusher
from storage.local.manager import LogManager
from storage.memory import MemoryDurability, MemoryLogs

CLIENT = ClientInfo("test", "127.0.0.1", 1, 1)
PARTITIONS = 4
OFFSETS_LOG = LogConfig(cleanup_policy="compact", journaled=True)


async def started(
    logs: Logs, flusher: Durability, log_config: LogConfig = OFFSETS_LOG, **shard: Any
) -> GroupRuntime:
    """A loaded runtime of ``PARTITIONS`` offsets partitions on ``logs``."""
    rt = GroupRuntime(
        GroupShard(GroupConfig(offsets_topic_num_partitions=PARTITIONS), **shard),
        logs,
        flusher,
        num_partitions=PARTITIONS,
        log_config=log_config,
    )
    await rt.load()
    return rt


async def memory_runtime(
    logs: MemoryLogs | None = None,
) -> tuple[GroupRuntime, MemoryDurability, MemoryLogs]:
    """A runtime on the in-memory engine (on ``logs``, e.g. reopened after a crash)."""
    flusher = MemoryDurability()
    logs = logs or MemoryLogs()
    return await started(logs, flusher), flusher, logs


async def disk_runtime(tmp_path: Path) -> tuple[GroupRuntime, Flusher, LogManager]:
    """A runtime on the local engine in ``tmp_path`` (real segment files, real fsyncs)."""
    flusher = Flusher()
    logs = LogManager(tmp_path, flusher=flusher)
    return await started(logs, flusher), flusher, logs


async def call(rt: GroupRuntime, api_key: int, version: int, body: Any) -> Any:
    """``body`` through the API table as the server sends it; a deferred reply awaited."""
    result = handlers(Parts(groups=rt))[api_key](
        RequestHeader(api_key, version, 1, "test"), body, CLIENT
    )
    return await result if isinstance(result, Deferred) else result


def commit(group: str, offset: int) -> offset_commit.OffsetCommitRequest:
    """A simple (generation -1) commit of ``offset`` for t-0."""
    return offset_commit.OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            offset_commit.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    offset_commit.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset
                    )
                ],
            )
        ],
    )
