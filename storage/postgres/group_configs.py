"""Consumer groups' own configs (Kafka's GROUP config resource) in PostgreSQL.

How this works: one ``kgc_group_config`` row per group that has configs (a jsonb object of
Kafka names to values). A change replaces the group's row (or deletes it when no config is
left) and appends a ``kgc_cluster_change`` row in the same statement, so every node sees
the cluster's change version move at its next heartbeat and reloads the table
(``coordinator.node.pg_stores.PgGroupConfigs``).
"""

from __future__ import annotations

import json
from typing import Any

from storage.postgres.catalog import _versioned

__all__ = ["load", "store"]

_UPSERT = """
WITH g AS (
    INSERT INTO kgc_group_config (group_id, configs) VALUES ($1, $2::jsonb)
    ON CONFLICT (group_id) DO UPDATE SET configs = EXCLUDED.configs
    RETURNING group_id
), c AS (
    INSERT INTO kgc_cluster_change (version, kind, key)
    SELECT coalesce((SELECT max(version) FROM kgc_cluster_change), 0) + 1, 'group_config', g.group_id
    FROM g
)
SELECT count(*) FROM g
"""

_DELETE = """
WITH g AS (
    DELETE FROM kgc_group_config WHERE group_id = $1 RETURNING group_id
), c AS (
    INSERT INTO kgc_cluster_change (version, kind, key)
    SELECT coalesce((SELECT max(version) FROM kgc_cluster_change), 0) + 1, 'group_config', g.group_id
    FROM g
)
SELECT count(*) FROM g
"""


async def load(conn: Any) -> dict[str, dict[str, str]]:
    """Every group's configs."""
    rows = await conn.fetch("SELECT group_id, configs FROM kgc_group_config")
    return {
        r["group_id"]: {str(k): str(v) for k, v in json.loads(r["configs"]).items()} for r in rows
    }


async def store(conn: Any, group: str, configs: dict[str, str]) -> None:
    """Replace a group's configs (none: forget the group's row); one transaction."""
    if configs:
        await _versioned(conn, _UPSERT, group, json.dumps(configs))
    else:
        await _versioned(conn, _DELETE, group)
