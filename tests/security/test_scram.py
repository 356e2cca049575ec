"""SCRAM: RFC 5802 (SHA-1) and RFC 7677 (SHA-256) test vectors through kgc's formulas and
server, a SHA-512 exchange with a client written here, and the refusals: a wrong password
and an unknown user fail alike (same round, same error), malformed messages fail."""

from __future__ import annotations

import base64
import secrets

import pytest

from coordinator.security import AuthenticationError, ScramCredential
from coordinator.security.sasl.scram import (
    ScramFormatter,
    ScramMechanism,
    ScramSaslServer,
    credential,
)


class Store:
    """An in-memory CredentialStore."""

    def __init__(self, creds: dict[tuple[str, str], ScramCredential] | None = None) -> None:
        self.creds = creds or {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.creds.get((user, mechanism))

    def users(self) -> dict[str, list[ScramCredential]]:
        out: dict[str, list[ScramCredential]] = {}
        for (user, _), cred in self.creds.items():
            out.setdefault(user, []).append(cred)
        return out


RFC5802 = {
    "mechanism": "SCRAM-SHA-1",
    "client_first": "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
    "server_nonce": "3rfcNHYJY1ZVvWVs7j",
    "server_first": "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
    "client_final": "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
    "server_final": "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
}
RFC7677 = {
    "mechanism": "SCRAM-SHA-256",
    "client_first": "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    "server_nonce": "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    "server_first": "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    "s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    "client_final": "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    "server_final": "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
}


def _salt_iterations(server_first: str) -> tuple[bytes, int]:
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    return base64.b64decode(fields["s"]), int(fields["i"])


@pytest.mark.parametrize("vector", [RFC5802, RFC7677], ids=["rfc5802-sha1", "rfc7677-sha256"])
def test_formulas_reproduce_the_rfc_proof_and_signature(vector: dict[str, str]) -> None:
    f = ScramFormatter(vector["mechanism"])
    salt, iterations = _salt_iterations(vector["server_first"])
    salted = f.salted_password("pencil", salt, iterations)
    without_proof = vector["client_final"].rsplit(",p=", 1)[0]
    auth = f"{vector['client_first'][3:]},{vector['server_first']},{without_proof}".encode()
    proof = base64.b64encode(f.client_proof(salted, auth)).decode()
    assert f"{without_proof},p={proof}" == vector["client_final"]
    signature = f.server_signature(f.server_key(salted), auth)
    assert "v=" + base64.b64encode(signature).decode() == vector["server_final"]


@pytest.mark.parametrize("vector", [RFC5802, RFC7677], ids=["rfc5802-sha1", "rfc7677-sha256"])
def test_server_answers_the_rfc_exchange(vector: dict[str, str]) -> None:
    mechanism = vector["mechanism"]
    f = ScramFormatter(mechanism)
    salt, iterations = _salt_iterations(vector["server_first"])
    store = Store({("user", mechanism): f.credential("pencil", salt, iterations)})
    server = ScramSaslServer(f, store, server_nonce=lambda: vector["server_nonce"])
    assert server.evaluate(vector["client_first"].encode()).decode() == vector["server_first"]
    assert not server.complete
    assert server.evaluate(vector["client_final"].encode()).decode() == vector["server_final"]
    assert server.complete
    assert str(server.principal) == "User:user"
    assert server.session_lifetime_ms is None


def client_exchange(
    server: ScramSaslServer,
    user: str,
    password: str,
    *,
    mechanism: str = "SCRAM-SHA-512",
    extensions: str = "",
    authzid: str = "",
) -> bytes:
    """A SCRAM client (RFC 5802): returns the server-final message, raises on failure."""
    f = ScramFormatter(mechanism)
    nonce = secrets.token_hex(12)
    saslname = user.replace("=", "=3D").replace(",", "=2C")
    gs2 = f"n,{'a=' + authzid if authzid else ''},"
    bare = f"n={saslname},r={nonce}{extensions}"
    server_first = server.evaluate((gs2 + bare).encode()).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    assert fields["r"].startswith(nonce)
    salted = f.salted_password(password, base64.b64decode(fields["s"]), int(fields["i"]))
    without_proof = f"c={base64.b64encode(gs2.encode()).decode()},r={fields['r']}"
    auth = f"{bare},{server_first},{without_proof}".encode()
    proof = base64.b64encode(f.client_proof(salted, auth)).decode()
    final = server.evaluate(f"{without_proof},p={proof}".encode())
    expected = f.server_signature(f.server_key(salted), auth)
    assert final == b"v=" + base64.b64encode(expected)
    return final


@pytest.fixture
def store() -> Store:
    return Store(
        {
            ("alice", "SCRAM-SHA-512"): credential("SCRAM-SHA-512", "alice-secret"),
            ("alice", "SCRAM-SHA-256"): credential(
                "SCRAM-SHA-256", "alice-secret", iterations=8192
            ),
            ("we,ird=name", "SCRAM-SHA-512"): credential("SCRAM-SHA-512", "pässword"),
        }
    )


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_exchange_authenticates(store: Store, mechanism: str) -> None:
    server = ScramMechanism(mechanism, store).server()
    client_exchange(server, "alice", "alice-secret", mechanism=mechanism)
    assert server.complete and str(server.principal) == "User:alice"


def test_escaped_user_name_and_utf8_password(store: Store) -> None:
    server = ScramMechanism("SCRAM-SHA-512", store).server()
    client_exchange(server, "we,ird=name", "pässword")
    assert server.principal.name == "we,ird=name"


def _failure(store: Store, user: str, password: str, **kw: str) -> tuple[str, str]:
    """(round the exchange failed in, the server's state): ('final', ...) means the client
    got a server-first for the user and failed at its proof."""
    server = ScramMechanism("SCRAM-SHA-512", store).server()
    try:
        client_exchange(server, user, password, **kw)
    except AuthenticationError:
        return (
            "final" if server._first is not None and server._server_first else "first"
        ), server.state
    raise AssertionError("the exchange succeeded")


def test_wrong_password_and_unknown_user_fail_alike(store: Store) -> None:
    assert _failure(store, "alice", "wrong") == ("final", "failed")
    assert _failure(store, "mallory", "alice-secret") == ("final", "failed")


def test_unknown_user_gets_the_same_salt_each_time(store: Store) -> None:
    salts = set()
    for _ in range(2):
        server = ScramMechanism("SCRAM-SHA-512", store).server()
        first = server.evaluate(b"n,,n=mallory,r=abc").decode()
        fields = dict(item.split("=", 1) for item in first.split(","))
        salts.add(fields["s"])
        assert fields["i"] == "4096"
    assert len(salts) == 1


def test_token_authentication_is_refused(store: Store) -> None:
    """kgc has no delegation tokens: tokenauth=true never authenticates, even with the
    user's real password."""
    assert _failure(store, "alice", "alice-secret", extensions=",tokenauth=true")[1] == "failed"


def test_authorization_id_other_than_the_user_is_refused(store: Store) -> None:
    assert _failure(store, "alice", "alice-secret", authzid="bob")[1] == "failed"
    server = ScramMechanism("SCRAM-SHA-512", store).server()
    client_exchange(server, "alice", "alice-secret", authzid="alice")
    assert server.complete


def test_credential_below_minimum_iterations_never_authenticates() -> None:
    weak = Store({("alice", "SCRAM-SHA-512"): credential("SCRAM-SHA-512", "pw", iterations=1000)})
    assert _failure(weak, "alice", "pw")[1] == "failed"


@pytest.mark.parametrize(
    "first",
    [
        b"",
        b"n,,",
        b"y,,n=alice,r=abc",  # channel-binding flags Kafka does not accept
        b"p=tls-unique,,n=alice,r=abc",
        b"n,,n=alice",
        b"n,,n=,r=abc",
        b"n,,n=al=ice,r=abc",  # '=' only as =2C / =3D
        b"n,,n=alice,r=a,b",
        b"n,,n=\xc3\xa9,r=abc",  # not ASCII
        b"\xff" * 64,
    ],
)
def test_malformed_client_first_fails(store: Store, first: bytes) -> None:
    server = ScramMechanism("SCRAM-SHA-512", store).server()
    with pytest.raises(AuthenticationError):
        server.evaluate(first)
    assert server.state == "failed"
    with pytest.raises(AuthenticationError):  # and stays failed
        server.evaluate(b"n,,n=alice,r=abc")


@pytest.mark.parametrize(
    "final",
    [
        "",
        "c=biws,r={nonce}",
        "c=biws,r={nonce},p=",
        "c=biws,r={nonce},p=!!!!",
        "c=biws,r={nonce},p=AAAA",  # wrong length
        "c=biws,r=other,p=" + base64.b64encode(bytes(64)).decode(),
        "c=biws,r={nonce},p=" + base64.b64encode(bytes(64)).decode(),  # wrong proof
    ],
)
def test_malformed_or_wrong_client_final_fails(store: Store, final: str) -> None:
    server = ScramMechanism("SCRAM-SHA-512", store).server()
    first = server.evaluate(b"n,,n=alice,r=abc").decode()
    nonce = first.split(",")[0][2:]
    with pytest.raises(AuthenticationError):
        server.evaluate(final.format(nonce=nonce).encode())
    assert not server.complete


def test_message_after_completion_fails(store: Store) -> None:
    server = ScramMechanism("SCRAM-SHA-512", store).server()
    client_exchange(server, "alice", "alice-secret")
    with pytest.raises(AuthenticationError):
        server.evaluate(b"n,,n=alice,r=abc")
