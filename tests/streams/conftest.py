"""The ``instances`` fixture: the word-count JVMs a test starts, killed at its end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.wordcountkit import StreamsInstance


@pytest.fixture
def instances() -> Iterator[list[StreamsInstance]]:
    started: list[StreamsInstance] = []
    yield started
    for inst in started:
        inst.stop()
