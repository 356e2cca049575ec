"""The test tree's rule from docs/testing.md: test modules never import each other.

How this works: every Python file under tests/ (node_modules and the other client trees
hold none of ours) is read as text and its import lines matched; an import of a module
named ``test_*`` is one test module reaching into another, whose helpers belong in
``tests/support/``. Text, not ``ast``: the whole tree is read in a fraction of a second.
"""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
IMPORT_OF_A_TEST = re.compile(r"^\s*(?:from|import)\s+(?:[\w.]+\.)?test_\w+", re.M)


def test_no_test_module_imports_another() -> None:
    offenders = [
        f"{path.relative_to(TESTS)}: {m.group(0).strip()}"
        for path in sorted(TESTS.rglob("*.py"))
        if "node_modules" not in path.parts
        for m in IMPORT_OF_A_TEST.finditer(path.read_text(errors="replace"))
    ]
    assert not offenders, offenders
