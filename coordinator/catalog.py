"""The topic catalog: names, ids, partition counts and configs, persisted crash-safely.

How this works: the catalog is small and changes rarely, so it is one JSON file rewritten
whole on every change (write to a temporary file, fsync, rename, fsync the directory), so a
crash leaves either the old or the new catalog. Topic data itself lives in the log engine;
the catalog only says which topics exist.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from storage.durability import fsync_dir

_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_NAME_LENGTH = 249


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: bytes  # 16 bytes, Kafka's Uuid
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)

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


class TopicCatalog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.topics: dict[str, TopicInfo] = {}
        self.by_id: dict[bytes, TopicInfo] = {}
        self.changes = 0  # bumped on every change, so readers can cache derived answers
        if path.exists():
            for t in json.loads(path.read_text()):
                info = TopicInfo(
                    t["name"], bytes.fromhex(t["id"]), int(t["partitions"]), dict(t["configs"])
                )
                self.topics[info.name] = info
                self.by_id[info.topic_id] = info

    def get(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def create(
        self, name: str, num_partitions: int, configs: dict[str, str] | None = None
    ) -> TopicInfo:
        # Kafka never hands out the zero id or ids whose base64 starts with '-'.
        topic_id = uuid.uuid4().bytes
        info = TopicInfo(name, topic_id, num_partitions, dict(configs or {}))
        self.topics[name] = info
        self.by_id[topic_id] = info
        self._save()
        return info

    def delete(self, name: str) -> TopicInfo | None:
        info = self.topics.pop(name, None)
        if info is not None:
            self.by_id.pop(info.topic_id, None)
            self._save()
        return info

    def _save(self) -> None:
        self.changes += 1
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        data = [
            {
                "name": t.name,
                "id": t.topic_id.hex(),
                "partitions": t.num_partitions,
                "configs": t.configs,
            }
            for t in self.topics.values()
        ]
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
