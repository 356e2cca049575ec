from __future__ import annotations

from pathlib import Path
from typing import Any as FakeClock

from storage.durability import Flusher
from storage.log import CLEAN_SHUTDOWN_FILE, LogConfig
from storage.manager import LogManager, parse_partition_dir


def test_parse_partition_dir() -> None:
    assert parse_partition_dir("__consumer_offsets-7") == ("__consumer_offsets", 7)
    assert parse_partition_dir("my.topic-with-dashes-12") == ("my.topic-with-dashes", 12)
    assert parse_partition_dir("t-0.abcdef-delete") is None
    assert parse_partition_dir("nodash") is None
    assert parse_partition_dir(".hidden-1") is None
    assert parse_partition_dir("t-x") is None


async def test_lifecycle(tmp_path: Path, clock: FakeClock) -> None:
    flusher = Flusher(clock)
    mgr = LogManager(tmp_path, clock, flusher)
    offsets_cfg = LogConfig(cleanup_policy="compact", segment_bytes=100 << 20)
    o3 = mgr.get_or_create("__consumer_offsets", 3, offsets_cfg)
    assert (tmp_path / "__consumer_offsets-3").is_dir()
    assert mgr.get_or_create("__consumer_offsets", 3) is o3
    t0 = mgr.get_or_create("orders", 0)
    t1 = mgr.get_or_create("orders", 1)
    _b, last = o3.append_records([(b"k", b"v")])
    await flusher.wait_durable(o3, last)
    t0.append_records([(b"a", b"b")] * 4)
    t1.append_records([(b"a", b"b")])
    assert mgr.partitions() == [("__consumer_offsets", 3), ("orders", 0), ("orders", 1)]
    assert mgr.get("orders", 2) is None
    await flusher.stop()
    mgr.close_all()
    assert (tmp_path / "orders-0" / CLEAN_SHUTDOWN_FILE).exists()

    mgr2 = LogManager(tmp_path, clock)
    opened = mgr2.open_all(lambda topic, _p: offsets_cfg if topic.startswith("__") else LogConfig())
    assert len(opened) == 3
    o3b = mgr2.get("__consumer_offsets", 3)
    assert o3b is not None and o3b.config.compact and o3b.log_end_offset == 1
    t0b = mgr2.get("orders", 0)
    assert t0b is not None and t0b.log_end_offset == 4
    assert mgr2.delete_topic("orders") == 2
    assert not (tmp_path / "orders-0").exists() and mgr2.partitions() == [("__consumer_offsets", 3)]
    mgr2.close_all()


def test_open_all_removes_half_deleted_and_skips_junk(tmp_path: Path, clock: FakeClock) -> None:
    (tmp_path / "orders-0.0123abcd-delete").mkdir()
    (tmp_path / "orders-0.0123abcd-delete" / "00000000000000000000.log").write_bytes(b"")
    (tmp_path / "not-a-partition").mkdir()
    (tmp_path / "file-0").write_text("x")
    mgr = LogManager(tmp_path, clock)
    assert mgr.open_all() == []
    assert not (tmp_path / "orders-0.0123abcd-delete").exists()


def test_crash_recovery_through_manager(tmp_path: Path, clock: FakeClock) -> None:
    mgr = LogManager(tmp_path, clock)
    log = mgr.get_or_create("t", 0)
    log.append_records([(b"k", b"v")] * 3)
    log.close_without_marker()
    mgr2 = LogManager(tmp_path, clock)
    [reopened] = mgr2.open_all()
    assert reopened.log_end_offset == 3
