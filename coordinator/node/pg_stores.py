"""Cluster mode's metadata stores over PostgreSQL: the topic catalog, the cluster's nodes
and partition leases as the admin APIs see them, and the group configs.

How this works: every node keeps the whole topic catalog in memory (a ``TopicCatalog``
without a file), which the hot paths (Metadata, Produce, Fetch) read synchronously.
``SharedCatalog`` is the writer over that image (``coordinator.stores.TopicStore``): each
change is one transaction in the database (``storage.postgres.catalog``) that bumps the
cluster's change version, then the node reloads the image; the other nodes reload at the
change notice (NOTIFY, a hint) or at their heartbeat's poll of the version (the truth).
``PgClusterView`` answers the admin APIs' questions about the cluster itself
(``coordinator.stores.ClusterView``); ``PgGroupConfigs`` keeps every group's configs in
``kgc_group_config``. They live with the node's assembly so that the API handlers, which
type against ``coordinator.stores``, import no storage engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import TYPE_CHECKING, Any

from coordinator.catalog import TopicCatalog, TopicExistsError, TopicInfo
from coordinator.group_configs import StoredGroupConfigs
from storage.interface import RegisteredNode, UnknownTopicError, kafka_uuid
from storage.postgres import catalog as pg
from storage.postgres import group_configs as pg_group_configs

if TYPE_CHECKING:
    from coordinator.config import Settings

__all__ = ["CATALOG_CHANNEL", "PgClusterView", "PgGroupConfigs", "SharedCatalog"]

log = logging.getLogger("kgc.catalog")

CATALOG_CHANNEL = "kgc_catalog"


class SharedCatalog:
    """Cluster mode: the topic catalog lives in the database, ``catalog`` mirrors it.

    ``create``/``delete`` change the database (one transaction each, which also bumps the
    cluster's catalog version) and then refresh the mirror, so the node that answered
    CreateTopics knows the topic at once; every other node refreshes when its heartbeat sees
    the version move (``refresh``). ``on_deleted`` is told each topic that disappeared (the
    group runtime forgets its offsets).
    """

    def __init__(self, catalog: TopicCatalog, pool: Any) -> None:
        self.catalog = catalog
        self.pool = pool  # asyncpg pool
        self.on_deleted: list[Any] = []
        self._listener: Any = None  # a dedicated connection LISTENing for changes
        self._refreshing: asyncio.Task[None] | None = None
        self._again = False

    async def listen(self, url: str, application_name: str) -> None:
        """Refresh as soon as another node changes the catalog (a hint: PostgreSQL's
        NOTIFY reaches only connected listeners, so the heartbeat's poll of the catalog
        version stays the truth; this only spares clients the wait for it: a topic created
        on one node is known to the others within milliseconds, not a heartbeat later)."""
        import asyncpg

        self._listener = await asyncpg.connect(
            url, server_settings={"application_name": application_name}
        )
        await self._listener.add_listener(CATALOG_CHANNEL, self._notified)

    def _notified(self, *_args: Any) -> None:
        if self._refreshing is not None and not self._refreshing.done():
            self._again = True  # one more refresh after the running one
            return
        self._refreshing = asyncio.get_running_loop().create_task(self._refresh_hinted())

    async def _refresh_hinted(self) -> None:
        while True:
            self._again = False
            try:
                await self.refresh()
            except Exception as exc:  # the heartbeat's poll catches up
                log.warning("catalog refresh after a change notice failed: %r", exc)
            if not self._again:
                return

    async def close(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close(timeout=2)
            self._listener = None

    async def _announce(self, name: str) -> None:
        with contextlib.suppress(Exception):  # only a hint: the version bump is the truth
            async with self.pool.acquire() as conn:
                await conn.execute("SELECT pg_notify($1, $2)", CATALOG_CHANNEL, name)

    async def refresh(self) -> None:
        async with self.pool.acquire() as conn:
            rows = await pg.list_topics(conn)
        infos = [
            TopicInfo(
                r.name, r.topic_id.bytes, r.partitions, {k: str(v) for k, v in r.configs.items()}
            )
            for r in rows
            if not r.internal  # coordinators' state: not topics
        ]
        before = {(t.name, t.topic_id) for t in self.catalog.topics.values()}
        self.catalog.install(infos)
        after = {(t.name, t.topic_id) for t in infos}
        for name, _tid in before - after:
            for callback in self.on_deleted:
                callback(name)

    async def create(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicInfo:
        topic_id = uuid.uuid4()
        while kafka_uuid(topic_id.bytes).startswith("-"):
            topic_id = uuid.uuid4()
        try:
            async with self.pool.acquire() as conn:
                await pg.create_topic(conn, name, topic_id, num_partitions, dict(configs))
        except pg.TopicExistsError:
            raise TopicExistsError(name) from None
        await self._announce(name)
        await self.refresh()
        info = self.catalog.get(name)
        assert info is not None
        return info

    async def _changed(self, name: str) -> TopicInfo:
        """The topic as this node sees it once the change committed (announced, reloaded)."""
        await self._announce(name)
        await self.refresh()
        info = self.catalog.get(name)
        if info is None:  # deleted right after, by another request
            raise UnknownTopicError(f"unknown topic {name!r}")
        return info

    async def create_partitions(self, name: str, num_partitions: int) -> TopicInfo:
        """Grow a topic for every node (its new lease rows, unowned, in the same
        transaction); the database raises UnknownTopicError / ValueError."""
        async with self.pool.acquire() as conn:
            await pg.create_partitions(conn, name, num_partitions)
        return await self._changed(name)

    async def alter_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        """Replace a topic's configs for every node (one transaction, which bumps the
        catalog version); the database raises UnknownTopicError."""
        async with self.pool.acquire() as conn:
            await pg.alter_topic_configs(conn, name, dict(configs))
        return await self._changed(name)

    async def delete(self, info: TopicInfo) -> None:
        async with self.pool.acquire() as conn:
            await pg.delete_topic(conn, info.name)
        await self._announce(info.name)
        await self.refresh()


class PgClusterView:
    """The cluster's nodes and partition leases, read from the database on each call."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool  # asyncpg pool

    async def registered_nodes(self) -> list[RegisteredNode]:
        async with self.pool.acquire() as conn:
            return await pg.registered_nodes(conn)

    async def lease_log_start(self, topic: str, partition: int) -> tuple[int, int] | None:
        async with self.pool.acquire() as conn:
            return await pg.lease_log_start(conn, topic, partition)


class PgGroupConfigs(StoredGroupConfigs):
    """Cluster mode: the ``kgc_group_config`` table, shared by every node."""

    def __init__(self, settings: Settings, pool: Any) -> None:
        super().__init__(settings)
        self.pool = pool

    async def refresh(self) -> None:
        """Reload the table (at start, and whenever the cluster's change version moves)."""
        async with self.pool.acquire() as conn:
            self._install(await pg_group_configs.load(conn))

    async def load(self) -> None:
        await self.refresh()

    async def set(self, group: str, configs: dict[str, str]) -> None:
        async with self.pool.acquire() as conn:
            await pg_group_configs.store(conn, group, configs)
        await self.refresh()
