"""Transactional offsets through the group runtime and a real log: TxnOffsetCommit's
transactional batch and the marker's control batch are durable before their answers, and
the log read back (the runtime's own replay, fast path included) rebuilds the same
committed and pending offsets, on the in-memory engine and on disk.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from coordinator.apis import Parts, handlers
from coordinator.group.shard import GroupConfig, GroupShard
from coordinator.runtime import GroupRuntime
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import offset_commit, offset_delete, offset_fetch, txn_offset_commit
from protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from storage.interface import LogConfig
from storage.local.cleaner import LogCleaner
from storage.local.durability import Flusher
from storage.local.manager import LogManager
from storage.memory import MemoryDurability, MemoryLogs
from storage.record_batch import ATTR_CONTROL, ATTR_TRANSACTIONAL
from tests.support.runtimekit import CLIENT, call, commit, disk_runtime, memory_runtime, started


def fetched(rt: GroupRuntime, group: str) -> int:
    """The committed offset of t-0 (v7, not require_stable)."""
    req = offset_fetch.Request(
        group_id=group, topics=[offset_fetch.OffsetFetchRequestTopic("t", [0])]
    )
    resp = handlers(Parts(groups=rt))[offset_fetch.API_KEY](
        RequestHeader(offset_fetch.API_KEY, 7, 1, "t"), req, CLIENT
    )
    return int(resp.topics[0].partitions[0].committed_offset)


def txn_commit(group: str, offset: int, producer_id: int = 7, epoch: int = 0) -> Any:
    return TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id=group,
        producer_id=producer_id,
        producer_epoch=epoch,
        topics=[TxnOffsetCommitRequestTopic("t", [TxnOffsetCommitRequestPartition(0, offset)])],
    )


def state(rt: GroupRuntime) -> tuple[Any, Any]:
    shard = rt.shard
    return (
        {g: dict(o) for g, o in shard.offsets.items()},
        {g: {p: dict(o) for p, o in by.items()} for g, by in shard.pending_txn_offsets.items()},
    )


async def test_txn_commit_and_marker_are_durable_batches_of_the_producer() -> None:
    rt, _, logs = await memory_runtime()
    resp = await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 5, 42, 3))
    assert resp.topics[0].partitions[0].error_code == 0
    p = rt.shard.partition_of("g")
    plog = rt.partitions[p]
    assert plog.durable_end == plog.log_end_offset == 1
    assert fetched(rt, "g") == -1  # pending
    assert await rt.complete_transaction(p, 42, 3, 0, True) == ErrorCode.NO_ERROR
    assert plog.durable_end == plog.log_end_offset == 2  # durable before NONE
    headers = [h for h, _ in plog.iter_batches(0)]
    assert [(h.producer_id, h.producer_epoch) for h in headers] == [(42, 3), (42, 3)]
    assert [h.attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL) for h in headers] == [
        ATTR_TRANSACTIONAL,
        ATTR_TRANSACTIONAL | ATTR_CONTROL,
    ]
    assert fetched(rt, "g") == 5
    rt2, _, _ = await memory_runtime(logs.reopen())
    assert fetched(rt2, "g") == 5 and state(rt2) == state(rt)


async def test_pending_offsets_survive_a_crash_and_commit_after_it() -> None:
    rt, _, logs = await memory_runtime()
    await call(rt, offset_commit.API_KEY, 8, commit("g", 1))
    await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 5))
    rt2, _, logs2 = await memory_runtime(logs.reopen())
    assert fetched(rt2, "g") == 1
    assert set(rt2.shard.pending_txn_offsets["g"][7]) == {("t", 0)}
    p = rt2.shard.partition_of("g")
    assert await rt2.complete_transaction(p, 7, 0, 0, True) == 0
    assert fetched(rt2, "g") == 5
    rt3, _, _ = await memory_runtime(logs2.reopen())
    assert fetched(rt3, "g") == 5 and not rt3.shard.pending_txn_offsets


async def test_marker_for_a_partition_not_owned_is_not_coordinator() -> None:
    rt, _, _ = await memory_runtime()
    assert await rt.complete_transaction(99, 7, 0, 0, True) == ErrorCode.NOT_COORDINATOR
    p = rt.shard.partition_of("g")
    rt.release(p)
    assert await rt.complete_transaction(p, 7, 0, 0, True) == ErrorCode.NOT_COORDINATOR


async def test_failed_marker_append_answers_not_coordinator_and_keeps_the_offsets_pending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rt, _, _ = await memory_runtime()
    await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 5))
    p = rt.shard.partition_of("g")
    plog = rt.partitions[p]

    def broken(*a: object, **k: object) -> tuple[int, int]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plog, "append_records", broken)
    assert await rt.complete_transaction(p, 7, 0, 0, True) == ErrorCode.NOT_COORDINATOR
    # Rebuilt from the log: the offsets are pending again, not committed.
    assert fetched(rt, "g") == -1 and set(rt.shard.pending_txn_offsets["g"][7]) == {("t", 0)}
    monkeypatch.undo()
    assert await rt.complete_transaction(p, 7, 0, 0, True) == 0
    assert fetched(rt, "g") == 5


@pytest.mark.parametrize("seed", range(8))
async def test_a_turn_mixing_plain_and_transactional_commits_replays_the_same(seed: int) -> None:
    """Commits, transactional commits and markers of many producers, many in one loop turn
    (so one write interleaves plain batches with transactional ones): the log reopened
    rebuilds exactly the live state, through the runtime's own replay."""
    flusher = MemoryDurability()
    logs = MemoryLogs()
    rt = await started(logs, flusher)
    rng = random.Random(seed)
    groups = ["g0", "g1", "g2"]
    for round_ in range(30):
        ops = []
        for i in range(rng.randint(1, 6)):
            g = rng.choice(groups)
            n = round_ * 10 + i
            kind = rng.random()
            if kind < 0.35:
                ops.append(call(rt, offset_commit.API_KEY, 8, commit(g, n)))
            elif kind < 0.75:
                req = txn_commit(g, n, producer_id=rng.randint(1, 3))
                ops.append(call(rt, txn_offset_commit.API_KEY, 3, req))
            else:
                pid = rng.randint(1, 3)
                ops.append(
                    rt.complete_transaction(rt.shard.partition_of(g), pid, 0, 0, rng.random() < 0.6)
                )
        for r in await asyncio.gather(*ops):
            if isinstance(r, ErrorCode):
                assert r == 0
            else:
                assert r.topics[0].partitions[0].error_code == 0
    live = state(rt)
    rt2 = await started(logs.reopen(), MemoryDurability())
    assert state(rt2) == live


async def test_disk_log_replays_transactional_offsets(tmp_path: Path) -> None:
    rt, flusher, logs = await disk_runtime(tmp_path)
    await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 5, 1))
    await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 6, 2))
    p = rt.shard.partition_of("g")
    assert await rt.complete_transaction(p, 1, 0, 3, True) == 0
    live = state(rt)
    await flusher.stop()
    logs.close_all()
    rt2, flusher2, logs2 = await disk_runtime(tmp_path)
    assert state(rt2) == live and fetched(rt2, "g") == 5
    # The coordinator epoch came back with the log: an older coordinator is fenced.
    fenced = await rt2.complete_transaction(p, 1, 0, 2, True)
    assert fenced == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    await flusher2.stop()
    logs2.close_all()


async def test_a_plain_commit_after_a_pending_one_still_wins_after_replay() -> None:
    rt, _, logs = await memory_runtime()
    await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 5))
    await call(rt, offset_commit.API_KEY, 8, commit("g", 9))
    rt2, _, _ = await memory_runtime(logs.reopen())
    assert await rt2.complete_transaction(rt2.shard.partition_of("g"), 7, 0, 0, True) == 0
    assert fetched(rt2, "g") == 9  # the transactional record is older than the commit


class FakeVerifier:
    """The transaction coordinator's answers, by producer id (NONE unless told)."""

    def __init__(self) -> None:
        self.answers: dict[int, ErrorCode] = {}
        self.asked: list[tuple[str, int, int, list[tuple[str, int]]]] = []

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Any
    ) -> dict[tuple[str, int], ErrorCode]:
        self.asked.append((transactional_id, producer_id, producer_epoch, list(partitions)))
        code = self.answers.get(producer_id, ErrorCode.NO_ERROR)
        return {tp: code for tp in partitions}


@pytest.mark.parametrize(
    ("answer", "version", "expected"),
    [
        (ErrorCode.TRANSACTION_ABORTABLE, 3, ErrorCode.INVALID_TXN_STATE),
        (ErrorCode.TRANSACTION_ABORTABLE, 4, ErrorCode.TRANSACTION_ABORTABLE),
        (ErrorCode.PRODUCER_FENCED, 4, ErrorCode.INVALID_PRODUCER_EPOCH),
        (ErrorCode.INVALID_PRODUCER_ID_MAPPING, 3, ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        (ErrorCode.CONCURRENT_TRANSACTIONS, 3, ErrorCode.CONCURRENT_TRANSACTIONS),
        (ErrorCode.NETWORK_EXCEPTION, 2, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
        (ErrorCode.NETWORK_EXCEPTION, 1, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.NOT_ENOUGH_REPLICAS, 3, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.NOT_LEADER_FOR_PARTITION, 3, ErrorCode.NOT_COORDINATOR),
    ],
)
async def test_a_commit_the_transaction_coordinator_refuses_writes_nothing(
    answer: ErrorCode, version: int, expected: ErrorCode
) -> None:
    # CoordinatorRuntimeTest.testScheduleTransactionalWriteOpWhenVerificationFails and
    # ReplicaManagerTest.testVerificationErrorConversionsTV1 for the offsets partition.
    rt, _, _ = await memory_runtime()
    verifier = rt.txn_verifier = FakeVerifier()
    verifier.answers[7] = answer
    resp = await call(rt, txn_offset_commit.API_KEY, version, txn_commit("g", 5))
    assert resp.topics[0].partitions[0].error_code == expected
    p = rt.shard.partition_of("g")
    assert verifier.asked == [("tx", 7, 0, [("__consumer_offsets", p)])]
    assert rt.partitions[p].log_end_offset == 0 and not rt.shard.pending_txn_offsets


async def test_verification_is_skipped_while_the_transaction_is_open_there() -> None:
    rt, _, _ = await memory_runtime()
    verifier = rt.txn_verifier = FakeVerifier()
    p = rt.shard.partition_of("g")
    assert (await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 5))).topics[0].partitions[
        0
    ].error_code == 0
    await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 6))
    assert len(verifier.asked) == 1  # the second commit joined the open transaction
    await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 7, epoch=1))
    assert len(verifier.asked) == 2  # another epoch: asked again
    assert await rt.complete_transaction(p, 7, 1, 0, True) == 0
    await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 8, epoch=1))
    assert len(verifier.asked) == 3  # the transaction ended: the next one is verified


# ------------------------------------------------------------ compaction of the offsets log

SMALL_SEGMENTS = LogConfig(
    cleanup_policy="compact", journaled=True, segment_bytes=1024, min_cleanable_dirty_ratio=0.0
)


async def small_disk_runtime(tmp_path: Path) -> tuple[GroupRuntime, Flusher, LogManager]:
    flusher = Flusher()
    logs = LogManager(tmp_path, flusher=flusher)
    rt = GroupRuntime(
        GroupShard(GroupConfig(offsets_topic_num_partitions=1)),
        logs,
        flusher,
        num_partitions=1,
        log_config=SMALL_SEGMENTS,
    )
    await rt.load()
    return rt, flusher, logs


def compact(rt: GroupRuntime) -> tuple[int, int]:
    """One full pass over offsets partition 0: (log size before, after)."""
    plog = rt.partitions[0]
    before = plog.size_bytes
    LogCleaner(plog).clean_all()  # type: ignore[arg-type]
    return before, plog.size_bytes


@pytest.mark.parametrize("seed", range(2))
async def test_compaction_of_the_offsets_log_keeps_what_replay_needs(
    tmp_path: Path, seed: int
) -> None:
    """Commits, transactional commits and markers, some transactions left open; a pass over
    the offsets log, then a restart: the same committed and pending offsets, and the open
    transactions still end as they would have."""
    rt, flusher, logs = await small_disk_runtime(tmp_path)
    rng = random.Random(seed)
    for n in range(150):
        g = rng.choice(["g0", "g1"])
        kind = rng.random()
        if kind < 0.4:
            await call(rt, offset_commit.API_KEY, 8, commit(g, n))
        elif kind < 0.8:
            await call(rt, txn_offset_commit.API_KEY, 3, txn_commit(g, n, rng.randint(1, 4)))
        else:
            assert (
                await rt.complete_transaction(0, rng.randint(1, 4), 0, 0, rng.random() < 0.5) == 0
            )
    live = state(rt)
    before, after = compact(rt)
    assert after < before
    await flusher.stop()
    logs.close_all()
    rt2, flusher2, logs2 = await small_disk_runtime(tmp_path)
    assert state(rt2) == live
    for pid in range(1, 5):  # the transactions left open end there as well
        assert await rt2.complete_transaction(0, pid, 0, 0, True) == 0
    assert not rt2.shard.pending_txn_offsets
    await flusher2.stop()
    logs2.close_all()


async def test_an_aborted_commit_does_not_hide_the_committed_offset(tmp_path: Path) -> None:
    rt, flusher, logs = await small_disk_runtime(tmp_path)
    await call(rt, offset_commit.API_KEY, 8, commit("g", 1))
    await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 2))
    assert await rt.complete_transaction(0, 7, 0, 0, False) == 0
    for n in range(40):  # other keys, to roll segments past all of it
        await call(rt, offset_commit.API_KEY, 8, commit(f"other{n}", n))
    compact(rt)
    await flusher.stop()
    logs.close_all()
    rt2, flusher2, logs2 = await small_disk_runtime(tmp_path)
    assert fetched(rt2, "g") == 1
    await flusher2.stop()
    logs2.close_all()


async def test_compaction_stops_below_an_open_transaction(tmp_path: Path) -> None:
    rt, flusher, logs = await small_disk_runtime(tmp_path)
    await call(rt, offset_commit.API_KEY, 8, commit("g", 1))
    await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 2))
    for n in range(40):
        await call(rt, offset_commit.API_KEY, 8, commit("g", 100 + n))
    plog = rt.partitions[0]
    segments = plog.segment_count
    assert segments > 2
    before, after = compact(rt)
    # The open transaction's batch is in the first segment: nothing at or after it is
    # cleaned (a later ABORT must still find the offsets it would fall back to).
    assert (before, after) == (before, before)
    assert await rt.complete_transaction(0, 7, 0, 0, False) == 0
    before, after = compact(rt)
    assert after < before
    await flusher.stop()
    logs.close_all()
    rt2, flusher2, logs2 = await small_disk_runtime(tmp_path)
    assert fetched(rt2, "g") == 139 and not rt2.shard.pending_txn_offsets
    await flusher2.stop()
    logs2.close_all()


def control_batches(rt: GroupRuntime) -> list[int]:
    """Base offsets of the control batches of offsets partition 0."""
    return [h.base_offset for h, _ in rt.partitions[0].iter_batches(0) if h.is_control]


async def test_a_marker_outlives_its_records_by_the_delete_retention(tmp_path: Path) -> None:
    rt, flusher, logs = await small_disk_runtime(tmp_path)
    await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 2))
    assert await rt.complete_transaction(0, 7, 0, 0, True) == 0
    for n in range(40):  # the transaction's offset is overwritten, segments roll
        await call(rt, offset_commit.API_KEY, 8, commit("g", 100 + n))
    plog = rt.partitions[0]
    (marker,) = control_batches(rt)
    now = plog._clock()  # type: ignore[attr-defined]
    LogCleaner(plog, clock=lambda: now).clean_all()  # type: ignore[arg-type]
    assert control_batches(rt) == [marker]  # alone now: stamped with a delete horizon
    later = now + plog.config.delete_retention_ms
    cleaner = LogCleaner(plog, clock=lambda: later)  # type: ignore[arg-type]
    assert cleaner.needs_cleaning()
    cleaner.clean_all()
    assert control_batches(rt) == []
    await flusher.stop()
    logs.close_all()
    rt2, flusher2, logs2 = await small_disk_runtime(tmp_path)
    assert fetched(rt2, "g") == 139 and not rt2.shard.pending_txn_offsets
    await flusher2.stop()
    logs2.close_all()


async def test_a_marker_stays_while_its_transaction_has_records(tmp_path: Path) -> None:
    rt, flusher, logs = await small_disk_runtime(tmp_path)
    await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("kept", 2))
    assert await rt.complete_transaction(0, 7, 0, 0, False) == 0  # aborted: kept
    await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 3, producer_id=8))
    assert await rt.complete_transaction(0, 8, 0, 0, True) == 0  # its record survives
    for n in range(40):
        await call(rt, offset_commit.API_KEY, 8, commit(f"other{n}", n))
    plog = rt.partitions[0]
    markers = control_batches(rt)
    far = plog._clock() + 10 * plog.config.delete_retention_ms  # type: ignore[attr-defined]
    for _ in range(2):
        LogCleaner(plog, clock=lambda: far).clean_all()  # type: ignore[arg-type]
    assert control_batches(rt) == markers
    await flusher.stop()
    logs.close_all()
    rt2, flusher2, logs2 = await small_disk_runtime(tmp_path)
    assert fetched(rt2, "g") == 3 and fetched(rt2, "kept") == -1
    await flusher2.stop()
    logs2.close_all()


async def test_a_tombstone_after_a_pending_offset_still_clears_it_after_replay() -> None:
    rt, _, logs = await memory_runtime()
    await call(rt, offset_commit.API_KEY, 8, commit("g", 1))
    await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 5))
    delete = offset_delete.Request(
        group_id="g",
        topics=[
            offset_delete.OffsetDeleteRequestTopic(
                "t", [offset_delete.OffsetDeleteRequestPartition(0)]
            )
        ],
    )
    assert (await call(rt, offset_delete.API_KEY, 0, delete)).error_code == 0
    rt2, _, _ = await memory_runtime(logs.reopen())
    assert not rt2.shard.pending_txn_offsets  # the tombstone took the pending offset too
    assert await rt2.complete_transaction(rt2.shard.partition_of("g"), 7, 0, 0, True) == 0
    assert fetched(rt2, "g") == -1  # the COMMIT marker brings nothing back


async def test_a_failing_verifier_answers_unknown_server_error_and_writes_nothing() -> None:
    rt, _, _ = await memory_runtime()

    class Broken:
        async def verify(self, *args: Any) -> dict[tuple[str, int], ErrorCode]:
            raise RuntimeError("a bug")

    rt.txn_verifier = Broken()
    resp = await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 5))
    assert resp.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN
    assert not rt.shard.pending_txn_offsets
    rt.txn_verifier = FakeVerifier()
    resp = await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 5))
    assert resp.topics[0].partitions[0].error_code == 0


async def test_a_marker_while_the_verification_travels_refuses_the_commit() -> None:
    # KIP-890's verification guard (UnifiedLog: "Record was not part of an ongoing
    # transaction"): the coordinator said yes, but the transaction ended before the answer
    # came back from its node, so the late TxnOffsetCommit opens nothing.
    rt, _, _ = await memory_runtime()
    p = rt.shard.partition_of("g")

    class MarkerMeanwhile(FakeVerifier):
        async def verify(
            self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Any
        ) -> dict[tuple[str, int], ErrorCode]:
            assert await rt.complete_transaction(p, producer_id, producer_epoch, 0, False) == 0
            return await super().verify(transactional_id, producer_id, producer_epoch, partitions)

    rt.txn_verifier = MarkerMeanwhile()
    resp = await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 5))
    assert resp.topics[0].partitions[0].error_code == ErrorCode.INVALID_TXN_STATE
    assert not rt.shard.pending_txn_offsets and not rt.txn_guards
    rt.txn_verifier = FakeVerifier()  # no marker in between: the next one is written
    resp = await call(rt, txn_offset_commit.API_KEY, 3, txn_commit("g", 6))
    assert resp.topics[0].partitions[0].error_code == 0
    assert not rt.txn_guards
