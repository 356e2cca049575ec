"""A streams group and its members, as the records of ``__consumer_offsets`` describe them.

How this works: the state is what replaying the group's records gives (``replay.py``):
the group record (17: group epoch, metadata hash, validated topology epoch, last
assignment configs), the topology (23), the target assignment (20 epoch, 21 per member)
and per member its metadata (19) and current assignment (22: epochs, state, assigned and
pending-revocation tasks). What Kafka keeps only in memory is here too and is rebuilt
lazily after a load: the configured topology (``configure.py``), the metadata refresh flag,
the endpoint information epoch, the member that asked the application to shut down, the
task offsets members reported.

Tasks are kept as subtopology id -> {partition: assignment epoch} for actives (the epoch at
which the member first got the task: offset commits of a member mid-reconciliation are
checked against it) and subtopology id -> partitions for standbys and warm-ups.

States (Kafka's ``StreamsGroupState``), evaluated after every change in this order:

* ``Empty``: no members.
* ``NotReady``: no topology, or its epoch is not the validated one (missing source or
  internal topics, wrong partition counts): every member's target is empty.
* ``Assigning``: the group epoch is ahead of the target assignment epoch (also during the
  initial rebalance delay).
* ``Reconciling``: some member is not STABLE at the assignment epoch.
* ``Stable``: everyone owns its target.

Member states: STABLE=1, UNREVOKED_TASKS=2 (must report tasks revoked before it moves on),
UNRELEASED_TASKS=3 (waits for tasks another member still holds); any other byte read from
a record is UNKNOWN=127 (the member is fenced on its next heartbeat).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from coordinator.group.streams.configure import ConfiguredTopology
from coordinator.group.streams.topology import StreamsTopology
from coordinator.group.topics import TopicsImage
from protocol.errors import ErrorCode

__all__ = [
    "ASSIGNING",
    "EMPTY",
    "NOT_READY",
    "RECONCILING",
    "STABLE",
    "Active",
    "MemberState",
    "StreamsGroup",
    "StreamsGroupMember",
    "StreamsGroupState",
    "Tasks",
    "TasksTuple",
]

Tasks = dict[str, frozenset[int]]
"""Subtopology id -> partitions (standby and warm-up tasks, targets)."""
Active = dict[str, dict[int, int]]
"""Subtopology id -> {partition: assignment epoch} (a member's active tasks)."""


class StreamsGroupState(Enum):
    EMPTY = "Empty"
    NOT_READY = "NotReady"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def lower(self) -> str:
        """The form ListGroups filters on and metrics use: ``not_ready``..."""
        return {"NotReady": "not_ready"}.get(self.value, self.value.lower())


EMPTY = StreamsGroupState.EMPTY
NOT_READY = StreamsGroupState.NOT_READY
ASSIGNING = StreamsGroupState.ASSIGNING
RECONCILING = StreamsGroupState.RECONCILING
STABLE = StreamsGroupState.STABLE


class MemberState:
    STABLE = 1
    UNREVOKED_TASKS = 2
    UNRELEASED_TASKS = 3
    UNKNOWN = 127

    @staticmethod
    def of(value: int) -> int:
        return value if value in (1, 2, 3) else MemberState.UNKNOWN

    NAMES = {1: "STABLE", 2: "UNREVOKED_TASKS", 3: "UNRELEASED_TASKS", 127: "UNKNOWN"}


@dataclass(frozen=True, slots=True)
class TasksTuple:
    """A target assignment: active, standby and warm-up tasks."""

    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.active or self.standby or self.warmup)


EMPTY_TASKS = TasksTuple()


@dataclass(slots=True)
class StreamsGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    topology_epoch: int = -1
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: dict[str, str] = field(default_factory=dict)
    active: Active = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)
    pending_active: Active = field(default_factory=dict)
    pending_standby: Tasks = field(default_factory=dict)
    pending_warmup: Tasks = field(default_factory=dict)

    def metadata(self) -> tuple[object, ...]:
        """What the member-metadata record (19) holds: a change writes one and bumps the epoch."""
        return (
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.rebalance_timeout_ms,
            self.topology_epoch,
            self.process_id,
            self.user_endpoint,
            tuple(sorted(self.client_tags.items())),
        )

    def assignment(self) -> tuple[object, ...]:
        """What the current-assignment record (22) holds."""
        return (
            self.member_epoch,
            self.previous_member_epoch,
            self.state,
            self.active,
            self.standby,
            self.warmup,
            self.pending_active,
            self.pending_standby,
            self.pending_warmup,
        )

    def assigned_tasks(self) -> tuple[Tasks, Tasks, Tasks]:
        return (
            {s: frozenset(ps) for s, ps in self.active.items()},
            self.standby,
            self.warmup,
        )

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == MemberState.STABLE and self.member_epoch == epoch


def _since_commit(commit_timestamp_ms: int) -> int:
    return commit_timestamp_ms


class StreamsGroup:
    def __init__(self, group_id: str, topics: TopicsImage | None = None) -> None:
        self.group_id = group_id
        # Names the topic ids of OffsetCommit v10 (an older member epoch is checked per task).
        self.topics = topics
        # New groups start at epoch 1 with a target at epoch 1 (Kafka 4.3+): the first
        # bump writes epoch 2.
        self.group_epoch = 1
        self.metadata_hash = 0
        self.validated_topology_epoch = -1
        self.last_assignment_configs: dict[str, str] = {}
        self.assignment_epoch = 1
        self.assignment_timestamp_ms = 0
        self.topology: StreamsTopology | None = None
        self.members: dict[str, StreamsGroupMember] = {}
        self.targets: dict[str, TasksTuple] = {}
        # Memory only, as in Kafka.
        self.configured_topology: ConfiguredTopology | None = None
        self.metadata_refresh = True
        self.endpoint_information_epoch = 0
        self.shutdown_requester: str | None = None
        # (old, new) member id while a heartbeat replaces a static member (not yet applied).
        self.relabelled: tuple[str, str] | None = None
        self.task_offsets: dict[str, dict[tuple[str, int], int]] = {}
        self.task_end_offsets: dict[str, dict[tuple[str, int], int]] = {}
        # Which process holds each task (from every member's assigned and pending tasks).
        self.active_owner: dict[tuple[str, int], str] = {}
        self.standby_owners: dict[tuple[str, int], set[str]] = {}
        self.warmup_owners: dict[tuple[str, int], set[str]] = {}

    # ------------------------------------------------------------ state

    @property
    def state(self) -> StreamsGroupState:
        if not self.members:
            return EMPTY
        if self.topology is None or self.topology.epoch != self.validated_topology_epoch:
            return NOT_READY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        for m in self.members.values():
            if not m.is_reconciled_to(self.assignment_epoch):
                return RECONCILING
        return STABLE

    def is_empty(self) -> bool:
        return not self.members

    def static_member(self, instance_id: str) -> StreamsGroupMember | None:
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    def subscribed_topics(self) -> set[str]:
        """Source and repartition-source topics: offsets of these are the group's own."""
        if self.topology is None:
            return set()
        return set(self.topology.source_topic_map)

    # ------------------------------------------------------------ task ownership

    def index_member(self, old: StreamsGroupMember | None, new: StreamsGroupMember | None) -> None:
        """Keep the task -> process indexes in step with one member's change."""
        if old is not None:
            pid = old.process_id
            for tasks in (old.active, old.pending_active):
                for s, parts in tasks.items():
                    for p in parts:
                        if self.active_owner.get((s, p)) == pid:
                            del self.active_owner[(s, p)]
            for index, roles in (
                (self.standby_owners, (old.standby, old.pending_standby)),
                (self.warmup_owners, (old.warmup, old.pending_warmup)),
            ):
                for role in roles:
                    for s, ps in role.items():
                        for p in ps:
                            owners = index.get((s, p))
                            if owners is not None:
                                owners.discard(pid)
                                if not owners:
                                    del index[(s, p)]
        if new is not None:
            pid = new.process_id
            for tasks in (new.active, new.pending_active):
                for s, parts in tasks.items():
                    for p in parts:
                        self.active_owner[(s, p)] = pid
            for index, roles in (
                (self.standby_owners, (new.standby, new.pending_standby)),
                (self.warmup_owners, (new.warmup, new.pending_warmup)),
            ):
                for role in roles:
                    for s, ps in role.items():
                        for p in ps:
                            index.setdefault((s, p), set()).add(pid)

    def put_member(self, member: StreamsGroupMember) -> None:
        old = self.members.get(member.member_id)
        self.index_member(old, member)
        self.members[member.member_id] = member

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        self.index_member(old, None)
        self.task_offsets.pop(member_id, None)
        self.task_end_offsets.pop(member_id, None)
        if not self.members:
            self.shutdown_requester = None

    # ------------------------------------------------------------ offsets (OffsetGroup)

    def validate_offset_commit(
        self,
        member_id: str,
        instance_id: str | None,
        generation_or_epoch: int,
        /,
        *,
        transactional: bool,
        api_version: int,
        partitions: Iterable[tuple[bytes, int]] | None = None,
    ) -> ErrorCode | None:
        """Kafka's StreamsGroup.validateOffsetCommit: an older epoch commits only tasks the
        member was given at that epoch or before and still runs (KAFKA-19779)."""
        if generation_or_epoch < 0 and not self.members:
            return None
        if transactional and member_id == "" and generation_or_epoch == -1 and instance_id is None:
            return None
        m = self.members.get(member_id)
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not transactional and api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        e = generation_or_epoch
        if e == m.member_epoch:
            return None
        stale = ErrorCode.STALE_MEMBER_EPOCH
        if e > m.member_epoch or partitions is None or self.topology is None:
            return stale
        by_topic = self.topology.source_topic_map
        for topic_id, partition in partitions:
            t = self.topics.topic_by_id(topic_id) if self.topics is not None else None
            sub = by_topic.get(t.name) if t is not None else None
            if sub is None:
                return stale
            sid = sub.subtopology_id
            epoch = m.active.get(sid, {}).get(partition)
            if epoch is None:
                epoch = m.pending_active.get(sid, {}).get(partition)
            if epoch is None or e < epoch:
                return stale
        return None

    def validate_offset_fetch(
        self, member_id: str | None, member_epoch: int, api_version: int, /
    ) -> ErrorCode | None:
        if member_id is None and member_epoch < 0:
            return None
        m = self.members.get(member_id or "")
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != m.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return None

    def validate_offset_delete(self) -> ErrorCode | None:
        return None  # the topics in use are refused per partition (is_subscribed_to)

    def is_subscribed_to(self, topic: str, /) -> bool:
        return (
            bool(self.members)
            and self.topology is not None
            and (topic in self.topology.source_topic_map)
        )

    def offset_expiration_base(self) -> Callable[[int], int] | None:
        return _since_commit
