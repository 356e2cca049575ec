"""Share-group membership against a real ``kgc serve``: ShareGroupHeartbeat, the share
coordinator's initialization behind it, ShareGroupDescribe, ListGroups, and a restart.

How this works: kgc's own wire client speaks ShareGroupHeartbeat v1 as librdkafka does
(a client-chosen member id, epoch 0 with the subscription, then the epochs the server
gives). The first join gets an empty assignment while the server initializes the
partitions' state in ``__share_group_state`` (through the share coordinator); the next
heartbeats get the partitions at a higher epoch. After a SIGKILL and restart the group is
rebuilt from ``__consumer_offsets``: the same epochs, members and assignments. DeleteGroups
of the emptied group deletes its share state and the group.
"""

from __future__ import annotations

import time

import pytest
from support.clikit import run_cli
from support.groupkit import create_topic
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import delete_groups, list_groups
from protocol.messages import share_group_describe as sgd
from protocol.messages import share_group_heartbeat as sgh

pytestmark = pytest.mark.integration


def heartbeat(
    conn: Connection, group: str, member: str, epoch: int, topics: list[str] | None = None
) -> sgh.ShareGroupHeartbeatResponse:
    _, r = conn.request(
        sgh.API_KEY,
        sgh.ShareGroupHeartbeatRequest(
            group_id=group, member_id=member, member_epoch=epoch, subscribed_topic_names=topics
        ),
    )
    assert isinstance(r, sgh.ShareGroupHeartbeatResponse)
    return r


def until_assigned(
    conn: Connection, group: str, member: str, epoch: int, timeout: float = 20.0
) -> sgh.ShareGroupHeartbeatResponse:
    """Heartbeat until the member is given partitions (the initialization is asynchronous)."""
    deadline = time.monotonic() + timeout
    while True:
        r = heartbeat(conn, group, member, epoch)
        assert r.error_code == 0, r
        if r.assignment is not None and r.assignment.topic_partitions:
            return r
        epoch = r.member_epoch
        assert time.monotonic() < deadline, "never assigned"
        time.sleep(0.05)


def test_share_group_membership_survives_a_restart(kgc: KgcProcess) -> None:
    # Raw heartbeats, unlike a real client, do not retry COORDINATOR_LOAD_IN_PROGRESS: the
    # offsets log is replayed after kgc listens (seen on a loaded machine).
    kgc.wait_loaded()
    create_topic(kgc.bootstrap, "queue", 3)
    with Connection.to(kgc.bootstrap) as conn:
        r = heartbeat(conn, "sg", "member-1", 0, ["queue"])
        assert (r.error_code, r.member_id, r.member_epoch) == (0, "member-1", 2)
        assert r.assignment is not None and r.assignment.topic_partitions == []
        r = until_assigned(conn, "sg", "member-1", r.member_epoch)
        assert r.member_epoch == 3
        assert r.assignment is not None
        assert [sorted(tp.partitions) for tp in r.assignment.topic_partitions] == [[0, 1, 2]]
        r2 = heartbeat(conn, "sg", "member-2", 0, ["queue"])
        assert r2.member_epoch == 4
        _, described = conn.request(sgd.API_KEY, sgd.ShareGroupDescribeRequest(group_ids=["sg"]))
        (d,) = described.groups
        assert (d.error_code, d.group_state, d.group_epoch, d.assignor_name) == (
            0,
            "Stable",
            4,
            "simple",
        )
        before = {m.member_id: (m.member_epoch, m.assignment) for m in d.members}
        # kgc groups: the share group listed and described (members, assignments, offsets).
        listed_cli = run_cli(
            "groups",
            "list",
            "--type",
            "share",
            "--output",
            "json",
            "--bootstrap-server",
            kgc.bootstrap,
        )
        assert listed_cli.code == 0, listed_cli
        assert [(g["group"], g["type"], g["state"]) for g in listed_cli.json()] == [
            ("sg", "share", "Stable")
        ]
        shown = run_cli(
            "groups", "describe", "sg", "--output", "json", "--bootstrap-server", kgc.bootstrap
        )
        assert shown.code == 0, shown
        obj = shown.json()
        assert (obj["type"], obj["state"]["group_epoch"], obj["state"]["num_members"]) == (
            "share",
            4,
            2,
        )
        assert sorted(m["consumer_id"] for m in obj["members"]) == ["member-1", "member-2"]
        assert [(o["topic"], o["partition"]) for o in obj["offsets"]] == [
            ("queue", 0),
            ("queue", 1),
            ("queue", 2),
        ]
        _, listed = conn.request(
            list_groups.API_KEY, list_groups.ListGroupsRequest(types_filter=["share"])
        )
        assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == [
            ("sg", "share", "Stable")
        ]
    kgc.kill()
    kgc.start()
    kgc.wait_loaded()
    with Connection.to(kgc.bootstrap) as conn:
        _, described = conn.request(sgd.API_KEY, sgd.ShareGroupDescribeRequest(group_ids=["sg"]))
        (d,) = described.groups
        assert {m.member_id: (m.member_epoch, m.assignment) for m in d.members} == before
        r = heartbeat(conn, "sg", "member-1", 3)
        assert (r.error_code, r.member_epoch) == (0, 4)
        r = heartbeat(conn, "sg", "member-1", -1)
        assert (r.error_code, r.member_epoch) == (0, -1)
        r = heartbeat(conn, "sg", "member-9", 4)
        assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        # DeleteGroups: refused while a member is left, then the share coordinator deletes
        # the partitions' state and the group goes; joining again starts a new group.
        _, deleted = conn.request(delete_groups.API_KEY, delete_groups.Request(groups_names=["sg"]))
        assert [r.error_code for r in deleted.results] == [ErrorCode.NON_EMPTY_GROUP]
        assert heartbeat(conn, "sg", "member-2", 4).error_code == 0
        assert heartbeat(conn, "sg", "member-2", -1).error_code == 0
        _, deleted = conn.request(delete_groups.API_KEY, delete_groups.Request(groups_names=["sg"]))
        assert [r.error_code for r in deleted.results] == [0]
        r = heartbeat(conn, "sg", "member-1", 0, ["queue"])
        assert (r.member_epoch, r.assignment) == (2, sgh.Assignment(topic_partitions=[]))
        assert until_assigned(conn, "sg", "member-1", 2).member_epoch == 3
