"""The data plane of one node in process: ``Node``, record batches and their values.

How this works: ``Node`` is a ``DataPlane`` over either engine (``engine="memory"``: the
in-memory logs and durability, the catalog still on disk; ``"local"``: the log manager and
its flusher in ``data_dir``, so a second ``Node`` there is a restart) behind the API
table's handlers, with no sockets; ``create`` adds a topic, ``call`` runs one request and
awaits a deferred reply, ``produce`` sends one partition's batch and returns its partition
response, ``fetch_req`` builds a Fetch of (partition, offset) pairs. ``batch`` encodes
values under the key ``k`` stamped now (or ``ts``), optionally with a producer id, epoch,
base sequence and attributes; ``values_of`` decodes the values of fetched records.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from coordinator.apis import Parts, handlers
from coordinator.catalog import TopicCatalog, TopicInfo
from coordinator.config import Settings
from coordinator.dataplane import DataPlane
from coordinator.server.handler import NO_RESPONSE, ClientInfo, Deferred
from protocol.framing import RequestHeader
from protocol.messages import fetch, produce
from storage.interface import Durability, Logs
from storage.local.durability import Flusher
from storage.local.manager import LogManager
from storage.memory import MemoryDurability, MemoryLogs
from storage.record_batch import decode_records, encode_batch, iter_batches

CLIENT = ClientInfo("test", "127.0.0.1", 1, 1)


class Node:
    def __init__(self, data_dir: Path, *, engine: str = "local", **settings: Any) -> None:
        self.settings = Settings(data_dir=data_dir, **settings)
        self.flusher: Durability
        self.logs: Logs
        if engine == "memory":
            data_dir.mkdir(parents=True)  # the catalog and the producer ids stay on disk
            self.flusher = MemoryDurability()
            self.logs = MemoryLogs()
        else:
            self.flusher = Flusher()
            self.logs = LogManager(data_dir, flusher=self.flusher)
        self.catalog = TopicCatalog(data_dir / "topics.json")
        self.dp = DataPlane(self.settings, self.catalog, self.logs, self.flusher)
        self.h = handlers(Parts(data=self.dp))

    def create(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> TopicInfo:
        info = self.catalog.create(name, partitions, configs or {})
        self.dp.create_partitions(info)
        return info

    async def call(self, key: int, version: int, body: Any) -> Any:
        res = self.h[key](RequestHeader(key, version, 1, "test"), body, CLIENT)
        if isinstance(res, Deferred):
            res = await res
        return res

    async def produce(
        self, topic: str, partition: int, batch: bytes, acks: int = -1, version: int = 9
    ) -> Any:
        req = produce.Request(
            acks=acks,
            timeout_ms=1000,
            topic_data=[
                produce.TopicProduceData(
                    name=topic,
                    partition_data=[produce.PartitionProduceData(index=partition, records=batch)],
                )
            ],
        )
        res = await self.call(produce.API_KEY, version, req)
        if res is NO_RESPONSE:
            return res
        return res.responses[0].partition_responses[0]

    def fetch_req(
        self,
        topic: str,
        partitions: list[tuple[int, int]],
        *,
        max_wait: int = 0,
        min_bytes: int = 1,
        max_bytes: int = 50 << 20,
        part_max: int = 1 << 20,
    ) -> Any:
        return fetch.Request(
            max_wait_ms=max_wait,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            session_id=0,
            session_epoch=-1,
            topics=[
                fetch.FetchTopic(
                    topic=topic,
                    partitions=[
                        fetch.FetchPartition(
                            partition=p, fetch_offset=o, partition_max_bytes=part_max
                        )
                        for p, o in partitions
                    ],
                )
            ],
        )

    async def close(self) -> None:
        await self.dp.stop()
        await self.flusher.stop()
        self.logs.close_all()


def batch(
    values: list[bytes],
    *,
    ts: int | None = None,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    attributes: int = 0,
) -> bytes:
    return encode_batch(
        0,
        [(b"k", v) for v in values],
        timestamp_ms=ts if ts is not None else int(time.time() * 1000),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        attributes=attributes,
    )


def values_of(records: bytes) -> list[bytes]:
    out = []
    for _h, start, end in iter_batches(records):
        out += [r.value for r in decode_records(records[start:end]) if r.value is not None]
    return out
