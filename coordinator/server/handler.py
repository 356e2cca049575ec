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
  ``done()`` first (a task running a coroutine sees ``CancelledError``);
* an ``Outcome``: an answer that is not a response body, where Kafka sends none
  (``NO_RESPONSE``, a successful acks=0 Produce) or closes the connection
  (``CLOSE_CONNECTION``, a failed acks=0 Produce; responses to earlier requests go out
  first).

A handler that raises closes the connection with an ERROR line; handlers answer errors they
expect in the API's own error codes instead.

This is where authentication will plug in: ``ClientInfo`` is what a handler may know of
the connection (today the client id and address; an authenticated principal later).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Coroutine, Generator
from dataclasses import Field, dataclass
from typing import Any, ClassVar, Final, Protocol, TypeAlias, final

from coordinator.security import ANONYMOUS, KafkaPrincipal
from protocol.framing import RequestHeader


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


@final
class Deferred:
    """An answer that comes later: ``future`` completes with it.

    ``Deferred(future)`` for a future the handler completes itself (the group runtime
    completes its own once the records are durable); ``Deferred.task(coro)`` runs a
    coroutine that returns the answer. Awaiting a ``Deferred`` gives the answer (tests
    and in-process callers; the transport adds a callback instead).
    """

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[Answer]) -> None:
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
    # authorizer's epoch is ``acl_epoch`` (server/authz.py: one dict lookup per heartbeat).
    group_reads: dict[str, bool] | None = None
    acl_epoch: int = -1

    def __post_init__(self) -> None:
        self.java_host = "/" + self.host


Handler = Callable[[RequestHeader, Any, ClientInfo], HandlerResult]
# (api key, version, answer, perf_counter at arrival), once per answered request.
RequestHook = Callable[[int, int, Any, float], None]
