from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any as FakeClock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.local.cleaner import LogCleaner, SimulatedCrash
from storage.local.log import LogConfig, PartitionLog
from storage.record_batch import Record, decode_records, encode_batch, parse_header

DAY = 86_400_000
CFG = LogConfig(
    cleanup_policy="compact",
    segment_bytes=600,
    index_interval_bytes=100,
    delete_retention_ms=DAY,
    min_cleanable_dirty_ratio=0.5,
)

Entry = tuple[int, int, bytes | None, bytes | None]  # offset, timestamp, key, value


def contents(log: PartitionLog) -> list[Entry]:
    out = []
    for h, data in log.iter_batches():
        for r in decode_records(data):
            out.append(
                (
                    h.base_offset + r.offset_delta,
                    h.base_timestamp + r.timestamp_delta,
                    r.key,
                    r.value,
                )
            )
    return out


def latest(entries: list[Entry]) -> dict[bytes | None, tuple[int, bytes | None]]:
    d: dict[bytes | None, tuple[int, bytes | None]] = {}
    for off, _ts, k, v in entries:
        d[k] = (off, v)
    return d


def assert_compaction_ok(
    before: list[Entry], after: list[Entry], keep_tombstones: bool = True
) -> None:
    by_offset = {e[0]: e for e in before}
    # Survivors keep offset, timestamp, key and value.
    for e in after:
        assert by_offset[e[0]] == e
    lb, la = latest(before), latest(after)
    for k, (off, v) in lb.items():
        if v is None and not keep_tombstones:
            assert k not in la or la[k] == (off, v)
        else:
            assert la[k] == (off, v), k
    assert [e[0] for e in after] == sorted(e[0] for e in after)


def write(
    log: PartitionLog, ops: list[tuple[bytes, bytes | None]], per_batch: int, ts: int
) -> None:
    for i in range(0, len(ops), per_batch):
        log.append_records(ops[i : i + per_batch], timestamp_ms=ts)


def test_compaction_keeps_latest_per_key(tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog(tmp_path / "c-0", CFG, clock)
    ops = [(b"k%d" % (i % 7), b"v%d" % i) for i in range(200)]
    write(log, ops, 3, clock.now)
    before = contents(log)
    cleaner = LogCleaner(log)
    assert cleaner.needs_cleaning()
    cleaner.clean_all()
    after = contents(log)
    assert_compaction_ok(before, after)
    assert log.log_end_offset == 200
    # Inside the cleaned range (all but the active segment) keys are unique.
    active_base = log.active_segment.base_offset
    cleaned_keys = [k for off, _, k, _ in after if off < active_base]
    assert len(cleaned_keys) == len(set(cleaned_keys))
    assert len(after) < len(before) / 3
    assert not cleaner.needs_cleaning()
    # Reads at removed offsets land on the next surviving batch.
    data = log.read(1, 1 << 20)
    assert parse_header(data).base_offset >= 1
    assert log.append_records([(b"k0", b"again")]) == (200, 200)
    log.close()
    reopened = PartitionLog(tmp_path / "c-0", CFG, clock)
    assert contents(reopened)[:-1] == after


def test_batches_keep_producer_fields_and_offsets(tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog(tmp_path / "c-0", CFG, clock)
    log.append(
        encode_batch(
            0,
            [(b"a", b"1"), (b"b", b"2"), (b"a", b"3")],
            timestamp_ms=50,
            producer_id=77,
            producer_epoch=3,
            base_sequence=10,
        )
    )
    log.roll()
    log.append_records([(b"z", b"z")])
    LogCleaner(log).clean_all()
    [(h, data)] = list(log.iter_batches())[:1]
    assert (h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence) == (0, 77, 3, 10)
    assert [(r.offset_delta, r.key, r.value) for r in decode_records(data)] == [
        (1, b"b", b"2"),
        (2, b"a", b"3"),
    ]
    assert h.last_offset == 2


def test_emptied_batches_disappear(tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog(tmp_path / "c-0", CFG, clock)
    for i in range(10):
        log.append_records([(b"same", b"%d" % i)])
    log.roll()
    log.append_records([(b"other", b"x")])
    LogCleaner(log).clean_all()
    assert [h.base_offset for h, _ in log.iter_batches()] == [9, 10]


def test_tombstones_survive_delete_retention_then_go(tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog(tmp_path / "c-0", CFG, clock)
    write(log, [(b"a", b"1"), (b"b", b"1")], 1, clock.now)
    write(log, [(b"a", None)], 1, clock.now + 5)
    log.roll()
    log.append_records([(b"c", b"1")])
    cleaner = LogCleaner(log)
    cleaner.clean_all()
    after = contents(log)
    assert [(o, k, v) for o, _, k, v in after] == [
        (1, b"b", b"1"),
        (2, b"a", None),
        (3, b"c", b"1"),
    ]
    # Record timestamps survive the delete-horizon stamping.
    assert after[1][1] == clock.now + 5
    tomb_batch = next(h for h, _ in log.iter_batches() if h.base_offset == 2)
    assert tomb_batch.delete_horizon_ms == clock.now + DAY
    clock.advance(DAY - 1)
    assert not cleaner.needs_cleaning()
    cleaner.clean_all()
    assert (2, b"a", None) in [(o, k, v) for o, _, k, v in contents(log)]
    clock.advance(1)
    assert cleaner.needs_cleaning()  # horizon passed, even with nothing dirty
    cleaner.clean_all()
    assert [(o, k, v) for o, _, k, v in contents(log)] == [(1, b"b", b"1"), (3, b"c", b"1")]
    assert cleaner.stats.tombstones_dropped == 1


def test_steps_are_bounded(tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog(tmp_path / "c-0", CFG, clock)
    write(log, [(b"k%d" % (i % 13), b"v" * 20) for i in range(400)], 2, clock.now)
    before = contents(log)
    cleaner = LogCleaner(log)
    biggest = max(parse_header(d).size for _, d in log.iter_batches())
    running = cleaner.clean_step(150, force=True)
    steps = 0
    while running:
        read_before = cleaner.stats.bytes_read
        running = cleaner.clean_step(150)
        assert cleaner.stats.bytes_read - read_before <= 150 + biggest
        steps += 1
    assert steps > 10
    assert_compaction_ok(before, contents(log))


def test_pass_abandoned_when_retention_removes_segments(tmp_path: Path, clock: FakeClock) -> None:
    cfg = LogConfig(cleanup_policy="compact,delete", segment_bytes=600, retention_ms=-1)
    log = PartitionLog(tmp_path / "c-0", cfg, clock)
    write(log, [(b"k%d" % (i % 5), b"v" * 20) for i in range(100)], 2, clock.now)
    cleaner = LogCleaner(log)
    assert cleaner.clean_step(100, force=True)
    log.delete_segments_before(log.segments[2].base_offset)
    while cleaner.clean_step(100):
        pass
    assert cleaner.stats.aborted_passes == 1
    assert not list(log.dir.glob("*.cleaned"))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"]),
            st.none() | st.binary(max_size=40),
        ),
        min_size=1,
        max_size=150,
    ),
    per_batch=st.integers(1, 6),
    step=st.sampled_from([64, 300, 1 << 20]),
    passes=st.integers(1, 3),
)
def test_compaction_property(
    tmp_path_factory: pytest.TempPathFactory,
    clock: FakeClock,
    ops: list[tuple[bytes, bytes | None]],
    per_batch: int,
    step: int,
    passes: int,
) -> None:
    d = tmp_path_factory.mktemp("prop") / "c-0"
    log = PartitionLog(d, CFG, clock)
    write(log, ops, per_batch, clock.now)
    log.roll()
    log.append_records([(b"end", b"end")])
    before = contents(log)
    cleaner = LogCleaner(log)
    for _ in range(passes):
        cleaner.clean_all(step)
        assert_compaction_ok(before, contents(log))
    # Past the horizon tombstones may go, but live values never change.
    clock.advance(DAY)
    cleaner.clean_all(step)
    after = contents(log)
    assert_compaction_ok(before, after, keep_tombstones=False)
    assert not any(v is None for _, _, _, v in after)
    log.close()
    assert contents(PartitionLog(d, CFG, clock)) == after


def _build_for_crash(d: Path, clock: FakeClock) -> PartitionLog:
    log = PartitionLog(d, CFG, clock)
    ops: list[tuple[bytes, bytes | None]] = [(b"k%d" % (i % 6), b"v%d" % i) for i in range(120)]
    ops[50] = (b"k2", None)
    write(log, ops, 3, clock.now)
    log.roll()
    log.append_records([(b"tail", b"t")])
    log.flush()
    return log


@pytest.mark.parametrize("step", [1, 2, 3, 4, 5])
def test_crash_at_each_swap_step(tmp_path: Path, clock: FakeClock, step: int) -> None:
    ref = _build_for_crash(tmp_path / "ref" / "c-0", clock)
    original = contents(ref)
    LogCleaner(ref).clean_all()
    cleaned = contents(ref)

    log = _build_for_crash(tmp_path / "crash" / "c-0", clock)
    cleaner = LogCleaner(log)
    cleaner.crash_after_step = step
    with pytest.raises(SimulatedCrash):
        cleaner.clean_all()
    leftovers = {p.suffix for p in log.dir.iterdir()}
    assert {".cleaned", ".swap"} & leftovers or step == 5
    log.close_without_marker()

    reopened = PartitionLog(log.dir, CFG, clock)
    got = contents(reopened)
    assert not [p for p in reopened.dir.iterdir() if p.suffix in (".cleaned", ".swap", ".swapinfo")]
    assert_compaction_ok(original, got)
    first_group_end = got and max(o for o, *_ in got)
    assert first_group_end
    if step <= 2:
        assert got == original  # not committed: old segments untouched
    else:
        # Committed: the first group is swapped, the rest untouched.
        assert set(got) >= set(cleaned)
        assert set(got) <= set(original)
        assert len(got) < len(original)
    assert reopened.append_records([(b"x", b"y")])[0] == original[-1][0] + 1
    # A fresh cleaner finishes the job to the same result as an uninterrupted one.
    LogCleaner(reopened).clean_all()
    assert contents(reopened)[:-1] == cleaned


def test_crash_with_partial_cleaned_file(tmp_path: Path, clock: FakeClock) -> None:
    log = _build_for_crash(tmp_path / "c-0", clock)
    original = contents(log)
    cleaner = LogCleaner(log)
    running = cleaner.clean_step(100, force=True)
    while running and not list(log.dir.glob("*.cleaned")):
        running = cleaner.clean_step(100)
    assert list(log.dir.glob("*.cleaned"))
    log.close_without_marker()
    reopened = PartitionLog(log.dir, CFG, clock)
    assert contents(reopened) == original
    assert not list(reopened.dir.glob("*.cleaned"))


def test_keyless_records_are_dropped_like_kafka(tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog(tmp_path / "c-0", CFG, clock)
    log.append(
        encode_batch(0, [Record(0, 0, None, b"x"), Record(1, 0, b"k", b"v")], timestamp_ms=1)
    )
    log.roll()
    log.append_records([(b"k2", b"v")])
    LogCleaner(log).clean_all()
    assert [(o, k) for o, _, k, _ in contents(log)] == [(1, b"k"), (2, b"k2")]
    shutil.rmtree(log.dir)
