"""A second ``kgc serve`` on a data directory already in use is refused.

The first server holds ``<data_dir>/.lock`` (flock) for its whole life. A second server on
the same directory must exit at once with one line naming the holder, before it reads,
recovers or deletes anything there, and the first keeps serving: every record it
acknowledged before and after the attempt is still there after a SIGKILL and restart.
"""

from __future__ import annotations

import pytest
from support.crashkit import read_all_confluent
from support.faultkit import produce_acked, report, second_serve
from support.groupkit import create_topic
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration


def test_second_server_on_same_directory_is_refused(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "ledger", 1)
    first = produce_acked(kgc.bootstrap, "ledger", [f"a{i}".encode() for i in range(200)])
    assert len(first) == 200
    assert kgc.proc is not None
    pid = kgc.proc.pid

    run = second_serve(kgc.data_dir)
    assert run.returncode != 0
    assert "Traceback" not in run.stderr, run.stderr
    # One line, after the effective configuration kgc logs at start (kgc.config).
    lines = [ln for ln in run.stderr.splitlines() if ln.strip() and " kgc.config: " not in ln]
    assert len(lines) == 1, run.stderr
    assert str(pid) in lines[0] and ".lock" in lines[0], lines[0]
    assert str(kgc.data_dir.resolve()) in lines[0], lines[0]
    assert kgc.alive()

    second = produce_acked(kgc.bootstrap, "ledger", [f"b{i}".encode() for i in range(200)])
    assert len(second) == 200
    acked = first + second
    assert [v for _p, _k, v in read_all_confluent(kgc.bootstrap, "ledger", 1)] == acked

    kgc.kill()
    kgc.start()
    values = [v for _p, _k, v in read_all_confluent(kgc.bootstrap, "ledger", 1)]
    lost = len(set(acked) - set(values))
    assert values == acked
    report(
        "second_server_on_same_directory",
        injected="a second kgc serve on the live data directory, then SIGKILL + restart",
        verified=f"refused in one line naming pid {pid}; first kept serving; "
        f"{len(acked)} acknowledged records read back in order",
        lost=lost,
    )


def test_lock_is_released_when_the_holder_dies(kgc: KgcProcess) -> None:
    """flock goes with the process: after a SIGKILL the directory is free again."""
    create_topic(kgc.bootstrap, "t", 1)
    acked = produce_acked(kgc.bootstrap, "t", [b"x"] * 10)
    kgc.kill()
    kgc.start()  # would be refused if a dead holder's lock outlived it
    assert len(read_all_confluent(kgc.bootstrap, "t", 1)) == len(acked) == 10
    report(
        "lock_released_on_sigkill",
        injected="SIGKILL of the lock holder",
        verified="the next kgc on the directory starts and reads all 10 acknowledged records",
    )
