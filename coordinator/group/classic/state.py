"""States of a classic consumer group and the transitions allowed between them.

How this works
--------------
``ClassicGroupState`` mirrors Kafka's ``ClassicGroupState``: its values are the
strings Kafka reports in DescribeGroups/ListGroups.  Each state knows which
states it may be entered from (``valid_previous``); ``check_transition``
raises ``IllegalStateTransition`` for anything else, so a bug in the
coordinator shows up as an exception instead of a silently corrupt group.

The doc comment of each state lists what the coordinator does with each
request while the group is in it (action:) and where the group goes next
(transition:).
"""

from __future__ import annotations

from enum import Enum

__all__ = ["ClassicGroupState", "IllegalStateTransition", "check_transition"]


class IllegalStateTransition(RuntimeError):
    """A transition that Kafka's state machine forbids was attempted."""


class ClassicGroupState(Enum):
    """A classic group's state; each member's value is the name Kafka reports."""

    _value_: str

    def __new__(cls, value: str, doc: str) -> ClassicGroupState:
        # The per-state doc comment becomes the member's __doc__, so it can be
        # shown by tools (and checked by tests), like ClassicGroupState's javadoc.
        member = object.__new__(cls)
        member._value_ = value
        member.__doc__ = doc
        return member

    EMPTY = (
        "Empty",
        """Group has no members, but lingers until all its offsets have expired.
    Also the state of "simple" groups that only commit offsets.

    action: respond normally to JoinGroup from new members
            respond to SyncGroup with UNKNOWN_MEMBER_ID
            respond to Heartbeat with UNKNOWN_MEMBER_ID
            respond to LeaveGroup with UNKNOWN_MEMBER_ID
            respond to OffsetCommit with UNKNOWN_MEMBER_ID unless generation -1 and no member id
            allow OffsetFetch, OffsetDelete and DeleteGroups
    transition: JoinGroup from a new member => PREPARING_REBALANCE
                last offsets removed by the expiration task => DEAD
                group deleted (DeleteGroups) => DEAD
    """,
    )

    PREPARING_REBALANCE = (
        "PreparingRebalance",
        """Group is collecting JoinGroups for the next generation.

    action: respond to Heartbeat with REBALANCE_IN_PROGRESS (still resets the session timer)
            respond to SyncGroup with REBALANCE_IN_PROGRESS
            remove member on LeaveGroup
            park JoinGroup from new or existing members until all expected members joined
            allow OffsetCommit from members of the previous generation
            allow OffsetFetch
    transition: some members joined by the deadline => COMPLETING_REBALANCE
                all members left or timed out => EMPTY
                group unloaded => DEAD
    """,
    )

    COMPLETING_REBALANCE = (
        "CompletingRebalance",
        """Group is waiting for the leader's assignment.

    action: respond to Heartbeat normally (NONE)
            respond to OffsetCommit with REBALANCE_IN_PROGRESS
            park SyncGroup from followers until the leader's assignment is persisted
            answer a rejoin with unchanged metadata with the current generation
            allow OffsetFetch
    transition: SyncGroup with the assignment from the leader => STABLE
                JoinGroup from a new member or with changed metadata => PREPARING_REBALANCE
                static member replaced => PREPARING_REBALANCE
                LeaveGroup from an existing member => PREPARING_REBALANCE
                member session expired / members that never synced => PREPARING_REBALANCE
                group unloaded => DEAD
    """,
    )

    STABLE = (
        "Stable",
        """Group has a generation and every member has its assignment.

    action: respond to Heartbeat normally
            respond to SyncGroup from any member with its current assignment
            answer JoinGroup from followers with unchanged metadata with the current generation
            replace a static member rejoining with an unknown member id without rebalancing
            allow OffsetCommit from members of the current generation
            allow OffsetFetch
    transition: member session expired => PREPARING_REBALANCE
                LeaveGroup from an existing member => PREPARING_REBALANCE
                JoinGroup from the leader => PREPARING_REBALANCE
                JoinGroup from a follower with changed metadata => PREPARING_REBALANCE
                JoinGroup from a new member => PREPARING_REBALANCE
                group unloaded => DEAD
    """,
    )

    DEAD = (
        "Dead",
        """Group has no members and its metadata is being removed.

    action: respond to JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit with
            COORDINATOR_NOT_AVAILABLE (the client rediscovers its coordinator)
            answer OffsetFetch as if the group had no offsets
    transition: none, Dead is final
    """,
    )

    @property
    def valid_previous(self) -> frozenset[ClassicGroupState]:
        return _VALID_PREVIOUS[self]

    def __str__(self) -> str:
        return self._value_


_VALID_PREVIOUS: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    ClassicGroupState.EMPTY: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.PREPARING_REBALANCE: frozenset(
        {ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE, ClassicGroupState.EMPTY}
    ),
    ClassicGroupState.COMPLETING_REBALANCE: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.STABLE: frozenset({ClassicGroupState.COMPLETING_REBALANCE}),
    ClassicGroupState.DEAD: frozenset(ClassicGroupState),
}


def check_transition(group_id: str, current: ClassicGroupState, target: ClassicGroupState) -> None:
    if current not in target.valid_previous:
        allowed = ", ".join(sorted(s.value for s in target.valid_previous))
        raise IllegalStateTransition(
            f"group {group_id}: cannot move from {current.value} to {target.value} "
            f"(allowed from: {allowed})"
        )
