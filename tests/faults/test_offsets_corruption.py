"""A flipped byte in an older ``__consumer_offsets`` segment stays inside its partition.

A real ``kgc serve`` commits offsets for groups on every offsets partition (small segments,
so each partition has several), stops (cleanly, or SIGKILL), gets one byte flipped inside a
batch of the oldest segment of one partition, and restarts. The node must serve: groups on
the other partitions fetch exactly what was acknowledged, groups on the damaged partition
get NOT_COORDINATOR (retriable; never COORDINATOR_LOAD_IN_PROGRESS forever), one ERROR line
names the file and position, and both the metric and ``kgc health`` name the partition.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.faultkit import report
from support.groupkit import commit_offset, create_topic, fetch_offset, wait_until
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from storage.records import partition_for

pytestmark = pytest.mark.integration

PARTITIONS = 8
ROUNDS = 12
TOPIC = "t"


def one_group_per_partition() -> dict[int, str]:
    found: dict[int, str] = {}
    i = 0
    while len(found) < PARTITIONS:
        found.setdefault(partition_for(f"group-{i}", PARTITIONS), f"group-{i}")
        i += 1
    return found


@pytest.fixture
def kgc(tmp_path: Path) -> Iterator[KgcProcess]:
    proc = KgcProcess(
        tmp_path / "data",
        "--offsets-topic-num-partitions",
        str(PARTITIONS),
        "--offsets-topic-segment-bytes",
        "1024",
    )
    proc.start()
    yield proc
    if proc.alive():
        proc.kill()


def flip_byte_in_oldest_segment(partition_dir: Path) -> tuple[Path, int]:
    segments = sorted(partition_dir.glob("*.log"))
    assert len(segments) >= 2, f"need an older segment, have {segments}"
    seg = segments[0]
    data = bytearray(seg.read_bytes())
    position = 70  # inside the first batch's records (its header is 61 bytes)
    data[position] ^= 0x10
    seg.write_bytes(bytes(data))
    return seg, position


def metric_lines(kgc: KgcProcess) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{kgc.metrics_port}/metrics", timeout=5) as r:
        return [line for line in r.read().decode().splitlines() if not line.startswith("#")]


@pytest.mark.parametrize("stop", ["clean", "sigkill"])
def test_corrupt_offsets_segment_takes_only_its_partition_offline(
    kgc: KgcProcess, stop: str
) -> None:
    create_topic(kgc.bootstrap, TOPIC, 1)
    groups = one_group_per_partition()
    acked: dict[str, int] = {}
    with Connection.to(kgc.bootstrap) as conn:
        for r in range(ROUNDS):
            for g in groups.values():
                assert commit_offset(conn, g, TOPIC, 1000 * r + len(g)) == 0
                acked[g] = 1000 * r + len(g)
    if stop == "clean":
        assert kgc.stop() == 0
    else:
        kgc.kill()
    damaged = 3
    seg, _position = flip_byte_in_oldest_segment(kgc.data_dir / f"__consumer_offsets-{damaged}")
    kgc.start()

    with Connection.to(kgc.bootstrap) as conn:

        def settled() -> bool:
            return all(
                fetch_offset(conn, g)[0] != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                for g in groups.values()
            )

        wait_until(settled, timeout=30)
        lost = 0
        offline = False
        for p, g in groups.items():
            code, offset = fetch_offset(conn, g)
            if p == damaged and code == ErrorCode.NOT_COORDINATOR:
                offline = True
                assert commit_offset(conn, g, TOPIC, 5) == ErrorCode.NOT_COORDINATOR
            else:
                # Served: then exactly what was acknowledged, never a prefix of it.
                assert code == 0
                lost += offset != acked[g]
        assert lost == 0
    # After a clean stop the journal is empty: nothing can repair the segment, so the
    # partition must be offline. After SIGKILL, recovery may restore the damaged batches
    # from the journal (then the partition is served whole, checked above).
    assert offline or stop == "sigkill"

    lines = metric_lines(kgc)
    damaged_lines = [
        line for line in lines if line.startswith("kgc_partition_damaged") and line.endswith(" 1.0")
    ]
    health = subprocess.run(
        [sys.executable, "-m", "coordinator", "health", "--bootstrap-server", kgc.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if offline:
        assert damaged_lines == [
            f'kgc_partition_damaged{{partition="{damaged}",topic="__consumer_offsets"}} 1.0'
        ]
        assert "kgc_offsets_partitions_offline 1.0" in lines
        assert health.returncode == 1, health
        assert f"__consumer_offsets-{damaged}" in health.stderr
        wait_until(lambda: seg.name in kgc.log(), timeout=10)
        errors = [line for line in kgc.log().splitlines() if "ERROR" in line and seg.name in line]
        assert errors and "position" in errors[0], kgc.log()
        outcome = (
            f"partition {damaged} answers NOT_COORDINATOR; metric and kgc health name it; "
            f"ERROR line: {errors[0].strip()[:200]}"
        )
    else:
        assert damaged_lines == [] and "kgc_offsets_partitions_offline 0.0" in lines
        assert health.returncode == 0, health
        outcome = f"partition {damaged} was restored from the journal and serves every offset"
    report(
        f"test_corrupt_offsets_segment_takes_only_its_partition_offline[{stop}]",
        injected=f"one byte flipped in {seg.name} of __consumer_offsets-{damaged} after a "
        f"{stop} stop",
        verified=f"{PARTITIONS - 1} other partitions served their acknowledged offsets; {outcome}",
        lost=lost,
    )
