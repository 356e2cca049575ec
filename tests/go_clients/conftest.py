"""Fixtures of the Go client suite: ``go_clients``, the directory of the built Go programs,
and ``kgc_go``, one ``kgc serve`` for the module's tests.

``scripts/ensure-go-deps`` downloads the pinned modules of ``tests/go`` and builds its
programs into ``tests/go/bin`` (nothing to do when the binaries are newer than the
sources); the fixture runs it once per session so the suite works on its own. The tests
share one kgc, as they share the session's Kafka broker: each scenario makes topic and
group names of its own, and a server per test would cost a start and a stop each.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.kgc_process import KgcProcess

REPO = Path(__file__).resolve().parents[2]
ENSURE = REPO / "scripts" / "ensure-go-deps"
BIN = REPO / "tests" / "go" / "bin"


@pytest.fixture(scope="session")
def go_clients() -> Path:
    done = subprocess.run([str(ENSURE)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        pytest.fail(f"scripts/ensure-go-deps failed:\n{done.stdout}\n{done.stderr}")
    return BIN


@pytest.fixture(scope="module")
def kgc_go(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path_factory.mktemp("kgc-go") / "data")
    proc.start()
    yield proc
    if proc.alive():
        proc.stop()
