"""An in-process share-partition leader over the in-memory engine, for the share tests.

How this works: ``ShareNode`` builds what ``node/assemble.py`` builds for share groups --
the data plane over ``MemoryLogs``, the share coordinator over ``__share_group_state`` in
the same logs, the leader and the ShareFetch/ShareAcknowledge handlers -- and calls the
handlers as the transport would (one ``ClientInfo`` per simulated connection). Share state
is initialized through the persister, as the group coordinator's heartbeat does it.
``restart`` builds a new coordinator and leader over the same logs (what a restart
replays).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.apis import Parts, handlers
from coordinator.catalog import TopicCatalog, TopicInfo
from coordinator.config import Settings
from coordinator.dataplane import DataPlane
from coordinator.server.handler import ClientInfo, Deferred
from coordinator.share.admin import ShareAdmin
from coordinator.share.coordinator import ShareCoordinator
from coordinator.share.dlq import DeadLetterWriter
from coordinator.share.leader import ShareLeader, ShareLeaderConfig
from coordinator.share.requests import ShareRequests
from coordinator.share.sessions import ShareSessionCache
from coordinator.share.state_shard import topic_id_str
from protocol.framing import RequestHeader
from protocol.messages import produce, share_acknowledge, share_fetch
from storage.interface import LogConfig
from storage.memory import MemoryDurability, MemoryLogs
from storage.record_batch import decode_records, encode_batch, iter_batches


class GroupConfigs:
    """A GroupConfigStore in memory."""

    def __init__(self) -> None:
        self.configs: dict[str, dict[str, str]] = {}
        self.on_change: list[Any] = []

    def get(self, group: str) -> dict[str, str]:
        return dict(self.configs.get(group, {}))

    async def load(self) -> None:
        pass

    async def set(self, group: str, configs: dict[str, str]) -> None:
        self.configs[group] = dict(configs)


def client(conn_id: int) -> ClientInfo:
    return ClientInfo("test", "127.0.0.1", 1000 + conn_id, conn_id)


class ShareNode:
    def __init__(self, data_dir: Path, config: ShareLeaderConfig | None = None) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.settings = Settings(data_dir=data_dir)
        self.flusher = MemoryDurability()
        self.logs = MemoryLogs()
        self.catalog = TopicCatalog(data_dir / "topics.json")
        self.dp = DataPlane(self.settings, self.catalog, self.logs, self.flusher)
        self.group_configs = GroupConfigs()
        self.config = config or ShareLeaderConfig()
        # The broker's errors.deadletterqueue.auto.create.topics.enable and .topic.name.prefix.
        self.dlq_auto_create = False
        self.dlq_prefix = "dlq."
        self._build()

    def _build(self) -> None:
        self.coordinator = ShareCoordinator(
            self.logs,
            self.flusher,
            num_partitions=5,
            updates_per_snapshot=3,
            log_config=LogConfig(),
        )
        self.coordinator.start()
        self.leader = ShareLeader(
            self.config,
            self.coordinator,
            self.dp,
            self.catalog,
            self.group_configs,  # type: ignore[arg-type]
            dead_letters=DeadLetterWriter(
                self.dp,
                self.catalog,
                self.group_configs,  # type: ignore[arg-type]
                auto_create=self.dlq_auto_create,
                prefix=self.dlq_prefix,
                create_topic=lambda name, configs: self.create(name, 2, configs),
            ),
        )
        self.requests = ShareRequests(
            self.leader, ShareSessionCache(self.config.max_share_sessions)
        )
        self.initialized: dict[str, dict[bytes, tuple[str, frozenset[int]]]] = {}
        self.admin = ShareAdmin(
            self.coordinator, self.dp, self.catalog, lambda g: self.initialized.get(g, {})
        )
        self.h = handlers(Parts(data=self.dp, share=self.requests, share_admin=self.admin))

    async def restart(self) -> None:
        """A new share coordinator and leader over the same logs (the sessions are gone)."""
        await self.leader.close()
        await self.coordinator.close()
        self._build()

    def create(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> TopicInfo:
        info = self.catalog.create(name, partitions, configs or {})
        self.dp.create_partitions(info)
        return info

    async def initialize(self, group: str, info: TopicInfo, start_offset: int = -1) -> None:
        parts = list(range(info.num_partitions))
        result = await self.coordinator.initialize(
            group, topic_id_str(info.topic_id), parts, 0, start_offset
        )
        assert all(code == 0 for code in result.values()), result

    async def call(self, key: int, version: int, body: Any, conn: int = 1) -> Any:
        res = self.h[key](RequestHeader(key, version, 1, "test"), body, client(conn))
        if isinstance(res, Deferred):
            res = await res
        return res

    async def produce(self, topic: str, partition: int, n: int, *, start: int = 0) -> None:
        """``n`` records in one batch (values b"v<i>" from ``start``)."""
        records = [(None, f"v{start + i}".encode()) for i in range(n)]
        batch = encode_batch(0, records, timestamp_ms=1)
        req = produce.Request(
            acks=-1,
            timeout_ms=1000,
            topic_data=[
                produce.TopicProduceData(
                    name=topic,
                    partition_data=[produce.PartitionProduceData(index=partition, records=batch)],
                )
            ],
        )
        res = await self.call(produce.API_KEY, 9, req)
        assert res.responses[0].partition_responses[0].error_code == 0

    async def fetch(
        self,
        group: str,
        member: str,
        epoch: int,
        parts: list[tuple[TopicInfo, int]] | None = None,
        *,
        acks: list[tuple[TopicInfo, int, list[tuple[int, int, list[int]]]]] | None = None,
        forget: list[tuple[TopicInfo, int]] | None = None,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        max_records: int = 500,
        version: int = 1,
        conn: int = 1,
    ) -> Any:
        topics: list[share_fetch.FetchTopic] = []
        for info, p in parts or []:
            topics.append(
                share_fetch.FetchTopic(
                    topic_id=info.topic_id,
                    partitions=[share_fetch.FetchPartition(partition_index=p)],
                )
            )
        for info, p, batches in acks or []:
            topics.append(
                share_fetch.FetchTopic(
                    topic_id=info.topic_id,
                    partitions=[
                        share_fetch.FetchPartition(
                            partition_index=p,
                            acknowledgement_batches=[
                                share_fetch.AcknowledgementBatch(f, last, types)
                                for f, last, types in batches
                            ],
                        )
                    ],
                )
            )
        req = share_fetch.Request(
            group_id=group,
            member_id=member,
            share_session_epoch=epoch,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=1 << 20,
            max_records=max_records,
            batch_size=max_records,
            topics=topics,
            forgotten_topics_data=[
                share_fetch.ForgottenTopic(topic_id=info.topic_id, partitions=[p])
                for info, p in forget or []
            ],
        )
        return await self.call(share_fetch.API_KEY, version, req, conn)

    async def acknowledge(
        self,
        group: str,
        member: str,
        epoch: int,
        acks: list[tuple[TopicInfo, int, list[tuple[int, int, list[int]]]]],
        *,
        conn: int = 1,
        version: int = 1,
        is_renew_ack: bool = False,
    ) -> Any:
        req = share_acknowledge.Request(
            group_id=group,
            member_id=member,
            share_session_epoch=epoch,
            is_renew_ack=is_renew_ack,
            topics=[
                share_acknowledge.AcknowledgeTopic(
                    topic_id=info.topic_id,
                    partitions=[
                        share_acknowledge.AcknowledgePartition(
                            partition_index=p,
                            acknowledgement_batches=[
                                share_acknowledge.AcknowledgementBatch(f, last, types)
                                for f, last, types in batches
                            ],
                        )
                    ],
                )
                for info, p, batches in acks
            ],
        )
        return await self.call(share_acknowledge.API_KEY, version, req, conn)

    async def close(self) -> None:
        await self.leader.close()
        await self.coordinator.close()
        await self.dp.stop()


def acquired(resp: Any) -> list[tuple[int, int, int]]:
    """Every acquired range of a ShareFetch response, (first, last, delivery count)."""
    return [
        (a.first_offset, a.last_offset, a.delivery_count)
        for t in resp.responses
        for p in t.partitions
        for a in p.acquired_records
    ]


def values(resp: Any) -> dict[int, bytes]:
    """The records of the acquired ranges, by offset (what a client keeps)."""
    ranges = acquired(resp)
    out: dict[int, bytes] = {}
    for t in resp.responses:
        for p in t.partitions:
            for h, start, end in iter_batches(p.records or b""):
                for r in decode_records(p.records[start:end]):
                    offset = h.base_offset + r.offset_delta
                    if any(f <= offset <= last for f, last, _ in ranges):
                        out[offset] = r.value or b""
    return out


def partitions(resp: Any) -> dict[int, Any]:
    return {p.partition_index: p for t in resp.responses for p in t.partitions}
