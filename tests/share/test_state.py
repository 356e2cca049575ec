"""The share coordinator's state: merging batches, snapshots and updates, fencing, replay,
and the persister over a log (Kafka's PersisterStateBatchCombinerTest and
ShareCoordinatorShardTest cases)."""

from __future__ import annotations

import asyncio
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.share.combine import combine
from coordinator.share.coordinator import ShareCoordinator
from coordinator.share.persister import (
    ACKNOWLEDGED,
    ARCHIVED,
    AVAILABLE,
    PersisterBatch,
    WriteRequest,
)
from coordinator.share.state_shard import (
    SHARE_STATE_TOPIC,
    ShareStateShard,
    partition_for,
    topic_id_str,
)
from protocol.errors import ErrorCode
from storage.interface import LogConfig
from storage.memory import MemoryDurability, MemoryLogs
from storage.record_batch import key_values

B = PersisterBatch
TOPIC = topic_id_str(bytes(range(16)))
KEY = ("g", bytes(range(16)), 0)


# -- PersisterStateBatchCombiner
def test_combine_same_state_overlapping_and_contiguous_merge() -> None:
    assert combine([B(100, 110, AVAILABLE, 1)], [B(111, 120, AVAILABLE, 1)], -1) == [
        B(100, 120, AVAILABLE, 1)
    ]
    assert combine([B(100, 110, AVAILABLE, 1)], [B(105, 120, AVAILABLE, 1)], -1) == [
        B(100, 120, AVAILABLE, 1)
    ]


def test_combine_higher_count_then_higher_state_wins() -> None:
    # testStateBatchCombineDifferentStates: priority, not recency.
    assert combine([B(100, 110, AVAILABLE, 2)], [B(105, 108, ACKNOWLEDGED, 1)], -1) == [
        B(100, 110, AVAILABLE, 2)
    ]
    assert combine([B(100, 110, AVAILABLE, 1)], [B(105, 108, ACKNOWLEDGED, 1)], -1) == [
        B(100, 104, AVAILABLE, 1),
        B(105, 108, ACKNOWLEDGED, 1),
        B(109, 110, AVAILABLE, 1),
    ]
    assert combine([B(100, 110, ARCHIVED, 1)], [B(100, 110, ACKNOWLEDGED, 1)], -1) == [
        B(100, 110, ARCHIVED, 1)
    ]


def test_combine_prunes_below_start_offset() -> None:
    assert combine([B(100, 110, AVAILABLE, 1), B(90, 95, ARCHIVED, 1)], [], 105) == [
        B(105, 110, AVAILABLE, 1)
    ]
    assert combine([B(90, 95, ARCHIVED, 1)], [], 105) == []


_batch = st.builds(
    lambda f, n, s, c: B(f, f + n, s, c),
    st.integers(0, 40),
    st.integers(0, 10),
    st.sampled_from([AVAILABLE, ACKNOWLEDGED, ARCHIVED]),
    st.integers(1, 4),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_batch, max_size=8), st.lists(_batch, max_size=8), st.integers(-1, 30))
def test_combine_matches_per_offset_model(old: list[B], new: list[B], start: int) -> None:
    out = combine(old, new, start)
    model: dict[int, tuple[int, int]] = {}
    for b in (*old, *new):
        for o in range(b.first_offset, b.last_offset + 1):
            if start != -1 and o < start:
                continue
            best = model.get(o)
            cand = (b.delivery_count, b.delivery_state)
            if best is None or cand > best:
                model[o] = cand
    got: dict[int, tuple[int, int]] = {}
    for b in out:
        for o in range(b.first_offset, b.last_offset + 1):
            assert o not in got
            got[o] = (b.delivery_count, b.delivery_state)
    assert got == model
    for a, b in itertools.pairwise(out):  # sorted, coalesced
        assert a.last_offset < b.first_offset
        assert not (
            a.last_offset + 1 == b.first_offset
            and (a.delivery_state, a.delivery_count) == (b.delivery_state, b.delivery_count)
        )


# -- ShareCoordinatorShard
def _write(
    shard: ShareStateShard,
    batches: list[B],
    start: int = -1,
    state_epoch: int = 0,
    leader_epoch: int = 0,
) -> ErrorCode:
    err, _ = shard.write(KEY, WriteRequest(0, state_epoch, leader_epoch, start, -1, batches), 1)
    return err


def test_write_before_initialize_is_invalid_request() -> None:
    assert _write(ShareStateShard(), [B(0, 1, ACKNOWLEDGED, 1)]) == ErrorCode.INVALID_REQUEST
    result, _ = ShareStateShard().read(KEY, 0, 1)
    assert result.error == ErrorCode.INVALID_REQUEST


def test_initialize_then_updates_then_snapshot_at_threshold() -> None:
    shard = ShareStateShard(updates_per_snapshot=2)
    err, rec = shard.initialize(KEY, 3, -1, 1)
    assert err == ErrorCode.NO_ERROR and rec is not None and rec[0][:2] == b"\x00\x00"
    assert shard.read_summary(KEY) == (ErrorCode.NO_ERROR, 3, 0, -1, -1)
    kinds = []
    for i in range(4):
        err, rec = shard.write(KEY, WriteRequest(0, 3, 0, i, -1, [B(i, i, ACKNOWLEDGED, 1)]), 1)
        assert err == ErrorCode.NO_ERROR and rec is not None
        kinds.append(rec[0][1])
    # two updates, then a snapshot (the count reached 2), then an update again
    assert kinds == [1, 1, 0, 1]
    state = shard.states[KEY]
    assert state.start_offset == 3 and state.snapshot_epoch == 1
    assert state.batches == [B(3, 3, ACKNOWLEDGED, 1)]


def test_fencing_by_leader_and_state_epoch() -> None:
    shard = ShareStateShard()
    shard.initialize(KEY, 5, 0, 1)
    result, rec = shard.read(KEY, 2, 1)  # a new leader epoch is recorded
    assert result.error == ErrorCode.NO_ERROR and rec is not None
    assert _write(shard, [], leader_epoch=1, state_epoch=5) == ErrorCode.FENCED_LEADER_EPOCH
    assert _write(shard, [], leader_epoch=2, state_epoch=4) == ErrorCode.FENCED_STATE_EPOCH
    assert _write(shard, [], leader_epoch=2, state_epoch=5) == ErrorCode.NO_ERROR
    assert shard.read(KEY, 1, 1)[0].error == ErrorCode.FENCED_LEADER_EPOCH
    assert shard.initialize(KEY, 4, 0, 1)[0] == ErrorCode.FENCED_STATE_EPOCH


def test_replay_rebuilds_the_same_state() -> None:
    shard = ShareStateShard(updates_per_snapshot=3)
    records = [shard.initialize(KEY, 1, 10, 1)[1]]
    for i in range(7):
        _err, rec = shard.write(
            KEY, WriteRequest(0, 1, 0, 10 + i, -1, [B(10 + i, 12 + i, 2 * (i % 3), i + 1)]), 1
        )
        records.append(rec)
    other = ShareStateShard(updates_per_snapshot=3)
    for rec in records:
        assert rec is not None
        other.replay(*rec)
    assert other.states == shard.states
    rec = shard.delete(KEY)
    assert rec is not None and rec[1] is None
    other.replay(*rec)
    assert other.states == {} and shard.read_summary(KEY)[1:] == (-1, -1, -1, 0)
    assert shard.delete(KEY) is None  # a missing key: success, nothing written


def test_partition_for_is_kafkas_hash() -> None:
    # Java: Math.abs("g:AAECAwQFBgcICQoLDA0ODw:0".hashCode()) % 50
    key = f"g:{TOPIC}:0"
    h = 0
    for ch in key:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    assert partition_for("g", TOPIC, 0, 50) == abs(h) % 50


# -- the persister over a log
async def _coordinator(logs: MemoryLogs) -> ShareCoordinator:
    sc = ShareCoordinator(
        logs,
        MemoryDurability(),
        num_partitions=3,
        updates_per_snapshot=2,
        log_config=LogConfig(),
    )
    sc.start()
    return sc


async def test_persister_round_trip_and_restart() -> None:
    logs = MemoryLogs()
    sc = await _coordinator(logs)
    assert await sc.initialize("g", TOPIC, [0, 1], 1, -1) == {
        0: ErrorCode.NO_ERROR,
        1: ErrorCode.NO_ERROR,
    }
    assert await sc.read_summary("g", TOPIC, [0, 2]) == {
        0: (ErrorCode.NO_ERROR, 1, -1),
        2: (ErrorCode.NO_ERROR, -1, -1),
    }
    result = await sc.read_state("g", TOPIC, 0, 0)
    assert result.error == ErrorCode.NO_ERROR and result.start_offset == -1
    for i in range(5):
        req = WriteRequest(
            0, 1, 0, i, -1, [B(i, i, ACKNOWLEDGED, 2), B(i + 1, i + 1, AVAILABLE, 1)]
        )
        assert await sc.write_state("g", TOPIC, req) == ErrorCode.NO_ERROR
    before = await sc.read_state("g", TOPIC, 0, 0)
    p = partition_for("g", TOPIC, 0, 3)
    plog = logs.get(SHARE_STATE_TOPIC, p)
    assert plog is not None and plog.log_end_offset >= 6
    # what a restart replays is what was answered
    again = await _coordinator(logs)
    assert await again.read_state("g", TOPIC, 0, 0) == before
    assert before.batches == (B(4, 4, ACKNOWLEDGED, 2), B(5, 5, AVAILABLE, 1))
    assert await again.delete("g", TOPIC, [0, 1, 2]) == {
        0: ErrorCode.NO_ERROR,
        1: ErrorCode.NO_ERROR,
        2: ErrorCode.NO_ERROR,
    }
    assert (await again.read_state("g", TOPIC, 0, 0)).error == ErrorCode.INVALID_REQUEST
    await asyncio.sleep(0)


async def test_failed_append_answers_and_rebuilds() -> None:
    logs = MemoryLogs()
    sc = await _coordinator(logs)
    assert (await sc.initialize("g", TOPIC, [0], 1, 5))[0] == ErrorCode.NO_ERROR
    p = partition_for("g", TOPIC, 0, 3)
    plog = logs.get(SHARE_STATE_TOPIC, p)
    assert plog is not None

    def broken(*_a: object, **_k: object) -> tuple[int, int]:
        raise OSError("disk full")

    real = plog.append_records
    plog.append_records = broken  # type: ignore[method-assign]
    req = WriteRequest(0, 1, 0, 7, -1, [B(5, 6, ACKNOWLEDGED, 1)])
    assert await sc.write_state("g", TOPIC, req) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    plog.append_records = real  # type: ignore[method-assign]
    # nothing of the failed write survived in memory
    assert sc.summary("g", TOPIC, 0) == (1, 0, 5, 0)
    batches = [kv for b in plog.iter_batches() for kv in key_values(b[1])]
    assert len(batches) == 1


async def test_cold_snapshots_and_pruning_keep_the_state() -> None:
    # testSnapshotColdPartitionsPartialEligiblePartitions, testLastRedundantOffset
    logs = MemoryLogs()
    sc = await _coordinator(logs)
    for partition in (0, 1):
        assert (await sc.initialize("g", TOPIC, [partition], 1, 0))[partition] == 0
    for i in range(7):
        req = WriteRequest(0, 1, 0, i, -1, [B(i, i, ACKNOWLEDGED, 1)])
        assert await sc.write_state("g", TOPIC, req) == ErrorCode.NO_ERROR
    await sc.write_state("g", TOPIC, WriteRequest(1, 1, 0, 3, -1, [B(3, 4, AVAILABLE, 2)]))
    before = [await sc.read_state("g", TOPIC, q, 0) for q in (0, 1)]
    await sc.prune()
    for q in (0, 1):
        p = partition_for("g", TOPIC, q, 3)
        plog = logs.get(SHARE_STATE_TOPIC, p)
        assert plog is not None and plog.log_start_offset > 0  # pruned below the snapshots
    again = await _coordinator(logs)
    assert [await again.read_state("g", TOPIC, q, 0) for q in (0, 1)] == before


async def test_a_deleted_topics_state_is_tombstoned() -> None:
    # testOnTopicsDeletedTopicIds
    logs = MemoryLogs()
    known = {bytes(range(16))}
    sc = ShareCoordinator(
        logs,
        MemoryDurability(),
        num_partitions=3,
        updates_per_snapshot=2,
        log_config=LogConfig(),
        topic_exists=known.__contains__,
    )
    sc.start()
    await sc.initialize("g", TOPIC, [0, 1], 1, 0)
    sc.topics_changed(["t"], True)  # a creation changes nothing
    assert sc.summary("g", TOPIC, 0) is not None
    known.clear()
    sc.topics_changed(["t"], False)
    await asyncio.gather(
        *sc.background - {t for t in sc.background if t.done()}, return_exceptions=True
    )
    for _ in range(10):
        if sc.summary("g", TOPIC, 0) is None and sc.summary("g", TOPIC, 1) is None:
            break
        await asyncio.sleep(0.01)
    assert sc.summary("g", TOPIC, 0) is None and sc.summary("g", TOPIC, 1) is None
    again = await _coordinator(logs)
    assert (await again.read_state("g", TOPIC, 0, 0)).error == ErrorCode.INVALID_REQUEST
