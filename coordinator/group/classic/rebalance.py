"""The rebalance engine: moving a group through PreparingRebalance and CompletingRebalance.

How this works
--------------
Every request handler that changes membership ends by calling
``_maybe_prepare_rebalance_or_complete_join``: if the group may start a
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

Kafka's behaviour being reproduced is GroupMetadataManager's classic-group
section (prepareRebalance, completeClassicGroupJoin, expirePendingSync, ...).
"""

from __future__ import annotations

from coordinator.group.base import (
    ShardBase,
    TimerAction,
    TimerKind,
    heartbeat_key,
    join_key,
    pending_key,
    sync_key,
)
from coordinator.group.classic.group import ClassicGroup, Member
from coordinator.group.classic.state import GroupState
from coordinator.group.types import Result
from protocol.errors import ErrorCode
from protocol.messages.join_group import JoinGroupResponse, JoinGroupResponseMember
from protocol.messages.sync_group import SyncGroupResponse

__all__ = ["RebalanceCore"]

_P = GroupState.PREPARING_REBALANCE
_C = GroupState.COMPLETING_REBALANCE
_S = GroupState.STABLE
_E = GroupState.EMPTY
_D = GroupState.DEAD


class RebalanceCore(ShardBase):
    # ------------------------------------------------------------ replies

    def _reply_join(
        self, out: Result, member: Member, group: ClassicGroup, resp: JoinGroupResponse
    ) -> None:
        """Answer a member's parked JoinGroup, if it has one."""
        if member.join_reply is None:
            return
        out.replies.append((member.join_reply, resp))
        group.set_join_reply(member, None)

    def _reply_sync(self, out: Result, member: Member, resp: SyncGroupResponse) -> bool:
        if member.sync_reply is None:
            return False
        out.replies.append((member.sync_reply, resp))
        member.sync_reply = None
        return True

    def _join_members(self, group: ClassicGroup) -> list[JoinGroupResponseMember]:
        return [
            JoinGroupResponseMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                metadata=m.metadata(group.protocol_name),
            )
            for m in group.members.values()
        ]

    def _current_generation_response(
        self, group: ClassicGroup, member_id: str, *, with_members: bool, skip: bool = False
    ) -> JoinGroupResponse:
        return JoinGroupResponse(
            error_code=ErrorCode.NO_ERROR,
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            skip_assignment=skip,
            member_id=member_id,
            members=self._join_members(group) if with_members else [],
        )

    # ------------------------------------------------------------ timers

    def _reschedule_heartbeat(
        self,
        out: Result,
        group: ClassicGroup,
        member: Member,
        now_ms: int,
        timeout_ms: int | None = None,
    ) -> None:
        deadline = now_ms + (member.session_timeout_ms if timeout_ms is None else timeout_ms)
        # Key and action are built once per member: this runs on every heartbeat.
        timer = member.session_timer
        if timer is None or timer[1].group_id != group.group_id:
            timer = member.session_timer = (
                heartbeat_key(group.group_id, member.member_id),
                TimerAction(TimerKind.HEARTBEAT, group.group_id, member.member_id),
            )
        self._schedule(out, timer[0], deadline, timer[1])

    def _cancel_member_timers(self, out: Result, group_id: str, member_id: str) -> None:
        self._cancel(out, heartbeat_key(group_id, member_id))
        self._cancel(out, pending_key(group_id, member_id))

    # ------------------------------------------------------------ rebalance

    def _maybe_prepare_rebalance_or_complete_join(
        self, out: Result, group: ClassicGroup, reason: str, cause: str, now_ms: int
    ) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(out, group, reason, cause, now_ms)
        else:
            self._maybe_complete_join_phase(out, group, now_ms)

    def _prepare_rebalance(
        self, out: Result, group: ClassicGroup, reason: str, cause: str, now_ms: int
    ) -> None:
        if group.is_in(_C):
            self._reset_and_propagate_assignment_with_error(
                out, group, ErrorCode.REBALANCE_IN_PROGRESS, now_ms
            )
        self._remove_sync_expiration(out, group)

        initial = group.is_in(_E)
        if initial:
            # A brand-new group waits a little so that consumers started together
            # land in one generation instead of one rebalance each.
            delay = self.config.group_initial_rebalance_delay_ms
            group.initial_delay_ms = delay
            group.initial_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            group.new_member_added = False
            self._schedule(
                out,
                join_key(group.group_id),
                now_ms + delay,
                TimerAction(TimerKind.INITIAL_JOIN, group.group_id),
            )

        old_generation = group.generation
        group.transition_to(_P, now_ms)
        group.rebalance_reason = reason
        self.rebalances[cause] = self.rebalances.get(cause, 0) + 1
        out.events.append(
            f"group {group.group_id} preparing rebalance from generation {old_generation} "
            f"({cause}): {reason}"
        )
        if not initial:
            self._maybe_complete_join_else_schedule(out, group, now_ms)

    def _maybe_complete_join_else_schedule(
        self, out: Result, group: ClassicGroup, now_ms: int
    ) -> None:
        if group.has_all_members_joined():
            self._complete_join(out, group, now_ms)
        else:
            self._schedule(
                out,
                join_key(group.group_id),
                now_ms + group.rebalance_timeout_ms(),
                TimerAction(TimerKind.JOIN, group.group_id),
            )

    def _maybe_complete_join_phase(self, out: Result, group: ClassicGroup, now_ms: int) -> None:
        # The initial rebalance always runs its full delay, even if everybody is there.
        if group.is_in(_P) and group.previous_state is not _E and group.has_all_members_joined():
            self._complete_join(out, group, now_ms)

    def _initial_join_timer(self, out: Result, group: ClassicGroup, now_ms: int) -> None:
        if group.new_member_added and group.initial_remaining_ms != 0:
            group.new_member_added = False
            delay = group.initial_delay_ms
            new_delay = min(
                self.config.group_initial_rebalance_delay_ms, group.initial_remaining_ms
            )
            group.initial_remaining_ms = max(group.initial_remaining_ms - delay, 0)
            group.initial_delay_ms = new_delay
            self._schedule(
                out,
                join_key(group.group_id),
                now_ms + new_delay,
                TimerAction(TimerKind.INITIAL_JOIN, group.group_id),
            )
        else:
            self._complete_join(out, group, now_ms)

    def _complete_join(self, out: Result, group: ClassicGroup, now_ms: int) -> None:
        self._cancel(out, join_key(group.group_id))
        gid = group.group_id

        dropped = [m for m in group.not_yet_rejoined() if not m.is_static]
        for m in dropped:
            self._remove_member(out, group, m.member_id)
        if dropped:
            out.events.append(
                f"group {gid}: removed dynamic members that did not rejoin: "
                + ", ".join(m.member_id for m in dropped)
            )

        if group.is_in(_D):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined remain: wait for them
            # (their session timeouts will eventually remove them).
            out.events.append(f"group {gid}: no member rejoined; extending the join phase")
            self._schedule(
                out,
                join_key(gid),
                now_ms + group.rebalance_timeout_ms(),
                TimerAction(TimerKind.JOIN, gid),
            )
            return

        group.init_next_generation(now_ms)
        reason = group.rebalance_reason or "rebalance"
        if group.is_in(_E):
            out.events.append(f"group {gid} generation {group.generation}: {reason}; now empty")
            out.records.append(self._group_metadata_record(group, {}))
            return

        out.events.append(
            f"group {gid} generation {group.generation}: {reason}; "
            f"{len(group.members)} members, protocol {group.protocol_name}, "
            f"leader {group.leader_id}"
        )
        for m in list(group.members.values()):
            resp = self._current_generation_response(
                group, m.member_id, with_members=group.is_leader(m.member_id)
            )
            self._reply_join(out, m, group, resp)
            self._reschedule_heartbeat(out, group, m, now_ms)
            m.is_new = False
            group.pending_sync[m.member_id] = None
        self._schedule(
            out,
            sync_key(gid),
            now_ms + group.rebalance_timeout_ms(),
            TimerAction(TimerKind.SYNC, gid, generation=group.generation),
        )

    # ------------------------------------------------------------ sync phase

    def _reset_and_propagate_assignment_with_error(
        self, out: Result, group: ClassicGroup, error: ErrorCode, now_ms: int
    ) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(out, group, error, now_ms)

    def _set_and_propagate_assignment(
        self, out: Result, group: ClassicGroup, assignment: dict[str, bytes], now_ms: int
    ) -> None:
        for m in group.members.values():
            m.assignment = assignment.get(m.member_id, b"")
        self._propagate_assignment(out, group, ErrorCode.NO_ERROR, now_ms)

    def _propagate_assignment(
        self, out: Result, group: ClassicGroup, error: ErrorCode, now_ms: int
    ) -> None:
        ok = error == ErrorCode.NO_ERROR
        for m in group.members.values():
            resp = SyncGroupResponse(
                error_code=error,
                protocol_type=group.protocol_type if ok else None,
                protocol_name=group.protocol_name if ok else None,
                assignment=m.assignment,
            )
            if self._reply_sync(out, m, resp):
                # Expirations that fired while the member was parked were ignored,
                # so a fresh session deadline starts now.
                self._reschedule_heartbeat(out, group, m, now_ms)

    def _remove_sync_expiration(self, out: Result, group: ClassicGroup) -> None:
        group.pending_sync.clear()
        self._cancel(out, sync_key(group.group_id))

    def _remove_pending_sync_member(self, out: Result, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.pop(member_id, None)
        if not group.is_in(_C, _S) or not group.pending_sync:
            self._cancel(out, sync_key(group.group_id))

    def _expire_pending_sync(
        self, out: Result, group: ClassicGroup, generation: int, now_ms: int
    ) -> None:
        if generation != group.generation or not group.is_in(_C, _S):
            return
        if not group.pending_sync:
            return
        laggards = list(group.pending_sync)
        for mid in laggards:
            self._remove_member(out, group, mid)
        self._prepare_rebalance(
            out,
            group,
            f"members {', '.join(laggards)} did not send SyncGroup within "
            f"{group.rebalance_timeout_ms()} ms",
            "sync_timeout",
            now_ms,
        )

    # ------------------------------------------------------------ removal

    def _remove_member(self, out: Result, group: ClassicGroup, member_id: str) -> None:
        """Drop a member, answering anything it still has parked, and forget its timers."""
        member = group.members.get(member_id)
        if member is not None:
            self._reply_join(
                out,
                member,
                group,
                JoinGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID, member_id=""),
            )
            self._reply_sync(out, member, SyncGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member_id)
        self._cancel_member_timers(out, group.group_id, member_id)

    def _remove_member_and_update(
        self, out: Result, group: ClassicGroup, member: Member, reason: str, cause: str, now_ms: int
    ) -> None:
        self._remove_member(out, group, member.member_id)
        if group.is_in(_S, _C):
            self._maybe_prepare_rebalance_or_complete_join(out, group, reason, cause, now_ms)
        elif group.is_in(_P) and group.has_all_members_joined():
            self._complete_join(out, group, now_ms)

    def _expire_heartbeat(self, out: Result, group_id: str, member_id: str, now_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in(_D):
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        what = "join timed out" if member.is_new else "session expired"
        timeout = (
            self.config.group_new_member_join_timeout_ms
            if member.is_new
            else member.session_timeout_ms
        )
        self._remove_member_and_update(
            out,
            group,
            member,
            f"member {member_id} {what} after {timeout} ms",
            "session_timeout",
            now_ms,
        )

    def _expire_pending_member(
        self, out: Result, group_id: str, member_id: str, now_ms: int
    ) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in(_D) or not group.is_pending(member_id):
            return
        group.remove(member_id)
        out.events.append(f"group {group_id}: pending member {member_id} never joined; forgotten")
        if group.is_in(_P) and group.has_all_members_joined():
            self._complete_join(out, group, now_ms)
