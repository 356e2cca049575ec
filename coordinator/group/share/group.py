"""A share group (KIP-932) and its members: what replaying the group's records builds.

How this works
--------------
A share group is a KIP-848 style group without revocation: each member has an epoch, a
subscription by topic names and the partitions it is assigned; the group has an epoch, the
hash of its subscribed topics' metadata, a target assignment at an assignment epoch, and
the *state-partition metadata*: which share-partitions' durable state (kept by the share
coordinator) is initialized, being initialized or being deleted. Only initialized
partitions are ever assigned. Members and the group are changed only by applying records
(``replay.py``), the heartbeat's and the log's alike.

``ShareGroupState`` mirrors Kafka's ``ShareGroup.ShareGroupState``: its values are the
strings Kafka reports (ListGroups, ShareGroupDescribe).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from coordinator.group.consumer.member import Assignment, freeze
from coordinator.group.timers import Timer

__all__ = ["Assignment", "ShareGroup", "ShareGroupState", "ShareMember", "TopicInit", "freeze"]


class ShareGroupState(Enum):
    """A share group's state; each member's value is the name Kafka reports."""

    _value_: str

    def __new__(cls, value: str, doc: str) -> ShareGroupState:
        member = object.__new__(cls)
        member._value_ = value
        member.__doc__ = doc
        return member

    EMPTY = (
        "Empty",
        """The group has no member (it may hold initialized share-partition state).

    action: a ShareGroupHeartbeat with epoch 0 joins it; DeleteGroups deletes it (its
            share-partition state first); AlterShareGroupOffsets and
            DeleteShareGroupOffsets are allowed
    transition: a member joins => STABLE; DeleteGroups => gone
    """,
    )

    STABLE = (
        "Stable",
        """The group has at least one member.

    action: heartbeats reconcile members straight to the target (no revocation step);
            DeleteGroups and the offsets admin APIs answer NON_EMPTY_GROUP
    transition: the last member leaves or its session expires => EMPTY
    """,
    )

    DEAD = (
        "Dead",
        """Kafka's terminal state, never entered by a live group (reported for another
    group type's id by DescribeGroups).""",
    )


@dataclass(slots=True)
class ShareMember:
    """A share group member as its records describe it (replaced, never changed in place)."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = 0  # Kafka's MemberState: share members are always STABLE (0)
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    assigned: Assignment = field(default_factory=dict)

    def copy(self) -> ShareMember:
        return replace(self)


@dataclass(slots=True)
class TopicInit:
    """One topic of the state-partition metadata: its name and partitions."""

    name: str
    partitions: frozenset[int]


class ShareGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        # As consumer groups in Kafka 4.3+, a group is born at epoch 1: its first member's
        # subscription moves it to 2.
        self.group_epoch = 1
        self.assignment_epoch = 1
        self.metadata_hash = 0
        self.members: dict[str, ShareMember] = {}
        self.target: dict[str, Assignment] = {}
        self.names_count: dict[str, int] = {}  # topic name -> members subscribing to it
        # State-partition metadata (record type 15), by topic id.
        self.initializing: dict[bytes, TopicInit] = {}
        self.initialized: dict[bytes, TopicInit] = {}
        self.deleting: dict[bytes, str] = {}
        # Soft state: when each initializing topic was last asked to initialize (ms), so a
        # heartbeat retries after group.share.initialize.retry.interval.ms. A replayed
        # entry counts from the load.
        self.initializing_since: dict[bytes, int] = {}
        # Soft state: when the subscribed topics' metadata must be looked at again
        # (0 after a load: the first heartbeat recomputes the hash).
        self.metadata_refresh_deadline_ms = 0
        self.session_timers: dict[str, Timer] = {}

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topic_names(self) -> set[str]:
        return set(self.names_count)

    def request_metadata_refresh(self) -> None:
        self.metadata_refresh_deadline_ms = 0

    def has_no_records(self) -> bool:
        """Nothing of the group is left (every record tombstoned)."""
        return not self.members and not self.target and not self.initialized

    # ------------------------------------------------------------ replay

    def replay_member(self, m: ShareMember | None, member_id: str) -> None:
        old = self.members.get(member_id)
        if old is not None:
            for name in old.subscribed_topic_names:
                n = self.names_count.get(name, 0) - 1
                if n > 0:
                    self.names_count[name] = n
                else:
                    self.names_count.pop(name, None)
        if m is None:
            self.members.pop(member_id, None)
            return
        self.members[member_id] = m
        for name in m.subscribed_topic_names:
            self.names_count[name] = self.names_count.get(name, 0) + 1
