"""Helpers for the CLI tests: run a ``kgc`` command and check what it printed and returned.

How this works: ``run_cli`` runs ``python -m coordinator ...`` as a subprocess, the entry
point itself. ``call_cli`` runs the same command in this process through the CLI's own
``coordinator.cli.main(argv)`` and gives what the subprocess would: its stdout and stderr
(both captured, neither a terminal), its exit code (``SystemExit`` from argparse mapped as
the interpreter maps it: ``None`` 0, an int itself, anything else printed to stderr and 1; an
uncaught exception printed as a traceback and 1), the same environment and working
directory. A fresh Python start-up per command costs about a second on the test machine; a
call in process costs what the command does. The CLI builds its parser per call, configures
no logging for the operator commands and keeps no module-level state, so calls do not leak
into each other. Not for ``kgc serve`` past its argument checks (it sets up the root logger and
runs the server in this process) nor for commands that read stdin (``kgc users`` prompting
for a password: pass ``--password``): those are ``run_cli``'s.

Calls may come from worker threads (``asyncio.to_thread``, while an event loop keeps a
consumer heartbeating): one call runs at a time, and while it runs ``sys.stdout`` and
``sys.stderr`` are proxies that send the calling thread's writes to its capture and every
other thread's to where they went before.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO


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
    """``kgc *args`` as a subprocess: the entry point itself."""
    proc = subprocess.run(
        [sys.executable, "-m", "coordinator", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return Run(args, proc.returncode, proc.stdout, proc.stderr)


class _PerThread(io.TextIOBase):
    """A stream writing the capturing thread's text to its buffer, others' to ``fallback``."""

    def __init__(self, owner: int, capture: io.StringIO, fallback: TextIO) -> None:
        self.owner, self.capture, self.fallback = owner, capture, fallback

    def _target(self) -> TextIO:
        return self.capture if threading.get_ident() == self.owner else self.fallback

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        return False if threading.get_ident() == self.owner else self.fallback.isatty()

    def writable(self) -> bool:
        return True


_one_at_a_time = threading.Lock()


def _exit_code(exc: SystemExit, err: io.StringIO) -> int:
    """The process exit status the interpreter gives for ``exc`` (printing a str code)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=err)
    return 1


def call_cli(*args: str) -> Run:
    """``kgc *args`` in this process, through ``coordinator.cli.main``; as ``run_cli`` gives it."""
    from coordinator.cli import main

    out, err = io.StringIO(), io.StringIO()
    with _one_at_a_time:
        saved = sys.stdout, sys.stderr
        me = threading.get_ident()
        sys.stdout = _PerThread(me, out, saved[0])
        sys.stderr = _PerThread(me, err, saved[1])
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = _exit_code(exc, err)
        except Exception:
            traceback.print_exc(file=err)
            code = 1
        finally:
            sys.stdout, sys.stderr = saved
    return Run(args, code, out.getvalue(), err.getvalue())


CLI = Callable[..., Run]
