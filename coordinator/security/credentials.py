"""SCRAM credentials: how they are derived, and the two stores that keep them.

How this works: a credential is RFC 5802's stored form, as Kafka's ScramFormatter makes it:
``salted = Hi(password, salt, i)`` (PBKDF2 with HMAC over the mechanism's hash; Kafka does no
SASLprep, the password is its UTF-8 bytes), ``stored_key = H(HMAC(salted, "Client Key"))``,
``server_key = HMAC(salted, "Server Key")``. The password and the salted password are never
kept. AlterUserScramCredentials carries the salted password (the client salts and hashes),
so ``credential_from_salted`` derives the keys from it, as Kafka's controller does.

Both stores satisfy ``coordinator.security.CredentialStore``: ``get`` and ``users`` are
synchronous reads of an in-memory copy (the SASL exchange looks a user up on the event loop),
and ``alter`` changes several credentials at once (one AlterUserScramCredentials request
is one change, as Kafka applies it as one atomic batch of records):

* ``LocalCredentialStore`` (the embedded default): one JSON file in the data directory,
  rewritten whole on every change (temp file, fsync, rename, fsync the directory, as the
  topic catalog), so a crash leaves the old or the new file. The file is created 0600. A
  file that cannot be read stops start-up with one line (``CredentialsUnreadableError``):
  guessing would lock every SCRAM user out, or let a removed one back in.
* ``PgCredentialStore`` (cluster mode): rows of ``kgc_scram_credential``. A change is one
  statement (data-modifying CTEs) that also appends a ``kgc_cluster_change`` row of kind
  ``'scram'``; every node re-reads the table when that kind's version moves (``refresh``,
  run when the heartbeat sees the cluster's change version move, and before every change).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.security import ScramCredential
from storage.files import DataDirError, fsync_dir

__all__ = [
    "CREDENTIALS_FILE",
    "MAX_ITERATIONS",
    "MECHANISM_NAMES",
    "MECHANISM_TYPES",
    "MIN_ITERATIONS",
    "CredentialsUnreadableError",
    "LocalCredentialStore",
    "PgCredentialStore",
    "ScramChange",
    "credential_from_salted",
    "salted_password",
    "scram_credential",
]

log = logging.getLogger("kgc.security.credentials")

CREDENTIALS_FILE = "scram-credentials.json"

# Kafka's org.apache.kafka.clients.admin.ScramMechanism type codes (the wire's ``mechanism``).
MECHANISM_TYPES: dict[str, int] = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES: dict[int, str] = {v: k for k, v in MECHANISM_TYPES.items()}
_HASHES: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# ScramMechanism.minIterations() (4096 for both) and ScramControlManager.MAX_ITERATIONS.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
_SALT_BYTES = 32


def _hash(mechanism: str) -> str:
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise ValueError(
            f"unknown SCRAM mechanism {mechanism!r}; expected one of {', '.join(_HASHES)}"
        ) from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(password, salt, i): PBKDF2 over HMAC-H, one hash length of output."""
    return hashlib.pbkdf2_hmac(_hash(mechanism), password.encode(), salt, iterations)


def credential_from_salted(
    mechanism: str, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    """The stored form from a salted password (what AlterUserScramCredentials carries)."""
    name = _hash(mechanism)
    client_key = hmac.digest(salted, b"Client Key", name)
    return ScramCredential(
        mechanism=mechanism,
        salt=bytes(salt),
        stored_key=hashlib.new(name, client_key).digest(),
        server_key=hmac.digest(salted, b"Server Key", name),
        iterations=iterations,
    )


def scram_credential(
    mechanism: str, password: str, salt: bytes | None = None, iterations: int = MIN_ITERATIONS
) -> ScramCredential:
    """A credential for ``password``; a fresh random salt unless one is given."""
    if salt is None:
        salt = secrets.token_bytes(_SALT_BYTES)
    return credential_from_salted(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations
    )


@dataclass(frozen=True, slots=True)
class ScramChange:
    """One change of a store: ``credential`` None deletes (user, mechanism)."""

    user: str
    mechanism: str
    credential: ScramCredential | None = None


Credentials = dict[str, dict[str, ScramCredential]]  # user -> mechanism -> credential


def _users_view(creds: Credentials) -> dict[str, list[ScramCredential]]:
    return {user: [by_mech[m] for m in sorted(by_mech)] for user, by_mech in sorted(creds.items())}


def _apply(creds: Credentials, changes: Iterable[ScramChange]) -> tuple[Credentials, set[int]]:
    """``creds`` with ``changes`` applied (a new dict); the indexes of deletions that found
    nothing to delete."""
    out = {user: dict(by_mech) for user, by_mech in creds.items()}
    missing: set[int] = set()
    for i, change in enumerate(changes):
        if change.credential is None:
            by_mech = out.get(change.user, {})
            if by_mech.pop(change.mechanism, None) is None:
                missing.add(i)
            if not by_mech:
                out.pop(change.user, None)
        else:
            out.setdefault(change.user, {})[change.mechanism] = change.credential
    return out, missing


# ---------------------------------------------------------------- local (the embedded default)


class CredentialsUnreadableError(DataDirError):
    """The credentials file exists but cannot be read; kgc will not guess who may log in."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class LocalCredentialStore:
    """SCRAM credentials in ``<data dir>/scram-credentials.json`` (see the module doc).

    The caller holds the data directory's lock (``kgc serve`` through its LogManager,
    ``kgc users`` itself), so no other process writes the file meanwhile.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._creds: Credentials = {}
        if path.exists():
            self._creds = self._load()

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> LocalCredentialStore:
        return cls(data_dir / CREDENTIALS_FILE)

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        by_mech = self._creds.get(user)
        return by_mech.get(mechanism) if by_mech is not None else None

    def users(self) -> dict[str, list[ScramCredential]]:
        return _users_view(self._creds)

    def apply(self, changes: list[ScramChange]) -> set[int]:
        """Apply ``changes`` in one durable write; returns the indexes of deletions that
        found nothing (nothing is written when nothing changed)."""
        creds, missing = _apply(self._creds, changes)
        if len(missing) < len(changes):
            self._save(creds)
        self._creds = creds
        return missing

    async def alter(self, changes: list[ScramChange]) -> set[int]:
        """The admin API's entry point (``PgCredentialStore.alter``'s signature)."""
        return self.apply(changes)

    async def refresh(self) -> None:
        """Nothing to do: this process is the file's only writer."""

    def _load(self) -> Credentials:
        try:
            raw = json.loads(self.path.read_bytes())
            if not isinstance(raw, dict) or raw.get("version") != 1:
                raise ValueError('expected an object with "version": 1')
            creds: Credentials = {}
            for user, by_mech in raw["users"].items():
                for mechanism, c in by_mech.items():
                    _hash(mechanism)
                    iterations = c["iterations"]
                    if not isinstance(iterations, int) or iterations <= 0:
                        raise ValueError(f"user {user!r}: bad iterations {iterations!r}")
                    creds.setdefault(user, {})[mechanism] = ScramCredential(
                        mechanism=mechanism,
                        salt=base64.b64decode(c["salt"], validate=True),
                        stored_key=base64.b64decode(c["stored_key"], validate=True),
                        server_key=base64.b64decode(c["server_key"], validate=True),
                        iterations=iterations,
                    )
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
            raise CredentialsUnreadableError(
                f"SCRAM credentials file {self.path} cannot be read ({e}); refusing to guess "
                "who may authenticate. Restore it, or move it aside and add the users again "
                "(kgc users add)"
            ) from None
        return creds

    def _save(self, creds: Credentials) -> None:
        data = {
            "version": 1,
            "users": {
                user: {
                    m: {
                        "salt": _b64(c.salt),
                        "stored_key": _b64(c.stored_key),
                        "server_key": _b64(c.server_key),
                        "iterations": c.iterations,
                    }
                    for m, c in sorted(by_mech.items())
                }
                for user, by_mech in sorted(creds.items())
            },
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        # 0600: salted hashes are not passwords, but an offline dictionary attack on them
        # is still an attack; nobody but kgc's user needs to read them.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)


# ---------------------------------------------------------------- PostgreSQL (cluster mode)

_VERSION_RETRIES = 10

_SCRAM_VERSION = "SELECT coalesce(max(version), 0) FROM kgc_cluster_change WHERE kind = 'scram'"

_LOAD = """
SELECT user_name, mechanism, salt, stored_key, server_key, iterations
FROM kgc_scram_credential
"""

# One statement, hence one transaction: deletions, upserts and the change row together. The
# change row is written only if a row changed; ``deleted`` tells which deletions found one.
_ALTER = """
WITH d AS (
    DELETE FROM kgc_scram_credential AS c
    USING unnest($1::text[], $2::text[]) AS del(user_name, mechanism)
    WHERE c.user_name = del.user_name AND c.mechanism = del.mechanism
    RETURNING c.user_name, c.mechanism
), u AS (
    INSERT INTO kgc_scram_credential AS c
        (user_name, mechanism, salt, stored_key, server_key, iterations)
    SELECT * FROM unnest($3::text[], $4::text[], $5::bytea[], $6::bytea[], $7::bytea[],
                         $8::integer[])
    ON CONFLICT (user_name, mechanism) DO UPDATE SET
        salt = EXCLUDED.salt, stored_key = EXCLUDED.stored_key,
        server_key = EXCLUDED.server_key, iterations = EXCLUDED.iterations
    RETURNING 1
), c AS (
    INSERT INTO kgc_cluster_change (version, kind, key)
    SELECT coalesce((SELECT max(version) FROM kgc_cluster_change), 0) + 1, 'scram',
           coalesce((SELECT min(user_name) FROM d), $9)
    WHERE EXISTS (SELECT 1 FROM d) OR EXISTS (SELECT 1 FROM u)
)
SELECT coalesce(array_agg(user_name), '{}') AS users,
       coalesce(array_agg(mechanism), '{}') AS mechanisms
FROM d
"""


class PgCredentialStore:
    """SCRAM credentials shared by a cluster's nodes (see the module doc).

    ``pool`` is an asyncpg pool; ``refresh`` must have run once before ``get`` answers.
    """

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self._creds: Credentials = {}
        self.version = -1  # the 'scram' change version the copy reflects

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        by_mech = self._creds.get(user)
        return by_mech.get(mechanism) if by_mech is not None else None

    def users(self) -> dict[str, list[ScramCredential]]:
        return _users_view(self._creds)

    async def refresh(self) -> None:
        """Re-read the credentials if a 'scram' change happened since the last read.

        The version is read in the same transaction (REPEATABLE READ) as the rows, so the
        copy is never older than the version it records.
        """
        async with self.pool.acquire() as conn:
            version = int(await conn.fetchval(_SCRAM_VERSION))
            if version == self.version:
                return
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                version = int(await conn.fetchval(_SCRAM_VERSION))
                rows = await conn.fetch(_LOAD)
        creds: Credentials = {}
        for r in rows:
            creds.setdefault(r["user_name"], {})[r["mechanism"]] = ScramCredential(
                mechanism=r["mechanism"],
                salt=bytes(r["salt"]),
                stored_key=bytes(r["stored_key"]),
                server_key=bytes(r["server_key"]),
                iterations=int(r["iterations"]),
            )
        self._creds = creds
        self.version = version
        log.debug("SCRAM credentials refreshed: %d user(s), version %d", len(creds), version)

    async def alter(self, changes: list[ScramChange]) -> set[int]:
        """Apply ``changes`` in one transaction; returns the indexes of deletions that
        found nothing to delete. The copy is refreshed afterwards. Each (user, mechanism)
        appears at most once in ``changes`` (the admin API refuses a user altered twice)."""
        import asyncpg

        deletions = [c for c in changes if c.credential is None]
        upserts = [c.credential for c in changes if c.credential is not None]
        ups = [c for c in changes if c.credential is not None]
        args = (
            [c.user for c in deletions],
            [c.mechanism for c in deletions],
            [c.user for c in ups],
            [c.mechanism for c in ups],
            [c.salt for c in upserts],
            [c.stored_key for c in upserts],
            [c.server_key for c in upserts],
            [c.iterations for c in upserts],
            changes[0].user if changes else "",
        )
        deleted: set[tuple[str, str]] = set()
        async with self.pool.acquire() as conn:
            for attempt in range(_VERSION_RETRIES):
                try:
                    row = await conn.fetchrow(_ALTER, *args)
                    deleted = set(zip(row["users"], row["mechanisms"], strict=True))
                    break
                except asyncpg.UniqueViolationError as e:
                    # A concurrent change took the same version: the statement rolled back.
                    if (
                        e.constraint_name != "kgc_cluster_change_pkey"
                        or attempt + 1 == _VERSION_RETRIES
                    ):
                        raise
        await self.refresh()
        return {
            i
            for i, c in enumerate(changes)
            if c.credential is None and (c.user, c.mechanism) not in deleted
        }
