"""Shared fixtures: a real kgc process per test (integration) and helpers.

Tests marked ``long`` (a minute or more) are collected first: ``scripts/test`` hands modules
to its parallel workers in collection order, and a long test handed out last would run
alone at the end while the other workers sit idle.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.kafkaserver import KafkaServer, running_broker
from support.kgc_process import KgcProcess
from support.pgserver import PgServer, available


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A stable sort: long tests first, each group in its collected order.
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture
def kgc(tmp_path: Path) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path / "data")
    proc.start()
    yield proc
    if proc.alive():
        proc.stop()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One real PostgreSQL server for the session (``scripts/test`` installs it if missing).

    Its directory is a fresh one under the system temp dir, not pytest's ``tmp_path``: as
    root the server runs as the ``postgres`` user, who cannot enter root's 0700 pytest dirs.
    """
    if not available():
        pytest.fail("PostgreSQL binaries not found: run ./scripts/test (it installs them)")
    server = PgServer(Path(tempfile.mkdtemp(prefix="kgc-pg-"))).start()
    yield server
    server.destroy()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """The URL of an empty database on the session's server (dropped and made anew)."""
    pg_server.reset()
    return pg_server.url


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaServer]:
    """One real Apache Kafka broker (KRaft combined mode) for the session: the reference.

    Started from the pinned jars of ``tests/jvm/pom.xml`` (``scripts/test`` resolves them);
    tests share it, so each uses topic and group names of its own.
    """
    with running_broker() as server:
        yield server
