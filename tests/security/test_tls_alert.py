"""A TLS handshake the server refuses ends with the TLS alert saying why, as Kafka's does.

How this works: an in-process ``KafkaServer`` with an SSL listener requiring a client
certificate, run on asyncio's loop and on uvloop (what ``kgc serve`` runs on); a blocking
Python ``ssl`` client (in a thread) connects without a certificate, or with one from a CA
the server does not trust, over TLS 1.2 (the alert ends the client's handshake) and TLS 1.3
(the client's handshake is done first; the alert arrives on its first read). The client must
read the alert (an ``SSLError`` naming it), not a bare end of stream: Kafka's Java client
turns an alert into ``SslAuthenticationException`` and gives up, but takes a dropped
connection for a network problem and retries until its timeout.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop
from support.certkit import Pki, make_pki

from coordinator.apis import dispatcher
from coordinator.security.tls import SslConfig, server_context
from coordinator.server.listener import KafkaServer, listen

API_VERSIONS = struct.pack(">hhih", 18, 0, 1, 4) + b"test"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def attempt(
    port: int, pki: Pki, version: ssl.TLSVersion, cert: Path | None, key: Path | None
) -> str:
    """What a client that trusts the server learns: the error it got, or what it read."""
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    ctx.maximum_version = version
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(struct.pack(">i", len(API_VERSIONS)) + API_VERSIONS)
            return f"read {tls.recv(4)!r}"
    except ssl.SSLError as exc:
        return f"{type(exc).__name__}: {exc.reason}"


async def refusals(pki: Pki) -> dict[str, str]:
    cfg = SslConfig.from_settings(
        {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.server),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca),
            "ssl.client.auth": "required",
        }
    )
    tls = await listen(
        "127.0.0.1", 0, name="SSL", security_protocol="SSL", ssl_context=server_context(cfg)
    )
    server = KafkaServer([tls], dispatcher({}), max_request_size=1 << 20)
    server.start()
    seen: dict[str, str] = {}
    try:
        for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
            for who, cert, key in (
                ("none", None, None),
                ("untrusted", pki.rogue_cert, pki.rogue_key),
            ):
                seen[f"{version.name}/{who}"] = await asyncio.to_thread(
                    attempt, tls.port, pki, version, cert, key
                )
    finally:
        await server.stop(grace_s=0.5)
    return seen


Runner = Callable[[Coroutine[Any, Any, dict[str, str]]], dict[str, str]]


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_refused_handshake_sends_the_alert(pki: Pki, run: Runner) -> None:
    seen = run(refusals(pki))
    expected = {
        # TLS 1.2: the server's alert ends the client's handshake.
        "TLSv1_2/none": "SSLError: SSLV3_ALERT_HANDSHAKE_FAILURE",
        "TLSv1_2/untrusted": "SSLError: TLSV1_ALERT_UNKNOWN_CA",
        # TLS 1.3: the client finished first; the alert is what its first read gets.
        "TLSv1_3/none": "SSLError: TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "TLSv1_3/untrusted": "SSLError: TLSV1_ALERT_UNKNOWN_CA",
    }
    assert seen == expected
