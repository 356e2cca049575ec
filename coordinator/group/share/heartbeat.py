"""ShareGroupHeartbeat (KIP-932): join, stay, leave; Kafka's GroupMetadataManager.shareGroupHeartbeat.

How this works
--------------
A heartbeat validates the request (Kafka's messages, in its order), finds or creates the
group, checks the member and its epoch, and then computes the records of the change in
Kafka's order: the member's metadata (when its rack, client or subscription changed) ->
the group epoch (bumped by a new member, a subscription change, a changed hash of the
subscribed topics' metadata, or initialized partitions the target does not assign yet) ->
the target assignment (the ``simple`` assignor over *initialized* partitions only) -> the
member's current assignment (share members jump straight to their target: there is no
revocation) -> the state-partition metadata (subscribed partitions whose share state is
not initialized yet move to *initializing*). The records are applied to the group as
they are written (``replay.apply_all``); the reply goes once they are durable.

Partitions recorded as initializing are reported (``ShareStateInitializing``); the runtime
asks the share coordinator to create their state and reports back
(``ShareGroupManager.state_initialized``). A new member's first assignment is therefore
empty, and a later heartbeat assigns the partitions at the next epoch -- as in Kafka.
"""

from __future__ import annotations

from coordinator.group.consumer.errors import HeartbeatError
from coordinator.group.consumer.metadata_hash import group_hash
from coordinator.group.events import ShareGroupEpochBumped, ShareStateInitializing
from coordinator.group.records import TypedRecord
from coordinator.group.share import assignor
from coordinator.group.share import replay as sg_replay
from coordinator.group.share.group import Assignment, ShareGroup, ShareMember, TopicInit
from coordinator.group.share.manager import MAX_INT, ShareGroupManager
from coordinator.group.types import RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages import share_group_heartbeat as sgh

__all__ = ["LEAVE_EPOCH", "SHARE", "share_group_heartbeat"]

LEAVE_EPOCH = -1
SHARE = "share"  # the group type ListGroups reports


def share_group_heartbeat(
    mgr: ShareGroupManager,
    ctx: RequestContext,
    req: sgh.ShareGroupHeartbeatRequest,
    now_ms: int,
) -> Result:
    out = Result()
    try:
        _validate(req)
        err = mgr.partitions.precheck(req.group_id)
        if err is not None:
            raise HeartbeatError(err)
        if req.member_epoch == LEAVE_EPOCH:
            resp = _leave(mgr, out, req, now_ms)
        else:
            resp = _heartbeat(mgr, out, ctx, req, now_ms)
    except HeartbeatError as e:
        resp = sgh.ShareGroupHeartbeatResponse(error_code=e.code, error_message=e.message)
    out.replies.append((ctx.reply_to, resp))
    return out


def _validate(req: sgh.ShareGroupHeartbeatRequest) -> None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid."""
    bad = ErrorCode.INVALID_REQUEST
    if not req.member_id.strip():
        raise HeartbeatError(bad, "MemberId can't be empty.")
    if not req.group_id.strip():
        raise HeartbeatError(bad, "GroupId can't be empty.")
    if req.rack_id is not None and not req.rack_id.strip():
        raise HeartbeatError(bad, "RackId can't be empty.")
    if req.member_epoch == 0:
        if not req.subscribed_topic_names:
            raise HeartbeatError(bad, "SubscribedTopicNames must be set in first request.")
    elif req.member_epoch < LEAVE_EPOCH:
        raise HeartbeatError(bad, "MemberEpoch is invalid.")


def _not_share(gid: str) -> HeartbeatError:
    return HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")


def _leave(
    mgr: ShareGroupManager, out: Result, req: sgh.ShareGroupHeartbeatRequest, now_ms: int
) -> sgh.ShareGroupHeartbeatResponse:
    gid = req.group_id
    group = mgr.groups.get(gid)
    if group is None:
        if mgr.other_group_type(gid) is not None:
            raise _not_share(gid)
        raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
    member = group.members.get(req.member_id)
    if member is None:
        raise HeartbeatError(
            ErrorCode.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {gid}."
        )
    mgr.fence_member(out, group, member, now_ms, "left the group", "left")
    return sgh.ShareGroupHeartbeatResponse(member_id=req.member_id, member_epoch=LEAVE_EPOCH)


def _check_epoch(member: ShareMember, received: int) -> None:
    """Kafka's throwIfShareGroupMemberEpochIsInvalid (epoch 0 rejoins)."""
    stored = member.member_epoch
    if received == 0 or received == stored:
        return
    if received > stored:
        raise HeartbeatError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The share group member has a greater member epoch ({received}) than the one "
            f"known by the group coordinator ({stored}). The member must abandon all its "
            "partitions and rejoin.",
        )
    if received != member.previous_member_epoch:
        raise HeartbeatError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The share group member has a smaller member epoch ({received}) than the one "
            f"known by the group coordinator ({stored}). The member must abandon all its "
            "partitions and rejoin.",
        )


def _heartbeat(
    mgr: ShareGroupManager,
    out: Result,
    ctx: RequestContext,
    req: sgh.ShareGroupHeartbeatRequest,
    now_ms: int,
) -> sgh.ShareGroupHeartbeatResponse:
    gid = req.group_id
    epoch = req.member_epoch
    member_id = req.member_id
    group, old, is_new = _group_and_member(mgr, gid, member_id, epoch)

    writes: list[TypedRecord] = []
    updated = old.copy()
    if req.rack_id is not None:
        updated.rack_id = req.rack_id
    if req.subscribed_topic_names is not None:
        updated.subscribed_topic_names = frozenset(req.subscribed_topic_names)
    updated.client_id = ctx.client_id
    updated.client_host = ctx.client_host
    causes: list[str] = []
    if is_new or updated != old:
        writes.append(sg_replay.member_metadata(gid, updated))
    if is_new:
        causes.append(f"member {member_id} joined")
    elif updated.subscribed_topic_names != old.subscribed_topic_names:
        causes.append(f"member {member_id} changed its subscription")

    names = dict(group.names_count)
    for n in old.subscribed_topic_names if not is_new else ():
        names[n] -= 1
        if not names[n]:
            del names[n]
    for n in updated.subscribed_topic_names:
        names[n] = names.get(n, 0) + 1
    if not causes and group.assignment_epoch >= group.group_epoch and _pending(mgr, group):
        causes.append("initialized partitions are not assigned yet")
    group_epoch = group.group_epoch
    if causes or now_ms >= group.metadata_refresh_deadline_ms:
        metadata_hash = group_hash(names, mgr.topics, mgr.topic_hash_cache)
        if metadata_hash != group.metadata_hash and not causes:
            causes.append("the subscribed topics' metadata changed")
        if causes:
            group_epoch += 1
            writes.append(sg_replay.group_metadata(gid, group_epoch, metadata_hash))
        group.metadata_refresh_deadline_ms = now_ms + MAX_INT

    members = dict(group.members)
    members[member_id] = updated
    target_epoch = group.assignment_epoch
    if group_epoch > target_epoch:
        targets = _target(mgr, group, members)
        for mid, parts in targets.items():
            if group.target.get(mid) != parts:
                writes.append(sg_replay.target_member(gid, mid, parts))
        writes.append(sg_replay.target_metadata(gid, group_epoch))
        target_epoch = group_epoch
        target: Assignment = targets[member_id]
    else:
        target = group.target.get(member_id, {})

    reconciled = updated.copy()
    if updated.member_epoch != target_epoch:
        reconciled.previous_member_epoch = updated.member_epoch
        reconciled.member_epoch = target_epoch
        reconciled.assigned = _subscribed_part(mgr, target, updated.subscribed_topic_names)
    if reconciled != updated or is_new:
        writes.append(sg_replay.current_assignment(gid, reconciled))

    init = _to_initialize(mgr, group, names, now_ms)
    if init:
        initializing = dict(group.initializing)
        for t, ti in init.items():
            cur = initializing.get(t)
            have = cur.partitions if cur is not None else frozenset()
            initializing[t] = TopicInit(ti.name, have | ti.partitions)
        writes.append(
            sg_replay.state_partition_metadata(gid, initializing, group.initialized, group.deleting)
        )
    mgr.apply(out, group, writes)
    if causes:
        out.events.append(ShareGroupEpochBumped(gid, group_epoch, "; ".join(causes)))
    if init:
        for t in init:
            group.initializing_since[t] = now_ms
        out.events.append(
            ShareStateInitializing(
                gid,
                group.group_epoch,
                tuple((t, ti.name, tuple(sorted(ti.partitions))) for t, ti in init.items()),
            )
        )
    mgr.schedule_session(out, group, member_id, now_ms)
    return _answer(mgr, group, req, old)


def _group_and_member(
    mgr: ShareGroupManager, gid: str, member_id: str, epoch: int
) -> tuple[ShareGroup, ShareMember, bool]:
    """The group and the member as they stand before this heartbeat, and whether it joins."""
    group = mgr.groups.get(gid)
    if group is None:
        if mgr.other_group_type(gid) is not None:
            raise _not_share(gid)
        if epoch != 0:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {gid} not found.")
        group = ShareGroup(gid)  # registered when its first record is applied
    old = group.members.get(member_id)
    max_size = mgr.config.share_group_max_size
    if old is None and len(group.members) >= max_size:
        raise HeartbeatError(
            ErrorCode.GROUP_MAX_SIZE_REACHED,
            f"The share group has reached its maximum capacity of {max_size} members.",
        )
    if old is None:
        if epoch != 0:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {gid}."
            )
        return group, ShareMember(member_id), True
    _check_epoch(old, epoch)
    return group, old, False


def _answer(
    mgr: ShareGroupManager,
    group: ShareGroup,
    req: sgh.ShareGroupHeartbeatRequest,
    old: ShareMember,
) -> sgh.ShareGroupHeartbeatResponse:
    """The response: the assignment is sent on a join, a subscription and any change of it."""
    member = group.members[req.member_id]
    resp = sgh.ShareGroupHeartbeatResponse(
        member_id=req.member_id,
        member_epoch=member.member_epoch,
        heartbeat_interval_ms=mgr.timeouts(group.group_id)[1],
    )
    if (
        req.member_epoch == 0
        or req.subscribed_topic_names is not None
        or member.assigned != old.assigned
    ):
        resp.assignment = sgh.Assignment(
            topic_partitions=[
                sgh.TopicPartitions(topic_id=t, partitions=sorted(ps))
                for t, ps in member.assigned.items()
            ]
        )
    return resp


def _subscribed_part(
    mgr: ShareGroupManager, target: Assignment, names: frozenset[str]
) -> dict[bytes, frozenset[int]]:
    """The member's target, limited to the topics it subscribes to."""
    ids = set()
    for n in names:
        t = mgr.topics.topic(n)
        if t is not None:
            ids.add(t.topic_id)
    return {t: ps for t, ps in target.items() if t in ids and ps}


def _assignable(mgr: ShareGroupManager, group: ShareGroup) -> dict[bytes, frozenset[int]]:
    """Initialized partitions of topics that still exist (and still have them)."""
    out: dict[bytes, frozenset[int]] = {}
    for t, ti in group.initialized.items():
        topic = mgr.topics.topic_by_id(t)
        if topic is None:
            continue
        ps = frozenset(p for p in ti.partitions if p < topic.num_partitions)
        if ps:
            out[t] = ps
    return out


def _target(
    mgr: ShareGroupManager, group: ShareGroup, members: dict[str, ShareMember]
) -> dict[str, dict[bytes, frozenset[int]]]:
    subscriptions: dict[str, frozenset[bytes]] = {}
    for mid, m in members.items():
        ids = []
        for n in m.subscribed_topic_names:
            t = mgr.topics.topic(n)
            if t is not None:
                ids.append(t.topic_id)
        subscriptions[mid] = frozenset(ids)
    return assignor.assign(subscriptions, _assignable(mgr, group), group.target)


def _pending(mgr: ShareGroupManager, group: ShareGroup) -> bool:
    """Kafka's initializedAssignmentPending: an initialized partition of a subscribed topic
    that the target assigns to nobody."""
    if not group.members:
        return False
    assigned: dict[bytes, set[int]] = {}
    for parts in group.target.values():
        for t, ps in parts.items():
            assigned.setdefault(t, set()).update(ps)
    subscribed = set()
    for n in group.names_count:
        topic = mgr.topics.topic(n)
        if topic is not None:
            subscribed.add(topic.topic_id)
    for t, ps in _assignable(mgr, group).items():
        if t in subscribed and not ps <= assigned.get(t, set()):
            return True
    return False


def _to_initialize(
    mgr: ShareGroupManager, group: ShareGroup, names: dict[str, int], now_ms: int
) -> dict[bytes, TopicInit]:
    """Subscribed partitions whose share state is neither initialized nor being
    initialized (an initialization older than the retry interval is tried again):
    Kafka's subscribedTopicsChangeMap."""
    retry = mgr.config.share_group_initialize_retry_interval_ms
    out: dict[bytes, TopicInit] = {}
    for n in sorted(names):
        topic = mgr.topics.topic(n)
        if topic is None or topic.topic_id in group.deleting:
            continue
        t = topic.topic_id
        have = group.initialized.get(t)
        missing = set(range(topic.num_partitions))
        if have is not None:
            missing -= have.partitions
        cur = group.initializing.get(t)
        if cur is not None and now_ms - group.initializing_since.get(t, 0) < retry:
            missing -= cur.partitions
        if missing:
            out[t] = TopicInit(n, frozenset(missing))
    return out
