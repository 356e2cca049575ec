"""The client side of SASL/OAUTHBEARER for kgc's own client: where its token comes from.

How this works: Kafka's clients get an OAUTHBEARER token from a login callback, configured
in one of two ways, and so does ``token_source``:

* **An OAuth 2 token endpoint** (KIP-768: Java's ``sasl.oauthbearer.token.endpoint.url`` with
  ``OAuthBearerLoginModule required clientId=... clientSecret=... [scope=...]``, or
  librdkafka's ``sasl.oauthbearer.method=oidc`` with ``sasl.oauthbearer.client.id``,
  ``.client.secret``, ``.token.endpoint.url``, ``.scope``): the client-credentials grant,
  POSTed as Kafka's HttpAccessTokenRetriever does (HTTP Basic with the URL-encoded id and
  secret, ``grant_type=client_credentials`` and the scope in the form body); the answer's
  ``access_token`` is used until shortly before its ``exp``.
* **Kafka's unsecured development login** (Java's ``unsecuredLoginStringClaim_sub="alice"``
  and friends in the JAAS line, librdkafka's ``sasl.oauthbearer.config=principal=alice``):
  an unsigned JWT (``alg: none``) with those claims, ``iat`` now and ``exp`` after
  ``unsecuredLoginLifetimeSeconds`` (3600), which only a server that accepts unsecured tokens
  takes.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, Protocol

__all__ = ["OAUTH_SETTINGS", "TokenSource", "token_source"]

# Client settings of OAUTHBEARER (Java's and librdkafka's names).
OAUTH_SETTINGS = frozenset(
    {
        "sasl.oauthbearer.token.endpoint.url",
        "sasl.oauthbearer.method",
        "sasl.oauthbearer.client.id",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.scope",
        "sasl.oauthbearer.config",
        "sasl.login.callback.handler.class",
    }
)
_REFRESH_MARGIN_S = 60  # a token this close to its exp is fetched again


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it."""


class TokenSource(Protocol):
    def token(self) -> str: ...


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class UnsecuredLogin:
    """Kafka's OAuthBearerUnsecuredLoginCallbackHandler: an unsigned JWT of given claims."""

    def __init__(
        self,
        claims: Mapping[str, Any],
        lifetime_s: int = 3600,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.claims = dict(claims)
        self.lifetime_s = lifetime_s
        self._clock = clock

    def token(self) -> str:
        now = int(self._clock())
        claims = {"iat": now, "exp": now + self.lifetime_s, **self.claims}
        header = _b64(json.dumps({"alg": "none"}).encode())
        return f"{header}.{_b64(json.dumps(claims).encode())}."


class ClientCredentialsLogin:
    """The OAuth 2 client-credentials grant, as Kafka's HttpAccessTokenRetriever sends it."""

    def __init__(
        self,
        url: str,
        client_id: str,
        client_secret: str,
        scope: str | None = None,
        *,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self.client_id = client_id
        self.client_secret = client_secret
        self.scope = scope
        self.timeout_s = timeout_s
        self._clock = clock
        self._token: str | None = None
        self._expires = 0.0

    def token(self) -> str:
        if self._token is None or self._clock() >= self._expires - _REFRESH_MARGIN_S:
            self._token, self._expires = self._fetch()
        return self._token

    def _fetch(self) -> tuple[str, float]:
        quote = urllib.parse.quote
        basic = f"{quote(self.client_id, safe='')}:{quote(self.client_secret, safe='')}"
        body = "grant_type=client_credentials"
        if self.scope:
            body += "&scope=" + quote(self.scope, safe="")
        request = urllib.request.Request(
            self.url,
            data=body.encode(),
            method="POST",
            headers={
                "Accept": "application/json",
                "Authorization": "Basic " + base64.b64encode(basic.encode()).decode(),
                "Cache-Control": "no-cache",
                "Content-Type": "application/x-www-form-urlencoded",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                answer = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise OSError(f"the token endpoint answered HTTP {exc.code}") from None
        except (urllib.error.URLError, TimeoutError, ValueError) as exc:
            raise OSError(f"cannot get a token from {self.url}: {exc}") from None
        token = answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token:
            raise OSError("the token endpoint's answer has no access_token")
        return token, self._expiry(token, answer)

    def _expiry(self, token: str, answer: Mapping[str, Any]) -> float:
        """The token's ``exp`` (unverified: the server checks it), else ``expires_in``."""
        try:
            payload = token.split(".")[1]
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            return float(claims["exp"])
        except (IndexError, KeyError, TypeError, ValueError):
            pass
        expires_in = answer.get("expires_in")
        if isinstance(expires_in, int | float):
            return self._clock() + float(expires_in)
        return self._clock() + 3600.0


def _unsecured_claims(options: Mapping[str, str]) -> tuple[dict[str, Any], int]:
    """Claims and lifetime from Kafka's ``unsecuredLogin*`` JAAS options."""
    claims: dict[str, Any] = {}
    for name, value in options.items():
        if name.startswith("unsecuredLoginStringClaim_"):
            claims[name.removeprefix("unsecuredLoginStringClaim_")] = value
        elif name.startswith("unsecuredLoginNumberClaim_"):
            try:
                claims[name.removeprefix("unsecuredLoginNumberClaim_")] = float(value)
            except ValueError:
                raise ConfigError(f"sasl.jaas.config: {name} is not a number") from None
        elif name.startswith("unsecuredLoginListClaim_"):
            # Kafka: the first character is the delimiter of the rest.
            claims[name.removeprefix("unsecuredLoginListClaim_")] = (
                [v for v in value[1:].split(value[0]) if v] if value else []
            )
    principal = options.get("unsecuredLoginPrincipalClaimName", "sub").strip() or "sub"
    if principal not in claims:
        raise ConfigError(
            f"sasl.jaas.config: no unsecuredLoginStringClaim_{principal} (the principal)"
        )
    try:
        lifetime = int(options.get("unsecuredLoginLifetimeSeconds", "3600"))
    except ValueError:
        raise ConfigError(
            "sasl.jaas.config: unsecuredLoginLifetimeSeconds is not an integer"
        ) from None
    return claims, lifetime


def token_source(p: Mapping[str, str]) -> TokenSource:
    """The token source a client.properties configures (Java's or librdkafka's names)."""
    from coordinator.security.jaas import parse_single

    if p.get("sasl.oauthbearer.method", "").lower() == "oidc":
        missing = [
            name
            for name in (
                "sasl.oauthbearer.client.id",
                "sasl.oauthbearer.client.secret",
                "sasl.oauthbearer.token.endpoint.url",
            )
            if not p.get(name)
        ]
        if missing:
            raise ConfigError(f"sasl.oauthbearer.method=oidc needs {', '.join(missing)}")
        return ClientCredentialsLogin(
            p["sasl.oauthbearer.token.endpoint.url"],
            p["sasl.oauthbearer.client.id"],
            p["sasl.oauthbearer.client.secret"],
            p.get("sasl.oauthbearer.scope") or None,
        )
    if p.get("sasl.oauthbearer.config"):  # librdkafka's unsecured: principal=.. scope=..
        fields = dict(
            part.split("=", 1) for part in p["sasl.oauthbearer.config"].split() if "=" in part
        )
        if not fields.get("principal"):
            raise ConfigError("sasl.oauthbearer.config: no principal=<name>")
        claims: dict[str, Any] = {fields.get("principalClaimName", "sub"): fields["principal"]}
        if fields.get("scope"):
            claims[fields.get("scopeClaimName", "scope")] = fields["scope"].split(",")
        return UnsecuredLogin(claims, int(fields.get("lifeSeconds", "3600")))
    jaas = p.get("sasl.jaas.config")
    if not jaas:
        raise ConfigError(
            "OAUTHBEARER needs sasl.jaas.config (OAuthBearerLoginModule) or librdkafka's "
            "sasl.oauthbearer.method=oidc / sasl.oauthbearer.config"
        )
    try:
        entry = parse_single(jaas)
    except ValueError as exc:
        raise ConfigError(f"sasl.jaas.config: {exc}") from None
    if entry.login_module.rsplit(".", 1)[-1] != "OAuthBearerLoginModule":
        raise ConfigError(
            f"sasl.jaas.config: OAUTHBEARER needs OAuthBearerLoginModule, not {entry.login_module}"
        )
    url = p.get("sasl.oauthbearer.token.endpoint.url")
    if url:
        options = entry.options
        if not options.get("clientId") or not options.get("clientSecret"):
            raise ConfigError(
                "sasl.jaas.config: the token endpoint needs clientId and clientSecret"
            )
        return ClientCredentialsLogin(
            url, options["clientId"], options["clientSecret"], options.get("scope") or None
        )
    claims, lifetime = _unsecured_claims(entry.options)
    return UnsecuredLogin(claims, lifetime)
