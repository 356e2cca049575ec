"""KIP-848 as Kafka 4.4 runs it, where it moved on from 4.1-4.2 (the differential suite
found each; kgc now does the same):

* a new group's first member that subscribes to topics (or names a server assignor) joins at
  epoch 2 (the new group is at 1, the subscription moves it);
* a member naming another server assignor than the group's preferred one bumps the epoch;
* KIP-1251 (KAFKA-20066, assignment epochs): an OffsetCommit with an older member epoch is
  accepted for partitions the member held since that epoch.

Kafka 4.4's target assignments recomputed at most every group.consumer.assignment.interval.ms
(1 s) off the coordinator thread depend on timing and are not compared: the KIP-848 scenarios
turn that off for their groups (``synchronous_assignment``).
"""

from __future__ import annotations

import pytest
from support.diffkit import Runner, Side
from support.groupops import (
    CG_DESCRIBE,
    CG_HEARTBEAT,
    OFFSET_COMMIT,
    cg_describe_req,
    cg_req,
    commit_req,
    synchronous_assignment,
    wait_topic_assignable,
)

pytestmark = [pytest.mark.kafka, pytest.mark.integration]


def first_member_subscribes(side: Side) -> None:
    topic = side.name("k44-t")
    side.create_topic(topic, 2)
    wait_topic_assignable(side, topic, 2)
    group = side.name("k44-first")
    side.wait_coordinator(group)
    synchronous_assignment(side, group)
    side.call(
        CG_HEARTBEAT,
        1,
        cg_req(group, "m", 0, rebalance=30000, topics=[topic], owned=[]),
        step="first_join_subscribed",
    )


def test_first_member_subscribing_joins_at_epoch_2(diff_shared: Runner) -> None:
    outcome = diff_shared(first_member_subscribes)
    (first,) = outcome.kafka.exchanges
    assert first.response.member_epoch == 2


def assignor_change(side: Side) -> None:
    topic = side.name("k44-a")
    side.create_topic(topic, 2)
    wait_topic_assignable(side, topic, 2)
    group = side.name("k44-assignor")
    side.wait_coordinator(group)
    synchronous_assignment(side, group)
    a, b = "a", "b"
    r = side.call(CG_HEARTBEAT, 1, cg_req(group, a, 0, rebalance=30000, topics=[], owned=[]))
    side.call(CG_HEARTBEAT, 1, cg_req(group, a, r.member_epoch, topics=[topic]), step="a.sub")
    side.call(
        CG_HEARTBEAT,
        1,
        cg_req(group, b, 0, rebalance=30000, topics=[], owned=[], assignor="range"),
        step="b.joins_naming_range",
    )


def test_another_assignor_bumps_the_epoch(diff_shared: Runner) -> None:
    outcome = diff_shared(assignor_change)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert steps["b.joins_naming_range"].member_epoch == steps["a.sub"].member_epoch + 1


def commit_with_older_epoch(side: Side) -> None:
    topic, other_topic = side.name("k44-c"), side.name("k44-d")
    side.create_topic(topic, 2)
    side.create_topic(other_topic, 1)
    wait_topic_assignable(side, topic, 2)
    wait_topic_assignable(side, other_topic, 1)
    group = side.name("k44-commit")
    side.wait_coordinator(group)
    synchronous_assignment(side, group)
    m, other = "m", "other"
    r = side.call(CG_HEARTBEAT, 1, cg_req(group, m, 0, rebalance=30000, topics=[], owned=[]))
    r = side.call(CG_HEARTBEAT, 1, cg_req(group, m, r.member_epoch, topics=[topic]))
    held = [(t.topic_id, list(t.partitions)) for t in r.assignment.topic_partitions]
    # Another member joins for another topic: the group epoch moves, m keeps both
    # partitions and reaches the new epoch.
    side.call(
        CG_HEARTBEAT, 1, cg_req(group, other, 0, rebalance=30000, topics=[other_topic], owned=[])
    )
    r2 = side.call(CG_HEARTBEAT, 1, cg_req(group, m, r.member_epoch, owned=held))
    side.call(CG_DESCRIBE, 1, cg_describe_req(group), step="describe")
    side.call(
        OFFSET_COMMIT,
        9,
        commit_req(group, {topic: {0: 1}}, generation=r.member_epoch, member_id=m),
        step="commit_older_epoch",
    )
    del r2


def test_commit_with_an_older_epoch_is_accepted(diff_shared: Runner) -> None:
    outcome = diff_shared(commit_with_older_epoch)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert steps["commit_older_epoch"].topics[0].partitions[0].error_code == 0
