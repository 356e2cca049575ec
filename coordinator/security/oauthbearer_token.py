"""The OAUTHBEARER token and its validation error, shared by both validators.

How this works: a validator (``oauthbearer.JwtValidator`` for signed tokens,
``oauthbearer_unsecured.UnsecuredJwtValidator`` for Kafka's unsecured development default)
turns a token into an ``OAuthBearerToken`` (Kafka's BasicOAuthBearerToken) or raises
``TokenValidationError``, which the mechanism turns into RFC 7628's error challenge. Both
validators and the mechanism import these from here, so neither validator imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["OAuthBearerToken", "TokenValidationError", "TokenValidator"]


class TokenValidationError(Exception):
    """The token is not acceptable; the message says why (server log only). ``status`` and
    ``scope`` are what the error challenge tells the client (Kafka's validator callback's
    ``error(status, scope, openid-configuration)``)."""

    def __init__(
        self, message: str, *, status: str = "invalid_token", scope: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.scope = scope

    def challenge(self) -> str:
        """RFC 7628's error JSON, formatted as Kafka's OAuthBearerSaslServer writes it."""
        text = f'{{"status":"{self.status}"'
        if self.scope is not None:
            text += f', "scope":"{self.scope}"'
        return text + "}"


@dataclass(frozen=True, slots=True)
class OAuthBearerToken:
    """A validated token (Kafka's BasicOAuthBearerToken)."""

    value: str
    principal_name: str
    lifetime_ms: int  # exp, in ms since the epoch
    scope: frozenset[str]
    start_time_ms: int | None  # iat, in ms
    claims: Mapping[str, Any] = field(repr=False, compare=False)


class TokenValidator(Protocol):
    """What the mechanism asks of a validator: signed (``oauthbearer.JwtValidator``) or Kafka's
    unsecured development default (``oauthbearer_unsecured.UnsecuredJwtValidator``)."""

    def validate(self, token: str) -> OAuthBearerToken: ...

    def close(self) -> None: ...
