"""The local topic catalog agrees with the partition directories before any log is opened.

How this works: ``reconcile`` runs once at start-up of a node or worker supervisor that keeps
its catalog in the data directory (``topics.json``); the rules it follows -- finish an
interrupted deletion, adopt a topic the catalog lacks, refuse to start on a topic id that
disagrees -- are ``coordinator.catalog``'s. It lives beside the node's assembly, not in the
catalog, because it reads the local log engine's directories (``storage.local``), which the
catalog's readers (API handlers, data plane) must not import.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

from coordinator.catalog import REBUILT_CONFIGS, ZERO_ID, TopicCatalog, TopicInfo
from storage.interface import kafka_uuid
from storage.local.manager import (
    LogManager,
    PartitionMetadataError,
    TopicIdMismatchError,
    read_topic_id,
    write_topic_id,
)

__all__ = ["reconcile"]

log = logging.getLogger("kgc.catalog")


def reconcile(catalog: TopicCatalog, logs: LogManager) -> None:
    """Agree with the partition directories before any log is opened (see ``coordinator.catalog``)."""
    changed = _finish_deletions(catalog, logs)
    dirs = {t: parts for t, parts in logs.topic_dirs().items() if not t.startswith("__")}
    if not catalog.loaded and dirs:
        log.warning(
            "topic catalog %s is missing: rebuilding it from the partition directories "
            "of %d topic(s)",
            catalog.path,
            len(dirs),
        )
    for topic, parts in sorted(dirs.items()):
        ids = _dir_ids(parts)
        info = catalog.topics.get(topic)
        if info is None:
            info = _adopt(catalog, topic, parts, ids)
            changed = True
        elif info.topic_id != ZERO_ID:
            for p, path in sorted(parts.items()):
                found = ids[p]
                if found is not None and found != info.topic_id:
                    raise TopicIdMismatchError(
                        f"partition directory {path} holds topic id {kafka_uuid(found)} "
                        f"but {catalog.path} says topic '{topic}' has id "
                        f"{kafka_uuid(info.topic_id)}; refusing to start rather than "
                        "serve or delete the wrong data. Restore the right catalog entry, "
                        "or move the directory aside"
                    )
        if info.topic_id != ZERO_ID:
            missing = [path for p, path in sorted(parts.items()) if ids[p] is None]
            for path in missing:  # written by an older kgc, or unreadable
                write_topic_id(path, info.topic_id)
            if missing:
                log.info(
                    "wrote partition.metadata (topic id %s) for %d partition(s) of topic '%s'",
                    kafka_uuid(info.topic_id),
                    len(missing),
                    topic,
                )
        beyond = sorted(p for p in parts if p >= info.num_partitions)
        if beyond and info.offline is None:
            log.warning(
                "topic '%s' has %d partitions but directories for partitions %s too; "
                "they are kept and not served",
                topic,
                info.num_partitions,
                beyond,
            )
    if changed:
        catalog.save()


def _finish_deletions(catalog: TopicCatalog, logs: LogManager) -> bool:
    changed = False
    for topic, topic_id in sorted(logs.pending_deletions()):
        info = catalog.topics.get(topic)
        if info is None or info.topic_id != topic_id:
            continue  # the catalog already forgot it; open_all removes the leftovers
        left = logs.topic_dirs().get(topic, {})
        ids = _dir_ids(left)
        for p, path in sorted(left.items()):
            if ids[p] not in (None, topic_id):
                raise TopicIdMismatchError(
                    f"topic '{topic}' (id {kafka_uuid(topic_id)}) was being deleted, but "
                    f"partition directory {path} holds topic id {kafka_uuid(ids[p] or b'')}; "
                    "refusing to start rather than delete it. Move the directory aside"
                )
        logs.delete_topic(topic, topic_id)
        catalog.topics.pop(topic)
        if catalog.by_id.get(topic_id) is info:
            del catalog.by_id[topic_id]
        log.info(
            "finished deleting topic '%s' (id %s), interrupted by a crash",
            topic,
            kafka_uuid(topic_id),
        )
        changed = True
    return changed


def _dir_ids(parts: dict[int, Path]) -> dict[int, bytes | None]:
    ids: dict[int, bytes | None] = {}
    for p, path in parts.items():
        try:
            ids[p] = read_topic_id(path)
        except PartitionMetadataError as e:
            log.warning("ignoring unreadable partition metadata: %s", e)
            ids[p] = None
    return ids


def _adopt(
    catalog: TopicCatalog, topic: str, parts: dict[int, Path], ids: dict[int, bytes | None]
) -> TopicInfo:
    known = {i for i in ids.values() if i is not None}
    if len(known) > 1:
        raise TopicIdMismatchError(
            f"the partition directories of topic '{topic}' hold different topic ids ("
            + ", ".join(f"{parts[p].name}: {kafka_uuid(i)}" for p, i in sorted(ids.items()) if i)
            + "); refusing to start rather than guess which is the topic. "
            "Move the stray directories aside"
        )
    topic_id = known.pop() if known else uuid.uuid4().bytes
    other = catalog.by_id.get(topic_id)
    if other is not None:
        raise TopicIdMismatchError(
            f"partition directories of topic '{topic}' hold topic id {kafka_uuid(topic_id)}, "
            f"which {catalog.path} gives to topic '{other.name}'; refusing to start"
        )
    info = TopicInfo(topic, topic_id, max(parts) + 1, dict(REBUILT_CONFIGS))
    catalog.topics[topic] = info
    catalog.by_id[topic_id] = info
    log.warning(
        "topic '%s' (id %s, %d partitions) is not in %s: restored from its partition "
        "directories. Its configs were lost, so retention is off (%s) until they are set "
        "again",
        topic,
        kafka_uuid(topic_id),
        info.num_partitions,
        catalog.path,
        ", ".join(f"{k}={v}" for k, v in REBUILT_CONFIGS.items()),
    )
    return info
