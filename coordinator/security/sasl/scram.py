"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), as Kafka's ScramSaslServer.

How this works: two client messages, two server answers.

1. client-first ``n,[a=authzid],n=<user>,r=<client nonce>[,ext=value]*``: the server looks
   the user's credential up in the ``CredentialStore`` and answers server-first
   ``r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>``.
2. client-final ``c=<channel binding>,r=<nonce>[,ext]*,p=<base64 proof>``: the server checks
   the nonce, recovers ``ClientKey = proof XOR HMAC(StoredKey, AuthMessage)`` and accepts when
   ``H(ClientKey) == StoredKey``; it answers server-final ``v=<HMAC(ServerKey, AuthMessage)>``
   so the client can check the server knew the credential too.

``AuthMessage`` is client-first-bare + "," + server-first + "," + client-final-without-proof,
taken from the bytes the client sent (the client signed those). The message grammar is
Kafka's (ScramMessages): gs2 header ``n`` only (no channel binding), ASCII user names with
``=2C``/``=3D`` escapes, extensions ``name=value`` (Kafka knows ``tokenauth``; kgc has no
delegation tokens, so a token authentication always fails). Passwords are not SASLprep'ed
(Kafka uses the UTF-8 bytes).

An unknown user is not refused at the first message, as Kafka does: the server answers a
made-up server-first (a salt derived from the user name with a per-process secret, so it is
the same on every attempt, and the default iterations) and the exchange fails at the proof,
exactly where a wrong password fails. A client cannot tell the two apart, by answer or by
round.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from coordinator.security import (
    AuthenticationError,
    CredentialStore,
    KafkaPrincipal,
    ScramCredential,
)

__all__ = [
    "MECHANISMS",
    "MIN_ITERATIONS",
    "ScramFormatter",
    "ScramMechanism",
    "ScramSaslServer",
    "credential",
]

MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# The formatter also knows SHA-1, for RFC 5802's test vector; it is never offered.
_HASHES = {"SCRAM-SHA-1": "sha1", **MECHANISMS}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism minIterations (both mechanisms)
DEFAULT_ITERATIONS = 4096

# Kafka's ScramMessages grammar; Java's [a&&[^b]] classes written out.
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_B64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?:m={_VALUE},)?"
    rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_B64}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS})),"
    rf"p=(?P<proof>{_B64})"
)
# A process-wide secret for made-up salts: stable per user within a run, unguessable outside.
_MOCK_SECRET = secrets.token_bytes(32)


class ScramFormatter:
    """RFC 5802's functions for one hash (Kafka's ScramFormatter)."""

    def __init__(self, mechanism: str) -> None:
        try:
            self.hash_name = _HASHES[mechanism]
        except KeyError:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}") from None
        self.mechanism = mechanism
        self.digest_size = hashlib.new(self.hash_name).digest_size

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.digest(key, data, self.hash_name)

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hi(self, password: bytes, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password, salt, iterations)

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return self.hi(password.encode("utf-8"), salt, iterations)

    def client_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Client Key")

    def stored_key(self, client_key: bytes) -> bytes:
        return self.hash(client_key)

    def server_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Server Key")

    def client_signature(self, stored_key: bytes, auth_message: bytes) -> bytes:
        return self.hmac(stored_key, auth_message)

    def server_signature(self, server_key: bytes, auth_message: bytes) -> bytes:
        return self.hmac(server_key, auth_message)

    @staticmethod
    def xor(a: bytes, b: bytes) -> bytes:
        if len(a) != len(b):
            raise ValueError("arguments of different lengths")
        return bytes(x ^ y for x, y in zip(a, b, strict=True))

    def client_proof(self, salted_password: bytes, auth_message: bytes) -> bytes:
        """What a client sends (tests and clients; the server only checks it)."""
        client_key = self.client_key(salted_password)
        return self.xor(
            client_key, self.client_signature(self.stored_key(client_key), auth_message)
        )

    def credential(self, password: str, salt: bytes, iterations: int) -> ScramCredential:
        salted = self.salted_password(password, salt, iterations)
        return ScramCredential(
            mechanism=self.mechanism,
            salt=salt,
            stored_key=self.stored_key(self.client_key(salted)),
            server_key=self.server_key(salted),
            iterations=iterations,
        )


def credential(
    mechanism: str,
    password: str,
    *,
    salt: bytes | None = None,
    iterations: int = DEFAULT_ITERATIONS,
) -> ScramCredential:
    """A credential for ``password`` (a random salt unless given)."""
    return ScramFormatter(mechanism).credential(
        password, salt if salt is not None else secrets.token_bytes(32), iterations
    )


def username(saslname: str) -> str:
    """RFC 5802's saslname escapes undone (Kafka's ScramFormatter.username)."""
    return saslname.replace("=2C", ",").replace("=3D", "=")


def _extensions(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(",")[1:]:
        key, _, value = item.partition("=")
        out[key] = value
    return out


@dataclass(slots=True)
class _First:
    bare: str
    user: str
    authzid: str
    nonce: str
    extensions: dict[str, str]


class ScramSaslServer:
    def __init__(
        self,
        formatter: ScramFormatter,
        store: CredentialStore,
        server_nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        self.formatter = formatter
        self.store = store
        self.server_nonce = server_nonce  # printable, no ','; fixed only by tests
        self.state: Literal["first", "final", "complete", "failed"] = "first"
        self._first: _First | None = None
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._real = False  # the credential is the user's, not made up
        self._principal: KafkaPrincipal | None = None

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self.state == "first":
                return self._client_first(token)
            if self.state == "final":
                return self._client_final(token)
            raise AuthenticationError(f"SCRAM: unexpected message in state {self.state}")
        except AuthenticationError:
            self.state = "failed"
            self._credential = None
            raise

    def _client_first(self, token: bytes) -> bytes:
        text = _ascii(token, "client first")
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise AuthenticationError("Invalid SCRAM client first message format")
        first = _First(
            bare=m["bare"],
            user=username(m["saslname"]),
            authzid=username(m["authzid"] or ""),
            nonce=m["nonce"],
            extensions=_extensions(m["extensions"]),
        )
        self._first = first
        cred = None
        if first.extensions.get("tokenauth", "false").lower() != "true":
            cred = self.store.get(first.user, self.formatter.mechanism)
        if cred is not None and cred.iterations >= MIN_ITERATIONS:
            self._credential, self._real = cred, True
        else:
            self._credential, self._real = self._made_up(first.user), False
        cred = self._credential
        self._nonce = first.nonce + self.server_nonce()
        self._server_first = (
            f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},i={cred.iterations}"
        )
        self.state = "final"
        return self._server_first.encode()

    def _made_up(self, user: str) -> ScramCredential:
        """The same salt for the same unknown user on every attempt (a fresh one would tell a
        client asking twice that the user does not exist), keys that match no proof."""
        f = self.formatter
        salt = hmac.digest(_MOCK_SECRET, f"{f.mechanism}\x00{user}".encode(), "sha256")
        key = secrets.token_bytes(f.digest_size)
        return ScramCredential(f.mechanism, salt, key, key, DEFAULT_ITERATIONS)

    def _client_final(self, token: bytes) -> bytes:
        first, cred = self._first, self._credential
        assert first is not None and cred is not None
        text = _ascii(token, "client final")
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise AuthenticationError("Invalid SCRAM client final message format")
        if m["nonce"] != self._nonce:
            raise AuthenticationError("Invalid client nonce in the final client message.")
        try:
            proof = base64.b64decode(m["proof"], validate=True)
        except binascii.Error:
            raise AuthenticationError("Invalid SCRAM client proof encoding") from None
        f = self.formatter
        auth_message = f"{first.bare},{self._server_first},{m['without_proof']}".encode()
        signature = f.client_signature(cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationError("Invalid client credentials (proof length)")
        computed = f.stored_key(f.xor(signature, proof))
        ok = hmac.compare_digest(computed, cred.stored_key)
        if not ok or not self._real:
            raise AuthenticationError(
                f"Invalid client credentials for user {first.user!r}"
                + ("" if self._real else " (no such user)")
            )
        if first.authzid and first.authzid != first.user:
            raise AuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        server_signature = f.server_signature(cred.server_key, auth_message)
        self._principal = KafkaPrincipal("User", first.user)
        self._credential = None
        self.state = "complete"
        return b"v=" + base64.b64encode(server_signature)

    @property
    def complete(self) -> bool:
        return self.state == "complete"

    @property
    def principal(self) -> KafkaPrincipal:
        if self._principal is None:
            raise RuntimeError("SCRAM exchange has not completed")
        return self._principal

    @property
    def session_lifetime_ms(self) -> int | None:
        return None  # no delegation tokens: credentials do not expire


def _ascii(token: bytes, what: str) -> str:
    try:
        return token.decode("ascii")
    except UnicodeDecodeError:
        raise AuthenticationError(f"Invalid SCRAM {what} message: not ASCII") from None


class ScramMechanism:
    def __init__(self, name: str, store: CredentialStore) -> None:
        self.name = name
        self.formatter = ScramFormatter(name)
        self.store = store

    def server(self) -> ScramSaslServer:
        return ScramSaslServer(self.formatter, self.store)
