"""Request builders and member moves shared by the group scenarios of the differential suite.

How this works: each builder returns the request dataclass of kgc's codec with the values a
scenario usually wants (a ``consumer`` protocol, timeouts of 10 s), every one overridable.
The moves (``join``, ``sync`` ...) call through a ``Member`` so the exchange is recorded and
compared; ``join`` does the KIP-394 dance of v4+ (MEMBER_ID_REQUIRED, then the join with the
id given) as two recorded steps.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from protocol.messages import (
    consumer_group_describe,
    consumer_group_heartbeat,
    delete_groups,
    describe_groups,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    offset_commit,
    offset_delete,
    offset_fetch,
    sync_group,
)
from support.diffkit import Member, Side

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN, HEARTBEAT, LEAVE, SYNC = 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
CG_HEARTBEAT, CG_DESCRIBE = 68, 69


def subscription(*topics: str, user_data: bytes | None = None) -> bytes:
    """A ConsumerProtocolSubscription v0 (what the classic consumer puts in JoinGroup)."""
    out = bytearray(struct.pack(">hi", 0, len(topics)))
    for t in topics:
        raw = t.encode()
        out += struct.pack(">h", len(raw)) + raw
    if user_data is None:
        out += struct.pack(">i", -1)
    else:
        out += struct.pack(">i", len(user_data)) + user_data
    return bytes(out)


def assignment(parts: dict[str, list[int]]) -> bytes:
    """A ConsumerProtocolAssignment v0."""
    out = bytearray(struct.pack(">hi", 0, len(parts)))
    for t, ps in parts.items():
        raw = t.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    out += struct.pack(">i", -1)
    return bytes(out)


def join_req(
    group: str,
    member_id: str = "",
    *,
    instance: str | None = None,
    session: int = 10000,
    rebalance: int = 10000,
    protocols: Sequence[tuple[str, bytes]] = (("range", b"meta"),),
    ptype: str = "consumer",
    reason: str | None = None,
) -> join_group.JoinGroupRequest:
    return join_group.JoinGroupRequest(
        group_id=group,
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type=ptype,
        protocols=[join_group.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols],
        reason=reason,
    )


def sync_req(
    group: str,
    generation: int,
    member_id: str,
    *,
    instance: str | None = None,
    assignments: dict[str, bytes] | None = None,
    ptype: str | None = "consumer",
    pname: str | None = "range",
) -> sync_group.SyncGroupRequest:
    return sync_group.SyncGroupRequest(
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type=ptype,
        protocol_name=pname,
        assignments=[
            sync_group.SyncGroupRequestAssignment(member_id=m, assignment=a)
            for m, a in (assignments or {}).items()
        ],
    )


def hb_req(
    group: str, generation: int, member_id: str, instance: str | None = None
) -> heartbeat.HeartbeatRequest:
    return heartbeat.HeartbeatRequest(
        group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance
    )


def leave_req(
    group: str, *members: str | tuple[str, str | None], reason: str | None = None
) -> leave_group.LeaveGroupRequest:
    """v3+ batch leave: each member an id, or (member id, instance id)."""
    ids = []
    for m in members:
        mid, inst = (m, None) if isinstance(m, str) else m
        ids.append(leave_group.MemberIdentity(member_id=mid, group_instance_id=inst, reason=reason))
    return leave_group.LeaveGroupRequest(group_id=group, members=ids)


def join(m: Member, group: str, version: int = 9, **kw: Any) -> Any:
    """Join as a new dynamic member: v4+ first gets MEMBER_ID_REQUIRED (recorded), then joins
    with the id given. Returns the final JoinGroup answer (it blocks until the join phase
    ends)."""
    if version >= 4 and kw.get("instance") is None:
        first = m.call(JOIN, version, join_req(group, **kw), step=f"{m.label}.join_id")
        if first.error_code != 79:
            return first
        return m.call(JOIN, version, join_req(group, first.member_id, **kw))
    return m.call(JOIN, version, join_req(group, **kw))


def member_id_for(m: Member, group: str, version: int = 9, **kw: Any) -> str:
    """The member id a new dynamic member is given (the MEMBER_ID_REQUIRED step, recorded)."""
    first = m.call(JOIN, version, join_req(group, **kw), step=f"{m.label}.join_id")
    return str(first.member_id)


def sync(
    m: Member, group: str, joined: Any, assignments: dict[str, bytes] | None = None, **kw: Any
) -> Any:
    version = kw.pop("version", 5)
    return m.call(
        SYNC,
        version,
        sync_req(group, joined.generation_id, joined.member_id, assignments=assignments, **kw),
    )


def assign_all(joined: Any, value: bytes = b"") -> dict[str, bytes]:
    """The leader's assignment: every member of its JoinGroup answer gets ``value`` (or, when
    empty, one naming the member's client id, so each member can tell its own)."""
    return {
        x.member_id: value or f"for-{x.member_id.rsplit('-', 5)[0]}".encode()
        for x in joined.members
    }


def hb(m: Member, group: str, joined: Any, *, version: int = 4, step: str = "", **kw: Any) -> Any:
    gen = kw.pop("generation", joined.generation_id)
    mid = kw.pop("member_id", joined.member_id)
    return m.call(HEARTBEAT, version, hb_req(group, gen, mid, **kw), step=step)


def describe(side: Side, *groups: str, version: int = 5, step: str = "") -> Any:
    return side.call(
        DESCRIBE_GROUPS,
        version,
        describe_groups.DescribeGroupsRequest(groups=list(groups)),
        step=step,
    )


def list_groups_req(
    states: Sequence[str] = (), types: Sequence[str] = ()
) -> list_groups.ListGroupsRequest:
    return list_groups.ListGroupsRequest(states_filter=list(states), types_filter=list(types))


def delete_req(*groups: str) -> delete_groups.DeleteGroupsRequest:
    return delete_groups.DeleteGroupsRequest(groups_names=list(groups))


def commit_req(
    group: str,
    offsets: dict[str, dict[int, int]],
    *,
    generation: int = -1,
    member_id: str = "",
    instance: str | None = None,
    metadata: str | None = "",
    leader_epoch: int = -1,
    retention: int = -1,
) -> offset_commit.OffsetCommitRequest:
    return offset_commit.OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=instance,
        retention_time_ms=retention,
        topics=[
            offset_commit.OffsetCommitRequestTopic(
                name=t,
                partitions=[
                    offset_commit.OffsetCommitRequestPartition(
                        partition_index=p,
                        committed_offset=o,
                        committed_leader_epoch=leader_epoch,
                        committed_metadata=metadata,  # type: ignore[arg-type]
                    )
                    for p, o in ps.items()
                ],
            )
            for t, ps in offsets.items()
        ],
    )


def fetch_req(
    group: str, topics: dict[str, list[int]] | None, *, require_stable: bool = False
) -> offset_fetch.OffsetFetchRequest:
    """OffsetFetch of one group, v0-v7 layout (``topics`` None: every partition, v2+)."""
    return offset_fetch.OffsetFetchRequest(
        group_id=group,
        topics=None  # type: ignore[arg-type]
        if topics is None
        else [
            offset_fetch.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
            for t, ps in topics.items()
        ],
        require_stable=require_stable,
    )


def fetch_groups_req(
    groups: dict[str, dict[str, list[int]] | None],
    *,
    require_stable: bool = False,
    member_id: str | None = None,
    member_epoch: int = -1,
) -> offset_fetch.OffsetFetchRequest:
    """OffsetFetch v8+: several groups, each with its topics (None: all)."""
    return offset_fetch.OffsetFetchRequest(
        groups=[
            offset_fetch.OffsetFetchRequestGroup(
                group_id=g,
                member_id=member_id,
                member_epoch=member_epoch,
                topics=None  # type: ignore[arg-type]
                if ts is None
                else [
                    offset_fetch.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                    for t, ps in ts.items()
                ],
            )
            for g, ts in groups.items()
        ],
        require_stable=require_stable,
    )


def offset_delete_req(
    group: str, topics: dict[str, list[int]]
) -> offset_delete.OffsetDeleteRequest:
    return offset_delete.OffsetDeleteRequest(
        group_id=group,
        topics=[
            offset_delete.OffsetDeleteRequestTopic(
                name=t,
                partitions=[
                    offset_delete.OffsetDeleteRequestPartition(partition_index=p) for p in ps
                ],
            )
            for t, ps in topics.items()
        ],
    )


def cg_req(
    group: str,
    member_id: str,
    epoch: int,
    *,
    instance: str | None = None,
    rack: str | None = None,
    rebalance: int = -1,
    topics: Sequence[str] | None = None,
    regex: str | None = None,
    assignor: str | None = None,
    owned: Sequence[tuple[Any, Sequence[int]]] | None = None,
) -> consumer_group_heartbeat.ConsumerGroupHeartbeatRequest:
    """A ConsumerGroupHeartbeat; ``owned`` as (topic id, partitions) pairs, None = unchanged."""
    return consumer_group_heartbeat.ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=instance,
        rack_id=rack,
        rebalance_timeout_ms=rebalance,
        subscribed_topic_names=None if topics is None else list(topics),
        subscribed_topic_regex=regex,
        server_assignor=assignor,
        topic_partitions=None
        if owned is None
        else [
            consumer_group_heartbeat.TopicPartitions(topic_id=t, partitions=list(ps))
            for t, ps in owned
        ],
    )


def cg_describe_req(*groups: str) -> consumer_group_describe.ConsumerGroupDescribeRequest:
    return consumer_group_describe.ConsumerGroupDescribeRequest(group_ids=list(groups))


def synchronous_assignment(side: Side, group: str) -> None:
    """Kafka 4.4 recomputes a consumer group's target assignment at most every
    ``group.consumer.assignment.interval.ms`` (1 s) and off the coordinator thread; kgc does
    it in the heartbeat that needs it. Setting the group's own ``consumer.assignment.interval.ms``
    to 0 and ``consumer.assignor.offload.enable`` to false (setup, not compared) makes Kafka
    do the same, so the rest can be compared.

    Group configs reach Kafka's coordinator through its metadata log, a moment after the
    request: a probe group configured in the same request (so in the same metadata batch)
    is asked to reassign until it does so at once."""
    if side.label != "kafka":
        return
    import time

    from protocol.messages import incremental_alter_configs as iac

    conn = side.untimed()
    deadline = time.monotonic() + side.timeout
    attempt = 0
    while time.monotonic() < deadline:
        attempt += 1
        probe = f"{group}-cfgprobe{attempt}-p"  # not ending in the token: never listed
        req = iac.IncrementalAlterConfigsRequest(
            resources=[
                iac.AlterConfigsResource(
                    resource_type=32,  # GROUP
                    resource_name=name,
                    configs=[
                        iac.AlterableConfig(name="consumer.assignment.interval.ms", value="0"),
                        iac.AlterableConfig(name="consumer.assignor.offload.enable", value="false"),
                    ],
                )
                for name in (group, probe)
            ]
        )
        _, resp = conn.request(iac.API_KEY, req, version=1)
        for r in resp.responses:
            if r.error_code:
                raise AssertionError(f"kafka: group configs of {r.resource_name}: {r.error_code}")
        side.wait_coordinator(probe)
        # p2 naming another assignor moves the epoch; configured, the target follows at once.
        r1 = conn.call(
            CG_HEARTBEAT, 1, cg_req(probe, "p1", 0, rebalance=30000, topics=[], owned=[])
        )
        r2 = conn.call(
            CG_HEARTBEAT,
            1,
            cg_req(probe, "p2", 0, rebalance=30000, topics=[], owned=[], assignor="range"),
        )
        described = conn.call(CG_DESCRIBE, 1, cg_describe_req(probe)).groups[0]
        for mid in ("p1", "p2"):
            conn.call(CG_HEARTBEAT, 1, cg_req(probe, mid, -1))
        # p2's join moved the epoch, and the target followed at once.
        moved = not (r1.error_code or r2.error_code) and described.group_epoch > r1.member_epoch
        if moved and described.assignment_epoch == described.group_epoch:
            return
        time.sleep(0.1)
    raise AssertionError(f"kafka: {group}'s assignment interval never took effect")


def wait_topic_assignable(side: Side, topic: str, partitions: int) -> None:
    """Wait (unrecorded) until the group coordinator hands out ``topic``'s partitions: Kafka's
    coordinator learns of a new topic from its metadata image a moment after Metadata
    names the topic's leaders, and a heartbeat meanwhile assigns nothing (then bumps the
    epoch when the topic appears). A throwaway group joins until it gets every partition."""
    import time

    deadline = time.monotonic() + side.timeout
    attempt = 0
    while time.monotonic() < deadline:
        attempt += 1
        group = f"probe-{attempt}-{topic}-p"  # not ending in the token: not listed
        side.wait_coordinator(group)
        conn = side.untimed()
        resp = conn.call(
            CG_HEARTBEAT, 1, cg_req(group, "probe", 0, rebalance=30000, topics=[topic], owned=[])
        )
        got = (
            sum(len(t.partitions) for t in resp.assignment.topic_partitions)
            if resp.assignment
            else 0
        )
        conn.call(CG_HEARTBEAT, 1, cg_req(group, "probe", -1))
        if got == partitions:
            return
        time.sleep(0.1)
    raise AssertionError(f"{side.label}: the coordinator never assigned {topic}")


def wait_state(side: Side, group: str, state: str) -> None:
    """Wait (unrecorded) until DescribeGroups shows the classic group in ``state``: a move
    that must come after another member's parked join waits for it here, not on a clock."""
    import time

    deadline = time.monotonic() + side.timeout
    while time.monotonic() < deadline:
        _, resp = side.untimed().request(
            DESCRIBE_GROUPS, describe_groups.DescribeGroupsRequest(groups=[group])
        )
        if resp.groups[0].group_state == state:
            return
        time.sleep(0.02)
    raise AssertionError(f"{side.label}: {group} never reached {state}")
