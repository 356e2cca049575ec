"""JKS keystores and truststores (Kafka's default ``ssl.keystore.type``), made by Java's own
keytool, load into a listener's TLS context and complete a real handshake.

keytool comes with the JDK (CI machines have Java 17). The stores are converted from the
test PKI's PKCS12 export, as an operator would with ``keytool -importkeystore``.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    load_pem_private_key,
    pkcs12,
)
from support.certkit import Pki, handshake, make_pki, server_cn

from coordinator.security.tls import SslConfig, TlsConfigError, server_context

KEYTOOL = shutil.which("keytool")  # in every Java runtime package (CI installs Java 17)
STORE_PASSWORD = "store-secret"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def keytool(*args: str) -> None:
    assert KEYTOOL is not None, "keytool (Java) is needed to make JKS stores"
    subprocess.run([KEYTOOL, *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def stores(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("jks")
    key = load_pem_private_key(pki.server_key.read_bytes(), None)
    chain = x509.load_pem_x509_certificates(pki.server_cert.read_bytes())
    p12 = d / "server.p12"
    p12.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"server",
            key,  # type: ignore[arg-type]
            chain[0],
            chain[1:],
            BestAvailableEncryption(STORE_PASSWORD.encode()),
        )
    )
    keystore, key_protected, truststore = d / "server.jks", d / "keypass.jks", d / "trust.jks"
    common = ["-noprompt", "-srcstoretype", "PKCS12", "-srckeystore", str(p12)]
    common += ["-srcstorepass", STORE_PASSWORD, "-deststoretype", "JKS"]
    keytool(
        "-importkeystore", *common, "-destkeystore", str(keystore), "-deststorepass", STORE_PASSWORD
    )
    # The key entry under its own password (ssl.key.password), unlike the store's.
    keytool(
        "-importkeystore",
        *common,
        "-destkeystore",
        str(key_protected),
        "-deststorepass",
        STORE_PASSWORD,
        "-srcalias",
        "server",
        "-destkeypass",
        "key-secret",
    )
    keytool(
        "-importcert",
        "-noprompt",
        "-alias",
        "ca",
        "-file",
        str(pki.ca),
        "-keystore",
        str(truststore),
        "-storetype",
        "JKS",
        "-storepass",
        STORE_PASSWORD,
    )
    return {"keystore": keystore, "keypass": key_protected, "trust": truststore, "p12": p12}


def cfg(**values: str) -> SslConfig:
    return SslConfig.from_settings({"ssl." + k.replace("_", "."): v for k, v in values.items()})


def test_jks_keystore_serves_the_certificate(stores: dict[str, Path], pki: Pki) -> None:
    ctx = server_context(
        cfg(
            keystore_type="JKS",
            keystore_location=str(stores["keystore"]),
            keystore_password=STORE_PASSWORD,
        )
    )
    assert server_cn(handshake(ctx, pki)) == "localhost"


def test_jks_truststore_verifies_client_certificates(stores: dict[str, Path], pki: Pki) -> None:
    ctx = server_context(
        cfg(
            keystore_type="JKS",
            keystore_location=str(stores["keystore"]),
            keystore_password=STORE_PASSWORD,
            truststore_type="JKS",
            truststore_location=str(stores["trust"]),
            truststore_password=STORE_PASSWORD,
            client_auth="required",
        )
    )
    assert server_cn(handshake(ctx, pki, client_cert=True)) == "localhost"
    with pytest.raises(ssl.SSLError):
        handshake(ctx, pki, client_cert=False)


def test_jks_key_with_its_own_password(stores: dict[str, Path], pki: Pki) -> None:
    values = {"keystore_type": "JKS", "keystore_location": str(stores["keypass"])}
    values["keystore_password"] = STORE_PASSWORD
    ctx = server_context(cfg(**values, key_password="key-secret"))
    assert server_cn(handshake(ctx, pki)) == "localhost"
    with pytest.raises(TlsConfigError) as err:
        server_context(cfg(**values))
    assert err.value.setting == "ssl.key.password"


def test_wrong_jks_password_names_the_setting(stores: dict[str, Path]) -> None:
    with pytest.raises(TlsConfigError) as err:
        server_context(
            cfg(
                keystore_type="JKS",
                keystore_location=str(stores["keystore"]),
                keystore_password="wrong",
            )
        )
    assert err.value.setting == "ssl.keystore.password"


def test_jks_type_reads_a_pkcs12_file_as_java_does(stores: dict[str, Path], pki: Pki) -> None:
    ctx = server_context(
        cfg(
            keystore_type="JKS",
            keystore_location=str(stores["p12"]),
            keystore_password=STORE_PASSWORD,
        )
    )
    assert server_cn(handshake(ctx, pki)) == "localhost"
