"""This checkout on ``sys.path`` for the benchmarks: its packages and the tests' helpers.

How this works: a benchmark runs as ``python bench/<name>.py``, so Python puts ``bench/``
first on ``sys.path`` and nothing else of the checkout. Importing this module adds the
checkout's root and its ``tests/`` right after it, so ``from support.kgc_process import
KgcProcess`` finds the tests' helpers (``tests/support``) and ``import storage`` this
checkout's package. The root must be there: otherwise the folder ``tests/storage`` (a
namespace portion) would stand in for the package, because the editable install's finder is
asked only after every ``sys.path`` entry has been tried. regress.py's harness has the same
layout (a root holding the tree's packages, ``bench/`` and ``tests/support``), so a benchmark
run there finds the tree's packages the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

for _path in (str(ROOT / "tests"), str(ROOT)):
    if _path not in sys.path:
        sys.path.insert(1, _path)
