"""Fixtures of the Java client suite: ``clients`` (the Java test programs of one test,
killed at its end) and ``topics`` (topics made through kgc's own admin client)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.javakit import Clients
from support.kgc_process import KgcProcess

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


@pytest.fixture
def kgc848(tmp_path: Path) -> Iterator[KgcProcess]:
    """kgc whose consumer groups heartbeat every 500 ms (Kafka's default is 5 s, its floor
    too): a consumer-protocol member learns of a revocation or an assignment at its next
    heartbeat, so this keeps each hand-over short without changing what happens."""
    proc = KgcProcess(
        tmp_path / "data",
        "--group-consumer-min-heartbeat-interval-ms",
        "500",
        "--group-consumer-heartbeat-interval-ms",
        "500",
    )
    proc.start()
    yield proc
    if proc.alive():
        proc.stop()
