"""CLI test fixtures; the helpers live in ``clikit`` (importable from the test modules)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from clikit import CLI, run_cli


@pytest.fixture
def cli() -> CLI:
    return run_cli
