"""The inter-broker channel: Kafka-protocol requests from this node to another node.

How this works: ``PeerClient.send(node_id, api_key, api_version, request)`` encodes the
request with the generated codecs (``protocol.messages``), sends it on this node's one
connection to that node and returns the decoded response body, as Kafka's
``NodeToNodeChannel``/``NetworkClient`` does for the transaction marker channel and the
AddPartitionsToTxn verification. Where a node is reached comes from the placement (the
live nodes of the cluster registry and their advertised listeners): the endpoint of the
inter-broker listener (``inter.broker.listener.name``, else this node's first listener).

* One connection per peer, opened on first use and kept; requests are pipelined on it and
  matched to responses by correlation id. A connection that fails (reset, closed, a frame
  that does not decode) fails every request waiting on it and is dropped; the next
  ``send`` connects again (Kafka's reconnect, with ``reconnect.backoff.ms`` between
  attempts: a peer refused recently is refused at once until the backoff passed).
* ``request.timeout.ms`` (integer ms) bounds each request, and ``socket.connection.setup.
  timeout.ms`` the connect plus handshakes; a request that times out closes its connection,
  as Kafka's NetworkClient disconnects a node whose request expired (the responses of the
  others on it can no longer be trusted to come).
* Every failure is a ``PeerError``: ``PeerUnavailable`` (the node is not live or does not
  advertise the listener), ``PeerConnectionError`` (connect, TLS, the connection lost),
  ``PeerTimeout``, ``PeerAuthenticationError``. Callers map them to the retriable error
  their API answers with (Kafka's marker channel retries; verification answers
  NOT_ENOUGH_REPLICAS / the coordinator error the client retries).

Security, as Kafka's inter-broker client: the listener's ``security.protocol`` from
``listener.security.protocol.map``; SSL and SASL_SSL verify the peer's certificate with the
listener's truststore (``ssl.truststore.*``, per-listener overrides included) and present the
listener's keystore (mutual TLS), checking the host name unless
``ssl.endpoint.identification.algorithm`` is empty. SASL_PLAINTEXT and SASL_SSL authenticate
with ``sasl.mechanism.inter.broker.protocol`` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) as the
``username``/``password`` of that mechanism's JAAS line on the listener
(``listener.name.<l>.<mechanism>.sasl.jaas.config``, else ``sasl.jaas.config``), as Kafka's
brokers log in to each other. A combination kgc cannot serve (GSSAPI, OAUTHBEARER, no
credentials) refuses start-up with one line naming the setting (``PeerConfigError``).

The principal this node authenticates as (the JAAS user, or the certificate's principal on
SSL) sends WriteTxnMarkers and the verifying AddPartitionsToTxn, which Kafka authorizes as
CLUSTER_ACTION on the cluster: with an authorizer, that principal must be in
``super.users`` (or hold CLUSTER_ACTION), as for Kafka's brokers.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import logging
import secrets
import ssl
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from coordinator.config import Settings
from coordinator.placement import BrokerNode, endpoint
from protocol.framing import RequestHeader, decode_response, encode_request
from protocol.messages import sasl_authenticate, sasl_handshake
from protocol.primitives import DecodeError

__all__ = [
    "PeerAuthenticationError",
    "PeerClient",
    "PeerConfigError",
    "PeerConnectionError",
    "PeerError",
    "PeerSecurity",
    "PeerTimeout",
    "PeerUnavailable",
    "peer_client_id",
]

log = logging.getLogger("kgc.cluster.peers")

_I = struct.Struct(">i")
_SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
_TLS_PROTOCOLS = ("SSL", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_SCRAM_MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations


def peer_client_id(node_id: int) -> str:
    """The client id node ``node_id``'s requests to the others carry."""
    return f"kgc-broker-{node_id}"


class PeerError(Exception):
    """A request to a peer that got no answer; the caller retries (a retriable error)."""


class PeerUnavailable(PeerError):
    """The node is not a live node of the cluster or has no endpoint on the listener."""


class PeerConnectionError(PeerError):
    """Connecting failed (refused, TLS) or the connection was lost before the answer."""


class PeerTimeout(PeerError):
    """No answer within ``request.timeout.ms`` (or no connection within the setup timeout)."""


class PeerAuthenticationError(PeerError):
    """The peer refused this node's SASL credentials."""


class PeerConfigError(ValueError):
    """A setting the inter-broker client cannot use; one line naming it."""


@dataclass(frozen=True, slots=True)
class PeerSecurity:
    """How this node reaches the others: the listener, its protocol, TLS and SASL."""

    listener: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"
    ssl: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""

    @classmethod
    def from_settings(cls, s: Settings) -> PeerSecurity:
        """From Kafka's settings (module docstring); ``PeerConfigError`` when unusable."""
        specs = s.listener_specs
        names = [spec.name for spec in specs]
        if s.inter_broker_listener_name:
            listener = s.inter_broker_listener_name.strip().upper()
            if listener not in names:
                raise PeerConfigError(
                    f"inter.broker.listener.name {listener}: not one of the listeners "
                    f"({', '.join(names)})"
                )
        else:
            listener = names[0]
        protocol = next(spec.security_protocol for spec in specs if spec.name == listener)
        context = _client_context(s, listener) if protocol in _TLS_PROTOCOLS else None
        if protocol not in _SASL_PROTOCOLS:
            return cls(listener, protocol, context)
        mechanism = (s.sasl_mechanism_inter_broker_protocol or "").strip().upper()
        if mechanism not in _MECHANISMS:
            raise PeerConfigError(
                f"sasl.mechanism.inter.broker.protocol {mechanism or '(empty)'}: kgc's "
                f"inter-broker client supports {', '.join(_MECHANISMS)} (listener {listener} "
                f"is {protocol})"
            )
        username, password = _jaas_login(s, listener, mechanism)
        return cls(listener, protocol, context, mechanism, username, password)


def _jaas_login(s: Settings, listener: str, mechanism: str) -> tuple[str, str]:
    """The ``username``/``password`` of the mechanism's JAAS line on the listener."""
    from coordinator.security.sasl import MechanismContext

    ctx = MechanismContext(listener, mechanism, s, s.listener_name_configs, None)
    setting = ctx.setting_name("sasl.jaas.config")
    try:
        entry = ctx.jaas()
    except ValueError as exc:
        raise PeerConfigError(str(exc)) from None
    options = entry.options if entry is not None else {}
    username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise PeerConfigError(
            f"{setting} (or sasl.jaas.config): the inter-broker client of listener "
            f"{listener} logs in with {mechanism} as its username=... password=..., "
            "which are not set"
        )
    return username, password


def _client_context(s: Settings, listener: str) -> ssl.SSLContext:
    """A client-side TLS context from the listener's ``ssl.*`` settings (its truststore
    checks the peer, its keystore is this node's certificate)."""
    # The listener's own readers: the same files load on both sides, with the same errors.
    from coordinator.security.tls import (
        SslConfig,
        TlsConfigError,
        _ciphers,
        _load_keystore,
        _load_truststore,
        _protocols,
    )

    prefix = s.listener_setting_name(listener, "")
    scoped = any(k.startswith(prefix + "ssl.") for k in s.listener_name_configs)
    cfg = SslConfig.from_settings(s.ssl_configs(listener), prefix if scoped else "")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        _protocols(ctx, cfg)
        if cfg.truststore_location or cfg.truststore_certificates:
            _load_truststore(ctx, cfg)
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        if cfg.keystore_location or cfg.keystore_certificate_chain or cfg.keystore_key:
            _load_keystore(ctx, cfg)
        if cfg.cipher_suites:
            _ciphers(ctx, cfg)
    except TlsConfigError as exc:
        raise PeerConfigError(f"{exc} (inter-broker client, listener {listener})") from None
    algorithm = str(s.listener_config(listener, "ssl.endpoint.identification.algorithm") or "")
    ctx.check_hostname = algorithm.strip().lower() == "https"
    return ctx


class _Connection:
    """One connection to a peer: pipelined requests, answers matched by correlation id."""

    def __init__(
        self, node_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.node_id = node_id
        self.reader, self.writer = reader, writer
        self.correlation_id = 0
        self.pending: dict[int, tuple[int, int, asyncio.Future[Any]]] = {}
        self.closed = False
        self.reading: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.reading = asyncio.get_running_loop().create_task(self._read_loop())

    def next_id(self) -> int:
        self.correlation_id = (self.correlation_id + 1) & 0x7FFFFFFF
        return self.correlation_id

    async def _read_loop(self) -> None:
        why = "closed by the peer"
        try:
            while True:
                size = _I.unpack(await self.reader.readexactly(4))[0]
                frame = await self.reader.readexactly(size)
                cid = _I.unpack_from(frame, 0)[0]
                waiting = self.pending.pop(cid, None)
                if waiting is None:
                    continue  # the answer to a request that timed out
                api_key, version, future = waiting
                if not future.done():
                    future.set_result(decode_response(api_key, version, frame)[1])
        except (asyncio.IncompleteReadError, OSError) as exc:
            why = f"connection lost: {exc}"
        except (DecodeError, struct.error, KeyError) as exc:
            why = f"an answer that does not decode: {exc}"
        self.close(why)

    def exchange(
        self, api_key: int, version: int, body: Any, client_id: str
    ) -> asyncio.Future[Any]:
        if self.closed:
            raise PeerConnectionError(f"connection to node {self.node_id} is closed")
        cid = self.next_id()
        try:
            self.writer.write(encode_request(RequestHeader(api_key, version, cid, client_id), body))
        except RuntimeError:
            # uvloop refuses a write to a transport it closed on a reset, before the read
            # loop has heard of it.
            self.close("connection reset")
            raise PeerConnectionError(f"connection to node {self.node_id} was reset") from None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[cid] = (api_key, version, future)
        return future

    def close(self, why: str) -> None:
        if not self.closed:
            self.closed = True
            self.writer.close()
        pending, self.pending = self.pending, {}
        for _, _, future in pending.values():
            if not future.done():
                future.set_exception(PeerConnectionError(f"node {self.node_id}: {why}"))
        current = asyncio.current_task()
        if self.reading is not None and self.reading is not current:
            self.reading.cancel()


class PeerClient:
    """Requests to the other nodes of the cluster (module docstring)."""

    def __init__(
        self,
        nodes: Callable[[], Iterable[BrokerNode]],
        security: PeerSecurity,
        *,
        node_id: int,
        request_timeout_ms: int = 30000,
        connection_setup_timeout_ms: int = 10000,
        reconnect_backoff_ms: int = 50,
    ) -> None:
        """``nodes``: the live nodes now (the placement's ``nodes``)."""
        self._nodes = nodes
        self.security = security
        self.client_id = peer_client_id(node_id)
        self.request_timeout_ms = request_timeout_ms
        self.connection_setup_timeout_ms = connection_setup_timeout_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self._connections: dict[int, _Connection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}
        self._failed_at: dict[int, tuple[int, PeerError]] = {}
        self._closed = False

    def address(self, node_id: int) -> tuple[str, int]:
        """Where ``node_id`` listens on the inter-broker listener; ``PeerUnavailable``."""
        for node in self._nodes():
            if node.node_id == node_id:
                where = endpoint(node, self.security.listener)
                if where is None:
                    raise PeerUnavailable(
                        f"node {node_id} has no {self.security.listener} listener"
                    )
                return where
        raise PeerUnavailable(f"node {node_id} is not a live node of the cluster")

    async def send(self, node_id: int, api_key: int, api_version: int, request: Any) -> Any:
        """The peer's response to ``request``; a ``PeerError`` when none came."""
        conn = await self._connection(node_id)
        future = conn.exchange(api_key, api_version, request, self.client_id)
        try:
            return await asyncio.wait_for(future, self.request_timeout_ms / 1000)
        except TimeoutError:
            conn.close(f"request timed out after {self.request_timeout_ms} ms")
            self._forget(node_id, conn)
            raise PeerTimeout(
                f"node {node_id}: no answer to api {api_key} within {self.request_timeout_ms} ms"
            ) from None
        except PeerConnectionError:
            self._forget(node_id, conn)
            raise

    async def _connection(self, node_id: int) -> _Connection:
        if self._closed:
            raise PeerConnectionError("the inter-broker client is closed")
        conn = self._connections.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        lock = self._connecting.setdefault(node_id, asyncio.Lock())
        async with lock:
            conn = self._connections.get(node_id)
            if conn is not None and not conn.closed:
                return conn
            failed = self._failed_at.get(node_id)
            if failed is not None and _now_ms() - failed[0] < self.reconnect_backoff_ms:
                raise failed[1]
            host, port = self.address(node_id)
            try:
                conn = await asyncio.wait_for(
                    self._open(node_id, host, port), self.connection_setup_timeout_ms / 1000
                )
            except TimeoutError:
                error: PeerError = PeerTimeout(
                    f"node {node_id} at {host}:{port}: no connection within "
                    f"{self.connection_setup_timeout_ms} ms"
                )
                self._failed_at[node_id] = (_now_ms(), error)
                raise error from None
            except PeerError as exc:
                self._failed_at[node_id] = (_now_ms(), exc)
                raise
            self._failed_at.pop(node_id, None)
            self._connections[node_id] = conn
            return conn

    async def _open(self, node_id: int, host: str, port: int) -> _Connection:
        sec = self.security
        try:
            reader, writer = await asyncio.open_connection(
                host, port, ssl=sec.ssl, server_hostname=host if sec.ssl is not None else None
            )
        except (OSError, ssl.SSLError) as exc:
            raise PeerConnectionError(f"node {node_id} at {host}:{port}: {exc}") from None
        conn = _Connection(node_id, reader, writer)
        conn.start()
        if sec.mechanism:
            try:
                await self._authenticate(conn)
            except BaseException:
                conn.close("authentication failed")
                raise
        log.debug("connected to node %d at %s:%d (%s)", node_id, host, port, sec.listener)
        return conn

    async def _authenticate(self, conn: _Connection) -> None:
        """SaslHandshake v1, then SaslAuthenticate v2 rounds (PLAIN, or SCRAM's two)."""
        sec = self.security
        mechanism = sec.mechanism or ""
        hs = await conn.exchange(
            sasl_handshake.API_KEY,
            1,
            sasl_handshake.Request(mechanism=mechanism),
            self.client_id,
        )
        if hs.error_code:
            raise PeerAuthenticationError(
                f"node {conn.node_id}: SaslHandshake {mechanism} refused (error {hs.error_code}, "
                f"enabled: {', '.join(hs.mechanisms)})"
            )

        async def token(data: bytes) -> bytes:
            r = await conn.exchange(
                sasl_authenticate.API_KEY,
                2,
                sasl_authenticate.Request(auth_bytes=data),
                self.client_id,
            )
            if r.error_code:
                raise PeerAuthenticationError(
                    f"node {conn.node_id}: {mechanism} as {sec.username}: {r.error_message}"
                )
            return bytes(r.auth_bytes)

        if mechanism == "PLAIN":
            await token(b"\0" + sec.username.encode() + b"\0" + sec.password.encode())
            return
        scram = _Scram(mechanism, sec.username, sec.password)
        server_first = await token(scram.client_first())
        server_final = await token(scram.client_final(server_first))
        scram.verify(server_final, conn.node_id)

    def _forget(self, node_id: int, conn: _Connection) -> None:
        if self._connections.get(node_id) is conn:
            del self._connections[node_id]

    def disconnect(self, node_id: int) -> None:
        """Drop the connection to ``node_id`` (its requests fail with PeerConnectionError)."""
        conn = self._connections.pop(node_id, None)
        if conn is not None:
            conn.close("disconnected")

    async def close(self) -> None:
        self._closed = True
        conns, self._connections = self._connections, {}
        for conn in conns.values():
            conn.close("the node is stopping")
            if conn.reading is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await conn.reading


class _Scram:
    """RFC 5802's client side over the server's formatter (the same hashing both ways)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        from coordinator.security.sasl.scram import ScramFormatter

        self.f = ScramFormatter(mechanism)
        self.password = password
        self.nonce = secrets.token_urlsafe(24)
        user = username.replace("=", "=3D").replace(",", "=2C")
        self.first_bare = f"n={user},r={self.nonce}"
        self.signature = b""

    def client_first(self) -> bytes:
        return f"n,,{self.first_bare}".encode()

    def client_final(self, server_first: bytes) -> bytes:
        text = server_first.decode("ascii", "replace")
        fields = dict(p.split("=", 1) for p in text.split(",") if "=" in p)
        nonce, iterations = fields.get("r", ""), fields.get("i", "")
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce):
            raise PeerAuthenticationError("SCRAM: the server's nonce does not extend ours")
        if not iterations.isdigit() or int(iterations) < _SCRAM_MIN_ITERATIONS:
            raise PeerAuthenticationError(f"SCRAM: invalid iterations {iterations!r}")
        try:
            salt = base64.b64decode(fields.get("s", ""), validate=True)
        except binascii.Error:
            raise PeerAuthenticationError("SCRAM: invalid salt") from None
        salted = self.f.salted_password(self.password, salt, int(iterations))
        without_proof = f"c=biws,r={nonce}"  # biws = base64("n,,"): no channel binding
        auth_message = f"{self.first_bare},{text},{without_proof}".encode()
        proof = self.f.client_proof(salted, auth_message)
        self.signature = self.f.server_signature(self.f.server_key(salted), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes, node_id: int) -> None:
        text = server_final.decode("ascii", "replace")
        try:
            signature = base64.b64decode(text[2:].split(",")[0], validate=True)
        except binascii.Error:
            signature = b""
        if not text.startswith("v=") or not hmac.compare_digest(signature, self.signature):
            raise PeerAuthenticationError(
                f"node {node_id}: SCRAM: the server's signature does not verify"
            )


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000
