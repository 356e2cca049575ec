"""The nemesis schedule: replayable from its seed, within the run, one fault at a time."""

from __future__ import annotations

import itertools

import pytest
from support.jepsen.nemesis import FAULT_SETS, FAULTS, plan


@pytest.mark.parametrize("faults", sorted(FAULT_SETS))
def test_a_seed_replays_the_same_plan(faults: str) -> None:
    a = plan(7, FAULT_SETS[faults], 120)
    assert a == plan(7, FAULT_SETS[faults], 120)
    if faults != "none":
        assert a and a != plan(8, FAULT_SETS[faults], 120)
    else:
        assert a == []


def test_faults_come_one_at_a_time_after_warmup_and_before_the_quiet_end() -> None:
    for seed in range(50):
        actions = plan(seed, FAULTS, 90, warmup=5, quiet=10)
        for a in actions:
            assert a.fault in FAULTS
            assert a.at >= 5 and a.at + a.duration <= 80 + 1e-6
        for a, b in itertools.pairwise(actions):
            assert b.at >= a.at + a.duration  # healed before the next begins


def test_every_fault_kind_is_drawn_with_its_parameters() -> None:
    drawn = {a.fault: a for seed in range(30) for a in plan(seed, FAULTS, 120)}
    assert set(drawn) == set(FAULTS)
    assert drawn["link-db"].params["mode"] in ("drop", "blackhole", "reset")
    assert drawn["delay"].params["delay_ms"] > 0
    assert drawn["kill"].target in (1, 2, 3) and drawn["pg-kill"].target is None
