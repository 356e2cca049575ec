"""A small blocking Kafka client on kgc's own codec, for the CLI, tests and benchmarks.

How this works: one TCP connection; ``request`` encodes a request with the generated codec,
sends it and reads the matching response. ``negotiate`` asks ApiVersions first so
``request(api_key, body)`` picks the highest version both sides support, as real clients do.
It speaks the plain Kafka protocol, so it works against any Kafka-compatible broker.

Secured listeners: a ``ClientSecurity`` (from a Kafka ``client.properties``, the file
Kafka's tools take as ``--command-config``) makes the connection do, right after connecting,
what a Kafka client does:

* ``SSL`` / ``SASL_SSL``: a TLS handshake (Python's ``ssl``), the server's certificate
  checked against the truststore (``ssl.truststore.*`` as Java names it, or librdkafka's
  ``ssl.ca.location``/``ssl.ca.pem``; the system's CAs when neither is set) and, unless
  ``ssl.endpoint.identification.algorithm`` is empty, against the host name connected to. A
  client certificate comes from ``ssl.keystore.*`` or librdkafka's
  ``ssl.certificate.location``+``ssl.key.location``. The PEM/PKCS12 readers are the
  listener's own (``coordinator.security.tls``), so both sides accept the same files.
* ``SASL_PLAINTEXT`` / ``SASL_SSL``: ApiVersions (allowed before authentication), then
  SaslHandshake v1 naming ``sasl.mechanism`` and SaslAuthenticate rounds: PLAIN (one
  token), SCRAM-SHA-256/512 (``ScramClient``, RFC 5802's client side: the server's final
  message is checked, so a server that does not hold the credential is refused too) or
  OAUTHBEARER (a token from ``tools/oauth_client.py``: an OAuth 2 token endpoint or Kafka's
  unsecured development login). The user name and password come from ``sasl.jaas.config``
  (PlainLoginModule/ScramLoginModule ``username``/``password``) or librdkafka's
  ``sasl.username``/``sasl.password``. When the server gives the session a lifetime
  (KIP-368), the connection re-authenticates before it ends, at 85-95% of it, as Kafka's
  clients do.

Failures: ``ClientConfigError`` (a setting that cannot be used, named in the message; never
a password), ``AuthenticationFailed`` (the server refused the credentials), ``ssl.SSLError``
(the TLS handshake failed) and ``OSError`` (the network).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets
import socket
import ssl
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.tools.oauth_client import OAUTH_SETTINGS, TokenSource, token_source
from coordinator.tools.oauth_client import ConfigError as OAuthConfigError
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader, decode_response, encode_request
from protocol.messages import BY_KEY, api_versions, sasl_authenticate, sasl_handshake

_I = struct.Struct(">i")

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# Kafka's ScramMechanism.minIterations(): a client refuses fewer (a downgrade by the server).
SCRAM_MIN_ITERATIONS = 4096


class KafkaError(Exception):
    pass


class AuthenticationFailed(KafkaError):
    """The server refused the SASL exchange (or, for SCRAM, could not prove it knew us)."""


class ClientConfigError(ValueError):
    """A client setting that cannot be used; the message names it (never its secret)."""


# -- client.properties


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    """java.util.Properties escapes: \\t \\n \\r \\f, \\uXXXX, any other char itself."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
            out.append(chr(int(text[i + 2 : i + 6], 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """A Java ``.properties`` text as java.util.Properties.load reads it.

    ``#``/``!`` comment lines; a line ending in an odd number of backslashes continues on the
    next (whose leading blanks are dropped), so a long ``sasl.jaas.config`` may be split as
    Kafka's documentation splits it; the key ends at the first unescaped ``=``, ``:`` or
    blank.
    """
    logical: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if pending is None and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        joined = (pending or "") + (line[:-1] if trailing % 2 else line)
        if trailing % 2:
            pending = joined
        else:
            logical.append(joined)
            pending = None
    if pending:
        logical.append(pending)
    out: dict[str, str] = {}
    for line in logical:
        i = 0
        while i < len(line):
            if line[i] == "\\":
                i += 2
                continue
            if line[i] in "=: \t\f":
                break
            i += 1
        key = line[:i]
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        out[_unescape(key)] = _unescape(rest)
    return out


def read_properties(path: Path | str) -> dict[str, str]:
    try:
        return parse_properties(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ClientConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ClientConfigError(f"{path} is not UTF-8 text") from None


# Settings this client reads (Java's and librdkafka's names); other ``ssl.``/``sasl.``/
# ``security.`` names are reported by ``ClientSecurity.unused`` (Kafka warns about them too).
_KNOWN = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.jaas.config",
        "sasl.username",
        "sasl.password",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "ssl.enabled.protocols",
        "ssl.protocol",
        "ssl.cipher.suites",
        "ssl.endpoint.identification.algorithm",
        "ssl.ca.location",
        "ssl.ca.pem",
        "ssl.certificate.location",
        "ssl.certificate.pem",
        "ssl.key.location",
        "ssl.key.pem",
        "enable.ssl.certificate.verification",
        *OAUTH_SETTINGS,
    }
)


def _jaas_credentials(value: str) -> tuple[str | None, str | None]:
    """username/password of a client's ``sasl.jaas.config`` (Plain or Scram login module)."""
    from coordinator.security.jaas import parse_single

    try:
        entry = parse_single(value)
    except ValueError as exc:
        raise ClientConfigError(f"sasl.jaas.config: {exc}") from None
    module = entry.login_module.rsplit(".", 1)[-1]
    if module not in ("PlainLoginModule", "ScramLoginModule"):
        raise ClientConfigError(
            f"sasl.jaas.config: kgc's client supports PlainLoginModule and ScramLoginModule, "
            f"not {entry.login_module}"
        )
    return entry.options.get("username"), entry.options.get("password")


@dataclass(frozen=True)
class ClientSecurity:
    """How to connect: the security protocol, the SASL credentials and the TLS context."""

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ssl_context: ssl.SSLContext | None = None
    unused: tuple[str, ...] = ()  # security settings given but not used (for a warning)
    oauth: TokenSource | None = None  # OAUTHBEARER's tokens (tools/oauth_client.py)

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def load(cls, path: Path | str) -> ClientSecurity:
        """From a ``client.properties`` file (``--command-config``)."""
        return cls.from_properties(read_properties(path))

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        p = {k: v.strip() for k, v in props.items()}
        protocol = (p.get("security.protocol") or "PLAINTEXT").upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ClientConfigError(
                f"security.protocol: expected one of {', '.join(SECURITY_PROTOCOLS)}, "
                f"got {p['security.protocol']!r}"
            )
        unused = tuple(
            sorted(k for k in p if k.startswith(("ssl.", "sasl.", "security.")) and k not in _KNOWN)
        )
        mechanism = username = password = None
        oauth: TokenSource | None = None
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanism = _sasl_mechanism(p)
            if mechanism == "OAUTHBEARER":
                try:
                    oauth = token_source(p)
                except OAuthConfigError as exc:
                    raise ClientConfigError(str(exc)) from None
            else:
                username, password = _sasl_credentials(p)
        context = _ssl_context(p) if protocol in ("SSL", "SASL_SSL") else None
        return cls(protocol, mechanism, username, password, context, unused, oauth)


def _sasl_mechanism(p: Mapping[str, str]) -> str:
    setting = "sasl.mechanism" if "sasl.mechanism" in p else "sasl.mechanisms"
    mechanism = (p.get(setting) or "").upper()
    if not mechanism:
        raise ClientConfigError(
            "sasl.mechanism is not set (Kafka's default, GSSAPI, is not supported by kgc's "
            f"client; use one of {', '.join(SASL_MECHANISMS)})"
        )
    if mechanism not in SASL_MECHANISMS:
        raise ClientConfigError(
            f"{setting}: kgc's client supports {', '.join(SASL_MECHANISMS)}, not {mechanism}"
        )
    return mechanism


def _sasl_credentials(p: Mapping[str, str]) -> tuple[str, str]:
    username, password = p.get("sasl.username"), p.get("sasl.password")
    if p.get("sasl.jaas.config"):
        username, password = _jaas_credentials(p["sasl.jaas.config"])
    if not username:
        raise ClientConfigError(
            "no SASL user name: set sasl.jaas.config (username=...) or sasl.username"
        )
    if password is None:
        raise ClientConfigError(
            "no SASL password: set sasl.jaas.config (password=...) or sasl.password"
        )
    return username, password


def _ssl_context(p: Mapping[str, str]) -> ssl.SSLContext:
    """A client-side context from Java's and librdkafka's ``ssl.*`` names."""
    # The listener's readers: the same PEM/PKCS12 rules and messages on both sides.
    from coordinator.security.tls import (
        SslConfig,
        TlsConfigError,
        _ciphers,
        _load_keystore,
        _load_truststore,
        _private_files,
        _protocols,
    )

    cfg = SslConfig.from_settings(p)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, host names checked
    try:
        _protocols(ctx, cfg)
        # Trust: Java's truststore, else librdkafka's CA settings, else the system's CAs.
        if cfg.truststore_location or cfg.truststore_certificates:
            _load_truststore(ctx, cfg)
        elif p.get("ssl.ca.location") and p["ssl.ca.location"] != "probe":
            location = Path(p["ssl.ca.location"])
            try:
                if location.is_dir():
                    ctx.load_verify_locations(capath=str(location))
                else:
                    ctx.load_verify_locations(cafile=str(location))
            except (OSError, ssl.SSLError) as exc:
                raise ClientConfigError(
                    f"ssl.ca.location: cannot load {location}: {getattr(exc, 'strerror', None) or exc}"
                ) from None
        elif p.get("ssl.ca.pem"):
            try:
                ctx.load_verify_locations(cadata=p["ssl.ca.pem"])
            except (ssl.SSLError, ValueError) as exc:
                raise ClientConfigError(
                    f"ssl.ca.pem: the certificates do not load: {exc}"
                ) from None
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        # Our own certificate (mutual TLS), when the listener asks for one.
        if cfg.keystore_location or cfg.keystore_certificate_chain or cfg.keystore_key:
            _load_keystore(ctx, cfg)
        elif p.get("ssl.certificate.location") or p.get("ssl.certificate.pem"):
            _librdkafka_keystore(ctx, p, _private_files)
        if cfg.cipher_suites:
            _ciphers(ctx, cfg)
    except TlsConfigError as exc:
        raise ClientConfigError(str(exc)) from None
    algorithm = p.get("ssl.endpoint.identification.algorithm", "https").lower()
    if algorithm not in ("https", ""):
        raise ClientConfigError(
            f"ssl.endpoint.identification.algorithm: expected https or empty, got {algorithm!r}"
        )
    ctx.check_hostname = algorithm == "https"
    verify = p.get("enable.ssl.certificate.verification", "true").lower()
    if verify not in ("true", "false"):
        raise ClientConfigError(
            f"enable.ssl.certificate.verification: expected true or false, got {verify!r}"
        )
    if verify == "false":  # librdkafka's switch: no check at all (tests, never production)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _librdkafka_keystore(ctx: ssl.SSLContext, p: Mapping[str, str], private_files: Any) -> None:
    """``ssl.certificate.location``/``ssl.key.location`` (or their ``.pem`` inline forms)."""
    password = p.get("ssl.key.password") or None
    setting = (
        "ssl.certificate.location" if p.get("ssl.certificate.location") else "ssl.certificate.pem"
    )
    try:
        if p.get("ssl.certificate.location"):
            key = p.get("ssl.key.location") or None
            if p.get("ssl.key.pem"):
                with private_files(p["ssl.key.pem"].encode()) as (key_path,):
                    ctx.load_cert_chain(p["ssl.certificate.location"], key_path, password)
            else:
                ctx.load_cert_chain(p["ssl.certificate.location"], key, password)
        else:
            key_pem = p.get("ssl.key.pem")
            if not key_pem:
                raise ClientConfigError("ssl.certificate.pem needs ssl.key.pem")
            with private_files(p["ssl.certificate.pem"].encode(), key_pem.encode()) as paths:
                ctx.load_cert_chain(paths[0], paths[1], password)
    except ssl.SSLError as exc:
        raise ClientConfigError(
            f"{setting}: the certificate or key does not load: {exc.reason or exc}"
        ) from None
    except OSError as exc:
        raise ClientConfigError(f"{setting}: cannot read it: {exc.strerror or exc}") from None


# -- SASL, client side


def _saslname(user: str) -> str:
    """RFC 5802's escapes for a user name: ``,`` -> ``=2C``, ``=`` -> ``=3D``."""
    return user.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """The client side of SCRAM-SHA-256/512 (RFC 5802/7677, Kafka's ScramSaslClient).

    ``client_first()``, then ``client_final(server_first)``, then
    ``verify_server_final(server_final)``; each raises ``AuthenticationFailed`` on a message
    that does not follow the protocol (a nonce not extending ours, too few iterations, a
    server signature that does not match).
    """

    def __init__(
        self, mechanism: str, username: str, password: str, *, nonce: str | None = None
    ) -> None:
        from coordinator.security.sasl.scram import ScramFormatter

        self.formatter = ScramFormatter(mechanism)
        self.username = username
        self.password = password
        self.nonce = nonce or secrets.token_urlsafe(24)
        self.client_first_bare = f"n={_saslname(username)},r={self.nonce}"
        self._server_signature: bytes | None = None

    def client_first(self) -> bytes:
        return f"n,,{self.client_first_bare}".encode()

    def client_final(self, server_first: bytes) -> bytes:
        try:
            text = server_first.decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("invalid SCRAM server-first message") from None
        fields = dict(
            part.split("=", 1) for part in text.split(",") if "=" in part and len(part) > 1
        )
        nonce, salt_b64, iterations = fields.get("r", ""), fields.get("s"), fields.get("i", "")
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce):
            raise AuthenticationFailed("SCRAM: the server's nonce does not extend the client's")
        if salt_b64 is None or not iterations.isdigit():
            raise AuthenticationFailed("invalid SCRAM server-first message")
        if int(iterations) < SCRAM_MIN_ITERATIONS:
            raise AuthenticationFailed(
                f"SCRAM: the server asked for {iterations} iterations, "
                f"fewer than the minimum {SCRAM_MIN_ITERATIONS}"
            )
        try:
            salt = base64.b64decode(salt_b64, validate=True)
        except binascii.Error:
            raise AuthenticationFailed("invalid SCRAM salt") from None
        f = self.formatter
        salted = f.salted_password(self.password, salt, int(iterations))
        without_proof = f"c=biws,r={nonce}"  # biws = base64("n,,"): no channel binding
        auth_message = f"{self.client_first_bare},{text},{without_proof}".encode()
        proof = f.client_proof(salted, auth_message)
        self._server_signature = f.server_signature(f.server_key(salted), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        text = server_final.decode("ascii", "replace")
        if text.startswith("e="):
            raise AuthenticationFailed(f"SCRAM: the server says {text[2:]}")
        if not text.startswith("v=") or self._server_signature is None:
            raise AuthenticationFailed("invalid SCRAM server-final message")
        try:
            signature = base64.b64decode(text[2:].split(",")[0], validate=True)
        except binascii.Error:
            raise AuthenticationFailed("invalid SCRAM server signature") from None
        if not hmac.compare_digest(signature, self._server_signature):
            raise AuthenticationFailed(
                "SCRAM: the server's signature does not match (it does not hold this "
                "user's credential)"
            )


def plain_token(username: str, password: str) -> bytes:
    """RFC 4616: authzid NUL authcid NUL passwd (no authzid, as Kafka's clients send)."""
    return b"\0" + username.encode() + b"\0" + password.encode()


# -- the connection


class Connection:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "kgc-cli",
        timeout: float = 10.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.security = security or ClientSecurity()
        self.client_id = client_id
        self.correlation_id = 0
        self.versions: dict[int, tuple[int, int]] = {}
        # KIP-368: when the server gave the session a lifetime, re-authenticate on this
        # connection before it ends (monotonic time), as Kafka's clients do.
        self.reauth_at: float | None = None
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.security.tls:
                assert self.security.ssl_context is not None
                # server_hostname: SNI and, unless turned off, the certificate's name check.
                sock = self.security.ssl_context.wrap_socket(sock, server_hostname=host)
            self.sock: socket.socket = sock
            if self.security.sasl:
                self._authenticate()
        except BaseException:
            sock.close()
            raise

    @classmethod
    def to(cls, bootstrap: str, **kw: Any) -> Connection:
        host, _, port = bootstrap.rpartition(":")
        return cls(host or "127.0.0.1", int(port), **kw)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, api_key: int, version: int, body: Any) -> int:
        self.correlation_id += 1
        header = RequestHeader(api_key, version, self.correlation_id, self.client_id)
        self.sock.sendall(encode_request(header, body))
        return self.correlation_id

    def recv_frame(self) -> bytes:
        size = _I.unpack(self._read(4))[0]
        return self._read(size)

    def _read(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise ConnectionError("connection closed by the server")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def call(self, api_key: int, version: int, body: Any) -> Any:
        if self.reauth_at is not None and time.monotonic() >= self.reauth_at:
            self.reauth_at = None
            self._authenticate(reauthenticating=True)
        cid = self.send(api_key, version, body)
        got, resp = decode_response(api_key, version, self.recv_frame())
        if got != cid:
            raise KafkaError(f"correlation id {got} != {cid}")
        return resp

    def negotiate(self) -> None:
        resp = self.call(
            api_versions.API_KEY,
            3,
            api_versions.Request(client_software_name="kgc", client_software_version="0.1"),
        )
        if resp.error_code:
            raise KafkaError(f"ApiVersions failed with error {resp.error_code}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version_for(self, api_key: int) -> int:
        if not self.versions:
            self.negotiate()
        mod = BY_KEY[api_key]
        lo, hi = self.versions.get(api_key, (-1, -1))
        v = min(hi, int(mod.MAX_VERSION))
        if v < max(lo, mod.MIN_VERSION):
            raise KafkaError(f"the broker does not support api key {api_key}")
        return v

    def request(self, api_key: int, body: Any, version: int | None = None) -> tuple[int, Any]:
        """Send at the best common version (or ``version``); return (version, response)."""
        v = self.version_for(api_key) if version is None else version
        return v, self.call(api_key, v, body)

    # -- SASL (Kafka's SaslClientAuthenticator, framed flow)
    def _authenticate(self, *, reauthenticating: bool = False) -> None:
        sec = self.security
        assert sec.sasl_mechanism
        if not reauthenticating:
            self.negotiate()  # ApiVersions is allowed before authentication
        if self.versions.get(sasl_handshake.API_KEY, (0, -1))[1] < 1:
            raise KafkaError(
                "the server does not support SaslHandshake v1 (framed SASL); kgc's client "
                "does not speak the unframed v0 flow"
            )
        hs = self.call(
            sasl_handshake.API_KEY, 1, sasl_handshake.Request(mechanism=sec.sasl_mechanism)
        )
        if hs.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            offered = ", ".join(hs.mechanisms) or "none"
            raise AuthenticationFailed(
                f"the server does not enable SASL mechanism {sec.sasl_mechanism} "
                f"(it enables: {offered})"
            )
        if hs.error_code:
            raise AuthenticationFailed(
                f"SaslHandshake failed with {_error_name(hs.error_code)} (is this a SASL listener?)"
            )
        version = min(self.versions.get(sasl_authenticate.API_KEY, (0, 0))[1], 2)
        if sec.sasl_mechanism == "OAUTHBEARER":
            assert sec.oauth is not None
            try:
                token = sec.oauth.token()
            except OSError as exc:  # the login failed, not the connection to kgc
                raise AuthenticationFailed(f"no OAUTHBEARER token: {exc}") from None
            message = b"n,,\x01auth=Bearer " + token.encode() + b"\x01\x01"
            challenge = self._sasl_round(version, message)
            if challenge:  # RFC 7628's error challenge: acknowledge it, the server then fails
                self._sasl_round(version, b"\x01")
                raise AuthenticationFailed(f"authentication failed: {challenge.decode()}")
            return
        assert sec.username is not None and sec.password is not None
        if sec.sasl_mechanism == "PLAIN":
            self._sasl_round(version, plain_token(sec.username, sec.password))
            return
        scram = ScramClient(sec.sasl_mechanism, sec.username, sec.password)
        server_first = self._sasl_round(version, scram.client_first())
        server_final = self._sasl_round(version, scram.client_final(server_first))
        scram.verify_server_final(server_final)

    def _sasl_round(self, version: int, token: bytes) -> bytes:
        resp = self.call(
            sasl_authenticate.API_KEY, version, sasl_authenticate.Request(auth_bytes=token)
        )
        if resp.error_code:
            detail = resp.error_message or _error_name(resp.error_code)
            raise AuthenticationFailed(f"authentication failed: {detail}")
        lifetime_ms = getattr(resp, "session_lifetime_ms", 0) or 0
        if lifetime_ms > 0:
            # Kafka's clients re-authenticate at 85-95% of the lifetime (jittered).
            fraction = 0.85 + 0.10 * secrets.randbelow(1000) / 1000
            self.reauth_at = time.monotonic() + lifetime_ms / 1000 * fraction
        return bytes(resp.auth_bytes)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
