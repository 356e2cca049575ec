"""A TLS listener in process: what handlers see of a TLS connection (ClientInfo).

How this works: a ``KafkaServer`` with a PLAINTEXT and an SSL listener and one handler
(Heartbeat) that records the ``ClientInfo`` it is given; clients connect with Python's
``ssl`` using certificates from ``certkit``. Checks the listener name and security protocol
reach the connection, and the principal is the certificate's subject mapped by the rules
(ANONYMOUS without a certificate, the connection closed when no rule maps it).
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.certkit import Pki, make_pki

from coordinator.apis import dispatcher
from coordinator.security import ANONYMOUS, KafkaPrincipal
from coordinator.security.principal_mapping import SslPrincipalMapper
from coordinator.security.tls import SslConfig, server_context
from coordinator.server.handler import ClientInfo, HandlerResult
from coordinator.server.listener import KafkaServer, listen
from protocol.framing import RequestHeader, encode_request
from protocol.messages import heartbeat


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


class Seen:
    def __init__(self) -> None:
        self.clients: list[ClientInfo] = []
        self.arrived = asyncio.Event()

    def heartbeat(self, header: RequestHeader, req: Any, client: ClientInfo) -> HandlerResult:
        self.clients.append(client)
        self.arrived.set()
        return heartbeat.Response(error_code=0)


async def serve(pki: Pki, rules: str, client_auth: str) -> tuple[KafkaServer, Seen, int, int]:
    cfg = SslConfig.from_settings(
        {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.server),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca),
            "ssl.client.auth": client_auth,
        }
    )
    seen = Seen()
    plain = await listen("127.0.0.1", 0)
    tls = await listen(
        "127.0.0.1",
        0,
        name="SSL",
        security_protocol="SSL",
        ssl_context=server_context(cfg),
        principal_mapper=SslPrincipalMapper(rules),
    )
    server = KafkaServer(
        [plain, tls], dispatcher({heartbeat.API_KEY: seen.heartbeat}), max_request_size=1 << 20
    )
    server.start()
    return server, seen, plain.port, tls.port


@pytest.fixture
async def requested(pki: Pki) -> AsyncIterator[tuple[KafkaServer, Seen, int, int]]:
    served = await serve(pki, "RULE:^CN=([^,]+),OU=clients.*$/$1/U,DEFAULT", "requested")
    yield served
    await served[0].stop(grace_s=0.5)


def heartbeat_frame() -> bytes:
    header = RequestHeader(heartbeat.API_KEY, 0, 7, "tls-test")
    return encode_request(header, heartbeat.Request(group_id="g", generation_id=1, member_id="m"))


async def beat(port: int, ctx: ssl.SSLContext | None) -> bytes:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1" if ctx else None
    )
    try:
        writer.write(heartbeat_frame())
        await writer.drain()
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        return await reader.readexactly(size)
    finally:
        writer.close()


def client_ctx(pki: Pki, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


async def test_client_certificate_names_the_principal(
    requested: tuple[KafkaServer, Seen, int, int], pki: Pki
) -> None:
    _, seen, _, tls_port = requested
    await beat(tls_port, client_ctx(pki, pki.client_cert, pki.client_key))
    client = seen.clients[-1]
    assert client.listener == "SSL"
    assert client.principal == KafkaPrincipal("User", "ALICE")  # the rule, upper-cased


async def test_no_certificate_is_anonymous_and_plaintext_is_its_own_listener(
    requested: tuple[KafkaServer, Seen, int, int], pki: Pki
) -> None:
    server, seen, plain_port, tls_port = requested
    await beat(tls_port, client_ctx(pki))
    assert (seen.clients[-1].listener, seen.clients[-1].principal) == ("SSL", ANONYMOUS)
    await beat(plain_port, None)
    assert (seen.clients[-1].listener, seen.clients[-1].principal) == ("PLAINTEXT", ANONYMOUS)
    assert {c.security_protocol for c in server.connections} <= {"PLAINTEXT", "SSL"}


async def test_subject_no_rule_maps_closes_the_connection(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    server, seen, plain_port, tls_port = await serve(
        pki, "RULE:^CN=([^,]+),OU=admins.*$/$1/", "required"
    )
    try:
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await beat(tls_port, client_ctx(pki, pki.client_cert, pki.client_key))
        assert not seen.clients
        assert any("no principal from the client certificate" in r.message for r in caplog.records)
        await beat(plain_port, None)  # others are served
        assert seen.clients[-1].listener == "PLAINTEXT"
    finally:
        await server.stop(grace_s=0.5)
