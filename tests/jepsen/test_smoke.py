"""The Jepsen-style smoke run: about a minute of faults in proxy mode, then every check.

Offsets as registers on three ``kgc serve`` nodes and one PostgreSQL, every link through a
fault proxy, under the nemesis' whole fault set (kills, pauses past the session timeout,
PostgreSQL killed, paused and its sessions terminated, links cut, a minority split, delays).
The seed is random per run unless ``KGC_JEPSEN_SEED`` names one; it, the plan, the history
and every node's log stay in the test's tmp dir, printed on failure, and
``scripts/jepsen --replay <dir>`` runs the same plan again. The fencing audit of what
PostgreSQL holds runs at the end too.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from support import pgserver
from support.jepsen.runner import RunConfig, run_once

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.skipif(not pgserver.available(), reason="no PostgreSQL binaries"),
]


@pytest.mark.long
async def test_registers_under_every_fault_stay_linearizable(tmp_path: Path) -> None:
    seed = int(os.environ.get("KGC_JEPSEN_SEED") or random.SystemRandom().randrange(2**31))
    config = RunConfig("registers", "all", 60.0, seed, tmp_path / f"kgcj-smoke-{seed}")
    result = await run_once(config)
    print(result.row())
    where = f"seed {seed}, run directory {config.run_dir}"
    assert result.error is None, f"{where}: {result.error}\n" + "\n".join(result.detail[-3:])
    assert result.faults_applied > 0, where
    assert result.ops > 1000, where
    assert result.audited_batches > 0, where  # the fencing audit read the durable log
    assert not result.anomalies, f"{where}: {result.anomalies}\n" + "\n".join(result.detail)
