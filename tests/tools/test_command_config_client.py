"""The client side of ``--command-config``, without a server: properties, settings, SCRAM.

How this works: ``parse_properties`` is checked against java.util.Properties' rules (a JAAS
line split over lines as Kafka's documentation writes it); ``ClientSecurity`` against the
settings clients write (Java's and librdkafka's names) and the mistakes it must name; the
SCRAM client against RFC 7677's exchange (fixed nonce) and against kgc's own SCRAM server,
which must accept it and whose signature it must check.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from support.certkit import make_pki

from coordinator.security import ScramCredential
from coordinator.security.sasl.scram import ScramFormatter, ScramSaslServer
from coordinator.tools.client import (
    AuthenticationFailed,
    ClientConfigError,
    ClientSecurity,
    ScramClient,
    parse_properties,
    plain_token,
)

SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="alice-secret";'
)


def test_properties_as_java_reads_them() -> None:
    text = (
        "# a comment\n"
        "! another\n"
        "   security.protocol = SASL_SSL\n"
        "sasl.mechanism:SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" \\\n'
        '    password="a\\\\b#c";\n'
        "ssl.truststore.location /etc/ca.pem\n"
        "empty=\n"
        "tab\\tkey=caf\\u00e9\n"
    )
    assert parse_properties(text) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="a\\b#c";',
        "ssl.truststore.location": "/etc/ca.pem",
        "empty": "",
        "tab\tkey": "café",
    }


def test_sasl_credentials_from_jaas_or_librdkafka_names() -> None:
    jaas = ClientSecurity.from_properties(
        {
            "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": SCRAM_JAAS,
        }
    )
    assert (jaas.security_protocol, jaas.sasl_mechanism) == ("SASL_PLAINTEXT", "SCRAM-SHA-512")
    assert (jaas.username, jaas.password, jaas.sasl, jaas.tls) == (
        "alice",
        "alice-secret",
        True,
        False,
    )
    rdkafka = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "bob",
            "sasl.password": "bob-secret",
            "sasl.kerberos.service.name": "kafka",
        }
    )
    assert (rdkafka.sasl_mechanism, rdkafka.username, rdkafka.password) == (
        "PLAIN",
        "bob",
        "bob-secret",
    )
    assert rdkafka.unused == ("sasl.kerberos.service.name",)
    plain = ClientSecurity.from_properties({})
    assert (plain.security_protocol, plain.sasl, plain.tls) == ("PLAINTEXT", False, False)


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({"security.protocol": "SASL_TLS"}, "security.protocol"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": SCRAM_JAAS}, "GSSAPI"),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"},
            "sasl.mechanism",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
                'OAuthBearerLoginModule required password="alice-secret";',
            },
            "sasl.jaas.config",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": 'PlainLoginModule required password="alice-secret"',
            },
            "sasl.jaas.config",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.password": "alice-secret",
            },
            "sasl.username",
        ),
        (  # JKS, the default type, is read since e7a3d3d: the missing store is named
            {"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/ca.jks"},
            "ssl.truststore.location",
        ),
        (
            {
                "security.protocol": "SSL",
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": "/nonexistent/ca.pem",
            },
            "ssl.truststore.location",
        ),
        (
            {"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"},
            "ssl.ca.location",
        ),
        (
            {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "http"},
            "ssl.endpoint.identification.algorithm",
        ),
        (
            {"security.protocol": "SSL", "ssl.enabled.protocols": "SSLv3"},
            "ssl.enabled.protocols",
        ),
    ],
)
def test_settings_that_cannot_be_used_are_named_without_their_secrets(
    props: dict[str, str], named: str
) -> None:
    with pytest.raises(ClientConfigError) as info:
        ClientSecurity.from_properties(props)
    assert named in str(info.value)
    assert "alice-secret" not in str(info.value)


def test_tls_settings_in_java_and_librdkafka_names(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    java = ClientSecurity.from_properties(
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.server),
        }
    )
    assert java.ssl_context is not None
    assert java.ssl_context.check_hostname and java.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in java.ssl_context.get_ca_certs()] == [
        ((("organizationName", "kgc tests"),), (("commonName", "kgc test CA"),))
    ]
    rdkafka = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
            "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key),
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert rdkafka.ssl_context is not None and not rdkafka.ssl_context.check_hostname
    with pytest.raises(ClientConfigError, match=r"ssl\.certificate\.location"):
        ClientSecurity.from_properties(
            {
                "security.protocol": "SSL",
                "ssl.ca.location": str(pki.ca),
                "ssl.certificate.location": str(pki.client_cert),
                "ssl.key.location": str(pki.rogue_key),  # not this certificate's key
            }
        )


# RFC 7677 section 3 (SCRAM-SHA-256, user "user", password "pencil").
RFC7677_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_scram_client_reproduces_rfc7677() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677_NONCE)
    assert client.client_first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.client_final(RFC7677_SERVER_FIRST) == RFC7677_CLIENT_FINAL
    client.verify_server_final(RFC7677_SERVER_FINAL)
    with pytest.raises(AuthenticationFailed, match="signature does not match"):
        client.verify_server_final(b"v=" + b"A" * 43 + b"=")


@pytest.mark.parametrize(
    "server_first",
    [
        b"r=someoneelse123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",  # nonce not extending ours
        b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",  # nothing added
        b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1024",  # too few iterations
        b"r=rOprNGfwEbeRWgbNEkqOxyz,i=4096",  # no salt
        b"\xff\xfe",
    ],
)
def test_scram_client_refuses_a_bad_server_first(server_first: bytes) -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677_NONCE)
    with pytest.raises(AuthenticationFailed):
        client.client_final(server_first)


class Store:
    def __init__(self, creds: dict[tuple[str, str], ScramCredential]) -> None:
        self.creds = creds

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.creds.get((user, mechanism))

    def users(self) -> dict[str, list[ScramCredential]]:
        return {}


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_against_kgcs_server(mechanism: str) -> None:
    user = "ops,team=blue"  # RFC 5802's escapes, both ways
    f = ScramFormatter(mechanism)
    store = Store({(user, mechanism): f.credential("s3cret", b"salt" * 8, 4096)})
    server = ScramSaslServer(f, store)
    client = ScramClient(mechanism, user, "s3cret")
    server_first = server.evaluate(client.client_first())
    client.verify_server_final(server.evaluate(client.client_final(server_first)))
    assert server.complete and str(server.principal) == f"User:{user}"


def test_plain_token_is_rfc4616_without_authzid() -> None:
    assert plain_token("alice", "pw") == b"\0alice\0pw"
