"""The history a process holds but does not write (``runtime.older_history``), in one process.

A data directory whose history partition 1 was written by worker 1 of an earlier run, now
opened by one process (which writes partition 0): DescribeGroupHistory answers the group's
entries of both partitions, oldest first, and the retention deletes the left-over
partition's old entries too (its only holder now applies it).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from coordinator.apis.history import describe
from coordinator.config import Settings
from coordinator.config.log_configs import history_log_config
from coordinator.group.shard import GroupConfig, GroupShard
from coordinator.history.model import HISTORY_TOPIC
from coordinator.history.store import HistoryLog
from coordinator.node.assemble import older_history
from coordinator.runtime import GroupRuntime
from protocol.messages import describe_group_history as dgh
from protocol.messages import offset_commit
from storage.local.durability import Flusher
from storage.local.manager import LogManager
from tests.support.runtimekit import OFFSETS_LOG, PARTITIONS, call, commit

SETTINGS = Settings(offsets_history_retention_ms=10_000)


class Clock:
    def __init__(self) -> None:
        self.now = 1_764_000_000_000

    def __call__(self) -> int:
        return self.now


async def runtime(tmp_path: Path, clock: Clock, partition: int) -> tuple[GroupRuntime, Flusher]:
    """A process writing history partition ``partition``, holding the others it finds."""
    flusher = Flusher()
    logs = LogManager(tmp_path, clock=clock, flusher=flusher)
    logs.open_all(
        lambda topic, p: history_log_config(SETTINGS) if topic == HISTORY_TOPIC else OFFSETS_LOG
    )
    rt = GroupRuntime(
        GroupShard(GroupConfig(offsets_topic_num_partitions=PARTITIONS, offsets_history=True)),
        logs,
        flusher,
        num_partitions=PARTITIONS,
        log_config=OFFSETS_LOG,
        clock=clock,
        history=HistoryLog(logs, history_log_config(SETTINGS), partition),
    )
    assert isinstance(rt.history, HistoryLog)
    rt.older_history = older_history(SETTINGS, logs, rt.history, clock)
    await rt.load()
    return rt, flusher


async def stop(rt: GroupRuntime, flusher: Flusher) -> None:
    rt.close()
    await flusher.stop()
    rt.logs.close_all()  # type: ignore[attr-defined]


def offsets(rt: GroupRuntime, group: str) -> list[tuple[int, int]]:
    resp = describe(rt, dgh.Request(group_id=group))
    assert resp.error_code == 0
    return [(c.timestamp_ms, c.committed_offset) for c in resp.offset_changes]


async def test_left_over_history_is_read_beside_this_process_and_expired_here(
    tmp_path: Path,
) -> None:
    clock = Clock()
    t0 = clock.now
    earlier, flusher = await runtime(tmp_path, clock, 1)  # worker 1 of an earlier run
    await call(earlier, offset_commit.API_KEY, 8, commit("g", 1))
    await stop(earlier, flusher)

    clock.now = t0 + 5_000
    rt, flusher = await runtime(tmp_path, clock, 0)
    assert rt.older_history is not None
    assert [h.partition for h in rt.older_history.logs] == [1]
    await call(rt, offset_commit.API_KEY, 8, commit("g", 2))
    assert offsets(rt, "g") == [(t0, 1), (t0 + 5_000, 2)]

    clock.now = t0 + 12_000  # the first commit is past the 10 s retention, the second is not
    rt.retain_history()
    for _ in range(100):
        if offsets(rt, "g") == [(t0 + 5_000, 2)]:
            break
        await asyncio.sleep(0)
    assert offsets(rt, "g") == [(t0 + 5_000, 2)]
    await stop(rt, flusher)


async def test_a_left_over_partition_emptied_by_retention_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody writes a left-over partition: once its retention emptied it, its holder
    closes it and removes its directory; a crash in the middle of the removal leaves a
    name the next start removes (it holds no left-over partition then)."""
    clock = Clock()
    t0 = clock.now
    for p in (1, 2):  # workers 1 and 2 of an earlier run
        earlier, flusher = await runtime(tmp_path, clock, p)
        await call(earlier, offset_commit.API_KEY, 8, commit(f"g{p}", p))
        await stop(earlier, flusher)
    partition_dir = tmp_path / f"{HISTORY_TOPIC}-1"
    assert partition_dir.is_dir()

    clock.now = t0 + 5_000
    rt, flusher = await runtime(tmp_path, clock, 0)
    assert rt.older_history is not None
    assert [h.partition for h in rt.older_history.logs] == [1, 2]
    rt.retain_history()  # within the retention: kept
    for _ in range(20):
        await asyncio.sleep(0)
    assert partition_dir.is_dir() and len(rt.older_history.logs) == 2
    assert offsets(rt, "g1") == [(t0, 1)]
    await stop(rt, flusher)

    clock.now = t0 + 12_000  # past the 10 s retention: both left-over partitions empty
    rt, flusher = await runtime(tmp_path, clock, 0)
    real_rmtree = shutil.rmtree

    def crash_on_2(path: str | Path, *a: Any, **k: Any) -> None:
        if Path(path).name.startswith(f"{HISTORY_TOPIC}-2."):
            raise OSError(5, "Input/output error (as a crash after the rename)")
        real_rmtree(path, *a, **k)

    monkeypatch.setattr(shutil, "rmtree", crash_on_2)
    rt.retain_history()
    assert rt.older_history is not None
    async with asyncio.timeout(5):
        while rt.older_history.logs:
            await asyncio.sleep(0)
    assert not partition_dir.exists()
    assert not (tmp_path / f"{HISTORY_TOPIC}-2").exists()
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(HISTORY_TOPIC)]
    assert sorted(left) == [f"{HISTORY_TOPIC}-0", f"{HISTORY_TOPIC}-2.expired-delete"]
    assert offsets(rt, "g1") == []  # still readable: nothing left of it
    await stop(rt, flusher)
    monkeypatch.undo()

    rt, flusher = await runtime(tmp_path, clock, 0)  # the next start finishes the removal
    assert rt.older_history is not None and rt.older_history.logs == []
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(HISTORY_TOPIC)]
    assert left == [f"{HISTORY_TOPIC}-0"]
    await stop(rt, flusher)
