"""The ``cluster`` fixture: three real ``kgc serve`` nodes on the session's PostgreSQL.

Each test gets an empty database (``pg_url`` drops and recreates it) and a fresh cluster
with a 3 s session timeout and 500 ms heartbeats, so failovers take seconds, not the
default 9 s. The nodes' logs stay under the test's ``tmp_path`` (``node-<id>/kgc-<port>.log``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.clusterkit import Cluster


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, pg_url, nodes=3)
    try:
        c.start_all()
        yield c
    finally:
        c.close()
