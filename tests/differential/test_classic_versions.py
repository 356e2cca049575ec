"""Classic groups, Kafka vs kgc: one member's life at every version Kafka serves -- JoinGroup
v0-v9 (v0-3 without MEMBER_ID_REQUIRED, v5+ static, v7+ protocol type), SyncGroup v0-5,
Heartbeat v0-4, LeaveGroup v0-5 -- and the errors whose shape changes with the version."""

from __future__ import annotations

import pytest
from support.diffkit import Runner, Side
from support.groupops import (
    HEARTBEAT,
    JOIN,
    LEAVE,
    SYNC,
    hb_req,
    join_req,
    leave_req,
    sync_req,
)

from protocol.messages import leave_group

pytestmark = [pytest.mark.kafka, pytest.mark.integration]


def every_version(side: Side) -> None:
    for jv in range(10):
        group = side.name(f"classic-v{jv}")
        side.wait_coordinator(group)
        sv, hv, lv = min(jv, 5), min(jv, 4), min(jv, 5)
        m = side.member(f"v{jv}")
        instance = f"inst-{jv}" if jv >= 5 and jv % 2 else None
        first = m.call(JOIN, jv, join_req(group, instance=instance), step=f"v{jv}.join")
        if first.error_code == 79:
            first = m.call(
                JOIN, jv, join_req(group, first.member_id, instance=instance), step=f"v{jv}.join2"
            )
        gen, mid = first.generation_id, first.member_id
        # Errors at this version: unknown member, bad generation.
        m.call(JOIN, jv, join_req(group, "ghost"), step=f"v{jv}.join_ghost")
        m.call(SYNC, sv, sync_req(group, gen + 1, mid, instance=instance), step=f"v{jv}.sync_gen")
        m.call(
            SYNC,
            sv,
            sync_req(group, gen, mid, instance=instance, assignments={mid: b"x"}),
            step=f"v{jv}.sync",
        )
        m.call(HEARTBEAT, hv, hb_req(group, gen, mid, instance), step=f"v{jv}.heartbeat")
        m.call(HEARTBEAT, hv, hb_req(group, gen, "ghost"), step=f"v{jv}.heartbeat_ghost")
        if lv >= 3:
            m.call(LEAVE, lv, leave_req(group, "ghost", (mid, instance)), step=f"v{jv}.leave")
        else:
            m.call(
                LEAVE,
                lv,
                leave_group.LeaveGroupRequest(group_id=group, member_id="ghost"),
                step=f"v{jv}.leave_ghost",
            )
            m.call(
                LEAVE,
                lv,
                leave_group.LeaveGroupRequest(group_id=group, member_id=mid),
                step=f"v{jv}.leave",
            )
        m.call(HEARTBEAT, hv, hb_req(group, gen, mid, instance), step=f"v{jv}.heartbeat_gone")


def test_one_member_at_every_version(diff_shared: Runner) -> None:
    outcome = diff_shared(every_version)
    versions = {e.version for e in outcome.kafka.exchanges if e.api_key == JOIN}
    assert versions == set(range(10))
