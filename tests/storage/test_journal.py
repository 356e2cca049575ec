"""The shared write-ahead journal: one fsync per round, and batches restored after a power cut."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from storage.local.durability import Flusher, FlushError
from storage.local.log import LogConfig
from storage.local.manager import LogManager
from storage.record_batch import Record, iter_record_tuples

JOURNALED = LogConfig(journaled=True, cleanup_policy="compact")


def values(log: object) -> list[bytes | None]:
    out = []
    for _h, batch in log.iter_batches(0):  # type: ignore[attr-defined]
        out.extend(v for _o, _t, _k, v in iter_record_tuples(batch))
    return out


def power_cut(log_dir: Path, keep_bytes: int) -> None:
    """What a power cut does to data that was never fsynced: the segment tail is gone."""
    seg = sorted(log_dir.glob("*.log"))[-1]
    os.truncate(seg, keep_bytes)


async def test_one_journal_fsync_covers_every_partition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"fsync": 0, "fdatasync": 0}
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def fsync(fd: int) -> None:
        calls["fsync"] += 1
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        calls["fdatasync"] += 1
        real_fdatasync(fd)

    flusher = Flusher()
    logs = LogManager(tmp_path, flusher=flusher)
    parts = [logs.get_or_create("__consumer_offsets", p, JOURNALED) for p in range(20)]
    # Warm up: the journal's first file is created (and its directory fsynced) once.
    _, last = parts[0].append_records([(b"w", b"0")], timestamp_ms=1)
    await flusher.wait_durable(parts[0], last)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    targets = []
    for i, log in enumerate(parts):
        _, last = log.append_records([(b"k", str(i).encode())], timestamp_ms=1)
        targets.append((log, last))
    await flusher.wait_durable_many(targets)
    assert all(log.durable_end > last for log, last in targets)
    assert calls["fdatasync"] == 1  # the journal, once, for all twenty partitions
    assert calls["fsync"] == 0  # no segment was fsynced on the commit path
    await flusher.stop()
    logs.close_all()


async def test_power_cut_after_acknowledgement_is_repaired_from_the_journal(tmp_path: Path) -> None:
    flusher = Flusher()
    logs = LogManager(tmp_path, flusher=flusher)
    log = logs.get_or_create("__consumer_offsets", 3, JOURNALED)
    log.append_records([(b"a", b"1")], timestamp_ms=1)
    log.flush()  # the segment holds the first batch durably
    durable_bytes = log.active_segment.size
    _, last = log.append_records([(b"b", b"2"), (b"c", b"3")], timestamp_ms=2)
    await flusher.wait_durable(log, last)  # acknowledged: durable in the journal only
    assert log.recovery_point <= last
    # Crash without a clean close, and lose the unsynced segment tail.
    log.close_without_marker()
    power_cut(tmp_path / "__consumer_offsets-3", durable_bytes)
    reopened = LogManager(tmp_path)
    reopened.open_all(lambda t, p: JOURNALED)
    restored = reopened.get("__consumer_offsets", 3)
    assert restored is not None
    assert values(restored) == [b"1", b"2", b"3"]
    assert restored.log_end_offset == 3
    assert reopened.journal.files() == []  # replayed batches are in the segments now, fsynced
    reopened.close_all()


async def test_torn_journal_record_is_ignored(tmp_path: Path) -> None:
    flusher = Flusher()
    logs = LogManager(tmp_path, flusher=flusher)
    log = logs.get_or_create("__consumer_offsets", 0, JOURNALED)
    _, last = log.append_records([(b"a", b"1")], timestamp_ms=1)
    await flusher.wait_durable(log, last)
    log.append_records([(b"b", b"2")], timestamp_ms=1)  # written, never synced
    log.close_without_marker()
    (jnl,) = logs.journal.files()
    data = jnl.read_bytes()
    jnl.write_bytes(data[:-5])  # the second record is torn
    power_cut(tmp_path / "__consumer_offsets-0", 0)
    reopened = LogManager(tmp_path)
    reopened.open_all(lambda t, p: JOURNALED)
    restored = reopened.get("__consumer_offsets", 0)
    assert restored is not None and values(restored) == [b"1"]
    reopened.close_all()


async def test_rotation_drops_old_files_once_segments_are_fsynced(tmp_path: Path) -> None:
    flusher = Flusher()
    logs = LogManager(tmp_path, flusher=flusher)
    logs.journal.max_bytes = 2000
    log = logs.get_or_create("__consumer_offsets", 1, JOURNALED)
    for i in range(40):
        _, last = log.append_records([(b"k%d" % i, b"v" * 100)], timestamp_ms=1)
        await flusher.wait_durable(log, last)
    files = logs.journal.files()
    assert len(files) == 1  # older files were checkpointed away
    assert sum(f.stat().st_size for f in files) < 4000
    assert log.recovery_point > 0  # the checkpoint fsynced the segments
    await flusher.stop()
    logs.close_all()
    assert LogManager(tmp_path).journal.files() == []  # a clean close leaves no journal


async def test_unjournaled_logs_are_not_written_to_the_journal(tmp_path: Path) -> None:
    flusher = Flusher()
    logs = LogManager(tmp_path, flusher=flusher)
    log = logs.get_or_create("orders", 0, LogConfig())
    _, last = log.append_records([(b"k", b"v")], timestamp_ms=1)
    await asyncio.wait_for(flusher.wait_durable(log, last), 5)
    assert log.recovery_point > last
    assert logs.journal.files() == []
    await flusher.stop()
    logs.close_all()


async def test_a_journal_sync_that_cannot_start_fails_its_waiters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With every file descriptor taken, dup() of the journal fails before the fdatasync can
    # run. The waiters must get an error (the commit is answered), not wait forever, and the
    # next round must sync what the failed one could not.
    flusher = Flusher()
    logs = LogManager(tmp_path, flusher=flusher)
    log = logs.get_or_create("__consumer_offsets", 1, JOURNALED)
    _, last = log.append_records([(b"a", b"1")], timestamp_ms=1)
    real_dup = os.dup

    def no_fds(fd: int) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "dup", no_fds)
    with pytest.raises(FlushError):
        await asyncio.wait_for(flusher.wait_durable(log, last), timeout=10)
    monkeypatch.setattr(os, "dup", real_dup)
    _, last = log.append_records([(b"b", b"2")], timestamp_ms=2)
    await asyncio.wait_for(flusher.wait_durable(log, last), timeout=10)
    assert log.durable_end > last
    await flusher.stop()
    logs.close_all()


# A journal file as kgc wrote it before carried records existed (main a3e3592): two batches
# of __consumer_offsets-0 (b"v1"; b"v2", b"v3") and two of __kgc_group_history-0
# (b"history-1", b"history-2"), fdatasynced, the segments never written back.
OLD_JOURNAL = Path(__file__).parent / "data" / "journal-before-carried.jnl"


async def test_a_journal_file_written_before_carried_records_still_replays(
    tmp_path: Path,
) -> None:
    logs = LogManager(tmp_path)
    logs.get_or_create("__consumer_offsets", 0, JOURNALED)
    logs.get_or_create("__kgc_group_history", 0, HISTORY)
    logs.close_all()
    (tmp_path / "journal" / OLD_JOURNAL.name).write_bytes(OLD_JOURNAL.read_bytes())
    reopened = LogManager(tmp_path)
    reopened.open_all(lambda t, p: JOURNALED if t == "__consumer_offsets" else HISTORY)
    offsets, history = reopened.get("__consumer_offsets", 0), reopened.get("__kgc_group_history", 0)
    assert offsets is not None and history is not None
    assert values(offsets) == [b"v1", b"v2", b"v3"]
    assert values(history) == [b"history-1", b"history-2"]
    assert reopened.journal.files() == []
    reopened.close_all()


HISTORY = LogConfig(journaled=True)


async def test_carried_values_replay_at_the_log_end_once_and_a_gap_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A carried record (``Journal.carry``: a value journaled, not in the log) comes back at
    start-up when its offset is the log end, is skipped when the log holds it already (its
    owner appended it as part of a batch), and a gap before one is one error line."""
    flusher = Flusher()
    logs = LogManager(tmp_path, flusher=flusher)
    log = logs.get_or_create("__kgc_group_history", 0, HISTORY)
    other = logs.get_or_create("__kgc_group_history", 1, HISTORY)
    journal = logs.journal
    assert journal.carry(log, 0, 10, b"a") and journal.carry(log, 1, 20, b"b")
    # Its owner appended the first two as one batch (journaled too), then carried a third.
    log.append_records([Record(0, 0, None, b"a"), Record(1, 10, None, b"b")], timestamp_ms=10)
    assert journal.carry(log, 2, 30, b"c")
    assert journal.carry(other, 5, 40, b"x")  # offsets 0..4 of it are nowhere
    errors: dict[object, BaseException] = {}
    await journal.sync(errors)  # type: ignore[arg-type]
    assert not errors and log.durable_end == 3 and other.durable_end == 6
    for plog in (log, other):
        plog.close_without_marker()
    journal.close()
    logs.release_lock()
    power_cut(tmp_path / "__kgc_group_history-0", 0)  # the segment's page cache is lost

    reopened = LogManager(tmp_path)
    with caplog.at_level("ERROR", logger="storage.local.journal"):
        reopened.open_all(lambda t, p: HISTORY)
    restored = reopened.get("__kgc_group_history", 0)
    assert restored is not None
    assert values(restored) == [b"a", b"b", b"c"]  # each once
    assert [h.max_timestamp for h, _ in restored.iter_batches(0)] == [10, 20, 30]
    gap = reopened.get("__kgc_group_history", 1)
    assert gap is not None and gap.log_end_offset == 0
    assert [r.getMessage() for r in caplog.records] == [
        "journal 00000000000000000001.jnl: __kgc_group_history-1 is missing offsets 0..4; cannot restore past the gap"
    ]
    reopened.close_all()
