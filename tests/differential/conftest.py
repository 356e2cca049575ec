"""Fixtures of the differential suite: ``diff`` runs a scenario on Kafka and on kgc."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from diffkit import OUTCOMES, Outcome, Runner, Side, api_name, run_both
from kafkaserver import KafkaServer
from kgc_process import KgcProcess


@pytest.fixture
def diff(kafka_broker: KafkaServer, kgc: KgcProcess) -> Runner:
    """``diff(scenario)`` runs ``scenario(side)`` on the session's Kafka broker and on this
    test's kgc, and fails on any difference not in known_differences.toml."""

    def run(scenario: Callable[[Side], None], **kw: Any) -> Outcome:
        return run_both(scenario, kafka_broker.bootstrap, kgc.bootstrap, **kw)

    return run


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not OUTCOMES:
        return
    per_api: dict[str, list[int]] = {}
    for o in OUTCOMES:
        for api in sorted(o.apis()):
            row = per_api.setdefault(api, [0, 0, 0])
            row[0] += 1
        for d in o.unexplained:
            per_api.setdefault(_api_of(o, d.step), [0, 0, 0])[1] += 1
        for d, _ in o.explained:
            per_api.setdefault(_api_of(o, d.step), [0, 0, 0])[2] += 1
    tr = terminalreporter
    tr.section("differential: Kafka vs kgc")
    tr.write_line(f"{'API':<28} {'scenarios':>9} {'unexplained':>11} {'listed':>6}")
    for api, (n, bad, listed) in sorted(per_api.items()):
        tr.write_line(f"{api:<28} {n:>9} {bad:>11} {listed:>6}")


def _api_of(outcome: Outcome, step: str) -> str:
    for e in outcome.kafka.exchanges:
        if e.step == step:
            return api_name(e.api_key)
    return "?"
