"""Keys, tokens and the refusal round of the OAUTHBEARER tests.

How this works: RSA and EC keys are made once per test session (cryptography) and published
as a JWKS; ``claims`` gives a token's claims around the tests' fixed clock (``NOW_MS``),
``sign`` signs them with PyJWT, ``first_message`` wraps a token as Kafka's and librdkafka's
clients do, and ``assert_refused`` checks Kafka's round for an invalid token: the error
challenge, then failure on the client's ``\\x01``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from coordinator.security import AuthenticationError
from coordinator.security.oauthbearer import (
    INVALID_TOKEN_CHALLENGE,
    JwtValidator,
    OAuthBearerMechanism,
    OAuthBearerSaslServer,
    StaticJwks,
)

NOW_MS = 1_750_000_000_000  # the tests' fixed clock
NOW_S = NOW_MS // 1000
ISSUER = "https://idp.example.com"
AUDIENCE = "kgc"


def _rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


RSA_KEY = _rsa()
OTHER_RSA_KEY = _rsa()
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def jwk(key: Any, kid: str, **extra: str) -> dict[str, Any]:
    public = key.public_key()
    data = json.loads(
        RSAAlgorithm.to_jwk(public)
        if isinstance(public, rsa.RSAPublicKey)
        else ECAlgorithm.to_jwk(public)
    )
    return {**data, "kid": kid, "use": "sig", **extra}


JWKS = {"keys": [jwk(RSA_KEY, "rsa-1"), jwk(EC_KEY, "ec-1")]}


def claims(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "sub": "alice",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": NOW_S - 10,
        "exp": NOW_S + 600,
        "scope": "kafka",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def sign(
    payload: dict[str, Any], key: Any = RSA_KEY, alg: str = "RS256", kid: str | None = "rsa-1"
) -> str:
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode(payload, key, algorithm=alg, headers=headers)


def first_message(token: str, authzid: str = "", extensions: str = "") -> bytes:
    """The client's first message as Kafka's and librdkafka's clients build it."""
    a = f"a={authzid}" if authzid else ""
    return f"n,{a},\x01auth=Bearer {token}\x01{extensions}\x01".encode()


def mechanism(**validator_args: Any) -> OAuthBearerMechanism:
    args: dict[str, Any] = {"expected_audience": [AUDIENCE], "expected_issuer": ISSUER}
    args.update(validator_args)
    return OAuthBearerMechanism(
        JwtValidator(StaticJwks(JWKS), clock=lambda: NOW_MS, **args), clock=lambda: NOW_MS
    )


def assert_refused(
    server: OAuthBearerSaslServer,
    message: bytes,
    reason: str = "",
    challenge: bytes = INVALID_TOKEN_CHALLENGE,
) -> None:
    """Kafka's round: the error challenge, then failure on the client's \\x01."""
    assert server.evaluate(message) == challenge
    assert not server.complete
    with pytest.raises(AuthenticationError, match=re.escape(reason) if reason else None):
        server.evaluate(b"\x01")
    assert not server.complete
