"""StreamsGroupHeartbeat (KIP-1071), as Kafka's GroupCoordinatorService and GroupMetadataManager handle it.

How this works: a heartbeat is validated (the service's checks, in Kafka's order and
texts), then is a leave (epoch -1: the member's tombstones and an epoch bump) or a join
(epoch 0) / regular heartbeat:

1. find or create the group and the member, checking the group type, its size and the
   member epoch (the previous epoch is tolerated with owned tasks within the assignment);
2. update the member's metadata (record 19 and a bump when it changed), adopt the
   topology on the group's first join (record 23; a different one is refused);
3. configure the topology against the topics when the group just got it, after a load, or
   when a required topic changed (the metadata hash; a new hash bumps the epoch);
   validated topology epoch = the topology's when ready, else -1 (a change bumps);
4. the assignment configs (standby replicas) differing from the stored ones bump;
5. a bump writes record 17 at epoch + 1; a new group arms the initial rebalance delay;
6. the target: while the delay runs, empty (ASSIGNMENT_DELAYED); when the epoch is ahead
   and the assignment interval has passed, the assignor's (records 21, 20); else stored;
7. reconcile the member towards it (``reconcile.py``; record 22 when it changed), arm or
   cancel its rebalance timeout, move its session timeout;
8. answer: epoch, interval, tasks when joining or changed, endpoints when the member's
   endpoint epoch is behind, statuses (stale topology, delay, topic configuration,
   shutdown). ``internal_topics_to_create`` tells the API layer what to create.

Static members (Kafka 4.4): a member with an instance id may leave for a while (epoch -2,
its tasks kept) and its instance comes back under a new member id, taking over the old
member's tasks and target without a new group epoch; while it is held, the id is refused to
others (UNRELEASED_INSTANCE_ID), and a member not holding it is fenced (FENCED_INSTANCE_ID).

All records are built first and applied together (``records.apply_all``); an error raised
before that is just an answer.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from coordinator.group.consumer.errors import HeartbeatError
from coordinator.group.streams import records as rec
from coordinator.group.streams.configure import (
    ConfiguredTopology,
    Status,
    StreamsInvalidTopology,
    configure_topics,
)
from coordinator.group.streams.group import (
    MemberState,
    StreamsGroup,
    StreamsGroupMember,
    Tasks,
    TasksTuple,
)
from coordinator.group.streams.manager import RACK_AWARE_ASSIGNMENT_TAGS, StreamsGroupManager
from coordinator.group.streams.reconcile import FencedUnknownState, reconcile
from coordinator.group.streams.topology import StreamsTopology, topology_record
from coordinator.group.timers import streams_rebalance_key
from coordinator.group.types import RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages import streams_group_heartbeat as sgh

__all__ = ["GroupTypeCheck", "streams_group_heartbeat"]

_BAD = ErrorCode.INVALID_REQUEST
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

# Which other group type holds an id: None, or (type name, empty?) -- the shard answers.
GroupTypeCheck = dict[str, tuple[str, bool]]


def _blank(s: str | None) -> bool:
    return s is not None and not s.strip()


def _validate(req: sgh.StreamsGroupHeartbeatRequest) -> None:
    """GroupCoordinatorService's checks, in its order."""
    if req.topology is not None:
        for s in req.topology.subtopologies:
            if s.source_topic_regex:
                raise HeartbeatError(
                    _BAD, "Regular expressions for source topics are not supported yet."
                )
    if _blank(req.member_id) or not req.member_id:
        raise HeartbeatError(_BAD, "MemberId can't be empty.")
    if not req.group_id.strip():
        raise HeartbeatError(_BAD, "GroupId can't be empty.")
    if _blank(req.instance_id):
        raise HeartbeatError(_BAD, "InstanceId can't be empty.")
    if _blank(req.rack_id):
        raise HeartbeatError(_BAD, "RackId can't be empty.")
    epoch = req.member_epoch
    if epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise HeartbeatError(_BAD, "RebalanceTimeoutMs must be provided in first request.")
        for tasks, name in (
            (req.active_tasks, "ActiveTasks"),
            (req.standby_tasks, "StandbyTasks"),
            (req.warmup_tasks, "WarmupTasks"),
        ):
            if tasks is None or tasks:
                raise HeartbeatError(_BAD, f"{name} must be empty when (re-)joining.")
        if req.topology is None:
            raise HeartbeatError(_BAD, "Topology must be non-null when (re-)joining.")
        for s in req.topology.subtopologies:
            for t in s.state_changelog_topics:
                if t.partitions != 0:
                    raise HeartbeatError(
                        ErrorCode.STREAMS_INVALID_TOPOLOGY,
                        f"Changelog topic {t.name} must have an undefined partition count, "
                        f"but it is set to {t.partitions}.",
                    )
    elif epoch == STATIC_LEAVE_EPOCH:
        if req.instance_id is None:
            raise HeartbeatError(_BAD, "InstanceId can't be null.")
    elif epoch < STATIC_LEAVE_EPOCH:
        raise HeartbeatError(
            _BAD, f"MemberEpoch is {epoch}, but must be greater than or equal to -2."
        )
    lists = (req.active_tasks, req.standby_tasks, req.warmup_tasks)
    if any(t is not None for t in lists) and any(t is None for t in lists):
        raise HeartbeatError(_BAD, "If one task-type is non-null, all must be non-null.")
    if epoch != 0 and req.topology is not None:
        raise HeartbeatError(_BAD, "Topology can only be provided when (re-)joining.")


def streams_group_heartbeat(
    mgr: StreamsGroupManager,
    ctx: RequestContext,
    req: sgh.StreamsGroupHeartbeatRequest,
    now_ms: int,
    other_types: GroupTypeCheck | None = None,
) -> tuple[Result, ConfiguredTopology | None]:
    """The heartbeat's records and answer, and the configured topology when internal topics
    are missing (the API layer creates them)."""
    out = Result()
    configured: ConfiguredTopology | None = None
    try:
        _validate(req)
        err = mgr.partitions.precheck(req.group_id)
        if err is not None:
            raise HeartbeatError(err)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            resp = _leave(mgr, out, req)
        else:
            resp, configured = _heartbeat(mgr, out, ctx, req, now_ms, other_types or {})
    except HeartbeatError as e:
        resp = sgh.StreamsGroupHeartbeatResponse(error_code=e.code, error_message=e.message)
        out = Result()
    except StreamsInvalidTopology as e:
        resp = sgh.StreamsGroupHeartbeatResponse(
            error_code=ErrorCode.STREAMS_INVALID_TOPOLOGY, error_message=str(e)
        )
        out = Result()
    out.replies.append((ctx.reply_to, resp))
    return out, configured


def _not_found(gid: str, other_types: GroupTypeCheck, missing: str) -> HeartbeatError:
    if gid in other_types:
        return HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a streams group.")
    return HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, missing)


def _leave(
    mgr: StreamsGroupManager, out: Result, req: sgh.StreamsGroupHeartbeatRequest
) -> sgh.StreamsGroupHeartbeatResponse:
    gid = req.group_id
    group = mgr.groups.get(gid)
    if group is None:
        raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
    if req.shutdown_application and group.shutdown_requester is None:
        group.shutdown_requester = req.member_id
    if req.instance_id is not None:
        member = _static_holder(group, req)
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # A static member leaving for a while keeps its tasks (their epochs reset) until
            # its session times out or its instance comes back (Kafka 4.4).
            away = dataclasses.replace(
                member,
                member_epoch=STATIC_LEAVE_EPOCH,
                active={s: dict.fromkeys(ps, 0) for s, ps in member.active.items()},
                pending_active={},
                pending_standby={},
                pending_warmup={},
            )
            rec.apply_all(
                out, mgr.partitions.partition_of(gid), group, [rec.current_assignment(gid, away)]
            )
            return sgh.StreamsGroupHeartbeatResponse(
                member_id=member.member_id, member_epoch=STATIC_LEAVE_EPOCH, status=[]
            )
    else:
        found = group.members.get(req.member_id)
        if found is None:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {req.member_id} is not a member of group {gid}.",
            )
        member = found
    mgr.fence_member(out, group, member)
    return sgh.StreamsGroupHeartbeatResponse(
        member_id=req.member_id, member_epoch=req.member_epoch, status=[]
    )


def _owned(req: sgh.StreamsGroupHeartbeatRequest) -> TasksTuple | None:
    if req.active_tasks is None or req.standby_tasks is None or req.warmup_tasks is None:
        return None

    def tasks(items: list[sgh.TaskIds] | list[sgh.StreamsGroupHeartbeatRequestTaskIds]) -> Tasks:
        out: dict[str, frozenset[int]] = {}
        for t in items:
            if t.partitions:
                out[t.subtopology_id] = out.get(t.subtopology_id, frozenset()) | frozenset(
                    t.partitions
                )
        return out

    return TasksTuple(tasks(req.active_tasks), tasks(req.standby_tasks), tasks(req.warmup_tasks))


def _subset(owned: Tasks, assigned: Tasks) -> bool:
    return all(ps <= assigned.get(s, frozenset()) for s, ps in owned.items())


def _check_epoch(member: StreamsGroupMember, req: sgh.StreamsGroupHeartbeatRequest) -> None:
    e = req.member_epoch
    if e == 0:
        return
    text = (
        "The streams group member has a {} member epoch ({}) than the one known by the group "
        "coordinator ({}). The member must abandon all its partitions and rejoin."
    )
    if e > member.member_epoch:
        raise HeartbeatError(
            ErrorCode.FENCED_MEMBER_EPOCH, text.format("greater", e, member.member_epoch)
        )
    if e < member.member_epoch:
        owned = _owned(req)
        active, standby, warmup = member.assigned_tasks()
        if (
            e != member.previous_member_epoch
            or owned is None
            or not _subset(owned.active, active)
            or not _subset(owned.standby, standby)
            or not _subset(owned.warmup, warmup)
        ):
            raise HeartbeatError(
                ErrorCode.FENCED_MEMBER_EPOCH, text.format("smaller", e, member.member_epoch)
            )


def _find(
    mgr: StreamsGroupManager,
    req: sgh.StreamsGroupHeartbeatRequest,
    other_types: GroupTypeCheck,
    writes: list[rec.StreamsRecord],
) -> tuple[StreamsGroup, StreamsGroupMember, bool]:
    gid = req.group_id
    joining = req.member_epoch == 0
    group = mgr.groups.get(gid)
    if group is None:
        if not joining:
            raise _not_found(gid, other_types, f"Streams group {gid} not found.")
        other = other_types.get(gid)
        if other is not None and not (other[0] == "classic" and other[1]):
            raise _not_found(gid, other_types, "")
        group = StreamsGroup(gid, mgr.topics)
    if joining and len(group.members) >= mgr.config.streams_group_max_size:
        raise HeartbeatError(
            ErrorCode.GROUP_MAX_SIZE_REACHED,
            "The streams group has reached its maximum capacity of "
            f"{mgr.config.streams_group_max_size} members.",
        )
    if req.instance_id is not None:
        return _find_static(group, req, writes)
    member = group.members.get(req.member_id)
    if member is None:
        if not joining:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {req.member_id} is not a member of group {gid}.",
            )
        member = StreamsGroupMember(req.member_id)
        new = True
    else:
        new = False
    _check_epoch(member, req)
    return group, member, new


def _static_holder(
    group: StreamsGroup, req: sgh.StreamsGroupHeartbeatRequest
) -> StreamsGroupMember:
    """The static member of the request's instance id, which must be the requester."""
    iid = req.instance_id
    holder = group.static_member(iid) if iid is not None else None
    if holder is None:
        raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {iid} is unknown.")
    if holder.member_id != req.member_id:
        raise HeartbeatError(
            ErrorCode.FENCED_INSTANCE_ID,
            f"Static member {req.member_id} with instance id {iid} was fenced by member "
            f"{holder.member_id}.",
        )
    return holder


def _find_static(
    group: StreamsGroup, req: sgh.StreamsGroupHeartbeatRequest, writes: list[rec.StreamsRecord]
) -> tuple[StreamsGroup, StreamsGroupMember, bool]:
    """Kafka 4.4's getOrMaybeCreateStaticStreamsGroupMember: a static member that left
    temporarily (epoch -2) is replaced by the rejoining instance under its new member id,
    keeping its tasks and its target."""
    iid = req.instance_id
    if req.member_epoch != 0:
        known = _static_holder(group, req)
        _check_epoch(known, req)
        return group, known, False
    holder = group.static_member(iid) if iid is not None else None
    if holder is None:
        member = group.members.get(req.member_id)
        if member is None:
            return group, StreamsGroupMember(req.member_id), True
        return group, member, False
    if holder.member_epoch != STATIC_LEAVE_EPOCH:
        raise HeartbeatError(
            ErrorCode.UNRELEASED_INSTANCE_ID,
            f"Static member {req.member_id} with instance id {iid} cannot join the group "
            f"because the instance id is owned by {holder.member_id} member.",
        )
    gid = group.group_id
    member = dataclasses.replace(
        holder, member_id=req.member_id, member_epoch=0, previous_member_epoch=0
    )
    writes.extend(rec.member_removed(gid, holder.member_id))
    writes.append(rec.member_metadata(gid, member))
    writes.append(
        rec.target_member(gid, member.member_id, group.targets.get(holder.member_id, TasksTuple()))
    )
    writes.append(rec.current_assignment(gid, member))
    group.relabelled = (holder.member_id, member.member_id)
    return group, member, False


def _updated_member(
    member: StreamsGroupMember, ctx: RequestContext, req: sgh.StreamsGroupHeartbeatRequest
) -> StreamsGroupMember:
    m = dataclasses.replace(member, client_id=ctx.client_id, client_host=ctx.client_host)
    if req.instance_id is not None:
        m.instance_id = req.instance_id
    if req.rack_id is not None:
        m.rack_id = req.rack_id
    if req.rebalance_timeout_ms != -1:
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
    if req.topology is not None:
        m.topology_epoch = req.topology.epoch
    if req.process_id is not None:
        m.process_id = req.process_id
    if req.client_tags is not None:
        m.client_tags = {t.key: t.value for t in req.client_tags}
    ep = req.user_endpoint
    if req.member_epoch == 0:
        m.user_endpoint = None if ep is None else (ep.host, ep.port)
    elif ep is not None:
        m.user_endpoint = (ep.host, ep.port)
    return m


def _topology(
    group: StreamsGroup, req: sgh.StreamsGroupHeartbeatRequest, writes: list[rec.StreamsRecord]
) -> StreamsTopology:
    current = group.topology
    if req.topology is None:
        if current is None:
            raise RuntimeError("The topology is null and the group topology is also null.")
        return current
    mine = StreamsTopology(topology_record(req.topology))
    if current is None:
        writes.append(rec.topology(group.group_id, mine))
        return mine
    if current.epoch > mine.epoch:
        return current
    if current.epoch != mine.epoch or current.subtopologies != mine.subtopologies:
        raise HeartbeatError(_BAD, "Topology updates are not supported yet.")
    return current


def _check_tasks(configured: ConfiguredTopology, req: sgh.StreamsGroupHeartbeatRequest) -> None:
    subs = configured.subtopologies or {}
    for tasks in (req.active_tasks, req.standby_tasks, req.warmup_tasks):
        for t in tasks or ():
            sub = subs.get(t.subtopology_id)
            if sub is None:
                raise HeartbeatError(
                    _BAD, f"Subtopology {t.subtopology_id} does not exist in the topology."
                )
            for p in t.partitions:
                if p < 0 or p >= sub.number_of_tasks:
                    raise HeartbeatError(
                        _BAD,
                        f"Task {p} for subtopology {t.subtopology_id} is invalid. "
                        f"Number of tasks for this subtopology: {sub.number_of_tasks}",
                    )


def _status(code: int, detail: str) -> sgh.Status:
    return sgh.Status(status_code=code, status_detail=detail)


def _configure(
    mgr: StreamsGroupManager,
    group: StreamsGroup,
    topology: StreamsTopology,
    had_topology: bool,
) -> tuple[ConfiguredTopology, int, bool]:
    """(configured topology, metadata hash, hash changed) -- Kafka's step 3."""
    configured = group.configured_topology
    metadata_hash = group.metadata_hash
    changed = False
    if not had_topology or configured is None or group.metadata_refresh:
        metadata_hash = mgr.metadata_hash(topology.required_topics())
        reconfigure = not had_topology
        if metadata_hash != group.metadata_hash:
            changed = reconfigure = True
        if reconfigure or configured is None:
            configured = configure_topics(topology, mgr.topics, metadata_hash)
    assert configured is not None
    return configured, metadata_hash, changed


def _target(
    mgr: StreamsGroupManager,
    group: StreamsGroup,
    epoch: int,
    member: StreamsGroupMember,
    configured: ConfiguredTopology,
    configs: dict[str, str],
    now_ms: int,
    writes: list[rec.StreamsRecord],
    statuses: list[sgh.Status],
) -> tuple[int, TasksTuple]:
    """(target epoch, the member's target) -- Kafka's maybeUpdateStreamsTargetAssignment."""
    gid = group.group_id
    if mgr.initial_delay_active(gid):
        statuses.append(
            _status(
                Status.ASSIGNMENT_DELAYED,
                "Assignment delayed due to the configured initial rebalance delay.",
            )
        )
        return group.assignment_epoch, TasksTuple()
    stored = group.targets.get(member.member_id)
    if stored is None:
        stored = (
            group.targets.get(group.relabelled[0], TasksTuple())
            if group.relabelled
            else TasksTuple()
        )
    if group.assignment_epoch >= epoch:
        return group.assignment_epoch, stored
    interval = mgr.assignment_interval_ms(gid)
    ts = group.assignment_timestamp_ms
    if ts != 0 and interval != 0 and now_ms < ts + interval:
        statuses.append(
            _status(
                Status.ASSIGNMENT_DELAYED,
                "Assignment delayed due to the configured assignment interval.",
            )
        )
        return group.assignment_epoch, stored
    members = dict(group.members)
    if group.relabelled:
        members.pop(group.relabelled[0], None)
    members[member.member_id] = member
    target_writes, targets = mgr.compute_target(group, epoch, members, configured, configs, now_ms)
    writes.extend(target_writes)
    return epoch, targets.get(member.member_id, TasksTuple())


def _heartbeat(
    mgr: StreamsGroupManager,
    out: Result,
    ctx: RequestContext,
    req: sgh.StreamsGroupHeartbeatRequest,
    now_ms: int,
    other_types: GroupTypeCheck,
) -> tuple[sgh.StreamsGroupHeartbeatResponse, ConfiguredTopology | None]:
    gid = req.group_id
    writes: list[rec.StreamsRecord] = []
    group, member, new = _find(mgr, req, other_types, writes)
    was_empty = group.is_empty()
    statuses: list[sgh.Status] = []
    updated = _updated_member(member, ctx, req)
    bump = new or updated.metadata() != member.metadata()
    if bump:
        writes.append(rec.member_metadata(gid, updated))
    had_topology = group.topology is not None
    topology = _topology(group, req, writes)
    if updated.topology_epoch < topology.epoch and had_topology:
        statuses.append(
            _status(
                Status.STALE_TOPOLOGY,
                f"The member's topology epoch {updated.topology_epoch} is behind the group's "
                f"topology epoch {topology.epoch}.",
            )
        )
    configured, metadata_hash, hash_changed = _configure(mgr, group, topology, had_topology)
    bump = bump or hash_changed
    validated = -1
    if configured.is_ready:
        validated = topology.epoch
        _check_tasks(configured, req)
    bump = bump or validated != group.validated_topology_epoch
    configs = mgr.assignment_configs(gid)
    bump = bump or configs != group.last_assignment_configs
    epoch = group.group_epoch
    if bump:
        epoch += 1
        writes.append(rec.group_metadata(gid, epoch, metadata_hash, validated, configs))
    if was_empty:
        mgr.schedule_initial_delay(out, gid, now_ms)
    target_epoch, target = _target(
        mgr, group, epoch, updated, configured, configs, now_ms, writes, statuses
    )
    try:
        reconciled = reconcile(
            updated,
            target_epoch,
            target,
            lambda s, p: group.active_owner.get((s, p)),
            lambda s, p: group.standby_owners.get((s, p), set()),
            lambda s, p: group.warmup_owners.get((s, p), set()),
            _owned(req),
        )
    except FencedUnknownState as e:
        raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, str(e)) from None
    if new or reconciled.assignment() != member.assignment():
        writes.append(rec.current_assignment(gid, reconciled))
    # Everything is decided: apply (a new group joins the manager here).
    group.configured_topology = configured
    group.metadata_refresh = False
    mgr.groups[gid] = group
    group.relabelled = None
    rec.apply_all(out, mgr.partitions.partition_of(gid), group, writes)
    _store_offsets(group, req)
    if reconciled.assignment() != member.assignment():
        if reconciled.state == MemberState.UNREVOKED_TASKS:
            mgr.schedule_rebalance(out, gid, reconciled, now_ms)
        else:
            mgr.timers.cancel(streams_rebalance_key(gid, reconciled.member_id))
    mgr.schedule_session(out, gid, req.member_id, now_ms)
    if req.shutdown_application and group.shutdown_requester is None:
        group.shutdown_requester = req.member_id
    resp = _response(mgr, group, member, reconciled, req, new or req.member_epoch == 0)
    if configured.status is not None:
        statuses.append(_status(configured.status.status, configured.status.message))
    if group.shutdown_requester is not None:
        statuses.append(
            _status(
                Status.SHUTDOWN_APPLICATION,
                f"Streams group member {group.shutdown_requester} encountered a fatal error and "
                "requested a shutdown for the entire application.",
            )
        )
    if ctx.api_version >= 1:
        missing = _missing_client_tags(configs, reconciled)
        if missing:
            statuses.append(
                _status(
                    Status.MISSING_CLIENT_TAGS,
                    f"Missing required client tags for rack-aware standby assignment: "
                    f"[{', '.join(missing)}]. Configure them via 'client.tag.<tagKey>' in your "
                    "Streams config.",
                )
            )
    resp.status = statuses
    return resp, configured if configured.internal_topics_to_create else None


def _missing_client_tags(configs: Mapping[str, str], member: StreamsGroupMember) -> list[str]:
    """The rack-aware tag keys the member does not send, in the configured order (a v0 client
    cannot read the status, so Kafka tells v1 members only)."""
    raw = configs.get(RACK_AWARE_ASSIGNMENT_TAGS, "").strip()
    if not raw:
        return []
    return [t for t in re.split(r"\s*,\s*", raw) if t not in member.client_tags]


def _store_offsets(group: StreamsGroup, req: sgh.StreamsGroupHeartbeatRequest) -> None:
    """Task offsets the member reports (memory only): the assignor prefers caught-up state."""
    if req.task_offsets is not None:
        group.task_offsets[req.member_id] = {
            (t.subtopology_id, t.partition): t.offset for t in req.task_offsets
        }
    if req.task_end_offsets is not None:
        group.task_end_offsets[req.member_id] = {
            (t.subtopology_id, t.partition): t.offset for t in req.task_end_offsets
        }


def _task_ids(tasks: Tasks) -> list[sgh.StreamsGroupHeartbeatResponseTaskIds]:
    return [sgh.StreamsGroupHeartbeatResponseTaskIds(s, sorted(ps)) for s, ps in tasks.items()]


def _response(
    mgr: StreamsGroupManager,
    group: StreamsGroup,
    before: StreamsGroupMember,
    member: StreamsGroupMember,
    req: sgh.StreamsGroupHeartbeatRequest,
    joining: bool,
) -> sgh.StreamsGroupHeartbeatResponse:
    gid = group.group_id
    resp = sgh.StreamsGroupHeartbeatResponse(
        member_id=member.member_id,
        member_epoch=member.member_epoch,
        heartbeat_interval_ms=mgr.heartbeat_interval_ms(gid),
        task_offset_interval_ms=mgr.task_offset_interval_ms(gid),
        acceptable_recovery_lag=mgr.acceptable_recovery_lag(gid),
    )
    active, standby, warmup = member.assigned_tasks()
    changed = (active, standby, warmup) != before.assigned_tasks() or {
        s: dict(e) for s, e in member.active.items()
    } != before.active
    if joining or changed:
        resp.active_tasks = _task_ids(active)
        resp.standby_tasks = _task_ids(standby)
        resp.warmup_tasks = _task_ids(warmup)
    endpoint_changed = before.user_endpoint != member.user_endpoint
    if endpoint_changed or (changed and member.user_endpoint is not None):
        group.endpoint_information_epoch += 1
    if group.endpoint_information_epoch != req.endpoint_information_epoch:
        resp.partitions_by_user_endpoint = _endpoints(mgr, group, member)
    resp.endpoint_information_epoch = group.endpoint_information_epoch
    return resp


def _endpoints(
    mgr: StreamsGroupManager, group: StreamsGroup, member: StreamsGroupMember
) -> list[sgh.EndpointToPartitions]:
    """One entry per member with an endpoint, the heartbeating member last (Kafka's order)."""
    ordered = [m for mid, m in group.members.items() if mid != member.member_id]
    ordered.append(member)
    out = []
    for m in ordered:
        if m.user_endpoint is None:
            continue
        active, standby, warmup = m.assigned_tasks()
        replicas = {
            s: standby.get(s, frozenset()) | warmup.get(s, frozenset()) for s in {*standby, *warmup}
        }
        out.append(
            sgh.EndpointToPartitions(
                user_endpoint=sgh.EndpointToPartitionsEndpoint(*m.user_endpoint),
                active_partitions=[
                    sgh.TopicPartition(t, ps) for t, ps in _partitions(mgr, group, active)
                ],
                standby_partitions=[
                    sgh.EndpointToPartitionsTopicPartition(t, ps)
                    for t, ps in _partitions(mgr, group, replicas)
                ],
            )
        )
    return out


def _partitions(
    mgr: StreamsGroupManager, group: StreamsGroup, tasks: Tasks
) -> list[tuple[str, list[int]]]:
    """The input partitions of tasks: partition p of every source of the subtopology that has p."""
    configured = group.configured_topology
    subs = configured.subtopologies if configured is not None else None
    if not subs:
        return []
    out = []
    for sid, parts in tasks.items():
        sub = subs.get(sid)
        if sub is None:
            continue
        for topic in sorted(sub.source_topics | set(sub.repartition_source_topics)):
            t = mgr.topics.topic(topic)
            n = t.num_partitions if t is not None else 0
            ps = sorted(p for p in parts if p < n)
            if ps:
                out.append((topic, ps))
    return out
