"""In-memory model of one classic group and its members.

How this works
--------------
``ClassicGroup`` holds what Kafka's ``ClassicGroup`` holds: the state and the
time of its last transition, the generation, protocol type and selected
protocol, the leader, the members in join order, the static-member index
(group.instance.id -> member id), KIP-394 pending members (ids handed out
with MEMBER_ID_REQUIRED that have not joined yet) and members that still owe
a SyncGroup.  It also counts, per protocol name, how many members support it,
so "is this protocol supported by every member" is O(1).

A parked JoinGroup/SyncGroup is represented by the runtime's opaque
``reply_to`` handle (plus the request's API version, which shapes the answer)
stored on the member.  ``awaiting_join`` is kept as a counter because the
join phase asks "has everybody rejoined" on every request.

Nothing here schedules timers or writes records; ``ClassicGroupManager`` does that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from coordinator.group.classic.state import ClassicGroupState, check_transition
from coordinator.group.classic.subscription import parse_subscription_topics
from coordinator.group.timers import Timer
from protocol.errors import ErrorCode

__all__ = ["ClassicGroup", "ClassicGroupMember", "Protocol"]

CONSUMER_PROTOCOL_TYPE = "consumer"
_EMPTY = ClassicGroupState.EMPTY
_DEAD = ClassicGroupState.DEAD


def _since_commit(commit_timestamp_ms: int) -> int:
    return commit_timestamp_ms


Protocol = tuple[str, bytes]
"""A (name, metadata) pair from a JoinGroup request, in the member's order of preference."""


@dataclass(slots=True)
class ClassicGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[Protocol]
    assignment: bytes = b""
    # reply_to of a parked JoinGroup / SyncGroup, and the version it was sent with.
    join_reply: int | None = None
    join_version: int = 0
    sync_reply: int | None = None
    sync_version: int = 0
    # True from joining until its first join phase completes: such a member can
    # be expired even while its JoinGroup is parked (new-member join timeout).
    is_new: bool = False
    # Its session timer in the shard's table, kept here so that a heartbeat moves its
    # deadline without a lookup (see ``timers.py`` for when that is allowed).
    session_timer: Timer | None = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_reply is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_reply is not None

    def metadata(self, protocol_name: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol_name:
                return meta
        return b""

    def matches(self, protocols: list[Protocol]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        # A parked join or sync counts as a heartbeat, except for new members.
        if self.is_new:
            return False
        return self.awaiting_join or self.awaiting_sync


@dataclass(slots=True)
class ClassicGroup:
    group_id: str
    state: ClassicGroupState = ClassicGroupState.EMPTY
    previous_state: ClassicGroupState = ClassicGroupState.EMPTY
    state_timestamp_ms: int | None = None
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: dict[str, None] = field(default_factory=dict)
    pending_sync: dict[str, None] = field(default_factory=dict)
    supported_protocols: dict[str, int] = field(default_factory=dict)
    num_awaiting_join: int = 0
    # Initial-rebalance bookkeeping (KIP-134): was a member added since the
    # delay was last armed, and how much of the rebalance timeout is left.
    new_member_added: bool = False
    initial_delay_ms: int = 0
    initial_remaining_ms: int = 0
    subscribed_topics: frozenset[str] | None = None
    # Why the current rebalance started (for events and counters).
    rebalance_reason: str = ""

    # ------------------------------------------------------------ state

    def is_in(self, *states: ClassicGroupState) -> bool:
        return self.state in states

    def transition_to(self, target: ClassicGroupState, now_ms: int) -> None:
        check_transition(self.group_id, self.state, target)
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in ClassicGroupState.PREPARING_REBALANCE.valid_previous

    # ------------------------------------------------------------ members

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode | None:
        """Kafka's ClassicGroup.validateMember: static fencing first, then membership."""
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    # ------------------------------------------------------------ offsets (offsets.OffsetGroup)

    def validate_offset_commit(
        self,
        member_id: str,
        instance_id: str | None,
        generation: int,
        *,
        transactional: bool,
        api_version: int,
        partitions: Iterable[tuple[bytes, int]] | None = None,
    ) -> ErrorCode | None:
        """Kafka's ClassicGroup.validateOffsetCommit (and, transactional, its TxnOffsetCommit).

        ``api_version`` is not consulted: every OffsetCommit version may commit to a classic
        group (only consumer-protocol members are held to v9+). Nor is ``partitions``: a
        classic group's generation must match whatever is committed.
        """
        if self.state is _DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and self.state is _EMPTY:
            return None  # admin client or a consumer without group management
        if generation >= 0 or member_id != "" or instance_id is not None:
            err = self.validate_member(member_id, instance_id)
            if err is not None:
                return err
            if generation != self.generation:
                return ErrorCode.ILLEGAL_GENERATION
        elif not transactional and self.state is not _EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not transactional and self.state is ClassicGroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return None

    def validate_offset_fetch(
        self, member_id: str | None, member_epoch: int, api_version: int
    ) -> ErrorCode | None:
        """Kafka's ClassicGroup.validateOffsetFetch: members are not checked; a Dead group is
        not found (its offsets are not served)."""
        return ErrorCode.GROUP_ID_NOT_FOUND if self.state is _DEAD else None

    def validate_offset_delete(self) -> ErrorCode | None:
        """Kafka's ClassicGroup.validateOffsetDelete: a group with members refuses, unless it
        uses the consumer protocol (subscribed topics are then refused per partition)."""
        if self.state is _DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if self.state is not _EMPTY and not self.uses_consumer_protocol():
            return ErrorCode.NON_EMPTY_GROUP
        return None

    def is_empty(self) -> bool:
        return self.state is _EMPTY

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def is_pending(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def add_pending(self, member_id: str) -> None:
        if member_id in self.members:
            raise ValueError(f"{member_id} is already a member of {self.group_id}")
        self.pending_members[member_id] = None

    def add(self, member: ClassicGroupMember) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise ValueError(f"instance {member.group_instance_id} is already a member")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise ValueError("the group and member's protocol type must be the same")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._count_protocols(member, +1)
        if member.awaiting_join:
            self.num_awaiting_join += 1
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> ClassicGroupMember | None:
        removed = self.members.pop(member_id, None)
        if removed is not None:
            self._count_protocols(removed, -1)
            if removed.awaiting_join:
                self.num_awaiting_join -= 1
            if removed.group_instance_id is not None:
                self.static_members.pop(removed.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.pop(member_id, None)
        return removed

    def update_member(
        self,
        member: ClassicGroupMember,
        protocols: list[Protocol],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join_reply: int | None,
        join_version: int,
    ) -> None:
        self._count_protocols(member, -1)
        member.protocols = protocols
        self._count_protocols(member, +1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        self.set_join_reply(member, join_reply, join_version)

    def set_join_reply(
        self, member: ClassicGroupMember, reply: int | None, version: int = 0
    ) -> None:
        if reply is not None and not member.awaiting_join:
            self.num_awaiting_join += 1
        elif reply is None and member.awaiting_join:
            self.num_awaiting_join -= 1
        member.join_reply = reply
        member.join_version = version

    def replace_static_member(
        self, instance_id: str, old_id: str, new_id: str
    ) -> ClassicGroupMember:
        """Give a static member a new id; its parked requests must be fenced by the caller first."""
        old = self.members[old_id]
        if old.awaiting_join:
            self.num_awaiting_join -= 1
        new = ClassicGroupMember(
            member_id=new_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        # Keep the member's place in join order: leader succession follows it.
        self.members = {
            (new_id if mid == old_id else mid): (new if mid == old_id else m)
            for mid, m in self.members.items()
        }
        if self.is_leader(old_id):
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        self.pending_sync.pop(old_id, None)
        return new

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick the first member that did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join:
            return True
        for m in self.members.values():
            if m.awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ------------------------------------------------------------ protocols

    def _count_protocols(self, member: ClassicGroupMember, delta: int) -> None:
        for name, _ in member.protocols:
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + delta

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.state is ClassicGroupState.EMPTY:
            return protocol_type != "" and len(names) > 0
        n = len(self.members)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols.get(name, 0) == n for name in names
        )

    def select_protocol(self) -> str:
        if not self.members:
            raise ValueError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            name = m.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        # Ties go to the protocol that got its first vote earliest (deterministic).
        return max(votes, key=lambda k: votes[k])

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = parse_subscription_topics(m.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return frozenset(topics)

    def offset_expiration_base(self) -> Callable[[int], int] | None:
        """When retention of an offset committed at a given time starts, or None if none expire.

        Kafka's offsetExpirationCondition (KIP-211): an Empty group's offsets count from
        when it became Empty; a "simple" group's (no protocol type), and a Stable consumer
        group's offsets of topics it no longer subscribes to, from their commit; other
        groups keep their offsets.
        """
        if not self.protocol_type:
            return _since_commit
        if self.state is _EMPTY:
            state_ts = self.state_timestamp_ms
            return _since_commit if state_ts is None else (lambda _commit_ts: state_ts)
        if (
            self.uses_consumer_protocol()
            and self.subscribed_topics is not None
            and self.state is ClassicGroupState.STABLE
        ):
            return _since_commit
        return None

    def is_subscribed_to(self, topic: str) -> bool:
        # When the subscription is unknown, a "consumer" group is assumed to use every topic.
        if self.subscribed_topics is None:
            return self.uses_consumer_protocol()
        return topic in self.subscribed_topics

    def init_next_generation(self, now_ms: int) -> None:
        self.generation += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(ClassicGroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(ClassicGroupState.EMPTY, now_ms)
        self.pending_sync.clear()
