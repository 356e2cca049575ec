"""TLS listeners against a real ``kgc serve``: confluent-kafka groups over SSL and mTLS,
and the connections TLS must refuse (each closed with one log line, the server unharmed).

How this works: certificates come from ``certkit`` (made in the test); kgc listens on
PLAINTEXT and SSL at once. The group tests produce, consume with a classic group and commit
over the SSL listener only (so Metadata and FindCoordinator must give the SSL endpoint, or
librdkafka would speak TLS to the plaintext port). The refusal tests use raw sockets so each
attempt is exactly one connection, then check the log line and that a PLAINTEXT client is
still served.
"""

from __future__ import annotations

import socket
import ssl
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from support.certkit import Pki, make_pki
from support.groupkit import create_topic, wait_until
from support.kgc_process import KgcProcess, free_port

pytestmark = pytest.mark.integration
PARTITIONS = 3
MESSAGES = 30


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


class TlsKgc:
    def __init__(self, proc: KgcProcess, ssl_port: int) -> None:
        self.proc = proc
        self.ssl_port = ssl_port

    @property
    def plaintext(self) -> str:
        return self.proc.bootstrap

    @property
    def ssl(self) -> str:
        return f"127.0.0.1:{self.ssl_port}"

    def log_lines(self, text: str) -> list[str]:
        return [
            ln for ln in self.proc.log_path.read_text(errors="replace").splitlines() if text in ln
        ]


def start(tmp_path: Path, pki: Pki, *extra: str) -> Iterator[TlsKgc]:
    port, ssl_port = free_port(), free_port()
    proc = KgcProcess(
        tmp_path / "data",
        "--listeners",
        f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}",
        "--ssl-keystore-type",
        "PEM",
        "--ssl-keystore-location",
        str(pki.server),
        *extra,
        port=port,
    )
    proc.start()
    try:
        yield TlsKgc(proc, ssl_port)
    finally:
        if proc.alive():
            proc.stop()


@pytest.fixture
def kgc_ssl(tmp_path: Path, pki: Pki) -> Iterator[TlsKgc]:
    yield from start(tmp_path, pki)


@pytest.fixture
def kgc_mtls(tmp_path: Path, pki: Pki) -> Iterator[TlsKgc]:
    yield from start(
        tmp_path,
        pki,
        "--ssl-client-auth",
        "required",
        "--ssl-truststore-type",
        "PEM",
        "--ssl-truststore-location",
        str(pki.ca),
        "--ssl-principal-mapping-rules",
        "RULE:^CN=([^,]+),OU=clients.*$/$1/,DEFAULT",
    )


def ssl_conf(pki: Pki, bootstrap: str, client_cert: bool) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
    }
    if client_cert:
        conf["ssl.certificate.location"] = str(pki.client_cert)
        conf["ssl.key.location"] = str(pki.client_key)
    return conf


def run_group_end_to_end(kgc: TlsKgc, conf: dict[str, Any]) -> None:
    """Produce, consume every record with a classic group, commit: all over ``conf``."""
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(conf)
    md = admin.list_topics(timeout=20)
    # The SSL listener's clients are given the SSL endpoint, not the PLAINTEXT one.
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", kgc.ssl_port)]
    create_topic(kgc.plaintext, topic, PARTITIONS)
    producer = Producer(conf)
    for i in range(MESSAGES):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            **conf,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    seen: set[bytes] = set()
    try:
        consumer.subscribe([topic])

        def consumed() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.add(msg.key() or b"")
            return len(seen) == MESSAGES

        wait_until(consumed, timeout=60, interval=0, what="every record consumed over TLS")
        consumer.commit(asynchronous=False)
        committed = consumer.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=20
        )
        assert sorted(tp.offset for tp in committed) == [MESSAGES // 3] * 3
    finally:
        consumer.close()
    assert seen == {str(i).encode() for i in range(MESSAGES)}


def plaintext_still_served(kgc: TlsKgc) -> None:
    md = AdminClient({"bootstrap.servers": kgc.plaintext}).list_topics(timeout=20)
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", kgc.proc.port)]


def test_classic_group_over_ssl_with_server_authentication(kgc_ssl: TlsKgc, pki: Pki) -> None:
    run_group_end_to_end(kgc_ssl, ssl_conf(pki, kgc_ssl.ssl, client_cert=False))
    plaintext_still_served(kgc_ssl)
    assert "listening on PLAINTEXT://127.0.0.1" in kgc_ssl.proc.log()
    assert f"SSL://127.0.0.1:{kgc_ssl.ssl_port}" in kgc_ssl.proc.log()


def test_classic_group_over_mutual_tls(kgc_mtls: TlsKgc, pki: Pki) -> None:
    run_group_end_to_end(kgc_mtls, ssl_conf(pki, kgc_mtls.ssl, client_cert=True))
    plaintext_still_served(kgc_mtls)
    assert not kgc_mtls.log_lines("TLS handshake failed")


# -- refusals: one connection each, one log line each, the server keeps serving


API_VERSIONS = struct.pack(">hhih", 18, 0, 1, 4) + b"test"  # ApiVersions v0, client id "test"


def tls_attempt(kgc: TlsKgc, pki: Pki, cert: Path | None, key: Path | None) -> None:
    """A TLS client that trusts kgc, with the given client certificate (or none)."""
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None and key is not None:
        ctx.load_cert_chain(str(cert), str(key))
    with socket.create_connection(("127.0.0.1", kgc.ssl_port), timeout=10) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                # With TLS 1.3 the server judges the client certificate after the client
                # thinks the handshake is done: the refusal shows on the first read.
                tls.sendall(struct.pack(">i", len(API_VERSIONS)) + API_VERSIONS)
                assert tls.recv(4) == b"", "the server answered a refused client"
        except (ssl.SSLError, ConnectionError):
            pass


def expect_one_refusal(kgc: TlsKgc, before: int, reason: str) -> None:
    wait_until(
        lambda: len(kgc.log_lines("TLS handshake failed")) == before + 1,
        timeout=15,
        what="the refusal's log line",
    )
    line = kgc.log_lines("TLS handshake failed")[-1]
    assert "on listener SSL" in line and reason in line.lower(), line
    plaintext_still_served(kgc)
    assert len(kgc.log_lines("TLS handshake failed")) == before + 1  # one line per refusal


def test_plaintext_client_on_the_tls_port_is_refused(kgc_ssl: TlsKgc) -> None:
    with socket.create_connection(("127.0.0.1", kgc_ssl.ssl_port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(API_VERSIONS)) + API_VERSIONS)
        assert s.recv(4096) == b"", "a plaintext request on the TLS port got an answer"
    expect_one_refusal(kgc_ssl, 0, "wrong version number")


def test_client_without_a_certificate_is_refused_when_required(kgc_mtls: TlsKgc, pki: Pki) -> None:
    tls_attempt(kgc_mtls, pki, None, None)
    expect_one_refusal(kgc_mtls, 0, "certificate")


def test_expired_client_certificate_is_refused(kgc_mtls: TlsKgc, pki: Pki) -> None:
    tls_attempt(kgc_mtls, pki, pki.expired_cert, pki.expired_key)
    expect_one_refusal(kgc_mtls, 0, "expired")


def test_untrusted_client_certificate_is_refused(kgc_mtls: TlsKgc, pki: Pki) -> None:
    tls_attempt(kgc_mtls, pki, pki.rogue_cert, pki.rogue_key)
    expect_one_refusal(kgc_mtls, 0, "certificate verify failed")
    # And a good client right after is served over TLS.
    run_group_end_to_end(kgc_mtls, ssl_conf(pki, kgc_mtls.ssl, client_cert=True))


def test_certificate_that_does_not_load_stops_start_up_with_one_line(
    tmp_path: Path, pki: Pki
) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "coordinator",
            "serve",
            "--data-dir",
            str(tmp_path / "data"),
            "--metrics-port",
            "0",
            "--listeners",
            f"PLAINTEXT://127.0.0.1:{free_port()},SSL://127.0.0.1:{free_port()}",
            "--ssl-keystore-type",
            "PEM",
            "--ssl-keystore-location",
            str(pki.ca),  # a certificate without its key
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    # One line, after the effective configuration kgc logs at start (kgc.config).
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and " kgc.config: " not in ln]
    assert len(lines) == 1, proc.stderr
    assert "ssl.keystore.location" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())
