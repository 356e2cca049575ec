"""Checks Kafka makes in its API layer (KafkaApis) before the group coordinator sees a request."""

from __future__ import annotations

from typing import Any

from coordinator.apis import Parts, handlers
from coordinator.group.shard import GroupConfig, GroupShard
from coordinator.runtime import GroupRuntime
from coordinator.server.handler import ClientInfo, Deferred
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import sync_group
from storage.interface import LogConfig
from storage.memory import MemoryDurability, MemoryLogs

CLIENT = ClientInfo("test", "127.0.0.1", 1, 1)


async def runtime() -> GroupRuntime:
    rt = GroupRuntime(
        GroupShard(GroupConfig(offsets_topic_num_partitions=1)),
        MemoryLogs(),
        MemoryDurability(),
        num_partitions=1,
        log_config=LogConfig(cleanup_policy="compact", journaled=True),
    )
    await rt.load()
    return rt


async def call(rt: GroupRuntime, api_key: int, version: int, body: Any) -> Any:
    result = handlers(Parts(groups=rt))[api_key](
        RequestHeader(api_key, version, 1, "test"), body, CLIENT
    )
    return await result if isinstance(result, Deferred) else result


def _sync(protocol_type: str | None, protocol_name: str | None) -> sync_group.SyncGroupRequest:
    return sync_group.SyncGroupRequest(
        group_id="g",
        generation_id=1,
        member_id="m",
        protocol_type=protocol_type,
        protocol_name=protocol_name,
    )


async def test_sync_group_v5_without_protocol_type_or_name_is_inconsistent() -> None:
    # KafkaApis.handleSyncGroupRequest: from v5 both fields are mandatory; answered before
    # the coordinator looks at the group (an unknown one here).
    rt = await runtime()
    for ptype, pname in ((None, None), ("consumer", None), (None, "range")):
        resp = await call(rt, sync_group.API_KEY, 5, _sync(ptype, pname))
        assert resp.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL, (ptype, pname)
        assert resp.protocol_type is None and resp.protocol_name is None
    # With both present, or before v5, the coordinator answers: the group is unknown.
    resp = await call(rt, sync_group.API_KEY, 5, _sync("consumer", "range"))
    assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    resp = await call(rt, sync_group.API_KEY, 4, _sync(None, None))
    assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
