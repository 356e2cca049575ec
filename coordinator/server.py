"""The asyncio TCP front end: framing, ordering, backpressure, bad input.

How this works: each connection is an ``asyncio.Protocol``. ``data_received`` cuts the
stream into size-prefixed frames and hands each to the handler the broker registered for
its API key, which returns
either a response body at once (most requests) or an awaitable (a JoinGroup parked until the
group rebalances, a commit waiting for its fsync, a long-polling Fetch). Kafka clients match
responses to requests by order as well as correlation id, so every request takes a slot in a
per-connection queue and responses are written strictly in request order, however they
complete.

Bad input is answered the way Kafka answers it: a negative or oversized size, an unknown
API key, an unsupported version or a body that does not parse closes that connection (with a
log line); other connections never notice. A slow reader pauses our reading from it
(``pause_writing``) so it cannot make us buffer without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from protocol.errors import ErrorCode
from protocol.framing import (
    API_VERSIONS_KEY,
    RequestHeader,
    UnknownApi,
    decode_request,
    encode_response,
)
from protocol.messages.api_versions import ApiVersion, ApiVersionsResponse
from protocol.primitives import DecodeError

log = logging.getLogger("kgc.server")

_SIZE = struct.Struct(">i")
MAX_IN_FLIGHT = 1000  # per connection; beyond this we stop reading until responses drain


class NoResponse:
    """Returned by a handler for requests Kafka does not answer (Produce with acks=0)."""


NO_RESPONSE = NoResponse()


class CloseConnection:
    """Returned where Kafka answers by closing the connection (a failed acks=0 Produce):
    earlier responses on the connection still go out first."""


CLOSE_CONNECTION = CloseConnection()


@dataclass(slots=True)
class ClientInfo:
    """What a handler may want to know about the connection a request came on."""

    client_id: str
    host: str
    port: int
    conn_id: int
    java_host: str = ""  # the host as Kafka reports it (InetAddress.toString(): "/127.0.0.1")

    def __post_init__(self) -> None:
        self.java_host = "/" + self.host


Handler = Callable[[RequestHeader, Any, ClientInfo], Any]
# (api key, version, response, perf_counter at arrival), once per answered request.
RequestHook = Callable[[int, int, Any, float], None]
Supported = dict[int, tuple[int, int]]


class _Slot:
    __slots__ = ("close", "data", "done")

    def __init__(self) -> None:
        self.data: bytes | None = None
        self.done = False
        self.close = False


class KafkaConnection(asyncio.Protocol):
    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.slots: deque[_Slot] = deque()
        self.write_paused = False
        self.read_paused = False
        self.closed = False
        self.host = "?"
        self.port = 0
        self.conn_id = server.next_conn_id()
        self.tasks: set[asyncio.Task[None]] = set()
        self.info: ClientInfo | None = None
        self.out: list[bytes] | None = None

    # -- asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transport is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.host, self.port = str(peer[0]), int(peer[1])
        self.server.connections.add(self)
        self.server.on_connection(+1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        self.server.on_connection(-1)
        for task in list(self.tasks):
            task.cancel()

    def pause_writing(self) -> None:
        self.write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        n = len(buf)
        max_size = self.server.max_request_size
        # Responses ready at once are gathered and written with one call per read.
        out: list[bytes] = []
        self.out = out
        while n - pos >= 4:
            size = _SIZE.unpack_from(buf, pos)[0]
            if size < 0 or size > max_size:
                log.warning(
                    "closing connection from %s:%d: request size %d outside [0, %d]",
                    self.host,
                    self.port,
                    size,
                    max_size,
                )
                self.abort()
                return
            end = pos + 4 + size
            if end > n:
                break
            frame = bytes(buf[pos + 4 : end])
            pos = end
            self.handle_frame(frame)
            if self.closed:
                return
        self.out = None
        if out and self.transport is not None:
            self.transport.write(b"".join(out) if len(out) > 1 else out[0])
        if pos:
            del buf[:pos]

    # -- requests
    def handle_frame(self, frame: bytes) -> None:
        server = self.server
        try:
            header, body = decode_request(frame)
        except UnknownApi as exc:
            if len(frame) >= 8 and struct.unpack_from(">h", frame)[0] == API_VERSIONS_KEY:
                self._unsupported_api_versions(frame)
                return
            log.warning("closing connection from %s:%d: %s", self.host, self.port, exc)
            self.abort()
            return
        except DecodeError as exc:
            log.warning(
                "closing connection from %s:%d: malformed request (api key %s): %s; frame starts %s",
                self.host,
                self.port,
                struct.unpack_from(">h", frame)[0] if len(frame) >= 2 else "?",
                exc,
                frame[:256].hex(),
            )
            self.abort()
            return
        key, version = header.api_key, header.api_version
        bounds = server.supported.get(key)
        if bounds is None or not bounds[0] <= version <= bounds[1]:
            if key == API_VERSIONS_KEY:
                self._unsupported_api_versions(frame)
                return
            log.warning(
                "closing connection from %s:%d: unsupported api key %d version %d",
                self.host,
                self.port,
                key,
                version,
            )
            self.abort()
            return
        info = self.info
        if info is None or info.client_id != (header.client_id or ""):
            info = self.info = ClientInfo(
                header.client_id or "", self.host, self.port, self.conn_id
            )
        on_request = server.on_request
        started = time.perf_counter() if on_request is not None else 0.0
        try:
            # The supported-versions check above guarantees a handler for the key.
            result = server.handlers[key](header, body, info)
        except Exception:
            log.exception("handler for api key %d v%d failed; closing connection", key, version)
            self.abort()
            return
        if isinstance(result, asyncio.Future):
            # The common parked case (a commit waiting for its fsync, a JoinGroup waiting
            # for the rebalance): a callback, not a task per request.
            slot = _Slot()
            self.slots.append(slot)
            result.add_done_callback(lambda fut: self._complete(slot, header, fut, started))
            self._update_reading()
            return
        if hasattr(result, "__await__"):  # coroutines; far cheaper than inspect
            slot = _Slot()
            self.slots.append(slot)
            task = asyncio.ensure_future(self._finish(slot, header, result, started))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            self._update_reading()
            return
        if result is CLOSE_CONNECTION:
            if not self.slots:
                self._close_gracefully()
                return
            slot = _Slot()
            slot.done = slot.close = True
            self.slots.append(slot)
            return
        data = (
            None
            if result is NO_RESPONSE
            else encode_response(key, version, header.correlation_id, result)
        )
        if on_request is not None:
            on_request(key, version, result, started)
        if not self.slots:
            if data is not None:
                self._write(data)
            return
        slot = _Slot()
        slot.data, slot.done = data, True
        self.slots.append(slot)

    def _complete(
        self, slot: _Slot, header: RequestHeader, fut: asyncio.Future[Any], started: float
    ) -> None:
        if self.closed or fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            log.error(
                "handler for api key %d v%d failed (%r); closing connection",
                header.api_key,
                header.api_version,
                exc,
            )
            self.abort()
            return
        self._done(slot, header, fut.result(), started)

    async def _finish(
        self, slot: _Slot, header: RequestHeader, pending: Awaitable[Any], started: float
    ) -> None:
        try:
            result = await pending
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "handler for api key %d v%d failed; closing connection",
                header.api_key,
                header.api_version,
            )
            self.abort()
            return
        self._done(slot, header, result, started)

    def _done(self, slot: _Slot, header: RequestHeader, result: Any, started: float) -> None:
        if result is not NO_RESPONSE:
            slot.data = encode_response(
                header.api_key, header.api_version, header.correlation_id, result
            )
        on_request = self.server.on_request
        if on_request is not None:
            on_request(header.api_key, header.api_version, result, started)
        slot.done = True
        self._flush()

    def _write(self, data: bytes) -> None:
        if self.out is not None:
            self.out.append(data)
        elif self.transport is not None and not self.closed:
            self.transport.write(data)

    def _flush(self) -> None:
        slots = self.slots
        while slots and slots[0].done:
            slot = slots.popleft()
            if slot.data is not None:
                self._write(slot.data)
            if slot.close:
                self._close_gracefully()
                return
        self._update_reading()

    def _close_gracefully(self) -> None:
        """Send what is already answered, then close (buffered writes still go out)."""
        if self.closed or self.transport is None:
            return
        if self.out:
            self.transport.write(b"".join(self.out))
            self.out.clear()
        self.closed = True
        self.transport.close()

    def _update_reading(self) -> None:
        if self.transport is None or self.closed:
            return
        should_pause = self.write_paused or len(self.slots) >= MAX_IN_FLIGHT
        if should_pause and not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()
        elif not should_pause and self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()

    def _unsupported_api_versions(self, frame: bytes) -> None:
        # Kafka answers an ApiVersions it cannot parse with a v0 response carrying
        # UNSUPPORTED_VERSION and its ApiVersions range, so the client can retry lower.
        correlation_id = struct.unpack_from(">i", frame, 4)[0] if len(frame) >= 8 else 0
        lo, hi = self.server.supported[API_VERSIONS_KEY]
        body = ApiVersionsResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            api_keys=[ApiVersion(api_key=API_VERSIONS_KEY, min_version=lo, max_version=hi)],
        )
        data = encode_response(API_VERSIONS_KEY, 0, correlation_id, body)
        if not self.slots:
            self._write(data)
        else:
            slot = _Slot()
            slot.data, slot.done = data, True
            self.slots.append(slot)

    def abort(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.abort()

    def idle(self) -> bool:
        return not self.slots


class KafkaServer:
    """Owns the listening socket and the set of live connections."""

    def __init__(
        self,
        handlers: dict[int, Handler],
        supported: Supported,
        *,
        max_request_size: int,
        on_connection: Callable[[int], None] = lambda delta: None,
        on_request: RequestHook | None = None,
    ) -> None:
        self.handlers = handlers  # shared with the broker: registrations show up here
        self.supported = supported
        self.max_request_size = max_request_size
        self.on_connection = on_connection
        self.on_request = on_request
        self.connections: set[KafkaConnection] = set()
        self._server: asyncio.base_events.Server | None = None
        self._conn_seq = 0

    def next_conn_id(self) -> int:
        self._conn_seq += 1
        return self._conn_seq

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: KafkaConnection(self), host, port, reuse_address=True, backlog=1024
        )
        sockets = self._server.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let in-flight responses go out, then close every connection."""
        if self._server is not None:
            self._server.close()
        deadline = asyncio.get_running_loop().time() + grace_s
        while any(not c.idle() for c in self.connections):
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        if self._server is not None:
            await self._server.wait_closed()
