"""Fixtures of the differential suite: ``diff`` runs a scenario on Kafka and on kgc."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.diffkit import OUTCOMES, Outcome, Runner, Side, api_name, run_both
from support.kafkaserver import KafkaServer
from support.kgc_process import KgcProcess


def _kafka_bootstrap(request: pytest.FixtureRequest) -> str:
    """The session's Kafka broker; or, with ``KGC_DIFF_KAFKA=host:port``, a broker already
    running with tests/support/kafkaserver.py's settings (quicker rounds while writing scenarios)."""
    external = os.environ.get("KGC_DIFF_KAFKA")
    if external:
        return external
    broker: KafkaServer = request.getfixturevalue("kafka_broker")
    return broker.bootstrap


@pytest.fixture
def diff(request: pytest.FixtureRequest, kgc: KgcProcess) -> Runner:
    """``diff(scenario)`` runs ``scenario(side)`` on the session's Kafka broker and on this
    test's kgc, and fails on any difference not in known_differences.toml.

    ``KGC_DIFF_KAFKA=host:port`` (see ``_kafka_bootstrap``)."""
    kafka_bootstrap = _kafka_bootstrap(request)

    def run(scenario: Callable[[Side], None], **kw: Any) -> Outcome:
        return run_both(scenario, kafka_bootstrap, kgc.bootstrap, **kw)

    return run


@pytest.fixture(scope="module")
def kgc_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KgcProcess]:
    """One kgc for a module's scenarios (each uses names of its own, as on the shared Kafka
    broker): a kgc start costs seconds on a loaded machine."""
    proc = KgcProcess(tmp_path_factory.mktemp("kgc-module") / "data")
    proc.start()
    yield proc
    if proc.alive():
        proc.stop()


@pytest.fixture
def diff_shared(request: pytest.FixtureRequest, kgc_module: KgcProcess) -> Runner:
    """``diff`` against the module's kgc (``kgc_module``) instead of a fresh one."""
    kafka_bootstrap = _kafka_bootstrap(request)

    def run(scenario: Callable[[Side], None], **kw: Any) -> Outcome:
        return run_both(scenario, kafka_bootstrap, kgc_module.bootstrap, **kw)

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
