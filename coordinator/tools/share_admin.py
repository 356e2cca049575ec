"""Share groups (KIP-932) for ``kgc groups``: ShareGroupDescribe and DescribeShareGroupOffsets.

How this works: beside ``admin.Admin`` (whose connections, coordinator look-up and error
checks these use), ``describe_share_group`` describes a share group at its coordinator
into the same ``GroupDescription`` as the other types (``group_type`` "share", epochs set),
and ``share_offsets`` reads its share-partitions' start offsets and lag, the all-topics form
of DescribeShareGroupOffsets, as kafka-share-groups.sh shows them. The CLI asks for a share
group when DescribeGroups finds no group of the other types under the id.
"""

from __future__ import annotations

from coordinator.tools.admin import Admin, GroupDescription, Member, _by_name, check
from protocol.errors import ErrorCode
from protocol.messages import describe_share_group_offsets, share_group_describe

__all__ = ["describe_share_group", "share_offsets"]


def describe_share_group(admin: Admin, group: str) -> GroupDescription | None:
    """ShareGroupDescribe at the group's coordinator; None when the group is not a share
    group (or unknown)."""
    coordinator = admin.coordinator(group)
    addr = admin._reachable(coordinator[1], coordinator[2])
    if share_group_describe.API_KEY not in admin._versions(addr):
        return None
    _, resp = admin.call(
        share_group_describe.API_KEY,
        share_group_describe.Request(group_ids=[group]),
        addr=addr,
    )
    g = resp.groups[0]
    if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        return None
    check(g.error_code, f"ShareGroupDescribe for {group!r}", g.error_message)
    desc = GroupDescription(
        g.group_id,
        g.group_state,
        "share",
        g.assignor_name,
        coordinator,
        group_type="share",
        group_epoch=g.group_epoch,
        assignment_epoch=g.assignment_epoch,
    )
    for m in g.members:
        desc.members.append(
            Member(
                m.member_id,
                None,
                m.client_id,
                m.client_host,
                _by_name(m.assignment.topic_partitions),
                member_epoch=m.member_epoch,
                rack_id=m.rack_id,
                subscribed_topic_names=list(m.subscribed_topic_names),
            )
        )
    return desc


def share_offsets(admin: Admin, group: str) -> list[tuple[str, int, int, int]]:
    """(topic, partition, start offset, lag) of every share-partition whose state the
    share group initialized (DescribeShareGroupOffsets, all topics); -1: not known."""
    addr = admin._coordinator_addr(group)
    req = describe_share_group_offsets.Request(
        groups=[
            describe_share_group_offsets.DescribeShareGroupOffsetsRequestGroup(
                group_id=group, topics=None
            )
        ]
    )
    _, resp = admin.call(describe_share_group_offsets.API_KEY, req, addr=addr)
    g = resp.groups[0]
    check(g.error_code, f"DescribeShareGroupOffsets for {group!r}", g.error_message)
    return sorted(
        (t.topic_name, p.partition_index, p.start_offset, p.lag)
        for t in g.topics
        for p in t.partitions
    )
