"""The topic catalog (``topics.json``) can never delete data.

Each partition directory carries its topic id in ``partition.metadata`` (Kafka's file).
A missing catalog is rebuilt from the directories (names, ids, partition counts; configs
are lost, so retention is off until they are set again); a corrupt one stops the start
with one line; a directory whose id disagrees with the catalog stops the start with both
ids named; a directory the catalog does not list is adopted, never deleted. Only a
deletion that was durably started (directories renamed ``*.<topic id>-delete``) removes
data and the catalog entry.
"""

from __future__ import annotations

import base64
import json
import shutil
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support.crashkit import read_all_confluent
from support.faultkit import metadata_of, produce_acked, report, second_serve
from support.kgc_process import KgcProcess

from protocol.errors import ErrorCode

pytestmark = pytest.mark.integration


def kafka_uuid(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def create(kgc: KgcProcess, name: str, partitions: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(10)


def fill(kgc: KgcProcess, topics: dict[str, int]) -> dict[str, list[bytes]]:
    """Create each topic and produce to every partition; returns the acknowledged values."""
    acked: dict[str, list[bytes]] = {}
    for name, partitions in topics.items():
        create(kgc, name, partitions)
        acked[name] = []
        for p in range(partitions):
            values = [f"{name}-{p}-{i}".encode() for i in range(30)]
            acked[name] += produce_acked(kgc.bootstrap, name, values, partition=p)
    return acked


def read_back(kgc: KgcProcess, name: str, partitions: int) -> list[bytes]:
    return sorted(v or b"" for _p, _k, v in read_all_confluent(kgc.bootstrap, name, partitions))


def test_missing_catalog_is_rebuilt_from_partition_directories(kgc: KgcProcess) -> None:
    topics = {"orders": 3, "audit": 1, "auto": 1}
    acked = fill(kgc, {"orders": 3, "audit": 1})
    # "auto" is created by the producer's Metadata request (auto.create.topics.enable).
    acked["auto"] = produce_acked(kgc.bootstrap, "auto", [f"auto-{i}".encode() for i in range(30)])
    assert len(acked["auto"]) == 30
    ids = {name: metadata_of(kgc.bootstrap, name).topic_id for name in topics}
    kgc.kill()
    (kgc.data_dir / "topics.json").unlink()

    kgc.start()
    log = kgc.log()
    assert "configs" in log and "WARNING" in log, log
    lost = 0
    for name, partitions in topics.items():
        t = metadata_of(kgc.bootstrap, name)
        assert t.error_code == 0 and len(t.partitions) == partitions, t
        assert t.topic_id == ids[name]
        values = read_back(kgc, name, partitions)
        lost += len(set(acked[name]) - set(values))
        assert values == sorted(acked[name])
    # The rebuilt catalog is saved: a second restart needs no rebuild.
    assert (kgc.data_dir / "topics.json").exists()
    kgc.stop()
    kgc.start()
    assert read_back(kgc, "orders", 3) == sorted(acked["orders"])
    report(
        "topics_json_deleted",
        injected="SIGKILL, then topics.json deleted",
        verified=f"all three topics (one auto-created) back with their ids and partition counts, "
        f"{sum(map(len, acked.values()))} acknowledged records read back",
        lost=lost,
    )


def test_corrupt_catalog_refuses_to_start_in_one_line(kgc: KgcProcess) -> None:
    acked = fill(kgc, {"orders": 2})
    kgc.stop()
    catalog = kgc.data_dir / "topics.json"
    catalog.write_text('[{"name": "orders", "id": ')  # torn by hand

    run = second_serve(kgc.data_dir)
    assert run.returncode != 0
    assert "Traceback" not in run.stderr, run.stderr
    # One line, after the effective configuration kgc logs at start (kgc.config).
    lines = [ln for ln in run.stderr.splitlines() if ln.strip() and " kgc.config: " not in ln]
    assert len(lines) == 1, run.stderr
    assert "topics.json" in lines[0], lines[0]
    assert (kgc.data_dir / "orders-0").is_dir() and (kgc.data_dir / "orders-1").is_dir()

    # The remedy the message names: move it aside, and the catalog is rebuilt.
    catalog.rename(kgc.data_dir / "topics.json.corrupt")
    kgc.start()
    assert read_back(kgc, "orders", 2) == sorted(acked["orders"])
    report(
        "topics_json_corrupt",
        injected="topics.json truncated mid-entry",
        verified=f"start refused in one line: {lines[0]!r}; after moving it aside all "
        f"{len(acked['orders'])} records back",
    )


def test_topic_id_disagreement_refuses_to_start(kgc: KgcProcess) -> None:
    acked = fill(kgc, {"orders": 1})
    real = metadata_of(kgc.bootstrap, "orders").topic_id
    kgc.stop()
    catalog = kgc.data_dir / "topics.json"
    entries = json.loads(catalog.read_text())
    other = uuid.uuid4().bytes
    for e in entries:
        e["id"] = other.hex()
    catalog.write_text(json.dumps(entries))

    run = second_serve(kgc.data_dir)
    assert run.returncode != 0
    # One line, after the effective configuration kgc logs at start (kgc.config).
    lines = [ln for ln in run.stderr.splitlines() if ln.strip() and " kgc.config: " not in ln]
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert kafka_uuid(real) in lines[0] and kafka_uuid(other) in lines[0], lines[0]
    assert "orders-0" in lines[0], lines[0]

    # Put the right id back: everything is there.
    for e in entries:
        e["id"] = real.hex()
    catalog.write_text(json.dumps(entries))
    kgc.start()
    assert read_back(kgc, "orders", 1) == sorted(acked["orders"])
    report(
        "topic_id_mismatch",
        injected="topics.json gives topic 'orders' another id than its partition.metadata",
        verified=f"start refused naming both ids and the directory: {lines[0]!r}",
    )


def test_directory_missing_from_catalog_is_kept(kgc: KgcProcess) -> None:
    acked = fill(kgc, {"kept": 2, "other": 1})
    kept_id = metadata_of(kgc.bootstrap, "kept").topic_id
    kgc.stop()
    catalog = kgc.data_dir / "topics.json"
    catalog.write_text(
        json.dumps([e for e in json.loads(catalog.read_text()) if e["name"] != "kept"])
    )

    kgc.start()
    t = metadata_of(kgc.bootstrap, "kept")
    assert t.error_code == ErrorCode.NO_ERROR and t.topic_id == kept_id, t
    assert read_back(kgc, "kept", 2) == sorted(acked["kept"])
    assert read_back(kgc, "other", 1) == sorted(acked["other"])
    report(
        "catalog_entry_removed_by_hand",
        injected="topic 'kept' removed from topics.json while its directories stay",
        verified=f"topic adopted with its id, all {len(acked['kept'])} records kept",
    )


def test_upgrade_from_directories_without_partition_metadata(kgc: KgcProcess) -> None:
    acked = fill(kgc, {"orders": 2})
    topic_id = metadata_of(kgc.bootstrap, "orders").topic_id
    expected = f"version: 0\ntopic_id: {kafka_uuid(topic_id)}\n"
    assert (kgc.data_dir / "orders-0" / "partition.metadata").read_text() == expected
    kgc.stop()
    for p in range(2):  # what a data directory written by an older kgc looks like
        (kgc.data_dir / f"orders-{p}" / "partition.metadata").unlink()

    kgc.start()
    for p in range(2):
        assert (kgc.data_dir / f"orders-{p}" / "partition.metadata").read_text() == expected
    assert read_back(kgc, "orders", 2) == sorted(acked["orders"])
    # And with the catalog gone too, the ids written at the upgrade are the ones restored.
    kgc.stop()
    (kgc.data_dir / "topics.json").unlink()
    kgc.start()
    assert metadata_of(kgc.bootstrap, "orders").topic_id == topic_id
    report(
        "upgrade_without_partition_metadata",
        injected="partition.metadata removed from every partition (an older kgc's layout)",
        verified="written from the catalog at start; ids survive a later catalog loss",
    )


def test_interrupted_delete_is_finished_not_resurrected(kgc: KgcProcess) -> None:
    fill(kgc, {"doomed": 2, "kept": 1})
    doomed_id = metadata_of(kgc.bootstrap, "doomed").topic_id
    kgc.kill()
    # The state a crash leaves after DeleteTopics renamed the partitions but before the
    # catalog was rewritten: one directory renamed, the other not yet.
    shutil.move(kgc.data_dir / "doomed-0", kgc.data_dir / f"doomed-0.{doomed_id.hex()}-delete")

    kgc.start()
    t = metadata_of(kgc.bootstrap, "doomed")
    assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, t
    assert not [p for p in kgc.data_dir.iterdir() if p.name.startswith("doomed")]
    assert "doomed" not in (kgc.data_dir / "topics.json").read_text()
    assert metadata_of(kgc.bootstrap, "kept").error_code == 0
    report(
        "delete_interrupted_by_crash",
        injected="SIGKILL between renaming a deleted topic's partitions and the catalog rewrite",
        verified="the deletion is completed at start: no catalog entry, no directories",
    )
