"""``kgc topics`` and ``kgc health`` against a real ``kgc serve``; exit codes and errors.

``health`` and the unreachable server run the entry point (a subprocess, the ``cli`` fixture);
the rest runs in process (support.clikit's ``call_cli``)."""

from __future__ import annotations

import pytest
from support.clikit import CLI, call_cli
from support.kgc_process import KgcProcess, free_port

pytestmark = pytest.mark.integration


def test_health_ok_and_unreachable(kgc: KgcProcess, cli: CLI) -> None:
    ok = cli("health", "--bootstrap-server", kgc.bootstrap)
    assert ok.code == 0, ok
    assert "ApiVersions" in ok.out
    as_json = cli("health", "--bootstrap-server", kgc.bootstrap, "--output", "json").json()
    assert as_json["healthy"] is True and as_json["apis"] > 5

    down = cli("health", "--bootstrap-server", f"127.0.0.1:{free_port()}")
    down.assert_clean_error(1)  # HEALTHCHECK semantics: 0 or 1, never 3
    assert "unhealthy" in down.err


def test_topics_create_list_describe_delete(kgc: KgcProcess) -> None:
    b = ("--bootstrap-server", kgc.bootstrap)
    created = call_cli(
        "topics", "create", "payments", "--partitions", "3", "--config", "retention.ms=60000", *b
    )
    assert created.code == 0, created
    assert "Created topic 'payments'" in created.out

    listed = call_cli("topics", "list", *b, "--output", "json").json()
    assert {"topic": "payments", "partitions": 3, "internal": False} in listed

    table = call_cli("topics", "list", *b)
    assert table.out.splitlines()[0].split() == ["TOPIC", "PARTITIONS", "INTERNAL"]
    assert any(line.split()[:2] == ["payments", "3"] for line in table.out.splitlines())

    described = call_cli("topics", "describe", "payments", *b, "--output", "json").json()
    assert [r["partition"] for r in described] == [0, 1, 2]
    assert all(r["leader"] == 0 and r["log_end_offset"] == 0 for r in described)

    dup = call_cli("topics", "create", "payments", "--partitions", "1", *b)
    dup.assert_clean_error(1)
    assert "TOPIC_ALREADY_EXISTS" in dup.err

    deleted = call_cli("topics", "delete", "payments", *b)
    assert deleted.code == 0, deleted
    call_cli("topics", "describe", "payments", *b).assert_clean_error(1)
    call_cli("topics", "delete", "payments", *b).assert_clean_error(1)


def test_unreachable_server_exits_3(cli: CLI) -> None:
    dead = f"127.0.0.1:{free_port()}"
    for args in (
        ("topics", "list"),
        ("groups", "list"),
        ("groups", "describe", "g"),
        ("offsets", "reset", "g", "--topic", "t", "--to-earliest"),
    ):
        r = cli(*args, "--bootstrap-server", dead)
        r.assert_clean_error(3)
        assert "cannot reach" in r.err and "Connection refused" in r.err
        assert "TLS" not in r.err  # nobody listens: no hint of a secured listener


def test_bad_usage_exits_2() -> None:
    for args in (
        ("groups",),
        ("offsets", "reset", "g", "--topic", "t"),  # no --to-* scenario
        ("offsets", "reset", "g", "--topic", "t", "--to-earliest", "--to-latest"),
        ("offsets", "reset", "g", "--topic", "t", "--to-datetime", "yesterday"),
        ("groups", "list", "--state", "Sleepy"),
        ("topics", "list", "--output", "xml"),
    ):
        r = call_cli(*args)
        assert r.code == 2, r
        assert "Traceback" not in r.err
