"""What a request handler is given and what it returns.

How this works: the transport decodes a request and calls the handler registered for its
API key with the request header, the decoded body and the ``ClientInfo`` of the connection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from protocol.framing import RequestHeader


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
