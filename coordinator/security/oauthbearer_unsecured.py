"""Kafka's default OAUTHBEARER validation: unsecured JWTs (``alg: none``), for development.

How this works: a Kafka broker that enables OAUTHBEARER without naming a validator uses
``OAuthBearerUnsecuredValidatorCallbackHandler``, which accepts a token only if it is *not*
signed, and checks its claims: ``exp`` required, ``iat`` optional, ``exp`` after ``iat``, the
principal claim a non-blank string, and the required scope. Its options come from the
mechanism's JAAS line (``unsecuredValidatorPrincipalClaimName``, ``...ScopeClaimName``,
``...RequiredScope``, ``...AllowableClockSkewMs``). kgc does the same, so a development
setup written for Kafka works unchanged; start-up logs a warning that anyone can then claim
any identity. Setting ``sasl.oauthbearer.jwks.endpoint.url`` selects signed-token validation
(``oauthbearer.JwtValidator``) instead.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from coordinator.security.oauthbearer_token import OAuthBearerToken, TokenValidationError

PRINCIPAL_CLAIM_NAME_OPTION = "unsecuredValidatorPrincipalClaimName"
SCOPE_CLAIM_NAME_OPTION = "unsecuredValidatorScopeClaimName"
REQUIRED_SCOPE_OPTION = "unsecuredValidatorRequiredScope"
ALLOWABLE_CLOCK_SKEW_MILLIS_OPTION = "unsecuredValidatorAllowableClockSkewMs"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _part(text: str) -> dict[str, Any]:
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise TokenValidationError(f"Malformed JWT part: {e}") from None
    if not isinstance(value, dict):
        raise TokenValidationError("Malformed JWT part: not a JSON object")
    return value


def _seconds(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenValidationError(f"The {name} claim had the incorrect type")
    return float(value)


class UnsecuredJwtValidator:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler over OAuthBearerUnsecuredJws."""

    def __init__(self, options: Mapping[str, str], clock: Callable[[], int] = _now_ms) -> None:
        def option(name: str, default: str) -> str:
            value = (options.get(name) or "").strip()
            return value or default

        self.principal_claim_name = option(PRINCIPAL_CLAIM_NAME_OPTION, "sub")
        self.scope_claim_name = option(SCOPE_CLAIM_NAME_OPTION, "scope")
        self.required_scope = option(REQUIRED_SCOPE_OPTION, "").split()
        skew = option(ALLOWABLE_CLOCK_SKEW_MILLIS_OPTION, "0")
        try:
            self.allowable_clock_skew_ms = int(skew)
        except ValueError:
            raise ValueError(
                f"{ALLOWABLE_CLOCK_SKEW_MILLIS_OPTION}: not an integer: {skew!r}"
            ) from None
        if self.allowable_clock_skew_ms < 0:
            raise ValueError(
                f"Allowable clock skew millis must not be negative: {self.allowable_clock_skew_ms}"
            )
        self._clock = clock

    def close(self) -> None:
        pass

    def validate(self, token: str) -> OAuthBearerToken:
        if ".." in token:
            raise TokenValidationError("Malformed compact serialization contains '..'")
        splits = token.split(".")
        if len(splits) != 3:
            raise TokenValidationError(
                "Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values"
            )
        header, claims = _part(splits[0]), _part(splits[1])
        if header.get("alg") != "none":
            raise TokenValidationError("Unsecured JWS must have 'none' for an algorithm")
        if splits[2]:
            raise TokenValidationError("Unsecured JWS must not contain a digital signature")
        exp = _seconds(claims, "exp")
        if exp is None:
            raise TokenValidationError("No expiration time in JWT")
        principal = claims.get(self.principal_claim_name)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenValidationError(
                f"No principal name in JWT claim: {self.principal_claim_name}"
            )
        scope = self._scope(claims)
        iat = _seconds(claims, "iat")
        now, skew = self._clock(), self.allowable_clock_skew_ms
        if iat is not None and 1000 * iat > now + skew:
            raise TokenValidationError(
                "The Issued At value was after the indicated time plus allowable clock skew"
            )
        if now - skew >= 1000 * exp:
            raise TokenValidationError(
                "The indicated time minus allowable clock skew was on or after the Expiration Time value"
            )
        if iat is not None and exp <= iat:
            raise TokenValidationError("The Expiration Time time was not after the Issued At time")
        for required in self.required_scope:
            if required not in scope:
                # Kafka's challenge names every required scope, as Java prints a list.
                raise TokenValidationError(
                    f"The provided scope was missing a required scope ({required})",
                    status="insufficient_scope",
                    scope="[" + ", ".join(self.required_scope) + "]",
                )
        return OAuthBearerToken(
            value=token,
            principal_name=principal,
            lifetime_ms=int(exp * 1000),
            scope=scope,
            start_time_ms=None if iat is None else int(iat * 1000),
            claims=claims,
        )

    def _scope(self, claims: Mapping[str, Any]) -> frozenset[str]:
        """Kafka's OAuthBearerUnsecuredJws.calculateScope: a string is one scope (trimmed),
        a list holds the scopes (blank ones left out), anything else is none."""
        raw = claims.get(self.scope_claim_name)
        if isinstance(raw, str):
            return frozenset([raw.strip()]) if raw.strip() else frozenset()
        if isinstance(raw, list):
            return frozenset(s.strip() for s in raw if isinstance(s, str) and s.strip())
        return frozenset()
