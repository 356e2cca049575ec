"""Share-group metrics, fed by the real shard with a fake clock: groups by type and state,
members per group, and each group's epoch bumps and fencings (as the runtime reports the
events of every Result)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from support.share_group_context import ShareContext

from coordinator.metrics import Metrics


def scrape(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(m.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_share_groups_by_state_members_and_rebalances() -> None:
    sc = ShareContext(foo=2)
    m = Metrics(process_metrics=False, shard=sc.shard)
    sc.hb("g", "a", 0, ["foo"])
    sc.hb("g", "b", 0, ["foo"])
    sc.hb("idle", "x", 0, ["foo"])
    sc.hb("idle", "x", -1)
    sc.sleep(45000)  # a and b's sessions expire
    sc.hb("g", "c", 0, ["foo"])
    m.group_events(sc.gc.events, sc.now)
    got = scrape(m)
    assert got[("kgc_groups_by_type", (("state", "Stable"), ("type", "share")))] == 1
    assert got[("kgc_groups_by_type", (("state", "Empty"), ("type", "share")))] == 1
    assert got[("kgc_group_members", (("group", "g"),))] == 1
    assert got[("kgc_group_members", (("group", "idle"),))] == 0
    rebalances = {
        labels: v for (name, labels), v in got.items() if name == "kgc_group_rebalances_total"
    }
    assert rebalances[(("cause", "session_timeout"), ("group", "g"))] == 2
    assert rebalances[(("cause", "left"), ("group", "idle"))] == 1
    assert rebalances[(("cause", "epoch_bump"), ("group", "g"))] == 3  # a, b and c joined
