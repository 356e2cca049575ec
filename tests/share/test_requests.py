"""ShareFetch and ShareAcknowledge through the API table, in process over the in-memory
engine: sessions and their epochs, the order of checks, piggybacked and standalone
acknowledgements, sharing within a group, release on close and disconnect, long polls,
and acknowledged state surviving a restart (Kafka's ShareFetchAcknowledgeRequestTest,
SharePartitionManagerTest and ShareSessionCacheTest cases)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.sharepartkit import ShareNode, acquired, partitions, values

from coordinator.share.leader import ShareLeaderConfig
from coordinator.share.partition import ACCEPT, GAP, REJECT, RELEASE
from protocol.errors import ErrorCode

G = "g"


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[ShareNode]:
    n = ShareNode(tmp_path / "data")
    yield n
    await n.close()


async def _topic(node: ShareNode, n: int = 10, start_offset: int = 0):  # type: ignore[no-untyped-def]
    info = node.create("t", 1)
    await node.initialize(G, info, start_offset)
    if n:
        await node.produce("t", 0, n)
    return info


async def test_session_lifecycle_epochs_and_piggybacked_acks(node: ShareNode) -> None:
    info = await _topic(node)
    r = await node.fetch(G, "m1", 0, [(info, 0)])
    assert r.error_code == 0 and r.acquisition_lock_timeout_ms == 30000
    assert acquired(r) == [(0, 9, 1)]
    assert values(r)[3] == b"v3"
    p = partitions(r)[0]
    assert p.records and p.current_leader.leader_id == 0 and p.error_code == 0
    # epoch 1: accept 0-4, release 5, reject 6, accept the rest; nothing new to fetch
    acks = [(info, 0, [(0, 4, [ACCEPT]), (5, 5, [RELEASE]), (6, 6, [REJECT]), (7, 9, [ACCEPT])])]
    r = await node.fetch(G, "m1", 1, acks=acks)
    p = partitions(r)[0]
    assert p.acknowledge_error_code == 0
    assert acquired(r) == [(5, 5, 2)]  # the released record is back, delivery count 2
    # epoch 2: the session shares its counter with ShareAcknowledge
    r = await node.acknowledge(G, "m1", 2, [(info, 0, [(5, 5, [ACCEPT])])])
    assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0
    r = await node.fetch(G, "m1", 3)
    assert r.error_code == 0 and r.responses == []  # incremental: nothing to report
    r = await node.fetch(G, "m1", 3)
    assert r.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert r.responses == [] and r.acquisition_lock_timeout_ms == 0


async def test_epoch_errors(node: ShareNode) -> None:
    info = await _topic(node)
    r = await node.fetch(G, "m1", 5, [(info, 0)])
    assert r.error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    r = await node.acknowledge(G, "m1", 1, [(info, 0, [(0, 0, [ACCEPT])])])
    assert r.error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    r = await node.acknowledge(G, "m1", 0, [(info, 0, [(0, 0, [ACCEPT])])])
    assert r.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    r = await node.fetch(G, "m1", 0, acks=[(info, 0, [(0, 0, [ACCEPT])])])
    assert r.error_code == ErrorCode.INVALID_REQUEST
    r = await node.fetch(G, "m1", -1)
    assert r.error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    for member in ("", "x" * 37):
        r = await node.fetch(G, member, 0, [(info, 0)])
        assert r.error_code == ErrorCode.INVALID_REQUEST
    r = await node.fetch(G, "m1", 0, [(info, 0)])
    r = await node.acknowledge(G, "m1", 7, [(info, 0, [(0, 0, [ACCEPT])])])
    assert r.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH


async def test_sharing_within_a_group_and_isolation_between_groups(node: ShareNode) -> None:
    info = await _topic(node, 0)
    await node.initialize("other", info, 0)
    for i in range(4):
        await node.produce("t", 0, 5, start=5 * i)
    a = await node.fetch(G, "a", 0, [(info, 0)], max_records=5, conn=1)
    b = await node.fetch(G, "b", 0, [(info, 0)], max_records=5, conn=2)
    assert acquired(a) == [(0, 4, 1)] and acquired(b) == [(5, 9, 1)]
    # b cannot acknowledge a's records: all or nothing
    r = await node.acknowledge(G, "b", 1, [(info, 0, [(0, 9, [ACCEPT])])], conn=2)
    assert r.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
    o = await node.fetch("other", "a", 0, [(info, 0)], conn=3)
    assert acquired(o) == [(0, 19, 1)]  # another group sees everything


async def test_gap_and_invalid_batches(node: ShareNode) -> None:
    info = await _topic(node)
    await node.fetch(G, "m1", 0, [(info, 0)])
    bad = [
        [(3, 2, [ACCEPT])],
        [(0, 4, [ACCEPT]), (3, 5, [ACCEPT])],
        [(0, 1, [])],
        [(0, 2, [ACCEPT, ACCEPT])],
        [(0, 0, [9])],
        [(0, 0, [4])],  # RENEW needs v2 and IsRenewAck
    ]
    epoch = 1
    for batches in bad:
        r = await node.acknowledge(G, "m1", epoch, [(info, 0, batches)])
        epoch += 1
        assert r.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST, batches
    r = await node.acknowledge(
        G, "m1", epoch, [(info, 0, [(0, 2, [GAP, ACCEPT, REJECT]), (3, 9, [ACCEPT])])]
    )
    assert r.responses[0].partitions[0].error_code == 0
    assert node.coordinator.summary(G, node_topic(info), 0) is not None


def node_topic(info):  # type: ignore[no-untyped-def]
    from coordinator.share.state_shard import topic_id_str

    return topic_id_str(info.topic_id)


async def test_uninitialized_partition_and_unknown_topic(node: ShareNode) -> None:
    info = node.create("t", 1)
    await node.produce("t", 0, 3)
    r = await node.fetch(G, "m1", 0, [(info, 0)])
    assert partitions(r)[0].error_code == ErrorCode.UNKNOWN
    ghost = node.create("ghost", 1)
    node.catalog.topics.pop("ghost")
    node.catalog.by_id.pop(ghost.topic_id)
    r = await node.fetch(G, "m2", 0, [(ghost, 0), (info, 3)])
    errors = {
        (t.topic_id, p.partition_index): p.error_code for t in r.responses for p in t.partitions
    }
    assert errors[(ghost.topic_id, 0)] == ErrorCode.UNKNOWN_TOPIC_ID
    assert errors[(info.topic_id, 3)] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_close_and_disconnect_release_the_members_records(node: ShareNode) -> None:
    info = await _topic(node)
    r = await node.fetch(G, "a", 0, [(info, 0)], max_records=5, conn=1)
    assert acquired(r) == [(0, 9, 1)]
    await node.fetch(G, "b", 0, [(info, 0)], conn=2)
    # a closes with epoch -1, acknowledging 0-4: 5-9 come back with their count
    r = await node.fetch(G, "a", -1, acks=[(info, 0, [(0, 4, [ACCEPT])])], conn=1)
    assert r.error_code == 0 and partitions(r)[0].acknowledge_error_code == 0
    r = await node.fetch(G, "b", 1, conn=2)
    assert acquired(r) == [(5, 9, 2)]
    # b's connection drops: its records come back to a new session at once
    node.requests.connection_closed(2)
    r = await node.fetch(G, "c", 0, [(info, 0)], conn=3)
    assert acquired(r) == [(5, 9, 3)]


async def test_session_cache_full(tmp_path: Path) -> None:
    node = ShareNode(tmp_path / "data", ShareLeaderConfig(max_share_sessions=1))
    try:
        info = await _topic(node)
        assert (await node.fetch(G, "a", 0, [(info, 0)])).error_code == 0
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        r = await node.fetch(G, "b", 0, [(info, 0)], max_wait_ms=200, conn=2)
        assert r.error_code == ErrorCode.SHARE_SESSION_LIMIT_REACHED
        assert loop.time() - t0 >= 0.19  # answered after MaxWaitMs
        # replacing one's own session is allowed
        assert (await node.fetch(G, "a", 0, [(info, 0)])).error_code == 0
    finally:
        await node.close()


async def test_long_poll_woken_by_new_records(node: ShareNode) -> None:
    info = await _topic(node, 0)
    fetch = asyncio.ensure_future(node.fetch(G, "m1", 0, [(info, 0)], max_wait_ms=10000))
    await asyncio.sleep(0.05)
    assert not fetch.done()
    await node.produce("t", 0, 2)
    r = await asyncio.wait_for(fetch, 5)
    assert acquired(r) == [(0, 1, 1)]


async def test_fetch_waiting_on_a_full_lock_window_is_woken_by_an_acknowledgement(
    node: ShareNode,
) -> None:
    # Three consumers sharing one partition (bench_share's 3 x 1): two hold the whole
    # record-lock window, the third's fetch waits; the acknowledgement that moves the start
    # offset frees the window and the waiting fetch acquires at once, not at MaxWaitMs.
    info = await _topic(node, 0)
    for i in range(3):
        await node.produce("t", 0, 50, start=50 * i)
    await node.group_configs.set(G, {"share.partition.max.record.locks": "100"})
    assert acquired(await node.fetch(G, "a", 0, [(info, 0)], max_records=50)) == [(0, 49, 1)]
    r = await node.fetch(G, "b", 0, [(info, 0)], max_records=50, conn=2)
    assert acquired(r) == [(50, 99, 1)]
    waiting = asyncio.ensure_future(
        node.fetch(G, "c", 0, [(info, 0)], max_records=50, max_wait_ms=60000, conn=3)
    )
    # b's records are above the start offset: accepting them leaves the window full
    r = await node.acknowledge(G, "b", 1, [(info, 0, [(50, 99, [ACCEPT])])], conn=2)
    assert r.responses[0].partitions[0].error_code == 0
    for _ in range(20):  # let the woken fetch look again
        await asyncio.sleep(0)
    assert not waiting.done()
    # a's acceptance moves the start offset past 99: c gets the next batch
    r = await node.acknowledge(G, "a", 1, [(info, 0, [(0, 49, [ACCEPT])])])
    assert r.responses[0].partitions[0].error_code == 0
    assert acquired(await asyncio.wait_for(waiting, 10)) == [(100, 149, 1)]


async def test_lock_timeout_redelivers(tmp_path: Path) -> None:
    node = ShareNode(tmp_path / "data", ShareLeaderConfig(record_lock_duration_ms=100))
    try:
        info = await _topic(node, 3)
        assert acquired(await node.fetch(G, "a", 0, [(info, 0)])) == [(0, 2, 1)]
        r = await node.fetch(G, "b", 0, [(info, 0)], max_wait_ms=5000, conn=2)
        assert acquired(r) == [(0, 2, 2)]  # woken by the lock timeout
        r = await node.acknowledge(G, "a", 1, [(info, 0, [(0, 2, [ACCEPT])])])
        assert r.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
    finally:
        await node.close()


async def test_acknowledged_state_survives_a_restart(node: ShareNode) -> None:
    info = await _topic(node, 100)
    r = await node.fetch(G, "a", 0, [(info, 0)])
    assert acquired(r) == [(0, 99, 1)]
    r = await node.acknowledge(G, "a", 1, [(info, 0, [(0, 49, [ACCEPT]), (50, 52, [RELEASE])])])
    assert r.responses[0].partitions[0].error_code == 0
    await node.restart()
    r = await node.fetch(G, "b", 0, [(info, 0)])
    # 0-49 acknowledged, 50-52 released (count 1 persisted, 2 now), 53-99 never written
    assert acquired(r) == [(50, 52, 2), (53, 99, 1)]


async def test_auto_offset_reset_latest_by_default(node: ShareNode) -> None:
    info = node.create("t", 1)
    await node.initialize(G, info)  # start offset -1: share.auto.offset.reset decides
    await node.produce("t", 0, 5)
    r = await node.fetch(G, "a", 0, [(info, 0)])
    assert acquired(r) == []
    await node.produce("t", 0, 2, start=5)
    r = await node.fetch(G, "a", 1)
    assert acquired(r) == [(5, 6, 1)]
    node.group_configs.configs["e"] = {"share.auto.offset.reset": "earliest"}
    await node.initialize("e", info)
    r = await node.fetch("e", "a", 0, [(info, 0)], conn=2)
    assert acquired(r) == [(0, 6, 1)]


async def test_describe_share_group_offsets(node: ShareNode) -> None:
    from protocol.messages import describe_share_group_offsets as dsgo

    info = await _topic(node, 10)
    await node.fetch(G, "a", 0, [(info, 0)])
    await node.acknowledge(G, "a", 1, [(info, 0, [(0, 4, [ACCEPT]), (6, 6, [REJECT])])])
    await node.acknowledge(G, "a", 2, [(info, 0, [(5, 5, [ACCEPT])])])
    req = dsgo.Request(
        groups=[
            dsgo.DescribeShareGroupOffsetsRequestGroup(
                group_id=G,
                topics=[
                    dsgo.DescribeShareGroupOffsetsRequestTopic(topic_name="t", partitions=[0]),
                    dsgo.DescribeShareGroupOffsetsRequestTopic(topic_name="nope", partitions=[0]),
                ],
            ),
            dsgo.DescribeShareGroupOffsetsRequestGroup(group_id="new", topics=None),
        ]
    )
    r = await node.call(dsgo.API_KEY, 1, req)
    t, nope = r.groups[0].topics
    p = t.partitions[0]
    # The persisted start offset lags one write (Kafka's): 5 after the second write,
    # which carried the start from before its own effect; 7 terminal offsets past it.
    assert (t.topic_id, p.start_offset, p.leader_epoch, p.error_code) == (info.topic_id, 5, 0, 0)
    assert p.lag == 10 - 5 - 1
    assert nope.topic_id == b"\x00" * 16 and nope.partitions[0].start_offset == -1
    assert nope.partitions[0].error_code == 0
    assert r.groups[1].topics == [] and r.groups[1].error_code == 0
    node.initialized["new"] = {info.topic_id: ("t", frozenset({0}))}
    await node.initialize("new", info)
    r = await node.call(dsgo.API_KEY, 1, req)
    (t,) = r.groups[1].topics
    assert (t.topic_name, t.partitions[0].start_offset, t.partitions[0].lag) == ("t", -1, -1)


async def test_share_events_for_metrics(node: ShareNode) -> None:
    counts: dict[str, int] = {}
    node.leader.on_event.append(
        lambda _k, what, n: counts.__setitem__(what, counts.get(what, 0) + n)
    )
    info = await _topic(node, 10)
    await node.fetch(G, "a", 0, [(info, 0)])
    await node.acknowledge(
        G, "a", 1, [(info, 0, [(0, 3, [ACCEPT]), (4, 4, [REJECT]), (5, 5, [RELEASE])])]
    )
    node.requests.connection_closed(1)
    assert counts == {
        "acquired": 10,
        "acknowledged": 4,
        "archived": 1,
        "released": 1,
        "member_released": 4,
    }


async def test_partitions_rotate_by_session_epoch(node: ShareNode) -> None:
    # Kafka's PartitionRotateStrategy: MaxRecords 1 goes to partition epoch % 2 first.
    info = node.create("t", 2)
    await node.initialize(G, info, 0)
    for i in range(3):
        for p in (0, 1):
            await node.produce("t", p, 1, start=i)
    firsts = []
    for epoch in range(4):
        parts = [(info, 0), (info, 1)] if epoch == 0 else None
        r = await node.fetch(G, "m1", epoch, parts, max_records=1)
        got = {p: acquired(r) for p, pd in partitions(r).items() if pd.acquired_records}
        assert len(got) == 1, got
        firsts.append(next(iter(got)))
    assert firsts == [0, 1, 0, 1]


async def test_min_bytes_waits_for_enough_records_or_max_wait(node: ShareNode) -> None:
    # Kafka's DelayedShareFetch: below MinBytes nothing is acquired before MaxWaitMs ...
    info = await _topic(node, 1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    r = await node.fetch(G, "m1", 0, [(info, 0)], max_wait_ms=300, min_bytes=4000)
    assert loop.time() - started >= 0.29
    assert acquired(r) == [(0, 0, 1)]  # ... then what there is
    # ... and an append reaching MinBytes completes the fetch at once.
    waiting = asyncio.ensure_future(node.fetch(G, "m1", 1, max_wait_ms=30000, min_bytes=4000))
    await node.produce("t", 0, 5, start=1)
    assert not waiting.done()  # 5 small records: still below MinBytes
    await node.produce("t", 0, 400, start=6)
    r = await asyncio.wait_for(waiting, 10)
    assert acquired(r) == [(1, 5, 1), (6, 405, 1)] or acquired(r) == [(1, 405, 1)]


async def test_group_record_lock_limit_and_renew_switch(node: ShareNode) -> None:
    # share.partition.max.record.locks and share.renew.acknowledge.enable are read for
    # each fetch and acknowledgement, as Kafka's SharePartition reads its config provider
    info = await _topic(node, 0)
    for i in range(3):
        await node.produce("t", 0, 60, start=60 * i)
    await node.group_configs.set(G, {"share.partition.max.record.locks": "100"})
    r = await node.fetch(G, "m", 0, [(info, 0)], max_records=1000)
    # whole batches while the window (start offset to the next offset) has room
    assert acquired(r) == [(0, 119, 1)]
    await node.group_configs.set(
        G, {"share.partition.max.record.locks": "100", "share.renew.acknowledge.enable": "false"}
    )
    assert acquired(await node.fetch(G, "m", 1, max_records=1000)) == []
    r = await node.acknowledge(G, "m", 2, [(info, 0, [(0, 9, [4])])], version=2, is_renew_ack=True)
    p = r.responses[0].partitions[0]
    assert p.error_code == ErrorCode.INVALID_RECORD_STATE
    assert p.error_message == "Renewing acquisition locks is not enabled for the group."
    await node.group_configs.set(G, {})  # the broker's 2000 locks, renewals allowed
    r = await node.acknowledge(G, "m", 3, [(info, 0, [(0, 9, [4])])], version=2, is_renew_ack=True)
    assert r.responses[0].partitions[0].error_code == 0
    assert acquired(await node.fetch(G, "m", 4, max_records=1000)) == [(120, 179, 1)]
