"""kgc.workers' parts on their own: placement, worker settings, shared files, per-worker logs.

No processes here: the ownership rule spreads a topic's partitions and the coordinators'
partitions (offsets, transactions, share state) over every worker; worker i's settings move
every port by i; two stores on the same file (as two workers hold them) see each other's
changes through the poll, changes
made from a stale state are refused or applied to the current one, and changes of the same
size in the same instant are still seen; producer-id blocks never overlap; a worker's
LogManager locks and journals apart, and a whole-directory LogManager replays the workers'
journals.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from coordinator.catalog import TopicExistsError
from coordinator.config import Settings
from coordinator.node.workers.layout import shift_listeners, worker_nodes, worker_settings
from coordinator.node.workers.shared import (
    SharedFiles,
    WorkerCatalog,
    shared_producer_ids,
    stat_key,
)
from coordinator.placement import worker_of
from coordinator.txn.records import TRANSACTION_STATE_TOPIC
from storage.local.log import LogConfig
from storage.local.manager import DataDirLockedError, LogManager
from storage.records import OFFSETS_TOPIC

JOURNALED = LogConfig(journaled=True, cleanup_policy="compact")


def test_offsets_partitions_go_round_the_workers() -> None:
    assert [worker_of(OFFSETS_TOPIC, p, 3) for p in range(6)] == [0, 1, 2, 0, 1, 2]
    assert all(worker_of(OFFSETS_TOPIC, p, 1) == 0 for p in range(50))


def test_every_coordinators_partitions_go_round_the_workers() -> None:
    # Transactional ids and share partitions' states, as groups: partition p is p % N's.
    for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, "__share_group_state"):
        assert [worker_of(topic, p, 3) for p in range(6)] == [0, 1, 2, 0, 1, 2]


def test_a_topics_partitions_are_spread_from_a_place_its_name_picks() -> None:
    for topic in ("a", "orders", "metrics-7"):
        owners = [worker_of(topic, p, 4) for p in range(8)]
        assert sorted(owners) == [0, 0, 1, 1, 2, 2, 3, 3]  # an even share each
        assert owners == [worker_of(topic, p, 4) for p in range(8)]  # stable
    starts = {worker_of(f"topic-{i}", 0, 4) for i in range(40)}
    assert starts == {0, 1, 2, 3}  # single-partition topics do not all land on worker 0


def test_worker_settings_move_every_port_and_the_node_id() -> None:
    s = Settings(
        node_id=5,
        listeners="PLAINTEXT://:9092,SSL://[::1]:9093",
        advertised_listeners="PLAINTEXT://broker.example:19092",
        metrics_port=9404,
        kgc_workers=3,
    )
    w2 = worker_settings(s, 2)
    assert w2.node_id == 7
    assert w2.listeners == "PLAINTEXT://:9094,SSL://[::1]:9095"
    assert w2.advertised_listeners == "PLAINTEXT://broker.example:19094"
    assert w2.metrics_port == 9406
    assert worker_settings(s, 0) is s
    nodes = worker_nodes(s)
    assert [(n.node_id, n.host, n.port) for n in nodes] == [
        (5, "broker.example", 19092),
        (6, "broker.example", 19093),
        (7, "broker.example", 19094),
    ]
    assert shift_listeners("A://h:1,B://:2", 10) == "A://h:11,B://:12"


def test_worker_settings_without_listeners_move_port_and_advertised_port() -> None:
    s = Settings(port=9092, advertised_port=29092, metrics_port=0, kgc_workers=2)
    w1 = worker_settings(s, 1)
    assert (w1.port, w1.advertised_port, w1.metrics_port, w1.node_id) == (9093, 29093, 0, 1)
    assert [n.port for n in worker_nodes(s)] == [29092, 29093]


def two_catalogs(tmp_path: Path) -> tuple[WorkerCatalog, WorkerCatalog]:
    return (
        WorkerCatalog(tmp_path / "topics.json", SharedFiles(tmp_path)),
        WorkerCatalog(tmp_path / "topics.json", SharedFiles(tmp_path)),
    )


def test_a_topic_created_by_one_worker_reaches_the_other_by_the_poll(tmp_path: Path) -> None:
    a, b = two_catalogs(tmp_path)
    told: list[tuple[list[str], bool]] = []
    b.on_change.append(lambda names, created: told.append((names, created)))
    info = a.create("t", 3, {"retention.ms": "1000"})
    assert b.get("t") is None
    b.files.poll()
    got = b.get("t")
    assert got is not None and (got.topic_id, got.num_partitions) == (info.topic_id, 3)
    assert told == [(["t"], True)]
    b.files.poll()  # nothing changed since: nothing told
    assert told == [(["t"], True)]


def test_a_change_from_a_stale_state_applies_to_the_current_one(tmp_path: Path) -> None:
    a, b = two_catalogs(tmp_path)
    a.create("t", 1)
    # b never polled: its change starts by reloading under the lock.
    with pytest.raises(TopicExistsError):
        b.create("t", 4)
    b.create("u", 2)
    a.files.poll()
    assert set(a.topics) == {"t", "u"}
    with pytest.raises(OSError, match="has 2 partitions now"):
        a.create_partitions("u", 2)
    a.delete("u")
    with pytest.raises(OSError, match="deleted through another worker"):
        b.alter_configs("u", {})
    assert json.loads((tmp_path / "topics.json").read_text())[0]["name"] == "t"


def test_changes_of_the_same_size_in_one_instant_are_all_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two_catalogs(tmp_path)
    a.create("t", 1)
    b.files.poll()
    # A file system whose timestamps do not move between the changes (a coarse clock):
    # every save leaves the same mtime.
    tick = time.time_ns() + 10**10
    save = WorkerCatalog.save

    def coarse_save(self: WorkerCatalog) -> None:
        save(self)
        os.utime(tmp_path / "topics.json", ns=(tick, tick))

    monkeypatch.setattr(WorkerCatalog, "save", coarse_save)
    keys = []
    for value in ("1000", "2000", "3000"):  # same size, same tick of a coarse clock
        a.alter_configs("t", {"retention.ms": value})
        keys.append(stat_key(tmp_path / "topics.json"))
        b.files.poll()
        info = b.get("t")
        assert info is not None and info.configs == {"retention.ms": value}
    # The stamp: each change's mtime is past the one before, so the (inode, size, mtime) a
    # poll compares moves even when the file system reuses the inode within a clock tick.
    mtimes = [k[2] for k in keys if k is not None]
    assert len(mtimes) == 3 and mtimes[0] < mtimes[1] < mtimes[2]


async def test_producer_id_blocks_never_overlap(tmp_path: Path) -> None:
    path = tmp_path / "producer-id-block"
    a = shared_producer_ids(SharedFiles(tmp_path), path)
    b = shared_producer_ids(SharedFiles(tmp_path), path)
    b.ensure_above(4321)  # an id found in b's logs
    ids = [await a.allocate() for _ in range(1500)] + [await b.allocate() for _ in range(1500)]
    ids += [await a.allocate() for _ in range(600)]
    assert len(set(ids)) == len(ids)
    assert min(ids[1500:3000]) > 4321


def test_worker_log_managers_lock_and_journal_apart(tmp_path: Path) -> None:
    w0 = LogManager(tmp_path, worker=0)
    w1 = LogManager(tmp_path, worker=1)
    assert w0.journal.dir.name == "journal.w0" and w1.journal.dir.name == "journal.w1"
    assert (tmp_path / ".lock.w0").exists() and (tmp_path / ".lock.w1").exists()
    w0.release_lock()
    w1.release_lock()


def test_a_worker_lock_held_by_another_process_is_refused(tmp_path: Path) -> None:
    import subprocess
    import sys

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from storage.local.manager import LogManager; "
            f"LogManager(__import__('pathlib').Path({str(tmp_path)!r}), worker=1); "
            "print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(DataDirLockedError, match=r"\.lock\.w1"):
            LogManager(tmp_path, worker=1)
        LogManager(tmp_path, worker=0).release_lock()  # another worker's lock is free
    finally:
        holder.kill()
        holder.wait()


def test_whole_directory_log_manager_replays_the_workers_journals(tmp_path: Path) -> None:
    written = {}
    for worker in (0, 1):
        logs = LogManager(tmp_path, worker=worker)
        p = worker  # each worker writes its own partition
        plog = logs.get_or_create(OFFSETS_TOPIC, p, JOURNALED)
        plog.append_records([(b"k", f"v{worker}".encode())], timestamp_ms=1)
        written[p] = plog.log_end_offset
        logs.journal.close()  # the journal file holds the batch (no flusher: never synced)
        # A crash that loses the segment bytes: the journal alone holds the batch.
        plog.close_without_marker()
        for seg in plog.dir.glob("*.log"):
            seg.write_bytes(b"")
        logs.release_lock()
    assert list((tmp_path / "journal.w0").glob("*.jnl"))
    whole = LogManager(tmp_path)
    whole.open_all(lambda t, p: JOURNALED)
    for p, end in written.items():
        restored = whole.get(OFFSETS_TOPIC, p)
        assert restored is not None and restored.log_end_offset == end
    assert not list(tmp_path.glob("journal.w*/*.jnl"))  # replayed, then dropped
    whole.close_all()
