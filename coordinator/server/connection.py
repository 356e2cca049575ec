"""A client connection's rules: framing, ordering, backpressure, the SASL gate, bad input.

Rule 1: every decision about a connection's bytes lives here -- where a frame ends, whether
it may be read now, who answers it, in which order answers leave, when the connection
closes. Rule 2: this module does no I/O and imports no event loop. It writes, pauses and
closes through ``transport`` (anything with ``write``, ``close``, ``abort``,
``pause_reading``, ``resume_reading``) and schedules through ``ctx.loop`` (``call_soon``,
``call_later``). ``transport.KafkaConnection`` is the asyncio protocol over it (socket
options, the peer's address, the TLS principal, the server's bookkeeping), the way
asyncpg's ``BaseProtocol`` sits over its ``CoreProtocol``; tests drive a ``Connection``
with bytes and a recording transport, without a socket.

Theory of operation: ``data_received`` appends to the buffer and cuts it into size-prefixed
frames (``_read_frames``); each is decoded and handed to the handler the ``Dispatcher`` has
for its API key and version (one dict lookup, ``routes``). The handler's result
(``handler``: the contract) is a response, sent at once (most requests), a ``Deferred``
answered when its future completes (a JoinGroup parked until the group rebalances, a commit
waiting for its fsync, a long-polling Fetch), or an ``Outcome`` (no response; close the
connection). Kafka clients match responses to requests by order as well as correlation id,
so every request takes a slot in a per-connection queue and responses are written strictly
in request order, however they complete. A connection that closes cancels the deferred
answers it still waits for.

Writes are gathered, not made per response: everything a connection sends goes to its
``out`` list, written with one ``transport.write`` at the end of the read that produced it
or, for answers completed outside a read (a round of commits made durable releases many at
once), by one callback at the end of the loop turn (``_send``). One send per connection per
turn instead of one per response; the order is the list's, which is the slots' order.

Bad input is answered the way Kafka answers it: a negative or oversized size, an unknown
API key, an unsupported version or a body that does not parse closes that connection (with a
log line); other connections never notice. A slow reader pauses our reading from it
(``pause_writing``) so it cannot make us buffer without bound.

Memory for requests is bounded across connections (``memory.RequestQueue``): a frame is
reserved from the shared pool before its body is buffered, and a connection whose next
frame does not fit is not read until memory is given back.

On a SASL listener every frame goes to the connection's ``SaslSession`` (``sasl``) until it
has authenticated; a SaslHandshake on an authenticated connection whose session has a
lifetime starts re-authentication (KIP-368), and any other request after the lifetime
closes the connection. A failed authentication stops reading, and after
``connection.failed.authentication.delay.ms`` sends the failure answer and closes.
"""

from __future__ import annotations

import functools
import logging
import struct
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from coordinator.security import ANONYMOUS
from coordinator.security.principal_mapping import SslPrincipalMapper
from coordinator.security.sasl import SaslListener
from coordinator.server.dispatch import Dispatcher
from coordinator.server.handler import (
    CLOSE_CONNECTION,
    Answer,
    ClientInfo,
    Deferred,
    Outcome,
    RequestHook,
)
from coordinator.server.memory import LARGE_REQUEST_BYTES, RequestQueue
from coordinator.server.sasl import Next, SaslSession
from protocol.framing import (
    API_VERSIONS_KEY,
    RequestHeader,
    UnknownApi,
    decode_request,
    encode_response,
)
from protocol.messages import fetch, join_group, sasl_handshake, sync_group
from protocol.primitives import DecodeError

log = logging.getLogger("kgc.server")

_perf_counter = time.perf_counter
_partial = functools.partial
_SIZE = struct.Struct(">i")
_KEY = struct.Struct(">h")
MAX_IN_FLIGHT = 1000  # per connection; beyond this we stop reading until responses drain
# Requests that wait on other clients or on time, not on our own work (Kafka's purgatories).
PURGATORY_APIS = frozenset({join_group.API_KEY, sync_group.API_KEY, fetch.API_KEY})


class Transport(Protocol):
    """What a connection does to its socket (an asyncio transport has all of it)."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class Timer(Protocol):
    def cancel(self) -> None: ...


class Loop(Protocol):
    """What a connection schedules (an asyncio event loop has both)."""

    def call_soon(self, callback: Callable[..., object], *args: Any) -> Any: ...

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Timer: ...


class AnswerFuture(Protocol):
    """A ``Deferred``'s future as the connection uses it (``asyncio.Future`` or ``Pending``)."""

    def result(self) -> Answer: ...

    def cancelled(self) -> bool: ...

    def cancel(self) -> bool: ...

    def add_done_callback(self, fn: Callable[[Any], object]) -> None: ...


@dataclass(frozen=True, slots=True)
class ServerContext:
    """What a connection is given by the server that accepted it (``listener.KafkaServer``):
    the listener it came on, what every connection of the server shares, and the server's
    hooks. The connection reads its server through this alone, so it imports nothing of
    the listener."""

    # The listener: its name and security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT,
    # SASL_SSL), whether it is TLS (``principal_mapper`` then maps a client certificate's
    # subject), connections.max.idle.ms, and for SASL_* listeners what they authenticate
    # with (one offering no mechanism when its SASL settings are missing: nobody gets in).
    listener: str
    security_protocol: str
    tls: bool
    principal_mapper: SslPrincipalMapper | None
    idle_ms: int
    sasl: SaslListener | None
    # Shared by every connection of the server.
    loop: Loop
    queue: RequestQueue
    dispatch: Dispatcher
    max_request_size: int  # socket.request.max.bytes
    connections: set[Connection]  # the live ones (the idle sweep, stop, metrics)
    conn_ids: Iterator[int]  # a connection's id, unique in the server
    # Hooks: a request answered (metrics; None skips the clock read), a connection
    # opened (+1) or closed (-1), and closed (a listener paused for descriptors may go on).
    on_request: RequestHook | None
    on_connection: Callable[[int], None]
    on_closed: Callable[[], None]
    # Told a closed connection's id (share sessions end with their connection).
    on_disconnect: list[Callable[[int], None]] = field(default_factory=list)


class _Slot:
    """A request's place in the connection's response order."""

    __slots__ = ("close", "data", "done", "future", "nbytes", "queued")

    def __init__(self) -> None:
        self.data: bytes | None = None
        self.future: AnswerFuture | None = None  # a Deferred's, until answered
        self.done = False
        self.close = False
        self.nbytes = 0  # bytes this request holds in the RequestQueue until answered
        self.queued = False  # it holds a place in the RequestQueue until answered


class Connection:
    """One client connection's state and rules (Rule 1 above); its socket is ``transport``,
    attached by whoever accepted it (``transport.KafkaConnection.connection_made``)."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        # The listener the connection came on (its SASL ones must authenticate before
        # anything else); ``principal`` is who it is: a TLS client certificate's mapped
        # subject, a SASL identity once authenticated, else ANONYMOUS.
        self.listener = ctx.listener
        self.security_protocol = ctx.security_protocol
        self.principal = ANONYMOUS
        self.transport: Transport | None = None
        self.loop = ctx.loop
        self.buf = bytearray()
        self.slots: deque[_Slot] = deque()
        self.write_paused = False
        self.read_paused = False
        self.closed = False
        self.host = "?"
        self.port = 0
        self.conn_id = next(ctx.conn_ids)
        self.info: ClientInfo | None = None
        # What is to be sent, in order (see the module docstring): written at the end of
        # the read in progress (``reading``) or by ``_send`` at the end of the loop turn.
        self.out: list[bytes] = []
        self.reading = False
        self.send_scheduled = False
        self.queue = ctx.queue
        self.routes = ctx.dispatch.routes  # (key << 16 | version) -> handler
        self.frame_bytes = 0  # reserved in the queue for the frame being read
        self.held = 0  # reserved for the frame being handled, until a request keeps it
        self.frame_size = 0
        self.waiting = False  # for room in the queue; not read meanwhile
        # SASL listeners: every frame goes to the connection's SaslSession until it has
        # authenticated (``sasl``).
        self.sasl: SaslSession | None = None
        self.authenticating = False  # (re-)authenticating: frames go to the session
        self.auth_failed = False  # closing after connection.failed.authentication.delay.ms
        self.auth_max_size = 0  # sasl.server.max.receive.size
        self.timer: Timer | None = None  # the delayed close after a failure
        # connections.max.idle.ms: ``KafkaServer``'s sweep closes a connection quiet for this
        # long. Reads and written answers only raise ``active``; the sweep turns that into
        # ``quiet_since``, so the request path pays one attribute store.
        self.idle_s = ctx.idle_ms / 1000
        self.active = False
        self.quiet_since = time.monotonic()
        if ctx.sasl is not None:
            self.sasl = SaslSession(ctx.sasl, ctx.dispatch)
            self.authenticating = True
            self.auth_max_size = ctx.sasl.max_receive_size

    # -- input and flow control
    def data_received(self, data: bytes) -> None:
        if self.auth_failed:
            return  # closing after the failed-authentication delay: nothing more is read
        self.buf += data
        self.active = True
        if not self.waiting:  # else at most one read arrived before the pause took effect
            self._read_frames()

    def pause_writing(self) -> None:
        self.write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._update_reading()

    def resume(self) -> None:
        """Called by the queue when there may be room for the frame we wait on."""
        self.waiting = False
        self._read_frames()
        self._update_reading()

    def _read_frames(self) -> None:
        buf = self.buf
        pos = 0
        n = len(buf)
        max_size = self.auth_max_size if self.authenticating else self.ctx.max_request_size
        queue = self.queue
        # Responses ready at once are gathered and written with one call per read
        # (``reading``: ``_write`` leaves the sending to the end of this read).
        self.reading = True
        try:
            while n - pos >= 4:
                size = _SIZE.unpack_from(buf, pos)[0]
                if size < 0 or size > max_size:
                    if self.authenticating:
                        # Kafka fails the authentication ("invalid receive size").
                        self._sasl_failed(None, f"invalid receive size {size} (at most {max_size})")
                        break
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
                if self.auth_failed:
                    break
        finally:
            self.reading = False
        if self.out:
            self._send()
        if pos:
            del buf[:pos]

    # -- requests
    def handle_frame(self, frame: bytes) -> None:
        sasl = self.sasl
        if sasl is not None:
            if self.authenticating:
                self._sasl_frame(frame)
                return
            if (
                len(frame) >= 2
                and _KEY.unpack_from(frame)[0] == sasl_handshake.API_KEY
                and sasl.begin_reauth()
            ):
                # KIP-368: the client re-authenticates on this connection.
                self.authenticating = True
                self._sasl_frame(frame)
                return
            if sasl.expired():
                self._session_expired()
                return
        try:
            header, body = decode_request(frame)
        except (UnknownApi, DecodeError) as exc:
            self._undecodable(frame, exc)
            return
        key, version = header.api_key, header.api_version
        handler = self.routes.get((key << 16) | (version & 0xFFFF))
        if handler is None:
            self._unroutable(frame, key, version)
            return
        info = self.info
        if info is None or info.client_id != (header.client_id or ""):
            info = self.info = self._client_info(header.client_id or "")
        on_request = self.ctx.on_request
        started = _perf_counter() if on_request is not None else 0.0
        try:
            result = handler(header, body, info)
        except Exception:
            log.exception("handler for api key %d v%d failed; closing connection", key, version)
            self.abort()
            return
        # The three kinds of result are told apart by their type alone (see handler).
        if type(result) is Deferred:
            # The answer comes later (a commit waiting for its fsync, a JoinGroup waiting
            # for the rebalance, a long poll): a callback, not a task per request. A
            # ``Pending`` runs it when completed (at once if it already is), so the slot
            # is queued first.
            slot = _Slot()
            self.slots.append(slot)
            self._park(slot, key)
            fut = slot.future = result.future
            # A partial, not a lambda: no closure cells in this function for every request.
            fut.add_done_callback(_partial(self._complete, slot, header, started))
            if len(self.slots) >= MAX_IN_FLIGHT:  # one more owed can only pause reading
                self._update_reading()
            return
        if type(result) is Outcome:
            if result is CLOSE_CONNECTION:
                self._close_in_order()
                return
            data = None  # NO_RESPONSE
        else:
            data = encode_response(key, version, header.correlation_id, result)
        if on_request is not None:
            on_request(key, version, result, started)
        if not self.slots:
            if data is not None:
                self.out.append(data)  # frames are handled inside a read: sent at its end
            return
        slot = _Slot()
        slot.data, slot.done = data, True
        self.slots.append(slot)

    def _client_info(self, client_id: str) -> ClientInfo:
        """What handlers know of the connection, rebuilt when the client id or the
        principal changes."""
        return ClientInfo(
            client_id,
            self.host,
            self.port,
            self.conn_id,
            principal=self.principal,
            listener=self.listener,
        )

    def _undecodable(self, frame: bytes, exc: UnknownApi | DecodeError) -> None:
        """A frame that does not decode closes the connection, except an ApiVersions at a
        version we do not know: answered so the client can retry lower."""
        if isinstance(exc, UnknownApi):
            if len(frame) >= 8 and _KEY.unpack_from(frame)[0] == API_VERSIONS_KEY:
                self._unsupported_api_versions(frame)
                return
            log.warning("closing connection from %s:%d: %s", self.host, self.port, exc)
        else:
            log.warning(
                "closing connection from %s:%d: malformed request (api key %s): %s; frame starts %s",
                self.host,
                self.port,
                _KEY.unpack_from(frame)[0] if len(frame) >= 2 else "?",
                exc,
                frame[:256].hex(),
            )
        self.abort()

    def _unroutable(self, frame: bytes, key: int, version: int) -> None:
        """An API key or version we do not serve closes the connection (Kafka's answer),
        except ApiVersions, answered UNSUPPORTED_VERSION with the versions we do serve."""
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

    def _close_in_order(self) -> None:
        """``CLOSE_CONNECTION`` answered at once: close after the answers still owed."""
        if not self.slots:
            self._close_gracefully()
            return
        slot = _Slot()
        slot.done = slot.close = True
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
        self, slot: _Slot, header: RequestHeader, started: float, fut: AnswerFuture
    ) -> None:
        if self.closed:
            return  # ``_give_back_all`` gave back what the slot held
        # One call for the three outcomes: ``result()`` raises CancelledError (a
        # BaseException) for a cancelled future and the handler's error for a failed one.
        try:
            result = fut.result()
        except BaseException as exc:
            if fut.cancelled():
                self._release(slot)
                return
            log.error(
                "handler for api key %d v%d failed (%r); closing connection",
                header.api_key,
                header.api_version,
                exc,
                exc_info=exc,
            )
            self.abort()
            return
        if slot.queued:
            self._release(slot)
        if type(result) is Outcome:
            if result is CLOSE_CONNECTION:
                slot.done = slot.close = True
                self._flush()
                return
        else:
            slot.data = encode_response(
                header.api_key, header.api_version, header.correlation_id, result
            )
        on_request = self.ctx.on_request
        if on_request is not None:
            on_request(header.api_key, header.api_version, result, started)
        slot.done = True
        self.active = True
        self._flush()

    def _give_back_all(self) -> None:
        """The connection is gone: everything it held in the queue goes back, its partial
        frame and its unanswered requests (they will never be answered now)."""
        for held in (self.frame_bytes, self.held):
            if held:
                self.queue.give_back(held)
        self.frame_bytes = self.held = 0
        for slot in self.slots:
            if slot.future is not None:
                slot.future.cancel()  # nobody will read its answer (see handler: Deferred)
            self._release(slot)

    # -- output
    def _write(self, data: bytes) -> None:
        """Queue ``data`` for sending: with the read in progress, else at the turn's end."""
        out = self.out
        out.append(data)
        if not self.reading and not self.send_scheduled:
            self.send_scheduled = True
            self.loop.call_soon(self._send)

    def _send(self) -> None:
        """Write everything queued with one call (end of a read, or of the loop turn)."""
        self.send_scheduled = False
        out = self.out
        if not out:
            return
        if self.transport is None or self.closed:
            out.clear()
            return
        self.transport.write(b"".join(out) if len(out) > 1 else out[0])
        out.clear()

    def _write_in_order(self, data: bytes) -> None:
        """An answer made here (not by a handler): now, or behind the answers still owed."""
        if not self.slots:
            self._write(data)
        else:
            slot = _Slot()
            slot.data, slot.done = data, True
            self.slots.append(slot)

    def _flush(self) -> None:
        slots = self.slots
        while slots and slots[0].done:
            slot = slots.popleft()
            if slot.data is not None:
                self._write(slot.data)
            if slot.close:
                self._close_gracefully()
                return
        if self.read_paused or len(slots) >= MAX_IN_FLIGHT:
            self._update_reading()

    def _close_gracefully(self) -> None:
        """Send what is already answered, then close (buffered writes still go out)."""
        if self.closed or self.transport is None:
            return
        self._send()
        self.closed = True
        self.transport.close()

    def _update_reading(self) -> None:
        # Called whenever one of the conditions below may have changed, so ``read_paused``
        # always equals them: the hot paths only call it when their change can matter.
        if self.transport is None or self.closed:
            return
        should_pause = (
            self.write_paused
            or self.waiting
            or self.auth_failed
            or len(self.slots) >= MAX_IN_FLIGHT
        )
        if should_pause and not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()
        elif not should_pause and self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()

    def _unsupported_api_versions(self, frame: bytes) -> None:
        correlation_id = struct.unpack_from(">i", frame, 4)[0] if len(frame) >= 8 else 0
        self._write_in_order(self.ctx.dispatch.unsupported_api_versions(correlation_id))

    def abort(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.abort()

    def close(self) -> None:
        """Close once what is written has gone out (the server stopping)."""
        if self.transport is not None:
            self.transport.close()

    def idle(self) -> bool:
        return not self.slots

    # -- SASL
    def _sasl_frame(self, frame: bytes) -> None:
        """A frame of a connection still (re-)authenticating: its session answers."""
        sasl = self.sasl
        assert sasl is not None
        info = self.info or self._client_info("")
        step = sasl.receive(frame, info)
        if step.next is Next.CLOSE:
            log.info(
                "closing connection from %s:%d on listener %s during SASL authentication: %s",
                self.host,
                self.port,
                self.listener,
                step.reason,
            )
            self.abort()
            return
        if step.next is Next.FAIL:
            self._sasl_failed(step.reply, step.reason)
            return
        if step.reply is not None:
            # Re-authenticating behind answers still pending keeps the order.
            self._write_in_order(step.reply)
        if sasl.authenticated:
            self.authenticating = False
            self._cancel_timer()
            if sasl.principal is not None:
                self.principal = sasl.principal
            self.info = None  # rebuilt with the principal at the next request
            log.debug(
                "connection from %s:%d on listener %s authenticated as %s with %s",
                self.host,
                self.port,
                self.listener,
                self.principal,
                sasl.mechanism,
            )

    def _sasl_failed(self, reply: bytes | None, reason: str) -> None:
        """Authentication failed: read nothing more, and after
        ``connection.failed.authentication.delay.ms`` send the failure answer and close
        (Kafka's delayed close: a client retrying a wrong password is slowed down)."""
        sasl = self.sasl
        assert sasl is not None
        log.info(
            "failed authentication from %s:%d on listener %s (mechanism %s): %s",
            self.host,
            self.port,
            self.listener,
            sasl.mechanism or "-",
            reason,
        )
        self.auth_failed = True
        self._cancel_timer()
        self._update_reading()
        delay_ms = sasl.listener.failed_authentication_delay_ms
        if delay_ms <= 0:
            self._close_after_failure(reply)
        else:
            self.timer = self.loop.call_later(delay_ms / 1000, self._close_after_failure, reply)

    def _close_after_failure(self, reply: bytes | None) -> None:
        self.timer = None
        if self.closed or self.transport is None:
            return
        if reply is not None and not self.slots:
            self._write(reply)
        self._close_gracefully()

    def _session_expired(self) -> None:
        log.info(
            "closing connection from %s:%d on listener %s: the SASL session of %s "
            "expired (it did not re-authenticate)",
            self.host,
            self.port,
            self.listener,
            self.principal,
        )
        self.abort()

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    # -- idleness
    def expire_if_idle(self, now: float) -> None:
        """The server's sweep: close the connection if it has been quiet (nothing read, no
        answer written, none awaited) for connections.max.idle.ms, as Kafka's Selector does."""
        if self.active:
            self.active = False
            self.quiet_since = now
            return
        if self.closed or self.auth_failed or self.slots or now - self.quiet_since < self.idle_s:
            return
        idle_ms = round(self.idle_s * 1000)
        if self.authenticating:  # a client stopping mid-handshake holds nothing longer
            log.info(
                "closing connection from %s:%d on listener %s: nothing received for %d ms "
                "during SASL authentication (connections.max.idle.ms)",
                self.host,
                self.port,
                self.listener,
                idle_ms,
            )
        else:  # routine (clients reconnect), as Kafka logs it
            log.debug(
                "closing idle connection from %s:%d on listener %s (connections.max.idle.ms=%d)",
                self.host,
                self.port,
                self.listener,
                idle_ms,
            )
        self.abort()
