"""Shared by the fault suite: how each fault test says what it did.

Every test in ``tests/faults/`` injects one fault and then verifies what survived. It calls
``report(injected=..., verified=...)`` so that ``./scripts/test tests/faults -s`` (or a
failure's captured output) reads as a table of fault → outcome, with the count of
acknowledged records and commits lost (which must be 0).
"""

from __future__ import annotations


def report(test: str, *, injected: str, verified: str, lost: int = 0) -> None:
    """Print one line: the fault, what was checked afterwards, acknowledged items lost."""
    print(
        f"[fault] {test}: injected: {injected} | verified: {verified} | acknowledged lost: {lost}"
    )
