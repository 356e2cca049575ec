"""The security guide's example (docs/security.md), run as written: it must keep working when pasted.

How this works: the shell blocks (```` ```sh ````) of docs/security.md are taken from the
document itself and run with ``bash -e`` in an empty directory, as a fresh shell
would run them: the installed ``kgc`` first on the PATH and no ``KGC_*`` variable set except
two that keep the run from colliding with other tests on this machine: the example's port
9093 is replaced by a free one, and ``KGC_METRICS_PORT=0`` turns off the metrics endpoint
(9404). The run must exit 0; its output must show alice's group and only the topic she may
read; and the server it left running must refuse a client without the example's settings.
The server's process group (the shell and what it started in the background) is stopped at
the end.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.kgc_process import free_port

pytestmark = pytest.mark.integration

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def section_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```$", text, flags=re.S | re.M)


def test_security_guide_has_the_example() -> None:
    blocks = section_blocks(GUIDE.read_text())
    assert blocks, "no ```sh block in docs/security.md"
    script = "\n".join(blocks)
    for needed in ("openssl", "kgc users add", "kgc serve", "kgc acls add", "--command-config"):
        assert needed in script


@pytest.fixture
def session() -> Iterator[list[int]]:
    """Process group ids to stop at the end (the shell's, which its background jobs share)."""
    groups: list[int] = []
    yield groups
    for pgid in groups:
        _stop_group(pgid)


def _stop_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)  # polling for the group to empty (no event to wait on)
    os.killpg(pgid, signal.SIGKILL)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the example needs openssl")
# Slow (10 s): test_security_guide_has_the_example keeps the block; tools/test_command_config.py
# runs users, ACLs and --command-config against a secured server.
@pytest.mark.slow
def test_security_guide_example_works_when_pasted(tmp_path: Path, session: list[int]) -> None:
    script = "\n".join(section_blocks(GUIDE.read_text()))
    assert "localhost:9093" in script
    port = free_port()
    script = script.replace("9093", str(port))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGC_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["KGC_METRICS_PORT"] = "0"
    proc = subprocess.Popen(
        ["bash", "-e", "-c", script],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    session.append(proc.pid)
    out, err = proc.communicate(timeout=180)
    work = tmp_path / "kgc-secure"
    log = (work / "kgc.log").read_text() if (work / "kgc.log").exists() else ""
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}\nkgc.log:\n{log}"

    # Alice's last two commands: her group, and of the two topics only "events".
    tail = out[out.rindex("GROUP ") :]
    groups_table, topics_table = tail.split("TOPIC ", 1)
    assert re.search(r"^app\s+classic\s+Empty", groups_table, flags=re.M), out
    assert re.search(r"^events\s+3\s", topics_table, flags=re.M), out
    assert "payments" not in topics_table, out

    # The server still runs, on SASL_SSL only: a client without the settings is refused.
    bare = subprocess.run(
        ["kgc", "groups", "list", "--bootstrap-server", f"localhost:{port}"],
        cwd=work, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bare.returncode == 3 and "--command-config" in bare.stderr, bare
    admin = subprocess.run(
        ["kgc", "groups", "list", "--bootstrap-server", f"localhost:{port}",
         "--command-config", "admin.properties"],
        cwd=work, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert admin.returncode == 0 and "app" in admin.stdout, admin
