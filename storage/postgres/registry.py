"""Nodes and partition leases in PostgreSQL: the SQL behind cluster membership.

How this works: every function here is one SQL statement (one round trip) on an asyncpg
connection, except ``claim``, which sets ``lock_timeout`` for its transaction first. All
times are the database clock (``clock_timestamp()``): a node's own clock never decides
whether another node is alive, so clock skew between nodes cannot cause a takeover.

* ``register`` upserts the node row and bumps ``broker_epoch`` (Kafka's broker epoch,
  KIP-380/631). A row held by another incarnation that heartbeated within the session
  timeout and is not shutting down means two processes share one ``node.id``: the second
  one gets ``NodeIdInUseError``.
* ``heartbeat`` refreshes ``last_heartbeat`` only if the row still carries this node's
  broker epoch and is not fenced, and reads in the same statement everything the ownership
  pass needs: every node row with its liveness judged on the database clock, the whole
  lease table and ``max(kgc_cluster_change.version)``. ``None`` means this registration
  was fenced (a newer registration, or a peer fenced it after its session expired).
* ``claim`` takes partitions whose owner is gone: no owner, an owner row that is fenced,
  shutting down, expired, missing or of another broker epoch, or this node itself (a
  lease of this node that it is not serving is re-taken with a new epoch, which fences
  anything its older self might still send). ``epoch = epoch + 1`` is the fencing token
  every write checks (``storage.postgres.journal``). Under READ COMMITTED an UPDATE that
  waited on a concurrent writer re-checks its WHERE against the committed row, so a claim
  never overwrites a round it did not see; ``lock_timeout`` bounds that wait.
* ``release`` gives a lease back (``owner_node = NULL``, same epoch) only if this node
  still holds it at that epoch; ``mark_shutting_down`` lets peers claim at once.
* ``fence_expired`` marks rows whose heartbeat is older than the session timeout as fenced,
  as KRaft's controller fences a silent broker: such a node must re-register (new broker
  epoch) before it claims anything again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from storage.interface import Lease
from storage.postgres import StartupRefused

__all__ = [
    "HeartbeatView",
    "LeaseRow",
    "NodeIdInUseError",
    "NodeRow",
    "claim",
    "claim_many",
    "fence_expired",
    "heartbeat",
    "mark_shutting_down",
    "register",
    "release",
    "release_many",
]

# lock_timeout for claims: a claim waiting behind a writer's round longer than this gives up
# for this pass and tries again at the next heartbeat (a stuck writer must not stall the
# heartbeat connection).
CLAIM_LOCK_TIMEOUT_MS = 1000


class NodeIdInUseError(StartupRefused):
    """Another live process is registered with this ``node.id`` (a configuration error)."""

    def __init__(self, node_id: int, host: str, port: int, incarnation: uuid.UUID) -> None:
        super().__init__(
            f"node.id {node_id} is in use by a live node at {host}:{port} "
            f"(incarnation {incarnation}); give every kgc process its own node.id"
        )
        self.node_id = node_id
        self.host, self.port = host, port


@dataclass(frozen=True, slots=True)
class NodeRow:
    """A node's row as the heartbeat read it; ``live`` is judged on the database clock."""

    node_id: int
    host: str
    port: int
    rack: str | None
    broker_epoch: int
    live: bool  # heartbeat within the session timeout, not fenced, not shutting down
    expired: bool  # heartbeat older than the session timeout
    fenced: bool
    shutting_down: bool
    listeners: str = ""  # its advertised listeners, NAME://host:port,... (per-listener Metadata)


@dataclass(frozen=True, slots=True)
class LeaseRow:
    topic: str
    partition: int
    owner_node: int | None
    owner_broker_epoch: int | None
    epoch: int
    next_offset: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class HeartbeatView:
    """What one successful heartbeat returned: the cluster as of that statement."""

    broker_epoch: int
    nodes: list[NodeRow]  # every registered node, live or not
    leases: list[LeaseRow]
    change_version: int  # max(kgc_cluster_change.version), 0 when there is none


def _interval(ms: int) -> int:
    # Passed as integer ms and multiplied by interval '1 millisecond' in SQL.
    return int(ms)


_REGISTER = """
INSERT INTO kgc_node AS n (node_id, incarnation, broker_epoch, host, port, listeners, rack)
VALUES ($1, $2, 1, $3, $4, $5, $6)
ON CONFLICT (node_id) DO UPDATE SET
    incarnation    = EXCLUDED.incarnation,
    broker_epoch   = n.broker_epoch + 1,
    host           = EXCLUDED.host,
    port           = EXCLUDED.port,
    listeners      = EXCLUDED.listeners,
    rack           = EXCLUDED.rack,
    registered_at  = clock_timestamp(),
    last_heartbeat = clock_timestamp(),
    fenced         = false,
    shutting_down  = false
WHERE n.incarnation = EXCLUDED.incarnation
   OR n.fenced
   OR n.shutting_down
   OR n.last_heartbeat < clock_timestamp() - $7::bigint * interval '1 millisecond'
RETURNING broker_epoch
"""


async def register(
    conn: Any,
    node_id: int,
    incarnation: uuid.UUID,
    host: str,
    port: int,
    listeners: str,
    rack: str | None,
    session_timeout_ms: int,
) -> int:
    """Register (or re-register) this process as ``node_id``; returns its new broker epoch.

    Raises ``NodeIdInUseError`` when another incarnation holds the id and is alive.
    """
    epoch = await conn.fetchval(
        _REGISTER,
        node_id,
        incarnation,
        host,
        port,
        listeners,
        rack,
        _interval(session_timeout_ms),
    )
    if epoch is not None:
        return int(epoch)
    # The conditional upsert matched nothing: say who holds the id (a second statement,
    # only on this error path).
    row = await conn.fetchrow(
        "SELECT host, port, incarnation FROM kgc_node WHERE node_id = $1", node_id
    )
    if row is None:  # deleted meanwhile: a retry will insert it
        return await register(
            conn, node_id, incarnation, host, port, listeners, rack, session_timeout_ms
        )
    raise NodeIdInUseError(node_id, row["host"], row["port"], row["incarnation"])


# The aggregates without GROUP BY always return one row, so the statement returns exactly
# one row whether or not the heartbeat matched (hb_epoch is then NULL). Arrays decode
# natively in asyncpg (cheaper than JSON for a few thousand leases).
_HEARTBEAT = """
WITH hb AS (
    UPDATE kgc_node SET last_heartbeat = clock_timestamp()
    WHERE node_id = $1 AND broker_epoch = $2 AND NOT fenced
    RETURNING broker_epoch
), nodes AS (
    SELECT array_agg(node_id ORDER BY node_id) AS ids,
           array_agg(host ORDER BY node_id) AS hosts,
           array_agg(port ORDER BY node_id) AS ports,
           array_agg(rack ORDER BY node_id) AS racks,
           array_agg(broker_epoch ORDER BY node_id) AS broker_epochs,
           array_agg(last_heartbeat < clock_timestamp() - $3::bigint * interval '1 millisecond' ORDER BY node_id)
               AS expired,
           array_agg(fenced ORDER BY node_id) AS fenced,
           array_agg(shutting_down ORDER BY node_id) AS shutting,
           array_agg(listeners ORDER BY node_id) AS node_listeners
    FROM kgc_node
), leases AS (
    SELECT array_agg(topic ORDER BY topic, partition) AS topics,
           array_agg(partition ORDER BY topic, partition) AS parts,
           array_agg(owner_node ORDER BY topic, partition) AS owners,
           array_agg(owner_broker_epoch ORDER BY topic, partition) AS owner_epochs,
           array_agg(epoch ORDER BY topic, partition) AS lease_epochs,
           array_agg(next_offset ORDER BY topic, partition) AS next_offsets,
           array_agg(log_start_offset ORDER BY topic, partition) AS log_starts
    FROM kgc_partition
)
SELECT (SELECT broker_epoch FROM hb) AS hb_epoch,
       (SELECT coalesce(max(version), 0) FROM kgc_cluster_change) AS change_version,
       nodes.*, leases.*
FROM nodes, leases
"""


async def heartbeat(
    conn: Any,
    node_id: int,
    broker_epoch: int,
    session_timeout_ms: int,
    timeout: float | None = None,
) -> HeartbeatView | None:
    """Refresh this node's heartbeat; ``None`` when this registration is fenced.

    ``session_timeout_ms`` is the liveness rule applied to every row (all nodes of a cluster
    are configured alike). The statement reads the rows as of its start, so this node's own
    row shows the heartbeat before this one: it is reported live whatever that said.
    """
    row = await conn.fetchrow(
        _HEARTBEAT, node_id, broker_epoch, _interval(session_timeout_ms), timeout=timeout
    )
    if row["hb_epoch"] is None:
        return None
    nodes: list[NodeRow] = []
    for i, nid in enumerate(row["ids"] or ()):
        expired = bool(row["expired"][i])
        fenced = bool(row["fenced"][i])
        shutting = bool(row["shutting"][i])
        me = nid == node_id
        nodes.append(
            NodeRow(
                node_id=int(nid),
                host=row["hosts"][i],
                port=int(row["ports"][i]),
                rack=row["racks"][i],
                broker_epoch=int(row["broker_epochs"][i]),
                live=me or not (expired or fenced or shutting),
                expired=expired and not me,
                fenced=fenced,
                shutting_down=shutting,
                listeners=row["node_listeners"][i],
            )
        )
    leases = [
        LeaseRow(
            topic=row["topics"][i],
            partition=int(row["parts"][i]),
            owner_node=row["owners"][i],
            owner_broker_epoch=row["owner_epochs"][i],
            epoch=int(row["lease_epochs"][i]),
            next_offset=int(row["next_offsets"][i]),
            log_start_offset=int(row["log_starts"][i]),
        )
        for i in range(len(row["topics"] or ()))
    ]
    return HeartbeatView(
        broker_epoch=int(row["hb_epoch"]),
        nodes=nodes,
        leases=leases,
        change_version=int(row["change_version"]),
    )


# The owner is gone unless a node row with the lease's broker epoch is alive. The claimer
# must itself be alive with this broker epoch (a fenced or stopping node claims nothing).
_CLAIM = """
UPDATE kgc_partition AS p
SET owner_node = $1, owner_broker_epoch = $2, epoch = p.epoch + 1
FROM unnest($3::text[], $4::integer[]) AS want(topic, partition)
WHERE p.topic = want.topic AND p.partition = want.partition
  AND EXISTS (
        SELECT 1 FROM kgc_node me
        WHERE me.node_id = $1 AND me.broker_epoch = $2
          AND NOT me.fenced AND NOT me.shutting_down)
  AND (p.owner_node IS NULL
       OR p.owner_node = $1
       OR NOT EXISTS (
            SELECT 1 FROM kgc_node o
            WHERE o.node_id = p.owner_node AND o.broker_epoch = p.owner_broker_epoch
              AND NOT o.fenced AND NOT o.shutting_down
              AND o.last_heartbeat >= clock_timestamp() - $5::bigint * interval '1 millisecond'))
RETURNING p.topic, p.partition, p.epoch, p.next_offset, p.log_start_offset
"""


async def claim_many(
    conn: Any,
    node_id: int,
    broker_epoch: int,
    partitions: list[tuple[str, int]],
    session_timeout_ms: int,
    lock_timeout_ms: int = CLAIM_LOCK_TIMEOUT_MS,
) -> list[Lease]:
    """Claim every partition of ``partitions`` whose owner is gone, in one statement.

    Returns the leases taken (the others stay with their owner). Raises asyncpg's
    ``LockNotAvailableError`` when a row stayed locked longer than ``lock_timeout_ms``.
    """
    if not partitions:
        return []
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = {int(lock_timeout_ms)}")
        rows = await conn.fetch(
            _CLAIM,
            node_id,
            broker_epoch,
            [t for t, _ in partitions],
            [p for _, p in partitions],
            _interval(session_timeout_ms),
        )
    return [
        Lease(
            topic=r["topic"],
            partition=int(r["partition"]),
            epoch=int(r["epoch"]),
            next_offset=int(r["next_offset"]),
            log_start_offset=int(r["log_start_offset"]),
        )
        for r in rows
    ]


async def claim(
    conn: Any,
    node_id: int,
    broker_epoch: int,
    topic: str,
    partition: int,
    session_timeout_ms: int,
    lock_timeout_ms: int = CLAIM_LOCK_TIMEOUT_MS,
) -> Lease | None:
    """Claim one partition if its owner is gone; ``None`` when it is held by a live node."""
    got = await claim_many(
        conn, node_id, broker_epoch, [(topic, partition)], session_timeout_ms, lock_timeout_ms
    )
    return got[0] if got else None


_RELEASE = """
UPDATE kgc_partition AS p SET owner_node = NULL, owner_broker_epoch = NULL
FROM unnest($3::text[], $4::integer[], $5::integer[]) AS held(topic, partition, epoch)
WHERE p.topic = held.topic AND p.partition = held.partition AND p.epoch = held.epoch
  AND p.owner_node = $1 AND p.owner_broker_epoch = $2
RETURNING p.topic, p.partition
"""


async def release_many(
    conn: Any, node_id: int, broker_epoch: int, leases: list[tuple[str, int, int]]
) -> set[tuple[str, int]]:
    """Give back ``(topic, partition, epoch)`` leases still held; returns those released."""
    if not leases:
        return set()
    rows = await conn.fetch(
        _RELEASE,
        node_id,
        broker_epoch,
        [t for t, _, _ in leases],
        [p for _, p, _ in leases],
        [e for _, _, e in leases],
    )
    return {(r["topic"], int(r["partition"])) for r in rows}


async def release(
    conn: Any, node_id: int, broker_epoch: int, topic: str, partition: int, epoch: int
) -> bool:
    """Give a lease back (same epoch) if this node still holds it; False if it did not."""
    return bool(await release_many(conn, node_id, broker_epoch, [(topic, partition, epoch)]))


async def mark_shutting_down(conn: Any, node_id: int, broker_epoch: int) -> bool:
    """Announce a clean stop: peers may claim this node's partitions at once."""
    done = await conn.fetchval(
        "UPDATE kgc_node SET shutting_down = true, last_heartbeat = clock_timestamp() "
        "WHERE node_id = $1 AND broker_epoch = $2 RETURNING true",
        node_id,
        broker_epoch,
    )
    return bool(done)


async def fence_expired(conn: Any, session_timeout_ms: int) -> list[tuple[int, int]]:
    """Fence every node whose heartbeat is older than the session timeout.

    Returns ``(node_id, broker_epoch)`` of the rows fenced by this call. The predicate is
    re-checked on the committed row if a heartbeat updates it concurrently, so a node that
    just heartbeated is not fenced.
    """
    rows = await conn.fetch(
        "UPDATE kgc_node SET fenced = true "
        "WHERE NOT fenced AND NOT shutting_down "
        "AND last_heartbeat < clock_timestamp() - $1::bigint * interval '1 millisecond' "
        "RETURNING node_id, broker_epoch",
        _interval(session_timeout_ms),
    )
    return [(int(r["node_id"]), int(r["broker_epoch"])) for r in rows]
