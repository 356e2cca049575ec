"""The group runtime around the pure shard: durability before replies, and failed appends.

Most tests run on the in-memory engine (storage/memory.py): what they check is the
runtime's contract with any engine. The ones about the disk itself (a corrupt segment file,
the Flusher's real fsync rounds) run on the local engine in ``tmp_path``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from coordinator.apis import Parts, handlers
from coordinator.group.shard import GroupConfig, GroupShard
from coordinator.runtime import GroupRuntime
from coordinator.server.handler import Deferred
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import offset_commit, offset_fetch
from storage.interface import LogConfig
from storage.memory import MemoryDurability, MemoryLogs
from storage.record_batch import iter_record_tuples
from tests.support.runtimekit import (
    CLIENT,
    PARTITIONS,
    call,
    commit,
    disk_runtime,
    memory_runtime,
    started,
)


def fetched(rt: GroupRuntime, group: str) -> int:
    req = offset_fetch.Request(
        groups=[offset_fetch.OffsetFetchRequestGroup(group_id=group, topics=None)]
    )
    resp = handlers(Parts(groups=rt))[offset_fetch.API_KEY](
        RequestHeader(offset_fetch.API_KEY, 8, 1, "t"), req, CLIENT
    )
    parts = [p for t in resp.groups[0].topics for p in t.partitions]
    return parts[0].committed_offset if parts else -1


async def test_commit_reply_waits_for_the_log_and_is_replayable() -> None:
    rt, _, logs = await memory_runtime()
    resp = await call(rt, offset_commit.API_KEY, 8, commit("g", 5))
    assert resp.topics[0].partitions[0].error_code == 0
    plog = rt.partitions[rt.shard.partition_of("g")]
    assert plog.durable_end == plog.log_end_offset > 0  # durable before the reply left
    rt2, _, _ = await memory_runtime(logs.reopen())  # a crash keeps what is durable
    assert fetched(rt2, "g") == 5


async def test_a_reply_waits_until_its_round_made_the_commit_durable() -> None:
    flusher = MemoryDurability(auto=False)
    rt = await started(MemoryLogs(), flusher)
    reply = asyncio.ensure_future(call(rt, offset_commit.API_KEY, 8, commit("g", 5)))
    for _ in range(3):
        await asyncio.sleep(0)
    plog = rt.partitions[rt.shard.partition_of("g")]
    assert not reply.done() and plog.log_end_offset == 1 and plog.durable_end == 0
    flusher.run_round()
    resp = await reply
    assert resp.topics[0].partitions[0].error_code == 0 and plog.durable_end == 1


def groups_on_distinct_partitions(rt: GroupRuntime, n: int) -> list[str]:
    found: dict[int, str] = {}
    i = 0
    while len(found) < n:
        g = f"g{i}"
        found.setdefault(rt.shard.partition_of(g), g)
        i += 1
    return list(found.values())


def fetch_error(rt: GroupRuntime, group: str) -> int:
    req = offset_fetch.Request(
        groups=[offset_fetch.OffsetFetchRequestGroup(group_id=group, topics=None)]
    )
    resp = handlers(Parts(groups=rt))[offset_fetch.API_KEY](
        RequestHeader(offset_fetch.API_KEY, 8, 1, "t"), req, CLIENT
    )
    return int(resp.groups[0].error_code)


async def test_failed_append_answers_not_coordinator_and_rebuilds_from_the_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rt, flusher, logs = await memory_runtime()
    await call(rt, offset_commit.API_KEY, 8, commit("g", 5))
    plog = rt.partitions[rt.shard.partition_of("g")]

    def broken(*a: object, **k: object) -> tuple[int, int]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plog, "append_records", broken)
    resp = await call(rt, offset_commit.API_KEY, 8, commit("g", 9))
    # Kafka's coordinator answers a storage error with NOT_COORDINATOR; the connection stays.
    assert resp.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
    # The shard had applied offset 9; it was rebuilt from the log, which has 5.
    assert fetched(rt, "g") == 5
    monkeypatch.undo()
    resp = await call(rt, offset_commit.API_KEY, 8, commit("g", 11))
    assert resp.topics[0].partitions[0].error_code == 0
    assert fetched(rt, "g") == 11
    await flusher.stop()
    logs.close_all()


async def test_failed_append_fails_only_replies_of_that_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rt, flusher, logs = await memory_runtime()
    bad, good = groups_on_distinct_partitions(rt, 2)
    plog = rt.partitions[rt.shard.partition_of(bad)]

    def broken(*a: object, **k: object) -> tuple[int, int]:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(plog, "append_records", broken)
    # Both commits are applied in the same loop turn and written by one _write_unwritten.
    r_bad, r_good = await asyncio.gather(
        call(rt, offset_commit.API_KEY, 8, commit(bad, 3)),
        call(rt, offset_commit.API_KEY, 8, commit(good, 4)),
    )
    assert r_bad.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
    assert r_good.topics[0].partitions[0].error_code == 0
    assert fetched(rt, bad) == -1
    assert fetched(rt, good) == 4
    await flusher.stop()
    logs.close_all()


async def test_failed_fsync_answers_not_coordinator_and_keeps_only_what_the_log_holds() -> None:
    rt, flusher, logs = await memory_runtime()
    await call(rt, offset_commit.API_KEY, 8, commit("g", 5))
    flusher.failing = OSError(5, "Input/output error")
    resp = await call(rt, offset_commit.API_KEY, 8, commit("g", 9))
    assert resp.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
    flusher.failing = None
    # Whatever the failed fsync left in the log, the shard holds exactly that.
    plog = rt.partitions[rt.shard.partition_of("g")]
    shadow = GroupShard(GroupConfig(offsets_topic_num_partitions=PARTITIONS))
    shadow.mark_all_loaded(0)
    for _h, batch in plog.iter_batches(0):
        for _o, _t, key, value in iter_record_tuples(batch):
            assert key is not None
            shadow.replay(rt.shard.partition_of("g"), key, value)
    assert fetched(rt, "g") == shadow.offsets["g"][("t", 0)].offset
    resp = await call(rt, offset_commit.API_KEY, 8, commit("g", 11))
    assert resp.topics[0].partitions[0].error_code == 0
    assert fetched(rt, "g") == 11
    await flusher.stop()
    logs.close_all()


async def test_unencodable_group_id_is_an_error_code_and_leaves_no_offset() -> None:
    rt, flusher, logs = await memory_runtime()
    group = "x" * 40000
    resp = await call(rt, offset_commit.API_KEY, 8, commit(group, 5))
    assert resp.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN
    assert fetched(rt, group) == -1
    await flusher.stop()
    logs.close_all()


async def test_commit_to_a_topic_that_does_not_exist() -> None:
    rt = await started(
        MemoryLogs(),
        MemoryDurability(),
        LogConfig(cleanup_policy="compact"),
        topic_partitions={"u": 1}.get,
    )
    resp = await call(rt, offset_commit.API_KEY, 8, commit("g", 5))  # topic "t"
    assert resp.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert fetched(rt, "g") == -1


def flip_byte_in_first_batch(plog_dir: Path) -> Path:
    seg = sorted(plog_dir.glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    data[70] ^= 0x01  # inside the first batch's records, past its 61-byte header
    seg.write_bytes(bytes(data))
    return seg


async def test_a_corrupt_offsets_partition_fails_alone(tmp_path: Path) -> None:
    rt, flusher, logs = await disk_runtime(tmp_path)
    groups = groups_on_distinct_partitions(rt, PARTITIONS)
    for n in range(3):  # batches after the damaged one: damage, not a torn tail
        for i, g in enumerate(groups):
            await call(rt, offset_commit.API_KEY, 8, commit(g, 98 + n + i))
    damaged = rt.shard.partition_of(groups[1])
    await flusher.stop()
    logs.close_all()
    flip_byte_in_first_batch(tmp_path / f"__consumer_offsets-{damaged}")

    rt2, flusher2, logs2 = await disk_runtime(tmp_path)  # load() returns: every partition tried
    assert rt2.loaded.is_set()
    for i, g in enumerate(groups):
        if rt2.shard.partition_of(g) == damaged:
            assert fetch_error(rt2, g) == ErrorCode.NOT_COORDINATOR
        else:
            assert fetched(rt2, g) == 100 + i
    reason = rt2.partitions[damaged].damaged
    assert reason is not None and "CRC" in reason and ".log" in reason
    assert all(rt2.partitions[p].damaged is None for p in range(PARTITIONS) if p != damaged)
    resp = await call(rt2, offset_commit.API_KEY, 8, commit(groups[1], 7))
    assert resp.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
    await flusher2.stop()
    logs2.close_all()


async def test_a_turn_over_max_message_bytes_is_split_between_results() -> None:
    """Many commits landing in one loop turn are written as several batches, each under
    max.message.bytes and each holding whole requests; every commit succeeds (before the
    split, the turn's one oversized batch was refused and every request failed)."""
    rt, flusher, logs = await memory_runtime()
    gid = "big"
    plog = rt.partitions[rt.shard.partition_of(gid)]
    limit = plog.config.max_message_bytes
    metadata = "m" * 4000  # ~4 KB per record: 400 commits make ~1.6 MB in one turn
    requests = []
    for i in range(400):
        req = commit(gid, i)
        req.topics[0].name = f"t{i}"
        req.topics[0].partitions[0].committed_metadata = metadata
        requests.append(call(rt, offset_commit.API_KEY, 8, req))
    before = plog.log_end_offset
    responses = await asyncio.gather(*requests)
    assert all(r.topics[0].partitions[0].error_code == 0 for r in responses)
    assert plog.log_end_offset - before == 400
    sizes = [len(batch) for _, batch in plog.iter_batches(before)]
    assert len(sizes) >= 2 and max(sizes) <= limit
    await flusher.stop()
    logs.close_all()


async def test_commits_of_the_turns_during_an_fsync_are_appended_once_before_the_next_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt, flusher, logs = await disk_runtime(tmp_path)
    [group] = groups_on_distinct_partitions(rt, 1)
    plog = rt.partitions[rt.shard.partition_of(group)]
    gate = asyncio.Event()  # the journal's fdatasync blocks in its thread until set
    loop = asyncio.get_running_loop()
    real = os.fdatasync

    def slow(fd: int) -> None:
        asyncio.run_coroutine_threadsafe(gate.wait(), loop).result(10)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow)
    handler = handlers(Parts(groups=rt))[offset_commit.API_KEY]
    header = RequestHeader(offset_commit.API_KEY, 8, 1, "test")
    first = handler(header, commit(group, 1), CLIENT)
    await asyncio.sleep(0)
    async with asyncio.timeout(5):
        while not flusher.in_round:  # the first commit's round is in flight
            await asyncio.sleep(0.001)
    appends: list[int] = []
    real_append = plog.append_records

    def counted(records: Any, *a: Any, **k: Any) -> tuple[int, int]:
        appends.append(len(records))
        return real_append(records, *a, **k)

    monkeypatch.setattr(plog, "append_records", counted)
    later = []
    for offset in range(2, 7):  # five loop turns during the round
        later.append(handler(header, commit(group, offset), CLIENT))
        await asyncio.sleep(0)
    assert appends == []  # nothing appended while the round is in flight
    assert not any(d.future.done() for d in [first, *later])
    gate.set()
    answers = [await d for d in [first, *later]]
    assert all(a.topics[0].partitions[0].error_code == 0 for a in answers)
    assert appends == [5]  # the five turns: one batch, appended as the next round began
    assert plog.durable_end == plog.log_end_offset == 6
    assert fetched(rt, group) == 6
    await flusher.stop()
    logs.close_all()


async def test_flush_policy_none_appends_at_the_end_of_each_turn() -> None:
    flusher = MemoryDurability()
    logs = MemoryLogs()
    rt = await started(logs, flusher, LogConfig(cleanup_policy="compact", flush_policy="none"))
    assert not rt.gather_during_rounds
    resp = await call(rt, offset_commit.API_KEY, 8, commit("g", 3))
    assert resp.topics[0].partitions[0].error_code == 0
    plog = rt.partitions[rt.shard.partition_of("g")]
    assert plog.log_end_offset == 1 and plog.recovery_point == 0  # answered without fsync
    await flusher.stop()
    logs.close_all()


async def test_offsets_batches_carry_the_partitions_leader_epoch() -> None:
    """Kafka's coordinator appends to __consumer_offsets as its leader, which stamps the
    leader epoch into each batch; tools reading the topic (kminion with franz-go) see 0
    on a single node, and in cluster mode the epoch of the lease the node holds."""
    from storage.record_batch import iter_batches

    rt, flusher, logs = await memory_runtime()
    await call(rt, offset_commit.API_KEY, 8, commit("g", 5))
    p = rt.shard.partition_of("g")
    plog = rt.partitions[p]
    first_end = plog.log_end_offset
    # The partition's lease moves away and back at epoch 7 (cluster mode's hand-over).
    assert rt.release(p) is plog
    await rt.acquire(p, plog, 7)
    await call(rt, offset_commit.API_KEY, 8, commit("g", 6))
    data = plog.read(0, 1 << 20)
    epochs = [
        (h.base_offset < first_end, h.partition_leader_epoch) for h, _, _ in iter_batches(data)
    ]
    assert epochs == [(True, 0), (False, 7)]
    assert fetched(rt, "g") == 6
    await flusher.stop()
    logs.close_all()


def fetch_now(rt: GroupRuntime, group: str) -> Any:
    """An OffsetFetch v8 of ``group``: its reply, or the Deferred it waits on."""
    req = offset_fetch.Request(
        groups=[offset_fetch.OffsetFetchRequestGroup(group_id=group, topics=None)]
    )
    return handlers(Parts(groups=rt))[offset_fetch.API_KEY](
        RequestHeader(offset_fetch.API_KEY, 8, 1, "t"), req, CLIENT
    )


async def test_a_fetch_never_sees_a_commit_that_is_not_durable_yet() -> None:
    # Found by the Jepsen harness (a coordinator paused past its lease): a fetch answered
    # from memory showed a commit whose append then failed, and later fetches went back.
    flusher = MemoryDurability(auto=False)
    rt = await started(MemoryLogs(), flusher)
    first = asyncio.ensure_future(call(rt, offset_commit.API_KEY, 8, commit("g", 5)))
    for _ in range(3):
        await asyncio.sleep(0)
    flusher.run_round()
    await first
    doomed = asyncio.ensure_future(call(rt, offset_commit.API_KEY, 8, commit("g", 9)))
    for _ in range(3):
        await asyncio.sleep(0)
    reply = fetch_now(rt, "g")
    assert isinstance(reply, Deferred)  # it waits for the commit before it
    flusher.failing = OSError(5, "Input/output error")
    flusher.run_round()
    assert (await doomed).topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
    group = (await reply).groups[0]
    offsets = [p.committed_offset for t in group.topics for p in t.partitions]
    assert group.error_code == ErrorCode.NOT_COORDINATOR or offsets == [5]
    flusher.failing = None
    assert fetched(rt, "g") == 5


async def test_a_fetch_during_a_commit_answers_once_the_commit_is_durable() -> None:
    flusher = MemoryDurability(auto=False)
    rt = await started(MemoryLogs(), flusher)
    pending = asyncio.ensure_future(call(rt, offset_commit.API_KEY, 8, commit("g", 9)))
    for _ in range(3):
        await asyncio.sleep(0)
    reply = fetch_now(rt, "g")
    assert isinstance(reply, Deferred)
    flusher.run_round()
    assert (await pending).topics[0].partitions[0].error_code == 0
    group = (await reply).groups[0]
    assert [p.committed_offset for t in group.topics for p in t.partitions] == [9]
    assert not isinstance(fetch_now(rt, "g"), Deferred)  # nothing in flight: at once
