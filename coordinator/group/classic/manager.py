"""ClassicGroupManager: owns the classic groups (Kafka's GroupMetadataManager, classic part).

How this works
--------------
The manager holds every classic group of the shard by id, the rebalance counters, and
the primitives all classic handlers share: answering parked requests, arming and
cancelling a member's timers, removing a member, replaying the group's log records
(``coordinator/group/records.py`` builds them), and unloading a partition's groups.
The protocol itself lives beside it, one module per concern, as functions that take
the manager as their first argument:

* ``join.py``      JoinGroup (KIP-394 pending members, KIP-345 static members)
* ``sync.py``      SyncGroup
* ``heartbeat.py`` Heartbeat and LeaveGroup
* ``describe.py``  DescribeGroups
* ``rebalance.py`` the rebalance engine: PreparingRebalance -> CompletingRebalance ->
  Stable, what the classic timers do when they fire, and re-arming a loaded partition

The manager imports none of them: they import it (the layers run API modules ->
rebalance -> manager -> group -> state), and the shard (``coordinator/group/shard.py``)
binds each API function to the manager with ``functools.partial``.  Offsets are not
here: ``OffsetMetadataManager`` owns them and asks this manager for groups.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from coordinator.group import records
from coordinator.group.classic.group import ClassicGroup, ClassicGroupMember
from coordinator.group.classic.state import ClassicGroupState
from coordinator.group.events import REBALANCE_CAUSES, RebalanceCause
from coordinator.group.partitions import Partitions
from coordinator.group.timers import (
    TimerAction,
    TimerKind,
    Timers,
    heartbeat_key,
    pending_key,
)
from coordinator.group.types import GroupConfig, Result
from protocol.errors import ErrorCode
from protocol.messages.join_group import JoinGroupResponse, JoinGroupResponseMember
from protocol.messages.sync_group import SyncGroupResponse
from storage.records import decode_group_metadata_value

__all__ = ["ClassicGroupManager"]

_HEARTBEAT = TimerKind.HEARTBEAT


class ClassicGroupManager:
    def __init__(
        self,
        config: GroupConfig,
        partitions: Partitions,
        timers: Timers,
        *,
        member_id_suffix: Callable[[], str] | None = None,
    ) -> None:
        self.config = config
        self.partitions = partitions
        self.timers = timers
        # Injectable so tests get reproducible member ids.
        self.suffix: Callable[[], str] = member_id_suffix or (lambda: str(uuid.uuid4()))
        self.groups: dict[str, ClassicGroup] = {}
        self.rebalances: dict[RebalanceCause, int] = dict.fromkeys(REBALANCE_CAUSES, 0)

    def get_or_create_group(self, group_id: str) -> ClassicGroup:
        """The group, created Empty (a "simple" group, as for offsets alone) if unknown."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ClassicGroup(group_id)
        return group

    # ------------------------------------------------------------ replies

    @staticmethod
    def reply_join(
        out: Result, member: ClassicGroupMember, group: ClassicGroup, resp: JoinGroupResponse
    ) -> None:
        """Answer a member's parked JoinGroup, if it has one."""
        if member.join_reply is None:
            return
        out.replies.append((member.join_reply, resp))
        group.set_join_reply(member, None)

    @staticmethod
    def reply_sync(out: Result, member: ClassicGroupMember, resp: SyncGroupResponse) -> bool:
        """Answer a member's parked SyncGroup, if it has one."""
        if member.sync_reply is None:
            return False
        out.replies.append((member.sync_reply, resp))
        member.sync_reply = None
        return True

    @staticmethod
    def current_generation_response(
        group: ClassicGroup, member_id: str, *, with_members: bool, skip: bool = False
    ) -> JoinGroupResponse:
        return JoinGroupResponse(
            error_code=ErrorCode.NO_ERROR,
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            skip_assignment=skip,
            member_id=member_id,
            members=[
                JoinGroupResponseMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    metadata=m.metadata(group.protocol_name),
                )
                for m in group.members.values()
            ]
            if with_members
            else [],
        )

    # ------------------------------------------------------------ member timers

    def reschedule_heartbeat(
        self,
        out: Result,
        group: ClassicGroup,
        member: ClassicGroupMember,
        now_ms: int,
        timeout_ms: int | None = None,
    ) -> None:
        """(Re)start a member's session timer (``timeout_ms``: another timeout than its session)."""
        deadline = now_ms + (member.session_timeout_ms if timeout_ms is None else timeout_ms)
        timer = member.session_timer
        if timer is not None and deadline >= timer.armed_ms:
            timer.deadline_ms = deadline  # moved later, in place (see timers.py)
            return
        member.session_timer = self.timers.schedule(
            out,
            heartbeat_key(group.group_id, member.member_id),
            deadline,
            TimerAction(_HEARTBEAT, group.group_id, member.member_id),
        )

    def cancel_member_timers(self, group_id: str, member_id: str) -> None:
        self.timers.cancel(heartbeat_key(group_id, member_id))
        self.timers.cancel(pending_key(group_id, member_id))

    # ------------------------------------------------------------ removal

    def remove_member(self, out: Result, group: ClassicGroup, member_id: str) -> None:
        """Drop a member, answering anything it still has parked, and forget its timers."""
        member = group.members.get(member_id)
        if member is not None:
            self.reply_join(
                out,
                member,
                group,
                JoinGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID, member_id=""),
            )
            self.reply_sync(out, member, SyncGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member_id)
        self.cancel_member_timers(group.group_id, member_id)

    def delete_group(self, out: Result, group: ClassicGroup, now_ms: int) -> None:
        """Tombstone a group's metadata and forget it (its offsets are the caller's)."""
        gid = group.group_id
        out.records.append(records.group_metadata_tombstone(self.partitions.partition_of(gid), gid))
        group.transition_to(ClassicGroupState.DEAD, now_ms)
        self.timers.cancel_group(group.group_id)
        del self.groups[group.group_id]

    # ------------------------------------------------------------ replay and loading

    def replay(self, group_id: str, value: bytes | None) -> None:
        """Apply a GroupMetadata record: the value replaces the group; a tombstone drops it."""
        if value is None:
            self.groups.pop(group_id, None)
            return
        v = decode_group_metadata_value(value)
        group = ClassicGroup(
            group_id,
            state=ClassicGroupState.STABLE if v.members else ClassicGroupState.EMPTY,
            state_timestamp_ms=None
            if v.current_state_timestamp == -1
            else v.current_state_timestamp,
            generation=v.generation,
            protocol_type=v.protocol_type or None,
            protocol_name=v.protocol,
            leader_id=v.leader,
        )
        for m in v.members:
            group.add(
                ClassicGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=(
                        m.session_timeout if m.rebalance_timeout == -1 else m.rebalance_timeout
                    ),
                    session_timeout_ms=m.session_timeout,
                    protocol_type=v.protocol_type,
                    # Each member supports just the selected protocol, as Kafka rebuilds it.
                    protocols=[(v.protocol or "", m.subscription)],
                    assignment=m.assignment,
                )
            )
        # add() elects the first member when there is no leader; keep the recorded one.
        group.leader_id = v.leader
        group.subscribed_topics = group.compute_subscribed_topics()
        self.groups[group_id] = group

    def groups_of(self, partition: int) -> list[ClassicGroup]:
        partition_of = self.partitions.partition_of
        return [g for g in self.groups.values() if partition_of(g.group_id) == partition]

    def on_unload(self, out: Result, partition: int, now_ms: int) -> None:
        """Stop coordinating a partition's groups: parked requests get NOT_COORDINATOR."""
        for group in self.groups_of(partition):
            for m in group.members.values():
                if m.join_reply is not None:
                    out.replies.append(
                        (
                            m.join_reply,
                            JoinGroupResponse(
                                error_code=ErrorCode.NOT_COORDINATOR, member_id=m.member_id
                            ),
                        )
                    )
                    group.set_join_reply(m, None)
                if m.sync_reply is not None:
                    out.replies.append(
                        (m.sync_reply, SyncGroupResponse(error_code=ErrorCode.NOT_COORDINATOR))
                    )
                    m.sync_reply = None
            group.transition_to(ClassicGroupState.DEAD, now_ms)
            self.timers.cancel_group(group.group_id)

    # ------------------------------------------------------------ observability

    def groups_snapshot(self) -> list[tuple[str, str, int, str, str]]:
        """(group id, state, member count, protocol type, protocol name) of every group."""
        return [
            (
                g.group_id,
                g.state.value,
                len(g.members),
                g.protocol_type or "",
                g.protocol_name or "",
            )
            for g in self.groups.values()
        ]
