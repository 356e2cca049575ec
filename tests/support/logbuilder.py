"""Write kgc data directories for the audit tests with kgc's own storage code.

How this works: ``DataDir`` wraps a ``LogManager``; ``commit`` / ``group`` / ``tombstone``
append ``__consumer_offsets`` records encoded by ``storage.records`` to the partition
Kafka would use (``partition_for``) unless told otherwise, ``records`` any encoded records
(consumer-group ones); ``topic`` writes a topic's records
and the ``topics.json`` catalog entry. ``close`` closes the logs cleanly.
"""

from __future__ import annotations

import json
from pathlib import Path

from storage.local.log import LogConfig, PartitionLog
from storage.local.manager import LogManager
from storage.records import (
    MemberMetadata,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    partition_for,
)

OFFSETS = "__consumer_offsets"


class DataDir:
    def __init__(
        self, path: Path, offsets_partitions: int = 4, segment_bytes: int = 1 << 30
    ) -> None:
        self.path = path
        self.n = offsets_partitions
        self.now = 0
        self.logs = LogManager(path, clock=lambda: self.now)
        self.cfg = LogConfig(segment_bytes=segment_bytes, cleanup_policy="compact", retention_ms=-1)
        self.catalog: list[dict[str, object]] = []
        for p in range(offsets_partitions):
            self.logs.get_or_create(OFFSETS, p, self.cfg)

    def olog(self, group: str, partition: int | None = None) -> PartitionLog:
        p = partition_for(group, self.n) if partition is None else partition
        return self.logs.get_or_create(OFFSETS, p, self.cfg)

    def commit(
        self,
        group: str,
        topic: str,
        part: int,
        offset: int,
        ts: int,
        *,
        epoch: int = -1,
        opart: int | None = None,
    ) -> int:
        """Append one OffsetCommit record; returns its offset in the offsets log."""
        rec = (
            encode_offset_commit_key(group, topic, part),
            encode_offset_commit_value(offset, "", ts, leader_epoch=epoch),
        )
        base, _ = self.olog(group, opart).append_records([rec], timestamp_ms=ts)
        return base

    def tombstone(self, group: str, topic: str | None = None, part: int = 0, ts: int = 0) -> int:
        key = (
            encode_group_metadata_key(group)
            if topic is None
            else encode_offset_commit_key(group, topic, part)
        )
        base, _ = self.olog(group).append_records([(key, None)], timestamp_ms=ts)
        return base

    def group(
        self, group: str, members: int, generation: int, ts: int, *, opart: int | None = None
    ) -> int:
        mm = [
            MemberMetadata(f"m{i}", None, f"client-{i}", "/127.0.0.1", 60000, 10000, b"", b"")
            for i in range(members)
        ]
        value = encode_group_metadata_value(
            "consumer", generation, "range" if members else None, "m0" if members else None, ts, mm
        )
        base, _ = self.olog(group, opart).append_records(
            [(encode_group_metadata_key(group), value)], timestamp_ms=ts
        )
        return base

    def records(
        self,
        group: str,
        records: list[tuple[bytes, bytes | None]],
        ts: int,
        opart: int | None = None,
    ) -> int:
        """Append already encoded records (e.g. consumer-group ones) in one batch; its base."""
        base, _ = self.olog(group, opart).append_records(records, timestamp_ms=ts)
        return base

    def topic(
        self,
        name: str,
        partitions: int,
        records: dict[int, int],
        ts: int = 0,
        topic_id: bytes = bytes(16),
    ) -> None:
        """Create ``name`` with ``records[p]`` records in partition p (one batch per 100)."""
        self.catalog.append(
            {"name": name, "id": topic_id.hex(), "partitions": partitions, "configs": {}}
        )
        for p in range(partitions):
            log = self.logs.get_or_create(name, p, LogConfig())
            left = records.get(p, 0)
            while left > 0:
                k = min(100, left)
                log.append_records([(None, b"x")] * k, timestamp_ms=ts)
                left -= k

    def roll(self, group: str | None = None, opart: int | None = None) -> None:
        if group is not None:
            self.olog(group, opart).roll()
        else:
            for p in range(self.n):
                self.logs.get_or_create(OFFSETS, p, self.cfg).roll()

    def close(self) -> None:
        (self.path / "topics.json").write_text(json.dumps(self.catalog))
        self.logs.close_all()
