"""Short writes, ENOSPC and failed fsyncs injected at the OS boundary of the storage layer.

``DiskFaults`` replaces ``os.pwrite`` / ``os.write`` / ``os.fsync`` / ``os.fdatasync`` for the
duration of a test and fails only the descriptors whose file name matches: a write may be let
through partly (a short write, as a nearly full disk does) and then fail with ENOSPC; an fsync
may fail with EIO. Every test then checks the storage contract: an append either stands
whole or raises with the log exactly as before; a failed fsync fails every waiter of that log
and cuts it back to its durable end; the next append works once the fault is gone; and a
reopen (with and without the clean-shutdown marker) finds every acknowledged batch.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path

import pytest
from support.faultkit import report

from storage.local.durability import Flusher, FlushError
from storage.local.log import LogConfig, PartitionLog
from storage.local.manager import LogManager
from storage.record_batch import iter_record_tuples

JOURNALED = LogConfig(journaled=True, cleanup_policy="compact")


class DiskFaults:
    """Fails writes / fsyncs of descriptors whose path contains a given string."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._lock = threading.Lock()
        self.write_match: str | None = None
        self.write_budget = 0  # bytes still accepted before ENOSPC
        self.sync_match: str | None = None
        self.writes_failed = 0
        self.syncs_failed = 0
        self._pwrite, self._write = os.pwrite, os.write
        self._fsync, self._fdatasync = os.fsync, os.fdatasync
        monkeypatch.setattr(os, "pwrite", self.pwrite)
        monkeypatch.setattr(os, "write", self.write)
        monkeypatch.setattr(os, "fsync", self.fsync)
        monkeypatch.setattr(os, "fdatasync", self.fdatasync)

    def fill(self, match: str, budget: int = 0) -> None:
        """Writes to files named like ``match``: ``budget`` more bytes, then ENOSPC."""
        self.write_match, self.write_budget = match, budget

    def break_fsync(self, match: str) -> None:
        self.sync_match = match

    def heal(self) -> None:
        self.write_match = self.sync_match = None

    @staticmethod
    def _name(fd: int) -> str:
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return ""

    def _allow(self, fd: int, n: int) -> int:
        with self._lock:
            if self.write_match is None or self.write_match not in self._name(fd):
                return n
            if self.write_budget <= 0:
                self.writes_failed += 1
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
            allowed = min(n, self.write_budget)
            self.write_budget -= allowed
            return allowed

    def pwrite(self, fd: int, data: bytes | memoryview, pos: int) -> int:
        n = self._allow(fd, len(data))
        return self._pwrite(fd, memoryview(data)[:n], pos)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        n = self._allow(fd, len(data))
        return self._write(fd, memoryview(data)[:n])

    def _sync(self, fd: int, real: object) -> None:
        if self.sync_match is not None and self.sync_match in self._name(fd):
            with self._lock:
                self.syncs_failed += 1
            raise OSError(errno.EIO, "Input/output error (injected)")
        real(fd)  # type: ignore[operator]

    def fsync(self, fd: int) -> None:
        self._sync(fd, self._fsync)

    def fdatasync(self, fd: int) -> None:
        self._sync(fd, self._fdatasync)


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> DiskFaults:
    return DiskFaults(monkeypatch)


def values(log: PartitionLog) -> list[bytes | None]:
    out: list[bytes | None] = []
    for _h, batch in log.iter_batches(0):
        out.extend(v for _o, _t, _k, v in iter_record_tuples(batch))
    return out


def seg_size(d: Path) -> int:
    return sorted(d.glob("*.log"))[-1].stat().st_size


@pytest.mark.parametrize("where", [".log", ".index"])
@pytest.mark.parametrize("marker", [True, False])
def test_short_write_is_cut_back_and_the_next_append_works(
    tmp_path: Path, faults: DiskFaults, where: str, marker: bool
) -> None:
    d = tmp_path / "t-0"
    # index_interval_bytes=0: every batch also writes an index entry.
    cfg = LogConfig(index_interval_bytes=0)
    log = PartitionLog(d, cfg)
    acked = [b"v%d" % i for i in range(5)]
    for v in acked:
        log.append_records([(b"k", v)])
    log.flush()
    size, end = seg_size(d), log.log_end_offset
    budget = 10 if where == ".log" else 4  # part of the batch / index entry, then full
    faults.fill(where, budget=budget)
    with pytest.raises(OSError) as exc:
        log.append_records([(b"k", b"lost" * 50)])
    assert exc.value.errno == errno.ENOSPC
    assert seg_size(d) == size and log.log_end_offset == end
    assert log.active_segment.size == size
    faults.heal()
    base, _ = log.append_records([(b"k", b"after")])
    assert base == end
    acked.append(b"after")
    log.flush()
    assert values(log) == acked
    if marker:
        log.close()
    else:
        log.close_without_marker()
    reopened = PartitionLog(d, cfg)
    got = values(reopened)
    lost = sum(1 for v in acked if v not in got)
    assert got == acked
    reopened.append_records([(b"k", b"next")])
    assert values(reopened) == [*acked, b"next"]
    reopened.close()
    report(
        f"short write to {where} (marker={marker})",
        injected=f"{budget}-byte short write then ENOSPC on {where}",
        verified="append raised, file and log end unchanged, next append and reopen read all",
        lost=lost,
    )


async def test_enospc_on_the_journal_cuts_back_segment_and_journal(
    tmp_path: Path, faults: DiskFaults
) -> None:
    flusher = Flusher()
    logs = LogManager(tmp_path, flusher=flusher)
    log = logs.get_or_create("__consumer_offsets", 0, JOURNALED)
    d = tmp_path / "__consumer_offsets-0"
    _, last = log.append_records([(b"a", b"1")], timestamp_ms=1)
    await flusher.wait_durable(log, last)
    (jnl,) = logs.journal.files()
    jsize, size, end = jnl.stat().st_size, seg_size(d), log.log_end_offset
    faults.fill(".jnl", budget=7)
    with pytest.raises(OSError):
        log.append_records([(b"b", b"2")], timestamp_ms=1)
    assert (jnl.stat().st_size, seg_size(d), log.log_end_offset) == (jsize, size, end)
    faults.heal()
    _, last = log.append_records([(b"c", b"3")], timestamp_ms=1)
    await flusher.wait_durable(log, last)
    assert values(log) == [b"1", b"3"]
    # Crash and lose every segment byte: the journal alone must give back what was acked.
    log.close_without_marker()
    os.truncate(sorted(d.glob("*.log"))[-1], 0)
    reopened = LogManager(tmp_path)
    reopened.open_all(lambda t, p: JOURNALED)
    restored = reopened.get("__consumer_offsets", 0)
    assert restored is not None and values(restored) == [b"1", b"3"]
    reopened.close_all()
    report(
        "ENOSPC on the journal",
        injected="7-byte short write then ENOSPC on the journal file",
        verified="append raised; journal, segment and log end unchanged; replay gives 1, 3",
    )


async def test_failed_fsync_fails_waiters_and_cuts_back_to_the_durable_end(
    tmp_path: Path, faults: DiskFaults
) -> None:
    d = tmp_path / "t-0"
    log = PartitionLog(d, LogConfig())
    flusher = Flusher()
    cut: list[tuple[str, int]] = []
    log.on_cut_back.append(lambda lg, end: cut.append((lg.dir.name, end)))
    _, last = log.append_records([(b"k", b"durable")])
    await flusher.wait_durable(log, last)
    size, end = seg_size(d), log.log_end_offset
    faults.break_fsync(".log")
    _, last = log.append_records([(b"k", b"never-durable")])
    with pytest.raises(FlushError) as exc:
        await flusher.wait_durable(log, last)
    assert exc.value.log is log and exc.value.truncated_to == end
    assert cut == [("t-0", end)]
    # The page cache is not trusted after a failed fsync: the log is back at its durable end.
    assert log.log_end_offset == end and seg_size(d) == size
    assert values(log) == [b"durable"]
    faults.heal()
    base, last = log.append_records([(b"k", b"after")])
    assert base == end
    await flusher.wait_durable(log, last)
    await flusher.stop()
    log.close_without_marker()
    assert values(PartitionLog(d, LogConfig())) == [b"durable", b"after"]
    report(
        "failed fsync of a topic log",
        injected="EIO from fsync of the segment",
        verified="waiter got FlushError, log cut back to its durable end, next append durable",
    )


async def test_failed_journal_sync_cuts_every_covered_log_back(
    tmp_path: Path, faults: DiskFaults
) -> None:
    flusher = Flusher()
    logs = LogManager(tmp_path, flusher=flusher)
    parts = [logs.get_or_create("__consumer_offsets", p, JOURNALED) for p in range(3)]
    for i, log in enumerate(parts):
        _, last = log.append_records([(b"a", b"%d" % i)], timestamp_ms=1)
        await flusher.wait_durable(log, last)
    (jnl,) = logs.journal.files()
    jsize = jnl.stat().st_size
    ends = [log.log_end_offset for log in parts]
    faults.break_fsync(".jnl")
    waits = []
    for log in parts:
        _, last = log.append_records([(b"b", b"lost")], timestamp_ms=1)
        waits.append(asyncio.ensure_future(flusher.wait_durable(log, last)))
    results = await asyncio.gather(*waits, return_exceptions=True)
    assert all(isinstance(r, FlushError) for r in results), results
    assert [log.log_end_offset for log in parts] == ends
    assert jnl.stat().st_size == jsize  # the unsynced records are gone from the journal
    faults.heal()
    for log in parts:
        _, last = log.append_records([(b"c", b"ok")], timestamp_ms=1)
        await flusher.wait_durable(log, last)
    for log in parts:
        log.close_without_marker()
        os.truncate(sorted(log.dir.glob("*.log"))[-1], 0)  # power cut: segments lost
    reopened = LogManager(tmp_path)
    reopened.open_all(lambda t, p: JOURNALED)
    for i in range(3):
        restored = reopened.get("__consumer_offsets", i)
        assert restored is not None and values(restored) == [b"%d" % i, b"ok"]
    reopened.close_all()
    report(
        "failed journal fdatasync",
        injected="EIO from fdatasync of the journal",
        verified="every covered log's waiter failed and cut back; replay gives only acked batches",
    )


def test_short_write_during_compaction_abandons_the_pass(
    tmp_path: Path, faults: DiskFaults
) -> None:
    from storage.local.cleaner import LogCleaner

    d = tmp_path / "c-0"
    cfg = LogConfig(cleanup_policy="compact", segment_bytes=400, retention_ms=-1)
    log = PartitionLog(d, cfg)
    for i in range(60):
        log.append_records([(b"k%d" % (i % 5), b"v%d" % i)], timestamp_ms=1)
    log.flush()
    latest = {b"k%d" % (i % 5): b"v%d" % i for i in range(60)}

    def intact() -> bool:
        got = {k: v for _h, b in log.iter_batches(0) for _o, _t, k, v in iter_record_tuples(b)}
        return got == latest

    faults.fill(".cleaned", budget=30)
    with pytest.raises(OSError):
        LogCleaner(log).clean_all()
    # Groups with nothing to keep may have been swapped before; the torn one was not.
    assert not list(d.glob("*.cleaned")) and intact()
    faults.heal()
    LogCleaner(log).clean_all()
    assert intact()
    log.close()
    log = PartitionLog(d, cfg)
    assert intact()
    log.close()
    report(
        "short write while compacting",
        injected="30-byte short write then ENOSPC on the .cleaned file",
        verified="pass abandoned, no .cleaned left, log unchanged; the next pass compacts",
    )
