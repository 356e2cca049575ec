"""TLS for a listener: an ``ssl.SSLContext`` from Kafka's ``ssl.*`` settings.

How this works: ``SslConfig`` holds one listener's ``ssl.*`` values under Kafka's names (the
global settings with ``listener.name.<listener>.ssl.*`` over them, as Kafka scopes them);
``server_context`` turns them into a server-side ``SSLContext``, as Kafka's
``DefaultSslEngineFactory`` does:

* the keystore: ``ssl.keystore.type=PEM`` (KIP-651) with ``ssl.keystore.location`` (a PEM
  file holding the private key and the certificate chain) or inline
  ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``; ``ssl.key.password`` decrypts
  an encrypted key. ``PKCS12`` and ``JKS`` (Kafka's default type; read with pyjks) take
  ``ssl.keystore.location`` and ``ssl.keystore.password`` (a JKS key protected by its own
  password: ``ssl.key.password``). As Java's JKS keystore does, a ``JKS`` location that
  holds a PKCS12 file is read as PKCS12;
* the truststore (who may present a client certificate): ``ssl.truststore.type=PEM`` with
  ``ssl.truststore.location`` or inline ``ssl.truststore.certificates``, or ``PKCS12``/``JKS``
  (its trusted certificate entries);
* ``ssl.client.auth``: none (no certificate asked for), requested (asked for, optional),
  required (the handshake fails without a valid one);
* ``ssl.enabled.protocols`` (TLSv1.2, TLSv1.3) and ``ssl.cipher.suites`` (IANA names as Java
  writes them, e.g. TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, or OpenSSL's names).

A refused handshake (no client certificate when one is required, an untrusted or expired
one) must reach the client as the TLS alert OpenSSL wrote for it, as Kafka's broker sends
it: Kafka's Java client turns the alert into ``SslAuthenticationException`` and stops, but
takes a connection that merely drops for a network problem and retries until its timeout.
asyncio's and uvloop's SSL protocols close the socket on a failed handshake without writing
out that alert, so the context hands out ``AlertingSSLObject``s, which attach the alert's
bytes to the handshake error (``tls_alert``) for the listener to send on the socket itself.

Any problem raises ``TlsConfigError`` naming the setting, so start-up stops with one line.
Python's ``ssl`` loads keys from files only: inline PEM is written to a private temporary
directory for the call and removed at once.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CLIENT_AUTH",
    "AlertingSSLObject",
    "SslConfig",
    "TlsConfigError",
    "server_context",
    "tls_alert",
]

CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_PROTOCOLS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
# TLS 1.3 suites: same names in Java and OpenSSL. Python's ssl has no call for them
# (``set_ciphers`` is TLS 1.2's list), so ``set_tls13_suites`` calls OpenSSL's own.
_TLS13_SUITES = frozenset(
    {
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_AES_128_CCM_SHA256",
        "TLS_AES_128_CCM_8_SHA256",
    }
)


class TlsConfigError(ValueError):
    """A TLS setting that cannot be used; ``setting`` is its Kafka name."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting


@dataclass(frozen=True, slots=True)
class SslConfig:
    """One listener's ``ssl.*`` settings (Kafka names and defaults)."""

    keystore_type: str = "JKS"
    keystore_location: str | None = None
    keystore_password: str | None = None
    keystore_certificate_chain: str | None = None
    keystore_key: str | None = None
    key_password: str | None = None
    truststore_type: str = "JKS"
    truststore_location: str | None = None
    truststore_password: str | None = None
    truststore_certificates: str | None = None
    client_auth: str = "none"
    enabled_protocols: str = "TLSv1.2,TLSv1.3"
    cipher_suites: str | None = None
    principal_mapping_rules: str = "DEFAULT"
    # Settings named with a listener prefix, for error messages ("listener.name.ssl.").
    prefix: str = ""

    @classmethod
    def from_settings(cls, values: Mapping[str, object], prefix: str = "") -> SslConfig:
        """From ``{"ssl.keystore.type": ..., ...}`` (Kafka names; None/"" = unset)."""

        def get(name: str, default: str | None = None) -> str | None:
            value = values.get("ssl." + name)
            if value is None or value == "":
                return default
            return str(value)

        return cls(
            keystore_type=(get("keystore.type", "JKS") or "JKS").upper(),
            keystore_location=get("keystore.location"),
            keystore_password=get("keystore.password"),
            keystore_certificate_chain=get("keystore.certificate.chain"),
            keystore_key=get("keystore.key"),
            key_password=get("key.password"),
            truststore_type=(get("truststore.type", "JKS") or "JKS").upper(),
            truststore_location=get("truststore.location"),
            truststore_password=get("truststore.password"),
            truststore_certificates=get("truststore.certificates"),
            client_auth=(get("client.auth", "none") or "none").lower(),
            enabled_protocols=get("enabled.protocols", "TLSv1.2,TLSv1.3") or "TLSv1.2,TLSv1.3",
            cipher_suites=get("cipher.suites"),
            principal_mapping_rules=get("principal.mapping.rules", "DEFAULT") or "DEFAULT",
            prefix=prefix,
        )

    def name(self, setting: str) -> str:
        return f"{self.prefix}ssl.{setting}"


class AlertingSSLObject(ssl.SSLObject):
    """An ``SSLObject`` whose failed handshake carries the bytes OpenSSL left to send (the
    fatal alert) on the error, as ``tls_alert``."""

    outgoing: ssl.MemoryBIO | None = None

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError as exc:
            if self.outgoing is not None:
                exc.tls_alert = self.outgoing.read()  # type: ignore[attr-defined]
            raise


class _ServerContext(ssl.SSLContext):
    """A server context making ``AlertingSSLObject``s that know their outgoing buffer."""

    sslobject_class = AlertingSSLObject

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        obj = super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)
        if isinstance(obj, AlertingSSLObject):
            obj.outgoing = outgoing
        return obj


def tls_alert(exc: BaseException) -> bytes:
    """The alert a failed server handshake left unsent (empty when there is none)."""
    alert = getattr(exc, "tls_alert", b"")
    return alert if isinstance(alert, bytes) else b""


def server_context(cfg: SslConfig) -> ssl.SSLContext:
    """The server-side context for a listener; ``TlsConfigError`` names what is wrong."""
    ctx = _ServerContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols(ctx, cfg)
    _load_keystore(ctx, cfg)
    if cfg.client_auth not in CLIENT_AUTH:
        raise TlsConfigError(
            cfg.name("client.auth"),
            f"expected none, requested or required, got {cfg.client_auth!r}",
        )
    ctx.verify_mode = CLIENT_AUTH[cfg.client_auth]
    _load_truststore(ctx, cfg)
    if cfg.cipher_suites:
        _ciphers(ctx, cfg)
    return ctx


def _protocols(ctx: ssl.SSLContext, cfg: SslConfig) -> None:
    names = [p.strip() for p in cfg.enabled_protocols.split(",") if p.strip()]
    unknown = [p for p in names if p not in _PROTOCOLS]
    if unknown or not names:
        raise TlsConfigError(
            cfg.name("enabled.protocols"),
            f"kgc supports TLSv1.2 and TLSv1.3, got {cfg.enabled_protocols!r}",
        )
    versions = sorted(_PROTOCOLS[p] for p in names)
    ctx.minimum_version = versions[0]
    ctx.maximum_version = versions[-1]


def _read(setting: str, location: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise TlsConfigError(setting, f"cannot read {location}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _private_files(*contents: bytes) -> Iterator[list[str]]:
    """Files readable by this process only, removed when the block ends."""
    with tempfile.TemporaryDirectory(prefix="kgc-tls-") as tmp:
        os.chmod(tmp, 0o700)
        paths = []
        for i, data in enumerate(contents):
            path = os.path.join(tmp, f"{i}.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            paths.append(path)
        yield paths


def _pem_key_and_chain(cfg: SslConfig) -> tuple[bytes, bytes, str]:
    """(private key PEM, certificate chain PEM, setting to blame) of a PEM keystore."""
    from cryptography import x509

    if cfg.keystore_location and (cfg.keystore_certificate_chain or cfg.keystore_key):
        raise TlsConfigError(
            cfg.name("keystore.location"),
            "set either ssl.keystore.location or ssl.keystore.certificate.chain and "
            "ssl.keystore.key, not both",
        )
    if cfg.keystore_location:
        setting = cfg.name("keystore.location")
        data = _read(setting, cfg.keystore_location)
        key, chain = data, data
    else:
        if not cfg.keystore_certificate_chain:
            raise TlsConfigError(
                cfg.name("keystore.certificate.chain"),
                "a PEM keystore needs ssl.keystore.location or "
                "ssl.keystore.certificate.chain and ssl.keystore.key",
            )
        if not cfg.keystore_key:
            raise TlsConfigError(
                cfg.name("keystore.key"), "ssl.keystore.certificate.chain needs ssl.keystore.key"
            )
        chain = cfg.keystore_certificate_chain.encode()
        key = cfg.keystore_key.encode()
        setting = cfg.name("keystore.certificate.chain")
    try:
        certs = x509.load_pem_x509_certificates(chain)
    except ValueError:
        certs = []
    if not certs:
        raise TlsConfigError(setting, "no PEM certificate found")
    key_setting = setting if cfg.keystore_location else cfg.name("keystore.key")
    _check_key(key, cfg, key_setting)
    return key, chain, setting


def _check_key(key: bytes, cfg: SslConfig, setting: str) -> None:
    """Load the key with ``cryptography`` first: its errors say what is wrong (a missing
    or wrong password, no key at all), OpenSSL's do not."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    begin = key.find(b"-----BEGIN")
    while begin >= 0 and b"PRIVATE KEY-----" not in key[begin : key.find(b"\n", begin)]:
        begin = key.find(b"-----BEGIN", begin + 1)
    if begin < 0:
        raise TlsConfigError(setting, "no PEM private key found")
    password = cfg.key_password.encode() if cfg.key_password else None
    try:
        load_pem_private_key(key[begin:], password)
    except TypeError as exc:  # encrypted without a password, or a password for a clear key
        raise TlsConfigError(cfg.name("key.password"), str(exc)) from None
    except ValueError as exc:
        text = str(exc).lower()
        if "password" in text or "decrypt" in text:
            raise TlsConfigError(cfg.name("key.password"), "cannot decrypt the key") from None
        raise TlsConfigError(setting, f"the private key does not load: {exc}") from None


def _load_keystore(ctx: ssl.SSLContext, cfg: SslConfig) -> None:
    kind = cfg.keystore_type
    if kind == "PEM":
        key, chain, setting = _pem_key_and_chain(cfg)
        password = cfg.key_password
        if cfg.keystore_location and not (cfg.keystore_certificate_chain or cfg.keystore_key):
            _load_chain(ctx, setting, cfg.keystore_location, None, password)
            return
        with _private_files(chain, key) as (chain_path, key_path):
            _load_chain(ctx, setting, chain_path, key_path, password)
        return
    if kind in ("PKCS12", "JKS"):
        key, chain = _java_store(cfg, "keystore")
        with _private_files(chain, key) as (chain_path, key_path):
            _load_chain(ctx, cfg.name("keystore.location"), chain_path, key_path, None)
        return
    raise TlsConfigError(
        cfg.name("keystore.type"),
        f"{kind} keystores are not supported by kgc; use PEM, PKCS12 or JKS",
    )


def _load_chain(
    ctx: ssl.SSLContext, setting: str, certfile: str, keyfile: str | None, password: str | None
) -> None:
    try:
        ctx.load_cert_chain(certfile, keyfile, password=password or None)
    except ssl.SSLError as exc:
        reason = exc.reason or str(exc)
        if "KEY_VALUES_MISMATCH" in str(reason).upper():
            raise TlsConfigError(
                setting, "the private key does not match the certificate"
            ) from None
        raise TlsConfigError(setting, f"the certificate or key does not load: {reason}") from None
    except OSError as exc:
        raise TlsConfigError(setting, f"cannot read {certfile}: {exc.strerror or exc}") from None


_JKS_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")  # JKS, JCEKS


def _java_store(cfg: SslConfig, store: str) -> tuple[bytes, bytes]:
    """(key PEM, certificate chain PEM) of a PKCS12 or JKS keystore (key b"" for a
    truststore, whose chain is then every trusted certificate)."""
    kind = cfg.keystore_type if store == "keystore" else cfg.truststore_type
    location = cfg.keystore_location if store == "keystore" else cfg.truststore_location
    password = cfg.keystore_password if store == "keystore" else cfg.truststore_password
    setting = cfg.name(f"{store}.location")
    if not location:
        raise TlsConfigError(setting, f"a {kind} {store} needs ssl.{store}.location")
    data = _read(setting, location)
    if data[:4] in _JKS_MAGIC:
        return _jks(cfg, store, data, location, password)
    return _pkcs12(cfg, store, data, location, password)


def _jks(
    cfg: SslConfig, store: str, data: bytes, location: str, password: str | None
) -> tuple[bytes, bytes]:
    import jks  # pyjks

    try:
        ks = jks.KeyStore.loads(data, password or "", try_decrypt_keys=False)
    except jks.util.KeystoreSignatureException:
        raise TlsConfigError(
            cfg.name(f"{store}.password"), f"cannot open {location}: wrong password"
        ) from None
    except Exception as exc:  # pyjks raises several types for a damaged file
        raise TlsConfigError(
            cfg.name(f"{store}.location"), f"cannot read {location}: {exc}"
        ) from None
    if store == "truststore":
        certs = [entry.cert for entry in ks.certs.values()]
        certs += [der for entry in ks.private_keys.values() for _, der in entry.cert_chain[:1]]
        return b"", b"".join(_der_to_pem(der) for der in certs)
    if len(ks.private_keys) != 1:
        raise TlsConfigError(
            cfg.name("keystore.location"),
            f"{location} holds {len(ks.private_keys)} private keys; kgc needs exactly one",
        )
    entry = next(iter(ks.private_keys.values()))
    # A key entry may have its own password (ssl.key.password), else the store's.
    for key_password in dict.fromkeys(p for p in (cfg.key_password, password) if p is not None):
        try:
            entry.decrypt(key_password)
            break
        except jks.util.DecryptionFailureException:
            continue
    if not entry.is_decrypted():
        raise TlsConfigError(cfg.name("key.password"), "cannot decrypt the key") from None
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        load_der_private_key,
    )

    key = load_der_private_key(entry.pkey_pkcs8, None).private_bytes(
        Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()
    )
    return key, b"".join(_der_to_pem(der) for _, der in entry.cert_chain)


def _der_to_pem(der: bytes) -> bytes:
    return ssl.DER_cert_to_PEM_cert(der).encode()


def _pkcs12(
    cfg: SslConfig, store: str, data: bytes, location: str, password: str | None
) -> tuple[bytes, bytes]:
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        pkcs12,
    )

    setting = cfg.name(f"{store}.location")
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(
            data, password.encode() if password else None
        )
    except ValueError as exc:
        raise TlsConfigError(
            cfg.name(f"{store}.password"), f"cannot open {location}: {exc}"
        ) from None
    certs = ([cert] if cert is not None else []) + list(extra)
    chain = b"".join(c.public_bytes(Encoding.PEM) for c in certs)
    if store == "keystore":
        if key is None or cert is None:
            raise TlsConfigError(setting, f"{location} holds no private key and certificate")
        pem_key = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        return pem_key, chain
    return b"", chain


def _load_truststore(ctx: ssl.SSLContext, cfg: SslConfig) -> None:
    kind = cfg.truststore_type
    if cfg.truststore_location is None and cfg.truststore_certificates is None:
        if cfg.client_auth != "none":
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # Java's default truststore
        return
    if kind in ("PKCS12", "JKS"):
        _, chain = _java_store(cfg, "truststore")
        _load_cadata(ctx, cfg.name("truststore.location"), chain.decode())
        return
    if kind != "PEM":
        raise TlsConfigError(
            cfg.name("truststore.type"),
            f"{kind} truststores are not supported by kgc; use PEM, PKCS12 or JKS",
        )
    if cfg.truststore_location and cfg.truststore_certificates:
        raise TlsConfigError(
            cfg.name("truststore.location"),
            "set either ssl.truststore.location or ssl.truststore.certificates, not both",
        )
    if cfg.truststore_location:
        setting = cfg.name("truststore.location")
        _load_cadata(
            ctx, setting, _read(setting, cfg.truststore_location).decode("ascii", "replace")
        )
    else:
        assert cfg.truststore_certificates is not None
        _load_cadata(ctx, cfg.name("truststore.certificates"), cfg.truststore_certificates)


def _load_cadata(ctx: ssl.SSLContext, setting: str, pem: str) -> None:
    if "-----BEGIN CERTIFICATE-----" not in pem:
        raise TlsConfigError(setting, "no PEM certificate found")
    try:
        ctx.load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as exc:
        raise TlsConfigError(setting, f"the certificates do not load: {exc}") from None


def _openssl_cipher_name(name: str) -> str:
    """Java's IANA suite name as OpenSSL names it (TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 ->
    ECDHE-RSA-AES256-GCM-SHA384); other names are taken as OpenSSL's already."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, rest = name[4:].partition("_WITH_")
    kx_part = {"RSA": ""}.get(kx, kx.replace("_", "-"))
    pieces = rest.split("_")
    mac = pieces[-1]
    cipher = pieces[:-1]
    if cipher[:1] == ["AES"] and len(cipher) >= 2:
        body = "AES" + cipher[1] + ("-" + "-".join(cipher[2:]) if cipher[2:] else "")
        body = body.replace("-CBC", "")
    elif cipher == ["CHACHA20", "POLY1305"]:
        body, mac = "CHACHA20-POLY1305", ""
    else:
        body = "-".join(cipher)
    return "-".join(p for p in (kx_part, body, mac) if p)


def _ciphers(ctx: ssl.SSLContext, cfg: SslConfig) -> None:
    """``ssl.cipher.suites`` as Java applies it: the list names the suites of every enabled
    protocol, so a protocol none of whose suites is listed cannot be negotiated."""
    setting = cfg.name("cipher.suites")
    names = [n.strip() for n in (cfg.cipher_suites or "").split(",") if n.strip()]
    tls13 = [n for n in names if n in _TLS13_SUITES]
    wanted = {n: _openssl_cipher_name(n) for n in names if n not in _TLS13_SUITES}
    if wanted:
        try:
            ctx.set_ciphers(":".join(wanted.values()))
        except ssl.SSLError:
            raise TlsConfigError(
                setting, f"no usable cipher suite in {cfg.cipher_suites!r}"
            ) from None
        # OpenSSL drops names it does not know: each one asked for must be in use.
        enabled = {c["name"] for c in ctx.get_ciphers()}
        for name, openssl in wanted.items():
            if openssl not in enabled:
                raise TlsConfigError(setting, f"unknown or unavailable cipher suite {name!r}")
    v12, v13 = ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3
    if not wanted:  # no TLS 1.2 suite: TLS 1.3 only
        if ctx.maximum_version < v13:
            raise TlsConfigError(setting, f"no TLS 1.2 cipher suite in {cfg.cipher_suites!r}")
        ctx.minimum_version = v13
    if not tls13:  # no TLS 1.3 suite: TLS 1.2 only
        if ctx.minimum_version > v12:
            raise TlsConfigError(setting, f"no TLS 1.3 cipher suite in {cfg.cipher_suites!r}")
        ctx.maximum_version = v12
    elif not set_tls13_suites(ctx, tls13):
        raise TlsConfigError(setting, f"cannot enable the TLS 1.3 suites {', '.join(tls13)}")


def set_tls13_suites(ctx: ssl.SSLContext, names: list[str]) -> bool:
    """Restrict the TLS 1.3 suites of ``ctx`` with OpenSSL's ``SSL_CTX_set_ciphersuites``.

    Python's ssl does not expose the call, so it is reached through the ``_ssl`` module's
    own libssl, with the ``SSL_CTX`` pointer that CPython keeps first in an SSLContext. The
    pointer is trusted only if OpenSSL reads the same options from it as Python does;
    returns False (nothing changed) when anything does not hold.
    """
    import _ssl
    import ctypes

    try:
        lib = ctypes.CDLL(_ssl.__file__)
        get_options = lib.SSL_CTX_get_options
        set_suites = lib.SSL_CTX_set_ciphersuites
    except (OSError, AttributeError):
        return False
    get_options.argtypes, get_options.restype = [ctypes.c_void_p], ctypes.c_uint64
    set_suites.argtypes, set_suites.restype = [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_int
    pointer = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
    if not pointer or get_options(pointer) != ctx.options:
        return False
    if set_suites(pointer, ":".join(names).encode()) != 1:
        return False
    enabled = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.3"}
    return enabled == set(names)
