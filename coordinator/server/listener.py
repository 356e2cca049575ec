"""Listening sockets and accepting connections, with a reserve of file descriptors.

How this works: we accept connections ourselves (``_Listener``) so that running short of
descriptors is handled here and not deep inside the storage or an import. A connection is
refused (accepted and closed at once) when fewer than a reserve of descriptors would be left
for the logs; if accept() itself fails with EMFILE, a spare descriptor is given up for a
moment to accept and close the waiting connection (the classic trick), so clients learn at
once instead of hanging in the backlog. Refusals are logged once per episode and counted;
connections are accepted again as soon as descriptors free up. Each accepted socket becomes
a ``KafkaConnection`` (``transport``, over the rules of ``connection``), given a
``ServerContext``: its listener, the parts all connections share and the server's hooks, so
the connection never reads the server itself.

A server may have several listeners (Kafka's ``listeners``), each a ``Listening``: its
sockets, its name and security protocol, and for SSL/SASL_SSL the TLS context and the
principal mapping rules. A TLS connection is handed to its ``KafkaConnection`` only once the
handshake is done; a handshake that fails (a plaintext client on the TLS port, an untrusted
or expired client certificate) or does not finish within the listener's
``connections.max.idle.ms`` closes that connection with one log line (after sending the
client the TLS alert saying why, as Kafka does: see ``security/tls.py``), and nothing else
notices. Past the handshake, ``KafkaServer`` sweeps its connections every so often and closes
those that have been quiet (no bytes read, no request in flight) for ``connections.max.idle.ms``,
as Kafka's Selector expires idle connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import os
import resource
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.config import Settings
from coordinator.security.principal_mapping import SslPrincipalMapper
from coordinator.security.sasl import SaslListener
from coordinator.security.tls import SslConfig, TlsConfigError, server_context, tls_alert
from coordinator.server.connection import Connection, ServerContext
from coordinator.server.dispatch import Dispatcher
from coordinator.server.handler import RequestHook
from coordinator.server.memory import RequestQueue
from coordinator.server.transport import KafkaConnection

log = logging.getLogger("kgc.server")

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


class _Listener:
    """One listening socket, accepted from by hand so descriptor shortage is ours to handle."""

    def __init__(self, server: KafkaServer, sock: socket.socket, listening: Listening) -> None:
        self.server = server
        self.sock = sock
        self.listening = listening
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
            server.adopt(conn, self.listening)

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


@dataclass(frozen=True, slots=True)
class Listening:
    """Sockets listening on one port; connections wait in their backlog until a
    ``KafkaServer`` accepts them. ``port`` is the one bound (a free one for port 0).

    ``name`` and ``security_protocol`` are the listener's (Kafka's ``listeners`` and
    ``listener.security.protocol.map``); ``ssl`` is set for SSL and SASL_SSL, with the
    ``ssl.principal.mapping.rules`` that name a client by its certificate."""

    sockets: list[socket.socket]
    port: int
    name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"
    ssl: ssl.SSLContext | None = None
    principal_mapper: SslPrincipalMapper | None = None
    # connections.max.idle.ms as this listener sees it: a connection that reads and writes
    # nothing for this long is closed (a stalled TLS handshake included), as Kafka's Selector
    # closes idle connections.
    idle_ms: int = 600000


async def listen(
    host: str,
    port: int,
    *,
    name: str = "PLAINTEXT",
    security_protocol: str = "PLAINTEXT",
    ssl_context: ssl.SSLContext | None = None,
    principal_mapper: SslPrincipalMapper | None = None,
    idle_ms: int = 600000,
) -> Listening:
    """Bind and listen on every address of ``host`` (IPv4 and IPv6 alike), on one port."""
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
    return Listening(
        socks,
        int(socks[0].getsockname()[1]) if socks else port,
        name,
        security_protocol,
        ssl_context,
        principal_mapper,
        idle_ms,
    )


TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
TlsContexts = dict[str, tuple[ssl.SSLContext, SslPrincipalMapper]]


def tls_contexts(s: Settings) -> TlsContexts:
    """The TLS context and principal mapper of each SSL/SASL_SSL listener, by name.

    Built before anything else is opened: a setting that does not load stops start-up with
    one line naming it (``SystemExit``).
    """
    out: TlsContexts = {}
    for spec in s.listener_specs:
        if spec.security_protocol not in TLS_PROTOCOLS:
            continue
        prefix = s.listener_setting_name(spec.name, "")
        scoped = any(k.startswith(prefix + "ssl.") for k in s.listener_name_configs)
        cfg = SslConfig.from_settings(s.ssl_configs(spec.name), prefix if scoped else "")
        try:
            out[spec.name] = (server_context(cfg), SslPrincipalMapper(cfg.principal_mapping_rules))
        except TlsConfigError as exc:
            raise SystemExit(f"kgc: error: invalid setting {exc} (listener {spec.name})") from None
    return out


async def listen_all(s: Settings, tls: TlsContexts) -> list[Listening]:
    """Bind every listener of ``s`` (all or nothing: a port in use closes the others)."""
    listenings: list[Listening] = []
    try:
        for spec in s.listener_specs:
            ctx, mapper = tls.get(spec.name, (None, None))
            listenings.append(
                await listen(
                    spec.host,
                    spec.port,
                    name=spec.name,
                    security_protocol=spec.security_protocol,
                    ssl_context=ctx,
                    principal_mapper=mapper,
                    idle_ms=int(s.listener_config(spec.name, "connections.max.idle.ms")),
                )
            )
    except BaseException:
        for listening in listenings:
            for sock in listening.sockets:
                sock.close()
        raise
    return listenings


def describe_listeners(
    listenings: Sequence[Listening], advertised: dict[str, tuple[str, int]]
) -> str:
    """``PLAINTEXT://127.0.0.1:9092 (advertised host:port), SSL://...`` for the start line."""
    parts = []
    for li in listenings:
        bound = li.sockets[0].getsockname()[0] if li.sockets else "?"
        text = f"{li.name}://{bound}:{li.port}"
        if li.name in advertised:
            host, port = advertised[li.name]
            text += f" (advertised {host}:{port})"
        parts.append(text)
    return ", ".join(parts)


class KafkaServer:
    """Accepts connections on the listening sockets and owns the set of live connections."""

    def __init__(
        self,
        listening: Listening | Sequence[Listening],
        dispatch: Dispatcher,
        *,
        max_request_size: int,
        queued_max_requests: int = 500,
        queued_max_request_bytes: int = -1,
        on_connection: Callable[[int], None] = lambda delta: None,
        on_refused: Callable[[], None] = lambda: None,
        on_request: RequestHook | None = None,
    ) -> None:
        # Every listener; ``listening`` (and ``port``) is the first, the default PLAINTEXT one.
        self.listenings = [listening] if isinstance(listening, Listening) else list(listening)
        self.listening = self.listenings[0]
        self.dispatch = dispatch
        self.max_request_size = max_request_size
        self.queue = RequestQueue(queued_max_requests, queued_max_request_bytes)
        self.on_connection = on_connection
        self.on_refused = on_refused
        self.on_request = on_request
        # Called with a closed connection's id (share sessions end with their connection).
        self.on_disconnect: list[Callable[[int], None]] = []
        # The SASL side of each SASL_PLAINTEXT/SASL_SSL listener, by listener name
        # (coordinator.security.sasl.SaslListener): its connections authenticate first.
        self.sasl: dict[str, SaslListener] = {}
        self.connections: set[Connection] = set()
        self.listeners: list[_Listener] = []
        self.refused = 0
        self._short = False  # refusing since the shortage was logged
        self._refused_in_episode = 0
        self._spare: int | None = None  # given up for a moment to refuse on EMFILE
        self._accepting: set[asyncio.Task[Any]] = set()
        self._conn_ids = itertools.count(1)
        self._sweeper: asyncio.TimerHandle | None = None  # the idle-connection sweep

    @property
    def port(self) -> int:
        return self.listening.port

    def context(self, listening: Listening) -> ServerContext:
        """What a connection accepted on ``listening`` is given (read per connection: the
        SASL side of a listener is attached after the server is built)."""
        sasl = None
        if listening.security_protocol.startswith("SASL_"):
            sasl = self.sasl.get(listening.name) or SaslListener(listening.name, {})
        return ServerContext(
            listener=listening.name,
            security_protocol=listening.security_protocol,
            tls=listening.ssl is not None,
            principal_mapper=listening.principal_mapper,
            idle_ms=listening.idle_ms,
            sasl=sasl,
            loop=asyncio.get_running_loop(),
            queue=self.queue,
            dispatch=self.dispatch,
            max_request_size=self.max_request_size,
            connections=self.connections,
            conn_ids=self._conn_ids,
            on_request=self.on_request,
            on_connection=self.on_connection,
            on_closed=self.listener_freed,
            on_disconnect=self.on_disconnect,
        )

    def start(self) -> None:
        """Start accepting (on the running loop)."""
        with contextlib.suppress(OSError):
            self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self.listeners = [
            _Listener(self, sock, listening)
            for listening in self.listenings
            for sock in listening.sockets
        ]
        # A quarter of the shortest connections.max.idle.ms: a quiet connection is closed
        # between 1 and 1.25 times its idle limit after its last activity.
        shortest_s = min(li.idle_ms for li in self.listenings) / 1000
        self._sweep_s = min(max(shortest_s / 4, 0.01), 30.0)
        self._sweeper = asyncio.get_running_loop().call_later(self._sweep_s, self._sweep)

    def _sweep(self) -> None:
        now = time.monotonic()
        for conn in list(self.connections):
            conn.expire_if_idle(now)
        self._sweeper = asyncio.get_running_loop().call_later(self._sweep_s, self._sweep)

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

    def adopt(self, conn: socket.socket, listening: Listening | None = None) -> None:
        if self._short:
            log.info(
                "accepting connections again (%d refused while short of file descriptors)",
                self._refused_in_episode,
            )
            self._short = False
            self._refused_in_episode = 0
        conn.setblocking(False)
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._connect(conn, listening or self.listening))
        self._accepting.add(task)
        task.add_done_callback(self._accepting.discard)

    async def _connect(self, conn: socket.socket, listening: Listening) -> None:
        loop = asyncio.get_running_loop()
        ctx = self.context(listening)
        if listening.ssl is None:
            try:
                await loop.connect_accepted_socket(lambda: KafkaConnection(ctx), conn)
            except OSError as exc:
                log.warning("could not set up an accepted connection: %s", exc)
                conn.close()
            return
        try:
            peer = conn.getpeername()
            # A second descriptor on the connection: the SSL protocol closes its own when the
            # handshake fails, and the alert saying why is then sent on this one.
            spare: socket.socket | None = conn.dup()
        except OSError:
            peer, spare = ("?", 0), None
        try:
            # Returns once the handshake is done; the connection is made only then.
            await loop.connect_accepted_socket(
                lambda: KafkaConnection(ctx),
                conn,
                ssl=listening.ssl,
                ssl_handshake_timeout=listening.idle_ms / 1000,
            )
        except (OSError, TimeoutError, EOFError, ssl.SSLError) as exc:
            # asyncio raises TimeoutError; uvloop aborts with ConnectionAbortedError("SSL
            # handshake is taking longer than ...").
            if isinstance(exc, TimeoutError) or "taking longer" in str(exc):
                reason = f"no TLS handshake within {listening.idle_ms} ms (connections.max.idle.ms)"
            else:
                reason = str(exc) or type(exc).__name__
            log.warning(
                "closing connection from %s:%s on listener %s: TLS handshake failed: %s",
                peer[0],
                peer[1],
                listening.name,
                reason,
            )
            conn.close()
            if spare is not None:
                await send_alert(spare, tls_alert(exc))
        except BaseException:  # cancelled (the server stops): the spare goes with it
            if spare is not None:
                spare.close()
            raise
        else:
            if spare is not None:
                spare.close()

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
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
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
            conn.close()
        # close() sends what is buffered first; a client that does not read is cut off.
        deadline = asyncio.get_running_loop().time() + 1.0
        while self.connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            conn.abort()
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None


ALERT_LINGER_S = 1.0  # how long a refused TLS client is given to read the alert and close


async def send_alert(sock: socket.socket, alert: bytes) -> None:
    """Send a refused handshake's TLS alert, then close once the client has (or after
    ``ALERT_LINGER_S``): closing with the client's bytes still unread here would answer with
    a reset, which can discard the alert before the client reads it."""
    loop = asyncio.get_running_loop()
    try:
        if alert:
            await loop.sock_sendall(sock, alert)
        sock.shutdown(socket.SHUT_WR)
        async with asyncio.timeout(ALERT_LINGER_S):
            while await loop.sock_recv(sock, 4096):
                pass
    except (OSError, TimeoutError):
        pass
    finally:
        sock.close()
