from __future__ import annotations

from collections.abc import Callable

import pytest


class FakeClock:
    """Injected millisecond clock that tests move by hand."""

    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


ClockFn = Callable[[], int]
