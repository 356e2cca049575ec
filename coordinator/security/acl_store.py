"""Where ACL bindings live: a JSON file in the data directory, or the cluster's database.

How this works: both stores keep the whole set of bindings in memory (``bindings``: a
frozenset the authorizer indexes) and tell ``on_change`` callbacks the new set after every
change, whoever made it. Changes are ``create`` (idempotent: an existing binding is left as
it is, as Kafka does) and ``delete`` (every filter is matched against the same set, the one
before the call, and all matches go in one durable change; the result lists, per filter,
the bindings it matched).

* ``LocalAclStore`` (the embedded default): ``acls.json`` in the data directory, rewritten
  whole on each change (temp file, fsync, rename, fsync the directory), so a crash leaves
  the old or the new set. A file that cannot be read stops the start-up with one line
  (``AclStoreUnreadableError``): guessing "no ACLs" could open everything to everyone
  under ``allow.everyone.if.no.acl.found``.
* ``PgAclStore`` (cluster mode): the ``kgc_acl`` table. Each change is one transaction that
  also appends a ``kgc_cluster_change`` row of kind ``acl`` (the catalog's version counter).
  Every node notices a change within a second: it polls ``max(version)`` every
  ``poll_interval_ms`` (500 by default; one primary-key look-up) and reloads the table when
  it moved, and a NOTIFY on ``kgc_acl`` (LISTENed on a dedicated connection) wakes it at
  once. NOTIFY is only a hint, as for the catalog: it is lost across reconnects, the poll
  is the truth. A node that cannot reach the database keeps the last set it loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from coordinator.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from storage.files import DataDirError, fsync_dir

__all__ = [
    "ACL_CHANNEL",
    "ACL_FILE",
    "AclStore",
    "AclStoreUnreadableError",
    "LocalAclStore",
    "PgAclStore",
]

log = logging.getLogger("kgc.acl")

ACL_FILE = "acls.json"
ACL_CHANNEL = "kgc_acl"
_FORMAT_VERSION = 1
_VERSION_RETRIES = 10

OnChange = Callable[[frozenset[AclBinding]], None]


class AclStoreUnreadableError(DataDirError):
    """``acls.json`` exists but cannot be read; kgc will not guess which ACLs exist."""


def _to_json(b: AclBinding) -> dict[str, Any]:
    # Names, not codes: the file is for people too (codes are what the database holds).
    return {
        "resourceType": b.resource_type.name,
        "name": b.resource_name,
        "patternType": b.pattern_type.name,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.name,
        "permissionType": b.permission_type.name,
    }


def _from_json(raw: Any) -> AclBinding:
    if not isinstance(raw, dict):
        raise ValueError(f"expected an object, found {raw!r}")
    try:
        return AclBinding(
            ResourceType[raw["resourceType"]],
            _text(raw["name"]),
            PatternType[raw["patternType"]],
            _text(raw["principal"]),
            _text(raw["host"]),
            AclOperation[raw["operation"]],
            AclPermissionType[raw["permissionType"]],
        )
    except (KeyError, TypeError) as e:
        raise ValueError(f"bad ACL entry {raw!r}: {e!r}") from None


def _text(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, found {v!r}")
    return v


def _matches(
    bindings: Iterable[AclBinding], filters: list[AclBindingFilter]
) -> list[list[AclBinding]]:
    current = sorted(bindings, key=_sort_key)
    return [[b for b in current if f.matches(b)] for f in filters]


def _sort_key(b: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (
        b.resource_type,
        b.resource_name,
        b.pattern_type,
        b.principal,
        b.host,
        b.operation,
        b.permission_type,
    )


class AclStore:
    """What both stores offer (the admin handlers and the app use only this)."""

    def __init__(self) -> None:
        self._bindings: frozenset[AclBinding] = frozenset()
        self.on_change: list[OnChange] = []

    @property
    def bindings(self) -> frozenset[AclBinding]:
        return self._bindings

    def _install(self, bindings: frozenset[AclBinding]) -> None:
        if bindings == self._bindings:
            return
        self._bindings = bindings
        for callback in self.on_change:
            callback(bindings)

    async def create(self, bindings: list[AclBinding]) -> None:
        """Add the bindings (valid ones: ``acl.binding_error`` is the caller's check)."""
        raise NotImplementedError

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Delete what the filters match; per filter, the bindings it matched."""
        raise NotImplementedError

    async def close(self) -> None:
        return None


class LocalAclStore(AclStore):
    def __init__(self, data_dir: Path) -> None:
        super().__init__()
        self.path = data_dir / ACL_FILE
        self._lock = asyncio.Lock()
        self._bindings = self._load()

    def _load(self) -> frozenset[AclBinding]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return frozenset()
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict) or doc.get("version") != _FORMAT_VERSION:
                raise ValueError(f"expected {{'version': {_FORMAT_VERSION}, 'acls': [...]}}")
            entries = doc.get("acls")
            if not isinstance(entries, list):
                raise ValueError("'acls' is not a list")
            return frozenset(_from_json(e) for e in entries)
        except (ValueError, UnicodeDecodeError) as e:
            raise AclStoreUnreadableError(
                f"ACL file {self.path} cannot be read ({e}); refusing to start rather than "
                "run without its ACLs. Fix or restore it (moving it aside starts with no ACLs)"
            ) from None

    def _save(self, bindings: frozenset[AclBinding]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        doc = {
            "version": _FORMAT_VERSION,
            "acls": [_to_json(b) for b in sorted(bindings, key=_sort_key)],
        }
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)

    async def create(self, bindings: list[AclBinding]) -> None:
        async with self._lock:
            new = self._bindings | frozenset(bindings)
            if new != self._bindings:
                self._save(new)
                self._install(new)

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        async with self._lock:
            matched = _matches(self._bindings, filters)
            gone = {b for found in matched for b in found}
            if gone:
                new = self._bindings - gone
                self._save(new)
                self._install(new)
            return matched


_SELECT = (
    "SELECT resource_type, resource_name, pattern_type, principal, host, operation, "
    "permission_type FROM kgc_acl"
)
_BUMP = (
    "INSERT INTO kgc_cluster_change (version, kind, key) "
    "SELECT coalesce((SELECT max(version) FROM kgc_cluster_change), 0) + 1, 'acl', $1"
)
# One statement: the new rows, and a version row only if some row was new.
_CREATE = """
WITH i AS (
    INSERT INTO kgc_acl (resource_type, resource_name, pattern_type, principal, host,
                         operation, permission_type)
    SELECT * FROM unnest($1::smallint[], $2::text[], $3::smallint[], $4::text[], $5::text[],
                         $6::smallint[], $7::smallint[])
    ON CONFLICT DO NOTHING
    RETURNING 1
), c AS (
    INSERT INTO kgc_cluster_change (version, kind, key)
    SELECT coalesce((SELECT max(version) FROM kgc_cluster_change), 0) + 1, 'acl', 'create'
    WHERE EXISTS (SELECT 1 FROM i)
)
SELECT count(*) FROM i
"""
_DELETE = """
DELETE FROM kgc_acl a
USING unnest($1::smallint[], $2::text[], $3::smallint[], $4::text[], $5::text[],
             $6::smallint[], $7::smallint[])
      AS d(resource_type, resource_name, pattern_type, principal, host, operation,
           permission_type)
WHERE (a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host, a.operation,
       a.permission_type)
    = (d.resource_type, d.resource_name, d.pattern_type, d.principal, d.host, d.operation,
       d.permission_type)
"""


def _columns(bindings: Iterable[AclBinding]) -> list[list[Any]]:
    cols: list[list[Any]] = [[], [], [], [], [], [], []]
    for b in bindings:
        for col, value in zip(cols, _sort_key(b), strict=True):
            col.append(int(value) if isinstance(value, int) else value)
    return cols


def _row(r: Any) -> AclBinding:
    return AclBinding(
        ResourceType.from_code(int(r["resource_type"])),
        r["resource_name"],
        PatternType.from_code(int(r["pattern_type"])),
        r["principal"],
        r["host"],
        AclOperation.from_code(int(r["operation"])),
        AclPermissionType.from_code(int(r["permission_type"])),
    )


class PgAclStore(AclStore):
    """``kgc_acl`` in the cluster's database; ``start`` loads it and begins following it."""

    def __init__(self, pool: Any, *, poll_interval_ms: int = 500) -> None:
        super().__init__()
        self.pool = pool  # asyncpg pool
        self.poll_interval_ms = poll_interval_ms
        self._version = -1  # kgc_cluster_change's max(version) at the last load
        self._listener: Any = None
        self._poller: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._refresh_lock = asyncio.Lock()

    async def start(self, url: str | None = None, application_name: str = "kgc-acl") -> None:
        """Load the ACLs, then follow changes (LISTEN when ``url`` is given, and the poll)."""
        await self.refresh()
        if url is not None:
            import asyncpg

            self._listener = await asyncpg.connect(
                url, server_settings={"application_name": application_name}
            )
            await self._listener.add_listener(ACL_CHANNEL, self._notified)
        self._poller = asyncio.get_running_loop().create_task(self._poll())

    def _notified(self, *_args: Any) -> None:
        self._wake.set()

    async def _poll(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_interval_ms / 1000)
            self._wake.clear()
            try:
                await self.refresh_if_changed()
            except Exception as exc:  # the database is away: keep the last set, retry
                log.debug("ACL refresh failed: %r", exc)

    async def refresh_if_changed(self) -> None:
        async with self.pool.acquire() as conn:
            version = int(
                await conn.fetchval("SELECT coalesce(max(version), 0) FROM kgc_cluster_change")
            )
        if version != self._version:
            await self.refresh()

    async def refresh(self) -> None:
        """Reload the whole table (and remember the change version it reflects)."""
        async with (
            self._refresh_lock,
            self.pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            # One snapshot: the version read never runs ahead of the rows read.
            version = int(
                await conn.fetchval("SELECT coalesce(max(version), 0) FROM kgc_cluster_change")
            )
            rows = await conn.fetch(_SELECT)
        self._version = version
        self._install(frozenset(_row(r) for r in rows))

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close(timeout=2)
            self._listener = None

    async def _announce(self) -> None:
        with contextlib.suppress(Exception):  # only a hint: the version row is the truth
            async with self.pool.acquire() as conn:
                await conn.execute("SELECT pg_notify($1, '')", ACL_CHANNEL)

    async def create(self, bindings: list[AclBinding]) -> None:
        import asyncpg

        if not bindings:
            return
        cols = _columns(set(bindings))
        for attempt in range(_VERSION_RETRIES):
            try:
                async with self.pool.acquire() as conn:
                    added = int(await conn.fetchval(_CREATE, *cols))
                break
            except asyncpg.UniqueViolationError as e:
                if (
                    e.constraint_name != "kgc_cluster_change_pkey"
                    or attempt + 1 == _VERSION_RETRIES
                ):
                    raise
        if added:
            await self._announce()
        await self.refresh()

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        import asyncpg

        for attempt in range(_VERSION_RETRIES):
            try:
                async with self.pool.acquire() as conn, conn.transaction():
                    # Lock the table against concurrent changes: every filter must see the
                    # same set, and what is reported deleted must be what was deleted.
                    await conn.execute("LOCK TABLE kgc_acl IN SHARE ROW EXCLUSIVE MODE")
                    current = [_row(r) for r in await conn.fetch(_SELECT)]
                    matched = _matches(current, filters)
                    gone = {b for found in matched for b in found}
                    if gone:
                        await conn.execute(_DELETE, *_columns(gone))
                        await conn.execute(_BUMP, "delete")
                break
            except asyncpg.UniqueViolationError as e:
                if (
                    e.constraint_name != "kgc_cluster_change_pkey"
                    or attempt + 1 == _VERSION_RETRIES
                ):
                    raise
        if gone:
            await self._announce()
        await self.refresh()
        return matched
