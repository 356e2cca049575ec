"""The shared topic catalog in PostgreSQL: topics, their partition lease rows, change versions.

How this works: a topic is a ``kgc_topic`` row plus one ``kgc_partition`` row (its lease)
per partition; ``__consumer_offsets`` is such a topic too (``internal``). Every change a
peer must notice (topic created, deleted, partitions added) appends a row to
``kgc_cluster_change`` with version ``max + 1`` in the same statement as the change, and
nodes poll ``max(version)`` on each heartbeat (``storage.postgres.registry.heartbeat``):
no LISTEN/NOTIFY, which loses messages across reconnects and does not port to distributed
SQL engines. Each change is one statement (data-modifying CTEs), hence one transaction.

Two changes racing for the same next version collide on the version's primary key; the
loser's whole statement rolls back and is retried (``_VERSION_RETRIES``), so versions stay
dense and every change has its own.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from storage.interface import RegisteredNode, UnknownTopicError
from storage.postgres import StartupRefused
from storage.records import OFFSETS_TOPIC

__all__ = [
    "OFFSETS_TOPIC",
    "OffsetsTopicMismatchError",
    "RegisteredNode",
    "TopicExistsError",
    "TopicRow",
    "UnknownTopicError",
    "alter_topic_configs",
    "change_version",
    "create_partitions",
    "create_topic",
    "delete_topic",
    "ensure_internal_topic",
    "ensure_offsets_topic",
    "lease_log_start",
    "list_topics",
    "registered_nodes",
]

_VERSION_RETRIES = 10


class TopicExistsError(RuntimeError):
    """A topic of that name exists already (Kafka's TOPIC_ALREADY_EXISTS)."""


class OffsetsTopicMismatchError(StartupRefused):
    """The database's ``__consumer_offsets`` has another partition count than this node's."""


@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, Any] = field(default_factory=dict)
    internal: bool = False


_ENSURE_OFFSETS = """
WITH t AS (
    INSERT INTO kgc_topic (name, topic_id, partitions, internal)
    VALUES ($1, $2, $3, true)
    ON CONFLICT (name) DO NOTHING
    RETURNING name, topic_id, partitions
), p AS (
    INSERT INTO kgc_partition (topic, partition, topic_id)
    SELECT t.name, g, t.topic_id FROM t, generate_series(0, t.partitions - 1) AS g
    ON CONFLICT DO NOTHING
)
SELECT partitions FROM t
UNION ALL
SELECT partitions FROM kgc_topic WHERE name = $1
"""


async def ensure_offsets_topic(conn: Any, num_partitions: int) -> None:
    """Create ``__consumer_offsets`` and its lease rows unless they exist.

    Every node must agree on ``offsets.topic.num.partitions`` (a group's partition is
    ``hash(group) % n``): a different count stops this node with a clear error.
    """
    await ensure_internal_topic(conn, OFFSETS_TOPIC, num_partitions, "offsets.topic.num.partitions")


async def ensure_internal_topic(conn: Any, name: str, num_partitions: int, setting: str) -> None:
    """Create the internal topic ``name`` (a coordinator's state: ``__consumer_offsets``,
    ``__transaction_state``) and its lease rows unless they exist; a count other than this
    node's ``setting`` stops the node (the keys hash onto the partitions)."""
    rows = await conn.fetch(_ENSURE_OFFSETS, name, uuid.uuid4(), num_partitions)
    # Inserted: the CTE row (the main query cannot see it). Already there: the table row.
    found = {int(r["partitions"]) for r in rows}
    if found and found != {num_partitions}:
        raise OffsetsTopicMismatchError(
            f"the cluster's {name} has {sorted(found)[0]} partitions but this node "
            f"is configured with {setting}={num_partitions}: every node "
            "must use the same value"
        )
    if not found:  # created concurrently by a peer whose insert is not visible yet: re-read
        await ensure_internal_topic(conn, name, num_partitions, setting)


# The version row is inserted only if the change happened (``FROM t``).
_CREATE_TOPIC = """
WITH t AS (
    INSERT INTO kgc_topic (name, topic_id, partitions, configs)
    VALUES ($1, $2, $3, $4::jsonb)
    ON CONFLICT DO NOTHING
    RETURNING name, topic_id, partitions
), p AS (
    INSERT INTO kgc_partition (topic, partition, topic_id)
    SELECT t.name, g, t.topic_id FROM t, generate_series(0, t.partitions - 1) AS g
), c AS (
    INSERT INTO kgc_cluster_change (version, kind, key)
    SELECT coalesce((SELECT max(version) FROM kgc_cluster_change), 0) + 1, 'topic_created', t.name
    FROM t
)
SELECT count(*) FROM t
"""

_DELETE_TOPIC = """
WITH t AS (
    DELETE FROM kgc_topic WHERE name = $1 AND NOT internal RETURNING name
), p AS (
    DELETE FROM kgc_partition WHERE topic = $1 AND EXISTS (SELECT 1 FROM t)
), r AS (
    DELETE FROM kgc_record_log WHERE topic = $1 AND EXISTS (SELECT 1 FROM t)
), c AS (
    INSERT INTO kgc_cluster_change (version, kind, key)
    SELECT coalesce((SELECT max(version) FROM kgc_cluster_change), 0) + 1, 'topic_deleted', t.name
    FROM t
)
SELECT count(*) FROM t
"""

_CREATE_PARTITIONS = """
WITH t AS (
    UPDATE kgc_topic SET partitions = $2
    WHERE name = $1 AND partitions < $2 AND NOT internal
    RETURNING name, topic_id, partitions
), p AS (
    INSERT INTO kgc_partition (topic, partition, topic_id)
    SELECT t.name, g, t.topic_id FROM t, generate_series(0, t.partitions - 1) AS g
    ON CONFLICT DO NOTHING
), c AS (
    INSERT INTO kgc_cluster_change (version, kind, key)
    SELECT coalesce((SELECT max(version) FROM kgc_cluster_change), 0) + 1,
           'partitions_created', t.name
    FROM t
)
SELECT count(*) FROM t
"""


async def _versioned(conn: Any, sql: str, *args: Any) -> int:
    """Run a change statement, retrying when a concurrent change took the same version."""
    for attempt in range(_VERSION_RETRIES):
        try:
            return int(await conn.fetchval(sql, *args))
        except asyncpg.UniqueViolationError as e:
            if e.constraint_name != "kgc_cluster_change_pkey" or attempt + 1 == _VERSION_RETRIES:
                raise
    raise AssertionError("unreachable")


async def create_topic(
    conn: Any, name: str, topic_id: uuid.UUID, partitions: int, configs: dict[str, Any]
) -> None:
    """Create a topic with its partition lease rows (unowned, epoch 0); one transaction.

    Raises ``TopicExistsError`` when the name (or the id) is taken.
    """
    if await _versioned(conn, _CREATE_TOPIC, name, topic_id, partitions, json.dumps(configs)) == 0:
        raise TopicExistsError(f"topic {name!r} already exists")


async def delete_topic(conn: Any, name: str) -> bool:
    """Delete a topic, its leases and its log rows in one transaction; False if unknown.

    The internal ``__consumer_offsets`` is never deleted (False). Owners notice at their
    next heartbeat that the lease rows are gone and stop serving the partitions.
    """
    return await _versioned(conn, _DELETE_TOPIC, name) > 0


async def create_partitions(conn: Any, name: str, new_total: int) -> None:
    """Grow a topic to ``new_total`` partitions (Kafka never shrinks one)."""
    if await _versioned(conn, _CREATE_PARTITIONS, name, new_total) > 0:
        return
    current = await conn.fetchval("SELECT partitions FROM kgc_topic WHERE name = $1", name)
    if current is None:
        raise UnknownTopicError(f"unknown topic {name!r}")
    raise ValueError(
        f"topic {name!r} has {current} partitions; the new total must be larger, not {new_total}"
    )


async def registered_nodes(conn: Any) -> list[RegisteredNode]:
    rows = await conn.fetch(
        "SELECT node_id, host, port, listeners, rack FROM kgc_node ORDER BY node_id"
    )
    return [
        RegisteredNode(
            int(r["node_id"]), r["host"], int(r["port"]), r["listeners"] or "", r["rack"]
        )
        for r in rows
    ]


async def lease_log_start(conn: Any, topic: str, partition: int) -> tuple[int, int] | None:
    """(epoch, log_start_offset) of a partition's lease row; None when it has none."""
    row = await conn.fetchrow(
        "SELECT epoch, log_start_offset FROM kgc_partition WHERE topic = $1 AND partition = $2",
        topic,
        partition,
    )
    return None if row is None else (int(row["epoch"]), int(row["log_start_offset"]))


_ALTER_TOPIC_CONFIGS = """
WITH t AS (
    UPDATE kgc_topic SET configs = $2::jsonb WHERE name = $1 AND NOT internal RETURNING name
), c AS (
    INSERT INTO kgc_cluster_change (version, kind, key)
    SELECT coalesce((SELECT max(version) FROM kgc_cluster_change), 0) + 1,
           'topic_configs_altered', t.name
    FROM t
)
SELECT count(*) FROM t
"""


async def alter_topic_configs(conn: Any, name: str, configs: dict[str, str]) -> None:
    """Replace a topic's configs (AlterConfigs); one transaction with its change version.

    Raises ``UnknownTopicError`` when there is no such (non-internal) topic."""
    if await _versioned(conn, _ALTER_TOPIC_CONFIGS, name, json.dumps(configs)) == 0:
        raise UnknownTopicError(f"unknown topic {name!r}")


async def list_topics(conn: Any) -> list[TopicRow]:
    rows = await conn.fetch(
        "SELECT name, topic_id, partitions, configs, internal FROM kgc_topic ORDER BY name"
    )
    return [
        TopicRow(
            name=r["name"],
            topic_id=r["topic_id"],
            partitions=int(r["partitions"]),
            configs=json.loads(r["configs"]),
            internal=bool(r["internal"]),
        )
        for r in rows
    ]


async def change_version(conn: Any) -> int:
    """The catalog's version: ``max(kgc_cluster_change.version)``, 0 before any change."""
    return int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM kgc_cluster_change"))


async def take_producer_ids(conn: Any, block: int, floor: int) -> int:
    """Reserve ``block`` producer ids for this node; returns the first. ``floor``: ids at or
    below it were seen in the logs and are never handed out again."""
    return int(
        await conn.fetchval(
            "UPDATE kgc_producer_ids SET next_id = greatest(next_id, $2::bigint + 1) + $1 "
            "RETURNING next_id - $1",
            block,
            floor,
        )
    )
