"""SASL on a real listener and transport, driven by a raw socket client.

A ``KafkaServer`` runs in-process with one SASL_PLAINTEXT listener offering PLAIN (JAAS
users) and SCRAM-SHA-512 (an in-memory credential store) and a Heartbeat handler that
records the principal it is called with. The client speaks the protocol by hand, so every
step of Kafka's SASL state machine, every refusal and every malformed input is visible.
"""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import struct
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from coordinator.apis import dispatcher
from coordinator.security import KafkaPrincipal, ScramCredential
from coordinator.security.jaas import parse_single
from coordinator.security.sasl import SaslListener
from coordinator.security.sasl.plain import PlainMechanism
from coordinator.security.sasl.scram import ScramFormatter, ScramMechanism, credential
from coordinator.server import sasl as sasl_handlers
from coordinator.server.handler import ClientInfo
from coordinator.server.listener import KafkaServer, listen
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader, decode_response, encode_request
from protocol.messages import api_versions, heartbeat, sasl_authenticate, sasl_handshake

LISTENER = "SASL_PLAINTEXT"
DELAY_MS = 50  # connection.failed.authentication.delay.ms
IDLE_MS = 300  # connections.max.idle.ms
MAX_RECEIVE = 4096  # sasl.server.max.receive.size
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-secret" user_admin="admin-secret";'
)
FAILED = "Authentication failed during {} due to invalid credentials with SASL mechanism {}"


class Store:
    def __init__(self) -> None:
        self.creds: dict[tuple[str, str], ScramCredential] = {
            ("alice", "SCRAM-SHA-512"): credential("SCRAM-SHA-512", "alice-secret"),
            ("admin", "SCRAM-SHA-512"): credential("SCRAM-SHA-512", "admin-secret"),
        }

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.creds.get((user, mechanism))

    def users(self) -> dict[str, list[ScramCredential]]:
        return {}


@dataclass
class Served:
    server: KafkaServer
    principals: list[KafkaPrincipal] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.server.port

    def heartbeat(self, header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        self.principals.append(client.principal)
        return heartbeat.Response(error_code=0)


async def start(reauth_ms: int = 0) -> Served:
    listening = await listen(
        "127.0.0.1", 0, name=LISTENER, security_protocol=LISTENER, idle_ms=IDLE_MS
    )
    served = Served(None)  # type: ignore[arg-type]
    dispatch = dispatcher(
        {
            heartbeat.API_KEY: served.heartbeat,
            sasl_handshake.API_KEY: sasl_handlers.sasl_handshake_after_authentication,
            sasl_authenticate.API_KEY: sasl_handlers.sasl_authenticate_after_authentication,
        }
    )
    server = KafkaServer(listening, dispatch, max_request_size=1 << 20)
    mechanisms = {
        "PLAIN": PlainMechanism.from_jaas(parse_single(JAAS)),
        "SCRAM-SHA-512": ScramMechanism("SCRAM-SHA-512", Store()),
    }
    server.sasl[LISTENER] = SaslListener(
        LISTENER,
        mechanisms,  # type: ignore[arg-type]
        reauth_ms=dict.fromkeys(mechanisms, reauth_ms),
        failed_authentication_delay_ms=DELAY_MS,
        max_receive_size=MAX_RECEIVE,
    )
    served.server = server
    server.start()
    return served


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    s = await start()
    yield s
    await s.server.stop(grace_s=0.5)


@pytest.fixture
async def reauthing() -> AsyncIterator[Served]:
    s = await start(reauth_ms=1500)
    yield s
    await s.server.stop(grace_s=0.5)


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.cid = 0

    @classmethod
    async def to(cls, port: int) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def send(self, api_key: int, version: int, body: Any) -> None:
        self.cid += 1
        self.writer.write(encode_request(RequestHeader(api_key, version, self.cid, "t"), body))

    async def frame(self) -> bytes:
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), 5))[0]
        return await asyncio.wait_for(self.reader.readexactly(size), 5)

    async def call(self, api_key: int, version: int, body: Any) -> Any:
        self.send(api_key, version, body)
        cid, resp = decode_response(api_key, version, await self.frame())
        assert cid == self.cid
        return resp

    async def handshake(self, mechanism: str, version: int = 1) -> Any:
        return await self.call(
            sasl_handshake.API_KEY, version, sasl_handshake.Request(mechanism=mechanism)
        )

    async def authenticate(self, token: bytes, version: int = 2) -> Any:
        return await self.call(
            sasl_authenticate.API_KEY, version, sasl_authenticate.Request(auth_bytes=token)
        )

    async def heartbeat(self) -> Any:
        return await self.call(heartbeat.API_KEY, 4, heartbeat.Request(group_id="g"))

    async def closed(self) -> bool:
        """True once the server closed the connection without sending anything more."""
        try:
            return await asyncio.wait_for(self.reader.read(1), 5) == b""
        except ConnectionResetError:
            return True

    async def plain(self, user: str = "alice", password: str = "alice-secret") -> Any:
        assert (await self.handshake("PLAIN")).error_code == 0
        return await self.authenticate(f"\x00{user}\x00{password}".encode())

    async def scram(self, user: str, password: str) -> Any:
        """SCRAM-SHA-512 over SaslAuthenticate: the last response (server-final, or the
        failure)."""
        assert (await self.handshake("SCRAM-SHA-512")).error_code == 0
        f = ScramFormatter("SCRAM-SHA-512")
        nonce = secrets.token_hex(12)
        bare = f"n={user},r={nonce}"
        first = await self.authenticate(b"n,," + bare.encode())
        if first.error_code:
            return first
        server_first = first.auth_bytes.decode()
        fields = dict(item.split("=", 1) for item in server_first.split(","))
        salted = f.salted_password(password, base64.b64decode(fields["s"]), int(fields["i"]))
        without_proof = f"c=biws,r={fields['r']}"
        auth = f"{bare},{server_first},{without_proof}".encode()
        proof = base64.b64encode(f.client_proof(salted, auth)).decode()
        final = await self.authenticate(f"{without_proof},p={proof}".encode())
        if final.error_code == 0:
            expected = f.server_signature(f.server_key(salted), auth)
            assert final.auth_bytes == b"v=" + base64.b64encode(expected)
        return final


async def test_plain_after_api_versions_and_requests_carry_the_principal(
    served: Served,
) -> None:
    c = await Client.to(served.port)
    versions = await c.call(api_versions.API_KEY, 3, api_versions.Request("t", "1"))
    assert versions.error_code == 0
    hs = await c.handshake("PLAIN")
    assert (hs.error_code, hs.mechanisms) == (0, ["PLAIN", "SCRAM-SHA-512"])
    auth = await c.authenticate(b"\x00alice\x00alice-secret")
    assert (auth.error_code, auth.auth_bytes, auth.session_lifetime_ms) == (0, b"", 0)
    assert (await c.heartbeat()).error_code == 0
    assert served.principals == [KafkaPrincipal("User", "alice")]


async def test_scram_sha512_over_saslauthenticate(served: Served) -> None:
    c = await Client.to(served.port)
    assert (await c.scram("admin", "admin-secret")).error_code == 0
    assert (await c.heartbeat()).error_code == 0
    assert served.principals == [KafkaPrincipal("User", "admin")]


@pytest.mark.parametrize(
    "first",
    [
        "heartbeat",  # any request but ApiVersions/SaslHandshake
        "api versions twice",
        "http",  # not a Kafka client
        "tls client hello",  # a TLS client on a SASL_PLAINTEXT port
    ],
)
async def test_anything_else_before_authentication_closes_without_answer(
    served: Served, first: str
) -> None:
    c = await Client.to(served.port)
    if first == "heartbeat":
        c.send(heartbeat.API_KEY, 4, heartbeat.Request(group_id="g"))
    elif first == "api versions twice":
        assert (
            await c.call(api_versions.API_KEY, 3, api_versions.Request("t", "1"))
        ).error_code == 0
        c.send(api_versions.API_KEY, 3, api_versions.Request("t", "1"))
    elif first == "http":
        c.writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # "GET " is a 1.2 GB size: refused
    else:
        c.writer.write(bytes.fromhex("16030100c4010000c00303") + os.urandom(189))
    assert await c.closed()
    assert served.principals == []
    await assert_still_serving(served)


async def assert_still_serving(served: Served) -> None:
    c = await Client.to(served.port)
    assert (await c.plain()).error_code == 0
    assert (await c.heartbeat()).error_code == 0
    c.writer.close()


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [
        ("PLAIN", "alice", "wrong"),
        ("PLAIN", "mallory", "alice-secret"),
        ("SCRAM-SHA-512", "alice", "wrong"),
        ("SCRAM-SHA-512", "mallory", "alice-secret"),
    ],
)
async def test_wrong_password_and_unknown_user_refused_alike_after_the_delay(
    served: Served, mechanism: str, user: str, password: str
) -> None:
    c = await Client.to(served.port)
    started = time.monotonic()
    if mechanism == "PLAIN":
        resp = await c.plain(user, password)
    else:
        resp = await c.scram(user, password)
    elapsed_ms = (time.monotonic() - started) * 1000
    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    # The same words whatever was wrong: nothing says whether the user exists.
    assert resp.error_message == FAILED.format("authentication", mechanism)
    assert elapsed_ms >= DELAY_MS
    assert await c.closed()
    await assert_still_serving(served)


async def test_unsupported_mechanism_answered_with_the_enabled_ones(served: Served) -> None:
    c = await Client.to(served.port)
    hs = await c.handshake("GSSAPI")
    assert hs.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert hs.mechanisms == ["PLAIN", "SCRAM-SHA-512"]
    assert await c.closed()


async def test_other_request_during_the_exchange_fails_it(served: Served) -> None:
    c = await Client.to(served.port)
    assert (await c.handshake("SCRAM-SHA-512")).error_code == 0
    # Kafka answers it with its own error response, then closes.
    answer = await c.call(heartbeat.API_KEY, 4, heartbeat.Request(group_id="g"))
    assert answer.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert await c.closed()
    c = await Client.to(served.port)
    assert (await c.handshake("PLAIN")).error_code == 0
    again = await c.handshake("PLAIN")
    assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert await c.closed()


async def test_unframed_v0_flow(served: Served) -> None:
    c = await Client.to(served.port)
    hs = await c.handshake("PLAIN", version=0)
    assert hs.error_code == 0
    token = b"\x00alice\x00alice-secret"
    c.writer.write(struct.pack(">i", len(token)) + token)
    assert await c.frame() == b""  # PLAIN's empty answer, unframed
    assert (await c.heartbeat()).error_code == 0
    assert served.principals == [KafkaPrincipal("User", "alice")]


async def test_unframed_v0_failure_closes_without_answer(served: Served) -> None:
    c = await Client.to(served.port)
    assert (await c.handshake("PLAIN", version=0)).error_code == 0
    token = b"\x00alice\x00nope"
    c.writer.write(struct.pack(">i", len(token)) + token)
    assert await c.closed()


GARBAGE = [
    b"",
    b"\x00",
    b"\x00alice",
    b"\x00alice\x00",
    b"n,,n=alice",
    b"n,,n=alice,r=" + b"x" * 3000,
    b"\xff" * 100,
    bytes(range(256)),
]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
@pytest.mark.parametrize("token", GARBAGE, ids=range(len(GARBAGE)))
async def test_garbage_tokens_fail_the_exchange(
    served: Served, mechanism: str, token: bytes
) -> None:
    c = await Client.to(served.port)
    assert (await c.handshake(mechanism)).error_code == 0
    resp = await c.authenticate(token)
    if resp.error_code == 0:  # SCRAM's first message parsed: the made-up round goes on
        resp = await c.authenticate(token)
    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert await c.closed()


async def test_random_garbage_tokens_never_authenticate(served: Served) -> None:
    rng = secrets.SystemRandom()
    for _ in range(30):
        c = await Client.to(served.port)
        mechanism = rng.choice(["PLAIN", "SCRAM-SHA-512"])
        assert (await c.handshake(mechanism)).error_code == 0
        resp = await c.authenticate(os.urandom(rng.randrange(0, 600)))
        assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert await c.closed()
    assert served.principals == []
    await assert_still_serving(served)


@pytest.mark.parametrize("cut", [1, 4, 9, 12, 15])
async def test_truncated_saslauthenticate_frame_closes(served: Served, cut: int) -> None:
    c = await Client.to(served.port)
    assert (await c.handshake("PLAIN")).error_code == 0
    frame = encode_request(
        RequestHeader(sasl_authenticate.API_KEY, 2, 9, "t"),
        sasl_authenticate.Request(auth_bytes=b"\x00alice\x00alice-secret"),
    )
    body = frame[4:]
    body = body[: len(body) - cut]  # the size says what is there: the body is what is cut
    c.writer.write(struct.pack(">i", len(body)) + body)
    assert await c.closed()
    await assert_still_serving(served)


async def test_oversized_token_closes_without_reading_it(served: Served) -> None:
    c = await Client.to(served.port)
    assert (await c.handshake("PLAIN")).error_code == 0
    c.writer.write(struct.pack(">i", MAX_RECEIVE + 1) + b"x" * 1024)
    assert await c.closed()
    assert served.server.queue.small == served.server.queue.large == 0
    await assert_still_serving(served)


@pytest.mark.parametrize("where", ["before anything", "after the handshake", "mid-frame"])
async def test_client_that_stops_mid_handshake_is_dropped(served: Served, where: str) -> None:
    c = await Client.to(served.port)
    if where != "before anything":
        assert (await c.handshake("SCRAM-SHA-512")).error_code == 0
    if where == "mid-frame":
        c.writer.write(struct.pack(">i", 1000) + b"partial")
    started = time.monotonic()
    assert await c.closed()
    assert (time.monotonic() - started) * 1000 >= IDLE_MS * 0.9
    async with asyncio.timeout(5):  # the server forgets it and gives its bytes back
        while served.server.connections:
            await asyncio.sleep(0.01)
    assert served.server.queue.small == served.server.queue.large == 0


async def test_handshake_after_authentication_without_lifetime_is_illegal(
    served: Served,
) -> None:
    c = await Client.to(served.port)
    assert (await c.plain()).error_code == 0
    assert (await c.handshake("PLAIN")).error_code == ErrorCode.ILLEGAL_SASL_STATE
    auth = await c.authenticate(b"\x00alice\x00alice-secret")
    assert auth.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert (await c.heartbeat()).error_code == 0  # still open, still alice


async def test_reauthentication_keeps_the_connection(reauthing: Served) -> None:
    c = await Client.to(reauthing.port)
    auth = await c.plain()
    assert (auth.error_code, auth.session_lifetime_ms) == (0, 1500)
    assert (await c.heartbeat()).error_code == 0
    # Another mechanism: Kafka answers the handshake, then closes at the first token.
    assert (await c.handshake("SCRAM-SHA-512")).error_code == 0
    c.send(sasl_authenticate.API_KEY, 2, sasl_authenticate.Request(auth_bytes=b"n,,n=alice,r=x"))
    assert await c.closed()
    c = await Client.to(reauthing.port)
    assert (await c.plain()).error_code == 0
    again = await c.plain()  # the same one re-authenticates
    assert (again.error_code, again.session_lifetime_ms) == (0, 1500)
    assert (await c.heartbeat()).error_code == 0
    assert reauthing.principals == [KafkaPrincipal("User", "alice")] * 2


async def test_reauthentication_cannot_change_the_principal(reauthing: Served) -> None:
    c = await Client.to(reauthing.port)
    assert (await c.plain()).error_code == 0
    resp = await c.plain("admin", "admin-secret")
    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Cannot change principals" in (resp.error_message or "")
    assert await c.closed()


async def test_request_after_the_session_expired_closes(reauthing: Served) -> None:
    c = await Client.to(reauthing.port)
    authenticated = time.monotonic()
    assert (await c.plain()).error_code == 0
    assert (await c.heartbeat()).error_code == 0
    # Wait for the condition itself: the lifetime the server announced has passed.
    while time.monotonic() - authenticated < 1.6:
        await asyncio.sleep(0.05)
    c.send(heartbeat.API_KEY, 4, heartbeat.Request(group_id="g"))
    assert await c.closed()
    assert reauthing.principals == [KafkaPrincipal("User", "alice")]
