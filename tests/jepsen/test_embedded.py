"""The embedded topology's disk faults: torn tails only past the end, a disk that fills, a run.

``tear`` must leave every byte that was in a file as it was (those may have been fsynced and
acknowledged) and add a tail recovery has to cut; the ``Disk`` (root: a loop-mounted ext4)
refuses writes with ENOSPC once filled and takes them again once freed; the nemesis plans
disk faults only for the embedded topology and packet loss only in namespace mode. The
short runs under these faults are in ``test_workloads_smoke.py``.
"""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest
from support.jepsen.embedded import Disk, disk_unavailable, tear
from support.jepsen.nemesis import FAULT_SETS, plan, usable


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_tear_appends_past_the_end_and_never_changes_a_byte_that_was_there(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    (data / "journal").mkdir(parents=True)
    (data / "journal" / "00000000000000000001.jnl").write_bytes(b"j" * 100)
    (data / "journal" / "00000000000000000002.jnl").write_bytes(b"k" * 50)
    for p in range(6):
        part = data / f"t-{p}"
        part.mkdir()
        (part / "00000000000000000000.log").write_bytes(b"a" * 300)
        (part / "00000000000000000010.log").write_bytes(b"b" * (40 + p))
    before = _files(data)
    torn = tear(data, random.Random(3), partitions=4)
    after = _files(data)
    grown = {p for p in before if len(after[p]) > len(before[p])}
    for path, old in before.items():
        assert after[path][: len(old)] == old, path  # nothing that was there changed
    assert data / "journal" / "00000000000000000002.jnl" in grown  # the newest journal file
    segs = {p for p in grown if p.suffix == ".log"}
    assert len(segs) == 4 and all(p.name == "00000000000000000010.log" for p in segs)
    assert len(torn) == 5


def test_disk_faults_only_where_the_topology_has_them() -> None:
    assert set(usable(FAULT_SETS["disk"], "netns", "embedded")) == {
        "disk-full",
        "torn",
        "kill",
        "pause",
    }
    assert usable(FAULT_SETS["disk"], "netns", "cluster") == ("kill", "pause")
    assert "loss" not in usable(FAULT_SETS["net"], "proxy", "cluster")
    assert "loss" in usable(FAULT_SETS["net"], "netns", "cluster")
    assert "link-node" in usable(FAULT_SETS["net"], "netns", "cluster")
    assert "link-node" not in usable(FAULT_SETS["net"], "proxy", "cluster")
    assert "link-node" not in usable(FAULT_SETS["net"], "netns", "embedded")
    assert usable(FAULT_SETS["db"], "netns", "embedded") == ()
    kinds = {a.fault for s in range(10) for a in plan(s, FAULT_SETS["disk"], 120, nodes=1)}
    assert {"disk-full", "torn"} <= kinds
    torn = [a for a in plan(5, FAULT_SETS["disk"], 120, nodes=1) if a.fault == "torn"]
    assert torn and torn == [
        a for a in plan(5, FAULT_SETS["disk"], 120, nodes=1) if a.fault == "torn"
    ]


@pytest.mark.skipif(disk_unavailable() is not None, reason=str(disk_unavailable()))
def test_disk_fills_to_enospc_and_frees(tmp_path: Path) -> None:
    disk = Disk(tmp_path, size_mb=16).create()
    try:
        assert os.path.ismount(disk.mount)
        assert disk.fill() > 8 << 20
        with pytest.raises(OSError) as refused, open(disk.mount / "x", "wb") as fh:
            fh.write(b"x" * (1 << 20))
            fh.flush()
            os.fsync(fh.fileno())
        assert refused.value.errno == errno.ENOSPC
        disk.free()
        (disk.mount / "y").write_bytes(b"y" * (1 << 20))
    finally:
        disk.destroy()
    assert not os.path.ismount(disk.mount) and not disk.image.exists()
    assert not (tmp_path / "mounts").exists()
