"""Classic groups, Kafka vs kgc: one member's whole life, answer by answer."""

from __future__ import annotations

import pytest
from support.diffkit import Runner, Side

from protocol.messages import heartbeat, join_group, leave_group, sync_group

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

JOIN, SYNC, HEARTBEAT, LEAVE = 11, 14, 12, 13


def _join(group: str, member_id: str = "") -> join_group.JoinGroupRequest:
    return join_group.JoinGroupRequest(
        group_id=group,
        session_timeout_ms=10000,
        rebalance_timeout_ms=10000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[join_group.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")],
    )


def one_member_lifecycle(side: Side) -> None:
    group = side.name("classic-one")
    side.wait_coordinator(group)
    m = side.member("m1")
    first = m.call(JOIN, 9, _join(group))  # MEMBER_ID_REQUIRED with the id to use
    joined = m.call(JOIN, 9, _join(group, first.member_id))
    m.call(
        SYNC,
        5,
        sync_group.SyncGroupRequest(
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[
                sync_group.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"a")
            ],
        ),
    )
    m.call(
        HEARTBEAT,
        4,
        heartbeat.HeartbeatRequest(
            group_id=group, generation_id=joined.generation_id, member_id=joined.member_id
        ),
    )
    m.call(
        HEARTBEAT,
        4,
        heartbeat.HeartbeatRequest(
            group_id=group, generation_id=joined.generation_id + 1, member_id=joined.member_id
        ),
        step="m1.heartbeat_wrong_generation",
    )
    m.call(
        LEAVE,
        5,
        leave_group.LeaveGroupRequest(
            group_id=group, members=[leave_group.MemberIdentity(member_id=joined.member_id)]
        ),
    )


def test_one_member_joins_syncs_heartbeats_and_leaves(diff: Runner) -> None:
    outcome = diff(one_member_lifecycle)
    assert [e.response.error_code for e in outcome.kafka.exchanges] == [79, 0, 0, 0, 22, 0]
