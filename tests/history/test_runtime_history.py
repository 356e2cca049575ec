"""The runtime keeps the history beside the offsets: durable with the commit, read back by
group and time, kept across a restart, deleted by time -- on the local engine."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

from coordinator.group.shard import GroupConfig, GroupShard
from coordinator.history.codec import PLAIN, compress
from coordinator.history.model import HISTORY_TOPIC, MembershipChange, OffsetHistoryEntry
from coordinator.history.store import CARRY_MAX_VALUES, HistoryLog
from coordinator.runtime import GroupRuntime
from protocol.messages import offset_commit
from storage.interface import LogConfig
from storage.local.cleaner import LogCleaner
from storage.local.durability import Flusher
from storage.local.manager import LogManager
from storage.record_batch import key_values
from tests.support.runtimekit import OFFSETS_LOG, PARTITIONS, call, commit

HISTORY_LOG = LogConfig(retention_ms=10_000, segment_ms=1000, journaled=True)


class Clock:
    def __init__(self) -> None:
        self.now = 1_764_000_000_000

    def __call__(self) -> int:
        return self.now


async def history_runtime(
    tmp_path: Path, clock: Clock, **config: Any
) -> tuple[GroupRuntime, Flusher, LogManager]:
    flusher = Flusher()
    logs = LogManager(tmp_path, clock=clock, flusher=flusher)
    # As the server starts: every partition on disk opened, the journal replayed.
    logs.open_all(lambda topic, _p: HISTORY_LOG if topic == HISTORY_TOPIC else OFFSETS_LOG)
    rt = GroupRuntime(
        GroupShard(
            GroupConfig(offsets_topic_num_partitions=PARTITIONS, offsets_history=True, **config)
        ),
        logs,
        flusher,
        num_partitions=PARTITIONS,
        log_config=OFFSETS_LOG,
        clock=clock,
        history=HistoryLog(logs, HISTORY_LOG),
    )
    await rt.load()
    return rt, flusher, logs


def fdatasync_fails_once(monkeypatch: pytest.MonkeyPatch) -> list[OSError]:
    """The next os.fdatasync raises EIO, the later ones sync; the list empties once it has."""
    real = os.fdatasync
    failures = [OSError(5, "Input/output error")]

    def once(fd: int) -> None:
        if failures:
            raise failures.pop()
        real(fd)

    monkeypatch.setattr(os, "fdatasync", once)
    return failures


def offsets(rt: GroupRuntime, group: str, **kw: Any) -> list[tuple[int, int]]:
    assert rt.history is not None
    return [
        (e.timestamp_ms, e.offset)
        for e in rt.history.read(group, **kw)
        if isinstance(e, OffsetHistoryEntry)
    ]


async def test_history_is_durable_with_the_commit_and_survives_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    rt, flusher, logs = await history_runtime(tmp_path, clock)
    t0 = clock.now
    for n, offset in enumerate((5, 5, 5, 9)):
        clock.now = t0 + n * 100
        resp = await call(rt, offset_commit.API_KEY, 8, commit("g", offset))
        assert resp.topics[0].partitions[0].error_code == 0
        assert rt.history is not None
        hlog = rt.history.plog
        # durable before the reply left (carried in the journal: past the log's end)
        assert hlog.durable_end == rt.history.end
    await call(rt, offset_commit.API_KEY, 8, commit("other", 1))
    assert offsets(rt, "g") == [(t0, 5), (t0 + 300, 9)]
    assert offsets(rt, "g", from_ms=t0 + 1) == [(t0 + 300, 9)]
    assert offsets(rt, "g", to_ms=t0 + 299) == [(t0, 5)]
    (last,) = list(rt.history.read("g", from_ms=t0 + 1))
    assert isinstance(last, OffsetHistoryEntry) and last.unchanged == 2 and last.previous == 5
    await flusher.stop()
    logs.close_all()  # as after SIGKILL, the journal holds what the fsync made durable

    rt2, flusher2, logs2 = await history_runtime(tmp_path, clock)
    assert offsets(rt2, "g") == [(t0, 5), (t0 + 300, 9)]
    await flusher2.stop()
    logs2.close_all()


async def test_a_failed_journal_fsync_fails_the_commit_and_keeps_none_of_its_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history shares the offsets partitions' journal, so the commit waits on the one
    fdatasync covering both: when it fails, the commit is answered NOT_COORDINATOR, both
    logs are cut back (the history keeps no entry of it), and the retried commit is kept."""
    clock = Clock()
    rt, flusher, logs = await history_runtime(tmp_path, clock)
    assert rt.history is not None
    t0 = clock.now
    await call(rt, offset_commit.API_KEY, 8, commit("g", 1))
    hlog = rt.history.plog
    kept = rt.history.end
    failures = fdatasync_fails_once(monkeypatch)
    clock.now = t0 + 100
    resp = await call(rt, offset_commit.API_KEY, 8, commit("g", 2))
    assert not failures  # the journal's fdatasync failed under this commit
    assert resp.topics[0].partitions[0].error_code == 16  # NOT_COORDINATOR: retry
    assert rt.history.end == kept  # its history was cut back with its record
    assert offsets(rt, "g") == [(t0, 1)]
    clock.now = t0 + 200
    resp = await call(rt, offset_commit.API_KEY, 8, commit("g", 2))
    assert resp.topics[0].partitions[0].error_code == 0
    assert hlog.durable_end == rt.history.end > kept  # durable before the reply left
    assert offsets(rt, "g") == [(t0, 1), (t0 + 200, 2)]
    await flusher.stop()
    logs.close_all()
    rt2, flusher2, logs2 = await history_runtime(tmp_path, clock)
    assert offsets(rt2, "g") == [(t0, 1), (t0 + 200, 2)]
    await flusher2.stop()
    logs2.close_all()


async def test_a_failed_history_write_leaves_the_commit_standing_and_goes_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The value's write fails after the commit's record is in its log (a full disk): the
    commit is answered by its own fsync (it stands: a NOT_COORDINATOR answer would refuse a
    commit that stays), and its history is written by the next round."""
    clock = Clock()
    rt, flusher, logs = await history_runtime(tmp_path, clock)
    history = rt.history
    assert history is not None
    t0 = clock.now
    await call(rt, offset_commit.API_KEY, 8, commit("g", 1))
    journal = logs.journal
    real = journal.carry
    failures = [OSError(28, "No space left on device")]

    def once(*args: Any) -> bool:
        if failures:  # as Journal.carry fails: nothing journaled
            raise failures.pop()
        return real(*args)

    monkeypatch.setattr(journal, "carry", once)
    clock.now = t0 + 100
    resp = await call(rt, offset_commit.API_KEY, 8, commit("g", 2))
    assert not failures  # the history's write failed under this commit
    assert resp.topics[0].partitions[0].error_code == 0  # the commit stands
    assert offsets(rt, "g") == [(t0, 1)]  # its history not written yet
    clock.now = t0 + 200
    resp = await call(rt, offset_commit.API_KEY, 8, commit("h", 7))
    assert resp.topics[0].partitions[0].error_code == 0
    # Written with the next round, once, before that round's own.
    assert [o for _, o in offsets(rt, "g")] == [1, 2]
    assert [o for _, o in offsets(rt, "h")] == [7]
    await flusher.stop()
    logs.close_all()
    rt2, flusher2, logs2 = await history_runtime(tmp_path, clock)
    assert [o for _, o in offsets(rt2, "g")] == [1, 2]
    await flusher2.stop()
    logs2.close_all()


async def test_retention_deletes_old_history_and_its_segments(tmp_path: Path) -> None:
    clock = Clock()
    rt, flusher, logs = await history_runtime(tmp_path, clock)
    assert rt.history is not None
    t0 = clock.now
    await call(rt, offset_commit.API_KEY, 8, commit("g", 1))
    clock.now = t0 + 5_000
    rt.history.apply_retention(clock.now)  # rolls the segment (segment.ms 1 s): nothing old yet
    await call(rt, offset_commit.API_KEY, 8, commit("g", 2))
    directory = tmp_path / f"{HISTORY_TOPIC}-0"
    assert rt.history.start_ms() == t0  # a read: the carried value is in the segment now
    before = sum(f.stat().st_size for f in directory.glob("*.log"))
    clock.now = t0 + 12_000  # the first commit is past the 10 s retention, the second is not
    assert rt.history.apply_retention(clock.now) >= 1
    assert offsets(rt, "g") == [(t0 + 5_000, 2)]
    assert sum(f.stat().st_size for f in directory.glob("*.log")) < before
    assert rt.history.start_ms() == t0 + 5_000
    await flusher.stop()
    logs.close_all()


async def test_membership_changes_are_kept(tmp_path: Path) -> None:
    from protocol.messages import join_group

    clock = Clock()
    rt, flusher, logs = await history_runtime(tmp_path, clock, group_initial_rebalance_delay_ms=0)
    req = join_group.Request(
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[join_group.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )
    resp = await call(rt, join_group.API_KEY, 3, req)  # v3: no member id round trip
    assert resp.error_code == 0
    # the join completed on the runtime's timer; its membership changes (no records) are
    # appended at the end of a loop turn and made durable by the round that starts
    assert rt.history is not None
    hlog = rt.history.plog
    for _ in range(100):
        if hlog.log_end_offset:
            break
        await asyncio.sleep(0)  # a turn of the loop, no time
    await flusher.wait_durable(hlog, hlog.log_end_offset - 1)
    kinds = [
        (e.kind, e.generation) for e in rt.history.read("g") if isinstance(e, MembershipChange)
    ]
    assert kinds[:2] == [("rebalance_started", 0), ("generation_completed", 1)]
    await flusher.stop()
    logs.close_all()


async def test_history_outlives_the_compaction_of_the_offsets_log(tmp_path: Path) -> None:
    """Compaction keeps only a group's last offset in __consumer_offsets; its history keeps
    every change, and a restart serves both."""
    clock = Clock()
    rt, flusher, logs = await history_runtime(tmp_path, clock)
    t0 = clock.now
    for n in range(1, 6):
        clock.now = t0 + n
        await call(rt, offset_commit.API_KEY, 8, commit("g", n))
    plog = rt.partitions[rt.shard.partition_of("g")]
    plog.roll()  # the cleaner takes rolled segments only
    await call(rt, offset_commit.API_KEY, 8, commit("other", 1))
    before = plog.size_bytes
    LogCleaner(plog).clean_all()  # type: ignore[arg-type]
    assert plog.size_bytes < before  # the superseded commits are gone from the offsets log
    expected = [(t0 + n, n) for n in range(1, 6)]
    assert offsets(rt, "g") == expected
    await flusher.stop()
    logs.close_all()
    rt2, flusher2, logs2 = await history_runtime(tmp_path, clock)
    assert offsets(rt2, "g") == expected
    await flusher2.stop()
    logs2.close_all()


def _join(member_id: str = "") -> Any:
    from protocol.messages import join_group

    return join_group.Request(
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[join_group.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )


async def test_membership_change_of_a_failed_round_goes_again_with_the_next(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A rebalance start (no records: its history is written alone) whose fsync fails is
    written again by the next round, once, in its place: the log was cut back, nothing was
    acknowledged for it, and the group's history must not miss the step."""
    import os

    from protocol.messages import join_group

    clock = Clock()
    rt, flusher, logs = await history_runtime(tmp_path, clock, group_initial_rebalance_delay_ms=0)
    assert rt.history is not None
    hlog = rt.history.plog
    first = await call(rt, join_group.API_KEY, 3, _join())
    assert first.error_code == 0 and first.generation_id == 1
    await flusher.wait_durable(hlog, hlog.log_end_offset - 1)
    durable = hlog.log_end_offset

    real = os.fdatasync
    failures: list[int] = []

    def failing(fd: int) -> None:
        if not failures:
            failures.append(fd)
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", failing)
    clock.now += 100
    # A second member: the group starts rebalancing (no records), its history goes alone.
    second = asyncio.ensure_future(call(rt, join_group.API_KEY, 3, _join()))
    async with asyncio.timeout(5):
        while not failures or flusher.in_round:
            await asyncio.sleep(0.001)
    for _ in range(10):
        await asyncio.sleep(0)  # the failed round's callbacks
    assert hlog.log_end_offset == durable  # cut back: the rebalance start is not in the log
    # The next round (another group's commit) carries it.
    clock.now += 100
    resp = await call(rt, offset_commit.API_KEY, 8, commit("other", 1))
    assert resp.topics[0].partitions[0].error_code == 0
    kinds = [
        (e.kind, e.generation, e.cause)
        for e in rt.history.read("g")
        if isinstance(e, MembershipChange)
    ]
    assert kinds == [
        ("rebalance_started", 0, "join"),
        ("generation_completed", 1, ""),
        ("rebalance_started", 1, "join"),
    ], kinds
    # The commit's own change is there too, after it (one record: the requeued entries first).
    assert offsets(rt, "other") == [(clock.now, 1)]
    second.cancel()
    await flusher.stop()
    logs.close_all()


async def test_history_of_a_failed_round_is_retried_without_another_write(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Nothing else writes: the failed round's history goes again by a round of its own."""
    import os

    from protocol.messages import join_group

    clock = Clock()
    rt, flusher, logs = await history_runtime(tmp_path, clock, group_initial_rebalance_delay_ms=0)
    assert rt.history is not None
    hlog = rt.history.plog
    assert (await call(rt, join_group.API_KEY, 3, _join())).error_code == 0
    await flusher.wait_durable(hlog, hlog.log_end_offset - 1)
    durable = hlog.log_end_offset
    real = os.fdatasync
    failures: list[int] = []

    def failing(fd: int) -> None:
        if not failures:
            failures.append(fd)
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", failing)
    second = asyncio.ensure_future(call(rt, join_group.API_KEY, 3, _join()))
    async with asyncio.timeout(10):
        while hlog.durable_end <= durable:
            await asyncio.sleep(0.01)
    assert failures
    assert [e.kind for e in rt.history.read("g") if isinstance(e, MembershipChange)][-1] == (
        "rebalance_started"
    )
    assert hlog.log_end_offset == durable + 1  # once
    second.cancel()
    await flusher.stop()
    logs.close_all()


async def crash(flusher: Flusher, logs: LogManager) -> None:
    """What SIGKILL leaves: no last fsync round, no carried value appended to its segment,
    no clean-shutdown marker; the page cache (segments written, not fsynced) survives."""
    task = flusher._task
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for plog in logs.logs():
        plog.close_without_marker()
    logs.journal.close()
    logs.release_lock()


@pytest.mark.parametrize("power_loss", [False, True], ids=["sigkill", "power-loss"])
async def test_carried_history_comes_back_after_a_crash_once(
    tmp_path: Path, power_loss: bool
) -> None:
    """Each round's history value is carried in the journal only; some were appended to the
    segment by a read, the last ones not. After SIGKILL (or a power cut that also loses the
    segment's unsynced bytes) the journal's replay restores every acknowledged commit's
    history, the same entries, none twice."""
    clock = Clock()
    rt, flusher, logs = await history_runtime(tmp_path, clock)
    assert rt.history is not None
    t0 = clock.now
    expected = []
    for n in range(1, 7):
        clock.now = t0 + n * 100
        resp = await call(rt, offset_commit.API_KEY, 8, commit("g", n))
        assert resp.topics[0].partitions[0].error_code == 0
        expected.append((clock.now, n))
        if n == 3:
            assert offsets(rt, "g") == expected  # a read: the three go to the segment
    hlog = rt.history.plog
    assert len(rt.history.carried) == 3  # the last three: in the journal only
    assert hlog.log_end_offset == 3 and hlog.durable_end == rt.history.end == 6
    await crash(flusher, logs)
    if power_loss:
        for seg in (tmp_path / f"{HISTORY_TOPIC}-0").glob("*.log"):
            os.truncate(seg, 0)  # never fsynced: the spilled batch is gone too
    rt2, flusher2, logs2 = await history_runtime(tmp_path, clock)
    assert rt2.history is not None
    assert offsets(rt2, "g") == expected
    assert rt2.history.plog.log_end_offset == 6
    await flusher2.stop()
    logs2.close_all()


async def test_a_failed_fdatasync_drops_the_carried_values_it_held_and_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two values carried and durable, then an fdatasync fails under the third: the third
    is answered NOT_COORDINATOR and gone (from memory and from the journal), the two stay;
    the retried commit takes the freed offset, and a crash and replay agree."""
    clock = Clock()
    rt, flusher, logs = await history_runtime(tmp_path, clock)
    assert rt.history is not None
    t0 = clock.now
    for n in (1, 2):
        clock.now = t0 + n * 100
        assert (await call(rt, offset_commit.API_KEY, 8, commit("g", n))).topics[0].partitions[
            0
        ].error_code == 0
    assert len(rt.history.carried) == 2
    failures = fdatasync_fails_once(monkeypatch)
    clock.now = t0 + 300
    resp = await call(rt, offset_commit.API_KEY, 8, commit("g", 3))
    assert not failures and resp.topics[0].partitions[0].error_code == 16
    assert len(rt.history.carried) == 2 and rt.history.end == 2
    clock.now = t0 + 400
    resp = await call(rt, offset_commit.API_KEY, 8, commit("g", 3))
    assert resp.topics[0].partitions[0].error_code == 0
    assert rt.history.plog.durable_end == rt.history.end == 3
    await crash(flusher, logs)
    rt2, flusher2, logs2 = await history_runtime(tmp_path, clock)
    assert offsets(rt2, "g") == [(t0 + 100, 1), (t0 + 200, 2), (t0 + 400, 3)]
    await flusher2.stop()
    logs2.close_all()


async def test_journal_checkpoints_with_values_carried_keep_them(tmp_path: Path) -> None:
    """The journal rotates often (small files): each checkpoint deletes the old files once
    the segments are fsynced, so the values carried in them go to the segment first."""
    clock = Clock()
    rt, flusher, logs = await history_runtime(tmp_path, clock)
    assert rt.history is not None
    logs.journal.max_bytes = 4000
    t0 = clock.now
    for n in range(1, 41):
        clock.now = t0 + n * 10
        resp = await call(rt, offset_commit.API_KEY, 8, commit("g", n))
        assert resp.topics[0].partitions[0].error_code == 0
    assert len(logs.journal.files()) == 1  # older files were checkpointed away
    assert rt.history.plog.log_end_offset > 0  # values went to the segment then
    expected = [(t0 + n * 10, n) for n in range(1, 41)]
    await crash(flusher, logs)
    rt2, flusher2, logs2 = await history_runtime(tmp_path, clock)
    assert offsets(rt2, "g") == expected
    await flusher2.stop()
    logs2.close_all()


async def test_carried_values_go_to_the_segment_compressed_together(tmp_path: Path) -> None:
    """The values carried go to the segment as one batch that Kafka's lz4 codec compresses,
    far smaller than the values compressed one by one; every one reads back."""
    clock = Clock()
    rt, flusher, logs = await history_runtime(tmp_path, clock)
    assert rt.history is not None
    t0 = clock.now
    for n in range(1, CARRY_MAX_VALUES + 11):
        clock.now = t0 + n * 10
        resp = await call(rt, offset_commit.API_KEY, 8, commit("g", n))
        assert resp.topics[0].partitions[0].error_code == 0
    plog = rt.history.plog
    assert plog.log_end_offset == CARRY_MAX_VALUES and len(rt.history.carried) == 10
    ((h, batch),) = plog.iter_batches(plog.log_start_offset)
    assert (h.compression, h.records_count) == (3, CARRY_MAX_VALUES)
    values = [v for _, v in key_values(batch) if v is not None]
    assert all(v.startswith(PLAIN) for v in values)
    assert len(batch) * 3 < sum(len(compress(v)) for v in values)
    assert offsets(rt, "g") == [(t0 + n * 10, n) for n in range(1, CARRY_MAX_VALUES + 11)]
    await flusher.stop()
    logs.close_all()


async def test_a_clean_close_appends_the_carried_values(tmp_path: Path) -> None:
    clock = Clock()
    rt, flusher, logs = await history_runtime(tmp_path, clock)
    assert rt.history is not None
    await call(rt, offset_commit.API_KEY, 8, commit("g", 1))
    assert rt.history.carried
    await flusher.stop()
    logs.close_all()
    assert not rt.history.carried
    reopened = LogManager(tmp_path)
    assert reopened.journal.files() == []  # nothing left to replay
    reopened.open_all(lambda t, p: HISTORY_LOG if t == HISTORY_TOPIC else OFFSETS_LOG)
    hlog = reopened.get(HISTORY_TOPIC, 0)
    assert hlog is not None and hlog.log_end_offset == 1
    reopened.close_all()
