"""The PostgreSQL engine's schema: created and migrated by kgc itself, versioned.

How this works: ``migrate(conn)`` runs at every start, under a transaction-scoped advisory
lock so that nodes starting together apply each migration once. ``kgc_schema`` holds the
version applied; each entry of ``MIGRATIONS`` moves it up by one, in one transaction. A
database whose version is newer than this kgc knows is refused (an older binary must not
write into a layout it does not understand).

Tables (version 1); docs/cluster.md documents them for operators:

* ``kgc_node``: one row per ``node.id``. ``broker_epoch`` is bumped at each registration
  (Kafka's broker epoch, KIP-380/631); ``last_heartbeat`` is set from the database clock
  (``clock_timestamp()``), never from a node's clock; ``shutting_down`` marks a clean stop.
  Mutable columns are not indexed, so updates stay HOT (fillfactor 50).
* ``kgc_topic``: the topic catalog shared by all nodes (name, Kafka topic id, partition
  count, configs). ``__consumer_offsets`` is a row too.
* ``kgc_partition``: one lease per topic partition. ``owner_node``/``owner_broker_epoch``
  name the owner; ``epoch`` is the partition's leader epoch (int32: it is sent to clients as
  Kafka's leader epoch and stamped into every stored batch), bumped at every takeover;
  ``next_offset`` is the log end the owner last committed; ``log_start_offset`` moves with
  retention. Every write is conditional on (owner, broker epoch, epoch, next_offset), in the
  same statement as the write: a node that lost the lease can never write again.
* ``kgc_record_log``: the log. One row per (partition, write round): the Kafka RecordBatch
  v2 bytes of that round, concatenated, exactly as stored locally (base offsets and
  partition leader epoch assigned by the owner), so replay, compaction rules and the audit
  share one codec. Append-only; retention deletes whole rows below ``log_start_offset``.
* ``kgc_producer_ids``: one counter from which nodes take blocks of producer ids
  (InitProducerId), so no two nodes hand out the same id.
* ``kgc_cluster_change``: a version counter of the catalog; nodes poll ``max(version)``
  on each heartbeat (no LISTEN/NOTIFY, which neither survives reconnects nor ports to
  distributed SQL engines).
* ``kgc_group_config``: a consumer group's own configs (``consumer.session.timeout.ms``,
  ``consumer.heartbeat.interval.ms``) by Kafka name; a change bumps ``kgc_cluster_change``.

Version 2 (security):

* ``kgc_scram_credential``: SCRAM credentials per (user, mechanism): salt, stored key,
  server key, iterations (RFC 5802), never the password.
* ``kgc_acl``: ACL bindings, one row each, with Kafka's numeric codes for resource type,
  pattern type, operation and permission type.

Version 3 (a group's history, ``docs/history.md``):

* ``kgc_group_history``: one row per (``__consumer_offsets`` partition, write round) holding
  the history value of that round (``coordinator.history.codec``: every offset change and
  membership change of the partition's groups, LZ4-compressed), inserted by the journal's
  round statement joined to the partition's accepted lease update, so a row exists only
  where its offsets did land and a fenced node writes none. ``after_offset`` is the
  partition's log end after the round (orders rows across owners, whose clocks may
  differ), ``written_ms`` the owner's time (the time window of reads and of retention).
  Retention deletes rows older than ``offsets.history.retention.ms``; autovacuum makes
  their space reusable at once (the table stays at one window's size), with no partition
  management in the commit path.

Version 4 (the history's merged rows, ``docs/history.md``):

* ``kgc_group_history.first_written_ms``: NULL on the rows the rounds insert (one round:
  it was written at ``written_ms``); set on a *merged* row, which replaces a run of a
  partition's rows older than ``offsets.history.merge.lag.ms`` by one row holding all
  their turns (``coordinator.history.codec.merge``): its ``written_ms`` is the last of
  theirs, ``first_written_ms`` the first, ``after_offset`` the last one's. Reads select
  rows by overlap with their time window, retention deletes a merged row once its
  ``written_ms`` is past. Adding a nullable column rewrites nothing; a round's row keeps
  its size (a NULL costs no byte in a row of five columns).
"""

from __future__ import annotations

import logging
from typing import Any

from storage.postgres import StartupRefused

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SchemaTooNewError", "migrate"]

log = logging.getLogger("kgc.storage.postgres")

# An arbitrary constant: the advisory lock that serialises migrations between nodes.
_MIGRATION_LOCK = 0x6B6763_0001

MIGRATIONS: list[str] = [
    # version 1
    """
    CREATE TABLE kgc_node (
        node_id            integer     PRIMARY KEY,
        incarnation        uuid        NOT NULL,
        broker_epoch       bigint      NOT NULL,
        host               text        NOT NULL,
        port               integer     NOT NULL,
        listeners          text        NOT NULL,
        rack               text,
        registered_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
        last_heartbeat     timestamptz NOT NULL DEFAULT clock_timestamp(),
        fenced             boolean     NOT NULL DEFAULT false,
        shutting_down      boolean     NOT NULL DEFAULT false
    ) WITH (fillfactor = 50);

    CREATE TABLE kgc_topic (
        name               text        PRIMARY KEY,
        topic_id           uuid        NOT NULL UNIQUE,
        partitions         integer     NOT NULL CHECK (partitions > 0),
        configs            jsonb       NOT NULL DEFAULT '{}'::jsonb,
        internal           boolean     NOT NULL DEFAULT false,
        created_at         timestamptz NOT NULL DEFAULT clock_timestamp()
    );

    CREATE TABLE kgc_partition (
        topic              text        NOT NULL,
        partition          integer     NOT NULL,
        topic_id           uuid        NOT NULL,
        owner_node         integer,
        owner_broker_epoch bigint,
        epoch              integer     NOT NULL DEFAULT 0,
        next_offset        bigint      NOT NULL DEFAULT 0,
        log_start_offset   bigint      NOT NULL DEFAULT 0,
        PRIMARY KEY (topic, partition)
    ) WITH (fillfactor = 50);

    CREATE TABLE kgc_record_log (
        topic              text        NOT NULL,
        partition          integer     NOT NULL,
        base_offset        bigint      NOT NULL,
        last_offset        bigint      NOT NULL,
        epoch              integer     NOT NULL,
        record_count       integer     NOT NULL,
        max_timestamp      bigint      NOT NULL,
        append_time        timestamptz NOT NULL DEFAULT clock_timestamp(),
        batch              bytea       NOT NULL,
        PRIMARY KEY (topic, partition, base_offset)
    );
    -- Client batches are often compressed already: do not try to compress them again.
    ALTER TABLE kgc_record_log ALTER COLUMN batch SET STORAGE EXTERNAL;

    -- Producer ids are unique across the cluster: nodes take blocks from one counter.
    CREATE TABLE kgc_producer_ids (
        singleton          boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
        next_id            bigint      NOT NULL
    );
    INSERT INTO kgc_producer_ids (next_id) VALUES (0);

    CREATE TABLE kgc_cluster_change (
        version            bigint      PRIMARY KEY,
        kind               text        NOT NULL,
        key                text        NOT NULL,
        at                 timestamptz NOT NULL DEFAULT clock_timestamp()
    );

    -- A consumer group's own configs (Kafka's GROUP config resource), by Kafka name.
    CREATE TABLE kgc_group_config (
        group_id           text        PRIMARY KEY,
        configs            jsonb       NOT NULL
    );

    ALTER TABLE kgc_node SET (autovacuum_vacuum_scale_factor = 0,
                              autovacuum_vacuum_threshold = 1000);
    ALTER TABLE kgc_partition SET (autovacuum_vacuum_scale_factor = 0,
                                   autovacuum_vacuum_threshold = 1000);
    """,
    # version 2: security. SCRAM credentials (salted and hashed, never the
    # password) and ACL bindings, shared by every node; a change bumps kgc_cluster_change
    # (kind 'scram' / 'acl') like the catalog, so nodes refresh their copies.
    """
    CREATE TABLE kgc_scram_credential (
        user_name          text        NOT NULL,
        mechanism          text        NOT NULL,
        salt               bytea       NOT NULL,
        stored_key         bytea       NOT NULL,
        server_key         bytea       NOT NULL,
        iterations         integer     NOT NULL,
        PRIMARY KEY (user_name, mechanism)
    );

    CREATE TABLE kgc_acl (
        resource_type      smallint    NOT NULL,
        resource_name      text        NOT NULL,
        pattern_type       smallint    NOT NULL,
        principal          text        NOT NULL,
        host               text        NOT NULL,
        operation          smallint    NOT NULL,
        permission_type    smallint    NOT NULL,
        PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host,
                     operation, permission_type)
    );
    """,
    # version 3: a group's history (see the module doc), written in the journal's round.
    """
    CREATE TABLE kgc_group_history (
        offsets_partition  integer     NOT NULL,
        after_offset       bigint      NOT NULL,
        written_ms         bigint      NOT NULL,
        epoch              integer     NOT NULL,
        value              bytea       NOT NULL
    );
    CREATE INDEX kgc_group_history_time ON kgc_group_history (offsets_partition, written_ms);
    -- Values are LZ4-compressed already.
    ALTER TABLE kgc_group_history ALTER COLUMN value SET STORAGE EXTERNAL;
    -- Retention deletes a tenth of the window at a time: vacuum soon after, so new rows
    -- reuse the space.
    ALTER TABLE kgc_group_history SET (autovacuum_vacuum_scale_factor = 0.02,
                                       autovacuum_vacuum_insert_scale_factor = 0.05);
    """,
    # version 4: merged history rows (see the module doc).
    """
    ALTER TABLE kgc_group_history ADD COLUMN first_written_ms bigint;
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)


class SchemaTooNewError(StartupRefused):
    """The database was migrated by a newer kgc; this one refuses to touch it."""


async def migrate(conn: Any) -> int:
    """Bring the schema to ``SCHEMA_VERSION``; returns the version found before.

    ``conn`` is an asyncpg connection. Each migration runs in its own transaction together
    with the version bump, so a crash leaves the schema at a whole version.
    """
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS kgc_schema ("
            " version integer NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        found = await conn.fetchval("SELECT max(version) FROM kgc_schema")
    before = int(found or 0)
    if before > SCHEMA_VERSION:
        raise SchemaTooNewError(
            f"the database's kgc schema is version {before}; this kgc knows up to "
            f"{SCHEMA_VERSION}: upgrade kgc"
        )
    for version in range(before + 1, SCHEMA_VERSION + 1):
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
            current = int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM kgc_schema"))
            if current >= version:
                continue  # another node applied it meanwhile
            await conn.execute(MIGRATIONS[version - 1])
            await conn.execute("INSERT INTO kgc_schema (version) VALUES ($1)", version)
            log.info("applied kgc schema migration %d", version)
    return before
