"""SCRAM credential derivation (RFC 7677's vector) and the local, file-backed store."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import stat
from pathlib import Path

import pytest

from coordinator.security import CredentialStore
from coordinator.security.credentials import (
    CredentialsUnreadableError,
    LocalCredentialStore,
    ScramChange,
    credential_from_salted,
    salted_password,
    scram_credential,
)

# RFC 7677 section 3: SCRAM-SHA-256, user "user", password "pencil".
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
AUTH_MESSAGE = (
    b"n=user,r=rOprNGfwEbeRWgbNEkqO,"
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
)
CLIENT_PROOF = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_SIGNATURE = base64.b64decode("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def test_rfc7677_vector_server_verifies_the_proof_and_signs() -> None:
    cred = scram_credential("SCRAM-SHA-256", "pencil", SALT, 4096)
    # The server's check (RFC 5802 section 3): H(ClientProof XOR ClientSignature) == StoredKey.
    signature = hmac.digest(cred.stored_key, AUTH_MESSAGE, "sha256")
    client_key = bytes(a ^ b for a, b in zip(CLIENT_PROOF, signature, strict=True))
    assert hashlib.sha256(client_key).digest() == cred.stored_key
    assert hmac.digest(cred.server_key, AUTH_MESSAGE, "sha256") == SERVER_SIGNATURE
    assert (cred.mechanism, cred.salt, cred.iterations) == ("SCRAM-SHA-256", SALT, 4096)


def test_wrong_password_does_not_verify() -> None:
    cred = scram_credential("SCRAM-SHA-256", "pencil!", SALT, 4096)
    assert hmac.digest(cred.server_key, AUTH_MESSAGE, "sha256") != SERVER_SIGNATURE


def test_from_salted_equals_from_password_sha512() -> None:
    salt = os.urandom(24)
    salted = salted_password("SCRAM-SHA-512", "secret", salt, 8192)
    assert len(salted) == 64
    assert credential_from_salted("SCRAM-SHA-512", salt, salted, 8192) == scram_credential(
        "SCRAM-SHA-512", "secret", salt, 8192
    )


def test_random_salt_differs_and_unknown_mechanism_refused() -> None:
    a = scram_credential("SCRAM-SHA-512", "x")
    b = scram_credential("SCRAM-SHA-512", "x")
    assert a.salt != b.salt and a.stored_key != b.stored_key
    assert a.iterations == 4096
    with pytest.raises(ValueError, match="unknown SCRAM mechanism"):
        scram_credential("SCRAM-SHA-1", "x")


def test_local_store_persists_and_reloads(tmp_path: Path) -> None:
    store = LocalCredentialStore.in_data_dir(tmp_path)
    _: CredentialStore = store  # satisfies the contract
    alice = scram_credential("SCRAM-SHA-512", "alice-secret")
    alice256 = scram_credential("SCRAM-SHA-256", "alice-secret", iterations=8192)
    bob = scram_credential("SCRAM-SHA-512", "bob-secret")
    assert (
        store.apply(
            [ScramChange("alice", alice.mechanism, alice), ScramChange("bob", bob.mechanism, bob)]
        )
        == set()
    )
    store.apply([ScramChange("alice", alice256.mechanism, alice256)])
    again = LocalCredentialStore.in_data_dir(tmp_path)
    assert again.get("alice", "SCRAM-SHA-512") == alice
    assert again.get("alice", "SCRAM-SHA-256") == alice256
    assert again.get("bob", "SCRAM-SHA-256") is None
    assert again.users() == {"alice": [alice256, alice], "bob": [bob]}
    # Never the password, and private to kgc's user.
    text = (tmp_path / "scram-credentials.json").read_text()
    assert "secret" not in text
    assert stat.S_IMODE((tmp_path / "scram-credentials.json").stat().st_mode) == 0o600
    assert not list(tmp_path.glob("*.tmp"))


def test_nothing_changed_writes_nothing(tmp_path: Path) -> None:
    store = LocalCredentialStore.in_data_dir(tmp_path)
    assert store.apply([ScramChange("nobody", "SCRAM-SHA-512")]) == {0}
    assert not (tmp_path / "scram-credentials.json").exists()


@pytest.mark.parametrize(
    "content",
    [b"not json", b"[]", b'{"version": 2, "users": {}}', b'{"version": 1, "users": {"a": 1}}',
     b'{"version": 1, "users": {"a": {"SCRAM-SHA-1": {}}}}'],
)  # fmt: skip
def test_unreadable_file_stops_the_start(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "scram-credentials.json"
    path.write_bytes(content)
    with pytest.raises(CredentialsUnreadableError, match="cannot be read"):
        LocalCredentialStore(path)
    assert path.read_bytes() == content  # left as it was


def test_a_crash_before_the_rename_keeps_the_old_file(tmp_path: Path) -> None:
    store = LocalCredentialStore.in_data_dir(tmp_path)
    alice = scram_credential("SCRAM-SHA-512", "a")
    store.apply([ScramChange("alice", alice.mechanism, alice)])
    # A crash mid-write leaves a temp file behind; the real file is the old one.
    (tmp_path / "scram-credentials.json.tmp").write_text('{"version": 1, "us')
    assert LocalCredentialStore.in_data_dir(tmp_path).get("alice", "SCRAM-SHA-512") == alice
    data = json.loads((tmp_path / "scram-credentials.json").read_text())
    assert set(data["users"]) == {"alice"}
