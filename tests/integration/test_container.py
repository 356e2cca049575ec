"""What the Docker image does, without Docker: wheel → fresh venv → ``kgc serve`` → HEALTHCHECK.

How this works: the Dockerfile's build stage builds kgc's wheel and its runtime stage
installs that wheel (with its dependencies from PyPI) into a clean Python and runs
``kgc serve``, probing it with ``kgc health``. No Docker engine runs here, so this test
repeats those steps on the host: ``pip wheel . --no-deps``, a new virtualenv without system
site-packages, ``pip install`` of the wheel, the installed ``kgc serve`` on a free port with
a temporary data directory (configured through the environment, as the image does), the
HEALTHCHECK command against it, then SIGTERM (the image's STOPSIGNAL) and a clean exit.
It proves the wheel carries every package and the entry point works outside the checkout.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.kgc_process import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def run(*args: str | Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    # Without PYTHONPATH: a checkout on it (the egg-info `pip wheel .` leaves there) would
    # make the fresh venv's pip take kgc as installed already and skip the wheel.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


# Slow (17 s: pip installs from PyPI): the default suite checks the image's sources in
# test_metrics_deploy.py (dockerignore, HEALTHCHECK against `kgc serve`).
@pytest.mark.long
@pytest.mark.slow
def test_wheel_in_a_fresh_venv_serves_and_passes_the_healthcheck(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        ".",
        "--no-deps",
        "--wheel-dir",
        wheels,
        "-q",
        cwd=REPO,
    )
    (wheel,) = wheels.glob("kgc-*.whl")

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)  # no --system-site-packages
    bin_dir = venv / "bin"
    run(
        bin_dir / "python",
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        wheel,
        cwd=tmp_path,
    )
    kgc = bin_dir / "kgc"
    assert kgc.exists()
    # The installed package is the wheel's, not this checkout's.
    where = run(
        bin_dir / "python", "-c", "import coordinator; print(coordinator.__file__)", cwd=tmp_path
    ).stdout
    assert str(venv) in where

    port, metrics_port = free_port(), free_port()
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
        "KGC_HOST": "127.0.0.1",
        "KGC_PORT": str(port),
        "KGC_METRICS_PORT": str(metrics_port),
        "KGC_DATA_DIR": str(tmp_path / "data"),
        "PYTHONUNBUFFERED": "1",
    }
    log = tmp_path / "kgc.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(kgc), "serve"], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, log.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)

        # The Dockerfile's HEALTHCHECK command.
        health = subprocess.run(
            [str(kgc), "health", "--bootstrap-server", f"127.0.0.1:{port}"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert health.returncode == 0, health
        assert "ApiVersions" in health.stdout
        topics = subprocess.run(
            [
                str(kgc),
                "topics",
                "list",
                "--bootstrap-server",
                f"127.0.0.1:{port}",
                "--output",
                "json",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert topics.returncode == 0, topics

        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0, log.read_text()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    text = log.read_text()
    assert "kgc stopped" in text, text
    assert "Traceback" not in text, text
    # Once stopped, the HEALTHCHECK reports unhealthy (exit 1).
    down = subprocess.run(
        [str(kgc), "health", "--bootstrap-server", f"127.0.0.1:{port}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert down.returncode == 1, down
