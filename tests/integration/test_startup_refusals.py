"""``kgc serve`` that cannot start says which setting stops it, with its value, in one line.

Each case starts a real ``kgc serve`` against something that is in the way -- a taken port,
a locked or unusable data directory, a TLS file that is not there, a database that does not
answer -- and checks the exit status 1 and the one ``kgc: error:`` line that names the
setting and its value, with no traceback.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.kgc_process import free_port

from storage.local.manager import DataDirLock

pytestmark = pytest.mark.integration


def serve(data_dir: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``kgc serve`` on ``data_dir`` that must refuse to start (so exit by itself)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "coordinator",
            "serve",
            "--data-dir",
            str(data_dir),
            "--metrics-port",
            "0",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def refusal(proc: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a refused start (its exit status 1, no traceback)."""
    assert proc.returncode == 1, proc
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("kgc: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port something else listens on."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_taken_port_names_the_port_setting(tmp_path: Path, taken_port: int) -> None:
    line = refusal(serve(tmp_path / "data", "--port", str(taken_port)))
    assert line.startswith(f"kgc: error: port {taken_port}: "), line
    assert f"('127.0.0.1', {taken_port})" in line and "address already in use" in line, line


def test_a_taken_listener_names_the_listeners_setting(tmp_path: Path, taken_port: int) -> None:
    free = free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{free},OTHER://127.0.0.1:{taken_port}"
    line = refusal(
        serve(
            tmp_path / "data",
            "--listeners",
            listeners,
            "--listener-security-protocol-map",
            "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
        )
    )
    assert line.startswith(f"kgc: error: listeners {listeners}: "), line
    assert f"('127.0.0.1', {taken_port})" in line and "address already in use" in line, line


def test_a_taken_metrics_port_names_metrics_port(tmp_path: Path, taken_port: int) -> None:
    proc = serve(tmp_path / "data", "--port", str(free_port()), "--metrics-port", str(taken_port))
    line = refusal(proc)
    assert line == (
        f"kgc: error: metrics.port {taken_port}: cannot listen on 127.0.0.1:{taken_port}: "
        "address already in use"
    ), line


def test_a_locked_data_dir_names_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    lock = DataDirLock.acquire(data)  # as a running kgc holds it
    try:
        line = refusal(serve(data, "--port", str(free_port())))
    finally:
        lock.release()
    assert line.startswith(f"kgc: error: data.dir {data}: "), line
    assert f"in use by process {os.getpid()}" in line, line


def test_a_data_dir_that_is_a_file_names_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_text("not a directory")
    line = refusal(serve(data, "--port", str(free_port())))
    assert line == f"kgc: error: data.dir {data}: cannot use it as the data directory: file exists"


def test_a_missing_keystore_names_the_tls_setting(tmp_path: Path) -> None:
    missing = tmp_path / "missing.p12"
    proc = serve(
        tmp_path / "data",
        "--listeners",
        f"SSL://127.0.0.1:{free_port()}",
        "--ssl-keystore-location",
        str(missing),
    )
    line = refusal(proc)
    assert line.startswith("kgc: error: invalid setting ssl.keystore.location: "), line
    assert str(missing) in line, line
    assert not (tmp_path / "data").exists()  # refused before anything was opened


def test_an_unreachable_database_names_storage_url(tmp_path: Path) -> None:
    port = free_port()
    proc = serve(
        tmp_path / "data",
        "--port",
        str(free_port()),
        "--storage-url",
        f"postgresql://kgc:s3cret@127.0.0.1:{port}/kgc",
    )
    line = refusal(proc)
    assert line.startswith(
        f"kgc: error: storage.url postgresql://kgc:***@127.0.0.1:{port}/kgc: "
        "cannot reach the cluster's database: "
    ), line
    assert "s3cret" not in proc.stderr


def test_a_worker_whose_port_is_taken_names_it(tmp_path: Path) -> None:
    # Worker 1 listens on port + 1: the line names worker 1's own setting.
    with socket.socket() as sock:
        for _ in range(20):
            port = free_port()
            try:
                sock.bind(("127.0.0.1", port + 1))
                break
            except OSError:
                continue
        sock.listen()
        line = refusal(serve(tmp_path / "data", "--port", str(port), "--kgc-workers", "2"))
    assert f"port {port + 1}: " in line and "address already in use" in line, line
