"""Kafka's Java client (kafka-clients 4.4.0) against kgc's secured listeners.

How this works: one ``kgc serve`` (module fixture) listens on five listeners at once, each
configured with Kafka's ``listener.name.<listener>.*`` settings: ``SCRAM`` (SASL_SSL,
SCRAM-SHA-512), ``MTLS`` (SSL with ``ssl.client.auth=required``, a principal mapping rule
taking the certificate's CN), ``OIDC`` (SASL_SSL, OAUTHBEARER validating signed JWTs against
a JWKS file, expected audience and issuer), ``DEV`` (SASL_SSL, OAUTHBEARER taking Kafka's
unsecured development tokens) and ``PLAINTEXT`` (only for the fixture's readiness check).
The StandardAuthorizer denies everything not allowed (``allow.everyone.if.no.acl.found=false``)
and the super users are exactly the principals the listeners should derive (``admin`` and
``carol`` by SCRAM, ``alice`` from the client certificate, ``svc-orders`` from the OIDC
token's ``sub``, ``dev-admin`` from the development token): a listener that took a client for
anyone else (the certificate's whole DN, ANONYMOUS) would see its CreateTopics refused.

The TLS material comes from ``certkit``; the Java side gets it in the formats a Java
deployment uses: a JKS truststore made with ``keytool``, a PKCS12 keystore holding the
client's key and certificate (made with ``cryptography``), and Kafka's PEM truststore type.
The OIDC token endpoint runs in the test (the OAuth 2 client-credentials grant: HTTP Basic
with client id and secret; a JWT signed by the test's key, or for ``mallory`` by a key kgc
does not know).

Every scenario runs in one JVM (``kgc.secure.SecureClients``), one JSON line per step, in
the order of ``STEPS``; the tests assert on their step's line. A ``roundtrip`` step creates
a topic with the AdminClient, produces with acks=all (idempotent), consumes everything in a
group, commits, reads its committed offsets back and lists them with the AdminClient; a
``refused`` step reports what an AdminClient, a producer and a consumer threw.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from jwt.algorithms import RSAAlgorithm
from support.certkit import Pki, make_pki
from support.kafkaserver import java_command
from support.kgc_process import KgcProcess, free_port

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

ISSUER = "https://idp.kgc.test"
AUDIENCE = "kgc"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
ROGUE_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
CLIENTS = {"svc-orders": "orders-secret", "mallory": "mallory-secret"}
STORE_PASSWORD = "store-secret"
COUNT = 30
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
SUPER_USERS = ("admin", "carol", "alice", "svc-orders", "dev-admin")
LISTENERS = {
    "PLAINTEXT": "PLAINTEXT",
    "SCRAM": "SASL_SSL",
    "MTLS": "SSL",
    "OIDC": "SASL_SSL",
    "DEV": "SASL_SSL",
}


class TokenEndpoint(BaseHTTPRequestHandler):
    """OAuth 2 client credentials: a signed JWT for a known client (mallory's is signed by a
    key kgc's JWKS does not hold)."""

    def do_POST(self) -> None:
        form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        auth = self.headers.get("Authorization", "")
        client_id, _, secret = base64.b64decode(auth.removeprefix("Basic ")).decode().partition(":")
        client_id, secret = urllib.parse.unquote(client_id), urllib.parse.unquote(secret)
        if form.get("grant_type") != ["client_credentials"] or CLIENTS.get(client_id) != secret:
            self.send_response(401)
            self.end_headers()
            return
        now = int(time.time())
        claims = {"sub": client_id, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600}
        key = ROGUE_KEY if client_id == "mallory" else KEY
        token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
        body = json.dumps({"access_token": token, "token_type": "Bearer"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Material:
    """The Java-side TLS files."""

    jks_truststore: Path  # the test CA, JKS (keytool)
    alice_keystore: Path  # alice's key and certificate, PKCS12
    rogue_keystore: Path  # mallory's key and certificate (a CA nobody trusts), PKCS12
    wrong_truststore: Path  # trusts only an unrelated certificate, not kgc's CA (PEM)


def java_material(pki: Pki) -> Material:
    keytool = shutil.which("keytool")
    assert keytool, "keytool (the JDK) is needed"
    jks = pki.dir / "truststore.jks"
    subprocess.run(
        [keytool, "-importcert", "-noprompt", "-alias", "kgc-ca", "-file", str(pki.ca),
         "-keystore", str(jks), "-storetype", "JKS", "-storepass", STORE_PASSWORD],
        check=True,
        capture_output=True,
    )  # fmt: skip

    def p12(name: str, cert: Path, key: Path) -> Path:
        path = pki.dir / f"{name}.p12"
        path.write_bytes(
            pkcs12.serialize_key_and_certificates(
                name.encode(),
                serialization.load_pem_private_key(key.read_bytes(), None),  # type: ignore[arg-type]
                x509.load_pem_x509_certificate(cert.read_bytes()),
                None,
                serialization.BestAvailableEncryption(STORE_PASSWORD.encode()),
            )
        )
        return path

    return Material(
        jks_truststore=jks,
        alice_keystore=p12("alice", pki.client_cert, pki.client_key),
        rogue_keystore=p12("mallory", pki.rogue_cert, pki.rogue_key),
        wrong_truststore=pki.rogue_cert,
    )


@dataclass
class SecureKgc:
    proc: KgcProcess
    ports: dict[str, int]
    pki: Pki
    material: Material
    token_url: str
    dir: Path

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def properties(self, name: str, text: str) -> str:
        path = self.dir / f"{name}.properties"
        path.write_text(text)
        return str(path)


@pytest.fixture(scope="module")
def secure_kgc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKgc]:
    base = tmp_path_factory.mktemp("java-secure")
    pki = make_pki(base / "pki")
    material = java_material(pki)
    jwk = json.loads(RSAAlgorithm.to_jwk(KEY.public_key()))
    jwks = base / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}))
    http = ThreadingHTTPServer(("127.0.0.1", 0), TokenEndpoint)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    ports = {name: free_port() for name in LISTENERS}
    oidc = "listener.name.oidc.oauthbearer."
    server = base / "server.properties"
    server.write_text(
        "listeners=" + ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()) + "\n"
        "listener.security.protocol.map="
        + ",".join(f"{n}:{proto}" for n, proto in LISTENERS.items())
        + "\n"
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.location={pki.server}\n"
        "listener.name.mtls.ssl.client.auth=required\n"
        "listener.name.mtls.ssl.truststore.type=PEM\n"
        f"listener.name.mtls.ssl.truststore.location={pki.ca}\n"
        "listener.name.mtls.ssl.principal.mapping.rules=RULE:^CN=([^,]+),OU=clients.*$/$1/,DEFAULT\n"
        "listener.name.scram.sasl.enabled.mechanisms=SCRAM-SHA-512\n"
        "listener.name.oidc.sasl.enabled.mechanisms=OAUTHBEARER\n"
        f"{oidc}sasl.oauthbearer.jwks.endpoint.url={jwks.as_uri()}\n"
        f"{oidc}sasl.oauthbearer.expected.audience={AUDIENCE}\n"
        f"{oidc}sasl.oauthbearer.expected.issuer={ISSUER}\n"
        "listener.name.dev.sasl.enabled.mechanisms=OAUTHBEARER\n"
        f"listener.name.dev.oauthbearer.sasl.jaas.config={OAUTH_MODULE} required;\n"
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
        "allow.everyone.if.no.acl.found=false\n"
        "super.users=" + ";".join(f"User:{u}" for u in SUPER_USERS) + "\n"
    )
    data = base / "data"
    # The first user, before start-up (as an operator adds it); carol is made online.
    subprocess.run(
        [sys.executable, "-m", "coordinator", "users", "add",
         "--data-dir", str(data), "--mechanism", "SCRAM-SHA-512", "--password",
         "admin-secret", "admin"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    proc = KgcProcess(data, "--config", str(server), port=ports["PLAINTEXT"])
    proc.start()
    try:
        url = f"http://127.0.0.1:{http.server_address[1]}/token"
        yield SecureKgc(proc, ports, pki, material, url, base)
    finally:
        proc.stop()
        http.shutdown()


# -- client.properties, as a Java deployment writes them


def scram_props(kgc: SecureKgc, user: str, password: str) -> str:
    return kgc.properties(
        f"scram-{user}-{uuid.uuid4().hex[:4]}",
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        f'sasl.jaas.config={SCRAM_MODULE} required username="{user}" password="{password}";\n'
        "ssl.truststore.type=JKS\n"
        f"ssl.truststore.location={kgc.material.jks_truststore}\n"
        f"ssl.truststore.password={STORE_PASSWORD}\n",
    )


def mtls_props(
    kgc: SecureKgc, name: str, keystore: Path | None, truststore: Path, extra: str = ""
) -> str:
    text = f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={truststore}\n"
    text += extra
    if keystore is not None:
        text += (
            "ssl.keystore.type=PKCS12\n"
            f"ssl.keystore.location={keystore}\n"
            f"ssl.keystore.password={STORE_PASSWORD}\n"
            f"ssl.key.password={STORE_PASSWORD}\n"
        )
    return kgc.properties(f"mtls-{name}", text)


def oidc_props(kgc: SecureKgc, client: str) -> str:
    return kgc.properties(
        f"oidc-{client}",
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=OAUTHBEARER\n"
        f"sasl.oauthbearer.token.endpoint.url={kgc.token_url}\n"
        "sasl.login.callback.handler.class="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
        f'sasl.jaas.config={OAUTH_MODULE} required clientId="{client}" '
        f'clientSecret="{CLIENTS[client]}" scope="kafka";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={kgc.pki.ca}\n",
    )


def dev_props(kgc: SecureKgc, sub: str) -> str:
    return kgc.properties(
        f"dev-{sub}",
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=OAUTHBEARER\n"
        f'sasl.jaas.config={OAUTH_MODULE} required unsecuredLoginStringClaim_sub="{sub}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={kgc.pki.ca}\n",
    )


def roundtrip(kgc: SecureKgc, listener: str, props: str, protocol: str) -> list[str]:
    tag = uuid.uuid4().hex[:6]
    return ["roundtrip", kgc.bootstrap(listener), props, f"t-{listener.lower()}-{tag}",
            f"g-{listener.lower()}-{tag}", str(COUNT), protocol]  # fmt: skip


def refused(kgc: SecureKgc, listener: str, props: str) -> list[str]:
    return ["refused", kgc.bootstrap(listener), props]


@pytest.fixture(scope="module")
def steps(secure_kgc: SecureKgc) -> dict[str, dict[str, Any]]:
    """Every scenario, run in one JVM; step name → its JSON line."""
    k = secure_kgc
    plan: dict[str, list[str]] = {
        "scram-user": ["scram-user", k.bootstrap("SCRAM"), scram_props(k, "admin", "admin-secret"),
                       "carol", "carol-secret"],
        "scram": roundtrip(k, "SCRAM", scram_props(k, "carol", "carol-secret"), "classic"),
        "scram-wrong-password": refused(k, "SCRAM", scram_props(k, "carol", "not-her-secret")),
        "scram-unknown-user": refused(k, "SCRAM", scram_props(k, "zed", "zed-secret")),
        "mtls": roundtrip(k, "MTLS", mtls_props(k, "alice", k.material.alice_keystore, k.pki.ca),
                          "classic"),
        "mtls-untrusted-client": refused(
            k, "MTLS", mtls_props(k, "mallory", k.material.rogue_keystore, k.pki.ca)),
        "mtls-no-client-cert": refused(k, "MTLS", mtls_props(k, "anonymous", None, k.pki.ca)),
        # TLS 1.2: the server's alert ends the client's handshake (1.3: its first read).
        "mtls-untrusted-client-tls12": refused(
            k, "MTLS", mtls_props(k, "mallory12", k.material.rogue_keystore, k.pki.ca,
                                  "ssl.protocol=TLSv1.2\nssl.enabled.protocols=TLSv1.2\n")),
        "mtls-untrusted-server": refused(
            k, "MTLS", mtls_props(k, "distrust", k.material.alice_keystore,
                                  k.material.wrong_truststore)),
        "oidc": roundtrip(k, "OIDC", oidc_props(k, "svc-orders"), "consumer"),
        "oidc-unknown-signer": refused(k, "OIDC", oidc_props(k, "mallory")),
        "dev": roundtrip(k, "DEV", dev_props(k, "dev-admin"), "classic"),
        "dev-not-authorized": roundtrip(k, "DEV", dev_props(k, "nobody"), "classic"),
    }  # fmt: skip
    # Kafka 4 refuses to call a token endpoint that this system property does not allow.
    cmd = java_command(
        "kgc.secure.SecureClients",
        *[a for s in plan.values() for a in s],
        jvm_args=[f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={k.token_url}"],
    )
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
    lines = [json.loads(ln) for ln in done.stdout.splitlines() if ln.startswith("{")]
    assert done.returncode == 0 and len(lines) == len(plan), (
        done.stdout + done.stderr[-5000:] + k.proc.log()
    )
    return dict(zip(plan, lines, strict=True))


def assert_roundtrip(kgc: SecureKgc, step: dict[str, Any], listener: str, group_type: str) -> None:
    assert "error" not in step, (step, kgc.proc.log())
    # The listener's clients are given its own endpoint, not another listener's.
    assert step["nodes"] == [kgc.bootstrap(listener)]
    assert step["acked"] == COUNT
    assert sorted(step["consumed"]) == sorted(f"k{i}" for i in range(COUNT))
    every = {str(p): COUNT // 3 for p in range(3)}
    assert step["committed"] == every  # KafkaConsumer.committed after commitSync
    assert step["admin_offsets"] == every  # Admin.listConsumerGroupOffsets
    assert step["group_type"] == group_type
    assert step["group_state"] == "Empty"  # the consumer has left


def assert_refused(step: dict[str, Any], exception: str, message: str | None = None) -> None:
    """Every client failed with ``exception`` (and ``message``: what Kafka's broker tells
    the client in that case, the same words from kgc)."""
    for client in ("admin", "producer", "consumer"):
        got = step.get(client)
        assert isinstance(got, dict), (client, step)
        assert got["class"] == f"org.apache.kafka.common.errors.{exception}", (client, step)
        assert message is None or got["message"] == message, (client, step)


def test_scram_user_made_online_by_the_admin_client(steps: dict[str, dict[str, Any]]) -> None:
    step = steps["scram-user"]
    assert step.get("user") == "carol" and "error" not in step, step


def test_sasl_ssl_scram_sha_512_group(
    secure_kgc: SecureKgc, steps: dict[str, dict[str, Any]]
) -> None:
    assert_roundtrip(secure_kgc, steps["scram"], "SCRAM", "Classic")


def test_scram_wrong_password_refused(steps: dict[str, dict[str, Any]]) -> None:
    message = (
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-512"
    )
    assert_refused(steps["scram-wrong-password"], "SaslAuthenticationException", message)
    assert_refused(steps["scram-unknown-user"], "SaslAuthenticationException", message)


def test_mutual_tls_group_with_the_principal_from_the_certificate(
    secure_kgc: SecureKgc, steps: dict[str, dict[str, Any]]
) -> None:
    assert_roundtrip(secure_kgc, steps["mtls"], "MTLS", "Classic")


def test_mutual_tls_refusals(steps: dict[str, dict[str, Any]]) -> None:
    assert_refused(steps["mtls-untrusted-client"], "SslAuthenticationException")
    assert_refused(steps["mtls-no-client-cert"], "SslAuthenticationException")
    assert_refused(steps["mtls-untrusted-client-tls12"], "SslAuthenticationException")
    assert_refused(steps["mtls-untrusted-server"], "SslAuthenticationException")


def test_oauthbearer_oidc_client_credentials_group(
    secure_kgc: SecureKgc, steps: dict[str, dict[str, Any]]
) -> None:
    # group.protocol=consumer (KIP-848) on this one.
    assert_roundtrip(secure_kgc, steps["oidc"], "OIDC", "Consumer")


def test_oauthbearer_token_from_an_unknown_signer_refused(
    steps: dict[str, dict[str, Any]],
) -> None:
    # Kafka's broker repeats the RFC 7628 error challenge as the failure's message.
    message = '{"status":"invalid_token"}'
    assert_refused(steps["oidc-unknown-signer"], "SaslAuthenticationException", message)


def test_oauthbearer_unsecured_development_token_group(
    secure_kgc: SecureKgc, steps: dict[str, dict[str, Any]]
) -> None:
    assert_roundtrip(secure_kgc, steps["dev"], "DEV", "Classic")


def test_the_principal_is_the_tokens_subject(
    secure_kgc: SecureKgc, steps: dict[str, dict[str, Any]]
) -> None:
    """``nobody`` authenticates (the cluster is described) but is no super user."""
    step = steps["dev-not-authorized"]
    assert step["nodes"] == [secure_kgc.bootstrap("DEV")]
    assert step["error"] == "org.apache.kafka.common.errors.TopicAuthorizationException", step
