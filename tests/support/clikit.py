"""Helpers for the CLI tests: run ``python -m coordinator ...`` as a subprocess and check it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Run:
    args: tuple[str, ...]
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def assert_clean_error(self, code: int) -> None:
        """The documented exit code, one line on stderr, and no traceback."""
        assert self.code == code, self
        assert "Traceback" not in self.err, self.err
        lines = [ln for ln in self.err.splitlines() if ln.strip()]
        assert len(lines) == 1, self.err


def run_cli(*args: str, timeout: float = 60.0) -> Run:
    proc = subprocess.run(
        [sys.executable, "-m", "coordinator", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return Run(args, proc.returncode, proc.stdout, proc.stderr)


CLI = Callable[..., Run]
