"""Fixtures of the Go client suite: ``go_clients``, the directory of the built Go programs.

``scripts/ensure-go-deps`` downloads the pinned modules of ``tests/go`` and builds its
programs into ``tests/go/bin`` (nothing to do when the binaries are newer than the
sources); the fixture runs it once per session so the suite works on its own.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENSURE = REPO / "scripts" / "ensure-go-deps"
BIN = REPO / "tests" / "go" / "bin"


@pytest.fixture(scope="session")
def go_clients() -> Path:
    done = subprocess.run([str(ENSURE)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        pytest.fail(f"scripts/ensure-go-deps failed:\n{done.stdout}\n{done.stderr}")
    return BIN
