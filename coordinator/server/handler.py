"""The handler contract: what a request handler is given and what it returns.

How this works: the transport decodes a request and calls the handler registered for its
API key (``dispatch``) as ``handler(header, body, client)``: the request header, the decoded
request body and the ``ClientInfo`` of the connection it came on. The handler returns a
``HandlerResult``, one of three kinds, told apart by the transport with a single type check:

* a response (the common case, answered at once): the API's generated response message
  (``protocol.messages.<api>.Response``), or ``bytes`` already encoded for the request's
  version (bodies that rarely change are cached so, e.g. ApiVersions, Metadata);
* a ``Deferred``: the answer comes later (a JoinGroup parked until the group rebalances, a
  commit or a produce waiting for its fsync, a long-polling Fetch). It wraps a future that
  completes with the response (or an ``Outcome``); the request keeps its place in the
  connection's order meanwhile. The future belongs to the request: if the connection
  closes first, the transport cancels it, and whoever completes it later must check
  ``done()`` first (a task running a coroutine sees ``CancelledError``). The future is an
  ``asyncio.Future`` (a task's, or one the handler completes) or a ``Pending``: the group
  runtime's, whose done-callbacks run inside ``set_result`` itself, so a round of commits
  made durable reaches the transport without one ``call_soon`` per request;
* an ``Outcome``: an answer that is not a response body, where Kafka sends none
  (``NO_RESPONSE``, a successful acks=0 Produce) or closes the connection
  (``CLOSE_CONNECTION``, a failed acks=0 Produce; responses to earlier requests go out
  first).

A handler that raises closes the connection with an ERROR line; handlers answer errors they
expect in the API's own error codes instead.

``ClientInfo`` is what a handler may know of the connection: the client id and address, the
listener and the authenticated principal.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections.abc import Callable, Coroutine, Generator
from dataclasses import Field, dataclass
from typing import Any, ClassVar, Final, Protocol, TypeAlias, final

from coordinator.security import ANONYMOUS, KafkaPrincipal
from protocol.framing import RequestHeader

log = logging.getLogger("kgc.server")


class Message(Protocol):
    """A generated protocol message (``protocol.messages.*``): a dataclass."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]


class Outcome(enum.Enum):
    """The answers that are not a response body."""

    NO_RESPONSE = "no response"  # Kafka does not answer (Produce with acks=0)
    CLOSE_CONNECTION = "close the connection"  # after the earlier responses are sent


NO_RESPONSE: Final = Outcome.NO_RESPONSE
CLOSE_CONNECTION: Final = Outcome.CLOSE_CONNECTION

# What a request is finally answered with.
Answer: TypeAlias = Message | bytes | Outcome


_PENDING, _DONE, _CANCELLED = 0, 1, 2


@final
class Pending:
    """A future completed by code on the loop thread, whose callbacks run synchronously.

    The part of ``asyncio.Future``'s interface the transport and callers use (``done``,
    ``cancelled``, ``result``, ``exception``, ``set_result``, ``set_exception``, ``cancel``,
    ``add_done_callback``, ``await``), without the loop: ``set_result`` (or
    ``set_exception``, ``cancel``) runs every done-callback before it returns, and a
    callback added to a done ``Pending`` runs at once. An asyncio future schedules each
    callback with ``call_soon`` instead: one loop hop per request, which is what a round of
    a hundred commits made durable would pay a hundred times. Whoever completes it must
    therefore be able to have those callbacks run there (the group runtime completes its
    replies from plain callbacks, never from inside a callback of its own state change).
    A callback that raises is logged and does not stop the others (asyncio logs it too).
    """

    __slots__ = ("_callbacks", "_exception", "_result", "_state")

    def __init__(self) -> None:
        self._state = _PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[Any], object]] | None = None

    def done(self) -> bool:
        return self._state != _PENDING

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def result(self) -> Any:
        if self._state == _CANCELLED:
            raise asyncio.CancelledError
        if self._state == _PENDING:
            raise asyncio.InvalidStateError("result is not set")
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self) -> BaseException | None:
        if self._state == _CANCELLED:
            raise asyncio.CancelledError
        if self._state == _PENDING:
            raise asyncio.InvalidStateError("exception is not set")
        return self._exception

    def set_result(self, result: Any) -> None:
        if self._state != _PENDING:
            raise asyncio.InvalidStateError("already done")
        self._result = result
        self._state = _DONE
        callbacks = self._callbacks
        if callbacks is not None:  # inlined ``_run_callbacks``: once per commit answered
            self._callbacks = None
            for fn in callbacks:
                try:
                    fn(self)
                except Exception:
                    log.exception("done-callback %r of a deferred answer failed", fn)

    def set_exception(self, exception: BaseException) -> None:
        if self._state != _PENDING:
            raise asyncio.InvalidStateError("already done")
        self._exception = exception
        self._state = _DONE
        self._run_callbacks()

    def cancel(self) -> bool:
        if self._state != _PENDING:
            return False
        self._state = _CANCELLED
        self._run_callbacks()
        return True

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        if self._state != _PENDING:
            self._call(fn)
        elif self._callbacks is None:
            self._callbacks = [fn]
        else:
            self._callbacks.append(fn)

    def _run_callbacks(self) -> None:
        callbacks, self._callbacks = self._callbacks, None
        if callbacks is not None:
            for fn in callbacks:
                self._call(fn)

    def _call(self, fn: Callable[[Any], object]) -> None:
        try:
            fn(self)
        except Exception:
            log.exception("done-callback %r of a deferred answer failed", fn)

    def __await__(self) -> Generator[Any, None, Any]:
        if self._state == _PENDING:
            # Awaited (tests, in-process callers): an asyncio future carries the wait; the
            # awaiting task cancelled cancels this too, as awaiting an asyncio future does.
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self.add_done_callback(functools.partial(_copy_to, fut))
            try:
                yield from fut.__await__()
            except asyncio.CancelledError:
                self.cancel()
                raise
        return self.result()


def _copy_to(fut: asyncio.Future[Any], pending: Pending) -> None:
    if fut.done():
        return
    if pending.cancelled():
        fut.cancel()
        return
    exc = pending.exception()
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(pending.result())


@final
class Deferred:
    """An answer that comes later: ``future`` completes with it.

    ``Deferred(future)`` for a future the handler completes itself (the group runtime
    completes its own ``Pending`` once the records are durable); ``Deferred.task(coro)``
    runs a coroutine that returns the answer. Awaiting a ``Deferred`` gives the answer
    (tests and in-process callers; the transport adds a callback instead).
    """

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[Answer] | Pending) -> None:
        self.future = future

    @staticmethod
    def task(coro: Coroutine[Any, Any, Answer]) -> Deferred:
        return Deferred(asyncio.get_running_loop().create_task(coro))

    def __await__(self) -> Generator[Any, None, Answer]:
        return self.future.__await__()


HandlerResult: TypeAlias = Message | bytes | Deferred | Outcome


@dataclass(slots=True)
class ClientInfo:
    """What a handler may want to know about the connection a request came on."""

    client_id: str
    host: str
    port: int
    conn_id: int
    java_host: str = ""  # the host as Kafka reports it (InetAddress.toString(): "/127.0.0.1")
    # Who the connection authenticated as (TLS client certificate or SASL), and the
    # listener it came in on (Metadata/FindCoordinator answer with that listener's address).
    principal: KafkaPrincipal = ANONYMOUS
    listener: str = "PLAINTEXT"
    # READ-on-group decisions for this connection's principal and host, valid while the
    # authorizer's epoch is ``acl_epoch`` (apis/authorize.py: one dict lookup per heartbeat).
    group_reads: dict[str, bool] | None = None
    acl_epoch: int = -1

    def __post_init__(self) -> None:
        self.java_host = "/" + self.host


Handler = Callable[[RequestHeader, Any, ClientInfo], HandlerResult]
# (api key, version, answer, perf_counter at arrival), once per answered request.
RequestHook = Callable[[int, int, Any, float], None]
