"""``--command-config`` against a real secured ``kgc serve``: the CLI on SASL and TLS listeners.

How this works: one kgc (started from a ``server.properties``, as an operator starts it)
listens on SASL_PLAINTEXT (PLAIN users from a JAAS line; SCRAM-SHA-256/512 users added
offline with ``kgc users add``), SSL with client authentication required (the principal
mapped from the certificate), SASL_SSL, and ELSEWHERE, an SSL listener on 127.0.0.2 whose
certificate does not name that address. The StandardAuthorizer is on with ``admin`` as super
user; ``alice`` may only READ (and so DESCRIBE) the group ``alice-group``. Each test runs the
real ``kgc`` command with a client.properties written the way Kafka's clients write it, and
tells who the server took it for by what it may see: admin lists both groups, alice only
hers and is refused elsewhere with Kafka's authorization errors. Wrong passwords, missing
settings, an untrusted CA and a host name the certificate does not cover each end in one
line and the documented exit code, and the server keeps serving.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.certkit import Pki, make_pki
from support.clikit import Run, call_cli, run_cli
from support.kgc_process import KgcProcess, free_port

pytestmark = pytest.mark.integration

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret";'
)
TOPIC = "events"


@dataclass
class Secured:
    proc: KgcProcess
    pki: Pki
    dir: Path
    ports: dict[str, int]

    def bootstrap(self, listener: str) -> str:
        host = "127.0.0.2" if listener == "ELSEWHERE" else "127.0.0.1"
        return f"{host}:{self.ports[listener]}"

    def properties(self, name: str, text: str) -> Path:
        path = self.dir / f"{name}-{uuid.uuid4().hex[:6]}.properties"
        path.write_text(text)
        return path

    def kgc(self, listener: str, config: Path | None, *args: str) -> Run:
        """``kgc *args`` in process (support.clikit); one test keeps the subprocess."""
        extra = ["--command-config", str(config)] if config else []
        return call_cli(*args, "--bootstrap-server", self.bootstrap(listener), *extra)


def add_user(data: Path, mechanism: str, user: str, password: str) -> None:
    run = call_cli(
        "users", "add", "--data-dir", str(data), "--mechanism", mechanism,
        "--password", password, user,
    )  # fmt: skip
    assert run.code == 0, run


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("command-config")
    pki = make_pki(base / "pki")
    data = base / "data"
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        add_user(data, mechanism, "admin", "admin-secret")
        add_user(data, mechanism, "alice", "alice-secret")
    ports = {name: free_port() for name in ("SASL_PLAINTEXT", "SSL", "SASL_SSL", "ELSEWHERE")}
    server = base / "server.properties"
    server.write_text(
        "listeners="
        + ",".join(
            f"{name}://{'127.0.0.2' if name == 'ELSEWHERE' else '127.0.0.1'}:{port}"
            for name, port in ports.items()
        )
        + "\n"
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,"
        "SASL_SSL:SASL_SSL,ELSEWHERE:SSL\n"
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.location={pki.server}\n"
        "listener.name.ssl.ssl.client.auth=required\n"
        "listener.name.ssl.ssl.truststore.type=PEM\n"
        f"listener.name.ssl.ssl.truststore.location={pki.ca}\n"
        "ssl.principal.mapping.rules=RULE:^CN=([^,]+),OU=clients.*$/$1/,DEFAULT\n"
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512\n"
        f"sasl.jaas.config={PLAIN_JAAS}\n"
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
        "super.users=User:admin\n"
    )
    proc = KgcProcess(data, "--config", str(server), port=ports["SASL_PLAINTEXT"])
    proc.start()
    kgc = Secured(proc, pki, base, ports)
    try:
        admin = kgc.properties("admin", scram("SASL_PLAINTEXT", "SCRAM-SHA-512", "admin"))
        # Two groups with committed offsets; alice may see only hers.
        steps = [
            ("topics", "create", TOPIC, "--partitions", "2"),
            ("offsets", "reset", "alice-group", "--topic", TOPIC, "--to-earliest", "--execute"),
            ("offsets", "reset", "admin-group", "--topic", TOPIC, "--to-earliest", "--execute"),
            ("acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
             "--group", "alice-group"),
        ]  # fmt: skip
        for step in steps:
            run = kgc.kgc("SASL_PLAINTEXT", admin, *step)
            assert run.code == 0, (run, proc.log())
        yield kgc
    finally:
        proc.stop()


def scram(protocol: str, mechanism: str, user: str, extra: str = "") -> str:
    return (
        f"security.protocol={protocol}\n"
        f"sasl.mechanism={mechanism}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="{user}" password="{user}-secret";\n' + extra
    )


def java_truststore(pki: Pki) -> str:
    return f"ssl.truststore.type=PEM\nssl.truststore.location={pki.ca}\n"


def groups_seen(kgc: Secured, listener: str, config: Path) -> list[str]:
    run = kgc.kgc(listener, config, "groups", "list", "--output", "json")
    assert run.code == 0, run
    return sorted(g["group"] for g in run.json())


# Who the server takes each connection for: admin sees both groups, alice only hers.
CONNECTIONS = {
    "plain-jaas": (
        "SASL_PLAINTEXT",
        lambda pki, user: (
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user}" password="{user}-secret";\n'
        ),
    ),
    "plain-librdkafka": (
        "SASL_PLAINTEXT",
        lambda pki, user: (
            "security.protocol=sasl_plaintext\nsasl.mechanisms=PLAIN\n"
            f"sasl.username={user}\nsasl.password={user}-secret\n"
        ),
    ),
    "scram-sha-256": (
        "SASL_PLAINTEXT",
        lambda pki, user: scram("SASL_PLAINTEXT", "SCRAM-SHA-256", user),
    ),
    "scram-sha-512": (
        "SASL_PLAINTEXT",
        lambda pki, user: scram("SASL_PLAINTEXT", "SCRAM-SHA-512", user),
    ),
    "sasl-ssl-scram-java": (
        "SASL_SSL",
        lambda pki, user: scram("SASL_SSL", "SCRAM-SHA-512", user, java_truststore(pki)),
    ),
    "sasl-ssl-plain-librdkafka": (
        "SASL_SSL",
        lambda pki, user: (
            f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nssl.ca.location={pki.ca}\n"
            f"sasl.username={user}\nsasl.password={user}-secret\n"
        ),
    ),
}


@pytest.mark.parametrize("how", list(CONNECTIONS))
def test_each_way_of_authenticating_is_the_user_it_names(secured: Secured, how: str) -> None:
    listener, make = CONNECTIONS[how]
    admin = secured.properties("admin", make(secured.pki, "admin"))
    alice = secured.properties("alice", make(secured.pki, "alice"))
    assert groups_seen(secured, listener, admin) == ["admin-group", "alice-group"]
    assert groups_seen(secured, listener, alice) == ["alice-group"]


def test_mutual_tls_principal_comes_from_the_certificate(secured: Secured) -> None:
    """SSL listener, client auth required: CN=alice,OU=clients maps to User:alice."""
    pki = secured.pki
    java = secured.properties(
        "mtls-java",
        "security.protocol=SSL\n" + java_truststore(pki) + "ssl.keystore.type=PEM\n"
        # A PEM keystore is the key and the certificate chain in one file.
        f"ssl.keystore.location={_keystore(secured)}\n",
    )
    rdkafka = secured.properties(
        "mtls-rdkafka",
        f"security.protocol=SSL\nssl.ca.location={pki.ca}\n"
        f"ssl.certificate.location={pki.client_cert}\nssl.key.location={pki.client_key}\n",
    )
    for config in (java, rdkafka):
        assert groups_seen(secured, "SSL", config) == ["alice-group"]
    # Without a client certificate the listener refuses the handshake.
    bare = secured.properties("no-cert", f"security.protocol=SSL\nssl.ca.location={pki.ca}\n")
    run = secured.kgc("SSL", bare, "groups", "list")
    assert run.code in (1, 3), run
    assert (
        len([ln for ln in run.err.splitlines() if ln.strip()]) == 1 and "Traceback" not in run.err
    )


def _keystore(secured: Secured) -> Path:
    path = secured.dir / "alice-keystore.pem"
    if not path.exists():
        path.write_bytes(secured.pki.client_key.read_bytes() + secured.pki.client_cert.read_bytes())
    return path


def test_every_client_command_takes_command_config(secured: Secured) -> None:
    """groups, offsets, topics, health, acls and cluster, over SASL_SSL with SCRAM-SHA-512."""
    admin = secured.properties(
        "admin-ssl", scram("SASL_SSL", "SCRAM-SHA-512", "admin", java_truststore(secured.pki))
    )
    topic, group = f"t-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    commands = [
        ("health",),
        ("cluster", "describe"),
        ("topics", "create", topic, "--partitions", "1"),
        ("topics", "list"),
        ("topics", "describe", topic),
        ("offsets", "reset", group, "--topic", topic, "--to-latest", "--execute"),
        ("groups", "list"),
        ("groups", "describe", group),
        ("offsets", "delete", group, "--topic", topic),
        ("groups", "delete", group),
        ("acls", "add", "--allow-principal", "User:bob", "--operation", "Describe", "--topic", topic),
        ("acls", "list", "--topic", topic),
        ("acls", "remove", "--allow-principal", "User:bob", "--operation", "Describe",
         "--topic", topic, "--force"),
        ("topics", "delete", topic),
    ]  # fmt: skip
    for args in commands:
        run = secured.kgc("SASL_SSL", admin, *args)
        assert run.code == 0, run
        assert "Traceback" not in run.err and "warning" not in run.err, run
    # The same commands are refused for alice, with Kafka's errors, one line each.
    alice = secured.properties(
        "alice-ssl", scram("SASL_SSL", "SCRAM-SHA-512", "alice", java_truststore(secured.pki))
    )
    for args, error in [
        (("groups", "describe", "admin-group"), "GROUP_AUTHORIZATION_FAILED"),
        (("topics", "create", "not-hers"), "TOPIC_AUTHORIZATION_FAILED"),
        (("acls", "list"), "CLUSTER_AUTHORIZATION_FAILED"),
    ]:
        run = secured.kgc("SASL_SSL", alice, *args)
        run.assert_clean_error(1)
        assert error in run.err, run


@pytest.mark.parametrize(
    ("listener", "text"),
    [
        (
            "SASL_PLAINTEXT",
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            "sasl.username=alice\nsasl.password=wrong\n",
        ),
        ("SASL_PLAINTEXT", scram("SASL_PLAINTEXT", "SCRAM-SHA-512", "mallory")),
        (
            "SASL_PLAINTEXT",
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
            "sasl.username=admin\nsasl.password=admin-secret!\n",
        ),
    ],
    ids=["plain-wrong-password", "scram-unknown-user", "scram-wrong-password"],
)
def test_refused_credentials_end_in_one_line_and_exit_1(
    secured: Secured, listener: str, text: str
) -> None:
    run = secured.kgc(listener, secured.properties("bad", text), "groups", "list")
    run.assert_clean_error(1)
    assert "authentication failed" in run.err.lower(), run
    assert "secret" not in run.err and "wrong" not in run.err
    # The server keeps serving the others.
    good = secured.properties("good", scram("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice"))
    assert groups_seen(secured, "SASL_PLAINTEXT", good) == ["alice-group"]


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SSL", "SASL_SSL"])
def test_no_command_config_on_a_secured_listener_says_so(secured: Secured, listener: str) -> None:
    run = secured.kgc(listener, None, "groups", "list")
    assert run.code in (1, 3), run
    run.assert_clean_error(run.code)
    assert "--command-config" in run.err or "TLS" in run.err, run


def test_tls_server_identity_is_checked(secured: Secured) -> None:
    pki = secured.pki
    # A truststore holding another CA: the server's certificate cannot be verified.
    other = make_pki(secured.dir / "other-pki")
    untrusted = secured.properties(
        "untrusted",
        scram("SASL_SSL", "SCRAM-SHA-512", "admin", java_truststore(other)),
    )
    run = secured.kgc("SASL_SSL", untrusted, "groups", "list")
    run.assert_clean_error(1)
    assert "cannot verify 127.0.0.1" in run.err and "self-signed certificate" in run.err, run
    # ELSEWHERE (127.0.0.2) presents a certificate for localhost/127.0.0.1: refused while
    # the host name is checked (the default, https), accepted with the check turned off.
    mtls = (
        f"security.protocol=SSL\nssl.ca.location={pki.ca}\n"
        f"ssl.certificate.location={pki.client_cert}\nssl.key.location={pki.client_key}\n"
    )
    run = secured.kgc("ELSEWHERE", secured.properties("host-check", mtls), "topics", "list")
    run.assert_clean_error(1)
    assert "127.0.0.2" in run.err and "IP address mismatch" in run.err, run
    no_check = secured.properties(
        "no-host-check", mtls + "ssl.endpoint.identification.algorithm=\n"
    )
    run = secured.kgc("ELSEWHERE", no_check, "health")
    assert run.code == 0, run


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n", "sasl.mechanism"),
        (  # JKS is read (pyjks) since e7a3d3d: a store that is not there is named
            "security.protocol=SSL\nssl.truststore.location=/etc/kafka/truststore.jks\n",
            "ssl.truststore.location",
        ),
        ("security.protocol=TLS\n", "security.protocol"),
    ],
)
def test_unusable_command_config_is_bad_usage(secured: Secured, text: str, named: str) -> None:
    run = secured.kgc("SASL_SSL", secured.properties("unusable", text), "health")
    run.assert_clean_error(2)
    assert named in run.err, run


def test_missing_command_config_file(secured: Secured) -> None:
    # through the entry point itself, as an operator runs it
    missing = secured.dir / "nope.properties"
    run = run_cli(
        "topics", "list", "--bootstrap-server", secured.bootstrap("SASL_SSL"),
        "--command-config", str(missing),
    )  # fmt: skip
    run.assert_clean_error(2)
    assert "nope.properties" in run.err


def test_unknown_security_setting_is_warned_about(secured: Secured) -> None:
    config = secured.properties(
        "typo",
        scram("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", "ssl.trustore.location=/tmp/x\n"),
    )
    run = secured.kgc("SASL_PLAINTEXT", config, "groups", "list")
    assert run.code == 0, run
    assert "ssl.trustore.location" in run.err and "warning" in run.err
