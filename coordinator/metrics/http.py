"""The metrics' HTTP exposition: prometheus_client's WSGI app on a daemon thread.

How this works: ``Metrics.serve`` (registry.py) runs prometheus_client's WSGI app
(``make_wsgi_app``: OpenMetrics when the Accept header asks for it, gzip when Accept-Encoding
allows, ``name[]`` filtering) on wsgiref's threading server in a daemon thread, so formatting
and compressing a large scrape never run on the event loop. Collection does: the HTTP thread
hands the loop one coroutine (``run_coroutine_threadsafe``, ``LoopRegistry``) that refreshes
the lag table in slices and then collects every family, so collectors read the group core and
the logs from the thread that mutates them (no locks, no torn reads) and the thread formats
the finished families (0.3-0.6 s for 10,000 lag series on a loaded 2-core machine).
``/healthz`` answers ``ok`` once the loop has run a no-op (a stuck loop fails it, as it fails
a scrape: 503 after ``SCRAPE_TIMEOUT_S``).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.core import Metric
from prometheus_client.exposition import ThreadingWSGIServer

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

# A scrape waits this long for the event loop to collect (503 past it: the loop is stuck).
SCRAPE_TIMEOUT_S = 10.0


class MetricsUnavailableError(RuntimeError):
    """The event loop did not collect in time (stuck, or stopped)."""


class LoopRegistry:
    """What prometheus_client's exposition reads: ``collect`` runs ``collect_families``
    (``Metrics.collect``) on the event loop and waits for it on the HTTP thread."""

    def __init__(
        self,
        collect_families: Callable[[], Coroutine[Any, Any, list[Metric]]],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.collect_families = collect_families
        self.loop = loop

    def collect(self) -> Iterable[Metric]:
        try:
            future = asyncio.run_coroutine_threadsafe(self.collect_families(), self.loop)
        except RuntimeError as e:  # the loop is closed
            raise MetricsUnavailableError(str(e)) from None
        try:
            return future.result(SCRAPE_TIMEOUT_S)
        except TimeoutError:
            future.cancel()
            raise MetricsUnavailableError(
                f"the event loop did not collect within {SCRAPE_TIMEOUT_S:g} s"
            ) from None

    def restricted_registry(self, names: Iterable[str]) -> _Restricted:
        """``?name[]=...``: only the samples named (prometheus_client's query parameter)."""
        return _Restricted(self, frozenset(names))


class _Restricted:
    def __init__(self, registry: LoopRegistry, names: frozenset[str]) -> None:
        self.registry = registry
        self.names = names

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            samples = [s for s in family.samples if s.name in self.names]
            if samples:
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = samples
                yield kept


def routes(
    metrics_app: Callable[[WSGIEnvironment, StartResponse], Iterable[bytes]],
    loop_alive: Callable[[], bool],
) -> Callable[[WSGIEnvironment, StartResponse], Iterable[bytes]]:
    """``/healthz`` (the loop answers), everything else prometheus_client's app; a scrape
    the loop cannot collect is a 503, not a traceback."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz":
            ok = loop_alive()
            start_response(
                "200 OK" if ok else "503 Service Unavailable",
                [("Content-Type", "text/plain; charset=utf-8")],
            )
            return [b"ok\n" if ok else b"event loop not responding\n"]
        try:
            return metrics_app(environ, start_response)
        except MetricsUnavailableError as e:
            start_response(
                "503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8")]
            )
            return [f"{e}\n".encode()]

    return app


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def http_server(
    host: str, port: int, app: Callable[[WSGIEnvironment, StartResponse], Iterable[bytes]]
) -> WSGIServer:
    """wsgiref's threading server (prometheus_client's) bound to ``host``: IPv6 for an
    IPv6 host ("::"), IPv4 otherwise."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    server_class = type(
        "MetricsHTTPServer", (ThreadingWSGIServer,), {"address_family": infos[0][0]}
    )
    return make_server(host, port, app, server_class, handler_class=_QuietHandler)
