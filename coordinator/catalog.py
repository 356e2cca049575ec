"""The topic catalog: names, ids, partition counts and configs, persisted crash-safely.

How this works: the catalog is small and changes rarely, so it is one JSON file rewritten
whole on every change (write to a temporary file, fsync, rename, fsync the directory), so a
crash leaves either the old or the new catalog. Topic data itself lives in the log engine;
the catalog only says which topics exist, and it can never delete data on its own word:

* A file that is not a JSON list stops the start-up (``CatalogUnreadableError``, one line):
  guessing would lose every topic's configs, and moving the file aside is the one-step
  remedy the message names (the catalog is then rebuilt as below).
* An entry that cannot be read, or whose configs Kafka would refuse (``topic_configs``),
  keeps that one topic offline (one ERROR line; its data untouched, its entry written back
  verbatim on every save) while the rest of the server runs.
* ``reconcile`` (``node/reconcile.py``, at start-up, before any log is opened) compares the
  catalog with the partition directories, each of which names its topic id in Kafka's
  ``partition.metadata``. A deletion a crash interrupted (directories already renamed
  ``*.<topic id>-delete``) is finished. A directory of a topic the catalog lacks (the whole file missing, or an entry
  removed by hand) is adopted: name and partitions from the directories, id from
  ``partition.metadata``, configs lost, so retention is off until they are set again rather
  than deleting data by a default. A directory whose id disagrees with the catalog's stops
  the start-up with both ids named (``TopicIdMismatchError``). Directories written by older
  kgc versions get their ``partition.metadata`` from the catalog.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.group.topics import TopicImage
from coordinator.topic_configs import InvalidConfigError, validate
from storage.files import DataDirError, fsync_dir
from storage.interface import UnknownTopicError, kafka_uuid

log = logging.getLogger("kgc.catalog")

CATALOG_FILE = "topics.json"  # in the data directory
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_NAME_LENGTH = 249
ZERO_ID = bytes(16)
# Configs of a topic rebuilt from its directories: its own are lost, and the broker's
# defaults could delete data the lost ones kept (retention), so nothing expires.
REBUILT_CONFIGS = {"retention.ms": "-1", "retention.bytes": "-1"}


class CatalogUnreadableError(DataDirError):
    """``topics.json`` exists but is not a catalog; kgc will not guess which topics exist."""


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: bytes  # 16 bytes, Kafka's Uuid
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    # Why the topic cannot be served (its catalog entry is invalid); None when it can.
    offline: str | None = None

    @property
    def is_internal(self) -> bool:
        return self.name.startswith("__")


def topic_name_error(name: str) -> str | None:
    """Why ``name`` is not a legal Kafka topic name, or None when it is."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return "topic name cannot be '.' or '..'"
    if len(name) > MAX_NAME_LENGTH:
        return f"topic name is longer than {MAX_NAME_LENGTH} characters"
    if not _LEGAL.match(name):
        return "topic name may only contain ASCII alphanumerics, '.', '_' and '-'"
    return None


def _entry_id(raw: dict[str, Any]) -> bytes:
    """The entry's topic id, or the zero id when it has none that can be read."""
    tid = raw.get("id")
    if isinstance(tid, str) and re.fullmatch(r"[0-9a-fA-F]{32}", tid):
        return bytes.fromhex(tid)
    return ZERO_ID


def _entry_partitions(raw: dict[str, Any]) -> int:
    """The entry's partition count, or 0 when it has none that can be read."""
    n = raw.get("partitions")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def _entry_error(raw: dict[str, Any]) -> str | None:
    """Why a catalog entry (with a string name) cannot be served, or None."""
    name_error = topic_name_error(raw["name"])
    if name_error is not None:
        return name_error
    if _entry_id(raw) == ZERO_ID:
        return f"'id' is not a 32-digit hex topic id: {raw.get('id')!r}"
    if not _entry_partitions(raw):
        return f"'partitions' is not a positive integer: {raw.get('partitions')!r}"
    configs = raw.get("configs", {})
    if not isinstance(configs, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in configs.items()
    ):
        return f"'configs' is not an object of strings: {configs!r}"
    try:
        validate(configs)
    except InvalidConfigError as e:
        return str(e)
    return None


class TopicCatalog:
    """The topics this node knows, by name and by id.

    With a ``path``: the embedded default, persisted as described above. Without one
    (cluster mode): a mirror of the database's ``kgc_topic`` table, which ``install``
    replaces whole whenever the cluster's catalog version moves; it never writes a file.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.topics: dict[str, TopicInfo] = {}
        self.by_id: dict[bytes, TopicInfo] = {}
        self.changes = 0  # bumped on every change, so readers can cache derived answers
        # Told (names, created) after topics are created, grow or go: consumer groups
        # subscribed to them compute a new assignment (Kafka's onNewMetadataImage).
        self.on_change: list[Callable[[list[str], bool], None]] = []
        # Told the topics whose configs changed (AlterConfigs here or on another node):
        # the data plane applies them to the open logs.
        self.on_configs: list[Callable[[list[str]], None]] = []
        # Entries written back verbatim on every save: unreadable ones, offline topics'.
        self._kept: list[Any] = []
        # False: no catalog yet (new, or lost: see reconcile)
        self.loaded = path is not None and path.exists()
        if self.loaded:
            self._load()

    def install(self, topics: list[TopicInfo]) -> None:
        """Cluster mode: take the database's topics as the whole catalog."""
        before = self.topics
        self.topics = {t.name: t for t in topics}
        self.by_id = {t.topic_id: t for t in topics}
        self.changes += 1
        self.loaded = True
        created = [t.name for t in topics if t.name not in before]
        changed = [
            n
            for n, old in before.items()
            if (new := self.topics.get(n)) is None
            or new.topic_id != old.topic_id
            or new.num_partitions != old.num_partitions
        ]
        self._changed(created, True)
        self._changed(changed, False)
        reconfigured = [
            n
            for n, old in before.items()
            if (new := self.topics.get(n)) is not None
            and new.topic_id == old.topic_id
            and new.configs != old.configs
        ]
        if reconfigured:
            for on_configs in self.on_configs:
                on_configs(reconfigured)

    def _changed(self, names: list[str], created: bool) -> None:
        if names:
            for callback in self.on_change:
                callback(names, created)

    def _load(self) -> None:
        assert self.path is not None
        try:
            entries = json.loads(self.path.read_bytes())
        except (ValueError, UnicodeDecodeError) as e:
            raise self._unreadable(str(e)) from None
        if not isinstance(entries, list):
            raise self._unreadable(f"expected a JSON list, found {type(entries).__name__}")
        seen: set[str] = set()
        for i, raw in enumerate(entries):
            if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
                self._kept.append(raw)
                log.error(
                    "entry %d of %s cannot be read and is ignored (kept in the file): %.200s",
                    i,
                    self.path,
                    json.dumps(raw),
                )
                continue
            name = raw["name"]
            why = _entry_error(raw)
            if name in seen:
                why = "the topic is listed more than once"
                self._take_offline(self.topics[name], why)
            seen.add(name)
            if why is None:
                info = TopicInfo(
                    name, _entry_id(raw), _entry_partitions(raw), dict(raw.get("configs", {}))
                )
                self.topics[name] = info
                self.by_id.setdefault(info.topic_id, info)
                continue
            self._kept.append(raw)
            if name in self.topics:
                continue  # the duplicate: already offline
            info = TopicInfo(name, _entry_id(raw), _entry_partitions(raw), offline=why)
            self.topics[name] = info
            if info.topic_id != ZERO_ID:
                self.by_id.setdefault(info.topic_id, info)
            self._report_offline(info)

    def _unreadable(self, why: str) -> CatalogUnreadableError:
        return CatalogUnreadableError(
            f"topic catalog {self.path} cannot be read ({why}); refusing to guess which topics "
            "exist. Move it aside to rebuild it from the partition directories "
            "(topic configs are then lost)"
        )

    def _take_offline(self, info: TopicInfo, why: str) -> None:
        if info.offline is not None:
            return
        info.offline = why
        self._kept.append(self._entry(info))
        self._report_offline(info)

    def _report_offline(self, info: TopicInfo) -> None:
        log.error(
            "topic '%s' is offline: its entry in %s is invalid: %s. Its data is kept "
            "untouched; fix the entry and restart",
            info.name,
            self.path,
            info.offline,
        )

    def get(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def create(
        self, name: str, num_partitions: int, configs: dict[str, str] | None = None
    ) -> TopicInfo:
        if name in self.topics:
            # A second create would give the name a new id while its partition directories
            # keep the first (kgc then refuses to start on the mismatch).
            raise TopicExistsError(name)
        # Kafka never hands out the zero id or ids whose base64 starts with '-'.
        topic_id = uuid.uuid4().bytes
        while topic_id in self.by_id or kafka_uuid(topic_id).startswith("-"):
            topic_id = uuid.uuid4().bytes
        info = TopicInfo(name, topic_id, num_partitions, dict(configs or {}))
        self.topics[name] = info
        self.by_id[topic_id] = info
        self.save()
        self._changed([name], True)
        return info

    def create_partitions(self, name: str, num_partitions: int) -> TopicInfo:
        """Grow ``name`` to ``num_partitions`` (CreatePartitions; Kafka never shrinks a
        topic). Saved before it returns; consumer groups subscribed to it are told."""
        info = self.topics[name]
        if num_partitions <= info.num_partitions or info.offline is not None:
            raise ValueError(f"topic {name!r} cannot grow to {num_partitions} partitions")
        before, info.num_partitions = info.num_partitions, num_partitions
        try:
            self.save()
        except BaseException:
            info.num_partitions = before  # not saved: the topic did not grow
            raise
        self._changed([name], False)
        return info

    def alter_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        """Replace a topic's configs (validated by the caller); saved before it returns,
        then ``on_configs`` is told."""
        info = self.topics[name]
        before, info.configs = info.configs, dict(configs)
        try:
            self.save()
        except BaseException:
            info.configs = before  # not saved: nothing changed
            raise
        for on_configs in self.on_configs:
            on_configs([name])
        return info

    def delete(self, name: str) -> TopicInfo | None:
        info = self.topics.pop(name, None)
        if info is not None:
            if self.by_id.get(info.topic_id) is info:
                del self.by_id[info.topic_id]
            if info.offline is not None:
                self._kept = [
                    e for e in self._kept if not (isinstance(e, dict) and e.get("name") == name)
                ]
            self.save()
            self._changed([name], False)
        return info

    # ------------------------------------------------------------ persistence

    @staticmethod
    def _entry(t: TopicInfo) -> dict[str, Any]:
        return {
            "name": t.name,
            "id": t.topic_id.hex(),
            "partitions": t.num_partitions,
            "configs": t.configs,
        }

    def save(self) -> None:
        self.changes += 1
        if self.path is None:
            return  # cluster mode: the database holds the catalog
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        data = [self._entry(t) for t in self.topics.values() if t.offline is None]
        with open(tmp, "w") as f:
            json.dump(data + self._kept, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        self.loaded = True


class TopicExistsError(Exception):
    """CreateTopics of a name the cluster already has (TOPIC_ALREADY_EXISTS)."""


class LocalTopicStore:
    """The ``stores.TopicStore`` of a catalog kept in the data directory.

    Each change is the catalog's own synchronous write, durable when it returns; the checks
    a shared catalog makes in its transaction are made first against the image, so every
    engine fails alike. ``poll`` reads what other writers saved: the workers' shared files
    (``node/workers/shared.py``); one process is the only writer and needs none.
    """

    def __init__(self, catalog: TopicCatalog, poll: Callable[[], object] | None = None) -> None:
        self.catalog = catalog
        self._poll = poll

    async def refresh(self) -> None:
        if self._poll is not None:
            self._poll()

    def _existing(self, name: str) -> TopicInfo:
        info = self.catalog.get(name)
        if info is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        return info

    async def create(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicInfo:
        if self.catalog.get(name) is not None:
            raise TopicExistsError(name)
        return self.catalog.create(name, num_partitions, configs)

    async def create_partitions(self, name: str, num_partitions: int) -> TopicInfo:
        info = self._existing(name)
        if info.num_partitions >= num_partitions:
            raise ValueError(
                f"topic {name!r} has {info.num_partitions} partitions; the new total must be "
                f"larger, not {num_partitions}"
            )
        return self.catalog.create_partitions(name, num_partitions)

    async def alter_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        self._existing(name)
        return self.catalog.alter_configs(name, configs)

    async def delete(self, info: TopicInfo) -> None:
        self.catalog.delete(info.name)


class CatalogTopics:
    """The group core's read-only view of the catalog (``coordinator.group.topics``).

    Its answers are cached until the catalog changes: consumer groups look topics up for
    every member on every target computation.
    """

    __slots__ = ("_by_id", "_by_name", "_changes", "catalog")

    def __init__(self, catalog: TopicCatalog) -> None:
        self.catalog = catalog
        self._changes = -1
        self._by_name: dict[str, TopicImage] = {}
        self._by_id: dict[bytes, TopicImage] = {}

    def _fresh(self) -> None:
        if self._changes != self.catalog.changes:
            self._changes = self.catalog.changes
            self._by_name = {
                name: TopicImage(name, info.topic_id, info.num_partitions)
                for name, info in self.catalog.topics.items()
            }
            self._by_id = {t.topic_id: t for t in self._by_name.values()}

    def topic(self, name: str) -> TopicImage | None:
        self._fresh()
        return self._by_name.get(name)

    def topic_by_id(self, topic_id: bytes) -> TopicImage | None:
        self._fresh()
        return self._by_id.get(topic_id)

    def topic_names(self) -> list[str]:
        return list(self.catalog.topics)
