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

Memory for requests is bounded across connections, as Kafka's ``queued.max.request.bytes``
and ``queued.max.requests`` bound it (``RequestQueue``). A frame's size is reserved from the
shared pool as soon as its 4-byte size has been read, before its body is buffered; a request
gives its bytes back once it is answered. A connection whose next frame does not fit stops
being read (its client's data waits in the kernel) until memory is given back. Frames up to
1 MiB are admitted while the pool is not yet full (Kafka's non-strict ``SimpleMemoryPool``);
larger ones share three quarters of it, so a few huge produce requests (or clients sending
them slowly) never starve heartbeats and commits, and one of them is always admitted when no
other is queued, so a request larger than the whole pool is still served. Requests parked in
a purgatory (a JoinGroup waiting for the rebalance, a SyncGroup waiting for the leader, a
long-polling Fetch) give their place back when their handler returns, as in Kafka, where
such a request has left the request queue: they wait on other clients, and holding their
place could stall a large rebalance.

File descriptors: we accept connections ourselves (``_Listener``) so that running short of
descriptors is handled here and not deep inside the storage or an import. A connection is
refused (accepted and closed at once) when fewer than a reserve of descriptors would be left
for the logs; if accept() itself fails with EMFILE, a spare descriptor is given up for a
moment to accept and close the waiting connection (the classic trick), so clients learn at
once instead of hanging in the backlog. Refusals are logged once per episode and counted;
connections are accepted again as soon as descriptors free up.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
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
from protocol.messages import fetch, join_group, sync_group
from protocol.messages.api_versions import ApiVersion, ApiVersionsResponse
from protocol.primitives import DecodeError

log = logging.getLogger("kgc.server")

_SIZE = struct.Struct(">i")
MAX_IN_FLIGHT = 1000  # per connection; beyond this we stop reading until responses drain
LARGE_REQUEST_BYTES = 1 << 20  # frames above this may fill only LARGE_SHARE of the pool
LARGE_SHARE = 0.75
# Requests that wait on other clients or on time, not on our own work (Kafka's purgatories).
PURGATORY_APIS = frozenset({join_group.API_KEY, sync_group.API_KEY, fetch.API_KEY})
BACKLOG = 1024
ACCEPTS_PER_WAKEUP = 64
ACCEPT_RETRY_S = 0.1  # without a spare descriptor, how long accepting pauses after EMFILE
# Out-of-resource errors of accept(); the connection waits in the backlog, not lost.
_ACCEPT_SHORTAGE = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# Errors about the one connection being accepted (it went away first): skip it.
_ACCEPT_SKIP = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.EINTR})


def descriptor_reserve(limit: int) -> int:
    """Descriptors kept free for the logs: a tenth of the limit, at least 64, at most 1024.

    Every partition holds its active segment open and a roll or a new topic opens more; a
    connection only ever needs its socket, so connections are what gives way.
    """
    return min(1024, max(64, limit // 10))


class RequestQueue:
    """The memory and the number of requests read but not yet answered, shared by all
    connections (Kafka's ``queued.max.request.bytes`` and ``queued.max.requests``).

    Frames of at most 1 MiB (heartbeats, commits, ordinary produce batches) are admitted
    while the pool is not full, as Kafka's non-strict pool admits them, and always while
    they take less than their own quarter of it. Larger frames are admitted only if they
    fit, within three quarters of the pool and within the whole; a single one that does not
    fit is admitted anyway when no other large frame is queued and the small ones keep to
    their quarter (so a request larger than the pool is still served). Queued bytes thus
    stay under the pool plus 1 MiB, or a quarter of the pool plus one request
    (``socket.request.max.bytes``), whichever is more.

    ``max_bytes`` < 0 means no byte limit (Kafka's -1). Connections that cannot be admitted
    wait in ``waiters`` and are offered room again, in order, when anything is given back.
    """

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.large_limit = int(max_bytes * LARGE_SHARE)
        self.small_share = max_bytes - self.large_limit
        self.large = 0  # bytes reserved by frames over LARGE_REQUEST_BYTES
        self.small = 0  # bytes reserved by the others
        self.requests = 0  # unanswered requests outside a purgatory
        self.waiters: deque[KafkaConnection] = deque()
        self._wake_scheduled = False

    def admits(self, size: int) -> bool:
        if self.requests >= self.max_requests:
            return False
        if self.max_bytes < 0:
            return True
        large, small = self.large, self.small
        if size > LARGE_REQUEST_BYTES:
            if large + size <= self.large_limit and large + small + size <= self.max_bytes:
                return True
            return not large and small < self.small_share
        return small < self.small_share or large + small < self.max_bytes

    def take(self, size: int) -> None:
        if size > LARGE_REQUEST_BYTES:
            self.large += size
        else:
            self.small += size

    def give_back(self, size: int, requests: int = 0) -> None:
        if size > LARGE_REQUEST_BYTES:
            self.large -= size
        else:
            self.small -= size
        self.requests -= requests
        if self.waiters and not self._wake_scheduled:
            # Not from inside the caller's stack: it may be a connection's frame loop.
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._wake)

    def wait(self, conn: KafkaConnection) -> None:
        self.waiters.append(conn)

    def _wake(self) -> None:
        self._wake_scheduled = False
        waiting, self.waiters = self.waiters, deque()
        for conn in waiting:
            if not conn.closed:
                conn.resume()  # waits again, appended in the same order, if still no room


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
    __slots__ = ("close", "data", "done", "nbytes", "queued")

    def __init__(self) -> None:
        self.data: bytes | None = None
        self.done = False
        self.close = False
        self.nbytes = 0  # bytes this request holds in the RequestQueue until answered
        self.queued = False  # it holds a place in the RequestQueue until answered


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
        self.queue = server.queue
        self.frame_bytes = 0  # reserved in the queue for the frame being read
        self.held = 0  # reserved for the frame being handled, until a request keeps it
        self.frame_size = 0
        self.waiting = False  # for room in the queue; not read meanwhile

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
        # Everything this connection held in the queue goes back: its partial frame and
        # its unanswered requests (they will never be answered now).
        for held in (self.frame_bytes, self.held):
            if held:
                self.queue.give_back(held)
        self.frame_bytes = self.held = 0
        for slot in self.slots:
            self._release(slot)
        self.server.listener_freed()

    def pause_writing(self) -> None:
        self.write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.waiting:  # else at most one read arrived before the pause took effect
            self._read_frames()

    def resume(self) -> None:
        """Called by the queue when there may be room for the frame we wait on."""
        self.waiting = False
        self._read_frames()
        self._update_reading()

    def _read_frames(self) -> None:
        buf = self.buf
        pos = 0
        n = len(buf)
        max_size = self.server.max_request_size
        queue = self.queue
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
            reserved = self.frame_bytes
            if not reserved:
                if not queue.admits(size):
                    self.waiting = True
                    queue.wait(self)
                    self._update_reading()
                    break
                if end > n:
                    # The whole frame is reserved before its body is buffered.
                    queue.take(size)
                    self.frame_bytes = size
                    break
            elif end > n:
                break
            if size > LARGE_REQUEST_BYTES:
                # Cut the buffer before handling, so a large frame is not held twice.
                with memoryview(buf) as view:
                    frame = bytes(view[pos + 4 : end])
                del buf[:end]
                pos, n = 0, len(buf)
            else:
                frame = bytes(buf[pos + 4 : end])
                pos = end
            self.frame_bytes = 0
            self.held, self.frame_size = reserved, size
            self.handle_frame(frame)
            if self.held:  # answered (or dropped) at once: nothing keeps the bytes
                queue.give_back(self.held)
                self.held = 0
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
            self._park(slot, key)
            result.add_done_callback(lambda fut: self._complete(slot, header, fut, started))
            self._update_reading()
            return
        if hasattr(result, "__await__"):  # coroutines; far cheaper than inspect
            slot = _Slot()
            self.slots.append(slot)
            self._park(slot, key)
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

    def _park(self, slot: _Slot, key: int) -> None:
        """A request answered later keeps its frame's bytes and a place in the queue."""
        if key in PURGATORY_APIS:
            return  # waits on other clients: gives both back now (the caller releases)
        size = self.frame_size
        if not self.held:
            self.queue.take(size)  # the frame arrived whole: not reserved yet
        self.held = 0
        slot.nbytes, slot.queued = size, True
        self.queue.requests += 1

    def _release(self, slot: _Slot) -> None:
        if slot.queued:
            self.queue.give_back(slot.nbytes, 1)
            slot.nbytes, slot.queued = 0, False

    def _complete(
        self, slot: _Slot, header: RequestHeader, fut: asyncio.Future[Any], started: float
    ) -> None:
        if self.closed:
            return  # connection_lost gave back what the slot held
        if fut.cancelled():
            self._release(slot)
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
        self._release(slot)
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
        should_pause = self.write_paused or self.waiting or len(self.slots) >= MAX_IN_FLIGHT
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


class _Listener:
    """One listening socket, accepted from by hand so descriptor shortage is ours to handle."""

    def __init__(self, server: KafkaServer, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self.paused: asyncio.TimerHandle | None = None
        self.loop.add_reader(sock.fileno(), self.accept)

    def accept(self) -> None:
        server = self.server
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _ACCEPT_SKIP:
                    continue
                if exc.errno in _ACCEPT_SHORTAGE and server.shed(self.sock):
                    continue
                # No spare descriptor (or another error): the connection waits in the
                # backlog; try again shortly or when a connection closes.
                server.refusing(f"accept() failed: {exc.strerror or exc}")
                self.pause()
                return
            if conn.fileno() >= server.descriptor_ceiling():
                server.refuse(conn, "too few file descriptors left for the logs")
                continue
            server.adopt(conn)

    def pause(self) -> None:
        if self.paused is None:
            self.loop.remove_reader(self.sock.fileno())
            self.paused = self.loop.call_later(ACCEPT_RETRY_S, self.resume)

    def resume(self) -> None:
        if self.paused is not None:
            self.paused.cancel()
            self.paused = None
            if self.sock.fileno() >= 0:
                self.loop.add_reader(self.sock.fileno(), self.accept)

    def close(self) -> None:
        if self.paused is not None:
            self.paused.cancel()
            self.paused = None
        elif self.sock.fileno() >= 0:
            self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


class KafkaServer:
    """Owns the listening sockets and the set of live connections."""

    def __init__(
        self,
        handlers: dict[int, Handler],
        supported: Supported,
        *,
        max_request_size: int,
        queued_max_requests: int = 500,
        queued_max_request_bytes: int = -1,
        on_connection: Callable[[int], None] = lambda delta: None,
        on_refused: Callable[[], None] = lambda: None,
        on_request: RequestHook | None = None,
    ) -> None:
        self.handlers = handlers  # shared with the broker: registrations show up here
        self.supported = supported
        self.max_request_size = max_request_size
        self.queue = RequestQueue(queued_max_requests, queued_max_request_bytes)
        self.on_connection = on_connection
        self.on_refused = on_refused
        self.on_request = on_request
        self.connections: set[KafkaConnection] = set()
        self.listeners: list[_Listener] = []
        self.refused = 0
        self._short = False  # refusing since the shortage was logged
        self._refused_in_episode = 0
        self._spare: int | None = None  # given up for a moment to refuse on EMFILE
        self._accepting: set[asyncio.Task[Any]] = set()
        self._conn_seq = 0

    def next_conn_id(self) -> int:
        self._conn_seq += 1
        return self._conn_seq

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        socks: list[socket.socket] = []
        try:
            for family, type_, proto, _, addr in dict.fromkeys(infos):
                sock = socket.socket(family, type_, proto)
                socks.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if port == 0 and len(socks) > 1:  # every address on the same free port
                    addr = (addr[0], socks[0].getsockname()[1], *addr[2:])
                try:
                    sock.bind(addr)
                except OSError as exc:
                    raise OSError(
                        exc.errno,
                        f"error while attempting to bind on address {addr!r}: "
                        f"{(exc.strerror or str(exc)).lower()}",
                    ) from None
                sock.listen(BACKLOG)
                sock.setblocking(False)
        except BaseException:
            for sock in socks:
                sock.close()
            raise
        with contextlib.suppress(OSError):
            self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self.listeners = [_Listener(self, sock) for sock in socks]
        return int(socks[0].getsockname()[1]) if socks else port

    # -- accepting
    def descriptor_ceiling(self) -> int:
        """Accepted sockets numbered at or above this are refused.

        POSIX hands out the lowest free descriptor, so a socket numbered n means at least
        n + 1 descriptors are in use. Read per accept: the limit can change at run time.
        """
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if limit == resource.RLIM_INFINITY:
            return 1 << 62
        return limit - descriptor_reserve(limit)

    def adopt(self, conn: socket.socket) -> None:
        if self._short:
            log.info(
                "accepting connections again (%d refused while short of file descriptors)",
                self._refused_in_episode,
            )
            self._short = False
            self._refused_in_episode = 0
        conn.setblocking(False)
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._connect(conn))
        self._accepting.add(task)
        task.add_done_callback(self._accepting.discard)

    async def _connect(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(lambda: KafkaConnection(self), conn)
        except OSError as exc:
            log.warning("could not set up an accepted connection: %s", exc)
            conn.close()

    def refusing(self, reason: str) -> None:
        """Log the first refusal of an episode; the rest are only counted."""
        if not self._short:
            self._short = True
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            log.warning(
                "refusing new connections: %s (open-files limit %d, %d connections open); "
                "raise the limit (ulimit -n) or reduce the connections",
                reason,
                limit,
                len(self.connections),
            )

    def refuse(self, conn: socket.socket, reason: str) -> None:
        self.refusing(reason)
        conn.close()
        self.refused += 1
        self._refused_in_episode += 1
        self.on_refused()

    def shed(self, sock: socket.socket) -> bool:
        """accept() failed with EMFILE: free the spare descriptor, accept the waiting
        connection with it and close that at once, then take the spare back."""
        if self._spare is None:
            return False
        os.close(self._spare)
        self._spare = None
        try:
            conn, _ = sock.accept()
        except OSError:
            pass
        else:
            self.refuse(conn, "out of file descriptors")
        with contextlib.suppress(OSError):
            self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        return self._spare is not None

    def listener_freed(self) -> None:
        """A connection closed: a listener paused for want of descriptors may go on."""
        for listener in self.listeners:
            if listener.paused is not None:
                listener.resume()
        if self._spare is None:
            with contextlib.suppress(OSError):
                self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let in-flight responses go out, then close every connection."""
        for listener in self.listeners:
            listener.close()
        self.listeners = []
        for task in list(self._accepting):
            with contextlib.suppress(Exception):
                await task
        deadline = asyncio.get_running_loop().time() + grace_s
        while any(not c.idle() for c in self.connections):
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        # close() sends what is buffered first; a client that does not read is cut off.
        deadline = asyncio.get_running_loop().time() + 1.0
        while self.connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            conn.abort()
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
