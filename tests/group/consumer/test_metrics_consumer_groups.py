"""The consumer-group (KIP-848) metrics, fed by the real shard with a fake clock.

A ``Metrics`` is wired to a ``GroupContext``'s shard as the app wires it: every result's
events go to ``group_events`` and every heartbeat answer to ``on_request``, as the runtime
and the server do. Each test scrapes the exposition text and checks the series it names.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from support.consumer_member import Member, settle
from support.group_context import GroupContext

from coordinator.group.consumer.group import ConsumerGroupState
from coordinator.group.events import ConsumerGroupEpochBumped, ConsumerMembersFenced
from coordinator.group.types import Result
from coordinator.metrics import Metrics
from protocol.messages import consumer_group_heartbeat as cgh

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def wired(**topics: int) -> tuple[GroupContext, Metrics]:
    c = GroupContext.with_topics(None, **topics)
    m = Metrics(process_metrics=False, shard=c.shard)
    take, heartbeat = c.apply, c.consumer_group_heartbeat

    def take_and_report(result: Result) -> Result:
        m.group_events(result.events, c.now)
        return take(result)

    def heartbeat_and_count(req: Any, version: int = 1) -> Any:
        started = time.perf_counter()
        reply = heartbeat(req, version)
        m.on_request(cgh.API_KEY, version, reply, started)
        return reply

    c.apply = take_and_report  # type: ignore[method-assign]
    c.consumer_group_heartbeat = heartbeat_and_count  # type: ignore[method-assign]
    return c, m


def scrape(m: Metrics) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(m.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_join_reconcile_and_assignment_time() -> None:
    c, m = wired(orders=6)
    a = Member(c, "g", "a", ["orders"])
    a.join()
    settle([a])
    one = scrape(m)
    # The first member's subscription creates the group at epoch 1.
    assert value(one, "kgc_consumer_group_epoch_bumps_total", cause="subscription") == 1
    assert value(one, "kgc_consumer_group_assignment_duration_seconds_count") == 1
    assert value(one, "kgc_consumer_group_reconciliations_total") >= 1
    assert value(one, "kgc_groups_by_type", type="consumer", state="Stable") == 1
    assert value(one, "kgc_groups_by_type", type="classic", state="Stable") == 0
    assert value(one, "kgc_group_members", group="g") == 1
    heartbeats = value(one, "kgc_consumer_group_heartbeats_total", error="NONE")
    assert heartbeats >= 2

    # A second member: a subscription bump, a new target (timed), revocation then assignment.
    b = Member(c, "g", "b", ["orders"])
    b.join()
    assert c.shard.consumer.groups["g"].state is ConsumerGroupState.RECONCILING
    reconciling = scrape(m)
    assert value(reconciling, "kgc_groups_by_type", type="consumer", state="Reconciling") == 1
    assert value(reconciling, "kgc_groups_by_type", type="consumer", state="Stable") == 0
    settle([a, b])
    two = scrape(m)
    assert value(two, "kgc_consumer_group_epoch_bumps_total", cause="subscription") == 2
    assert value(two, "kgc_consumer_group_assignment_duration_seconds_count") == 2
    assert value(two, "kgc_consumer_group_assignment_duration_seconds_sum") > 0
    # a: revoke 3 (unrevoked), then the new epoch; b: joined, then its 3 partitions.
    assert (
        value(two, "kgc_consumer_group_reconciliations_total")
        >= value(one, "kgc_consumer_group_reconciliations_total") + 3
    )
    assert value(two, "kgc_consumer_group_heartbeats_total", error="NONE") > heartbeats
    assert value(two, "kgc_group_members", group="g") == 2
    assert sorted(len(x.partitions()) for x in (a, b)) == [3, 3]
    # Steady heartbeats change nothing: the reconciliation count stays.
    settle([a, b])
    assert value(scrape(m), "kgc_consumer_group_reconciliations_total") == value(
        two, "kgc_consumer_group_reconciliations_total"
    )


def test_heartbeat_errors_by_code() -> None:
    c, m = wired(orders=2)
    a = Member(c, "g", "a", ["orders"])
    a.join()
    a.epoch += 5  # an epoch the coordinator never gave: FENCED_MEMBER_EPOCH
    assert a.beat().error_code != 0
    stranger = Member(c, "g", "nobody", ["orders"])
    stranger.epoch = 3
    stranger.beat()  # UNKNOWN_MEMBER_ID
    s = scrape(m)
    assert value(s, "kgc_consumer_group_heartbeats_total", error="FENCED_MEMBER_EPOCH") == 1
    assert value(s, "kgc_consumer_group_heartbeats_total", error="UNKNOWN_MEMBER_ID") == 1
    assert value(s, "kgc_consumer_group_heartbeats_total", error="NONE") == 1
    # The per-API request series has the same answers.
    assert (
        value(s, "kgc_requests_total", api="ConsumerGroupHeartbeat", version="1", error="NONE") == 1
    )


def test_fenced_members_by_reason() -> None:
    c, m = wired(orders=4)
    a = Member(c, "g", "a", ["orders"], rebalance_timeout_ms=1000)
    a.join()
    settle([a])
    b = Member(c, "g", "b", ["orders"])
    b.join()
    c_ = Member(c, "g", "c", ["orders"])
    c_.join()
    # a never acknowledges the revocation: fenced at its rebalance timeout.
    a.beat(ack=False)
    c.sleep(1001)
    assert a.member_id not in c.shard.consumer.groups["g"].members
    s = scrape(m)
    assert value(s, "kgc_consumer_group_members_fenced_total", reason="rebalance_timeout") == 1
    assert value(s, "kgc_consumer_group_epoch_bumps_total", cause="members_fenced") == 1
    # b leaves; c stops heartbeating and its session expires.
    settle([b, c_])
    b.leave()
    c.sleep(c.shard.config.consumer_group_session_timeout_ms + 1)
    s = scrape(m)
    assert value(s, "kgc_consumer_group_members_fenced_total", reason="left") == 1
    assert value(s, "kgc_consumer_group_members_fenced_total", reason="session_timeout") == 1
    assert value(s, "kgc_consumer_group_members_fenced_total", reason="join_timeout") == 0
    assert value(s, "kgc_consumer_group_epoch_bumps_total", cause="members_fenced") == 3
    assert value(s, "kgc_groups_by_type", type="consumer", state="Empty") == 1
    assert value(s, "kgc_group_members", group="g") == 0


def test_labels_come_from_the_events_kinds() -> None:
    m = Metrics(process_metrics=False)
    m.group_events(
        [
            ConsumerGroupEpochBumped("g", 1, "group created", "created"),
            ConsumerMembersFenced("g", 2, ("x", "y"), "session timeout expired", "session_timeout"),
        ],
        0,
    )
    s = scrape(m)
    assert value(s, "kgc_consumer_group_members_fenced_total", reason="session_timeout") == 2
    assert value(s, "kgc_consumer_group_epoch_bumps_total", cause="members_fenced") == 1
    # Without a shard the reconciliation counter is still exposed (0), and no group series.
    assert value(s, "kgc_consumer_group_reconciliations_total") == 0
    assert not [k for k in s if k[0] == "kgc_groups_by_type"]
