"""The SaslHandshake (v0-1) and SaslAuthenticate (v0-2) answers.

How this works: while a connection on a SASL listener authenticates, its ``SaslSession``
answers these two APIs itself (``handshake_response``/``authenticate_response`` build the
bodies). Once a connection is authenticated, or on a listener without SASL, the requests go
to the broker like any other and are answered as Kafka's KafkaApis answers them:
SaslHandshake with ILLEGAL_SASL_STATE, SaslAuthenticate with ILLEGAL_SASL_STATE and
"SaslAuthenticate request received after successful authentication" (a KIP-368
re-authentication starts in the transport before the broker sees the request).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coordinator.server.handler import ClientInfo
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import sasl_authenticate, sasl_handshake

__all__ = [
    "authenticate_response",
    "failed_message",
    "handshake_response",
    "sasl_authenticate_after_authentication",
    "sasl_handshake_after_authentication",
]


def handshake_response(error_code: int, mechanisms: Sequence[str]) -> Any:
    return sasl_handshake.Response(error_code=error_code, mechanisms=list(mechanisms))


def authenticate_response(
    auth_bytes: bytes = b"",
    *,
    error_code: int = ErrorCode.NO_ERROR,
    error_message: str | None = None,
    session_lifetime_ms: int = 0,
) -> Any:
    return sasl_authenticate.Response(
        error_code=error_code,
        error_message=error_message,
        auth_bytes=auth_bytes,
        session_lifetime_ms=session_lifetime_ms,
    )


def failed_message(mechanism: str, reauthenticating: bool) -> str:
    """Kafka's message for a failed exchange: the same whatever was wrong (user, password,
    message format), so a client learns nothing about which part failed."""
    what = "re-authentication" if reauthenticating else "authentication"
    return f"Authentication failed during {what} due to invalid credentials with SASL mechanism {mechanism}"


def sasl_handshake_after_authentication(header: RequestHeader, req: Any, client: ClientInfo) -> Any:
    return handshake_response(ErrorCode.ILLEGAL_SASL_STATE, [])


def sasl_authenticate_after_authentication(
    header: RequestHeader, req: Any, client: ClientInfo
) -> Any:
    return authenticate_response(
        error_code=ErrorCode.ILLEGAL_SASL_STATE,
        error_message="SaslAuthenticate request received after successful authentication",
    )
