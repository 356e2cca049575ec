"""What a client is told when its OAUTHBEARER token is refused: Kafka's words.

Kafka's ``OAuthBearerSaslServer`` answers a token its validator refuses with RFC 7628's error
challenge (``{"status":"invalid_token"}``; ``{"status":"insufficient_scope",
"scope":"[admin]"}`` when the unsecured validator misses a required scope), and when the
client acknowledges it with ``\\x01`` fails the exchange with a ``SaslAuthenticationException``
carrying that same JSON, which the broker sends as SaslAuthenticate's error message (Kafka's
Java client shows it as the exception's message). An authorization id that is not the
token's principal fails at once with its own message. Other mechanisms' failures (and a
first message that does not parse) keep the message that reveals nothing.

Checked on the mechanism (``AuthenticationError.client_message``) and through a real
listener (the SaslAuthenticate response a raw client reads).
"""

from __future__ import annotations

import asyncio
import struct
import time

import jwt
import pytest

from coordinator.apis import dispatcher
from coordinator.security import AuthenticationError
from coordinator.security.oauthbearer import OAuthBearerMechanism
from coordinator.security.oauthbearer_unsecured import UnsecuredJwtValidator
from coordinator.security.sasl import SaslListener
from coordinator.server.listener import KafkaServer, listen
from protocol.framing import RequestHeader, decode_response, encode_request
from protocol.messages import sasl_authenticate, sasl_handshake

SCOPE_REFUSED = '{"status":"insufficient_scope", "scope":"[admin]"}'
INVALID = '{"status":"invalid_token"}'


def mechanism(**options: str) -> OAuthBearerMechanism:
    return OAuthBearerMechanism(UnsecuredJwtValidator(options))


def token(**claims: object) -> str:
    now = int(time.time())
    body = {"sub": "bob", "iat": now - 5, "exp": now + 600, **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, None, algorithm="none")


def first_message(jwt_: str, authzid: str = "") -> bytes:
    a = f"a={authzid}" if authzid else ""
    return f"n,{a},\x01auth=Bearer {jwt_}\x01\x01".encode()


def refusal(server_mechanism: OAuthBearerMechanism, message: bytes) -> tuple[bytes, str | None]:
    """(the error challenge, the client message of the failure on the client's \\x01)."""
    server = server_mechanism.server()
    challenge = server.evaluate(message)
    with pytest.raises(AuthenticationError) as failed:
        server.evaluate(b"\x01")
    return challenge, getattr(failed.value, "client_message", None)


def test_missing_scope_is_insufficient_scope_with_the_required_scope() -> None:
    required = mechanism(unsecuredValidatorRequiredScope="admin")
    assert refusal(required, first_message(token())) == (SCOPE_REFUSED.encode(), SCOPE_REFUSED)
    # Several required scopes are listed as Java prints a list.
    two = mechanism(unsecuredValidatorRequiredScope="admin ops")
    challenge, message = refusal(two, first_message(token(scope="admin")))
    assert message == '{"status":"insufficient_scope", "scope":"[admin, ops]"}'
    assert challenge == message.encode()


def test_other_refusals_are_invalid_token() -> None:
    expired = first_message(token(iat=int(time.time()) - 900, exp=int(time.time()) - 600))
    assert refusal(mechanism(), expired) == (INVALID.encode(), INVALID)


def test_authorization_id_not_the_principal_says_so() -> None:
    server = mechanism().server()
    with pytest.raises(AuthenticationError) as failed:
        server.evaluate(first_message(token(), authzid="admin"))
    assert getattr(failed.value, "client_message", None) == (
        "Authentication failed: Client requested an authorization id (admin) that is "
        "different from the token's principal name (bob)"
    )


def test_unparsable_first_message_reveals_nothing() -> None:
    with pytest.raises(AuthenticationError) as failed:
        mechanism().server().evaluate(b"n,,\x01nothing\x01\x01")
    assert getattr(failed.value, "client_message", None) is None


def frame(api_key: int, version: int, correlation: int, body: object) -> bytes:
    return encode_request(RequestHeader(api_key, version, correlation, "t"), body)


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def test_the_listener_sends_the_json_as_the_error_message() -> None:
    listening = await listen(
        "127.0.0.1", 0, name="SASL_PLAINTEXT", security_protocol="SASL_PLAINTEXT"
    )
    server = KafkaServer([listening], dispatcher({}), max_request_size=1 << 20)
    server.sasl["SASL_PLAINTEXT"] = SaslListener(
        listener="SASL_PLAINTEXT",
        mechanisms={"OAUTHBEARER": mechanism(unsecuredValidatorRequiredScope="admin")},
        failed_authentication_delay_ms=0,
    )
    server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listening.port)
        writer.write(
            frame(sasl_handshake.API_KEY, 1, 1, sasl_handshake.Request(mechanism="OAUTHBEARER"))
        )
        await read_frame(reader)
        answers = []
        for i, auth in enumerate((first_message(token()), b"\x01"), start=2):
            req = sasl_authenticate.Request(auth_bytes=auth)
            writer.write(frame(sasl_authenticate.API_KEY, 2, i, req))
            data = await read_frame(reader)
            answers.append(decode_response(sasl_authenticate.API_KEY, 2, data)[1])
        writer.close()
        challenge, failed = answers
        assert (challenge.error_code, challenge.auth_bytes) == (0, SCOPE_REFUSED.encode())
        assert (failed.error_code, failed.error_message) == (58, SCOPE_REFUSED)
    finally:
        await server.stop(grace_s=0.5)
