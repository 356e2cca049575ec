"""OAUTHBEARER with a JWKS served over HTTP: first load, key rotation by unknown kid, refresh
failures keep the old keys, recovery from an identity provider that was down at start-up,
periodic refresh, and authentication never waiting on the endpoint.

The endpoint is a real HTTP server on 127.0.0.1 in a thread; tests wait on its events and on
``HttpJwks.wait_refreshes`` (conditions), never on fixed sleeps.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from support.oauthkit import (
    AUDIENCE,
    ISSUER,
    OTHER_RSA_KEY,
    RSA_KEY,
    assert_refused,
    claims,
    first_message,
    jwk,
    sign,
)

from coordinator.config import Settings
from coordinator.security.oauthbearer import (
    HttpJwks,
    JwtValidator,
    OAuthBearerMechanism,
    mechanism_from_settings,
)

WAIT_S = 10.0


class JwksEndpoint:
    """A JWKS endpoint whose answer, status and speed the test controls."""

    def __init__(self) -> None:
        self.document: dict[str, Any] = {"keys": [jwk(RSA_KEY, "rsa-1")]}
        self.status = 200
        self.release = threading.Event()  # cleared: requests hang until set
        self.release.set()
        self.entered = threading.Event()  # a request arrived
        self.requests = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                endpoint.requests += 1
                endpoint.entered.set()
                endpoint.release.wait(WAIT_S)
                body = json.dumps(endpoint.document).encode()
                self.send_response(endpoint.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[JwksEndpoint]:
    e = JwksEndpoint()
    yield e
    e.close()


@pytest.fixture
def sources() -> Iterator[list[HttpJwks]]:
    made: list[HttpJwks] = []
    yield made
    for source in made:
        source.close()


def now_claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    return claims(iat=now, exp=now + 600, **overrides)


def mechanism_for(source: HttpJwks) -> OAuthBearerMechanism:
    return OAuthBearerMechanism(
        JwtValidator(source, expected_audience=[AUDIENCE], expected_issuer=ISSUER)
    )


def http_jwks(endpoint: JwksEndpoint, made: list[HttpJwks], **kwargs: Any) -> HttpJwks:
    args: dict[str, Any] = {"retry_backoff_ms": 10, "retry_backoff_max_ms": 200}
    args.update(kwargs)
    source = HttpJwks(endpoint.url, **args)
    made.append(source)
    return source


def test_loads_then_rotates_on_unknown_kid(endpoint: JwksEndpoint, sources: list[HttpJwks]) -> None:
    source = http_jwks(endpoint, sources)
    assert source.wait_loaded(WAIT_S)
    m = mechanism_for(source)
    server = m.server()
    assert server.evaluate(first_message(sign(now_claims()))) == b""
    assert str(server.principal) == "User:alice"

    # The provider rotates to a new key: the first token signed with it is refused (the
    # set held does not have it yet) and makes the source fetch again at once.
    endpoint.document = {"keys": [jwk(OTHER_RSA_KEY, "rsa-2")]}
    rotated = sign(now_claims(), key=OTHER_RSA_KEY, kid="rsa-2")
    assert_refused(m.server(), first_message(rotated), "suitable verification key")
    assert source.wait_refreshes(fetches=2, timeout_s=WAIT_S)
    server = m.server()
    assert server.evaluate(first_message(rotated)) == b""
    assert str(server.principal) == "User:alice"
    # The old key left the set: its tokens are refused now.
    assert_refused(m.server(), first_message(sign(now_claims())), "suitable verification key")


def test_authentication_never_waits_on_the_endpoint(
    endpoint: JwksEndpoint, sources: list[HttpJwks]
) -> None:
    source = http_jwks(endpoint, sources)
    assert source.wait_loaded(WAIT_S)
    m = mechanism_for(source)
    endpoint.release.clear()  # the provider hangs from now on
    endpoint.entered.clear()
    unknown = sign(now_claims(), key=OTHER_RSA_KEY, kid="rsa-2")
    assert_refused(m.server(), first_message(unknown), "suitable verification key")
    assert endpoint.entered.wait(WAIT_S)  # the refresh is now stuck in the request
    # Meanwhile authentications are answered from the keys held.
    server = m.server()
    assert server.evaluate(first_message(sign(now_claims()))) == b""
    assert_refused(m.server(), first_message(unknown), "suitable verification key")
    assert not endpoint.release.is_set() and source.fetches == 1
    endpoint.release.set()
    assert source.wait_refreshes(fetches=2, timeout_s=WAIT_S)


def test_failed_refresh_keeps_the_keys_held(
    endpoint: JwksEndpoint, sources: list[HttpJwks]
) -> None:
    source = http_jwks(endpoint, sources)
    assert source.wait_loaded(WAIT_S)
    endpoint.status = 500
    assert source.key_missing("rsa-9")
    assert source.wait_refreshes(failures=1, timeout_s=WAIT_S)
    assert endpoint.requests >= 2  # retried with backoff before giving up
    server = mechanism_for(source).server()
    assert server.evaluate(first_message(sign(now_claims()))) == b""


def test_provider_down_at_start_up_then_recovers(
    endpoint: JwksEndpoint, sources: list[HttpJwks]
) -> None:
    endpoint.status = 503
    source = http_jwks(endpoint, sources)
    assert source.wait_refreshes(failures=1, timeout_s=WAIT_S)
    assert not source.wait_loaded(0)
    m = mechanism_for(source)
    assert_refused(m.server(), first_message(sign(now_claims())), "suitable verification key")
    endpoint.status = 200
    assert source.wait_loaded(WAIT_S)
    server = m.server()
    assert server.evaluate(first_message(sign(now_claims()))) == b""


def test_periodic_refresh(endpoint: JwksEndpoint, sources: list[HttpJwks]) -> None:
    source = http_jwks(endpoint, sources, refresh_ms=50)
    assert source.wait_refreshes(fetches=3, timeout_s=WAIT_S)
    assert endpoint.requests >= 3


def test_unknown_kid_refreshes_at_most_once_a_minute_per_kid(
    endpoint: JwksEndpoint, sources: list[HttpJwks]
) -> None:
    clock = [1_000_000]
    source = http_jwks(endpoint, sources, clock=lambda: clock[0])
    assert source.wait_loaded(WAIT_S)
    assert source.key_missing("k1")
    assert not source.key_missing("k1")
    assert source.key_missing("k2")  # another kid is chased on its own
    assert not source.key_missing("x" * 1001)  # absurd kids are not chased
    clock[0] += 60_000
    assert source.key_missing("k1")


def test_settings_with_http_url(endpoint: JwksEndpoint) -> None:
    settings = Settings(
        sasl_oauthbearer_jwks_endpoint_url=endpoint.url,
        sasl_oauthbearer_jwks_endpoint_refresh_ms=3_600_000,
        sasl_oauthbearer_expected_audience=AUDIENCE,
        sasl_oauthbearer_expected_issuer=ISSUER,
    )
    m = mechanism_from_settings(settings)
    try:
        source = m.validator.jwks
        assert isinstance(source, HttpJwks)
        assert source.wait_loaded(WAIT_S)
        server = m.server()
        assert server.evaluate(first_message(sign(now_claims()))) == b""
    finally:
        m.close()
