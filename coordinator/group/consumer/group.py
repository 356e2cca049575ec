"""A consumer group (KIP-848): its epochs, members, target assignment and the indexes over them.

How this works: the group holds

* ``group_epoch``: bumped whenever the group's membership or subscriptions change what the
  assignment should be; ``assignment_epoch``: the group epoch the stored target was computed
  for. The target is recomputed lazily, by the next heartbeat that finds
  ``group_epoch > assignment_epoch``. A new group starts at 1 for both, with no record
  (Kafka 4.3+'s ModernGroup and TargetAssignmentMetadata.INITIAL): its first member that
  subscribes to topics bumps it to 2, one that subscribes to nothing joins at 1;
* ``members`` and ``static_members`` (instance id -> member id);
* ``target`` (member -> partitions) and its inverse ``target_owner``;
* ``partition_epochs``: topic -> partition -> epoch of the member that owns it now (assigned
  or pending revocation). A partition is *free* only when absent: that is how a partition
  reaches its new owner only after the old one released it;
* counters the heartbeat reads on every change: subscribers per topic name, per regular
  expression, per server assignor, and the resolved regular expressions.

Everything here changes only through the ``replay_*`` methods, one per record type, called
both when a record is written and when the log is replayed at start: the state a restarted
coordinator rebuilds is the state it had. Soft state (timers, the metadata refresh
deadline) is not persisted.

The group's state, derived as Kafka's ``ConsumerGroup.maybeUpdateGroupState`` does:

* Empty: no members.
* Assigning: ``group_epoch > assignment_epoch`` -- a new target is due.
* Reconciling: some member is not STABLE at the assignment epoch.
* Stable: every member owns exactly its target.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from coordinator.group.consumer.assignors.spec import SubscriptionType
from coordinator.group.consumer.member import (
    Assignment,
    AssignmentEpochs,
    ConsumerGroupMember,
    MemberState,
)
from coordinator.group.consumer.spec_cache import SpecCache
from coordinator.group.timers import Timer
from protocol.errors import ErrorCode
from protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatResponse

__all__ = [
    "ConsumerGroup",
    "ConsumerGroupState",
    "ResolvedRegex",
    "count_subscription",
    "preferred_assignor",
    "uncount_subscription",
]

MAX_INT = 2**31 - 1


def _since_commit(commit_timestamp_ms: int) -> int:
    return commit_timestamp_ms


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"  # never set on a live group (Kafka's enum has it)


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    topics: frozenset[str]
    version: int  # the topics-image version it was resolved against
    timestamp_ms: int


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        # Kafka 4.3+: a group is born at epoch 1 (it was 0 before, and its first heartbeat
        # always bumped it); a replayed group without a metadata record is at 1 too.
        self.group_epoch = 1
        self.assignment_epoch = 1
        self.metadata_hash = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}
        self.target: dict[str, Assignment] = {}
        self.target_owner: dict[bytes, dict[int, str]] = {}
        self.partition_epochs: dict[bytes, dict[int, int]] = {}
        self.names_count: dict[str, int] = {}  # topic name -> members naming it
        self.regex_count: dict[str, int] = {}  # regex -> members subscribed to it
        self.resolved_regexes: dict[str, ResolvedRegex] = {}
        self.assignor_count: dict[str, int] = {}
        self.classic_members = 0
        # A legacy ConsumerGroupPartitionMetadata record (Kafka 4.0) was replayed: the next
        # heartbeat that refreshes the metadata tombstones it.
        self.has_legacy_partition_metadata = False
        # Soft state: when the subscribed topics' metadata must be looked at again.
        # 0 after a load: the first heartbeat recomputes the hash.
        self.metadata_refresh_deadline_ms = 0
        self.metadata_refresh_epoch = -1
        # Soft state: each consumer-protocol member's session timer, moved in place by the
        # heartbeats that change nothing (see ConsumerGroupManager._steady_heartbeat).
        self.session_timers: dict[str, Timer] = {}
        # Soft state: the answer a steady heartbeat of each member gets (reused while its
        # epoch stays, so the server encodes it once).
        self.steady_responses: dict[str, ConsumerGroupHeartbeatResponse] = {}
        # Soft state: member specs of the last target computation (consumer/spec_cache.py).
        self.spec_cache = SpecCache()

    # ------------------------------------------------------------ derived

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        epoch = self.assignment_epoch
        for m in self.members.values():
            if m.state is not MemberState.STABLE or m.member_epoch != epoch:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topic_names(self) -> set[str]:
        """Every topic a member subscribes to, by name or through a resolved regex."""
        names = set(self.names_count)
        for regex in self.regex_count:
            resolved = self.resolved_regexes.get(regex)
            if resolved is not None:
                names |= resolved.topics
        return names

    def member_topics(self, m: ConsumerGroupMember) -> frozenset[str]:
        if not m.subscribed_topic_regex:
            return m.subscribed_topic_names
        resolved = self.resolved_regexes.get(m.subscribed_topic_regex)
        if resolved is None:
            return m.subscribed_topic_names
        return m.subscribed_topic_names | resolved.topics

    def subscription_type(
        self, names_count: dict[str, int], regex_count: dict[str, int], members: int
    ) -> SubscriptionType:
        """Kafka's ``ConsumerGroup.subscriptionType`` over (would-be) counters."""
        if not regex_count:
            if all(c == members for c in names_count.values()):
                return SubscriptionType.HOMOGENEOUS
            return SubscriptionType.HETEROGENEOUS
        first_regex, subscribers = next(iter(regex_count.items()))
        if subscribers != members or names_count:
            return SubscriptionType.HETEROGENEOUS
        seen: dict[str, int] = {}
        for regex in regex_count:
            resolved = self.resolved_regexes.get(regex)
            if resolved is None:
                continue
            for t in resolved.topics:
                seen[t] = seen.get(t, 0) + 1
        if len(regex_count) == 1 and all(c == 1 for c in seen.values()):
            return SubscriptionType.HOMOGENEOUS
        del first_regex
        return SubscriptionType.HETEROGENEOUS

    def preferred_assignor(self, default: str) -> str:
        return preferred_assignor(self.assignor_count, default)

    def current_partition_epoch(self, topic_id: bytes, partition: int) -> int:
        owners = self.partition_epochs.get(topic_id)
        if owners is None:
            return -1
        return owners.get(partition, -1)

    def has_metadata_expired(self, now_ms: int) -> bool:
        return (
            now_ms >= self.metadata_refresh_deadline_ms
            or self.group_epoch < self.metadata_refresh_epoch
        )

    def request_metadata_refresh(self) -> None:
        self.metadata_refresh_deadline_ms = 0

    def set_metadata_refresh_deadline(self, now_ms: int, epoch: int) -> None:
        self.metadata_refresh_deadline_ms = now_ms + MAX_INT
        self.metadata_refresh_epoch = epoch

    def member_by_instance(self, instance_id: str) -> ConsumerGroupMember | None:
        mid = self.static_members.get(instance_id)
        return self.members.get(mid) if mid is not None else None

    # ------------------------------------------------------------ offsets (OffsetGroup)
    # Kafka's ConsumerGroup.validateOffsetCommit / validateOffsetFetch /
    # validateOffsetDelete / offsetExpirationCondition (see coordinator/group/offsets/group.py).

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
        if generation_or_epoch < 0 and not self.members:
            return None  # an admin client or a consumer committing without the group
        if transactional and member_id == "" and generation_or_epoch == -1 and instance_id is None:
            return None
        m = self.members.get(member_id)
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        classic = m.classic_member_metadata is not None
        if not transactional and not classic and api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        if generation_or_epoch == m.member_epoch:
            return None
        stale = ErrorCode.ILLEGAL_GENERATION if classic else ErrorCode.STALE_MEMBER_EPOCH
        if generation_or_epoch > m.member_epoch or partitions is None:
            return stale
        # KIP-1251 (Kafka 4.3+): an older epoch commits partitions the member was assigned
        # at that epoch or before and still holds (assigned or pending revocation) -- a
        # commit sent before the member learnt its new epoch. Any other partition fails the
        # whole request (Kafka's validator throws).
        for topic_id, partition in partitions:
            epoch = m.epoch_of(topic_id, partition)
            if epoch is None or generation_or_epoch < epoch:
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
            if m.classic_member_metadata is not None:
                return ErrorCode.ILLEGAL_GENERATION
            return ErrorCode.STALE_MEMBER_EPOCH
        return None

    def validate_offset_delete(self) -> ErrorCode | None:
        return None  # subscribed topics are refused per partition (is_subscribed_to)

    def is_subscribed_to(self, topic: str, /) -> bool:
        if topic in self.names_count:
            return True
        for regex in self.regex_count:
            resolved = self.resolved_regexes.get(regex)
            if resolved is not None and topic in resolved.topics:
                return True
        return False

    def offset_expiration_base(self) -> Callable[[int], int] | None:
        return _since_commit  # whatever the state; subscribed topics are kept

    # ------------------------------------------------------------ replay (record appliers)

    def replay_metadata(self, epoch: int, metadata_hash: int) -> None:
        self.group_epoch = epoch
        self.metadata_hash = metadata_hash

    def replay_target_metadata(self, assignment_epoch: int | None) -> None:
        self.assignment_epoch = -1 if assignment_epoch is None else assignment_epoch

    def replay_member_subscription(self, m: ConsumerGroupMember) -> None:
        """Install ``m``'s subscription fields (type 5), keeping its assignment fields."""
        old = self.members.get(m.member_id)
        if old is not None:
            self._uncount(old)
            m.member_epoch = old.member_epoch
            m.previous_member_epoch = old.previous_member_epoch
            m.state = old.state
            m.assigned = old.assigned
            m.pending_revocation = old.pending_revocation
            m.assignment_epochs = old.assignment_epochs
            iid = old.instance_id
            if (
                iid is not None
                and iid != m.instance_id
                and self.static_members.get(iid) == m.member_id
            ):
                del self.static_members[iid]
        self.members[m.member_id] = m
        if m.instance_id is not None:
            self.static_members[m.instance_id] = m.member_id
        self._count(m)

    def replay_member_removed(self, member_id: str) -> None:
        """A member-metadata tombstone (type 5)."""
        old = self.members.pop(member_id, None)
        if old is None:
            return
        self._uncount(old)
        self._remove_partition_epochs(old)
        if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]

    def replay_current_assignment(
        self,
        member_id: str,
        member_epoch: int,
        previous_member_epoch: int,
        state: MemberState,
        assigned: Assignment,
        pending_revocation: Assignment,
        assignment_epochs: AssignmentEpochs | None = None,
    ) -> None:
        """A current-assignment record (type 8); a tombstone passes -1, -1 and nothing owned.

        ``assignment_epochs``: of the held partitions (None: none recorded, each then has
        the member's epoch; see ``ConsumerGroupMember.epoch_of``)."""
        old = self.members.get(member_id)
        if old is None:
            m = self.members[member_id] = ConsumerGroupMember(member_id)
            self._count(m)
        else:
            # Members are replaced, not changed: a caller may hold the old one.
            self._remove_partition_epochs(old)
            m = self.members[member_id] = old.copy()
        m.member_epoch = member_epoch
        m.previous_member_epoch = previous_member_epoch
        m.state = state
        m.assigned = assigned
        m.pending_revocation = pending_revocation
        m.assignment_epochs = {} if assignment_epochs is None else assignment_epochs
        self._add_partition_epochs(m)

    def replay_target_member(self, member_id: str, assignment: Assignment | None) -> None:
        """A target-assignment member record (type 7); None: its tombstone."""
        old = self.target.pop(member_id, None)
        if old is not None:
            for topic_id, parts in old.items():
                owners = self.target_owner.get(topic_id)
                if owners is None:
                    continue
                for p in parts:
                    if owners.get(p) == member_id:
                        del owners[p]
                if not owners:
                    del self.target_owner[topic_id]
        if assignment is None:
            return
        self.target[member_id] = assignment
        for topic_id, parts in assignment.items():
            owners = self.target_owner.setdefault(topic_id, {})
            for p in parts:
                owners[p] = member_id

    def replay_regex(self, regex: str, resolved: ResolvedRegex | None) -> None:
        if resolved is None:
            self.resolved_regexes.pop(regex, None)
        else:
            self.resolved_regexes[regex] = resolved

    # ------------------------------------------------------------ indexes

    def _count(self, m: ConsumerGroupMember) -> None:
        count_subscription(self.names_count, self.regex_count, m)
        if m.server_assignor is not None:
            a = m.server_assignor
            self.assignor_count[a] = self.assignor_count.get(a, 0) + 1
        if m.classic_member_metadata is not None:
            self.classic_members += 1

    def _uncount(self, m: ConsumerGroupMember) -> None:
        uncount_subscription(self.names_count, self.regex_count, m)
        if m.server_assignor is not None:
            _decrement(self.assignor_count, m.server_assignor)
        if m.classic_member_metadata is not None:
            self.classic_members -= 1

    def _add_partition_epochs(self, m: ConsumerGroupMember) -> None:
        epoch = m.member_epoch
        for parts in (m.assigned, m.pending_revocation):
            for topic_id, ps in parts.items():
                owners = self.partition_epochs.setdefault(topic_id, {})
                for p in ps:
                    owners[p] = epoch

    def _remove_partition_epochs(self, m: ConsumerGroupMember) -> None:
        for parts in (m.assigned, m.pending_revocation):
            for topic_id, ps in parts.items():
                owners = self.partition_epochs.get(topic_id)
                if owners is None:
                    continue
                for p in ps:
                    owners.pop(p, None)
                if not owners:
                    del self.partition_epochs[topic_id]


def _decrement(counts: dict[str, int], key: str) -> None:
    n = counts.get(key, 0) - 1
    if n > 0:
        counts[key] = n
    else:
        counts.pop(key, None)


def count_subscription(
    names: dict[str, int], regexes: dict[str, int], m: ConsumerGroupMember
) -> None:
    """Add ``m``'s subscription to subscriber counts by topic name and by regex (the
    group's own counters, or would-be copies a heartbeat computes before it changes them)."""
    for t in m.subscribed_topic_names:
        names[t] = names.get(t, 0) + 1
    if m.subscribed_topic_regex:
        regexes[m.subscribed_topic_regex] = regexes.get(m.subscribed_topic_regex, 0) + 1


def uncount_subscription(
    names: dict[str, int], regexes: dict[str, int], m: ConsumerGroupMember
) -> None:
    for t in m.subscribed_topic_names:
        _decrement(names, t)
    if m.subscribed_topic_regex:
        _decrement(regexes, m.subscribed_topic_regex)


def preferred_assignor(counts: dict[str, int], default: str) -> str:
    """The server assignor most members name (ties: the name first counted), else ``default``
    (Kafka's computePreferredServerAssignor; Kafka breaks ties in HashMap order)."""
    best, best_count = default, 0
    for name, count in counts.items():
        if count > best_count:
            best, best_count = name, count
    return best
