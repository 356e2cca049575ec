"""A group's history across changes of the worker count: every run's, from its coordinator.

Worker i writes ``__kgc_group_history`` partition i, and a group's offsets partition p is
coordinated by worker p % N, so a group committed under 2 workers, then 3, then one
process has its history in three partitions. ``kgc offsets history`` (DescribeGroupHistory
at the group's coordinator) answers all of it, oldest first: under 3 workers the
coordinator asks the other workers for theirs (over the inter-broker client), and one
process reads the partitions left over beside its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.clikit import run_cli
from support.groupkit import commit_offset, create_topic
from support.kgc_process import KgcProcess
from support.workerskit import Workers, free_ports

from coordinator.history.model import HISTORY_TOPIC
from coordinator.placement import worker_of
from coordinator.tools.client import Connection
from protocol.messages import describe_log_dirs, find_coordinator
from storage.records import OFFSETS_TOPIC, partition_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "hist"


def moving_group() -> str:
    """A group coordinated by worker 1 of 2, then by worker 2 of 3 (then by the one process):
    three runs, three history partitions."""
    for i in range(1000):
        p = partition_for(f"moving-{i}", 50)
        if worker_of(OFFSETS_TOPIC, p, 2) == 1 and worker_of(OFFSETS_TOPIC, p, 3) == 2:
            return f"moving-{i}"
    raise AssertionError("no such group")


def commit(bootstrap: str, group: str, offset: int) -> None:
    """One commit at the group's coordinator, found as a client finds it."""
    with Connection.to(bootstrap) as c:
        _, resp = c.request(
            find_coordinator.API_KEY,
            find_coordinator.Request(key=group, key_type=0, coordinator_keys=[group]),
        )
    (coord,) = resp.coordinators
    assert coord.error_code == 0
    with Connection.to(f"{coord.host}:{coord.port}") as c:
        assert commit_offset(c, group, TOPIC, offset) == 0


def history_partitions(node: Workers) -> dict[int, set[int]]:
    """The ``__kgc_group_history`` partitions each worker has open."""
    out = {}
    for worker in range(node.workers):
        with Connection.to(node.bootstrap_of(worker)) as c:
            _, resp = c.request(describe_log_dirs.API_KEY, describe_log_dirs.Request(topics=None))
        out[worker] = {
            p.partition_index
            for r in resp.results
            for t in r.topics
            for p in t.partitions
            if t.name == HISTORY_TOPIC
        }
    return out


def history(bootstrap: str, group: str) -> list[int]:
    run = run_cli("offsets", "history", group, "--output", "json", "--bootstrap-server", bootstrap)
    assert run.code == 0, run
    changes = run.json()
    assert changes == sorted(changes, key=lambda c: c["timestamp_ms"])  # oldest first
    return [c["offset"] for c in changes]


def test_history_is_whole_after_the_worker_count_changes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    group = moving_group()
    port = free_ports(3)
    two = Workers(data, port=port)
    two.start()
    two.wait_loaded()
    create_topic(two.bootstrap, TOPIC, 1)
    two.wait_topic(TOPIC)
    commit(two.bootstrap, group, 1)
    commit(two.bootstrap, group, 2)
    assert history(two.bootstrap, group) == [1, 2]
    assert two.stop() == 0

    three = Workers(data, workers=3, port=port)
    three.start()
    three.wait_loaded()
    commit(three.bootstrap, group, 3)
    # Each history partition is opened by its writer only (DescribeLogDirs is per broker).
    assert history_partitions(three) == {0: {0}, 1: {1}, 2: {2}}
    # Worker 2 coordinates it now; worker 1 holds the history of the first run.
    assert history(three.bootstrap, group) == [1, 2, 3]
    assert three.stop() == 0

    one = KgcProcess(data, port=port)
    one.start()
    one.wait_loaded()
    commit(one.bootstrap, group, 4)
    # Partitions 1 and 2 are left over: read beside partition 0.
    assert history(one.bootstrap, group) == [1, 2, 3, 4]
    assert one.stop() == 0
