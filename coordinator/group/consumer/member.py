"""A member of a consumer group (KIP-848) and the states its reconciliation goes through.

How this works: a member holds what it subscribes to (topic names and/or one regular
expression), its epoch, and two sets of partitions -- ``assigned`` (what it may own now) and
``pending_revocation`` (what it was asked to give up and still owns). Its target lives in
the group (``ConsumerGroup.target``); ``reconcile.py`` moves it from what it owns towards
that target. Members are replaced, never changed in place, once they belong to a group: the
heartbeat builds the updated member, compares it with the old one to know which records to
write, and the records' replay installs it (as Kafka's coordinator does).

Each partition the member holds (assigned or pending revocation) also has an *assignment
epoch* (``assignment_epochs``, Kafka 4.3+, KIP-1251): the epoch at which it was assigned to
the member. Reconciliation gives partitions new to the member the target epoch and leaves
the others' as they were; an OffsetCommit with a member epoch older than the member's is
accepted for a partition assigned at that epoch or before (``ConsumerGroup.
validate_offset_commit``). It is kept in the current-assignment record (type 8).

MemberState, as Kafka's ``MemberState`` (stored as an int8 in the current-assignment record):

* STABLE (0): owns exactly what it may own at its epoch.
* UNREVOKED_PARTITIONS (1): must give up ``pending_revocation`` first; stays at its old epoch.
* UNRELEASED_PARTITIONS (2): at the target epoch, but some target partitions are still
  owned by other members; it gets them once they are released.
* UNKNOWN (127): a state byte this version does not know (read from the log).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum

from storage.records import ClassicMemberMetadata

__all__ = [
    "EMPTY",
    "Assignment",
    "AssignmentEpochs",
    "ConsumerGroupMember",
    "MemberState",
    "freeze",
]

Assignment = Mapping[bytes, frozenset[int]]
"""Partitions per topic id; a topic with no partition is left out."""

AssignmentEpochs = Mapping[bytes, Mapping[int, int]]
"""topic id -> partition -> the epoch at which the partition was assigned to the member."""

EMPTY: Assignment = {}


def freeze(
    parts: Mapping[bytes, frozenset[int]] | Mapping[bytes, set[int]],
) -> dict[bytes, frozenset[int]]:
    """A canonical assignment: frozensets, no empty topic."""
    return {t: frozenset(p) for t, p in parts.items() if p}


class MemberState(IntEnum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN

    @property
    def kafka_name(self) -> str:
        return self.name  # Kafka renders them as the enum names


class ConsumerGroupMember:
    __slots__ = (
        "assigned",
        "assignment_epochs",
        "classic_member_metadata",
        "client_host",
        "client_id",
        "instance_id",
        "member_epoch",
        "member_id",
        "pending_revocation",
        "previous_member_epoch",
        "rack_id",
        "rebalance_timeout_ms",
        "server_assignor",
        "state",
        "subscribed_topic_names",
        "subscribed_topic_regex",
    )

    def __init__(self, member_id: str) -> None:
        # Kafka's ConsumerGroupMember.Builder defaults for a new member.
        self.member_id = member_id
        self.member_epoch = 0
        self.previous_member_epoch = -1
        self.state = MemberState.STABLE
        self.instance_id: str | None = None
        self.rack_id: str | None = None
        self.rebalance_timeout_ms = -1
        self.client_id = ""
        self.client_host = ""
        self.subscribed_topic_names: frozenset[str] = frozenset()
        self.subscribed_topic_regex = ""  # "" = none
        self.server_assignor: str | None = None
        self.assigned: Assignment = EMPTY
        self.pending_revocation: Assignment = EMPTY
        # Of the partitions in ``assigned`` and ``pending_revocation`` (see epoch_of).
        self.assignment_epochs: AssignmentEpochs = {}
        self.classic_member_metadata: ClassicMemberMetadata | None = None

    def copy(self, member_id: str | None = None) -> ConsumerGroupMember:
        m = ConsumerGroupMember.__new__(ConsumerGroupMember)
        for name in ConsumerGroupMember.__slots__:
            setattr(m, name, getattr(self, name))
        if member_id is not None:
            m.member_id = member_id
        return m

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic_member_metadata is not None

    def same_subscription(self, other: ConsumerGroupMember) -> bool:
        """Whether the fields of the member-metadata record (type 5) are equal."""
        return (
            self.instance_id == other.instance_id
            and self.rack_id == other.rack_id
            and self.client_id == other.client_id
            and self.client_host == other.client_host
            and self.subscribed_topic_names == other.subscribed_topic_names
            and self.subscribed_topic_regex == other.subscribed_topic_regex
            and self.rebalance_timeout_ms == other.rebalance_timeout_ms
            and self.server_assignor == other.server_assignor
            and self.classic_member_metadata == other.classic_member_metadata
        )

    def same_assignment(self, other: ConsumerGroupMember) -> bool:
        """Whether the fields of the current-assignment record (type 8) are equal."""
        return (
            self.member_epoch == other.member_epoch
            and self.previous_member_epoch == other.previous_member_epoch
            and self.state == other.state
            and self.assigned == other.assigned
            and self.pending_revocation == other.pending_revocation
            and (
                self.assignment_epochs is other.assignment_epochs
                or self.held_epochs() == other.held_epochs()
            )
        )

    def epoch_of(self, topic_id: bytes, partition: int) -> int | None:
        """The epoch at which a partition the member holds was assigned to it; None if it
        holds it neither assigned nor pending revocation.

        A partition without a recorded epoch (a current-assignment record of Kafka 4.2 or
        before; a member converted from a classic group) has the member's epoch, as Kafka's
        replay gives it (``Utils.assignmentFromTopicPartitions``: max(member epoch, 0)).
        """
        held = self.assigned.get(topic_id)
        if held is None or partition not in held:
            held = self.pending_revocation.get(topic_id)
            if held is None or partition not in held:
                return None
        epochs = self.assignment_epochs.get(topic_id)
        if epochs is not None:
            epoch = epochs.get(partition)
            if epoch is not None:
                return epoch
        return max(self.member_epoch, 0)

    def held_epochs(self) -> dict[bytes, dict[int, int]]:
        """The assignment epoch of every partition held (assigned or pending revocation)."""
        out: dict[bytes, dict[int, int]] = {}
        for parts in (self.assigned, self.pending_revocation):
            for topic_id, ps in parts.items():
                epochs = out.setdefault(topic_id, {})
                for p in ps:
                    e = self.epoch_of(topic_id, p)
                    assert e is not None
                    epochs[p] = e
        return out

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def __repr__(self) -> str:
        return (
            f"ConsumerGroupMember({self.member_id!r}, epoch={self.member_epoch}, "
            f"prev={self.previous_member_epoch}, state={self.state.name}, "
            f"assigned={dict(self.assigned)!r}, pending={dict(self.pending_revocation)!r})"
        )
