"""The node's garbage-collection settings (coordinator/node/process.py): fewer young collections,
and what start-up loaded frozen out of every later collection."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from coordinator.node.process import GC_THRESHOLDS, freeze_when_loaded, tune_gc


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()


def test_tune_gc_raises_the_young_threshold(restore_gc: None) -> None:
    tune_gc()
    assert gc.get_threshold() == GC_THRESHOLDS
    assert GC_THRESHOLDS[0] > 700  # Python's default collects every 700 allocations


async def test_the_heap_is_frozen_once_the_offsets_log_is_loaded(restore_gc: None) -> None:
    gc.unfreeze()
    loaded = asyncio.Event()
    groups: Any = SimpleNamespace(loaded=loaded)
    task = asyncio.ensure_future(freeze_when_loaded(groups))
    await asyncio.sleep(0)
    assert gc.get_freeze_count() == 0  # still loading: nothing frozen
    survivor: list[list[int]] = [[] for _ in range(1000)]  # containers: tracked by gc
    loaded.set()
    await asyncio.wait_for(task, 5)
    assert gc.get_freeze_count() >= len(survivor)  # start-up's objects: never scanned again
