"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), as Kafka answers them.

How this works: Describe reads the credential store's copy; Alter validates the request as
Kafka's ScramControlManager does, then applies every accepted change in one store write
(Kafka commits them as one atomic batch of records) and answers each user:

* a user named twice in one Alter request (deletion or upsertion, any mechanism):
  DUPLICATE_RESOURCE, and none of its changes is applied; an empty name:
  UNACCEPTABLE_CREDENTIAL; a mechanism other than SCRAM-SHA-256 (1) / SCRAM-SHA-512 (2):
  UNSUPPORTED_SASL_MECHANISM; iterations below 4096 or above 16384:
  UNACCEPTABLE_CREDENTIAL; deleting a credential that does not exist: RESOURCE_NOT_FOUND.
  Results list the deletions, then the upsertions that succeeded, then the errors.
* Describe with no users (null or empty) lists every user; a user named twice:
  DUPLICATE_RESOURCE; an unknown one: RESOURCE_NOT_FOUND, with Kafka's messages. Only the
  mechanism and the iteration count are ever returned, never salt or keys.

Authorization: Kafka requires DESCRIBE (Describe) and ALTER (Alter) on the CLUSTER resource.
``ScramAdmin(authorize=...)`` is the hook: ``authorize(client, operation)`` with operation
``"DESCRIBE"`` or ``"ALTER"``; None (today's default) allows everything. A refusal is
answered as Kafka's getErrorResponse does: Describe gets a top-level
CLUSTER_AUTHORIZATION_FAILED, Alter that code for every user it names (sorted).

The store is refreshed before an Alter is validated (cluster mode: another node may have
changed it since this node's last heartbeat); a deletion that another node's concurrent
change made void is answered RESOURCE_NOT_FOUND, as if it had been validated after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from coordinator.security import ScramCredential
from coordinator.security.credentials import (
    MAX_ITERATIONS,
    MECHANISM_NAMES,
    MECHANISM_TYPES,
    MIN_ITERATIONS,
    ScramChange,
    credential_from_salted,
)
from coordinator.server.handler import ClientInfo, Deferred
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)
from protocol.messages.describe_user_scram_credentials import (
    CredentialInfo,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
)

__all__ = ["AlterableCredentialStore", "ClusterAuthorize", "ScramAdmin"]

log = logging.getLogger("kgc.security.scram")

# (client, "DESCRIBE" | "ALTER") -> allowed? on the CLUSTER resource.
ClusterAuthorize = Callable[[ClientInfo, str], bool]

ALTERED_TWICE = "A user credential cannot be altered twice in the same request"
DESCRIBE_DUPLICATE_USER = (
    "Cannot describe SCRAM credentials for the same user twice in a single request: "
)
DESCRIBE_USER_THAT_DOES_NOT_EXIST = "Attempt to describe a user credential that does not exist: "
DELETE_MISSING = "Attempt to delete a user credential that does not exist"
NOT_AUTHORIZED = "Cluster authorization failed."


class AlterableCredentialStore(Protocol):
    """What the admin APIs need of a store (both stores of ``credentials`` are one)."""

    def get(self, user: str, mechanism: str) -> ScramCredential | None: ...

    def users(self) -> dict[str, list[ScramCredential]]: ...

    async def refresh(self) -> None: ...

    async def alter(self, changes: list[ScramChange]) -> set[int]: ...


class _Error(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        self.code = code
        self.message = message


def _check_name_and_mechanism(name: str, mechanism: int) -> str:
    """The mechanism's name, or _Error as ScramControlManager.validateScramUsernameAndMechanism."""
    if not name:
        raise _Error(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    mech = MECHANISM_NAMES.get(mechanism)
    if mech is None:
        raise _Error(ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    return mech


class ScramAdmin:
    def __init__(
        self, store: AlterableCredentialStore, authorize: ClusterAuthorize | None = None
    ) -> None:
        self.store = store
        self.authorize = authorize

    def _allowed(self, client: ClientInfo, operation: str) -> bool:
        return self.authorize is None or self.authorize(client, operation)

    # -- DescribeUserScramCredentials
    def describe_user_scram_credentials(
        self, header: RequestHeader, req: DescribeUserScramCredentialsRequest, client: ClientInfo
    ) -> DescribeUserScramCredentialsResponse:
        if not self._allowed(client, "DESCRIBE"):
            return DescribeUserScramCredentialsResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=NOT_AUTHORIZED
            )
        everyone = self.store.users()
        duplicated: dict[str, bool] = {}  # in request order (all users: sorted)
        if not req.users:
            duplicated = dict.fromkeys(everyone, False)
        else:
            for u in req.users:
                duplicated[u.name] = u.name in duplicated
        results: list[DescribeUserScramCredentialsResult] = []
        for user, twice in duplicated.items():
            if twice:
                results.append(
                    DescribeUserScramCredentialsResult(
                        user=user,
                        error_code=ErrorCode.DUPLICATE_RESOURCE,
                        error_message=DESCRIBE_DUPLICATE_USER + user,
                    )
                )
            elif user in everyone:
                results.append(
                    DescribeUserScramCredentialsResult(
                        user=user,
                        error_message="",  # Kafka 4.4's answer: empty, not null
                        credential_infos=[
                            CredentialInfo(MECHANISM_TYPES[c.mechanism], c.iterations)
                            for c in everyone[user]
                        ],
                    )
                )
            else:
                results.append(
                    DescribeUserScramCredentialsResult(
                        user=user,
                        error_code=ErrorCode.RESOURCE_NOT_FOUND,
                        error_message=DESCRIBE_USER_THAT_DOES_NOT_EXIST + user,
                    )
                )
        return DescribeUserScramCredentialsResponse(error_message="", results=results)

    # -- AlterUserScramCredentials
    def alter_user_scram_credentials(
        self, header: RequestHeader, req: AlterUserScramCredentialsRequest, client: ClientInfo
    ) -> AlterUserScramCredentialsResponse | Deferred:
        if not self._allowed(client, "ALTER"):
            names = {d.name for d in req.deletions} | {u.name for u in req.upsertions}
            return AlterUserScramCredentialsResponse(
                results=[
                    AlterUserScramCredentialsResult(
                        user=n,
                        error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        error_message=NOT_AUTHORIZED,
                    )
                    for n in sorted(names)
                ]
            )
        return Deferred.task(self.alter(req, client))

    async def alter(
        self, req: AlterUserScramCredentialsRequest, client: ClientInfo | None = None
    ) -> AlterUserScramCredentialsResponse:
        try:
            return await self._alter(req, client)
        except Exception as exc:
            # The store could not be read or written (cluster mode: the database is
            # unreachable). A write may have committed before the error: say so.
            log.warning("AlterUserScramCredentials failed: %r", exc)
            names = {d.name for d in req.deletions} | {u.name for u in req.upsertions}
            return AlterUserScramCredentialsResponse(
                results=[
                    AlterUserScramCredentialsResult(
                        user=n,
                        error_code=ErrorCode.UNKNOWN,
                        error_message="the credential store failed; the change may or may "
                        "not have been applied (describe to check)",
                    )
                    for n in sorted(names)
                ]
            )

    async def _alter(
        self, req: AlterUserScramCredentialsRequest, client: ClientInfo | None
    ) -> AlterUserScramCredentialsResponse:
        await self.store.refresh()
        deletions: dict[str, str] = {}  # user -> mechanism
        upsertions: dict[str, ScramChange] = {}
        errors: dict[str, _Error] = {}
        for d in req.deletions:
            if d.name in errors:
                continue
            if deletions.pop(d.name, None) is not None:
                errors[d.name] = _Error(ErrorCode.DUPLICATE_RESOURCE, ALTERED_TWICE)
                continue
            try:
                mech = _check_name_and_mechanism(d.name, d.mechanism)
                if self.store.get(d.name, mech) is None:
                    raise _Error(ErrorCode.RESOURCE_NOT_FOUND, DELETE_MISSING)
            except _Error as e:
                errors[d.name] = e
                continue
            deletions[d.name] = mech
        for u in req.upsertions:
            if u.name in errors:
                continue
            if deletions.pop(u.name, None) is not None or upsertions.pop(u.name, None) is not None:
                errors[u.name] = _Error(ErrorCode.DUPLICATE_RESOURCE, ALTERED_TWICE)
                continue
            try:
                mech = _check_name_and_mechanism(u.name, u.mechanism)
                if u.iterations < MIN_ITERATIONS:
                    raise _Error(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
                if u.iterations > MAX_ITERATIONS:
                    raise _Error(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
            except _Error as e:
                errors[u.name] = e
                continue
            upsertions[u.name] = ScramChange(
                u.name, mech, credential_from_salted(mech, u.salt, u.salted_password, u.iterations)
            )
        changes = [ScramChange(user, mech) for user, mech in deletions.items()]
        changes += upsertions.values()
        missing = await self.store.alter(changes) if changes else set()
        results: list[AlterUserScramCredentialsResult] = []
        for i, change in enumerate(changes):
            if i in missing:  # deleted by a concurrent change on another node
                errors[change.user] = _Error(ErrorCode.RESOURCE_NOT_FOUND, DELETE_MISSING)
            else:
                results.append(
                    AlterUserScramCredentialsResult(user=change.user, error_message=None)
                )
        if changes:
            who = f" by {client.principal} from {client.host}" if client is not None else ""
            log.info(
                "SCRAM credentials altered%s: %s",
                who,
                ", ".join(
                    f"{'deleted' if c.credential is None else 'set'} {c.user} ({c.mechanism})"
                    for i, c in enumerate(changes)
                    if i not in missing
                ),
            )
        results += [
            AlterUserScramCredentialsResult(user=user, error_code=e.code, error_message=e.message)
            for user, e in errors.items()
        ]
        return AlterUserScramCredentialsResponse(results=results)
