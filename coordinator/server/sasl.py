"""SASL on a connection: the per-connection state machine (Kafka's SaslServerAuthenticator)
and the SaslHandshake/SaslAuthenticate answers.

How this works: on a SASL listener every frame a connection sends before it is
authenticated goes to its ``SaslSession`` (``receive``), which answers with a ``Step``: a
reply frame to send in order and what happens next (go on, fail, close). The states follow
Kafka's:

* first, ApiVersions (once) or SaslHandshake; then SaslHandshake only. Anything else, or
  bytes that are not a Kafka request (a TLS or HTTP client, a client with the wrong
  security.protocol), closes the connection at once, without an answer;
* SaslHandshake names a mechanism: an enabled one is answered with the enabled list and
  the exchange begins; another one is answered UNSUPPORTED_SASL_MECHANISM and fails.
  Handshake v1 means the tokens come in SaslAuthenticate requests; v0 means they come
  unframed (a size-prefixed token each way, no request header: Kafka 0.10 clients);
* SaslAuthenticate carries the mechanism's tokens; any other request fails the exchange.
  A failed exchange answers SASL_AUTHENTICATION_FAILED with Kafka's message that says only
  which mechanism failed (unframed: no answer), and the connection sends it and closes after
  ``connection.failed.authentication.delay.ms`` (the connection is not read meanwhile);
* on success the session lifetime (KIP-368) is the smaller of the credential's own
  (OAUTHBEARER's token) and ``connections.max.reauth.ms`` for the mechanism, 0 meaning none;
  SaslAuthenticate v1+ tells the client. A request after the lifetime closes the connection
  (``expired``), unless the client re-authenticated: a SaslHandshake on an authenticated
  connection whose session has a lifetime starts re-authentication (``begin_reauth``; at
  most once a second, as Kafka), which must use the same mechanism and end with the same
  principal.

The session never touches the socket; the connection (``connection.py``) sends, delays and
closes. Nothing here blocks: the mechanisms (``coordinator/security/sasl``: what a listener
authenticates with) look credentials up in memory.

Once a connection is authenticated, or on a listener without SASL, SaslHandshake and
SaslAuthenticate go to their handlers like any other request and are answered as Kafka's
KafkaApis answers them (``sasl_handshake_after_authentication``,
``sasl_authenticate_after_authentication``): SaslHandshake with ILLEGAL_SASL_STATE,
SaslAuthenticate with ILLEGAL_SASL_STATE and "SaslAuthenticate request received after
successful authentication" (a KIP-368 re-authentication starts in the connection before any
handler sees the request).
"""

from __future__ import annotations

import enum
import logging
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from coordinator.security import AuthenticationError, KafkaPrincipal, SaslServer
from coordinator.security.sasl import SaslListener
from coordinator.server.dispatch import Dispatcher
from coordinator.server.handler import ClientInfo
from protocol.error_responses import COORDINATOR_KEYS, error_response
from protocol.errors import ErrorCode
from protocol.framing import (
    API_VERSIONS_KEY,
    RequestHeader,
    UnknownApi,
    decode_header,
    decode_request,
    encode_body,
    encode_response,
)
from protocol.messages import BY_KEY, api_versions, sasl_authenticate, sasl_handshake
from protocol.primitives import DecodeError

__all__ = [
    "Next",
    "SaslSession",
    "Step",
    "authenticate_response",
    "failed_message",
    "handshake_response",
    "sasl_authenticate_after_authentication",
    "sasl_handshake_after_authentication",
]

log = logging.getLogger("kgc.security.sasl")

_SIZE = struct.Struct(">i")
MIN_REAUTH_INTERVAL_NS = 1_000_000_000  # Kafka's MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS
_HANDSHAKE_VERSIONS = (0, 1)
_AUTHENTICATE_VERSIONS = (0, 2)


class Next(enum.Enum):
    CONTINUE = "continue"  # send the reply (if any), read on
    FAIL = "fail"  # authentication failed: send the reply after the delay, then close
    CLOSE = "close"  # not a conversation we hold: close now, no reply


class Step(NamedTuple):
    reply: bytes | None  # a whole frame, size prefix included
    next: Next = Next.CONTINUE
    reason: str = ""  # why it failed or closed, for the server's log only


class _State(enum.Enum):
    VERSIONS_OR_HANDSHAKE = "versions or handshake"
    HANDSHAKE = "handshake"
    REAUTH_HANDSHAKE = "re-authentication handshake"
    REAUTH_BAD_MECHANISM = "re-authentication with another mechanism"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


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


def _close(reason: str) -> Step:
    return Step(None, Next.CLOSE, reason)


class SaslSession:
    def __init__(
        self,
        listener: SaslListener,
        dispatch: Dispatcher,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.listener = listener
        self.dispatch = dispatch
        self.clock_ns = clock_ns
        self.state = _State.VERSIONS_OR_HANDSHAKE
        self.framed = False  # SaslHandshake v1+: tokens in SaslAuthenticate requests
        self.mechanism: str | None = None
        self.server: SaslServer | None = None
        self.principal: KafkaPrincipal | None = None
        self.expires_ns: int | None = None  # session end (KIP-368), None for none
        self.previous: tuple[str, KafkaPrincipal] | None = None  # while re-authenticating
        self.last_reauth_ns = 0
        self.reauthentications = 0

    # -- what the connection asks
    @property
    def authenticated(self) -> bool:
        return self.state is _State.COMPLETE

    @property
    def reauthenticating(self) -> bool:
        return self.previous is not None

    def expired(self, now_ns: int | None = None) -> bool:
        expires = self.expires_ns
        return expires is not None and (now_ns or self.clock_ns()) - expires > 0

    def begin_reauth(self) -> bool:
        """A SaslHandshake arrived on an authenticated connection: start re-authenticating
        if the session has a lifetime and the last attempt is a second old (Kafka's
        maybeBeginServerReauthentication); else the broker answers it (ILLEGAL_SASL_STATE)."""
        if self.state is not _State.COMPLETE or self.expires_ns is None:
            return False
        now = self.clock_ns()
        if self.last_reauth_ns and now - self.last_reauth_ns < MIN_REAUTH_INTERVAL_NS:
            return False
        assert self.mechanism is not None and self.principal is not None
        self.last_reauth_ns = now
        self.previous = (self.mechanism, self.principal)
        self.state = _State.REAUTH_HANDSHAKE
        self.server = None
        return True

    def receive(self, frame: bytes, client: ClientInfo) -> Step:
        """One frame sent before the connection is (re-)authenticated."""
        state = self.state
        if state is _State.AUTHENTICATE:
            return self._token(frame) if self.framed else self._unframed_token(frame)
        if state is _State.REAUTH_BAD_MECHANISM:
            assert self.previous is not None
            return self._fail(
                None,
                f"SASL mechanism {self.mechanism!r} requested by client is not supported for "
                f"re-authentication of mechanism {self.previous[0]!r}",
            )
        if state in (_State.COMPLETE, _State.FAILED):
            return _close(f"unexpected frame in SASL state {state.value}")
        return self._kafka_request(frame, client)

    # -- ApiVersions and SaslHandshake
    def _kafka_request(self, frame: bytes, client: ClientInfo) -> Step:
        try:
            header, _ = decode_header(frame)
        except (DecodeError, struct.error) as exc:
            return _close(
                "invalid request, potential reasons: kafka client configured with the wrong "
                f"security protocol, or not a kafka client ({exc})"
            )
        key, version = header.api_key, header.api_version
        if key == API_VERSIONS_KEY:
            return self._api_versions(frame, header, client)
        if key != sasl_handshake.API_KEY:
            return _close(f"unexpected Kafka request of type {key} during SASL handshake")
        if not _HANDSHAKE_VERSIONS[0] <= version <= _HANDSHAKE_VERSIONS[1]:
            return _close(f"unsupported SaslHandshake version {version}")
        try:
            _, req = decode_request(frame)
        except (UnknownApi, DecodeError) as exc:
            return _close(f"malformed SaslHandshake: {exc}")
        return self._handshake(header, req.mechanism)

    def _api_versions(self, frame: bytes, header: RequestHeader, client: ClientInfo) -> Step:
        if self.state is not _State.VERSIONS_OR_HANDSHAKE:
            return _close(f"unexpected ApiVersions request in SASL state {self.state.value}")
        cid = header.correlation_id
        lo, hi = self.dispatch.supported[API_VERSIONS_KEY]
        if not lo <= header.api_version <= hi:
            # Answered UNSUPPORTED_VERSION; the client retries lower (the state stays).
            return Step(self.dispatch.unsupported_api_versions(cid))
        try:
            _, req = decode_request(frame)
        except UnknownApi:
            return Step(self.dispatch.unsupported_api_versions(cid))
        except DecodeError as exc:
            return _close(f"malformed ApiVersions: {exc}")
        body = self.dispatch.api_versions(header, req, client)
        self.state = _State.HANDSHAKE
        return Step(encode_response(API_VERSIONS_KEY, header.api_version, cid, body))

    def _handshake(self, header: RequestHeader, mechanism: str) -> Step:
        enabled = list(self.listener.mechanisms)
        self.framed = header.api_version >= 1

        def reply(code: int) -> bytes:
            return encode_response(
                sasl_handshake.API_KEY,
                header.api_version,
                header.correlation_id,
                handshake_response(code, enabled),
            )

        if mechanism not in self.listener.mechanisms:
            return self._fail(
                reply(ErrorCode.UNSUPPORTED_SASL_MECHANISM),
                f"unsupported SASL mechanism {mechanism!r} (enabled: {', '.join(enabled)})",
            )
        self.mechanism = mechanism
        if self.previous is not None and self.previous[0] != mechanism:
            # Kafka answers the handshake and fails at the next token.
            self.state = _State.REAUTH_BAD_MECHANISM
        else:
            self.server = self.listener.mechanisms[mechanism].server()
            self.state = _State.AUTHENTICATE
        return Step(reply(ErrorCode.NO_ERROR))

    # -- the mechanism's tokens
    def _token(self, frame: bytes) -> Step:
        try:
            header, _ = decode_header(frame)
        except (DecodeError, struct.error) as exc:
            return _close(f"malformed request during SASL authentication: {exc}")
        key, version = header.api_key, header.api_version
        if key != sasl_authenticate.API_KEY:
            reason = f"unexpected Kafka request of type {key} during SASL authentication"
            return self._fail(self._illegal_state_reply(header, frame), reason)
        if not _AUTHENTICATE_VERSIONS[0] <= version <= _AUTHENTICATE_VERSIONS[1]:
            return _close(f"unsupported SaslAuthenticate version {version}")
        try:
            _, req = decode_request(frame)
        except (UnknownApi, DecodeError) as exc:
            return _close(f"malformed SaslAuthenticate: {exc}")

        def reply(body: Any) -> bytes:
            return encode_response(key, version, header.correlation_id, body)

        mechanism = self.mechanism or "?"
        try:
            answer, lifetime_ms = self._evaluate(req.auth_bytes)
        except _Failed as exc:
            message = exc.client_message or failed_message(mechanism, self.reauthenticating)
            failed = authenticate_response(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=message
            )
            return self._fail(reply(failed), exc.reason)
        return Step(reply(authenticate_response(answer, session_lifetime_ms=lifetime_ms)))

    def _unframed_token(self, frame: bytes) -> Step:
        try:
            answer, _ = self._evaluate(frame)
        except _Failed as exc:
            return self._fail(None, exc.reason)  # v0 has no way to say why
        return Step(_SIZE.pack(len(answer)) + answer)

    def _evaluate(self, token: bytes) -> tuple[bytes, int]:
        """Feed the token to the mechanism: its answer and, once complete, the session
        lifetime to report (0 = none). Raises ``_Failed``."""
        server, mechanism = self.server, self.mechanism
        assert server is not None and mechanism is not None
        try:
            answer = server.evaluate(token)
        except AuthenticationError as exc:
            raise _Failed(str(exc), exc.client_message) from None
        except Exception as exc:  # a mechanism's bug must not take the connection's loop down
            log.exception("SASL mechanism %s failed on a token", mechanism)
            raise _Failed(f"mechanism error: {exc!r}") from None
        if not server.complete:
            return answer, 0
        principal = server.principal
        if self.previous is not None and self.previous[1] != principal:
            old = self.previous[1]
            raise _Failed(
                "principal changed during re-authentication",
                f"Cannot change principals during re-authentication from "
                f"{old.principal_type}.{old.name}: {principal.principal_type}.{principal.name}",
            )
        lifetime = self._lifetime_ms(server.session_lifetime_ms)
        now = self.clock_ns()
        self.expires_ns = now + lifetime * 1_000_000 if lifetime is not None else None
        self.principal = principal
        self.server = None
        if self.previous is not None:
            self.reauthentications += 1
        self.previous = None
        self.state = _State.COMPLETE
        self.listener.on_authentication(self.listener.listener, mechanism, True)
        return answer, lifetime or 0

    def _lifetime_ms(self, credential_ms: int | None) -> int | None:
        """Kafka's ReauthInfo.calcCompletionTimesAndReturnSessionLifetimeMs."""
        assert self.mechanism is not None
        max_reauth = self.listener.reauth_ms.get(self.mechanism, 0)
        if credential_ms is None and max_reauth <= 0:
            return None
        if credential_ms is None:
            return max(0, max_reauth)
        if max_reauth <= 0:
            return max(0, credential_ms)
        return max(0, min(credential_ms, max_reauth))

    def _illegal_state_reply(self, header: RequestHeader, frame: bytes) -> bytes | None:
        """Kafka answers a request other than SaslAuthenticate during the exchange with
        that request's error response (ILLEGAL_SASL_STATE), then closes. kgc builds it for
        every API whose answer can carry the code as a whole: the group APIs in their own
        shape, the others through their top-level ``error_code``. An API whose answer has
        none (Produce, Metadata, ...), or a request kgc cannot parse, gets the close alone."""
        key, version, cid = header.api_key, header.api_version, header.correlation_id
        code = ErrorCode.ILLEGAL_SASL_STATE
        if key == API_VERSIONS_KEY:
            lo, hi = self.dispatch.supported[API_VERSIONS_KEY]
            if lo <= version <= hi:
                return encode_response(key, version, cid, api_versions.Response(error_code=code))
            return None
        if key == sasl_handshake.API_KEY:
            if version <= _HANDSHAKE_VERSIONS[1]:
                return encode_response(key, version, cid, handshake_response(code, []))
            return None
        lo, hi = self.dispatch.supported.get(key, (0, -1))
        if not lo <= version <= hi:
            return None
        try:
            _, req = decode_request(frame)
        except (UnknownApi, DecodeError):
            return None
        if key in COORDINATOR_KEYS:
            body = error_response(key, version, req, code)
        else:
            response = BY_KEY[key].Response
            if "error_code" not in response.__dataclass_fields__:
                return None
            body = response(error_code=code)
            # The dataclass holds every version's fields: this version must carry the code.
            if encode_body(key, version, body) == encode_body(key, version, response()):
                return None
        return encode_response(key, version, cid, body)

    def _fail(self, reply: bytes | None, reason: str) -> Step:
        self.state = _State.FAILED
        self.server = None
        self.listener.on_authentication(self.listener.listener, self.mechanism or "", False)
        return Step(reply, Next.FAIL, reason)


class _Failed(Exception):
    def __init__(self, reason: str, client_message: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason  # for the server's log
        self.client_message = client_message  # None: Kafka's message that reveals nothing
