"""Describe/AlterUserScramCredentials handlers: Kafka's validation and per-user answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.apis.scram import ScramAdmin
from coordinator.security.credentials import (
    LocalCredentialStore,
    ScramChange,
    salted_password,
    scram_credential,
)
from coordinator.server.handler import ClientInfo, Deferred
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from protocol.messages.describe_user_scram_credentials import (
    CredentialInfo,
    DescribeUserScramCredentialsRequest,
    UserName,
)

SHA256, SHA512 = 1, 2
CLIENT = ClientInfo("test", "127.0.0.1", 1234, 1)
ALTER_HEADER = RequestHeader(51, 0, 1, "test")
DESCRIBE_HEADER = RequestHeader(50, 0, 1, "test")


def upsert(name: str, mechanism: int = SHA512, iterations: int = 4096, password: str = "pw"):  # type: ignore[no-untyped-def]
    salt = b"salt-" + name.encode()
    mech = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}.get(mechanism, "SCRAM-SHA-512")
    return ScramCredentialUpsertion(
        name, mechanism, iterations, salt, salted_password(mech, password, salt, iterations)
    )


@pytest.fixture
def store(tmp_path: Path) -> LocalCredentialStore:
    s = LocalCredentialStore.in_data_dir(tmp_path)
    c = scram_credential("SCRAM-SHA-256", "alice-secret", iterations=8192)
    s.apply([ScramChange("alice", c.mechanism, c)])
    return s


async def alter(admin: ScramAdmin, **kw: object) -> dict[str, tuple[int, str | None]]:
    ans = admin.alter_user_scram_credentials(
        ALTER_HEADER,
        AlterUserScramCredentialsRequest(**kw),
        CLIENT,  # type: ignore[arg-type]
    )
    resp = await ans if isinstance(ans, Deferred) else ans
    assert isinstance(resp, AlterUserScramCredentialsResponse)
    out = {r.user: (r.error_code, r.error_message) for r in resp.results}
    assert len(out) == len(resp.results)  # one result per user
    return out


async def test_upsert_stores_keys_derived_from_the_salted_password(
    store: LocalCredentialStore,
) -> None:
    admin = ScramAdmin(store)
    assert await alter(admin, upsertions=[upsert("bob", SHA512, 4096, "bob-secret")]) == {
        "bob": (0, None)
    }
    expected = scram_credential("SCRAM-SHA-512", "bob-secret", b"salt-bob", 4096)
    assert store.get("bob", "SCRAM-SHA-512") == expected
    # durable: a new store on the same file sees it
    assert LocalCredentialStore(store.path).get("bob", "SCRAM-SHA-512") == expected


async def test_validation_errors_per_user(store: LocalCredentialStore) -> None:
    admin = ScramAdmin(store)
    got = await alter(
        admin,
        upsertions=[
            upsert("few", iterations=4095),
            upsert("many", iterations=16385),
            upsert("edge-low", iterations=4096),
            upsert("edge-high", SHA256, iterations=16384),
            upsert("mech", mechanism=0),
            upsert("mech3", mechanism=3),
            upsert(""),
        ],
        deletions=[
            ScramCredentialDeletion("ghost", SHA512),
            ScramCredentialDeletion("alice", SHA512),  # alice has only SHA-256
        ],
    )
    assert got == {
        "few": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        "many": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        "edge-low": (0, None),
        "edge-high": (0, None),
        "mech": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "mech3": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        "ghost": (
            ErrorCode.RESOURCE_NOT_FOUND,
            "Attempt to delete a user credential that does not exist",
        ),
        "alice": (
            ErrorCode.RESOURCE_NOT_FOUND,
            "Attempt to delete a user credential that does not exist",
        ),
    }
    assert set(store.users()) == {"alice", "edge-low", "edge-high"}


async def test_a_user_altered_twice_is_refused_and_nothing_of_it_applied(
    store: LocalCredentialStore,
) -> None:
    admin = ScramAdmin(store)
    twice = (
        ErrorCode.DUPLICATE_RESOURCE,
        "A user credential cannot be altered twice in the same request",
    )
    got = await alter(
        admin,
        deletions=[
            ScramCredentialDeletion("alice", SHA256),
            ScramCredentialDeletion("dd", SHA256),
            ScramCredentialDeletion("dd", SHA512),
        ],
        # alice: deleted and upserted (other mechanism); bob: upserted twice; carol: once
        upsertions=[upsert("alice", SHA512), upsert("bob"), upsert("bob", SHA256), upsert("carol")],
    )
    # dd is checked for existence after the duplicate check would apply: its first deletion
    # is already invalid (no such credential), so it answers RESOURCE_NOT_FOUND (Kafka: the
    # first error for a user stands).
    assert got["alice"] == twice and got["bob"] == twice
    assert got["dd"][0] == ErrorCode.RESOURCE_NOT_FOUND
    assert got["carol"] == (0, None)
    assert set(store.users()) == {"alice", "carol"}
    assert [c.mechanism for c in store.users()["alice"]] == ["SCRAM-SHA-256"]  # untouched


async def test_delete_then_results_order(store: LocalCredentialStore) -> None:
    admin = ScramAdmin(store)
    ans = admin.alter_user_scram_credentials(
        ALTER_HEADER,
        AlterUserScramCredentialsRequest(
            deletions=[ScramCredentialDeletion("alice", SHA256)],
            upsertions=[upsert("zed", iterations=1), upsert("bob")],
        ),
        CLIENT,
    )
    assert isinstance(ans, Deferred)
    resp = await ans
    assert isinstance(resp, AlterUserScramCredentialsResponse)
    # Kafka's order: deletions, then successful upsertions, then errors.
    assert [(r.user, r.error_code) for r in resp.results] == [
        ("alice", 0),
        ("bob", 0),
        ("zed", ErrorCode.UNACCEPTABLE_CREDENTIAL),
    ]
    assert set(store.users()) == {"bob"}


def test_describe_all_named_duplicate_unknown(store: LocalCredentialStore) -> None:
    bob = scram_credential("SCRAM-SHA-512", "b", iterations=4096)
    bob256 = scram_credential("SCRAM-SHA-256", "b", iterations=5000)
    store.apply(
        [ScramChange("bob", bob.mechanism, bob), ScramChange("bob", bob256.mechanism, bob256)]
    )
    admin = ScramAdmin(store)
    for users in (None, []):
        resp = admin.describe_user_scram_credentials(
            DESCRIBE_HEADER, DescribeUserScramCredentialsRequest(users=users), CLIENT
        )
        assert resp.error_code == 0
        assert [(r.user, r.error_code, r.credential_infos) for r in resp.results] == [
            ("alice", 0, [CredentialInfo(1, 8192)]),
            ("bob", 0, [CredentialInfo(1, 5000), CredentialInfo(2, 4096)]),
        ]
    resp = admin.describe_user_scram_credentials(
        DESCRIBE_HEADER,
        DescribeUserScramCredentialsRequest(
            users=[UserName("bob"), UserName("ghost"), UserName("alice"), UserName("alice")]
        ),
        CLIENT,
    )
    # Kafka 4.4 answers an empty message, not null, where nothing failed.
    assert resp.error_message == ""
    assert [(r.user, r.error_code, r.error_message) for r in resp.results] == [
        ("bob", 0, ""),
        (
            "ghost",
            ErrorCode.RESOURCE_NOT_FOUND,
            "Attempt to describe a user credential that does not exist: ghost",
        ),
        (
            "alice",
            ErrorCode.DUPLICATE_RESOURCE,
            "Cannot describe SCRAM credentials for the same user twice in a single request: alice",
        ),
    ]


async def test_authorization_hook(store: LocalCredentialStore) -> None:
    asked: list[str] = []

    def deny(client: ClientInfo, operation: str) -> bool:
        asked.append(operation)
        return False

    admin = ScramAdmin(store, authorize=deny)
    resp = admin.describe_user_scram_credentials(
        DESCRIBE_HEADER, DescribeUserScramCredentialsRequest(users=None), CLIENT
    )
    assert resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and resp.results == []
    got = await alter(
        admin,
        upsertions=[upsert("zz"), upsert("bob")],
        deletions=[ScramCredentialDeletion("alice", SHA256)],
    )
    assert {u: c for u, (c, _m) in got.items()} == dict.fromkeys(
        ["alice", "bob", "zz"], ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )
    assert asked == ["DESCRIBE", "ALTER"]
    assert set(store.users()) == {"alice"}


async def test_store_failure_answers_every_user(store: LocalCredentialStore) -> None:
    class Broken(LocalCredentialStore):
        async def alter(self, changes: list[ScramChange]) -> set[int]:
            raise OSError("disk full")

    admin = ScramAdmin(Broken(store.path))
    got = await alter(admin, upsertions=[upsert("bob")])
    assert got["bob"][0] == ErrorCode.UNKNOWN
