"""The rebalance engine: moving a group through PreparingRebalance and CompletingRebalance.

How this works
--------------
Every request handler that changes membership ends by calling
``maybe_prepare_rebalance_or_complete_join``: if the group may start a
rebalance (Empty, Stable, CompletingRebalance) it does, otherwise (already
PreparingRebalance) it checks whether the join phase can finish early.

* Starting a rebalance cancels parked SyncGroups (REBALANCE_IN_PROGRESS) and
  the pending-sync deadline.  From Empty it arms the initial delay
  (group.initial.rebalance.delay.ms, extended while members keep arriving, in
  total capped by the rebalance timeout); otherwise it completes at once if
  everybody has rejoined, else arms the join deadline (largest rebalance
  timeout among members).
* Completing the join phase drops dynamic members that did not rejoin,
  elects a leader among those that did, bumps the generation, picks the
  protocol by vote, answers every parked JoinGroup (only the leader sees the
  member list) and arms the pending-sync deadline.  If nobody is left the
  group becomes Empty and its metadata is written.
* Parked requests are answered by appending (reply_to, response) to the
  Result; the runtime sends them once the Result's records are durable.
* ``on_timer`` is what each classic timer does when it fires: end the join
  phase or the initial delay, remove members that did not sync, expire a
  member's session or a pending member.
* ``on_loaded`` re-arms the sessions of a freshly loaded partition's members
  (timers are not persisted) and rebalances a group loaded over group.max.size.

These are functions of the ``ClassicGroupManager`` (its first argument), as are the
request handlers that call them.  Kafka's behaviour being reproduced is
GroupMetadataManager's classic-group section (prepareRebalance,
completeClassicGroupJoin, expirePendingSync, ...).
"""

from __future__ import annotations

from coordinator.group import records
from coordinator.group.classic.group import ClassicGroup, ClassicGroupMember
from coordinator.group.classic.manager import ClassicGroupManager
from coordinator.group.classic.state import ClassicGroupState
from coordinator.group.events import (
    GenerationCompleted,
    GroupEmptied,
    JoinPhaseExtended,
    MembersRemoved,
    PendingMemberExpired,
    RebalanceCause,
    RebalanceStarted,
)
from coordinator.group.timers import TimerAction, TimerKind, join_key, sync_key
from coordinator.group.types import Result
from protocol.errors import ErrorCode
from protocol.messages.sync_group import SyncGroupResponse

__all__ = [
    "maybe_complete_join_phase",
    "maybe_prepare_rebalance_or_complete_join",
    "on_loaded",
    "on_timer",
    "prepare_rebalance",
    "remove_pending_sync_member",
    "set_and_propagate_assignment",
]

_P = ClassicGroupState.PREPARING_REBALANCE
_C = ClassicGroupState.COMPLETING_REBALANCE
_S = ClassicGroupState.STABLE
_E = ClassicGroupState.EMPTY
_D = ClassicGroupState.DEAD


# ------------------------------------------------------------ join phase


def maybe_prepare_rebalance_or_complete_join(
    m: ClassicGroupManager,
    out: Result,
    group: ClassicGroup,
    reason: str,
    cause: RebalanceCause,
    now_ms: int,
) -> None:
    if group.can_rebalance():
        prepare_rebalance(m, out, group, reason, cause, now_ms)
    else:
        maybe_complete_join_phase(m, out, group, now_ms)


def prepare_rebalance(
    m: ClassicGroupManager,
    out: Result,
    group: ClassicGroup,
    reason: str,
    cause: RebalanceCause,
    now_ms: int,
) -> None:
    if group.is_in(_C):
        _reset_and_propagate_assignment_with_error(
            m, out, group, ErrorCode.REBALANCE_IN_PROGRESS, now_ms
        )
    _remove_sync_expiration(m, group)

    initial = group.is_in(_E)
    if initial:
        # A brand-new group waits a little so that consumers started together
        # land in one generation instead of one rebalance each.
        delay = m.config.group_initial_rebalance_delay_ms
        group.initial_delay_ms = delay
        group.initial_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
        group.new_member_added = False
        m.timers.schedule(
            out,
            join_key(group.group_id),
            now_ms + delay,
            TimerAction(TimerKind.INITIAL_JOIN, group.group_id),
        )

    old_generation = group.generation
    group.transition_to(_P, now_ms)
    group.rebalance_reason = reason
    m.rebalances[cause] = m.rebalances.get(cause, 0) + 1
    out.events.append(RebalanceStarted(group.group_id, old_generation, cause, reason))
    if not initial:
        _maybe_complete_join_else_schedule(m, out, group, now_ms)


def _maybe_complete_join_else_schedule(
    m: ClassicGroupManager, out: Result, group: ClassicGroup, now_ms: int
) -> None:
    if group.has_all_members_joined():
        _complete_join(m, out, group, now_ms)
    else:
        m.timers.schedule(
            out,
            join_key(group.group_id),
            now_ms + group.rebalance_timeout_ms(),
            TimerAction(TimerKind.JOIN, group.group_id),
        )


def maybe_complete_join_phase(
    m: ClassicGroupManager, out: Result, group: ClassicGroup, now_ms: int
) -> None:
    # The initial rebalance always runs its full delay, even if everybody is there.
    if group.is_in(_P) and group.previous_state is not _E and group.has_all_members_joined():
        _complete_join(m, out, group, now_ms)


def _initial_join_timer(
    m: ClassicGroupManager, out: Result, group: ClassicGroup, now_ms: int
) -> None:
    if group.new_member_added and group.initial_remaining_ms != 0:
        group.new_member_added = False
        delay = group.initial_delay_ms
        new_delay = min(m.config.group_initial_rebalance_delay_ms, group.initial_remaining_ms)
        group.initial_remaining_ms = max(group.initial_remaining_ms - delay, 0)
        group.initial_delay_ms = new_delay
        m.timers.schedule(
            out,
            join_key(group.group_id),
            now_ms + new_delay,
            TimerAction(TimerKind.INITIAL_JOIN, group.group_id),
        )
    else:
        _complete_join(m, out, group, now_ms)


def _complete_join(m: ClassicGroupManager, out: Result, group: ClassicGroup, now_ms: int) -> None:
    gid = group.group_id
    m.timers.cancel(join_key(gid))

    dropped = [mem for mem in group.not_yet_rejoined() if not mem.is_static]
    for mem in dropped:
        m.remove_member(out, group, mem.member_id)
    if dropped:
        out.events.append(MembersRemoved(gid, tuple(mem.member_id for mem in dropped)))

    if group.is_in(_D):
        return
    if not group.maybe_elect_new_joined_leader() and group.members:
        # Only static members that have not rejoined remain: wait for them
        # (their session timeouts will eventually remove them).
        out.events.append(JoinPhaseExtended(gid))
        m.timers.schedule(
            out,
            join_key(gid),
            now_ms + group.rebalance_timeout_ms(),
            TimerAction(TimerKind.JOIN, gid),
        )
        return

    group.init_next_generation(now_ms)
    reason = group.rebalance_reason or "rebalance"
    if group.is_in(_E):
        out.events.append(GroupEmptied(gid, group.generation, reason))
        out.records.append(
            records.group_metadata_record(m.partitions.partition_of(group.group_id), group, {})
        )
        return

    out.events.append(
        GenerationCompleted(
            gid,
            group.generation,
            reason,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )
    )
    for mem in list(group.members.values()):
        resp = m.current_generation_response(
            group, mem.member_id, with_members=group.is_leader(mem.member_id)
        )
        m.reply_join(out, mem, group, resp)
        m.reschedule_heartbeat(out, group, mem, now_ms)
        mem.is_new = False
        group.pending_sync[mem.member_id] = None
    m.timers.schedule(
        out,
        sync_key(gid),
        now_ms + group.rebalance_timeout_ms(),
        TimerAction(TimerKind.SYNC, gid, generation=group.generation),
    )


# ------------------------------------------------------------ sync phase


def _reset_and_propagate_assignment_with_error(
    m: ClassicGroupManager, out: Result, group: ClassicGroup, error: ErrorCode, now_ms: int
) -> None:
    for mem in group.members.values():
        mem.assignment = b""
    _propagate_assignment(m, out, group, error, now_ms)


def set_and_propagate_assignment(
    m: ClassicGroupManager,
    out: Result,
    group: ClassicGroup,
    assignment: dict[str, bytes],
    now_ms: int,
) -> None:
    for mem in group.members.values():
        mem.assignment = assignment.get(mem.member_id, b"")
    _propagate_assignment(m, out, group, ErrorCode.NO_ERROR, now_ms)


def _propagate_assignment(
    m: ClassicGroupManager, out: Result, group: ClassicGroup, error: ErrorCode, now_ms: int
) -> None:
    ok = error == ErrorCode.NO_ERROR
    for mem in group.members.values():
        resp = SyncGroupResponse(
            error_code=error,
            protocol_type=group.protocol_type if ok else None,
            protocol_name=group.protocol_name if ok else None,
            assignment=mem.assignment,
        )
        if m.reply_sync(out, mem, resp):
            # Expirations that fired while the member was parked were ignored,
            # so a fresh session deadline starts now.
            m.reschedule_heartbeat(out, group, mem, now_ms)


def _remove_sync_expiration(m: ClassicGroupManager, group: ClassicGroup) -> None:
    group.pending_sync.clear()
    m.timers.cancel(sync_key(group.group_id))


def remove_pending_sync_member(m: ClassicGroupManager, group: ClassicGroup, member_id: str) -> None:
    group.pending_sync.pop(member_id, None)
    if not group.is_in(_C, _S) or not group.pending_sync:
        m.timers.cancel(sync_key(group.group_id))


def _expire_pending_sync(
    m: ClassicGroupManager, out: Result, group: ClassicGroup, generation: int, now_ms: int
) -> None:
    if generation != group.generation or not group.is_in(_C, _S):
        return
    if not group.pending_sync:
        return
    laggards = list(group.pending_sync)
    for mid in laggards:
        m.remove_member(out, group, mid)
    prepare_rebalance(
        m,
        out,
        group,
        f"members {', '.join(laggards)} did not send SyncGroup within "
        f"{group.rebalance_timeout_ms()} ms",
        "sync_timeout",
        now_ms,
    )


# ------------------------------------------------------------ expiry


def remove_member_and_update(
    m: ClassicGroupManager,
    out: Result,
    group: ClassicGroup,
    member: ClassicGroupMember,
    reason: str,
    cause: RebalanceCause,
    now_ms: int,
) -> None:
    m.remove_member(out, group, member.member_id)
    if group.is_in(_S, _C):
        maybe_prepare_rebalance_or_complete_join(m, out, group, reason, cause, now_ms)
    elif group.is_in(_P) and group.has_all_members_joined():
        _complete_join(m, out, group, now_ms)


def _expire_heartbeat(
    m: ClassicGroupManager, out: Result, group_id: str, member_id: str, now_ms: int
) -> None:
    group = m.groups.get(group_id)
    if group is None or group.is_in(_D):
        return
    member = group.members.get(member_id)
    if member is None or member.has_satisfied_heartbeat():
        return
    what = "join timed out" if member.is_new else "session expired"
    timeout = (
        m.config.group_new_member_join_timeout_ms if member.is_new else member.session_timeout_ms
    )
    remove_member_and_update(
        m,
        out,
        group,
        member,
        f"member {member_id} {what} after {timeout} ms",
        "session_timeout",
        now_ms,
    )


def _expire_pending_member(
    m: ClassicGroupManager, out: Result, group_id: str, member_id: str, now_ms: int
) -> None:
    group = m.groups.get(group_id)
    if group is None or group.is_in(_D) or not group.is_pending(member_id):
        return
    group.remove(member_id)
    out.events.append(PendingMemberExpired(group_id, member_id))
    if group.is_in(_P) and group.has_all_members_joined():
        _complete_join(m, out, group, now_ms)


# ------------------------------------------------------------ timers


def on_timer(m: ClassicGroupManager, out: Result, action: TimerAction, now_ms: int) -> None:
    """What a classic timer does when it comes due."""
    kind = action.kind
    if kind is TimerKind.HEARTBEAT:
        _expire_heartbeat(m, out, action.group_id, action.member_id, now_ms)
        return
    if kind is TimerKind.PENDING:
        _expire_pending_member(m, out, action.group_id, action.member_id, now_ms)
        return
    group = m.groups.get(action.group_id)
    if group is None:
        return
    if kind is TimerKind.JOIN:
        _complete_join(m, out, group, now_ms)
    elif kind is TimerKind.INITIAL_JOIN:
        _initial_join_timer(m, out, group, now_ms)
    elif kind is TimerKind.SYNC:
        _expire_pending_sync(m, out, group, action.generation, now_ms)


def on_loaded(m: ClassicGroupManager, out: Result, partition: int, now_ms: int) -> int:
    """Timers are not persisted: re-arm every loaded member's session; count the groups."""
    groups = m.groups_of(partition)
    max_size = m.config.group_max_size
    for group in groups:
        for member in group.members.values():
            m.reschedule_heartbeat(out, group, member, now_ms)
        if len(group.members) > max_size:
            prepare_rebalance(
                m,
                out,
                group,
                f"freshly loaded group has {len(group.members)} members, over "
                f"group.max.size {max_size}",
                "join",
                now_ms,
            )
    return len(groups)
