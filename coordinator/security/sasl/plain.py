"""SASL/PLAIN (RFC 4616) against users from a JAAS line, as Kafka's PlainSaslServer.

How this works: the client sends one message ``[authzid] NUL authcid NUL passwd``; the
server checks the password against the ``user_<name>="<password>"`` options of the
listener's ``PlainLoginModule`` entry (Kafka's PlainServerCallbackHandler) with a
constant-time comparison, and the exchange completes with an empty answer. An unknown user
and a wrong password fail alike (the same exception, the same work: the password is compared
against a dummy when the user is unknown). An authorization id other than the user fails too.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from coordinator.security import AuthenticationError, KafkaPrincipal
from coordinator.security.jaas import JaasEntry

__all__ = ["LOGIN_MODULE", "MECHANISM", "PlainMechanism", "PlainSaslServer"]

MECHANISM = "PLAIN"
LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_USER_PREFIX = "user_"
_DUMMY = b"\x00" * 32  # compared against when the user is unknown, so both paths do the same


class PlainSaslServer:
    def __init__(self, users: Mapping[str, bytes]) -> None:
        self._users = users
        self._principal: KafkaPrincipal | None = None
        self._done = False

    def evaluate(self, token: bytes) -> bytes:
        if self._done:
            raise AuthenticationError("PLAIN: unexpected message after the exchange ended")
        self._done = True  # one message, whatever comes of it
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        # Kafka splits on the first three NULs and wants exactly three parts.
        parts = text.split("\x00", 3)
        if len(parts) != 3:
            raise AuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(parts), 4)}"
            )
        authzid, username, password = parts
        if not username:
            raise AuthenticationError("Authentication failed: username not specified")
        if not password:
            raise AuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(username)
        ok = hmac.compare_digest(password.encode(), expected if expected is not None else _DUMMY)
        if expected is None or not ok:
            raise AuthenticationError(
                f"Authentication failed: Invalid username or password (user {username!r})"
            )
        if authzid and authzid != username:
            raise AuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        self._principal = KafkaPrincipal("User", username)
        return b""

    @property
    def complete(self) -> bool:
        return self._principal is not None

    @property
    def principal(self) -> KafkaPrincipal:
        if self._principal is None:
            raise RuntimeError("PLAIN exchange has not completed")
        return self._principal

    @property
    def session_lifetime_ms(self) -> int | None:
        return None


class PlainMechanism:
    name = MECHANISM

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = {user: password.encode() for user, password in users.items()}

    @classmethod
    def from_jaas(cls, entry: JaasEntry) -> PlainMechanism:
        """The ``user_<name>`` options of a PlainLoginModule entry."""
        if entry.login_module != LOGIN_MODULE:
            raise ValueError(
                f"PLAIN needs {LOGIN_MODULE} in its sasl.jaas.config, got {entry.login_module}"
            )
        return cls(
            {
                key[len(_USER_PREFIX) :]: value
                for key, value in entry.options.items()
                if key.startswith(_USER_PREFIX)
            }
        )

    def server(self) -> PlainSaslServer:
        return PlainSaslServer(self._users)
