"""The topic catalog against real files: bad entries stay local, directories are never lost."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from coordinator.catalog import REBUILT_CONFIGS, CatalogUnreadableError, TopicCatalog
from coordinator.node.reconcile import reconcile
from storage.local.manager import LogManager, TopicIdMismatchError, read_topic_id


def entry(name: str, partitions: object = 1, **configs: str) -> dict[str, object]:
    return {"name": name, "id": uuid.uuid4().hex, "partitions": partitions, "configs": configs}


def test_bad_entries_are_offline_and_written_back_verbatim(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    good, bad, twice = entry("good"), entry("bad", **{"retention.ms": "abc"}), entry("twice")
    path.write_text(json.dumps([good, bad, twice, dict(twice, partitions=3), 17, {"x": 1}]))
    catalog = TopicCatalog(path)
    assert catalog.topics["good"].offline is None
    assert "Not a number of type LONG" in (catalog.topics["bad"].offline or "")
    assert "more than once" in (catalog.topics["twice"].offline or "")

    catalog.create("new", 2)
    saved = json.loads(path.read_text())
    assert 17 in saved and {"x": 1} in saved and bad in saved
    assert [e for e in saved if isinstance(e, dict) and e.get("name") == "twice"]
    assert TopicCatalog(path).topics["new"].num_partitions == 2

    catalog.delete("bad")  # an explicit delete of an offline topic drops its entry
    assert bad not in json.loads(path.read_text())


@pytest.mark.parametrize("text", ["", "{", '{"name": "t"}', "null", "\xff"])
def test_unreadable_file_refuses_in_one_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "topics.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(CatalogUnreadableError) as exc:
        TopicCatalog(path)
    assert isinstance(exc.value, OSError) and "\n" not in str(exc.value)
    assert str(path) in str(exc.value) and "Move it aside" in str(exc.value)


def test_rebuild_adopts_directories_with_retention_off(tmp_path: Path) -> None:
    logs = LogManager(tmp_path)
    topic_id = uuid.uuid4().bytes
    for p in (0, 2):  # partition 1's directory is gone: the count still covers it
        logs.get_or_create("orders", p, topic_id=topic_id)
    logs.get_or_create("legacy", 0)  # an older kgc's directory: no partition.metadata
    catalog = TopicCatalog(tmp_path / "topics.json")
    reconcile(catalog, logs)
    orders = catalog.topics["orders"]
    assert (orders.topic_id, orders.num_partitions, orders.configs) == (
        topic_id,
        3,
        REBUILT_CONFIGS,
    )
    legacy = catalog.topics["legacy"]
    assert read_topic_id(tmp_path / "legacy-0") == legacy.topic_id
    assert TopicCatalog(tmp_path / "topics.json").topics.keys() == {"orders", "legacy"}
    logs.close_all()


def test_directories_with_different_ids_are_refused(tmp_path: Path) -> None:
    logs = LogManager(tmp_path)
    logs.get_or_create("orders", 0, topic_id=uuid.uuid4().bytes)
    logs.get_or_create("orders", 1, topic_id=uuid.uuid4().bytes)
    with pytest.raises(TopicIdMismatchError, match="orders-0"):
        reconcile(TopicCatalog(tmp_path / "topics.json"), logs)
    assert (tmp_path / "orders-0").is_dir() and (tmp_path / "orders-1").is_dir()
    logs.close_all()


def test_unreadable_partition_metadata_is_rewritten_from_the_catalog(tmp_path: Path) -> None:
    logs = LogManager(tmp_path)
    catalog = TopicCatalog(tmp_path / "topics.json")
    info = catalog.create("t", 1)
    logs.get_or_create("t", 0, topic_id=info.topic_id)
    (tmp_path / "t-0" / "partition.metadata").write_text("garbage")
    reconcile(catalog, logs)
    assert read_topic_id(tmp_path / "t-0") == info.topic_id
    logs.close_all()
