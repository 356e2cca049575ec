"""CLI test fixtures; the helpers live in ``support.clikit``."""

from __future__ import annotations

import pytest
from support.clikit import CLI, run_cli


@pytest.fixture
def cli() -> CLI:
    return run_cli
