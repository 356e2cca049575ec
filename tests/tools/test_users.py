"""``kgc users``: offline SCRAM users of a data directory, refused beside a running kgc."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from support.clikit import CLI, Run
from support.kgc_process import KgcProcess

from coordinator.security.credentials import LocalCredentialStore, scram_credential


def users(*args: str, stdin: str = "") -> Run:
    """``kgc users ...`` with ``stdin`` as its standard input."""
    proc = subprocess.run(
        [sys.executable, "-m", "coordinator", "users", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return Run(("users", *args), proc.returncode, proc.stdout, proc.stderr)


def stored_matches(data_dir: Path, user: str, mechanism: str, password: str, n: int) -> bool:
    got = LocalCredentialStore.in_data_dir(data_dir).get(user, mechanism)
    return got is not None and got == scram_credential(mechanism, password, got.salt, n)


@pytest.mark.long
def test_add_list_delete(tmp_path: Path) -> None:
    d = tmp_path / "data"  # created by the first add, as kafka-storage format would
    assert users("add", "alice", "--password", "alice-secret", "--data-dir", str(d)).code == 0
    # Without --password the password is read from stdin (one line).
    r = users("add", "bob", "--mechanism", "SCRAM-SHA-256", "--iterations", "8192",
              "--data-dir", str(d), stdin="bob-secret\n")  # fmt: skip
    assert r.code == 0, r
    pw = tmp_path / "pw"
    pw.write_text("carol-secret\n")
    assert users("add", "carol", "--password-file", str(pw), "--data-dir", str(d)).code == 0
    listed = users("list", "--data-dir", str(d), "--output", "json").json()
    assert listed == [
        {"user": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 4096},
        {"user": "bob", "mechanism": "SCRAM-SHA-256", "iterations": 8192},
        {"user": "carol", "mechanism": "SCRAM-SHA-512", "iterations": 4096},
    ]
    assert stored_matches(d, "alice", "SCRAM-SHA-512", "alice-secret", 4096)
    assert stored_matches(d, "bob", "SCRAM-SHA-256", "bob-secret", 8192)
    assert stored_matches(d, "carol", "SCRAM-SHA-512", "carol-secret", 4096)
    text = (d / "scram-credentials.json").read_text()
    assert "secret" not in text
    # A new password replaces the old one.
    assert users("add", "alice", "--password", "new", "--data-dir", str(d)).code == 0
    assert stored_matches(d, "alice", "SCRAM-SHA-512", "new", 4096)
    assert users("delete", "alice", "--data-dir", str(d)).code == 0
    users("delete", "alice", "--data-dir", str(d)).assert_clean_error(1)
    users("delete", "bob", "--mechanism", "SCRAM-SHA-512", "--data-dir", str(d)).assert_clean_error(
        1
    )
    assert [u["user"] for u in users("list", "--data-dir", str(d), "--output", "json").json()] == [
        "bob",
        "carol",
    ]


def test_bad_input_is_one_line(tmp_path: Path, cli: CLI) -> None:
    d = str(tmp_path / "data")
    for n in ("4095", "16385"):
        users("add", "a", "--password", "p", "--iterations", n, "--data-dir", d).assert_clean_error(
            2
        )
    users("add", "a", "--data-dir", d, stdin="").assert_clean_error(2)  # empty password
    users("list", "--data-dir", str(tmp_path / "missing")).assert_clean_error(1)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "scram-credentials.json").write_text("garbage")
    users("list", "--data-dir", d).assert_clean_error(1)
    assert cli("users", "add", "a", "--mechanism", "PLAIN", "--data-dir", d).code == 2


def test_refused_while_kgc_runs_then_first_admin_is_served(tmp_path: Path) -> None:
    kgc = KgcProcess(tmp_path / "data")
    kgc.start()
    try:
        r = users("add", "admin", "--password", "admin-secret", "--data-dir", str(kgc.data_dir))
        r.assert_clean_error(1)
        assert "in use by process" in r.err and "AlterUserScramCredentials" in r.err
        users("list", "--data-dir", str(kgc.data_dir)).assert_clean_error(1)
        assert not (kgc.data_dir / "scram-credentials.json").exists()
        kgc.stop()
        # Stopped: the first admin is added offline, and the server serves it at start.
        r = users("add", "admin", "--password", "admin-secret", "--data-dir", str(kgc.data_dir))
        assert r.code == 0, r
        kgc.start()
        admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
        got = admin.describe_user_scram_credentials().result(timeout=10)
        assert list(got) == ["admin"]
        assert [(i.mechanism.name, i.iterations) for i in got["admin"].scram_credential_infos] == [
            ("SCRAM_SHA_512", 4096)
        ]
    finally:
        if kgc.alive():
            kgc.stop()
