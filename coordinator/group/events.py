"""What the group core reports it did: typed events, and the one renderer to a log line.

How this works
--------------
Every entry point of the shard appends events to its ``Result.events``: small frozen
dataclasses that name what happened and carry its facts (group, generation, cause...).
The runtime logs each with ``render`` (the line a human reads) and hands the same objects
to metrics, which read their fields (a rebalance's start and end, expired offsets).
Nothing parses a rendered line back.

Events are rare (rebalances, expirations, loads), never on the heartbeat or commit path,
so they can afford to be dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "REBALANCE_CAUSES",
    "ConsumerGroupEpochBumped",
    "ConsumerMembersFenced",
    "GenerationCompleted",
    "GroupConversionRefused",
    "GroupDeleted",
    "GroupEmptied",
    "GroupEvent",
    "GroupStable",
    "JoinPhaseExtended",
    "MembersRemoved",
    "OffsetsExpired",
    "PartitionLoaded",
    "PendingMemberExpired",
    "RebalanceCause",
    "RebalanceStarted",
    "ShareGroupEpochBumped",
    "ShareMembersFenced",
    "ShareStateInitializing",
    "StaticMemberReplaced",
    "TopicOffsetsDeleted",
    "render",
]

# Why a consumer group's epoch moved, and why members were fenced (metric labels).
BumpKind = Literal["created", "subscription", "metadata", "regex", "assignor"]
FenceKind = Literal["left", "session_timeout", "rebalance_timeout", "join_timeout", "sync_timeout"]

RebalanceCause = Literal[
    "join", "leave", "session_timeout", "metadata_change", "static_replacement", "sync_timeout"
]
REBALANCE_CAUSES: tuple[RebalanceCause, ...] = (
    "join",
    "leave",
    "session_timeout",
    "metadata_change",
    "static_replacement",
    "sync_timeout",
)


@dataclass(frozen=True, slots=True)
class RebalanceStarted:
    """A group entered PreparingRebalance."""

    group_id: str
    generation: int  # the generation being replaced
    cause: RebalanceCause
    reason: str  # what triggered it, for a human


@dataclass(frozen=True, slots=True)
class GenerationCompleted:
    """The join phase ended with members: the group is in CompletingRebalance."""

    group_id: str
    generation: int
    reason: str  # why the rebalance started
    members: int
    protocol: str | None
    leader: str | None


@dataclass(frozen=True, slots=True)
class GroupEmptied:
    """The join phase ended with nobody left: the group is Empty in a new generation."""

    group_id: str
    generation: int
    reason: str


@dataclass(frozen=True, slots=True)
class GroupStable:
    """The leader's assignment was accepted: the group is Stable."""

    group_id: str
    generation: int
    leader: str
    members: int
    unassigned: tuple[str, ...]  # members the leader left out (they get an empty assignment)


@dataclass(frozen=True, slots=True)
class MembersRemoved:
    """Dynamic members that did not rejoin by the end of the join phase were removed."""

    group_id: str
    member_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class JoinPhaseExtended:
    """Only static members that have not rejoined remain: the join phase waits for them."""

    group_id: str


@dataclass(frozen=True, slots=True)
class PendingMemberExpired:
    """A KIP-394 pending member never joined with the id it was given."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class StaticMemberReplaced:
    """A static member rejoined with an unknown member id and took the old one's place."""

    group_id: str
    instance_id: str
    old_member_id: str
    new_member_id: str


@dataclass(frozen=True, slots=True)
class GroupDeleted:
    """DeleteGroups removed the group (its offsets and metadata are tombstoned)."""

    group_id: str


@dataclass(frozen=True, slots=True)
class OffsetsExpired:
    """The retention check removed offsets and deleted the groups left without any."""

    count: int
    groups_deleted: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TopicOffsetsDeleted:
    """A topic was deleted: every group's committed offsets of it were removed."""

    topic: str
    count: int


@dataclass(frozen=True, slots=True)
class PartitionLoaded:
    """An offsets-log partition was replayed; its groups are served."""

    partition: int
    groups: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupEpochBumped:
    """A consumer group's epoch moved: a new target assignment is due."""

    group_id: str
    epoch: int
    cause: str  # which member changed what, for a human
    kind: BumpKind = "subscription"  # for metrics


@dataclass(frozen=True, slots=True)
class ConsumerMembersFenced:
    """Members left or were removed from a consumer group (one epoch bump for all)."""

    group_id: str
    epoch: int
    member_ids: tuple[str, ...]
    reason: str  # "left the group", "session timeout expired", ... for a human
    kind: FenceKind = "left"  # for metrics


@dataclass(frozen=True, slots=True)
class GroupConversionRefused:
    """A group could not change type (classic <-> consumer); the request got an error."""

    group_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class ShareGroupEpochBumped:
    """A share group's epoch moved: a new target assignment is computed."""

    group_id: str
    epoch: int
    cause: str  # for a human


@dataclass(frozen=True, slots=True)
class ShareMembersFenced:
    """A member left a share group or its session expired (one epoch bump)."""

    group_id: str
    epoch: int
    member_ids: tuple[str, ...]
    reason: str
    kind: FenceKind = "left"


@dataclass(frozen=True, slots=True)
class ShareStateInitializing:
    """Share-partitions were recorded as initializing: the runtime asks the share
    coordinator (``SharePersister.initialize``) to create their state, with start offset
    -1, and reports back through ``GroupShard.share_state_initialized``."""

    group_id: str
    state_epoch: int
    topics: tuple[tuple[bytes, str, tuple[int, ...]], ...]  # (topic id, name, partitions)


GroupEvent = (
    RebalanceStarted
    | GenerationCompleted
    | GroupEmptied
    | GroupStable
    | MembersRemoved
    | JoinPhaseExtended
    | PendingMemberExpired
    | StaticMemberReplaced
    | GroupDeleted
    | OffsetsExpired
    | TopicOffsetsDeleted
    | PartitionLoaded
    | ConsumerGroupEpochBumped
    | ConsumerMembersFenced
    | GroupConversionRefused
    | ShareGroupEpochBumped
    | ShareMembersFenced
    | ShareStateInitializing
)


def render(event: GroupEvent) -> str:
    """The log line of an event."""
    match event:
        case RebalanceStarted(gid, generation, cause, reason):
            return (
                f"group {gid} preparing rebalance from generation {generation} ({cause}): {reason}"
            )
        case GenerationCompleted(gid, generation, reason, members, protocol, leader):
            return (
                f"group {gid} generation {generation}: {reason}; "
                f"{members} members, protocol {protocol}, leader {leader}"
            )
        case GroupEmptied(gid, generation, reason):
            return f"group {gid} generation {generation}: {reason}; now empty"
        case GroupStable(gid, generation, leader, members, unassigned):
            note = f"; empty assignment for {', '.join(unassigned)}" if unassigned else ""
            return (
                f"group {gid} generation {generation} stable: "
                f"leader {leader} assigned {members} members{note}"
            )
        case MembersRemoved(gid, member_ids):
            return f"group {gid}: removed dynamic members that did not rejoin: " + ", ".join(
                member_ids
            )
        case JoinPhaseExtended(gid):
            return f"group {gid}: no member rejoined; extending the join phase"
        case PendingMemberExpired(gid, member_id):
            return f"group {gid}: pending member {member_id} never joined; forgotten"
        case StaticMemberReplaced(gid, instance_id, old_id, new_id):
            return f"group {gid}: static member {instance_id} replaced {old_id} with {new_id}"
        case GroupDeleted(gid):
            return f"group {gid} deleted"
        case OffsetsExpired(count, deleted):
            return f"offset expiration: {count} offsets expired, groups deleted: " + (
                ", ".join(deleted) or "none"
            )
        case TopicOffsetsDeleted(topic, count):
            return f"topic {topic} deleted: {count} committed offsets removed"
        case ConsumerGroupEpochBumped(gid, epoch, cause):
            return f"consumer group {gid} epoch {epoch}: {cause}"
        case ConsumerMembersFenced(gid, epoch, member_ids, reason):
            return f"consumer group {gid} epoch {epoch}: {', '.join(member_ids)} {reason}"
        case GroupConversionRefused(gid, reason):
            return f"group {gid}: {reason}"
        case ShareGroupEpochBumped(gid, epoch, cause):
            return f"share group {gid} epoch {epoch}: {cause}"
        case ShareMembersFenced(gid, epoch, member_ids, reason):
            return f"share group {gid} epoch {epoch}: {', '.join(member_ids)} {reason}"
        case ShareStateInitializing(gid, state_epoch, topics):
            parts = ", ".join(f"{name}{list(ps)}" for _, name, ps in topics)
            return f"share group {gid}: initializing share state of {parts} (epoch {state_epoch})"
        case PartitionLoaded(partition, groups):
            return f"offsets partition {partition} loaded: {groups} groups"
