"""A minimal asyncio Kafka connection on kgc's codec, for benchmarks that act as members.

How this works: one TCP connection, requests answered in order (as Kafka guarantees), so a
FIFO of futures matches responses to requests without parsing correlation ids.

Secured listeners (``Security``): ``open_stream`` wraps the socket in TLS when given an
``ssl.SSLContext`` (SSL, SASL_SSL) and, with a SASL mechanism, authenticates before handing
the stream back, as a Kafka client does: SaslHandshake v1, then SaslAuthenticate v2 with
PLAIN's one token or SCRAM's two rounds (RFC 5802; the server's final signature is checked).
The SCRAM client keeps its salted password per (salt, iterations) across connections, so a
benchmark of new connections measures the server's work, not the client's PBKDF2.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import ssl
import struct
from collections import deque
from dataclasses import dataclass
from typing import Any

from protocol.framing import RequestHeader, decode_response, encode_request
from protocol.messages import sasl_authenticate, sasl_handshake

_I = struct.Struct(">i")
_SCRAM_HASH = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class AuthenticationFailed(ConnectionError):
    pass


@dataclass(frozen=True)
class Security:
    """How to reach a listener: TLS with ``ssl`` (SSL, SASL_SSL), SASL with ``mechanism``
    (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) as ``username``/``password``."""

    ssl: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""


# (hash, password, salt, iterations) -> salted password (a client-side cache; see the doc).
_salted: dict[tuple[str, str, bytes, int], bytes] = {}


async def open_stream(
    host: str, port: int, security: Security | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to a listener, TLS-wrapped and SASL-authenticated as ``security`` says."""
    tls = security.ssl if security is not None else None
    reader, writer = await asyncio.open_connection(host, port, ssl=tls)
    if security is not None and security.mechanism:
        try:
            await authenticate(reader, writer, security)
        except BaseException:
            writer.close()
            raise
    return reader, writer


async def _exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    api_key: int,
    version: int,
    body: Any,
    cid: int,
) -> Any:
    writer.write(encode_request(RequestHeader(api_key, version, cid, "bench"), body))
    size = _I.unpack(await reader.readexactly(4))[0]
    return decode_response(api_key, version, await reader.readexactly(size))[1]


async def authenticate(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, security: Security
) -> None:
    """SaslHandshake v1 + SaslAuthenticate v2; raises ``AuthenticationFailed``."""
    mechanism = security.mechanism or ""
    hs = await _exchange(
        reader, writer, sasl_handshake.API_KEY, 1, sasl_handshake.Request(mechanism=mechanism), 1
    )
    if hs.error_code:
        raise AuthenticationFailed(f"SaslHandshake {mechanism}: error {hs.error_code}")

    async def token(data: bytes, cid: int) -> bytes:
        r = await _exchange(
            reader,
            writer,
            sasl_authenticate.API_KEY,
            2,
            sasl_authenticate.Request(auth_bytes=data),
            cid,
        )
        if r.error_code:
            raise AuthenticationFailed(f"{mechanism}: {r.error_message} ({r.error_code})")
        return bytes(r.auth_bytes)

    if mechanism == "PLAIN":
        await token(f"\0{security.username}\0{security.password}".encode(), 2)
        return
    algo = _SCRAM_HASH.get(mechanism)
    if algo is None:
        raise ValueError(f"no client for SASL mechanism {mechanism}")
    nonce = secrets.token_urlsafe(18)
    user = security.username.replace("=", "=3D").replace(",", "=2C")
    bare = f"n={user},r={nonce}"
    server_first = (await token(f"n,,{bare}".encode(), 2)).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    if not fields["r"].startswith(nonce):
        raise AuthenticationFailed("SCRAM: the server's nonce does not extend ours")
    salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
    key = (algo, security.password, salt, iterations)
    salted = _salted.get(key)
    if salted is None:
        salted = _salted[key] = hashlib.pbkdf2_hmac(
            algo, security.password.encode(), salt, iterations
        )
    without_proof = f"c=biws,r={fields['r']}"  # biws: base64("n,,")
    auth_message = f"{bare},{server_first},{without_proof}".encode()
    client_key = hmac.digest(salted, b"Client Key", algo)
    signature = hmac.digest(hashlib.new(algo, client_key).digest(), auth_message, algo)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = await token(f"{without_proof},p={base64.b64encode(proof).decode()}".encode(), 3)
    server_key = hmac.digest(salted, b"Server Key", algo)
    expected = b"v=" + base64.b64encode(hmac.digest(server_key, auth_message, algo))
    if final != expected:
        raise AuthenticationFailed("SCRAM: the server's signature does not verify")


class AsyncConn:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str
    ) -> None:
        self.reader, self.writer = reader, writer
        self.client_id = client_id
        self.cid = 0
        self.pending: deque[tuple[int, int, asyncio.Future[Any]]] = deque()
        self.task = asyncio.ensure_future(self._read_loop())

    @classmethod
    async def open(
        cls, host: str, port: int, client_id: str = "bench", security: Security | None = None
    ) -> AsyncConn:
        reader, writer = await open_stream(host, port, security)
        conn = cls(reader, writer, client_id)
        conn.cid = 3  # the SASL exchange used correlation ids 1-3
        return conn

    async def _read_loop(self) -> None:
        try:
            while True:
                size = _I.unpack(await self.reader.readexactly(4))[0]
                frame = await self.reader.readexactly(size)
                api_key, version, fut = self.pending.popleft()
                if not fut.done():
                    fut.set_result(decode_response(api_key, version, frame)[1])
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            while self.pending:
                _, _, fut = self.pending.popleft()
                if not fut.done():
                    fut.set_exception(ConnectionError(str(exc)))

    def send(self, api_key: int, version: int, body: Any) -> asyncio.Future[Any]:
        self.cid += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append((api_key, version, fut))
        self.writer.write(
            encode_request(RequestHeader(api_key, version, self.cid, self.client_id), body)
        )
        return fut

    async def call(self, api_key: int, version: int, body: Any) -> Any:
        return await self.send(api_key, version, body)

    async def close(self) -> None:
        self.task.cancel()
        self.writer.close()
