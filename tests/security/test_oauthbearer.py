"""SASL/OAUTHBEARER: the client message, JWT validation and the error-challenge round.

Keys and JWKS are made here (cryptography); tokens are signed with PyJWT. Every refusal is
checked the way Kafka's server behaves: an invalid token gets the ``{"status":"invalid_token"}``
challenge, and the exchange fails (AuthenticationError) on the client's ``\\x01`` reply; a
message that does not parse fails at once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from support.oauthkit import (
    AUDIENCE,
    EC_KEY,
    ISSUER,
    JWKS,
    NOW_MS,
    NOW_S,
    OTHER_RSA_KEY,
    RSA_KEY,
    assert_refused,
    claims,
    first_message,
    jwk,
    mechanism,
    sign,
)

from coordinator.config import Settings
from coordinator.security import AuthenticationError, KafkaPrincipal, SaslMechanism
from coordinator.security.oauthbearer import (
    INVALID_TOKEN_CHALLENGE,
    SECURED_VALIDATOR,
    FileJwks,
    JwtValidator,
    OAuthBearerMechanism,
    StaticJwks,
    mechanism_from_config,
    mechanism_from_settings,
    parse_client_initial_response,
)

URL_SETTING = "sasl.oauthbearer.jwks.endpoint.url"


def test_mechanism_satisfies_the_contract() -> None:
    m: SaslMechanism = mechanism()
    assert m.name == "OAUTHBEARER"
    assert m.server() is not m.server()


@pytest.mark.parametrize(
    ("key", "alg", "kid"),
    [
        (RSA_KEY, "RS256", "rsa-1"),
        (RSA_KEY, "RS512", "rsa-1"),
        (RSA_KEY, "PS256", "rsa-1"),
        (EC_KEY, "ES256", "ec-1"),
    ],
)
def test_valid_token_authenticates_with_sub_principal_and_lifetime(
    key: Any, alg: str, kid: str
) -> None:
    server = mechanism().server()
    token = sign(claims(), key, alg, kid)
    assert server.evaluate(first_message(token)) == b""
    assert server.complete
    assert server.principal == KafkaPrincipal("User", "alice")
    assert str(server.principal) == "User:alice"
    # KIP-368: the session lasts until the token expires.
    assert server.session_lifetime_ms == 600_000
    assert server.token is not None and server.token.scope == frozenset({"kafka"})


def test_token_without_kid_uses_the_key_of_its_type() -> None:
    server = mechanism().server()
    assert server.evaluate(first_message(sign(claims(), kid=None))) == b""
    assert server.principal.name == "alice"


def test_expired_within_clock_skew_is_accepted_with_zero_lifetime() -> None:
    server = mechanism().server()
    assert server.evaluate(first_message(sign(claims(exp=NOW_S - 20)))) == b""
    assert server.session_lifetime_ms == 0


def test_clock_skew_setting_is_used() -> None:
    token = sign(claims(exp=NOW_S - 20))
    assert_refused(mechanism(clock_skew_seconds=5).server(), first_message(token))


def test_sub_claim_name_and_audience_list() -> None:
    m = mechanism(sub_claim_name="client_id", expected_audience=["other", AUDIENCE])
    server = m.server()
    token = sign(claims(client_id="svc-orders", aud=["x", AUDIENCE]))
    assert server.evaluate(first_message(token)) == b""
    assert server.principal == KafkaPrincipal("User", "svc-orders")


def test_no_expected_audience_or_issuer_accepts_tokens_without_them() -> None:
    m = mechanism(expected_audience=(), expected_issuer=None)
    server = m.server()
    assert server.evaluate(first_message(sign(claims(aud=None, iss=None)))) == b""
    assert server.complete


def _forged_hs256() -> str:
    # The classic confusion: HMAC "signed" with the public key as the shared secret.
    pem = RSA_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = jwt.utils.base64url_encode(json.dumps({"alg": "HS256", "kid": "rsa-1"}).encode())
    body = jwt.utils.base64url_encode(json.dumps(claims()).encode())
    signing_input = header + b"." + body
    signature = jwt.utils.base64url_encode(hmac.new(pem, signing_input, hashlib.sha256).digest())
    return (signing_input + b"." + signature).decode()


def _unsigned() -> str:
    return jwt.encode(claims(), None, algorithm="none", headers={"kid": "rsa-1"})


def _unsigned_with_a_signature() -> str:
    # alg none with something in the signature section, so the algorithm itself is refused.
    return _unsigned() + "c2lnbmF0dXJl"


def _tampered() -> str:
    header, _, signature = sign(claims()).split(".")
    payload = jwt.utils.base64url_encode(json.dumps(claims(sub="admin")).encode()).decode()
    return f"{header}.{payload}.{signature}"


# case: (the token, a part of the reason the server logs, to show it failed for that reason)
REFUSED: dict[str, tuple[Callable[[], str], str]] = {
    "expired": (lambda: sign(claims(exp=NOW_S - 31)), "no longer valid"),
    "not yet valid": (lambda: sign(claims(nbf=NOW_S + 31)), "not yet valid"),
    "wrong audience": (lambda: sign(claims(aud="someone-else")), "Audience doesn't match"),
    "missing audience": (lambda: sign(claims(aud=None)), 'missing the "aud"'),
    "wrong issuer": (lambda: sign(claims(iss="https://evil.example.com")), "Invalid issuer"),
    "missing issuer": (lambda: sign(claims(iss=None)), 'missing the "iss"'),
    "wrong key": (lambda: sign(claims(), key=OTHER_RSA_KEY), "Signature verification failed"),
    "unknown kid": (lambda: sign(claims(), kid="rsa-2"), "suitable verification key"),
    "kid of a key of another type": (
        lambda: sign(claims(), kid="ec-1"),
        "suitable verification key",
    ),
    "alg none": (_unsigned, "section is empty"),
    "alg none with a signature": (_unsigned_with_a_signature, "'none' is not allowed"),
    "HS256 with the public key as secret": (_forged_hs256, "'HS256' is not allowed"),
    "tampered payload": (_tampered, "Signature verification failed"),
    "garbage": (lambda: "garbage", "three sections"),
    "three garbage sections": (lambda: "abc.def.ghi", "JWT header"),
    "missing sub": (lambda: sign(claims(sub=None)), "sub claim"),
    "blank sub": (lambda: sign(claims(sub="  ")), "sub claim"),
    "non-string sub": (lambda: sign(claims(sub=42)), "Subject must be a string"),
    "missing exp": (lambda: sign(claims(exp=None)), 'missing the "exp"'),
    "missing iat": (lambda: sign(claims(iat=None)), 'missing the "iat"'),
    "non-numeric exp": (lambda: sign(claims(exp="tomorrow")), "NumericDate"),
    "duplicate scopes": (lambda: sign(claims(scope=["a", "a"])), "duplicate"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_invalid_token_gets_error_challenge_then_fails(case: str) -> None:
    token, reason = REFUSED[case]
    server = mechanism().server()
    assert_refused(server, first_message(token()), reason)
    with pytest.raises(RuntimeError):
        _ = server.principal


def test_new_first_message_after_challenge_starts_over() -> None:
    """Kafka resets the error on any reply but \\x01 and evaluates it as a first message."""
    server = mechanism().server()
    assert server.evaluate(first_message(sign(claims(aud="x")))) == INVALID_TOKEN_CHALLENGE
    assert server.evaluate(first_message(sign(claims()))) == b""
    assert server.principal.name == "alice"


def test_control_a_without_a_challenge_is_an_invalid_message() -> None:
    with pytest.raises(AuthenticationError):
        mechanism().server().evaluate(b"\x01")


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"garbage",
        b"n,,\x01\x01",  # no auth
        b"n,,\x01auth=Basic abc.def.ghi\x01\x01",  # not Bearer
        b"n,,\x01auth=Bearer\x01\x01",  # no token
        b"n,,\x01auth=Bearer a.b.c\x01",  # missing the final \x01
        b"n,,auth=Bearer a.b.c\x01\x01",  # missing the \x01 after the GS2 header
        b"y,,\x01auth=Bearer a.b.c\x01\x01",  # channel binding flag
        b"n,,\x01auth=Bearer a.b=c\x01\x01",  # '=' is not a token character
        b"n,,\x01auth=Bearer a.b.c\x01ex1=v\x01\x01",  # extension key must be letters
        b"n,,\x01auth=Bearer \xff\xfe\x01\x01",  # not UTF-8
        b"n,,\x01auth=Bearer " + b"a" * 10 + b"\x00\x01\x01",
    ],
)
def test_malformed_first_message_fails_at_once(message: bytes) -> None:
    server = mechanism().server()
    with pytest.raises(AuthenticationError):
        server.evaluate(message)
    assert not server.complete


def test_extensions_and_case_insensitive_scheme() -> None:
    token = sign(claims())
    message = f"n,,\x01auth=bearer {token}\x01traceId=abc=1 2\x01logicalCluster=lkc\x01\x01"
    parsed = parse_client_initial_response(message.encode())
    assert parsed.token == token
    assert parsed.extensions == {"traceId": "abc=1 2", "logicalCluster": "lkc"}
    server = mechanism().server()
    assert server.evaluate(message.encode()) == b""
    assert server.extensions == {"traceId": "abc=1 2", "logicalCluster": "lkc"}


def test_authorization_id_must_match_the_principal() -> None:
    token = sign(claims())
    ok = mechanism().server()
    assert ok.evaluate(first_message(token, authzid="alice")) == b""
    assert ok.principal.name == "alice"
    other = mechanism().server()
    with pytest.raises(AuthenticationError):
        other.evaluate(first_message(token, authzid="admin"))
    assert not other.complete


def test_evaluate_after_completion_fails() -> None:
    server = mechanism().server()
    server.evaluate(first_message(sign(claims())))
    with pytest.raises(AuthenticationError):
        server.evaluate(first_message(sign(claims())))


def test_jwks_file_and_settings(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(JWKS))
    settings = Settings(
        sasl_oauthbearer_jwks_endpoint_url=path.as_uri(),
        sasl_oauthbearer_expected_audience=f"other, {AUDIENCE}",
        sasl_oauthbearer_expected_issuer=ISSUER,
        sasl_oauthbearer_sub_claim_name="sub",
    )
    m = mechanism_from_settings(settings)
    assert isinstance(m.validator.jwks, FileJwks)
    assert m.validator.expected_audience == ("other", AUDIENCE)
    assert m.validator.clock_skew_ms == 30_000  # Kafka's default
    # Real clock here: a token valid from now for ten minutes.
    now = int(time.time())
    server = m.server()
    assert server.evaluate(first_message(sign(claims(iat=now, exp=now + 600)))) == b""
    assert server.principal == KafkaPrincipal("User", "alice")
    lifetime = server.session_lifetime_ms
    assert lifetime is not None and 590_000 <= lifetime <= 600_000
    assert_refused(m.server(), first_message(sign(claims(iat=now, exp=now - 60))))
    m.close()


def test_settings_refuse_bad_jwks_configuration(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape(URL_SETTING)):
        Settings(sasl_oauthbearer_jwks_endpoint_url="ftp://idp/jwks")
    with pytest.raises(ValueError, match=re.escape(URL_SETTING)):
        mechanism_from_config(
            {"sasl.server.callback.handler.class": SECURED_VALIDATOR}.get
        )  # Kafka's signed-token validator without its JWKS
    with pytest.raises(ValueError, match=re.escape(URL_SETTING)):
        mechanism_from_settings(
            Settings(sasl_oauthbearer_jwks_endpoint_url=(tmp_path / "missing.json").as_uri())
        )
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a jwks"}')
    with pytest.raises(ValueError, match=re.escape(URL_SETTING)):
        mechanism_from_settings(Settings(sasl_oauthbearer_jwks_endpoint_url=bad.as_uri()))


def test_jwks_skips_keys_it_cannot_use() -> None:
    keys = StaticJwks(
        {
            "keys": [
                {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},  # symmetric: never trusted
                {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
                jwk(RSA_KEY, "enc-only", use="enc"),
                jwk(RSA_KEY, "rsa-1"),
            ]
        }
    ).keys()
    assert [k.kid for k in keys] == ["enc-only", "rsa-1"]
    validator = JwtValidator(StaticJwks({"keys": [jwk(RSA_KEY, "enc-only", use="enc")]}))
    m = OAuthBearerMechanism(validator)
    assert_refused(m.server(), first_message(sign(claims(aud=None), kid="enc-only")))


def test_config_lookup_scoped_like_a_listener(tmp_path: Path) -> None:
    """``mechanism_from_config`` reads Kafka's names through any lookup (a listener's
    ``listener.name.<l>.oauthbearer.*`` scoping), with Kafka's defaults for the rest."""
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(JWKS))
    props = {
        "sasl.oauthbearer.jwks.endpoint.url": path.as_uri(),
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.clock.skew.seconds": "5",
        "sasl.oauthbearer.sub.claim.name": "azp",
    }
    m = mechanism_from_config(props.get)
    assert m.validator.clock_skew_ms == 5_000
    assert m.validator.expected_issuer is None
    assert m.validator.scope_claim_name == "scope"
    now = int(time.time())
    server = m.server()
    assert server.evaluate(first_message(sign(claims(iat=now, exp=now + 60, azp="app")))) == b""
    assert server.principal == KafkaPrincipal("User", "app")
    for name, bad in [
        ("sasl.oauthbearer.clock.skew.seconds", "-1"),
        ("sasl.oauthbearer.jwks.endpoint.refresh.ms", "soon"),
        ("sasl.oauthbearer.sub.claim.name", " "),
        ("sasl.oauthbearer.jwks.endpoint.url", "ftp://idp/jwks"),
    ]:
        with pytest.raises(ValueError, match=re.escape(name)):
            mechanism_from_config({**props, name: bad}.get)


# -- Kafka's default without a validator configured: unsecured development tokens


def _unsecured_token(**overrides: Any) -> str:
    return jwt.encode(claims(**overrides), None, algorithm="none")


def unsecured(**options: str) -> OAuthBearerMechanism:
    from coordinator.security.oauthbearer_unsecured import UnsecuredJwtValidator

    return OAuthBearerMechanism(
        UnsecuredJwtValidator(options, clock=lambda: NOW_MS), clock=lambda: NOW_MS
    )


def test_without_a_validator_configured_unsecured_tokens_are_kafkas_default() -> None:
    from coordinator.security.oauthbearer_unsecured import UnsecuredJwtValidator

    m = mechanism_from_config(lambda name: None)
    assert isinstance(m.validator, UnsecuredJwtValidator)


def test_unsecured_token_authenticates_with_its_sub() -> None:
    server = unsecured().server()
    server.evaluate(first_message(_unsecured_token()))
    assert server.complete
    assert server.principal == KafkaPrincipal("User", "alice")


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (lambda: sign(claims()), "must have 'none'"),  # signed: not what this validator takes
        (lambda: _unsecured_token() + "c2ln", "must not contain a digital signature"),
        (lambda: _unsecured_token(exp=None), "No expiration time"),
        (lambda: _unsecured_token(sub=None), "No principal name"),
        (lambda: _unsecured_token(exp=NOW_MS // 1000), "Expiration Time"),
        (lambda: _unsecured_token(iat=NOW_MS // 1000 + 60), "Issued At"),
    ],
)
def test_unsecured_validator_refuses_as_kafka_does(token: Callable[[], str], reason: str) -> None:
    assert_refused(unsecured().server(), first_message(token()), reason)


def test_unsecured_validator_options_from_jaas() -> None:
    m = unsecured(
        unsecuredValidatorPrincipalClaimName="client_id",
        unsecuredValidatorRequiredScope="kafka",
        unsecuredValidatorAllowableClockSkewMs="120000",
    )
    token = _unsecured_token(client_id="svc", scope=["kafka"], iat=NOW_S - 600, exp=NOW_S - 60)
    server = m.server()
    server.evaluate(first_message(token))  # expired a minute ago, within the skew
    assert server.principal == KafkaPrincipal("User", "svc")
    assert_refused(
        m.server(),
        first_message(_unsecured_token(client_id="svc", scope=None)),
        "scope",
        b'{"status":"insufficient_scope", "scope":"[kafka]"}',
    )
