"""confluent-kafka's SCRAM admin calls against a real ``kgc serve``; credentials are durable.

AdminClient.alter_user_scram_credentials salts and hashes the password itself
(librdkafka sends the salted password); kgc derives and stores the keys. The credentials
must be exactly what a server verifying SCRAM needs, so the test recomputes them from the
password and the salt kgc stored, and they must survive a SIGKILL.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from support.kgc_process import KgcProcess

from coordinator.security.credentials import LocalCredentialStore, scram_credential

pytestmark = pytest.mark.integration


def admin(kgc: KgcProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": kgc.bootstrap})


def described(a: AdminClient) -> dict[str, list[tuple[str, int]]]:
    got = a.describe_user_scram_credentials().result(timeout=10)
    return {
        user: sorted((i.mechanism.name, i.iterations) for i in d.scram_credential_infos)
        for user, d in got.items()
    }


def test_alter_and_describe_survive_a_sigkill(tmp_path: Path) -> None:
    kgc = KgcProcess(tmp_path / "data")
    kgc.start()
    try:
        a = admin(kgc)
        futures = a.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "alice",
                    ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                    b"alice-secret",
                ),
                UserScramCredentialUpsertion(
                    "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bob-secret"
                ),
            ]
        )
        for f in futures.values():
            f.result(timeout=10)
        assert described(a) == {
            "alice": [("SCRAM_SHA_512", 8192)],
            "bob": [("SCRAM_SHA_256", 4096)],
        }
        kgc.kill()
        kgc.start()
        a = admin(kgc)
        assert described(a) == {
            "alice": [("SCRAM_SHA_512", 8192)],
            "bob": [("SCRAM_SHA_256", 4096)],
        }
        # Named users: one future each; an unknown user fails with RESOURCE_NOT_FOUND.
        named = a.describe_user_scram_credentials(["alice", "ghost"])
        assert named["alice"].result(timeout=10).user == "alice"
        with pytest.raises(KafkaException) as err:
            named["ghost"].result(timeout=10)
        assert err.value.args[0].code() == 91  # RESOURCE_NOT_FOUND
        # Too few iterations is refused per user; a deletion goes through.
        futures = a.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 1000), b"c"
                ),
                UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256),
            ]
        )
        futures["bob"].result(timeout=10)
        with pytest.raises(KafkaException) as err:
            futures["carol"].result(timeout=10)
        assert err.value.args[0].code() == 93  # UNACCEPTABLE_CREDENTIAL
        assert described(a) == {"alice": [("SCRAM_SHA_512", 8192)]}
        kgc.kill()
        # What is stored is what SCRAM verification needs, derived from the password.
        stored = LocalCredentialStore.in_data_dir(kgc.data_dir).get("alice", "SCRAM-SHA-512")
        assert stored is not None
        assert stored == scram_credential("SCRAM-SHA-512", "alice-secret", stored.salt, 8192)
        assert LocalCredentialStore.in_data_dir(kgc.data_dir).get("bob", "SCRAM-SHA-256") is None
    finally:
        if kgc.alive():
            kgc.stop()
