from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any as FakeClock

import pytest

from storage.local.durability import Flusher
from storage.local.log import CLEAN_SHUTDOWN_FILE, LogConfig
from storage.local.manager import (
    DataDirLockedError,
    LogManager,
    PartitionMetadataError,
    TopicIdMismatchError,
    kafka_uuid,
    parse_partition_dir,
    read_topic_id,
)


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


# -- one process per data directory


def _open_in_child(path: Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; from storage.local.manager import LogManager; LogManager(sys.argv[1])"
    return subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60
    )


def test_data_directory_lock_refuses_another_process(tmp_path: Path, clock: FakeClock) -> None:
    mgr = LogManager(tmp_path, clock)
    child = _open_in_child(tmp_path)
    assert child.returncode != 0
    assert isinstance(DataDirLockedError("x"), OSError)  # kgc serve reports it in one line
    assert f"in use by process {os.getpid()}" in child.stderr, child.stderr
    assert str(tmp_path / ".lock") in child.stderr
    # Within this process the lock is shared (a test reopening after a simulated crash).
    again = LogManager(tmp_path, clock)
    again.close_all()
    assert _open_in_child(tmp_path).returncode != 0  # still held by ``mgr``
    mgr.close_all()
    child = _open_in_child(tmp_path)
    assert child.returncode == 0, child.stderr


# -- partition.metadata


def test_partition_metadata_is_kafkas_file(tmp_path: Path, clock: FakeClock) -> None:
    topic_id = uuid.uuid4().bytes
    mgr = LogManager(tmp_path, clock)
    mgr.get_or_create("orders", 0, topic_id=topic_id)
    text = (tmp_path / "orders-0" / "partition.metadata").read_text()
    b64 = base64.urlsafe_b64encode(topic_id).rstrip(b"=").decode()
    assert text == f"version: 0\ntopic_id: {b64}\n" and kafka_uuid(topic_id) == b64
    assert read_topic_id(tmp_path / "orders-0") == topic_id
    assert read_topic_id(tmp_path / "absent") is None
    mgr.close_all()

    # A directory already holding another topic's id is never taken over.
    mgr = LogManager(tmp_path, clock)
    with pytest.raises(TopicIdMismatchError, match=b64):
        mgr.get_or_create("orders", 0, topic_id=uuid.uuid4().bytes)
    mgr.close_all()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "version: x\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n",
        "version: 0\n",
        "version: 0\ntopic_id: !!\n",
        "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n",
    ],
)
def test_malformed_partition_metadata_is_refused(tmp_path: Path, text: str) -> None:
    (tmp_path / "partition.metadata").write_text(text)
    with pytest.raises(PartitionMetadataError):
        read_topic_id(tmp_path)


def test_deletion_is_named_by_topic_id_until_finished(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic_id = uuid.uuid4().bytes
    mgr = LogManager(tmp_path, clock)
    for p in range(2):
        mgr.get_or_create("doomed", p, topic_id=topic_id)

    def crash(path: object, ignore_errors: bool = False) -> None:
        raise SystemExit("crash after the renames")

    monkeypatch.setattr(shutil, "rmtree", crash)
    with pytest.raises(SystemExit):
        mgr.delete_topic("doomed", topic_id)
    monkeypatch.undo()
    assert mgr.pending_deletions() == {("doomed", topic_id)}
    assert mgr.topic_dirs() == {}
    mgr.close_all()
    reopened = LogManager(tmp_path, clock)
    reopened.open_all()  # removes what was renamed
    assert reopened.pending_deletions() == set() and list(tmp_path.glob("doomed*")) == []
    reopened.close_all()
