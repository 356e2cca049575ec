from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any as FakeClock

import pytest

from storage.files import fsync_dir, read_checkpoint, write_checkpoint
from storage.local.durability import Flusher, FlushError
from storage.local.log import RECOVERY_POINT_FILE, LogConfig, PartitionLog


class FsyncCounter:
    """Counts os.fsync calls (from any thread) and can slow or fail them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, delay: float = 0.0) -> None:
        self.calls = 0
        self.delay = delay
        self.fail = False
        self._lock = threading.Lock()
        self._real = os.fsync
        monkeypatch.setattr(os, "fsync", self)

    def __call__(self, fd: int) -> None:
        with self._lock:
            self.calls += 1
        if self.fail:
            raise OSError(5, "simulated EIO")
        if self.delay:
            time.sleep(self.delay)
        self._real(fd)


async def test_group_commit_shares_fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig())
    counter = FsyncCounter(monkeypatch, delay=0.01)
    flusher = Flusher()
    flusher.start()

    async def produce(i: int) -> int:
        await asyncio.sleep((i % 10) * 0.002)  # staggered arrivals
        _base, last = log.append_records([(b"k%d" % i, b"v")])
        await flusher.wait_durable(log, last)
        assert log.recovery_point > last
        return last

    n = 100
    lasts = await asyncio.gather(*(produce(i) for i in range(n)))
    assert sorted(lasts) == list(range(n))
    assert log.recovery_point == n
    assert 1 <= flusher.stats.fsync_count < n / 4
    assert counter.calls < n / 2
    assert flusher.stats.waiters_released == n
    assert flusher.stats.bytes_flushed == log.size_bytes
    assert flusher.stats.last_fsync_latency_ms > 0
    await flusher.stop()
    # The recovery-point checkpoint may lag the fsyncs (rewritten at most once a second).
    assert 0 <= read_checkpoint(log.dir / RECOVERY_POINT_FILE, -1) <= n
    log.close()


async def test_group_commit_across_logs_and_already_durable(tmp_path: Path) -> None:
    logs = [PartitionLog(tmp_path / f"t-{i}", LogConfig()) for i in range(3)]
    flusher = Flusher()
    ends = [log.append_records([(b"k", b"v")] * 5)[1] for log in logs]
    await asyncio.gather(*(flusher.wait_durable(log, e) for log, e in zip(logs, ends, strict=True)))
    assert all(log.recovery_point == 5 for log in logs)
    rounds = flusher.stats.rounds
    await flusher.wait_durable(logs[0], 4)  # already durable: no new round
    assert flusher.stats.rounds == rounds
    with pytest.raises(ValueError):
        await flusher.wait_durable(logs[0], 5)  # not appended yet
    await flusher.stop()


async def test_policy_none_never_fsyncs_until_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(flush_policy="none"))
    other = PartitionLog(tmp_path / "t-1", LogConfig())  # batch policy
    counter = FsyncCounter(monkeypatch)
    flusher = Flusher()
    for i in range(20):
        _b, last = log.append_records([(b"k", b"%d" % i)])
        await flusher.wait_durable(log, last)
    assert counter.calls == 0 and log.recovery_point == 0 and flusher.stats.fsync_count == 0
    # A flusher round that does run (for another log) leaves this one alone.
    _b, last = other.append_records([(b"k", b"v")])
    await flusher.wait_durable(other, last)
    assert other.recovery_point == 1 and flusher.stats.bytes_flushed == other.size_bytes
    assert log.recovery_point == 0
    calls = counter.calls
    log.close()
    assert counter.calls > calls and log.recovery_point == 20
    other.close()
    await flusher.stop()


async def test_policy_interval_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(flush_policy="interval", flush_interval_ms=30))
    FsyncCounter(monkeypatch)
    flusher = Flusher()
    flusher.start()
    _b, last = log.append_records([(b"k", b"v")])
    t0 = time.monotonic()
    await flusher.wait_durable(log, last)
    assert time.monotonic() - t0 < 0.02  # acks do not wait for the disk
    assert log.recovery_point == 0
    for _ in range(100):
        await asyncio.sleep(0.01)
        if log.recovery_point == 1:
            break
    assert log.recovery_point == 1 and flusher.stats.fsync_count == 1
    await flusher.stop()


async def test_policy_interval_messages(tmp_path: Path, clock: FakeClock) -> None:
    cfg = LogConfig(flush_policy="interval", flush_interval_ms=10**9, flush_interval_messages=10)
    log = PartitionLog(tmp_path / "t-0", cfg, clock)
    other = PartitionLog(tmp_path / "t-1", LogConfig(), clock)  # batch policy
    flusher = Flusher(clock)
    flusher.start()
    for _ in range(9):
        _b, last = log.append_records([(b"k", b"v")])
        await flusher.wait_durable(log, last)
    # A round that runs (for another log) looks at every interval log: 9 messages are not due.
    _b, other_last = other.append_records([(b"k", b"v")])
    await flusher.wait_durable(other, other_last)
    assert other.recovery_point == 1
    assert log.recovery_point == 0
    _b, last = log.append_records([(b"k", b"v")])
    await flusher.wait_durable(log, last)
    for _ in range(100):
        await asyncio.sleep(0.005)
        if log.recovery_point == 10:
            break
    assert log.recovery_point == 10
    await flusher.stop()


async def test_fsync_failure_reaches_waiters_and_cuts_the_log_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig())
    counter = FsyncCounter(monkeypatch)
    flusher = Flusher()
    counter.fail = True
    _b, last = log.append_records([(b"k", b"v")])
    with pytest.raises(FlushError) as exc:
        await flusher.wait_durable(log, last)
    # Nothing was durable: the page cache is not trusted, the log is back at 0.
    assert exc.value.log is log and exc.value.truncated_to == 0
    assert log.recovery_point == 0 and log.log_end_offset == 0 and flusher.stats.errors == 1
    counter.fail = False
    gen = log.cut_backs
    _b, last = log.append_records([(b"k", b"v2")])
    await flusher.wait_durable(log, last, generation=gen)
    assert log.recovery_point == 1
    await flusher.stop()


async def test_a_wait_for_an_offset_cut_back_meanwhile_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig())
    counter = FsyncCounter(monkeypatch)
    flusher = Flusher()
    gen = log.cut_backs
    _b, mine = log.append_records([(b"k", b"mine")])
    counter.fail = True
    with pytest.raises(OSError):
        log.flush()  # someone else's flush fails: the log is cut back below ``mine``
    counter.fail = False
    log.append_records([(b"k", b"someone else's")])  # reuses offset 0
    with pytest.raises(FlushError):
        await flusher.wait_durable(log, mine, generation=gen)
    await flusher.stop()


async def test_loop_keeps_serving_during_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig())
    FsyncCounter(monkeypatch, delay=0.1)
    flusher = Flusher()
    _b, last = log.append_records([(b"k", b"v")])
    waiter = asyncio.create_task(flusher.wait_durable(log, last))
    ticks = 0
    while not waiter.done():
        await asyncio.sleep(0.005)
        ticks += 1
    await waiter
    assert ticks >= 5  # the event loop ran while fsync slept in a thread
    await flusher.stop()


def test_checkpoint_and_fsync_dir(tmp_path: Path) -> None:
    p = tmp_path / "cp"
    assert read_checkpoint(p, 7) == 7
    write_checkpoint(p, 123, sync=True)
    assert read_checkpoint(p, 0) == 123
    p.write_text("garbage")
    assert read_checkpoint(p, 5) == 5
    fsync_dir(tmp_path)
    assert not list(tmp_path.glob("*.tmp"))


# -- when_durable: the callback form the offsets runtime uses (no task, no future per log)


class Outcomes:
    """Collects the outcome lists ``when_durable`` hands to its continuation."""

    def __init__(self) -> None:
        self.calls: list[list[BaseException | None]] = []
        self.event = asyncio.Event()

    def __call__(self, outcomes: list[BaseException | None]) -> None:
        self.calls.append(list(outcomes))
        self.event.set()


async def test_when_durable_calls_back_once_after_the_round_for_every_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = [PartitionLog(tmp_path / f"t-{i}", LogConfig()) for i in range(3)]
    FsyncCounter(monkeypatch, delay=0.02)
    flusher = Flusher()
    ends = [log.append_records([(b"k", b"v")] * (i + 1))[1] for i, log in enumerate(logs)]
    got = Outcomes()
    flusher.when_durable(list(zip(logs, ends, strict=True)), got)
    assert got.calls == []  # parked for the round, not settled in the call
    await asyncio.wait_for(got.event.wait(), 5)
    assert got.calls == [[None, None, None]]
    assert all(log.recovery_point > end for log, end in zip(logs, ends, strict=True))
    # Already durable: called before when_durable returns, no new round.
    rounds = flusher.stats.rounds
    again = Outcomes()
    flusher.when_durable([(logs[0], ends[0])], again)
    assert again.calls == [[None]] and flusher.stats.rounds == rounds
    await flusher.stop()
    for log in logs:
        log.close()


async def test_when_durable_with_policy_none_calls_back_at_once(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(flush_policy="none"))
    flusher = Flusher()
    _b, last = log.append_records([(b"k", b"v")])
    got = Outcomes()
    flusher.when_durable([(log, last)], got)
    assert got.calls == [[None]] and log.recovery_point == 0
    await flusher.stop()
    log.close()


async def test_when_durable_fails_only_the_log_whose_fsync_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = PartitionLog(tmp_path / "good-0", LogConfig())
    bad = PartitionLog(tmp_path / "bad-0", LogConfig())
    real = os.fsync
    failing = True

    def fsync(fd: int) -> None:
        if failing and "bad-0" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(5, "simulated EIO")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    _b, g = good.append_records([(b"k", b"v")])
    _b, b = bad.append_records([(b"k", b"v")])
    flusher = Flusher()
    got = Outcomes()
    flusher.when_durable([(good, g), (bad, b), (bad, 7)], got)
    await asyncio.wait_for(got.event.wait(), 5)
    [outcomes] = got.calls
    assert outcomes[0] is None and good.recovery_point == 1
    assert isinstance(outcomes[1], FlushError) and outcomes[1].log is bad
    # A target not appended is that target's error, not an exception out of the call.
    assert isinstance(outcomes[2], ValueError)
    assert bad.log_end_offset == 0  # cut back to its durable end
    failing = False
    await flusher.stop()
    good.close()
    bad.close()


async def test_a_cut_back_fails_only_waiters_parked_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cut-back hook that appends again at once (the offsets runtime rebuilding from the
    log) parks waits for offsets at or above the cut: those are new records, not cut ones."""
    log = PartitionLog(tmp_path / "t-0", LogConfig())
    counter = FsyncCounter(monkeypatch)
    flusher = Flusher()
    _b, first = log.append_records([(b"k", b"v")])
    before = Outcomes()
    flusher.when_durable([(log, first)], before)
    after = Outcomes()

    def append_again(plog: PartitionLog, new_end: int) -> None:
        assert new_end == 0
        counter.fail = False  # the next round's fsync succeeds
        _b, last = plog.append_records([(b"k", b"after the cut")])
        flusher.when_durable([(plog, last)], after)

    log.on_cut_back.insert(0, append_again)  # runs before the flusher's own hook
    counter.fail = True
    await asyncio.wait_for(before.event.wait(), 5)
    assert isinstance(before.calls[0][0], FlushError)
    log.on_cut_back.remove(append_again)
    await asyncio.wait_for(after.event.wait(), 5)
    assert after.calls == [[None]]
    assert log.recovery_point == 1 and log.log_end_offset == 1
    await flusher.stop()
    log.close()
