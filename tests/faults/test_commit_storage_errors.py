"""A full disk answers OffsetCommit with Kafka's error code, and keeps nothing it refused.

A real ``kgc serve`` keeps its data on a small tmpfs. Once a filler file takes the rest of
it, OffsetCommit is answered NOT_COORDINATOR (Kafka's coordinator maps a storage error to
it) on an open connection, and OffsetFetch keeps returning the last acknowledged offset.
When space comes back, commits succeed again; after a restart every acknowledged offset is
there and the refused one is not.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.faultkit import report
from support.groupkit import commit_offset, create_topic, fetch_offset
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode

pytestmark = pytest.mark.integration


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path: Path) -> None:
    """Write until the file system refuses (ENOSPC), down to single bytes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (65536, 1):
            chunk = b"\0" * size
            try:
                while True:
                    os.write(fd, chunk)
            except OSError:
                pass
    finally:
        os.close(fd)


def test_full_disk_answers_commits_not_coordinator(tmpfs: Path) -> None:
    kgc = KgcProcess(tmpfs / "data", "--offsets-topic-num-partitions", "4")
    kgc.log_path = tmpfs.parent / "kgc.log"  # not on the full disk
    kgc.start()
    try:
        create_topic(kgc.bootstrap, "t", 1)
        with Connection.to(kgc.bootstrap) as conn:
            assert commit_offset(conn, "g", "t", 5) == 0
            filler = tmpfs / "filler"
            fill(filler)
            refused = 0
            for offset in range(6, 40):
                code = commit_offset(conn, "g", "t", offset)
                if code != 0:
                    assert code == ErrorCode.NOT_COORDINATOR
                    refused = offset
                    break
            assert refused, "the full disk accepted every commit"
            acked = refused - 1
            assert fetch_offset(conn, "g")[1] == acked  # same connection: it stayed open
            os.unlink(filler)
            assert commit_offset(conn, "g", "t", 100) == 0
            assert fetch_offset(conn, "g")[1] == 100
        assert kgc.stop() == 0
        kgc.start()
        kgc.wait_loaded()
        with Connection.to(kgc.bootstrap) as conn:
            assert fetch_offset(conn, "g")[1] == 100
    finally:
        if kgc.alive():
            kgc.kill()
    report(
        "test_full_disk_answers_commits_not_coordinator",
        injected="tmpfs filled (ENOSPC) under a running kgc, then freed",
        verified=f"commit of {refused} answered NOT_COORDINATOR on an open connection; fetch "
        f"kept {acked}; after freeing space and a restart the acknowledged 100 is there",
    )
