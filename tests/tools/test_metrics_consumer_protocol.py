"""The consumer-group (KIP-848) metrics of a real ``kgc serve``, scraped around real members.

Two librdkafka ``group.protocol=consumer`` members join, share a topic and leave: one for
good (fenced "left"), one static (a temporary leave, then fenced when its session expires).
Each step waits on the scraped series it checks, never on a sleep.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.kgc_process import KgcProcess
from support.kip848kit import CONSUMER_FLAGS, Member, wait_until

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
TOPIC = "metered"
GROUP = "meters"


@pytest.fixture
def kgc848(tmp_path: Path) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path / "data", *CONSUMER_FLAGS)
    proc.start()
    proc.wait_loaded()
    yield proc
    if proc.alive():
        proc.stop()


def scrape(kgc: KgcProcess) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{kgc.metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_consumer_group_series_move(kgc848: KgcProcess) -> None:
    from coordinator.tools.admin import Admin

    kgc = kgc848
    with Admin(kgc.bootstrap) as admin:
        admin.create_topic(TOPIC, 4, 1, {})
    before = scrape(kgc)
    assert value(before, "kgc_consumer_group_reconciliations_total") == 0
    assert value(before, "kgc_groups_by_type", type="consumer", state="Stable") == 0

    members = [
        Member(kgc, "m-1", group=GROUP, topic=TOPIC),
        Member(kgc, "m-2", instance_id="static-2", group=GROUP, topic=TOPIC),
    ]
    closed = False
    try:
        wait_until(
            lambda: all(m.assigned for m in members) and sum(len(m.assigned) for m in members) == 4,
            "two members sharing 4 partitions",
        )
        stable = wait_until(
            lambda: (
                s
                if value(s := scrape(kgc), "kgc_groups_by_type", type="consumer", state="Stable")
                == 1
                else None
            ),
            "the group Stable in the scrape",
        )
        assert value(stable, "kgc_group_members", group=GROUP) == 2
        # Two joins: two subscription bumps, each with a timed target assignment.
        assert value(stable, "kgc_consumer_group_epoch_bumps_total", cause="subscription") == 2
        assert value(stable, "kgc_consumer_group_assignment_duration_seconds_count") >= 2
        # Each member's join and every assignment step after it.
        assert value(stable, "kgc_consumer_group_reconciliations_total") >= 3
        beats = value(stable, "kgc_consumer_group_heartbeats_total", error="NONE")
        assert beats >= 4
        # The members keep heartbeating (every 250 ms): the counter moves on its own.
        wait_until(
            lambda: (
                value(scrape(kgc), "kgc_consumer_group_heartbeats_total", error="NONE") >= beats + 4
            ),
            "more heartbeats counted",
        )
        for m in members:
            m.close()
        closed = True
    finally:
        if not closed:
            for m in members:
                m.close()
    for m in members:
        assert m.error is None, m.error

    # m-1 left for good; m-2 (static) left temporarily and is fenced when its session ends.
    gone = wait_until(
        lambda: (
            s
            if value(
                s := scrape(kgc),
                "kgc_consumer_group_members_fenced_total",
                reason="session_timeout",
            )
            == 1
            else None
        ),
        "the static member fenced at its session timeout",
    )
    assert value(gone, "kgc_consumer_group_members_fenced_total", reason="left") == 1
    assert value(gone, "kgc_consumer_group_members_fenced_total", reason="rebalance_timeout") == 0
    assert value(gone, "kgc_consumer_group_epoch_bumps_total", cause="members_fenced") == 2
    assert value(gone, "kgc_groups_by_type", type="consumer", state="Empty") == 1
    assert value(gone, "kgc_group_members", group=GROUP) == 0
    # Classic groups' series are still there (none of this group).
    assert value(gone, "kgc_groups", state="Stable") == 0
    assert value(gone, "kgc_groups_by_type", type="classic", state="Empty") == 0
