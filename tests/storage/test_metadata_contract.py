"""The metadata stores' contract (coordinator/stores.py), run against every engine: local
files in the data directory (one process), the same files shared by the workers of a
kgc.workers node (node/workers/shared.py), and PostgreSQL (a cluster).

What the node relies on: a change made through one store is durable and seen at once by
its writer; another store of the same engine -- the next start on local files, another
worker after its poll, another node after its refresh -- sees exactly the same state;
a change that changes nothing tells nobody; deletions report what they did not find;
producer-id blocks never overlap and stay above the floor they were asked for; a topic
change refused (a name taken, a topic gone, a count not larger) is refused alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.catalog import (
    CATALOG_FILE,
    LocalTopicStore,
    TopicCatalog,
    TopicExistsError,
    TopicInfo,
)
from coordinator.config import Settings
from coordinator.group_configs import GROUP_CONFIGS_FILE, LocalGroupConfigs
from coordinator.node.pg_stores import PgGroupConfigs, SharedCatalog
from coordinator.node.workers.shared import (
    SharedFiles,
    WorkerAclStore,
    WorkerCatalog,
    WorkerCredentialStore,
    WorkerGroupConfigs,
    shared_producer_ids,
)
from coordinator.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from coordinator.security.acl_store import LocalAclStore, PgAclStore
from coordinator.security.credentials import (
    CREDENTIALS_FILE,
    LocalCredentialStore,
    PgCredentialStore,
    ScramChange,
    scram_credential,
)
from coordinator.stores import (
    AclStore,
    GroupConfigStore,
    ProducerIdBlocks,
    ScramCredentialStore,
    TopicStore,
)
from storage.interface import UnknownTopicError

READ_ORDERS = AclBinding(
    ResourceType.TOPIC,
    "orders",
    PatternType.LITERAL,
    "User:alice",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)
GROUP_PREFIX = AclBinding(
    ResourceType.GROUP,
    "team-",
    PatternType.PREFIXED,
    "User:alice",
    "10.0.0.1",
    AclOperation.ALL,
    AclPermissionType.ALLOW,
)
DENY_BOB = AclBinding(
    ResourceType.TOPIC,
    "orders",
    PatternType.LITERAL,
    "User:bob",
    "*",
    AclOperation.WRITE,
    AclPermissionType.DENY,
)
SETTINGS = Settings()


class LocalEngine:
    """Files in the data directory; "elsewhere" is the next start on the same directory."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir
        self.dir.mkdir()

    async def credentials(self) -> ScramCredentialStore:
        return LocalCredentialStore(self.dir / CREDENTIALS_FILE)

    async def credentials_elsewhere(self) -> ScramCredentialStore:
        return LocalCredentialStore(self.dir / CREDENTIALS_FILE)

    async def acls(self) -> AclStore:
        return LocalAclStore(self.dir)

    async def acls_elsewhere(self) -> AclStore:
        return LocalAclStore(self.dir)

    async def group_configs(self) -> GroupConfigStore:
        store = LocalGroupConfigs(SETTINGS, self.dir / GROUP_CONFIGS_FILE)
        await store.load()
        return store

    async def group_configs_elsewhere(self) -> GroupConfigStore:
        return await self.group_configs()

    async def topics(self) -> TopicStore:
        return LocalTopicStore(TopicCatalog(self.dir / CATALOG_FILE))

    async def topics_elsewhere(self) -> TopicStore:
        return await self.topics()

    def producer_ids(self) -> ProducerIdBlocks | None:
        return None  # one process: the data plane's own counter, no blocks

    async def close(self) -> None:
        return None


class WorkersEngine:
    """The shared files of one data directory, through two workers' views: "elsewhere" is
    the other worker, after its poll."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir
        self.dir.mkdir()
        self.files = SharedFiles(self.dir)  # this worker's
        self.other_files = SharedFiles(self.dir)  # the other worker's
        self.other: dict[str, Any] = {}

    async def credentials(self) -> ScramCredentialStore:
        path = self.dir / CREDENTIALS_FILE
        self.other["credentials"] = WorkerCredentialStore(path, self.other_files)
        return WorkerCredentialStore(path, self.files)

    async def _elsewhere(self, kind: str) -> Any:
        self.other_files.poll()
        return self.other[kind]

    async def credentials_elsewhere(self) -> ScramCredentialStore:
        store: ScramCredentialStore = await self._elsewhere("credentials")
        return store

    async def acls(self) -> AclStore:
        self.other["acls"] = WorkerAclStore(self.dir, self.other_files)
        return WorkerAclStore(self.dir, self.files)

    async def acls_elsewhere(self) -> AclStore:
        store: AclStore = await self._elsewhere("acls")
        return store

    async def group_configs(self) -> GroupConfigStore:
        path = self.dir / GROUP_CONFIGS_FILE
        other = WorkerGroupConfigs(SETTINGS, path, self.other_files)
        await other.load()
        self.other["group_configs"] = other
        store = WorkerGroupConfigs(SETTINGS, path, self.files)
        await store.load()
        return store

    async def group_configs_elsewhere(self) -> GroupConfigStore:
        store: GroupConfigStore = await self._elsewhere("group_configs")
        return store

    async def topics(self) -> TopicStore:
        path = self.dir / CATALOG_FILE
        other = WorkerCatalog(path, self.other_files)
        self.other["topics"] = LocalTopicStore(other, self.other_files.poll)
        return LocalTopicStore(WorkerCatalog(path, self.files), self.files.poll)

    async def topics_elsewhere(self) -> TopicStore:
        store: TopicStore = await self._elsewhere("topics")
        return store

    def producer_ids(self) -> ProducerIdBlocks | None:
        return shared_producer_ids(self.files, self.dir / "producer_ids").take_block

    async def close(self) -> None:
        return None


class PostgresEngine:
    """Tables in one database, through two nodes' pools: "elsewhere" is the other node,
    after its refresh."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pools: list[Any] = []
        self.other: dict[str, Any] = {}
        self.closers: list[Any] = []

    async def start(self) -> None:
        import asyncpg

        from storage.postgres.schema import migrate

        self.pools = [await asyncpg.create_pool(self.url, min_size=1, max_size=2) for _ in "ab"]
        async with self.pools[0].acquire() as conn:
            await migrate(conn)

    async def credentials(self) -> ScramCredentialStore:
        self.other["credentials"] = other = PgCredentialStore(self.pools[1])
        await other.refresh()
        store = PgCredentialStore(self.pools[0])
        await store.refresh()
        return store

    async def credentials_elsewhere(self) -> ScramCredentialStore:
        store: PgCredentialStore = self.other["credentials"]
        await store.refresh()
        return store

    async def acls(self) -> AclStore:
        self.other["acls"] = other = PgAclStore(self.pools[1], poll_interval_ms=60_000)
        store = PgAclStore(self.pools[0], poll_interval_ms=60_000)
        for s in (other, store):
            await s.start()  # loaded, no LISTEN: the test says when to look
            self.closers.append(s.close)
        return store

    async def acls_elsewhere(self) -> AclStore:
        store: PgAclStore = self.other["acls"]
        await store.refresh()
        return store

    async def group_configs(self) -> GroupConfigStore:
        self.other["group_configs"] = other = PgGroupConfigs(SETTINGS, self.pools[1])
        await other.load()
        store = PgGroupConfigs(SETTINGS, self.pools[0])
        await store.load()
        return store

    async def group_configs_elsewhere(self) -> GroupConfigStore:
        store: PgGroupConfigs = self.other["group_configs"]
        await store.refresh()
        return store

    async def topics(self) -> TopicStore:
        self.other["topics"] = other = SharedCatalog(TopicCatalog(None), self.pools[1])
        await other.refresh()
        store = SharedCatalog(TopicCatalog(None), self.pools[0])
        await store.refresh()
        return store

    async def topics_elsewhere(self) -> TopicStore:
        store: SharedCatalog = self.other["topics"]
        await store.refresh()
        return store

    def producer_ids(self) -> ProducerIdBlocks | None:
        from storage.postgres.catalog import take_producer_ids

        async def take(block: int, floor: int) -> int:
            async with self.pools[0].acquire() as conn:
                return await take_producer_ids(conn, block, floor)

        return take

    async def close(self) -> None:
        for close in self.closers:
            await close()
        for pool in self.pools:
            await pool.close()


Engine = LocalEngine | WorkersEngine | PostgresEngine


@pytest.fixture(params=["local", "workers", pytest.param("postgres", marks=pytest.mark.postgres)])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    e: Engine
    if request.param == "local":
        e = LocalEngine(tmp_path / "data")
    elif request.param == "workers":
        e = WorkersEngine(tmp_path / "data")
    else:
        e = PostgresEngine(request.getfixturevalue("pg_url"))
        await e.start()
    try:
        yield e
    finally:
        await e.close()


async def test_credentials_altered_through_one_store_are_seen_by_another(engine: Engine) -> None:
    store = await engine.credentials()
    assert store.users() == {}
    alice = scram_credential("SCRAM-SHA-512", "alice-secret")
    bob = scram_credential("SCRAM-SHA-256", "bob-secret")
    changes = [ScramChange("alice", alice.mechanism, alice), ScramChange("bob", bob.mechanism, bob)]
    assert await store.alter(changes) == set()
    assert store.get("alice", "SCRAM-SHA-512") == alice  # the writer: at once
    assert store.get("alice", "SCRAM-SHA-256") is None
    elsewhere = await engine.credentials_elsewhere()
    assert elsewhere.users() == {"alice": [alice], "bob": [bob]}

    # Deleting what is not there is reported by index; what is there goes.
    missing = await store.alter(
        [ScramChange("alice", "SCRAM-SHA-512"), ScramChange("carol", "SCRAM-SHA-256")]
    )
    assert missing == {1}
    assert store.get("alice", "SCRAM-SHA-512") is None
    elsewhere = await engine.credentials_elsewhere()
    assert elsewhere.users() == {"bob": [bob]}
    assert elsewhere.get("bob", "SCRAM-SHA-256") == bob


async def test_acls_created_and_deleted_reach_every_store(engine: Engine) -> None:
    store = await engine.acls()
    seen: list[frozenset[AclBinding]] = []
    store.on_change.append(seen.append)
    await store.create([READ_ORDERS, GROUP_PREFIX, DENY_BOB])
    await store.create([READ_ORDERS])  # already there: no change, nobody told
    assert seen == [{READ_ORDERS, GROUP_PREFIX, DENY_BOB}]
    assert store.bindings == {READ_ORDERS, GROUP_PREFIX, DENY_BOB}
    assert (await engine.acls_elsewhere()).bindings == {READ_ORDERS, GROUP_PREFIX, DENY_BOB}

    # Every filter is matched against the same set, the second's match found by the first.
    result = await store.delete(
        [
            AclBindingFilter(ResourceType.TOPIC, "orders", PatternType.LITERAL),
            AclBindingFilter(principal="User:bob"),
            AclBindingFilter(resource_type=ResourceType.CLUSTER),
        ]
    )
    assert [set(r) for r in result] == [{READ_ORDERS, DENY_BOB}, {DENY_BOB}, set()]
    assert store.bindings == {GROUP_PREFIX}
    assert seen[-1] == {GROUP_PREFIX}
    assert await store.delete([AclBindingFilter(principal="User:nobody")]) == [[]]
    assert len(seen) == 2
    assert (await engine.acls_elsewhere()).bindings == {GROUP_PREFIX}


async def test_group_configs_set_through_one_store_are_seen_by_another(engine: Engine) -> None:
    store = await engine.group_configs()
    told: list[dict[str, tuple[int, int]]] = []
    store.on_change.append(told.append)
    assert store.get("g") == {}
    configs = {"consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "6000"}
    await store.set("g", configs)
    assert store.get("g") == configs
    assert told[-1] == {"g": (50000, 6000)}  # (session timeout, heartbeat interval)
    elsewhere = await engine.group_configs_elsewhere()
    assert elsewhere.get("g") == configs
    assert elsewhere.configs == {"g": configs}

    await store.set("g", {})  # no configs: the group's entry goes
    assert store.get("g") == {} and store.configs == {}
    assert told[-1] == {}
    assert (await engine.group_configs_elsewhere()).configs == {}


async def test_producer_id_blocks_never_overlap_and_stay_above_the_floor(engine: Engine) -> None:
    take = engine.producer_ids()
    if take is None:
        pytest.skip("one process takes producer ids from its own counter, not in blocks")
    first = await take(100, -1)
    second = await take(100, -1)
    assert first >= 0 and (second >= first + 100 or first >= second + 100)
    floor = max(first, second) + 5000
    third = await take(10, floor)
    assert third > floor
    assert await take(10, -1) >= third + 10


async def test_topics_created_grown_altered_and_deleted_reach_every_store(engine: Engine) -> None:
    store = await engine.topics()
    assert store.catalog.topics == {}
    info = await store.create("orders", 3, {"retention.ms": "60000"})
    assert store.catalog.get("orders") is info
    assert (info.num_partitions, info.configs) == (3, {"retention.ms": "60000"})
    assert len(info.topic_id) == 16 and info.topic_id != bytes(16)
    with pytest.raises(TopicExistsError):
        await store.create("orders", 1, {})
    seen = (await engine.topics_elsewhere()).catalog
    assert seen.by_id[info.topic_id] == info

    grown = await store.create_partitions("orders", 5)
    assert grown.num_partitions == 5 and grown.topic_id == info.topic_id
    with pytest.raises(ValueError):  # Kafka never shrinks a topic, nor grows it by nothing
        await store.create_partitions("orders", 5)
    altered = await store.alter_configs("orders", {"cleanup.policy": "compact"})
    assert altered.configs == {"cleanup.policy": "compact"}
    seen = (await engine.topics_elsewhere()).catalog
    assert seen.get("orders") == TopicInfo(
        "orders", info.topic_id, 5, {"cleanup.policy": "compact"}
    )

    with pytest.raises(UnknownTopicError):
        await store.create_partitions("payments", 2)
    with pytest.raises(UnknownTopicError):
        await store.alter_configs("payments", {})

    await store.delete(altered)
    assert store.catalog.get("orders") is None
    seen = (await engine.topics_elsewhere()).catalog
    assert seen.topics == {} and seen.by_id == {}
