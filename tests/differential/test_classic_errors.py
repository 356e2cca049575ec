"""Classic groups, Kafka vs kgc: every error of JoinGroup, SyncGroup, Heartbeat and LeaveGroup,
and which one wins when a request has several faults."""

from __future__ import annotations

import pytest
from support.diffkit import Runner, Side
from support.groupops import (
    HEARTBEAT,
    JOIN,
    LEAVE,
    SYNC,
    assign_all,
    hb,
    hb_req,
    join,
    join_req,
    leave_req,
    sync,
    sync_req,
)

from protocol.messages import leave_group

pytestmark = [pytest.mark.kafka, pytest.mark.integration]


def join_errors(side: Side) -> None:
    group = side.name("classic-join-err")
    unknown = side.name("classic-join-unknown")
    side.wait_coordinator(group)
    side.wait_coordinator(unknown)
    m = side.member("m")
    # Precedence: empty group id, then session timeout bounds, then the group.
    m.call(JOIN, 9, join_req("", session=1), step="empty_group_bad_session")
    m.call(JOIN, 9, join_req("", "someone"), step="empty_group_unknown_member")
    m.call(JOIN, 9, join_req(unknown, "ghost", session=5999), step="bad_session_unknown_member")
    m.call(JOIN, 9, join_req(unknown, session=1800001), step="session_too_large")
    m.call(JOIN, 9, join_req(unknown, session=6000, rebalance=1), step="session_min_ok")
    m.call(JOIN, 9, join_req(unknown, "ghost"), step="unknown_member_unknown_group")
    # Protocol checks on an empty (new) group.
    m.call(JOIN, 9, join_req(unknown, ptype=""), step="empty_protocol_type")
    m.call(JOIN, 9, join_req(unknown, protocols=[]), step="no_protocols")
    m.call(JOIN, 4, join_req(unknown, ptype="", protocols=[]), step="v4_empty_everything")
    # A live group: unknown member ids, a pending id reused after joining.
    a = side.member("a")
    ja = join(a, group)
    sync(a, group, ja, assign_all(ja))
    m.call(JOIN, 9, join_req(group, "ghost"), step="unknown_member_known_group")
    m.call(JOIN, 9, join_req(group, "ghost", ptype="connect"), step="unknown_member_bad_type")
    m.call(JOIN, 9, join_req(group, ja.member_id, ptype="connect"), step="known_member_bad_type")
    m.call(JOIN, 9, join_req(group, "ghost", instance="i1"), step="unknown_member_static")
    a.call(LEAVE, 5, leave_req(group, ja.member_id))


def test_join_group_errors_and_precedence(diff_shared: Runner) -> None:
    outcome = diff_shared(join_errors)
    steps = {e.step: e.response.error_code for e in outcome.kafka.exchanges}
    assert steps["empty_group_bad_session"] == 24  # INVALID_GROUP_ID
    assert steps["bad_session_unknown_member"] == 26  # INVALID_SESSION_TIMEOUT


def sync_heartbeat_leave_errors(side: Side) -> None:
    group = side.name("classic-shl-err")
    unknown = side.name("classic-shl-unknown")
    side.wait_coordinator(group)
    side.wait_coordinator(unknown)
    m = side.member("m")
    for v in (0, 3, 5):
        m.call(SYNC, v, sync_req("", 1, "x"), step=f"sync_empty_group_v{v}")
        m.call(SYNC, v, sync_req(unknown, 1, "x"), step=f"sync_unknown_group_v{v}")
    for v in (0, 4):
        m.call(HEARTBEAT, v, hb_req("", 1, "x"), step=f"hb_empty_group_v{v}")
        m.call(HEARTBEAT, v, hb_req(unknown, 1, "x"), step=f"hb_unknown_group_v{v}")
        m.call(HEARTBEAT, v, hb_req(unknown, 1, ""), step=f"hb_unknown_group_no_member_v{v}")
    m.call(
        LEAVE, 0, leave_group.LeaveGroupRequest(group_id="", member_id="x"), step="leave_v0_empty"
    )
    m.call(
        LEAVE,
        0,
        leave_group.LeaveGroupRequest(group_id=unknown, member_id="x"),
        step="leave_v0_unk",
    )
    m.call(LEAVE, 5, leave_req(unknown, "x"), step="leave_v5_unknown_group")
    m.call(LEAVE, 5, leave_req(unknown), step="leave_v5_no_members")
    # A Stable group of one: sync and heartbeat errors against it.
    a = side.member("a")
    ja = join(a, group)
    sync(a, group, ja, assign_all(ja))
    gen, mid = ja.generation_id, ja.member_id
    m.call(SYNC, 5, sync_req(group, gen, "ghost"), step="sync_unknown_member")
    m.call(SYNC, 5, sync_req(group, gen + 1, mid), step="sync_future_generation")
    m.call(SYNC, 5, sync_req(group, gen - 1, mid), step="sync_past_generation")
    m.call(SYNC, 5, sync_req(group, gen + 1, "ghost"), step="sync_ghost_bad_generation")
    m.call(SYNC, 5, sync_req(group, gen, mid, instance="i9"), step="sync_unknown_instance")
    m.call(SYNC, 5, sync_req(group, gen, mid), step="sync_again_when_stable")
    m.call(SYNC, 5, sync_req(group, gen, mid, pname="roundrobin"), step="sync_other_name")
    hb(m, group, ja, member_id="ghost", step="hb_unknown_member")
    hb(m, group, ja, member_id="ghost", generation=gen + 5, step="hb_ghost_bad_generation")
    hb(m, group, ja, generation=gen - 1, step="hb_past_generation")
    hb(m, group, ja, generation=-1, step="hb_generation_minus_one")
    hb(m, group, ja, instance="i9", step="hb_unknown_instance")
    # Batch leave: a mix of known, unknown and instance-named members, each with its error.
    m.call(
        LEAVE,
        5,
        leave_req(group, "ghost", ("", "i-unknown"), (mid, "i-wrong"), mid, mid),
        step="leave_batch_mixed",
    )
    # Empty now: heartbeats and syncs of the former member.
    hb(m, group, ja, step="hb_after_empty")
    m.call(SYNC, 5, sync_req(group, gen, mid), step="sync_after_empty")
    m.call(LEAVE, 3, leave_req(group, mid), step="leave_after_empty_v3")
    m.call(LEAVE, 1, leave_group.LeaveGroupRequest(group_id=group, member_id=mid), step="leave_v1")


def test_sync_heartbeat_leave_errors(diff_shared: Runner) -> None:
    outcome = diff_shared(sync_heartbeat_leave_errors)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert steps["hb_past_generation"].error_code == 22
