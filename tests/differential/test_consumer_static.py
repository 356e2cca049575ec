"""KIP-848 consumer groups, Kafka vs kgc: static members (instance ids) -- a second live
joiner (UNRELEASED_INSTANCE_ID), a temporary leave (epoch -2) and the rejoin that takes the
assignment back, fencing by instance id, unknown instances, a static leave for good."""

from __future__ import annotations

from typing import Any

import pytest
from support.diffkit import Runner, Side
from support.groupops import (
    CG_DESCRIBE,
    CG_HEARTBEAT,
    cg_describe_req,
    cg_req,
    synchronous_assignment,
    wait_topic_assignable,
)

pytestmark = [pytest.mark.kafka, pytest.mark.integration]


def static_members(side: Side) -> None:
    topic = side.name("cgs-t")
    side.create_topic(topic, 2)
    wait_topic_assignable(side, topic, 2)
    group = side.name("cg-static")
    side.wait_coordinator(group)
    synchronous_assignment(side, group)
    a1, a2, b = "a-one", "a-two", "b"

    def beat(step: str, mid: str, epoch: int, **kw: Any) -> Any:
        return side.call(CG_HEARTBEAT, 1, cg_req(group, mid, epoch, **kw), step=step)

    r = beat("a1.join", a1, 0, instance="ia", rebalance=30000, topics=[], owned=[])
    r = beat("a1.subscribes", a1, r.member_epoch, instance="ia", topics=[topic])
    held = [(t.topic_id, list(t.partitions)) for t in r.assignment.topic_partitions]
    beat("a2.while_a1_lives", a2, 0, instance="ia", rebalance=30000, topics=[topic], owned=[])
    beat("b.unknown_instance", b, 3, instance="ib")
    beat("a2.wrong_member_for_instance", a2, r.member_epoch, instance="ia")
    beat("b.leave_unknown_instance", b, -1, instance="ib")
    beat("a2.leave_fenced_instance", a2, -2, instance="ia")
    beat("a1.temporary_leave", a1, -2, instance="ia")
    side.call(CG_DESCRIBE, 1, cg_describe_req(group), step="describe_after_temporary_leave")
    r2 = beat("a2.takes_over", a2, 0, instance="ia", rebalance=30000, topics=[topic], owned=[])
    beat("a1.after_takeover", a1, r.member_epoch, instance="ia", owned=held)
    side.call(CG_DESCRIBE, 1, cg_describe_req(group), step="describe_after_takeover")
    beat("a2.leaves_for_good", a2, -1, instance="ia")
    side.call(CG_DESCRIBE, 1, cg_describe_req(group), step="describe_end")
    del r2


def test_static_members(diff_shared: Runner) -> None:
    outcome = diff_shared(static_members)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert steps["a2.while_a1_lives"].error_code == 111  # UNRELEASED_INSTANCE_ID
    assert steps["a1.temporary_leave"].member_epoch == -2
