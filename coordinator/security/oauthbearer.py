"""SASL/OAUTHBEARER: clients authenticate with a signed JWT, checked against a JWKS.

How this works (Kafka's ``OAuthBearerSaslServer`` with the KIP-768
``OAuthBearerValidatorCallbackHandler``):

* The client's first message is RFC 7628's ``n,[a=authzid],\\x01auth=Bearer <jwt>\\x01
  [key=value\\x01]*\\x01``. A message that does not parse fails the exchange at once.
* The token is validated (``JwtValidator``): its header's ``kid`` and ``alg`` pick a key from
  the JWKS (``alg: none`` and symmetric algorithms are refused), the signature is checked,
  ``exp`` and ``iat`` must be present, ``exp``/``nbf`` are checked with
  ``sasl.oauthbearer.clock.skew.seconds`` of tolerance, ``aud`` against
  ``sasl.oauthbearer.expected.audience`` (a token with an ``aud`` is refused when none is
  expected, as jose4j does for Kafka), ``iss`` against ``sasl.oauthbearer.expected.issuer``,
  and the ``sasl.oauthbearer.sub.claim.name`` claim becomes the principal ``User:<sub>``.
* A token that fails validation is not refused outright: the server answers RFC 7628's error
  challenge ``{"status":"invalid_token"}``, the client replies ``\\x01``, and only then does
  the exchange fail (``AuthenticationError``), exactly as Kafka's server does.
* On success the session lifetime (KIP-368) is the token's expiry minus now.

The JWKS comes from ``sasl.oauthbearer.jwks.endpoint.url``: a ``file:`` URL is read once at
start-up (as Kafka does), an ``http(s):`` URL is fetched by a background thread every
``sasl.oauthbearer.jwks.endpoint.refresh.ms``, with Kafka's retry backoff, and sooner when a
token names a ``kid`` not in the set (at most once a minute per kid). Validation only reads
the keys already held, so an authentication never waits on the network and never blocks the
event loop.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import jwt

from coordinator.security import AuthenticationError, KafkaPrincipal
from coordinator.security.oauthbearer_token import (
    OAuthBearerToken,
    TokenValidationError,
    TokenValidator,
)
from coordinator.security.oauthbearer_unsecured import UnsecuredJwtValidator

if TYPE_CHECKING:
    import ssl

    from coordinator.config import Settings

__all__ = [
    "MECHANISM",
    "ClientInitialResponse",
    "FileJwks",
    "HttpJwks",
    "JwksSource",
    "JwtValidator",
    "OAuthBearerMechanism",
    "OAuthBearerSaslServer",
    "OAuthBearerToken",
    "StaticJwks",
    "TokenValidationError",
    "jwks_source",
    "mechanism_from_config",
    "mechanism_from_settings",
    "parse_client_initial_response",
]

log = logging.getLogger("kgc.security.oauthbearer")

MECHANISM = "OAUTHBEARER"

SEPARATOR = "\x01"

# RFC 7628 / Kafka's OAuthBearerClientInitialResponse grammar. SASLNAME is any byte
# 0x01-0x7F except ',' and '=', or the escapes =2C and =3D.
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7e \t\r\n]+"
_CLIENT_INITIAL_RESPONSE = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,{SEPARATOR}"
    rf"(?P<kvpairs>(?:{_KEY}={_VALUE}{SEPARATOR})*){SEPARATOR}"
)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)", re.ASCII)
_EXTENSION_KEY = re.compile(_KEY)
_EXTENSION_VALUE = re.compile(_VALUE)

# The error challenge Kafka sends for a token its validator refused (RFC 7628 section 3.2.2).
INVALID_TOKEN_CHALLENGE = b'{"status":"invalid_token"}'

# Asymmetric algorithms only: a JWKS is public, so an HMAC key in it would let anyone sign.
# By JWS "alg": the JWK key type (and curve) that can verify it.
_ALGORITHM_KEYS: dict[str, tuple[str, str | None]] = {
    "RS256": ("RSA", None),
    "RS384": ("RSA", None),
    "RS512": ("RSA", None),
    "PS256": ("RSA", None),
    "PS384": ("RSA", None),
    "PS512": ("RSA", None),
    "ES256": ("EC", "P-256"),
    "ES384": ("EC", "P-384"),
    "ES512": ("EC", "P-521"),
    "EdDSA": ("OKP", "Ed25519"),
}

# Kafka's RefreshingHttpsJwks: an unknown kid triggers a refresh at most this often (per
# kid), for at most this many remembered kids, and kids longer than this are not chased.
MISSING_KEY_ID_CACHE_IN_FLIGHT_MS = 60_000
MISSING_KEY_ID_CACHE_MAX_ENTRIES = 16
MISSING_KEY_ID_MAX_KEY_LENGTH = 1000

# How long one JWKS HTTP request may take before it counts as a failed attempt.
JWKS_HTTP_TIMEOUT_S = 10.0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- the client's first message


@dataclass(frozen=True, slots=True)
class ClientInitialResponse:
    token: str
    authorization_id: str  # "" when the client named none
    extensions: Mapping[str, str]


def parse_client_initial_response(message: bytes) -> ClientInitialResponse:
    """Parse RFC 7628's client first message as Kafka does; ``AuthenticationError`` if it
    does not match the grammar, lacks ``auth``, has a bad extension or a scheme other than
    Bearer."""
    # Java decodes invalid UTF-8 to U+FFFD, which then fails the grammar: the same here.
    text = message.decode("utf-8", errors="replace")
    match = _CLIENT_INITIAL_RESPONSE.fullmatch(text)
    if match is None:
        raise AuthenticationError("Invalid OAUTHBEARER client first message")
    properties: dict[str, str] = {}
    for pair in match["kvpairs"].split(SEPARATOR):
        if pair:
            # The grammar guarantees one '=' after the key; the value may hold more.
            key, _, value = pair.partition("=")
            properties[key] = value
    auth = properties.pop("auth", None)
    if auth is None:
        raise AuthenticationError("Invalid OAUTHBEARER client first message: 'auth' not specified")
    for key, value in properties.items():
        if not _EXTENSION_KEY.fullmatch(key) or not _EXTENSION_VALUE.fullmatch(value):
            raise AuthenticationError(f"Invalid OAUTHBEARER extension {key!r}")
    auth_match = _AUTH.fullmatch(auth)
    if auth_match is None:
        raise AuthenticationError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
    if auth_match["scheme"].lower() != "bearer":
        raise AuthenticationError(
            f"Invalid scheme in OAUTHBEARER client first message: {auth_match['scheme']}"
        )
    return ClientInitialResponse(auth_match["token"], match["authzid"] or "", properties)


# -- JWKS sources


@dataclass(frozen=True, slots=True)
class _Jwk:
    kid: str | None
    kty: str
    crv: str | None
    use: str | None
    alg: str | None
    key: Any  # a cryptography public key


def parse_jwks(document: Any) -> tuple[_Jwk, ...]:
    """The usable verification keys of a JWKS document (``{"keys": [...]}``).

    Keys PyJWT cannot load (unknown kty or curve) are skipped, as jose4j skips them;
    ValueError if the document is not a JWKS at all."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError('a JWKS is a JSON object with a "keys" list')
    keys = []
    for entry in document["keys"]:
        if not isinstance(entry, dict) or entry.get("kty") not in ("RSA", "EC", "OKP"):
            continue
        try:
            key = jwt.PyJWK(entry).key
        except jwt.PyJWTError as e:
            log.warning("JWKS: skipping a key that does not load (kid %r): %s", entry.get("kid"), e)
            continue
        kid, use, alg, crv = (entry.get(n) for n in ("kid", "use", "alg", "crv"))
        keys.append(
            _Jwk(
                kid=kid if isinstance(kid, str) else None,
                kty=entry["kty"],
                crv=crv if isinstance(crv, str) else None,
                use=use if isinstance(use, str) else None,
                alg=alg if isinstance(alg, str) else None,
                key=key,
            )
        )
    return tuple(keys)


def select_key(keys: Iterable[_Jwk], kid: str | None, alg: str) -> _Jwk | None:
    """jose4j's VerificationJwkSelector: the first key with the token's kid (when it names
    one), meant for signatures, of the algorithm's key type and curve, and of the token's
    algorithm if the key names one."""
    kty, crv = _ALGORITHM_KEYS[alg]
    for key in keys:
        if kid is not None and key.kid != kid:
            continue
        if key.use not in (None, "sig") or key.kty != kty:
            continue
        if crv is not None and key.crv != crv:
            continue
        if key.alg is not None and key.alg != alg:
            continue
        return key
    return None


class JwksSource(Protocol):
    """Where verification keys come from. ``keys`` never blocks on I/O."""

    def keys(self) -> tuple[_Jwk, ...]: ...

    def key_missing(self, kid: str | None) -> bool:
        """A token named a key the set does not hold: fetch the set again soon, if the
        source can (True when a refresh was asked for)."""
        ...

    def close(self) -> None: ...


class StaticJwks:
    """A fixed key set (from a document in memory: tests, embedding)."""

    def __init__(self, document: Any) -> None:
        self._keys = parse_jwks(document)

    def keys(self) -> tuple[_Jwk, ...]:
        return self._keys

    def key_missing(self, kid: str | None) -> bool:
        return False

    def close(self) -> None:
        pass


class FileJwks(StaticJwks):
    """A JWKS file, read once at start-up as Kafka's JwksFileVerificationKeyResolver does."""

    def __init__(self, path: Path) -> None:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read the JWKS file {path}: {e}") from e
        try:
            super().__init__(document)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from e
        self.path = path


class HttpJwks:
    """A JWKS fetched over HTTP(S) by a daemon thread (Kafka's RefreshingHttpsJwks).

    The first fetch starts at once; until it succeeds every token is refused (no keys).
    Then every ``refresh_ms``, or at once when a token names an unknown kid (at most once
    per ``MISSING_KEY_ID_CACHE_IN_FLIGHT_MS`` per kid). A failed fetch is retried with
    backoff from ``retry_backoff_ms`` doubling, for at most ``retry_backoff_max_ms`` in
    all, then the old keys are kept until the next refresh."""

    def __init__(
        self,
        url: str,
        *,
        refresh_ms: int = 3_600_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 10_000,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        if refresh_ms <= 0:
            raise ValueError("sasl.oauthbearer.jwks.endpoint.refresh.ms must be positive")
        self.url = url
        self._refresh_ms = refresh_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._retry_backoff_max_ms = retry_backoff_max_ms
        self._ssl_context = ssl_context
        self._clock = clock
        self._keys: tuple[_Jwk, ...] = ()
        self._lock = threading.Lock()
        self._missing: OrderedDict[str, int] = OrderedDict()
        self._wake = threading.Event()  # an expedited refresh, or close
        self._closed = threading.Event()
        self._loaded = threading.Event()  # the first fetch succeeded
        self._fetched = threading.Condition(self._lock)
        self.fetches = 0  # successful fetches (tests, metrics)
        self.failures = 0  # refreshes that gave up and kept the old keys
        self._thread = threading.Thread(target=self._run, name="kgc-jwks-refresh", daemon=True)
        self._thread.start()

    def keys(self) -> tuple[_Jwk, ...]:
        return self._keys  # replaced whole by the thread: reading it needs no lock

    def wait_loaded(self, timeout_s: float) -> bool:
        """Block (a start-up thread, never the event loop) until the first fetch succeeded."""
        return self._loaded.wait(timeout_s)

    def wait_refreshes(self, *, fetches: int = 0, failures: int = 0, timeout_s: float) -> bool:
        """Block (not on the event loop) until at least ``fetches`` refreshes succeeded
        and ``failures`` gave up."""
        with self._fetched:
            return self._fetched.wait_for(
                lambda: self.fetches >= fetches and self.failures >= failures, timeout_s
            )

    def key_missing(self, kid: str | None) -> bool:
        if kid is None:
            kid = ""
        if len(kid) > MISSING_KEY_ID_MAX_KEY_LENGTH:
            # Kafka: such a kid is taken for a malformed token, not chased (and not cached).
            log.warning("JWKS: key id of %d characters is too long to look up", len(kid))
            return False
        now = self._clock()
        with self._lock:
            next_check = self._missing.get(kid)
            if next_check is not None and next_check > now:
                return False
            self._missing[kid] = now + MISSING_KEY_ID_CACHE_IN_FLIGHT_MS
            self._missing.move_to_end(kid)
            while len(self._missing) > MISSING_KEY_ID_CACHE_MAX_ENTRIES:
                self._missing.popitem(last=False)
        log.debug("JWKS: no key %r in %s, refreshing now", kid, self.url)
        self._wake.set()
        return True

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        self._thread.join(timeout=JWKS_HTTP_TIMEOUT_S + 1)

    def _run(self) -> None:
        while not self._closed.is_set():
            # Cleared before the fetch: a kid reported missing while it runs asks again
            # (the key may have been published just after this fetch read the set).
            self._wake.clear()
            self._refresh()
            # Until the first success, keep trying at the backoff ceiling, not hourly:
            # a node that started while its identity provider was down must recover.
            if self._loaded.is_set():
                wait_ms = self._refresh_ms
            else:  # (at least 100 ms: a zero backoff must not hammer the provider)
                wait_ms = max(self._retry_backoff_max_ms, 100)
            self._wake.wait(wait_ms / 1000)

    def _refresh(self) -> None:
        end = self._clock() + self._retry_backoff_max_ms
        attempt = 0
        while not self._closed.is_set():
            attempt += 1
            try:
                keys = self._fetch()
            except Exception as e:  # any failure of one attempt is retried (Kafka's Retry)
                wait_ms = min(self._retry_backoff_ms * 2 ** (attempt - 1), end - self._clock())
                if wait_ms <= 0:
                    with self._fetched:
                        self.failures += 1
                        self._fetched.notify_all()
                    log.warning(
                        "JWKS refresh of %s failed, keeping the %d keys held: %s",
                        self.url,
                        len(self._keys),
                        e,
                    )
                    return
                log.info("JWKS refresh of %s attempt %d failed: %s", self.url, attempt, e)
                if self._closed.wait(wait_ms / 1000):
                    return
                continue
            with self._fetched:
                self._keys = keys
                for key in keys:
                    if key.kid is not None:
                        self._missing.pop(key.kid, None)
                self.fetches += 1
                self._fetched.notify_all()
            self._loaded.set()
            log.info("JWKS refresh of %s: %d keys", self.url, len(keys))
            return

    def _fetch(self) -> tuple[_Jwk, ...]:
        request = urllib.request.Request(self.url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(
            request, timeout=JWKS_HTTP_TIMEOUT_S, context=self._ssl_context
        ) as response:
            document = json.loads(response.read())
        return parse_jwks(document)


def jwks_source(
    url: str,
    *,
    refresh_ms: int = 3_600_000,
    retry_backoff_ms: int = 100,
    retry_backoff_max_ms: int = 10_000,
) -> JwksSource:
    """The source for ``sasl.oauthbearer.jwks.endpoint.url``: ``file:`` is read now (a
    ValueError names the problem), ``http(s):`` starts its refresh thread."""
    parsed = urllib.parse.urlparse(url)
    scheme = parsed.scheme.lower()
    if scheme == "file":
        return FileJwks(Path(urllib.request.url2pathname(parsed.path)))
    if scheme in ("http", "https"):
        return HttpJwks(
            url,
            refresh_ms=refresh_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
        )
    raise ValueError(
        f'{url!r} has protocol {scheme!r}; only "http", "https" and "file" are supported'
    )


# -- the validator


class JwtValidator:
    """Kafka's ValidatorAccessTokenValidator (jose4j's JwtConsumer as Kafka builds it)."""

    def __init__(
        self,
        jwks: JwksSource,
        *,
        expected_audience: Sequence[str] = (),
        expected_issuer: str | None = None,
        clock_skew_seconds: int = 30,
        sub_claim_name: str = "sub",
        scope_claim_name: str = "scope",
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        self.jwks = jwks
        self.expected_audience = tuple(expected_audience)
        self.expected_issuer = expected_issuer
        self.clock_skew_ms = clock_skew_seconds * 1000
        self.sub_claim_name = sub_claim_name
        self.scope_claim_name = scope_claim_name
        self._clock = clock

    def close(self) -> None:
        self.jwks.close()

    def validate(self, token: str) -> OAuthBearerToken:
        """The token's principal and lifetime, or ``TokenValidationError`` saying why not."""
        token = token.strip()
        sections = token.split(".")
        if len(sections) != 3:
            raise TokenValidationError(
                "Malformed JWT provided; expected three sections (header, payload, and "
                f"signature), but {len(sections)} sections provided"
            )
        if not all(s.strip() for s in sections):
            # An unsigned (alg: none) token has an empty signature section.
            raise TokenValidationError("Malformed JWT provided; a section is empty")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise TokenValidationError(f"Could not parse the JWT header: {e}") from e
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in _ALGORITHM_KEYS:
            # "none" (an unsigned token) and the HS* family land here.
            raise TokenValidationError(f"JWS algorithm {alg!r} is not allowed")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise TokenValidationError("JWS kid header is not a string")
        key = select_key(self.jwks.keys(), kid, alg)
        if key is None:
            self.jwks.key_missing(kid)
            raise TokenValidationError(
                f"Unable to find a suitable verification key for JWS with kid {kid!r}, alg {alg}"
            )
        try:
            # PyJWT checks the signature, aud and iss; exp/nbf/iat are checked below
            # against our clock with Kafka's (jose4j's) exact comparisons.
            claims = jwt.decode(
                token,
                key=key.key,
                algorithms=[alg],
                audience=list(self.expected_audience) or None,
                issuer=self.expected_issuer,
                options={
                    "verify_signature": True,
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "verify_aud": True,
                    "verify_iss": self.expected_issuer is not None,
                    "require": ["exp", "iat"],
                },
            )
        except jwt.PyJWTError as e:
            raise TokenValidationError(f"Could not validate the access token: {e}") from e
        now = self._clock()
        exp_ms = _numeric_date_ms(claims, "exp")
        iat_ms = _numeric_date_ms(claims, "iat")
        if exp_ms is None or iat_ms is None:  # "require" above makes these present
            raise TokenValidationError("exp and iat claims are required")
        if exp_ms < 0 or iat_ms < 0:
            raise TokenValidationError("exp and iat must be non-negative")
        if now >= exp_ms + self.clock_skew_ms:
            raise TokenValidationError(f"The JWT is no longer valid: expired at {exp_ms} ms")
        nbf_ms = _numeric_date_ms(claims, "nbf")
        if nbf_ms is not None and now + self.clock_skew_ms < nbf_ms:
            raise TokenValidationError(f"The JWT is not yet valid: not before {nbf_ms} ms")
        sub = claims.get(self.sub_claim_name)
        if not isinstance(sub, str) or not sub.strip():
            raise TokenValidationError(
                f"{self.sub_claim_name} claim must be a non-empty string, got {sub!r}"
            )
        return OAuthBearerToken(
            value=token,
            principal_name=sub.strip(),
            lifetime_ms=exp_ms,
            scope=self._scope(claims),
            start_time_ms=iat_ms,
            claims=claims,
        )

    def _scope(self, claims: Mapping[str, Any]) -> frozenset[str]:
        """Kafka: a string scope is one scope (not split), a list is the scopes, anything
        else none; each must be a non-blank string, with no duplicates."""
        raw = claims.get(self.scope_claim_name)
        values: list[Any] = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        scopes: set[str] = set()
        for value in values:
            if not isinstance(value, str) or not value.strip():
                raise TokenValidationError(f"{self.scope_claim_name} values must be non-empty")
            if value.strip() in scopes:
                raise TokenValidationError(f"{self.scope_claim_name} has duplicate {value!r}")
            scopes.add(value.strip())
        return frozenset(scopes)


def _numeric_date_ms(claims: Mapping[str, Any], name: str) -> int | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenValidationError(f"{name} claim is not a NumericDate: {value!r}")
    return int(value) * 1000  # jose4j keeps whole seconds


# -- the SASL server and mechanism


class OAuthBearerSaslServer:
    """One OAUTHBEARER exchange (Kafka's OAuthBearerSaslServer)."""

    def __init__(self, validator: TokenValidator, clock: Callable[[], int] = _now_ms) -> None:
        self._validator = validator
        self._clock = clock
        self._complete = False
        self._token: OAuthBearerToken | None = None
        self._error: str | None = None  # why the last token was refused, after the challenge
        self._challenge = INVALID_TOKEN_CHALLENGE  # the error challenge it was answered
        self._lifetime_ms: int | None = None
        self.extensions: Mapping[str, str] = {}

    def evaluate(self, token: bytes) -> bytes:
        if self._complete:
            raise AuthenticationError("OAUTHBEARER exchange already complete")
        if token == SEPARATOR.encode() and self._error is not None:
            # The client acknowledged our error challenge: now the exchange fails, and as in
            # Kafka the client is told the challenge's JSON again.
            raise AuthenticationError(
                f"OAUTHBEARER token refused: {self._error}", self._challenge.decode()
            )
        # Anything else is a (new) client first message, as in Kafka.
        self._error = None
        response = parse_client_initial_response(token)
        try:
            validated = self._validator.validate(response.token)
        except TokenValidationError as e:
            # Kafka's validator logs the reason at WARN and answers the error challenge.
            log.warning("OAUTHBEARER token refused: %s", e)
            self._error = str(e)
            self._challenge = e.challenge().encode()
            return self._challenge
        if response.authorization_id and response.authorization_id != validated.principal_name:
            why = (
                f"Client requested an authorization id ({response.authorization_id}) that is "
                f"different from the token's principal name ({validated.principal_name})"
            )
            raise AuthenticationError(why, f"Authentication failed: {why}")
        # Kafka's OAuthBearerValidatorCallbackHandler accepts every extension.
        self.extensions = dict(response.extensions)
        self._token = validated
        self._lifetime_ms = max(0, validated.lifetime_ms - self._clock())
        self._complete = True
        log.debug("OAUTHBEARER authenticated %s", validated.principal_name)
        return b""

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def principal(self) -> KafkaPrincipal:
        if self._token is None:
            raise RuntimeError("OAUTHBEARER exchange has not completed")
        return KafkaPrincipal("User", self._token.principal_name)

    @property
    def token(self) -> OAuthBearerToken | None:
        """The validated token (Kafka's negotiated property ``OAUTHBEARER.token``)."""
        return self._token

    @property
    def session_lifetime_ms(self) -> int | None:
        return self._lifetime_ms


class OAuthBearerMechanism:
    """The ``OAUTHBEARER`` SaslMechanism: one validator (and JWKS) for every exchange."""

    name = MECHANISM

    def __init__(self, validator: TokenValidator, clock: Callable[[], int] = _now_ms) -> None:
        self.validator = validator
        self._clock = clock

    def server(self) -> OAuthBearerSaslServer:
        return OAuthBearerSaslServer(self.validator, self._clock)

    def close(self) -> None:
        """Stop the JWKS refresh (if any)."""
        self.validator.close()


def mechanism_from_settings(settings: Settings) -> OAuthBearerMechanism:
    """The mechanism configured by the (unscoped) ``sasl.oauthbearer.*`` settings."""

    def get(name: str) -> str | None:
        value = getattr(settings, name.replace(".", "_"), None)
        return None if value is None else str(value)

    return mechanism_from_config(get)


# Kafka's defaults, for a lookup that has no value (the Settings fields carry the same).
_DEFAULTS = {
    "sasl.oauthbearer.jwks.endpoint.refresh.ms": "3600000",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": "100",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "10000",
    "sasl.oauthbearer.clock.skew.seconds": "30",
    "sasl.oauthbearer.sub.claim.name": "sub",
    "sasl.oauthbearer.scope.claim.name": "scope",
}


# The server callback handlers Kafka names (sasl.server.callback.handler.class).
SECURED_VALIDATOR = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
)
UNSECURED_VALIDATOR = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
    "OAuthBearerUnsecuredValidatorCallbackHandler"
)


def mechanism_from_config(
    get: Callable[[str], str | None], jaas_options: Mapping[str, str] | None = None
) -> OAuthBearerMechanism:
    """The mechanism from a lookup of Kafka's ``sasl.oauthbearer.*`` names (so a listener
    can scope them as ``listener.name.<listener>.oauthbearer.<name>``). ValueError naming
    the setting when a JWKS file does not load or a value is invalid.

    As in Kafka, OAUTHBEARER without a validator configured (no
    ``sasl.oauthbearer.jwks.endpoint.url``, no ``sasl.server.callback.handler.class``) accepts
    unsecured development tokens, with the JAAS line's ``unsecuredValidator*`` options; the
    caller logs a warning. Naming Kafka's OAuthBearerValidatorCallbackHandler without a JWKS
    URL is refused, as Kafka refuses it."""

    def text(name: str) -> str | None:
        value = get(name)
        return _DEFAULTS.get(name) if value is None else value

    def number(name: str, minimum: int) -> int:
        value = text(name)
        try:
            result = int(value or "")
        except ValueError:
            raise ValueError(f"{name}: expected an integer, got {value!r}") from None
        if result < minimum:
            raise ValueError(f"{name}: must be at least {minimum}, got {result}")
        return result

    url = text("sasl.oauthbearer.jwks.endpoint.url")
    handler = (get("sasl.server.callback.handler.class") or "").strip()
    if handler and handler not in (SECURED_VALIDATOR, UNSECURED_VALIDATOR):
        raise ValueError(f"sasl.server.callback.handler.class: kgc does not have {handler}")
    if not url:
        if handler == SECURED_VALIDATOR:
            raise ValueError(
                "sasl.oauthbearer.jwks.endpoint.url: required by "
                "OAuthBearerValidatorCallbackHandler"
            )
        return OAuthBearerMechanism(UnsecuredJwtValidator(jaas_options or {}))
    if handler == UNSECURED_VALIDATOR:
        raise ValueError(
            "sasl.server.callback.handler.class: the unsecured validator ignores "
            "sasl.oauthbearer.jwks.endpoint.url; unset one of them"
        )
    refresh_ms = number("sasl.oauthbearer.jwks.endpoint.refresh.ms", 1)
    backoff_ms = number("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", 0)
    backoff_max_ms = number("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", 0)
    skew_s = number("sasl.oauthbearer.clock.skew.seconds", 0)
    claim_names = {}
    for name in ("sasl.oauthbearer.sub.claim.name", "sasl.oauthbearer.scope.claim.name"):
        value = (text(name) or "").strip()
        if not value:
            raise ValueError(f"{name} must not be empty")
        claim_names[name] = value
    audience = text("sasl.oauthbearer.expected.audience")
    try:
        source = jwks_source(
            url,
            refresh_ms=refresh_ms,
            retry_backoff_ms=backoff_ms,
            retry_backoff_max_ms=backoff_max_ms,
        )
    except ValueError as e:
        raise ValueError(f"sasl.oauthbearer.jwks.endpoint.url: {e}") from e
    validator = JwtValidator(
        source,
        expected_audience=[a.strip() for a in audience.split(",") if a.strip()] if audience else (),
        expected_issuer=text("sasl.oauthbearer.expected.issuer") or None,
        clock_skew_seconds=skew_s,
        sub_claim_name=claim_names["sasl.oauthbearer.sub.claim.name"],
        scope_claim_name=claim_names["sasl.oauthbearer.scope.claim.name"],
    )
    return OAuthBearerMechanism(validator)
