"""Faults of a kgc.workers node: killed workers, a killed node, a worker that cannot start.

The crash suites' rules applied to workers: load runs while a worker is SIGKILLed; the
supervisor starts it again and every commit acknowledged before (and after) is there, every
acknowledged record readable exactly once, every batch's CRC good. A whole node killed
(supervisor and workers) with the offsets segments' unsynced tails lost (as a power cut
loses the page cache) gets every acknowledged commit back from the workers' journals, even
when it restarts with another worker count (or as one process): the supervisor replays
every journal into every log before the workers start. A worker that cannot start stops
the node with one line; settings that cannot work are refused with one line; workers whose
supervisor is gone stop by themselves.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support.crashkit import (
    BackgroundProducer,
    Committer,
    check_log_integrity,
    committed,
    read_all_confluent,
    wait_acked,
)
from support.groupkit import commit_offset, create_topic
from support.kgc_process import KgcProcess
from support.workerskit import (
    Workers,
    free_ports,
    group_on,
    kill_node,
    pid_alive,
    report,
    wait_for,
)

from coordinator.node.workers.worker import lock_holder
from coordinator.placement import worker_of
from coordinator.tools.client import Connection
from storage.records import OFFSETS_TOPIC, partition_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def owner(group: str, workers: int) -> int:
    return worker_of(OFFSETS_TOPIC, partition_for(group, 50), workers)


def lost_commits(bootstrap_of: object, workers: int, acked: dict[str, dict[int, int]]) -> list[str]:
    """Acknowledged commits the node does not hold (asked of each group's worker)."""
    assert callable(bootstrap_of)
    lost = []
    for group, offsets in acked.items():
        stored = committed(bootstrap_of(owner(group, workers)), group)
        for p, offset in offsets.items():
            got, metadata = stored.get(p, (-1, None))
            # librdkafka sends the metadata with its C terminator; kgc stores the bytes sent.
            if got < offset or (metadata or "").rstrip("\x00") not in (f"m{got}", f"c{got}"):
                lost.append(f"{group}/{p}: acknowledged {offset}, found {got} {metadata!r}")
    return lost


def test_sigkilled_worker_is_restarted_and_loses_nothing_acknowledged(tmp_path: Path) -> None:
    node = Workers(tmp_path / "data")
    node.start()
    node.wait_loaded()
    create_topic(node.bootstrap, "crash", 4)
    create_topic(node.bootstrap, "load", 4)
    node.wait_topic("crash")
    node.wait_topic("load")
    groups = [group_on(1, 2, "k1"), group_on(1, 2, "k1b"), group_on(0, 2, "k0")]
    committers = [Committer(node.bootstrap, g) for g in groups]
    producer = BackgroundProducer(node.bootstrap, "load", **{"enable.idempotence": True})
    producer.thread.start()
    for c in committers:
        c.start()
    pid0 = node.worker_pid(0)
    kills = 2
    try:
        for round_ in range(kills):
            wait_acked(producer, 300 * (round_ + 1), timeout=60)
            wait_for("commits", lambda: all(len(c.snapshot()) == 4 for c in committers), 30)
            victim = node.worker_pid(1)
            os.kill(victim, signal.SIGKILL)
            # The supervisor starts it again; it replays its journal and partitions.
            wait_for(
                "worker 1 restarted",
                lambda v=victim: (
                    not pid_alive(v)
                    and (p := lock_holder(node.data_dir, 1)) is not None
                    and p != v
                    and pid_alive(p)
                ),
                30,
            )
            node.wait_listening(1)
            node.wait_worker_loaded(1)
            before = {c.group: c.snapshot() for c in committers}
            # Committers go on against the new worker 1: progress past what was acked.
            wait_for(
                "commits after the restart",
                lambda b=before: all(
                    sum(c.snapshot().values()) > sum(b[c.group].values()) for c in committers
                ),
                60,
            )
    finally:
        for c in committers:
            c.close()
        producer.finish()
    acked = {c.group: c.snapshot() for c in committers}
    lost = lost_commits(node.bootstrap_of, 2, acked)
    records = read_all_confluent(node.bootstrap, "load", 4)
    values = [v for _p, _k, v in records]
    missing = producer.acked - set(values)
    assert not producer.failed, producer.failed[:3]
    assert len(values) == len(set(values)), "a record was stored twice"
    batches = check_log_integrity(node.data_dir) + check_log_integrity(
        node.data_dir, "load-*/*.log"
    )
    log = node.log()
    assert log.count("was killed by SIGKILL; starting it again") == kills, log
    assert node.worker_pid(0) == pid0  # the other worker never noticed
    assert node.stop() == 0
    report(
        "test_sigkilled_worker_is_restarted_and_loses_nothing_acknowledged",
        injected=f"SIGKILL of worker 1 {kills} times under commit and produce load",
        verified=f"restarted each time; {sum(len(a) for a in acked.values())} acknowledged "
        f"commits held, {len(producer.acked)} acknowledged records read once, {batches} "
        "batches CRC-checked, worker 0 untouched",
        lost=len(lost) + len(missing),
    )
    assert lost == [] and not missing


def segment_sizes(data_dir: Path) -> dict[Path, int]:
    return {seg: seg.stat().st_size for seg in data_dir.glob(f"{OFFSETS_TOPIC}-*/*.log")}


def lose_writes_since(data_dir: Path, synced: dict[Path, int]) -> int:
    """Cut every offsets segment back to its size in ``synced`` (taken when the node was
    up: nothing was written since that a journaled log fsyncs before a checkpoint), as a
    power cut loses the page cache; returns how many lost bytes."""
    lost = 0
    for seg, size in segment_sizes(data_dir).items():
        keep = synced.get(seg, 0)
        if size > keep:
            os.truncate(seg, keep)
            lost += size - keep
    return lost


def commit_round(bootstrap_of: object, workers: int, groups: list[str], r: int) -> dict[str, int]:
    assert callable(bootstrap_of)
    acked = {}
    for g in groups:
        with Connection.to(bootstrap_of(owner(g, workers))) as c:
            offset = 100 * r + len(g)
            assert commit_offset(c, g, "journaled", offset, metadata=f"c{offset}") == 0
            acked[g] = offset
    return acked


def test_killed_node_restarts_with_another_worker_count_from_every_journal(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    two = Workers(data)
    two.start()
    two.wait_loaded()
    synced = segment_sizes(data)
    create_topic(two.bootstrap, "journaled", 1)
    two.wait_topic("journaled")
    groups = [f"j-{i}" for i in range(24)]
    assert {owner(g, 2) for g in groups} == {0, 1}
    acked = {}
    for r in range(3):
        acked = commit_round(two.bootstrap_of, 2, groups, r)
    kill_node(two, 2)
    cut = lose_writes_since(data, synced)
    assert cut > 0
    assert list((data / "journal.w0").glob("*.jnl")) and list((data / "journal.w1").glob("*.jnl"))

    # Three workers now: most partitions have another owner than the journal's writer.
    three = Workers(data, workers=3)
    three.start()
    three.wait_loaded()
    assert "replaying every journal" in three.log()
    synced = segment_sizes(data)  # the supervisor closed every log cleanly: all fsynced
    expected = {g: {0: o} for g, o in acked.items()}
    lost = lost_commits(three.bootstrap_of, 3, expected)
    acked = commit_round(three.bootstrap_of, 3, groups, 3)
    kill_node(three, 3)
    cut += lose_writes_since(data, synced)

    # One process: the embedded node's LogManager replays the workers' journals too.
    one = KgcProcess(data)
    one.start()
    one.wait_loaded()
    expected = {g: {0: o} for g, o in acked.items()}
    lost += lost_commits(lambda _w: one.bootstrap, 1, expected)
    assert one.stop() == 0
    assert not list(data.glob("journal*/*.jnl")), "journals left behind"
    report(
        "test_killed_node_restarts_with_another_worker_count_from_every_journal",
        injected="2-worker node killed, offsets segments cut back to their last fsync (a "
        "power cut's lost page cache), restarted with 3 workers; killed and cut again, "
        f"restarted as one process ({cut} bytes cut in all)",
        verified=f"{len(groups)} groups' acknowledged commits held after each restart",
        lost=len(lost),
    )
    assert lost == []


def test_a_worker_that_cannot_start_stops_the_node_with_one_line(tmp_path: Path) -> None:
    port = free_ports(2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port + 1))  # worker 1's port
        taken.listen()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "coordinator",
                "serve",
                "--kgc-workers",
                "2",
                "--port",
                str(port),
                "--metrics-port",
                "0",
                "--data-dir",
                str(tmp_path / "data"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 1, out
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("kgc: error:")]
    assert len(errors) == 1 and errors[0].startswith("kgc: error: worker 1 cannot start:"), out
    assert str(port + 1) in errors[0] or "in use" in errors[0], errors[0]
    with pytest.raises(OSError):  # worker 0 was stopped too
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def serve_two_workers(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``kgc serve --kgc-workers 2`` on ``tmp_path/data`` with ``flags``, run to its exit
    (the refusals)."""
    serve = [sys.executable, "-m", "coordinator", "serve", "--kgc-workers", "2"]
    return subprocess.run(
        [*serve, "--data-dir", str(tmp_path / "data"), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--port", "0"], "kgc.workers=2 needs fixed ports (worker i uses port + i), but port"),
        (
            ["--port", "9092", "--storage-url", "postgresql://kgc@127.0.0.1:1/kgc"],
            "in cluster mode (storage.url) run more nodes instead",
        ),
        (["--port", "65535"], "port 65535 + 1 is past 65535"),
    ],
)
def test_settings_a_worker_node_cannot_use_are_refused_with_one_line(
    tmp_path: Path, flags: list[str], expected: str
) -> None:
    out = serve_two_workers(tmp_path, *flags)
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], out.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was touched


def test_an_inter_broker_login_the_workers_cannot_make_is_refused_with_one_line(
    tmp_path: Path,
) -> None:
    """The workers reach each other on the inter-broker listener (the first one): a SASL
    listener without the inter-broker mechanism is refused before anything is touched."""
    port = free_ports(2)
    listeners = f"SASL_PLAINTEXT://127.0.0.1:{port}"
    out = serve_two_workers(
        tmp_path, "--listeners", listeners, "--sasl-enabled-mechanisms", "PLAIN"
    )
    assert out.returncode == 1, out
    errors = [line for line in out.stderr.splitlines() if line.startswith("kgc: error:")]
    assert len(errors) == 1, out.stderr
    assert "invalid setting sasl.mechanism.inter.broker.protocol GSSAPI" in errors[0]
    assert not (tmp_path / "data").exists()


def test_workers_stop_cleanly_when_their_supervisor_dies(tmp_path: Path) -> None:
    node = Workers(tmp_path / "data")
    node.start()
    node.wait_loaded()
    pids = [node.worker_pid(i) for i in range(2)]
    node.kill()  # SIGKILL: no SIGTERM reaches the workers
    wait_for("workers gone", lambda: not any(pid_alive(p) for p in pids), 30)
    log = node.log()
    assert log.count("the supervisor went away; stopping") == 2, log
    assert log.count("kgc stopped") == 2, log  # each worker's clean stop
    # Clean stops: nothing left to replay, and the directory is free for the next node.
    assert not list((tmp_path / "data").glob("journal*/*.jnl"))
    again = Workers(tmp_path / "data")
    again.start()
    assert again.stop() == 0
