"""AlterShareGroupOffsets and DeleteShareGroupOffsets: the group coordinator's half, pure.

How this works (Kafka's GroupMetadataManager.alterShareGroupOffsets and
GroupCoordinatorShard.initiate/completeDeleteShareGroupOffsets): each call checks the
group, writes its ShareGroupStatePartitionMetadata record and answers the handle it was
given with what the share coordinator must do next; ``coordinator/share/admin.py`` calls
the share coordinator in between and writes the outcome back with ``state_initialized``
(alter) or ``offsets_deleted`` (delete). DeleteGroups' first step for share groups,
``delete_groups_begin``, writes their topics as *deleting* the same way.

* alter: the group is fetched or created (an empty share group); one with members is
  NON_EMPTY_GROUP; another type's id is GROUP_ID_NOT_FOUND "Group G is not a share
  group."; the valid partitions are recorded as *initializing*; the answer carries the
  group epoch, the state epoch the share state is initialized with.
* delete: a missing group is GROUP_ID_NOT_FOUND, a non-empty one NON_EMPTY_GROUP; an
  initialized topic moves to *deleting* with its initialized partitions to delete, one
  already deleting is tried again for all its partitions; a topic without state is
  UNKNOWN_TOPIC_OR_PARTITION "There is no offset information to delete.".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from coordinator.group.share import replay as sg_replay
from coordinator.group.share.group import ShareGroup, TopicInit
from coordinator.group.share.manager import ShareGroupManager
from coordinator.group.types import Result
from protocol.errors import ErrorCode

NO_OFFSETS = "There is no offset information to delete."


class OffsetsStep(NamedTuple):
    """What one step answers the share coordinator's caller: an error (and its message),
    or what to do next (``value``)."""

    error: ErrorCode
    message: str | None
    value: Any


def alter_begin(
    mgr: ShareGroupManager, handle: int, gid: str, topics: Mapping[bytes, TopicInit]
) -> Result:
    """Reply an ``OffsetsStep`` with the state epoch to ``handle``."""
    out = Result()
    error = mgr.partitions.availability_error(gid)
    if error is not None:
        out.replies.append((handle, OffsetsStep(error, None, -1)))
        return out
    if mgr.other_group_type(gid) is not None:
        msg = f"Group {gid} is not a share group."
        out.replies.append((handle, OffsetsStep(ErrorCode.GROUP_ID_NOT_FOUND, msg, -1)))
        return out
    group = mgr.groups.get(gid) or ShareGroup(gid)
    if group.members:
        out.replies.append((handle, OffsetsStep(ErrorCode.NON_EMPTY_GROUP, None, -1)))
        return out
    initializing = dict(group.initializing)
    for t, ti in topics.items():
        old = initializing.get(t)
        have = old.partitions if old is not None else frozenset()
        initializing[t] = TopicInit(ti.name, have | ti.partitions)
    record = sg_replay.state_partition_metadata(
        gid, initializing, group.initialized, group.deleting
    )
    mgr.apply(out, group, [record])
    out.replies.append((handle, OffsetsStep(ErrorCode.NO_ERROR, None, group.group_epoch)))
    return out


def delete_begin(
    mgr: ShareGroupManager, handle: int, gid: str, topics: Mapping[bytes, str]
) -> Result:
    """Reply an ``OffsetsStep`` with {topic id: partitions to delete, or (error, message)}."""
    out = Result()
    error = mgr.partitions.availability_error(gid)
    group = mgr.groups.get(gid)
    if error is None and group is None:
        error = ErrorCode.GROUP_ID_NOT_FOUND
    if error is None and group is not None and group.members:
        error = ErrorCode.NON_EMPTY_GROUP
    if error is not None or group is None:
        out.replies.append((handle, OffsetsStep(error or ErrorCode.GROUP_ID_NOT_FOUND, None, {})))
        return out
    per_topic: dict[bytes, object] = {}
    deleting = dict(group.deleting)
    initialized = dict(group.initialized)
    for t, name in topics.items():
        ti = initialized.pop(t, None)
        if ti is not None:
            deleting[t] = name
            per_topic[t] = sorted(ti.partitions)
        elif t in deleting:
            topic = mgr.topics.topic_by_id(t)
            per_topic[t] = list(range(topic.num_partitions)) if topic is not None else []
        else:
            per_topic[t] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, NO_OFFSETS)
    if deleting != group.deleting:
        record = sg_replay.state_partition_metadata(gid, group.initializing, initialized, deleting)
        mgr.apply(out, group, [record])
    out.replies.append((handle, OffsetsStep(ErrorCode.NO_ERROR, None, per_topic)))
    return out


def delete_groups_begin(mgr: ShareGroupManager, handle: int, gids: Iterable[str]) -> Result:
    """DeleteGroups' first step (Kafka's sharePartitionDeleteRequests): each empty share
    group's initialized and initializing topics, and what is left *deleting* of topics that
    still exist, written as *deleting* (one ShareGroupStatePartitionMetadata record, durable
    before the share coordinator deletes their state); replies an ``OffsetsStep`` with
    {group id: {topic id: partitions whose state to delete}}. A crash before the group's
    tombstones leaves them *deleting* on replay, and the next DeleteGroups deletes them all
    again."""
    out = Result()
    plans: dict[str, dict[bytes, list[int]]] = {}
    for gid in gids:
        plan = mgr.deletable_state(gid)
        group = mgr.groups.get(gid)
        if not plan or group is None or gid in plans:
            continue
        names = {t: ti.name for t, ti in (*group.initializing.items(), *group.initialized.items())}
        deleting = {t: names.get(t) or group.deleting.get(t, "") for t in plan}
        record = sg_replay.state_partition_metadata(gid, {}, {}, deleting)
        mgr.apply(out, group, [record])
        plans[gid] = plan
    out.replies.append((handle, OffsetsStep(ErrorCode.NO_ERROR, None, plans)))
    return out


def offsets_deleted(mgr: ShareGroupManager, handle: int, gid: str, done: Iterable[bytes]) -> Result:
    """The share coordinator deleted the state of ``done``: they leave *deleting*."""
    out = Result()
    group = mgr.groups.get(gid)
    gone = set(done)
    available = group is not None and mgr.partitions.availability_error(gid) is None
    if group is not None and available and gone & group.deleting.keys():
        deleting = {t: n for t, n in group.deleting.items() if t not in gone}
        record = sg_replay.state_partition_metadata(
            gid, group.initializing, group.initialized, deleting
        )
        mgr.apply(out, group, [record])
    out.replies.append((handle, OffsetsStep(ErrorCode.NO_ERROR, None, None)))
    return out


def state_initialized(
    mgr: ShareGroupManager,
    handle: int,
    gid: str,
    done: dict[bytes, list[int]],
    failed: dict[bytes, list[int]],
    now_ms: int,
) -> Result:
    """The share coordinator's answer to an alteration, written back (partitions move to
    *initialized*, or stay *initializing* for a heartbeat to retry)."""
    out = mgr.state_initialized(gid, done, failed, now_ms)
    out.replies.append((handle, OffsetsStep(ErrorCode.NO_ERROR, None, None)))
    return out
