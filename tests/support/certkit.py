"""Throwaway TLS material for tests: a CA, a server certificate, client certificates.

How this works: ``make_pki(dir)`` generates with ``cryptography`` a self-signed CA, a
server certificate for 127.0.0.1/localhost, a client certificate for ``CN=alice`` and an
expired one, plus a second CA nobody trusts (for a client certificate that must be refused),
and writes them as PEM files under ``dir``. Keys are EC P-256 (fast to make); the server
key is also written encrypted (PKCS#8, password ``server-secret``) for ``ssl.key.password``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_PASSWORD = "server-secret"


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path  # CA certificate (PEM): the truststore
    server: Path  # server keystore: key + chain in one PEM (ssl.keystore.location)
    server_cert: Path  # server certificate chain only
    server_key: Path  # server key, clear PKCS#8
    server_key_encrypted: Path  # server key, PKCS#8 encrypted with KEY_PASSWORD
    client_cert: Path  # CN=alice,OU=clients,O=kgc (signed by the CA)
    client_key: Path
    expired_cert: Path  # CN=old-alice, expired yesterday
    expired_key: Path
    rogue_cert: Path  # CN=mallory, signed by a CA nobody trusts
    rogue_key: Path


def _name(**attrs: str) -> x509.Name:
    oids = {"C": NameOID.COUNTRY_NAME, "O": NameOID.ORGANIZATION_NAME}
    oids |= {"OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "CN": NameOID.COMMON_NAME}
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in attrs.items()])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def make_cert(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    server: bool = False,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or now - dt.timedelta(hours=1))
        .not_valid_after(not_after or now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        builder = builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
    else:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    enc: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key, rogue_ca_key = _key(), _key()
    ca_name, rogue_ca_name = _name(O="kgc tests", CN="kgc test CA"), _name(CN="rogue CA")
    ca = make_cert(ca_name, ca_key, ca_name, ca_key, ca=True)

    server_key = _key()
    server = make_cert(_name(CN="localhost"), server_key, ca_name, ca_key, server=True)
    client_key = _key()
    client = make_cert(_name(O="kgc", OU="clients", CN="alice"), client_key, ca_name, ca_key)
    expired_key = _key()
    expired = make_cert(
        _name(O="kgc", OU="clients", CN="old-alice"),
        expired_key,
        ca_name,
        ca_key,
        not_before=now - dt.timedelta(days=10),
        not_after=now - dt.timedelta(days=1),
    )
    rogue_key = _key()
    rogue = make_cert(_name(CN="mallory"), rogue_key, rogue_ca_name, rogue_ca_key)

    def write(name: str, data: bytes) -> Path:
        path = directory / name
        path.write_bytes(data)
        return path

    return Pki(
        dir=directory,
        ca=write("ca.pem", pem(ca)),
        server=write("server-keystore.pem", key_pem(server_key) + pem(server) + pem(ca)),
        server_cert=write("server.pem", pem(server) + pem(ca)),
        server_key=write("server.key", key_pem(server_key)),
        server_key_encrypted=write("server-encrypted.key", key_pem(server_key, KEY_PASSWORD)),
        client_cert=write("client.pem", pem(client)),
        client_key=write("client.key", key_pem(client_key)),
        expired_cert=write("expired.pem", pem(expired)),
        expired_key=write("expired.key", key_pem(expired_key)),
        rogue_cert=write("rogue.pem", pem(rogue)),
        rogue_key=write("rogue.key", key_pem(rogue_key)),
    )


def handshake(
    server: ssl.SSLContext,
    pki: Pki,
    *,
    client_cert: bool = False,
    client: ssl.SSLContext | None = None,
) -> ssl.SSLObject:
    """A TLS handshake in memory between ``server`` and a client trusting the test CA (or
    ``client``); returns the client's side, done. Failures raise ``ssl.SSLError``."""
    if client is None:
        client = ssl.create_default_context(cafile=str(pki.ca))
    if client_cert:
        client.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    c = client.wrap_bio(c_in, c_out, server_hostname="localhost")
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(20):
        for name, obj in (("c", c), ("s", s)):
            if not done[name]:
                try:
                    obj.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return c
    raise AssertionError("the handshake did not finish")


def server_cn(c: ssl.SSLObject) -> str:
    """The common name of the certificate the server presented."""
    peer = c.getpeercert()
    assert peer is not None
    return str(dict(x[0] for x in peer["subject"])["commonName"])  # type: ignore[index]
