"""``--command-config`` with SASL/OAUTHBEARER against a real ``kgc serve``, and KIP-368
re-authentication by kgc's own client.

How this works: one kgc has two SASL_PLAINTEXT listeners offering OAUTHBEARER. ``SIGNED``
validates signed JWTs against a JWKS file (the test's RSA key) and gives sessions a 3 s
lifetime (``connections.max.reauth.ms``); ``DEV`` has no validator configured, so it takes
Kafka's unsecured development tokens. A token endpoint runs in the test (a thread serving
the OAuth 2 client-credentials grant: HTTP Basic with the client's id and secret, a JWT
signed with the test's key for ``sub=<client id>``). The StandardAuthorizer lets only
``admin`` (super user) see the group ``g``, so the group list tells who the server took the
client for. Each client.properties is written the way Kafka's Java client or librdkafka
writes it.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from support.clikit import Run, run_cli
from support.kgc_process import KgcProcess, free_port

from coordinator.tools.client import AuthenticationFailed, ClientSecurity, Connection
from protocol.messages import list_groups

pytestmark = pytest.mark.integration
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
SECRETS = {"admin": "admin-secret", "alice": "alice-secret"}
REAUTH_MS = 3000
MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


class TokenEndpoint(BaseHTTPRequestHandler):
    grants: list[tuple[str, str]] = []  # (client id, scope) of every token handed out

    def do_POST(self) -> None:
        form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        auth = self.headers.get("Authorization", "")
        client_id, _, secret = base64.b64decode(auth.removeprefix("Basic ")).decode().partition(":")
        client_id, secret = urllib.parse.unquote(client_id), urllib.parse.unquote(secret)
        if form.get("grant_type") != ["client_credentials"] or SECRETS.get(client_id) != secret:
            self.send_response(401)
            self.end_headers()
            return
        now = int(time.time())
        claims = {"sub": client_id, "iat": now, "exp": now + 600}
        token = jwt.encode(claims, KEY, algorithm="RS256", headers={"kid": "k1"})
        TokenEndpoint.grants.append((client_id, form.get("scope", [""])[0]))
        body = json.dumps({"access_token": token, "token_type": "Bearer"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class OAuthKgc:
    proc: KgcProcess
    ports: dict[str, int]
    token_url: str
    dir: Path

    def properties(self, text: str) -> Path:
        path = self.dir / f"client-{uuid.uuid4().hex[:6]}.properties"
        path.write_text(text)
        return path

    def groups(self, listener: str, text: str) -> Run:
        config = self.properties(text)
        bootstrap = f"127.0.0.1:{self.ports[listener]}"
        return run_cli(
            "groups", "list", "--output", "json", "--bootstrap-server", bootstrap,
            "--command-config", str(config),
        )  # fmt: skip


@pytest.fixture(scope="module")
def kgc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthKgc]:
    base = tmp_path_factory.mktemp("oauth-cli")
    jwk = json.loads(RSAAlgorithm.to_jwk(KEY.public_key()))
    jwks = base / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}))
    http = ThreadingHTTPServer(("127.0.0.1", 0), TokenEndpoint)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    ports = {name: free_port() for name in ("PLAINTEXT", "SIGNED", "DEV")}
    server = base / "server.properties"
    server.write_text(
        "listeners=" + ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()) + "\n"
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SIGNED:SASL_PLAINTEXT,"
        "DEV:SASL_PLAINTEXT\n"
        "sasl.enabled.mechanisms=OAUTHBEARER\n"
        f"listener.name.signed.oauthbearer.sasl.oauthbearer.jwks.endpoint.url={jwks.as_uri()}\n"
        f"listener.name.signed.oauthbearer.connections.max.reauth.ms={REAUTH_MS}\n"
        f"listener.name.dev.oauthbearer.sasl.jaas.config={MODULE} required;\n"
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
        "allow.everyone.if.no.acl.found=false\n"
        "super.users=User:admin;User:ANONYMOUS\n"
    )
    proc = KgcProcess(base / "data", "--config", str(server), port=ports["PLAINTEXT"])
    proc.start()
    try:
        # A group with a committed offset, made over PLAINTEXT (ANONYMOUS is super here).
        plaintext = f"127.0.0.1:{ports['PLAINTEXT']}"
        for step in (
            ("topics", "create", "t", "--partitions", "1"),
            ("offsets", "reset", "g", "--topic", "t", "--to-earliest", "--execute"),
        ):
            run = run_cli(*step, "--bootstrap-server", plaintext)
            assert run.code == 0, (run, proc.log())
        url = f"http://127.0.0.1:{http.server_address[1]}/token"
        yield OAuthKgc(proc, ports, url, base)
    finally:
        proc.stop()
        http.shutdown()


def java_oidc(kgc: OAuthKgc, user: str, secret: str) -> str:
    return (
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=OAUTHBEARER\n"
        f"sasl.oauthbearer.token.endpoint.url={kgc.token_url}\n"
        "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer."
        "OAuthBearerLoginCallbackHandler\n"
        f'sasl.jaas.config={MODULE} required clientId="{user}" clientSecret="{secret}" '
        'scope="kafka";\n'
    )


def librdkafka_oidc(kgc: OAuthKgc, user: str, secret: str) -> str:
    return (
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanisms=OAUTHBEARER\n"
        "sasl.oauthbearer.method=oidc\n"
        f"sasl.oauthbearer.client.id={user}\n"
        f"sasl.oauthbearer.client.secret={secret}\n"
        f"sasl.oauthbearer.token.endpoint.url={kgc.token_url}\n"
    )


@pytest.mark.parametrize("style", [java_oidc, librdkafka_oidc])
def test_token_endpoint_client_is_the_user_it_names(kgc: OAuthKgc, style: object) -> None:
    make = style  # type: ignore[assignment]
    admin = kgc.groups("SIGNED", make(kgc, "admin", "admin-secret"))  # type: ignore[operator]
    assert admin.code == 0, (admin, kgc.proc.log())
    assert [g["group"] for g in admin.json()] == ["g"]
    alice = kgc.groups("SIGNED", make(kgc, "alice", "alice-secret"))  # type: ignore[operator]
    assert alice.code == 0, alice
    assert alice.json() == []  # authenticated as alice: she may not see g
    assert ("alice", "kafka" if make is java_oidc else "") in TokenEndpoint.grants


def test_wrong_client_secret_ends_in_one_line(kgc: OAuthKgc) -> None:
    run = kgc.groups("SIGNED", java_oidc(kgc, "admin", "wrong"))
    run.assert_clean_error(1)
    assert "401" in run.err


def test_unsecured_development_tokens_on_a_listener_without_validator(kgc: OAuthKgc) -> None:
    java = (
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
        f'sasl.jaas.config={MODULE} required unsecuredLoginStringClaim_sub="admin";\n'
    )
    run = kgc.groups("DEV", java)
    assert run.code == 0, (run, kgc.proc.log())
    assert [g["group"] for g in run.json()] == ["g"]
    librdkafka = (
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanisms=OAUTHBEARER\n"
        "sasl.oauthbearer.config=principal=alice\n"
    )
    run = kgc.groups("DEV", librdkafka)
    assert run.code == 0, run
    assert run.json() == []
    # The listener that validates signatures refuses the unsigned token.
    kgc.groups("SIGNED", java).assert_clean_error(1)


def test_the_client_reauthenticates_before_its_session_ends(kgc: OAuthKgc) -> None:
    security = ClientSecurity.load(kgc.properties(java_oidc(kgc, "admin", "admin-secret")))
    grants = len(TokenEndpoint.grants)
    with Connection("127.0.0.1", kgc.ports["SIGNED"], security=security) as conn:
        assert conn.reauth_at is not None  # the server gave the session a lifetime
        first_deadline = conn.reauth_at
        _, resp = conn.request(list_groups.API_KEY, list_groups.Request())
        assert [g.group_id for g in resp.groups] == ["g"]
        # Past the deadline the client re-authenticates on the same connection before its
        # next request; without it the server would close the connection (session expired).
        while time.monotonic() < first_deadline:
            time.sleep(0.05)
        for _ in range(3):
            _, resp = conn.request(list_groups.API_KEY, list_groups.Request())
            assert [g.group_id for g in resp.groups] == ["g"]
        assert conn.reauth_at is not None and conn.reauth_at > first_deadline
    # The token was still fresh: re-authentication reused it (one grant in all).
    assert len(TokenEndpoint.grants) == grants + 1


def test_a_session_past_its_lifetime_without_reauth_is_closed(kgc: OAuthKgc) -> None:
    # The control for the test above: the same connection, re-authentication held back.
    security = ClientSecurity.load(kgc.properties(java_oidc(kgc, "admin", "admin-secret")))
    with Connection("127.0.0.1", kgc.ports["SIGNED"], security=security) as conn:
        deadline = time.monotonic() + REAUTH_MS / 1000
        conn.reauth_at = None
        while time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises((ConnectionError, AuthenticationFailed, OSError)):
            conn.request(list_groups.API_KEY, list_groups.Request())
