"""A group's history across changes of the worker count: every run's, from its coordinator.

Worker i writes ``__kgc_group_history`` partition i, and a group's offsets partition p is
coordinated by worker p % N, so a group committed under 2 workers, then 3, then one
process has its history in three partitions. ``kgc offsets history`` (DescribeGroupHistory
at the group's coordinator) answers all of it, oldest first: under 3 workers the
coordinator asks the other workers for theirs (over the inter-broker client), and one
process reads the partitions left over beside its own.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.clikit import Run, run_cli
from support.groupkit import commit_offset, create_topic
from support.kgc_process import KgcProcess
from support.workerskit import Workers, free_ports, wait_for

from coordinator.history.model import HISTORY_TOPIC
from coordinator.placement import worker_of
from coordinator.tools.client import Connection
from protocol.messages import describe_group_history as dgh
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


def listening(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def reads_while_down(three: Workers, worker: int, group: str) -> tuple[Run, subprocess.Popen[str]]:
    """``worker`` killed while the supervisor cannot start it again: a ``kgc offsets
    history`` with a 2 s timeout (it takes them all), then one with 60 s, left running as
    the supervisor goes on and starts the worker again."""
    supervisor = three.proc.pid if three.proc is not None else 0
    os.kill(supervisor, signal.SIGSTOP)
    try:
        os.kill(three.worker_pid(worker), signal.SIGKILL)
        wait_for(
            f"worker {worker} to stop listening", lambda: not listening(three.bootstrap_of(worker))
        )
        started = time.monotonic()
        run = run_cli(
            "offsets", "history", group, "--timeout", "2", "--bootstrap-server", three.bootstrap
        )  # fmt: skip
        assert time.monotonic() - started >= 2, run
        cli = subprocess.Popen(
            [sys.executable, "-m", "coordinator", "offsets", "history", group, "--output",
             "json", "--timeout", "60", "--bootstrap-server", three.bootstrap],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    finally:
        os.kill(supervisor, signal.SIGCONT)
    return run, cli


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


def test_a_restarting_worker_fails_only_the_reads_of_history_it_may_hold(tmp_path: Path) -> None:
    """A worker holding none of a group's history (by the worker counts that wrote each
    partition) is not asked: stopped, it delays no read. One that may hold some is: while
    it restarts the coordinator answers COORDINATOR_NOT_AVAILABLE, which ``kgc offsets
    history`` retries until it is back."""
    data = tmp_path / "data"
    group = moving_group()
    port = free_ports(3)
    two = Workers(data, port=port)
    two.start()
    two.wait_loaded()
    create_topic(two.bootstrap, TOPIC, 1)
    two.wait_topic(TOPIC)
    commit(two.bootstrap, group, 1)  # history partition 1 (worker 1 of 2)
    assert two.stop() == 0

    three = Workers(data, workers=3, port=port)
    three.start()
    three.wait_loaded()
    commit(three.bootstrap, group, 2)  # history partition 2 (worker 2 of 3 coordinates)
    # Worker 0 holds neither partition: stopped, the read does not wait for it (before,
    # every worker was asked, and this read waited for the inter-broker timeout).
    idle = three.worker_pid(0)
    os.kill(idle, signal.SIGSTOP)
    try:
        with Connection.to(three.bootstrap_of(2), timeout=5.0) as c:
            _, resp = c.request(dgh.API_KEY, dgh.Request(group_id=group), version=0)
        assert resp.error_code == 0, resp
        assert [ch.committed_offset for ch in resp.offset_changes] == [1, 2]
    finally:
        os.kill(idle, signal.SIGCONT)
    # Worker 1 holds the first run's partition. Killed while the supervisor cannot start it
    # again, its history is unreadable: the CLI retries for its timeout, then says so in
    # one line.
    run, cli = reads_while_down(three, 1, group)
    run.assert_clean_error(1)  # one line
    assert "COORDINATOR_NOT_AVAILABLE" in run.err and "retried for 2 s" in run.err, run.err
    # A read started then ends once worker 1 is back (the supervisor goes on).
    out, err = cli.communicate(timeout=90)
    assert cli.returncode == 0, err
    assert [c["offset"] for c in json.loads(out)] == [1, 2]
    assert three.stop() == 0


def test_a_read_waits_for_its_restarting_coordinator(tmp_path: Path) -> None:
    """The group's coordinator itself restarting: ``kgc offsets history`` retries the
    connection it cannot make (or loses) until its timeout, as Kafka's admin client retries
    a disconnection, then says so in one line; a read started meanwhile ends once the
    worker is back. (Before, the first refused connection ended the command.)"""
    group = moving_group()  # worker 2 of 3 coordinates it
    three = Workers(tmp_path / "data", workers=3, port=free_ports(3))
    three.start()
    try:
        _read_waits_for_its_restarting_coordinator(three, group)
    finally:
        if three.alive():  # a failure stops the node too (its workers follow the supervisor)
            three.stop()


def _read_waits_for_its_restarting_coordinator(three: Workers, group: str) -> None:
    three.wait_loaded()
    create_topic(three.bootstrap, TOPIC, 1)
    three.wait_topic(TOPIC)
    commit(three.bootstrap, group, 7)
    run, cli = reads_while_down(three, 2, group)
    run.assert_clean_error(3)  # unreachable: one line
    assert three.bootstrap_of(2) in run.err and "retried for 2 s" in run.err, run.err
    out, err = cli.communicate(timeout=90)
    assert cli.returncode == 0, err
    assert [c["offset"] for c in json.loads(out)] == [7]
    # A bootstrap server nobody serves still fails at once.
    started = time.monotonic()
    run = run_cli(
        "offsets", "history", group, "--timeout", "30", "--bootstrap-server",
        f"127.0.0.1:{free_ports(1)}",
    )  # fmt: skip
    run.assert_clean_error(3)
    assert time.monotonic() - started < 10, run
    assert three.stop() == 0
