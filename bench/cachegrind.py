"""Running a process under valgrind's cachegrind and reading its instruction count.

How this works: ``command`` prefixes an argv with cachegrind counting instructions only
(``--cache-sim=no``: user space, all threads; the kernel's share is not counted), its
output file named by the caller (``%p`` for one file per process); ``ENV`` keeps the runs
repeatable (unbuffered output, a fixed hash seed). ``instructions`` reads the ``summary:``
line of one output file. The counting benchmarks (``bench_history.py --count``,
``count_leader_hints.py``) share these.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ENV", "command", "instructions"]

ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONHASHSEED": "0"}


def command(out_file: str, argv: list[str]) -> list[str]:
    return [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        f"--cachegrind-out-file={out_file}",
        *argv,
    ]


def instructions(out: Path) -> int:
    """The instructions counted in ``out`` (a cachegrind output file)."""
    for line in out.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no summary in {out}")
