"""A torn tail is found on every start, even with the clean-shutdown marker present.

The marker says the files were fsynced at shutdown, not that nothing cut or changed them
since. The active segment's tail is CRC-checked on every open: a tail that does not parse is
truncated with a WARNING naming the file, the position and the bytes cut, and new records go
right after the last good batch, so the next start is clean.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.crashkit import committed, read_all_confluent
from support.faultkit import report
from support.groupkit import create_topic
from support.kgc_process import KgcProcess

from storage.local.log import CLEAN_SHUTDOWN_FILE, LogConfig, PartitionLog
from storage.record_batch import iter_record_tuples

CFG = LogConfig(index_interval_bytes=256)


def values(log: PartitionLog) -> list[bytes | None]:
    return [v for _h, b in log.iter_batches(0) for _o, _t, _k, v in iter_record_tuples(b)]


def active_segment(d: Path) -> Path:
    return sorted(d.glob("*.log"))[-1]


@pytest.mark.parametrize("damage", ["cut 5 bytes", "cut into the header", "zeros appended"])
@pytest.mark.parametrize("marker", [True, False])
def test_torn_tail_is_truncated_and_appends_follow_the_last_good_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str, marker: bool
) -> None:
    d = tmp_path / "t-0"
    log = PartitionLog(d, CFG)
    vals = [b"value-%03d" % i * 3 for i in range(40)]
    for v in vals:
        log.append_records([(b"k", v)])
    if marker:
        log.close()
    else:
        log.flush()
        log.close_without_marker()
    seg = active_segment(d)
    size = seg.stat().st_size
    if damage == "cut 5 bytes":
        os.truncate(seg, size - 5)
        kept = vals[:-1]
    elif damage == "cut into the header":
        os.truncate(seg, size - len(vals[-1]) - 40)
        kept = vals[:-1]
    else:
        with open(seg, "ab") as f:  # a write that reached the file only as zeros
            f.write(bytes(300))
        kept = vals
    assert (d / CLEAN_SHUTDOWN_FILE).exists() == marker
    with caplog.at_level(logging.WARNING, logger="storage.local.log"):
        log = PartitionLog(d, CFG)
    warned = [r.getMessage() for r in caplog.records if seg.name in r.getMessage()]
    assert warned and "truncated" in warned[0], caplog.text
    assert values(log) == kept and log.log_end_offset == len(kept)
    base, _ = log.append_records([(b"k", b"after")])
    assert base == len(kept)
    log.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="storage.local.log"):
        log = PartitionLog(d, CFG)
    assert not caplog.records, caplog.text  # the second start is clean
    assert values(log) == [*kept, b"after"]
    log.close()
    report(
        f"torn tail ({damage}, marker={marker})",
        injected=f"{damage} on the active segment after a {'clean' if marker else 'crashed'} stop",
        verified="start truncates with a warning; next append follows the last good batch; "
        "second start clean",
    )


def _produce_one_batch_each(bootstrap: str, topic: str, vals: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for v in vals:
        p.produce(topic, value=v)
        assert p.flush(30) == 0


def _commit(bootstrap: str, group: str, topic: str, offsets: range) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        for o in offsets:
            c.commit(offsets=[TopicPartition(topic, 0, o, f"m{o}")], asynchronous=False)
    finally:
        c.close()


def _committed(bootstrap: str) -> tuple[int, str]:
    (offset, meta) = committed(bootstrap, "g")[0]
    return offset, (meta or "").rstrip("\0")  # the Python client sends a trailing NUL


def _offsets_partition_with_data(data: Path) -> Path:
    dirs = [
        d
        for d in sorted(data.glob("__consumer_offsets-*"))
        if any(s.stat().st_size for s in d.glob("*.log"))
    ]
    assert len(dirs) == 1, dirs
    return dirs[0]


@pytest.mark.integration
@pytest.mark.parametrize("clean", [True, False], ids=["clean-stop", "sigkill"])
def test_torn_tails_of_a_topic_and_the_offsets_log_after_restart(
    tmp_path: Path, clean: bool
) -> None:
    kgc = KgcProcess(tmp_path / "data")
    kgc.start()
    try:
        create_topic(kgc.bootstrap, "torn", 1)
        vals = [b"r%02d" % i for i in range(20)]
        _produce_one_batch_each(kgc.bootstrap, "torn", vals)
        _commit(kgc.bootstrap, "g", "torn", range(1, 11))
        if clean:
            assert kgc.stop() == 0
        else:
            kgc.kill()
        topic_seg = active_segment(tmp_path / "data" / "torn-0")
        offsets_dir = _offsets_partition_with_data(tmp_path / "data")
        offsets_seg = active_segment(offsets_dir)
        assert (topic_seg.parent / CLEAN_SHUTDOWN_FILE).exists() == clean
        for seg in (topic_seg, offsets_seg):
            os.truncate(seg, seg.stat().st_size - 5)  # tear the last batch
        log_mark = len(kgc.log_path.read_bytes()) if kgc.log_path.exists() else 0
        kgc.start()
        text = kgc.log_path.read_bytes()[log_mark:].decode(errors="replace")
        for seg in (topic_seg, offsets_seg):
            assert f"{seg.name}" in text and "truncated" in text, text
        got = [v for _p, _k, v in read_all_confluent(kgc.bootstrap, "torn", 1)]
        assert got == vals[:-1]  # only the torn batch is gone
        # The torn commit (10) is gone after a clean stop; after a crash the journal
        # still holds it and restores it.
        expect = 10 if not clean else 9
        assert _committed(kgc.bootstrap) == (expect, f"m{expect}")
        _produce_one_batch_each(kgc.bootstrap, "torn", [b"after"])
        _commit(kgc.bootstrap, "g", "torn", range(11, 12))
        assert kgc.stop() == 0
        log_mark = len(kgc.log_path.read_bytes())
        kgc.start()
        text = kgc.log_path.read_bytes()[log_mark:].decode(errors="replace")
        assert "truncated" not in text and "Traceback" not in text, text
        got = [v for _p, _k, v in read_all_confluent(kgc.bootstrap, "torn", 1)]
        assert got == [*vals[:-1], b"after"]
        assert _committed(kgc.bootstrap) == (11, "m11")
    finally:
        if kgc.alive():
            kgc.stop()
    report(
        f"torn tails after {'a clean stop' if clean else 'SIGKILL'}",
        injected="last 5 bytes cut from the active segment of torn-0 and of the offsets partition",
        verified="kgc starts and logs the cut; 19 records and the commit before the tear survive; "
        "new produce/commit follow the last good batch; second start clean",
        lost=0,
    )


def test_rot_in_the_checked_tail_is_kept_and_marks_the_log_damaged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from storage.local.log import CorruptLogError
    from storage.record_batch import iter_batches

    d = tmp_path / "t-0"
    log = PartitionLog(d, LogConfig())
    for i in range(10):
        log.append_records([(b"k", b"value-%03d" % i)])
    log.close()
    seg = active_segment(d)
    buf = bytearray(seg.read_bytes())
    _h, start, end = list(iter_batches(bytes(buf)))[-3]  # good batches follow it
    buf[end - 2] ^= 0x01
    seg.write_bytes(bytes(buf))
    with caplog.at_level(logging.WARNING, logger="storage.local.log"):
        log = PartitionLog(d, LogConfig())
    # Not a torn write (the marker vouched for the fsync, good batches follow): nothing
    # acknowledged after it is cut; the partition is marked damaged with file and position.
    assert seg.stat().st_size == len(buf) and log.log_end_offset == 10
    assert log.damaged is not None and f"position {start}" in log.damaged
    assert [r.levelname for r in caplog.records] == ["ERROR"], caplog.text
    with pytest.raises(CorruptLogError):
        log.read(0, 1 << 20)
    assert log.read(8, 1 << 20)  # batches after the bad one still read
    log.close()
    report(
        "rot in the active segment's tail (marker present)",
        injected="one bit flipped in the third-last batch",
        verified="kept (no acknowledged batch cut), log marked damaged, the bad batch never read",
    )
