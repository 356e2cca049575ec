"""Fixtures of the Java client suite: ``clients`` (the Java test programs of one test,
killed at its end) and ``topics`` (topics made through kgc's own admin client)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from javakit import Clients

from coordinator.tools.admin import Admin


@pytest.fixture
def clients() -> Iterator[Clients]:
    c = Clients()
    yield c
    c.close()


def create_topic(bootstrap: str, name: str, partitions: int, **configs: str) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topic(name, partitions, 1, configs)


@pytest.fixture
def topic_maker() -> Callable[..., None]:
    return create_topic
