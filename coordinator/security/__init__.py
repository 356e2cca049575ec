"""Security: who a connection is (authentication) and what it may do (authorization).

How this works: a listener's security protocol decides how a connection proves who it is
(TLS client certificates, SASL mechanisms); the result is a ``KafkaPrincipal`` carried in the
connection's ``ClientInfo``. Handlers never authenticate; an authorizer (``acl.py``) answers
"may this principal, from this host, do this operation on this resource" with Kafka's ACL
semantics. The contracts shared by the parts live here:

* ``KafkaPrincipal`` ("User:alice"), ``ANONYMOUS`` (what PLAINTEXT connections are);
* ``SaslServer``/``SaslMechanism``: one authentication exchange, token by token;
* ``ScramCredential``/``CredentialStore``: salted, hashed SCRAM credentials (never the
  password), behind the storage interface like every durable thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

__all__ = [
    "ANONYMOUS",
    "AuthenticationError",
    "CredentialStore",
    "KafkaPrincipal",
    "SaslMechanism",
    "SaslServer",
    "ScramCredential",
]


class KafkaPrincipal(NamedTuple):
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal("User", "alice") (ValueError without a type)."""
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise ValueError(f"a principal is TYPE:NAME, got {text!r}")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


class AuthenticationError(Exception):
    """Authentication failed. The message is for the server's log only: clients get a
    message that reveals nothing about which part was wrong (Kafka's behaviour), unless
    ``client_message`` is given: what Kafka's mechanism tells the client in that case (its
    ``SaslAuthenticationException``, e.g. OAUTHBEARER's error JSON)."""

    def __init__(self, message: str, client_message: str | None = None) -> None:
        super().__init__(message)
        self.client_message = client_message


class SaslServer(Protocol):
    """One SASL exchange on one connection (Kafka's SaslServer)."""

    def evaluate(self, token: bytes) -> bytes:
        """Consume the client's token, return the server's (may be b""); raise
        ``AuthenticationError`` to fail the exchange."""
        ...

    @property
    def complete(self) -> bool: ...

    @property
    def principal(self) -> KafkaPrincipal:
        """The authenticated principal (only once ``complete``)."""
        ...

    @property
    def session_lifetime_ms(self) -> int | None:
        """How long the credential stays valid (KIP-368; OAUTHBEARER's token expiry), or
        None for no limit of its own."""
        ...


class SaslMechanism(Protocol):
    name: str  # "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"

    def server(self) -> SaslServer:
        """A fresh exchange for one authentication attempt."""
        ...


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """RFC 5802's stored form: never the password."""

    mechanism: str  # "SCRAM-SHA-256" | "SCRAM-SHA-512"
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


class CredentialStore(Protocol):
    """SCRAM credentials by (user, mechanism): durable, shared by a cluster's nodes."""

    def get(self, user: str, mechanism: str) -> ScramCredential | None: ...

    def users(self) -> dict[str, list[ScramCredential]]:
        """Every user with its credentials (DescribeUserScramCredentials, ``kgc users list``)."""
        ...
