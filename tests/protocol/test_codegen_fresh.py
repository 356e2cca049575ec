"""The committed generated codec is exactly what the generator produces from the schemas."""

from __future__ import annotations

from protocol import codegen


def test_generated_output_is_not_stale() -> None:
    assert codegen.main(["--check"]) == 0, "run `python -m protocol.codegen` and commit the result"
