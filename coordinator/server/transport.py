"""The asyncio protocol over a connection: the socket's side of ``connection.Connection``.

How this works: the listener makes one ``KafkaConnection`` per accepted socket (after the TLS
handshake on a TLS listener). It is a ``Connection`` -- every rule about the bytes, inherited,
so a request costs no call more than the rules themselves -- plus what needs the socket and
the event loop: ``connection_made`` attaches the asyncio transport, turns Nagle off, records
the peer's address as Java writes it, registers the connection with its server and, on a
TLS listener, names the client by its certificate; ``connection_lost`` gives back what the
connection held and unregisters it. Reading, writing, pausing and the delayed close after a
failed authentication go through the transport and the loop the ``Connection`` was given.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import time
from typing import cast

from coordinator.security.principal_mapping import SslPrincipalMapper, principal_from_certificate
from coordinator.server.connection import Connection, ServerContext, Transport

__all__ = ["KafkaConnection", "ServerContext", "java_host_address"]

log = logging.getLogger("kgc.server")


def java_host_address(host: str) -> str:
    """A peer address as Java's ``InetAddress.getHostAddress`` writes it, which is what
    Kafka compares an ACL's host with and reports as a member's client host: IPv6 in full
    without zero compression (``0:0:0:0:0:0:0:1``, not ``::1``), an IPv4-mapped IPv6
    address as the IPv4 address it maps."""
    if ":" not in host:
        return host
    address, _, scope = host.partition("%")
    try:
        ip = ipaddress.IPv6Address(address)
    except ValueError:
        return host
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    text = ":".join(f"{int.from_bytes(ip.packed[i : i + 2], 'big'):x}" for i in range(0, 16, 2))
    return f"{text}%{scope}" if scope else text


class KafkaConnection(Connection, asyncio.Protocol):
    """A ``Connection`` on an asyncio socket (``data_received``, ``pause_writing`` and
    ``resume_writing`` are the ``Connection``'s own)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transport is not an asyncio.Transport subclass; both have its methods.
        self.transport = cast(Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.host, self.port = java_host_address(str(peer[0])), int(peer[1])
        self.quiet_since = time.monotonic()  # a TLS handshake before this is not idleness
        self.ctx.connections.add(self)
        self.ctx.on_connection(+1)
        if self.ctx.tls:
            self._tls_principal(transport)

    def _tls_principal(self, transport: asyncio.BaseTransport) -> None:
        """The principal of a TLS client: its certificate's subject through the listener's
        ``ssl.principal.mapping.rules`` (ANONYMOUS without a certificate). A subject no
        rule maps fails the authentication: the connection closes (Kafka's behaviour)."""
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der:
            return
        mapper = self.ctx.principal_mapper or SslPrincipalMapper()
        try:
            self.principal = principal_from_certificate(der, mapper)
        except Exception as exc:
            log.warning(
                "closing connection from %s:%d on listener %s: no principal from the client "
                "certificate: %s",
                self.host,
                self.port,
                self.listener,
                exc,
            )
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_timer()
        self.ctx.connections.discard(self)
        self.ctx.on_connection(-1)
        self._give_back_all()
        self.ctx.on_closed()
        for hook in self.ctx.on_disconnect:
            hook(self.conn_id)
