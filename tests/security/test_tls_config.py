"""Listener and TLS settings: Kafka's names, scoping and defaults; errors name the setting."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from support.certkit import KEY_PASSWORD, Pki, make_pki

from coordinator.config import ListenerSpec, Settings, properties
from coordinator.placement import advertised_endpoints
from coordinator.security.settings_check import check_settings
from coordinator.security.tls import SslConfig, TlsConfigError, server_context


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_default_is_one_plaintext_listener_on_host_and_port() -> None:
    s = Settings()
    assert s.listener_specs == [ListenerSpec("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")]
    s = Settings(host="0.0.0.0", port=9999)
    assert s.bind_address == ("0.0.0.0", 9999)


def test_several_listeners_with_kafkas_default_protocol_map() -> None:
    s = Settings(
        listeners="PLAINTEXT://127.0.0.1:9092,SSL://:9093,sasl_ssl://[::1]:9094,"
        "SASL_PLAINTEXT://localhost:9095"
    )
    assert s.listener_specs == [
        ListenerSpec("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),
        ListenerSpec("SSL", "0.0.0.0", 9093, "SSL"),
        ListenerSpec("SASL_SSL", "::1", 9094, "SASL_SSL"),
        ListenerSpec("SASL_PLAINTEXT", "localhost", 9095, "SASL_PLAINTEXT"),
    ]


def test_custom_listener_names_need_the_protocol_map() -> None:
    s = Settings(
        listeners="INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093",
        listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
    )
    assert [(x.name, x.security_protocol) for x in s.listener_specs] == [
        ("INTERNAL", "PLAINTEXT"),
        ("EXTERNAL", "SASL_SSL"),
    ]
    with pytest.raises(ValueError, match="no security protocol defined for listener EXTERNAL"):
        Settings(listeners="EXTERNAL://127.0.0.1:9093")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"listeners": "PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2"}, "different name"),
        ({"listeners": "PLAINTEXT://127.0.0.1:1,SSL://127.0.0.1:1"}, "different port"),
        ({"listeners": "PLAINTEXT:/127.0.0.1:1"}, "expected NAME://host:port"),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:1", "advertised_listeners": "SSL://h:1"},
            "advertised.listeners: listener SSL is not in listeners",
        ),
        ({"listener_security_protocol_map": "A:TLS"}, "listener.security.protocol.map"),
    ],
)
def test_listener_errors_name_the_setting(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        Settings(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "line"),
    [
        (
            {"ssl_principal_mapping_rules": "RULE:x"},
            "invalid configuration: listener.name.plaintext.ssl.principal.mapping.rules: ",
        ),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:1,SSL://127.0.0.1:2",
                "listener_name_configs": {"listener.name.ssl.ssl.principal.mapping.rules": "no"},
            },
            "invalid configuration: listener.name.ssl.ssl.principal.mapping.rules: ",
        ),
        (
            {"super_users": "admin"},
            "invalid setting super.users: Value error, super.users: ",
        ),
    ],
)
def test_security_settings_are_checked_by_the_security_layer_in_one_line(
    kwargs: dict[str, object], line: str
) -> None:
    s = Settings(**kwargs)  # type: ignore[arg-type]  # config keeps the strings
    with pytest.raises(SystemExit) as exc:
        check_settings(s)
    assert isinstance(exc.value.code, str)
    assert exc.value.code.startswith(line)
    assert "\n" not in exc.value.code


def test_listener_scoped_settings_override_the_global_ones(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text(
        "listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093\n"
        "inter.broker.listener.name=PLAINTEXT\n"
        "ssl.keystore.type=PEM\n"
        "ssl.keystore.location=/global.pem\n"
        "listener.name.ssl.ssl.keystore.location=/ssl-only.pem\n"
        "listener.name.ssl.ssl.client.auth=required\n"
    )
    properties._PROPERTIES_PATH = props
    try:
        s = Settings()
    finally:
        properties._PROPERTIES_PATH = None
    assert s.listener_config("SSL", "ssl.keystore.location") == "/ssl-only.pem"
    assert s.listener_config("PLAINTEXT", "ssl.keystore.location") == "/global.pem"
    ssl_view = s.ssl_configs("SSL")
    assert ssl_view["ssl.client.auth"] == "required"
    assert ssl_view["ssl.keystore.type"] == "PEM"
    assert s.ssl_configs("PLAINTEXT")["ssl.client.auth"] == "none"


def test_listener_name_configs_from_the_command_line_as_json() -> None:
    s = Settings(listener_name_configs='{"listener.name.ssl.ssl.key.password": "x"}')  # type: ignore[arg-type]
    assert s.listener_config("SSL", "ssl.key.password") == "x"


def test_advertised_endpoints_per_listener() -> None:
    s = Settings(listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0")
    assert advertised_endpoints(s, {"PLAINTEXT": 1111, "SSL": 2222}) == {
        "PLAINTEXT": ("127.0.0.1", 1111),
        "SSL": ("127.0.0.1", 2222),
    }
    s = Settings(
        listeners="PLAINTEXT://0.0.0.0:9092,SSL://0.0.0.0:9093",
        advertised_listeners="SSL://kgc.example.com:19093",
    )
    # Only what advertised.listeners names is advertised (Kafka's rule).
    assert advertised_endpoints(s, {"PLAINTEXT": 9092, "SSL": 9093}) == {
        "SSL": ("kgc.example.com", 19093)
    }


# -- server contexts


def _cfg(**values: str) -> SslConfig:
    return SslConfig.from_settings({"ssl." + k.replace("_", "."): v for k, v in values.items()})


def test_pem_keystore_file_and_truststore(pki: Pki) -> None:
    ctx = server_context(
        _cfg(
            keystore_type="PEM",
            keystore_location=str(pki.server),
            truststore_type="PEM",
            truststore_location=str(pki.ca),
            client_auth="required",
        )
    )
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert len(ctx.get_ca_certs()) == 1


def test_inline_pem_with_an_encrypted_key(pki: Pki) -> None:
    ctx = server_context(
        _cfg(
            keystore_type="PEM",
            keystore_certificate_chain=pki.server_cert.read_text(),
            keystore_key=pki.server_key_encrypted.read_text(),
            key_password=KEY_PASSWORD,
            truststore_type="PEM",
            truststore_certificates=pki.ca.read_text(),
            client_auth="requested",
            enabled_protocols="TLSv1.3",
        )
    )
    assert ctx.verify_mode == ssl.CERT_OPTIONAL
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3


def test_pkcs12_keystore(pki: Pki, tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import (
        BestAvailableEncryption,
        load_pem_private_key,
        pkcs12,
    )

    key = load_pem_private_key(pki.server_key.read_bytes(), None)
    cert = x509.load_pem_x509_certificates(pki.server_cert.read_bytes())[0]
    p12 = tmp_path / "server.p12"
    p12.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"server",
            key,  # type: ignore[arg-type]
            cert,
            None,
            BestAvailableEncryption(b"store-secret"),
        )
    )
    server_context(
        _cfg(keystore_type="PKCS12", keystore_location=str(p12), keystore_password="store-secret")
    )
    with pytest.raises(TlsConfigError) as err:
        server_context(
            _cfg(keystore_type="PKCS12", keystore_location=str(p12), keystore_password="wrong")
        )
    assert err.value.setting == "ssl.keystore.password"


@pytest.mark.parametrize(
    ("values", "setting"),
    [
        ({"keystore_type": "BKS", "keystore_location": "x.bks"}, "ssl.keystore.type"),
        (
            {"keystore_type": "JKS", "keystore_location": "/nonexistent.jks"},
            "ssl.keystore.location",
        ),
        (
            {"keystore_type": "PEM", "keystore_location": "/nonexistent.pem"},
            "ssl.keystore.location",
        ),
        ({"keystore_type": "PEM"}, "ssl.keystore.certificate.chain"),
        ({"keystore_type": "PEM", "keystore_location": "CA"}, "ssl.keystore.location"),
        ({"keystore_type": "PEM", "keystore_location": "ENC"}, "ssl.key.password"),
        (
            {"keystore_type": "PEM", "keystore_location": "ENC", "key_password": "wrong"},
            "ssl.key.password",
        ),
        ({"keystore_type": "PEM", "keystore_location": "MISMATCH"}, "ssl.keystore.location"),
        (
            {"keystore_type": "PEM", "keystore_location": "OK", "client_auth": "yes"},
            "ssl.client.auth",
        ),
        (
            {"keystore_type": "PEM", "keystore_location": "OK", "enabled_protocols": "TLSv1"},
            "ssl.enabled.protocols",
        ),
        (
            {"keystore_type": "PEM", "keystore_location": "OK", "cipher_suites": "TLS_NOPE"},
            "ssl.cipher.suites",
        ),
        (
            {
                "keystore_type": "PEM",
                "keystore_location": "OK",
                "truststore_type": "PEM",
                "truststore_location": "/nonexistent.pem",
            },
            "ssl.truststore.location",
        ),
        (
            {
                "keystore_type": "PEM",
                "keystore_location": "OK",
                "truststore_type": "PEM",
                "truststore_certificates": "not a certificate",
            },
            "ssl.truststore.certificates",
        ),
    ],
)
def test_material_that_does_not_load_names_the_setting(
    pki: Pki, tmp_path: Path, values: dict[str, str], setting: str
) -> None:
    files = {"OK": pki.server, "CA": pki.ca}
    enc = tmp_path / "enc.pem"
    enc.write_bytes(pki.server_key_encrypted.read_bytes() + pki.server_cert.read_bytes())
    mismatch = tmp_path / "mismatch.pem"
    mismatch.write_bytes(pki.client_key.read_bytes() + pki.server_cert.read_bytes())
    files |= {"ENC": enc, "MISMATCH": mismatch}
    values = {k: str(files.get(v, v)) for k, v in values.items()}
    with pytest.raises(TlsConfigError) as err:
        server_context(_cfg(**values))
    assert err.value.setting == setting, err.value
    assert str(err.value).startswith(setting)


def test_listener_prefix_is_named_in_errors() -> None:
    cfg = SslConfig.from_settings({"ssl.keystore.type": "PEM"}, prefix="listener.name.ssl.")
    with pytest.raises(TlsConfigError) as err:
        server_context(cfg)
    assert err.value.setting == "listener.name.ssl.ssl.keystore.certificate.chain"


def test_cipher_suites_by_java_name(pki: Pki) -> None:
    ctx = server_context(
        _cfg(
            keystore_type="PEM",
            keystore_location=str(pki.server),
            enabled_protocols="TLSv1.2",
            cipher_suites="TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_AES_128_GCM_SHA256",
        )
    )
    tls12 = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-ECDSA-AES256-GCM-SHA384"}


def test_tls13_suites_are_restricted_as_listed(pki: Pki) -> None:
    from support.certkit import handshake

    from coordinator.security.tls import set_tls13_suites

    ctx = server_context(
        _cfg(
            keystore_type="PEM",
            keystore_location=str(pki.server),
            cipher_suites="TLS_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        )
    )
    tls13 = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.3"}
    assert tls13 == {"TLS_AES_256_GCM_SHA384"}
    c = handshake(ctx, pki)
    assert (c.version(), c.cipher()[0]) == ("TLSv1.3", "TLS_AES_256_GCM_SHA384")  # type: ignore[index]
    # A TLS 1.3-only client offering another suite gets no handshake.
    client = ssl.create_default_context(cafile=str(pki.ca))
    client.minimum_version = ssl.TLSVersion.TLSv1_3
    assert set_tls13_suites(client, ["TLS_AES_128_GCM_SHA256"])
    with pytest.raises(ssl.SSLError):
        handshake(ctx, pki, client=client)


def test_a_list_without_tls13_suites_means_tls12_as_in_java(pki: Pki) -> None:
    from support.certkit import handshake

    ctx = server_context(
        _cfg(
            keystore_type="PEM",
            keystore_location=str(pki.server),
            cipher_suites="TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        )
    )
    c = handshake(ctx, pki)
    assert (c.version(), c.cipher()[0]) == ("TLSv1.2", "ECDHE-ECDSA-AES128-GCM-SHA256")  # type: ignore[index]


def test_a_list_of_tls13_suites_only_means_tls13(pki: Pki) -> None:
    from support.certkit import handshake

    ctx = server_context(
        _cfg(
            keystore_type="PEM",
            keystore_location=str(pki.server),
            cipher_suites="TLS_AES_128_GCM_SHA256",
        )
    )
    client = ssl.create_default_context(cafile=str(pki.ca))
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        handshake(ctx, pki, client=client)
    assert handshake(ctx, pki).version() == "TLSv1.3"
    with pytest.raises(TlsConfigError) as err:  # and TLS 1.3 not enabled: nothing left
        server_context(
            _cfg(
                keystore_type="PEM",
                keystore_location=str(pki.server),
                enabled_protocols="TLSv1.2",
                cipher_suites="TLS_AES_128_GCM_SHA256",
            )
        )
    assert err.value.setting == "ssl.cipher.suites"
