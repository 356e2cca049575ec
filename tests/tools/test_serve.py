"""``kgc serve`` start-up: invalid settings are refused by name; logs explain rebalances."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from support.clikit import run_cli
from support.kgc_process import KgcProcess, free_port

from coordinator.config import Settings, kafka_name

pytestmark = pytest.mark.integration


def serve(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Start ``kgc serve`` expecting it to refuse to start (so it must exit by itself)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "coordinator",
            "serve",
            "--data-dir",
            str(tmp_path / "data"),
            "--port",
            str(free_port()),
            "--metrics-port",
            "0",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


def assert_refused(proc: subprocess.CompletedProcess[str], setting: str) -> None:
    assert proc.returncode != 0, proc
    assert setting in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def test_invalid_flag_value_names_the_setting(tmp_path: Path) -> None:
    assert_refused(serve(tmp_path, "--group-max-size", "0"), "group.max.size")
    assert_refused(serve(tmp_path, "--kgc-log-format", "yaml"), "kgc.log.format")
    assert_refused(
        serve(
            tmp_path,
            "--group-min-session-timeout-ms",
            "9000",
            "--group-max-session-timeout-ms",
            "8000",
        ),
        "group.min.session.timeout.ms",
    )


def test_invalid_environment_value_names_the_setting(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "KGC_PORT": "x"},
    )
    assert_refused(proc, "port")


def test_invalid_properties_file_names_the_setting(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("# kgc\nnum.partitions=3\noffsets.retention.minutes=-5\n")
    assert_refused(serve(tmp_path, "--config", str(props)), "offsets.retention.minutes")
    props.write_text("group.initial.rebalance.delay.ms=soon\n")
    assert_refused(serve(tmp_path, "--config", str(props)), "group.initial.rebalance.delay.ms")
    props.write_text("log.retention.hours=a week\n")  # a Kafka synonym kgc converts
    assert_refused(serve(tmp_path, "--config", str(props)), "log.retention.hours")
    assert_refused(
        serve(tmp_path, "--config", str(tmp_path / "missing.properties")), "missing.properties"
    )


def test_cluster_settings_are_refused_without_showing_the_password(tmp_path: Path) -> None:
    assert_refused(serve(tmp_path, "--listeners", "BOGUS://127.0.0.1:1"), "listeners")
    assert_refused(
        serve(tmp_path, "--broker-heartbeat-interval-ms", "9000"), "broker.heartbeat.interval.ms"
    )
    bad_scheme = serve(tmp_path, "--storage-url", "mysql://kgc:s3cret@127.0.0.1/kgc")
    assert_refused(bad_scheme, "storage.url")
    assert "s3cret" not in bad_scheme.stderr
    # A database that does not answer: one line naming it, its password hidden.
    down = serve(tmp_path, "--storage-url", f"postgresql://kgc:s3cret@127.0.0.1:{free_port()}/kgc")
    assert_refused(down, "cannot reach the cluster's database")
    assert "s3cret" not in down.stderr
    # (after the effective configuration, logged at start)
    errors = [ln for ln in down.stderr.splitlines() if ln.strip() and " kgc.config: " not in ln]
    assert len(errors) == 1, down.stderr


def test_port_in_use_is_one_line(kgc: KgcProcess, tmp_path: Path) -> None:
    # Its own data directory: the running server's is locked, and the port is what we test.
    proc = serve(tmp_path / "second", "--port", str(kgc.port))
    assert proc.returncode != 0
    assert "address already in use" in proc.stderr.lower()
    assert "Traceback" not in proc.stderr


def test_help_shows_every_setting_with_its_default() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "COLUMNS": "400"},  # no wrapping inside a setting's line
    )
    assert proc.returncode == 0
    text = proc.stdout
    for name, info in Settings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        assert flag in text, flag
        assert f"[{kafka_name(name)}; env KGC_{name.upper()}; default: {info.default}]" in text, (
            name
        )


def test_operator_help_lists_the_commands() -> None:
    r = run_cli("--help")
    assert r.code == 0
    for cmd in ("serve", "groups", "offsets", "topics", "health"):
        assert cmd in r.out


async def rebalance_once(kgc: KgcProcess, group: str) -> str:
    """One consumer joins and a second one joins later; returns the second's member id."""
    await asyncio.to_thread(
        run_cli,
        "topics",
        "create",
        "audit-log",
        "--partitions",
        "2",
        "--bootstrap-server",
        kgc.bootstrap,
    )

    def consumer(cid: str) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            "audit-log",
            bootstrap_servers=kgc.bootstrap,
            group_id=group,
            client_id=cid,
            heartbeat_interval_ms=300,
        )

    a, b = consumer("a"), consumer("b")
    await a.start()
    try:
        deadline = time.monotonic() + 30
        while len(a.assignment()) != 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        await b.start()
        try:
            while not (a.assignment() and b.assignment() and len(a.assignment()) == 1):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            return str(b._coordinator.member_id)
        finally:
            await b.stop()
    finally:
        await a.stop()


async def test_text_log_explains_a_rebalance(kgc: KgcProcess) -> None:
    member = await rebalance_once(kgc, "ledger")
    log = kgc.log()
    # The "why" line: group, generation left behind, cause and the member that caused it.
    why = [
        ln
        for ln in log.splitlines()
        if "group ledger preparing rebalance from generation 1 (join)" in ln
    ]
    assert why, log
    assert member in why[0], why
    assert " INFO kgc.groups: " in why[0]
    assert any("group ledger generation 2" in ln and "stable" in ln for ln in log.splitlines()), log
    assert any(
        "group ledger preparing rebalance" in ln and "(leave)" in ln for ln in log.splitlines()
    ), log


async def test_json_log_has_group_fields(tmp_path: Path) -> None:
    proc = KgcProcess(tmp_path / "data", "--kgc-log-format", "json")
    proc.start()
    try:
        member = await rebalance_once(proc, "ledger")
    finally:
        proc.stop()
    lines = [ln for ln in proc.log_path.read_text().splitlines() if ln.strip()]
    records = [json.loads(ln) for ln in lines]  # every line is JSON
    assert all({"ts", "level", "logger", "msg"} <= r.keys() for r in records)
    why = [
        r
        for r in records
        if r["logger"] == "kgc.groups" and r.get("cause") == "join" and r.get("generation") == 1
    ]
    assert why, records
    assert why[0]["group"] == "ledger" and why[0]["member"] == member
    assert why[0]["level"] == "INFO"
    assert any(r["msg"] == "kgc stopped" for r in records)
