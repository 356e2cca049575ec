"""The runtime's timers: one wake-up on the loop for the earliest deadline of the shard's table."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from coordinator.apis import Parts, handlers
from coordinator.group import ClassicGroupState
from coordinator.group.shard import GroupConfig, GroupShard
from coordinator.runtime import GroupRuntime
from coordinator.server.handler import ClientInfo, Deferred
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import heartbeat, join_group, offset_commit, sync_group
from protocol.messages.join_group import JoinGroupRequest, JoinGroupRequestProtocol
from protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from storage.interface import LogConfig
from storage.memory import MemoryDurability, MemoryLogs
from storage.records import (
    OFFSETS_TOPIC,
    MemberMetadata,
    encode_group_metadata_key,
    encode_group_metadata_value,
    partition_for,
)

CLIENT = ClientInfo("test", "127.0.0.1", 1, 1)
PARTITIONS = 2
SESSION_MS = 300
SPIN_SESSION_MS = 3000  # long enough for an fsync on a busy machine


LOG_CONFIG = LogConfig(cleanup_policy="compact", journaled=True)


async def runtime(
    *,
    records: list[tuple[bytes, bytes]] = (),
    log_config: LogConfig = LOG_CONFIG,
    **config: int,
) -> tuple[GroupRuntime, MemoryDurability, MemoryLogs]:
    """A loaded runtime on the in-memory engine; ``records`` are written to group "g"'s
    offsets partition first."""
    flusher = MemoryDurability()
    logs = MemoryLogs()
    if records:
        plog = logs.get_or_create(OFFSETS_TOPIC, partition_for("g", PARTITIONS), log_config)
        plog.append_records(list(records), timestamp_ms=0)
    settings = {
        "offsets_topic_num_partitions": PARTITIONS,
        "group_min_session_timeout_ms": 10,
        "group_initial_rebalance_delay_ms": 0,
    }
    rt = GroupRuntime(
        GroupShard(GroupConfig(**(settings | config))),
        logs,
        flusher,
        num_partitions=PARTITIONS,
        log_config=log_config,
    )
    await rt.load()
    return rt, flusher, logs


async def call(rt: GroupRuntime, api_key: int, version: int, body: Any) -> Any:
    result = handlers(Parts(groups=rt))[api_key](
        RequestHeader(api_key, version, 1, "test"), body, CLIENT
    )
    return await result if isinstance(result, Deferred) else result


async def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


async def join(
    rt: GroupRuntime, member_id: str = "", *, instance: str | None = None, rebalance: int = 0
) -> join_group.Response:
    req = JoinGroupRequest(
        group_id="g",
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=rebalance,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol("range", b"")],
    )
    # v5 carries the instance id; v3 joins without the KIP-394 member-id round trip.
    resp = await call(rt, join_group.API_KEY, 5 if instance is not None else 3, req)
    assert resp.error_code == ErrorCode.NO_ERROR, resp
    return resp  # type: ignore[no-any-return]


async def sync(rt: GroupRuntime, member_id: str, generation: int, leader: bool) -> None:
    req = sync_group.Request(
        group_id="g",
        generation_id=generation,
        member_id=member_id,
        assignments=[sync_group.SyncGroupRequestAssignment(member_id, b"a")] if leader else [],
    )
    resp = await call(rt, sync_group.API_KEY, 3, req)
    assert resp.error_code == ErrorCode.NO_ERROR, resp


def state(rt: GroupRuntime) -> ClassicGroupState | None:
    group = rt.shard.groups.get("g")
    return None if group is None else group.state


async def test_session_expires_on_the_loop_and_heartbeats_keep_the_member() -> None:
    rt, flusher, logs = await runtime()
    # The join is answered by a timer: the initial rebalance delay (0 ms) ending.
    r = await join(rt, rebalance=SESSION_MS)
    member = r.member_id
    await sync(rt, member, r.generation_id, leader=True)
    assert state(rt) is ClassicGroupState.STABLE
    beat = heartbeat.Request(group_id="g", generation_id=r.generation_id, member_id=member)
    started = last = time.monotonic()
    while last - started < 3 * SESSION_MS / 1000:  # beats at a client's pace, past the session
        assert (await call(rt, heartbeat.API_KEY, 4, beat)).error_code == ErrorCode.NO_ERROR
        last = time.monotonic()
        await asyncio.sleep(SESSION_MS / 4000)
    assert member in rt.shard.groups["g"].members
    await wait_for(lambda: state(rt) is ClassicGroupState.EMPTY)
    assert time.monotonic() - last >= SESSION_MS / 1000 * 0.9  # not before its session ended
    assert rt.shard.rebalances["session_timeout"] == 1
    rt.close()
    await flusher.stop()
    logs.close_all()


async def test_a_timer_that_re_arms_for_now_does_not_starve_the_loop() -> None:
    """A join phase that waits only for static members that do not rejoin, with a rebalance
    timeout of 0, re-arms its deadline for "now" until their sessions end (Kafka's
    behaviour); requests are served meanwhile, and the sessions do end."""
    members = [
        MemberMetadata(
            member_id=f"{i}-1",
            group_instance_id=i,
            client_id="c",
            client_host="/127.0.0.1",
            rebalance_timeout=0,
            session_timeout=SPIN_SESSION_MS,
            subscription=b"",
            assignment=b"",
        )
        for i in ("a", "b")
    ]
    value = encode_group_metadata_value(
        protocol_type="consumer",
        generation=1,
        protocol="range",
        leader="a-1",
        current_state_timestamp=0,
        members=members,
    )
    # Loaded over group.max.size, the group rebalances at once; neither member rejoins.
    # The offsets log does not fsync here: the commit's answer then waits only for the loop
    # to turn (what this test is about), not for a disk that a busy machine can hold for
    # longer than the members' sessions.
    rt, flusher, logs = await runtime(
        records=[(encode_group_metadata_key("g"), value)],
        log_config=LogConfig(cleanup_policy="compact", flush_policy="none"),
        group_max_size=1,
    )
    assert state(rt) is ClassicGroupState.PREPARING_REBALANCE
    await asyncio.wait_for(asyncio.sleep(0.01), 5)  # the loop turns
    commit = OffsetCommitRequest(
        group_id="other",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            OffsetCommitRequestTopic(
                name="t",
                partitions=[OffsetCommitRequestPartition(partition_index=0, committed_offset=1)],
            )
        ],
    )
    resp = await asyncio.wait_for(call(rt, offset_commit.API_KEY, 8, commit), 5)
    assert resp.topics[0].partitions[0].error_code == ErrorCode.NO_ERROR
    assert state(rt) is ClassicGroupState.PREPARING_REBALANCE  # served while it waits
    await wait_for(lambda: state(rt) is ClassicGroupState.EMPTY)  # both sessions ended
    rt.close()
    await flusher.stop()
    logs.close_all()
