"""ConsumerGroupManager: the consumer groups (KIP-848) of one shard, and what changes them besides a heartbeat.

How this works
--------------
The manager holds the groups by id, the assignors, the topics image and the soft state of
the heartbeats (session and rebalance timers, the steady answers).  The APIs are functions
of the manager beside it: ConsumerGroupHeartbeat in ``heartbeat.py`` (validate, compute the
records, apply them), ConsumerGroupDescribe in ``describe.py``; the shard binds them, and
this module imports neither.  What stays here is what every path shares or what happens
without a request: arming and cancelling a member's timers, ``fence_members`` (a leave,
a session or rebalance timeout, LeaveGroup by an admin: tombstones for the member's
records and one group-epoch bump; the next heartbeat recomputes the target, as Kafka's
lazy targets do), the timers' actions, resolving regular expressions, topic changes,
loading a partition and replaying its records.

Regular expressions are resolved "asynchronously" as in Kafka: a heartbeat that needs a
resolution arms a timer due at once; the timer scans the topics, writes the resolved
topics (type 16) and bumps the epoch if they changed what the group subscribes to.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from coordinator.group import records as rec
from coordinator.group.consumer import replay as cg_replay
from coordinator.group.consumer.assignors import BUILTIN_ASSIGNORS
from coordinator.group.consumer.group import (
    ConsumerGroup,
    ResolvedRegex,
    uncount_subscription,
)
from coordinator.group.consumer.member import (
    ConsumerGroupMember,
    MemberState,
)
from coordinator.group.consumer.metadata_hash import group_hash
from coordinator.group.consumer.regex import resolve
from coordinator.group.consumer.target import TargetBuilder, build_target
from coordinator.group.events import (
    ConsumerGroupEpochBumped,
    ConsumerMembersFenced,
    FenceKind,
)
from coordinator.group.partitions import Partitions
from coordinator.group.timers import (
    TimerAction,
    TimerKind,
    Timers,
    consumer_rebalance_key,
    consumer_regex_key,
    consumer_session_key,
)
from coordinator.group.topics import StaticTopics, TopicsImage
from coordinator.group.types import GroupConfig, Result

__all__ = ["LEAVE_EPOCH", "TEMPORARY_LEAVE_EPOCH", "ConsumerGroupManager", "new_member_id"]

_ST = MemberState.STABLE
_UNREVOKED = MemberState.UNREVOKED_PARTITIONS
LEAVE_EPOCH = -1
TEMPORARY_LEAVE_EPOCH = -2
REGEX_BATCH_REFRESH_MIN_INTERVAL_MS = 10_000


def new_member_id() -> str:
    """A member id as Kafka generates one (a random Uuid in URL-safe base64, 22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class ConsumerGroupManager:
    def __init__(
        self,
        config: GroupConfig,
        partitions: Partitions,
        timers: Timers,
        *,
        topics: TopicsImage | None = None,
        member_id: Callable[[], str] = new_member_id,
        other_group_type: Callable[[str], str | None] = lambda gid: None,
    ) -> None:
        self.config = config
        self.partitions = partitions
        self.timers = timers
        # (session timeout, heartbeat interval) of consumer-protocol members: the broker's
        # group.consumer.* defaults, or a group's consumer.session.timeout.ms /
        # consumer.heartbeat.interval.ms GROUP configs (Kafka's GroupConfigManager), which
        # the config store replaces whole when they change (coordinator/group_configs.py).
        self.default_timeouts = (
            config.consumer_group_session_timeout_ms,
            config.consumer_group_heartbeat_interval_ms,
        )
        self.group_configs: Mapping[str, tuple[int, int]] = {}
        self.topics: TopicsImage = topics if topics is not None else StaticTopics()
        self.new_member_id = member_id
        # The type of a non-consumer group with this id ("classic"), None if there is none.
        self.other_group_type = other_group_type
        self.groups: dict[str, ConsumerGroup] = {}
        self.assignors = {name: BUILTIN_ASSIGNORS[name] for name in config.consumer_group_assignors}
        self.default_assignor = config.consumer_group_assignors[0]
        self.topic_hash_cache: dict[str, int] = {}
        # Grows when topics are created: regex subscriptions resolved against an older
        # version are resolved again (Kafka compares its metadata image offset).
        self.topics_version = 0
        self.topics_changes = 0  # any change: cached topic lookups are stale
        # Set by the shard for classic members and conversions (``interop.py``).
        self.interop: Any = None
        # For the metrics: current-assignment (type 8) records written by heartbeats. The
        # target builder is an attribute so that the metrics can time it from outside:
        # nothing here reads a clock.
        self.reconciliations = 0
        self.compute_target: TargetBuilder = build_target

    def schedule_session(
        self, out: Result, gid: str, member_id: str, now_ms: int, timeout_ms: int | None = None
    ) -> None:
        t = (
            self.group_configs.get(gid, self.default_timeouts)[0]
            if timeout_ms is None
            else timeout_ms
        )
        timer = self.timers.schedule(
            out,
            consumer_session_key(gid, member_id),
            now_ms + t,
            TimerAction(TimerKind.CONSUMER_SESSION, gid, member_id),
        )
        group = self.groups.get(gid)
        if group is not None and timeout_ms is None:
            group.session_timers[member_id] = timer

    def cancel_member_timers(self, gid: str, member_id: str) -> None:
        self.timers.cancel(consumer_session_key(gid, member_id))
        group = self.groups.get(gid)
        if group is not None:
            group.session_timers.pop(member_id, None)
            group.steady_responses.pop(member_id, None)
        self.timers.cancel(consumer_rebalance_key(gid, member_id))
        if self.interop is not None:
            self.interop.cancel_classic_timers(gid, member_id)

    def fence_members(
        self,
        out: Result,
        group: ConsumerGroup,
        members: Iterable[ConsumerGroupMember],
        now_ms: int,
        why: str,
        kind: FenceKind,
        writes: list[rec.TypedRecord] | None = None,
    ) -> None:
        """Remove members with one group-epoch bump (Kafka's consumerGroupFenceMembers)."""
        gone = list(members)
        if not gone:
            return
        if self.interop is not None and self.interop.maybe_downgrade(out, group, gone, now_ms, why):
            return
        gid = group.group_id
        writes = [] if writes is None else writes
        removed_ids = {m.member_id for m in gone}
        for m in gone:
            writes.extend(rec.member_removed(gid, m.member_id))
        names_count = dict(group.names_count)
        regex_count = dict(group.regex_count)
        for m in gone:
            uncount_subscription(names_count, regex_count, m)
        for regex in group.regex_count:
            if regex not in regex_count and regex in group.resolved_regexes:
                writes.append(rec.regex(gid, regex, None))
        names = set(names_count)
        for r in regex_count:
            resolved = group.resolved_regexes.get(r)
            if resolved is not None:
                names |= resolved.topics
        metadata_hash = group_hash(names, self.topics, self.topic_hash_cache)
        writes.append(rec.consumer_group_metadata(gid, group.group_epoch + 1, metadata_hash))
        if removed_ids.issuperset(group.members):
            # Nobody is left to compute a target: the empty one is current at the new epoch
            # (Kafka 4.4, KAFKA-20442).
            writes.append(rec.target_metadata(gid, group.group_epoch + 1))
        cg_replay.apply_all(out, self.partitions.partition_of(gid), group, writes)
        group.set_metadata_refresh_deadline(now_ms, group.group_epoch)
        for mid in removed_ids:
            self.cancel_member_timers(gid, mid)
        out.events.append(
            ConsumerMembersFenced(gid, group.group_epoch, tuple(sorted(removed_ids)), why, kind)
        )

    # ------------------------------------------------------------ timers

    def on_timer(self, out: Result, action: TimerAction, now_ms: int) -> None:
        group = self.groups.get(action.group_id)
        if group is None:
            return
        kind = action.kind
        if kind is TimerKind.CONSUMER_REGEX:
            self._refresh_regexes(out, group, now_ms)
            return
        member = group.members.get(action.member_id)
        if member is None:
            return
        if kind is TimerKind.CONSUMER_SESSION:
            self.fence_members(
                out, group, [member], now_ms, "session timeout expired", "session_timeout"
            )
        elif kind is TimerKind.CONSUMER_REBALANCE:
            if member.member_epoch == action.generation:
                self.fence_members(
                    out,
                    group,
                    [member],
                    now_ms,
                    f"did not revoke its partitions within the rebalance timeout "
                    f"({member.rebalance_timeout_ms} ms)",
                    "rebalance_timeout",
                )
        elif self.interop is not None:
            self.interop.on_timer(out, group, member, action, now_ms)

    # ------------------------------------------------------------ regular expressions

    def maybe_refresh_regexes(
        self, out: Result, group: ConsumerGroup, now_ms: int, required: bool
    ) -> None:
        """Arm the resolution timer when Kafka would start a resolution."""
        key = consumer_regex_key(group.group_id)
        if key in self.timers or not group.regex_count:
            return
        last = min((r.timestamp_ms for r in group.resolved_regexes.values()), default=None)
        if last is not None and now_ms <= last + REGEX_BATCH_REFRESH_MIN_INTERVAL_MS:
            return
        stale = (
            required
            or len(group.regex_count)
            != sum(1 for r in group.regex_count if r in group.resolved_regexes)
            or any(r.version < self.topics_version for r in group.resolved_regexes.values())
            or (
                last is not None
                and now_ms > last + self.config.consumer_group_regex_refresh_interval_ms
            )
        )
        if stale:
            self.timers.schedule(
                out, key, now_ms, TimerAction(TimerKind.CONSUMER_REGEX, group.group_id)
            )

    def _refresh_regexes(self, out: Result, group: ConsumerGroup, now_ms: int) -> None:
        gid = group.group_id
        names = list(self.topics.topic_names())
        writes: list[rec.TypedRecord] = []
        bump = False
        resolved: dict[str, frozenset[str]] = {}
        for regex in group.regex_count:
            topics = resolve(regex, names)
            resolved[regex] = topics
            old = group.resolved_regexes.get(regex)
            if old is None or old.topics != topics:
                bump = True
            writes.append(rec.regex(gid, regex, ResolvedRegex(topics, self.topics_version, now_ms)))
        if not writes:
            return
        all_names = set(group.names_count)
        for topics in resolved.values():
            all_names |= topics
        metadata_hash = group_hash(all_names, self.topics, self.topic_hash_cache)
        if metadata_hash != group.metadata_hash:
            bump = True
        if bump:
            writes.append(rec.consumer_group_metadata(gid, group.group_epoch + 1, metadata_hash))
        cg_replay.apply_all(out, self.partitions.partition_of(gid), group, writes)
        if bump:
            group.set_metadata_refresh_deadline(now_ms, group.group_epoch)
            out.events.append(
                ConsumerGroupEpochBumped(
                    gid,
                    group.group_epoch,
                    "regular expressions resolved: "
                    + ", ".join(f"{r!r} -> {sorted(t)}" for r, t in resolved.items()),
                    "regex",
                )
            )

    # ------------------------------------------------------------ topics

    def topics_changed(self, names: Iterable[str], created: bool, now_ms: int) -> None:
        """Topics were created, deleted or grew: groups subscribed to them look again."""
        changed = set(names)
        self.topics_changes += 1
        for n in changed:
            self.topic_hash_cache.pop(n, None)
        if created:
            self.topics_version = max(self.topics_version + 1, now_ms)
        for group in self.groups.values():
            if created and group.regex_count:
                group.request_metadata_refresh()
                continue
            if changed & group.subscribed_topic_names():
                group.request_metadata_refresh()

    # ------------------------------------------------------------ loading

    def on_loaded(self, out: Result, partition: int, now_ms: int) -> int:
        """Timers are not persisted: re-arm sessions and pending revocations in full."""
        n = 0
        partition_of = self.partitions.partition_of
        for group in self.groups.values():
            if partition_of(group.group_id) != partition:
                continue
            n += 1
            group.request_metadata_refresh()
            for m in group.members.values():
                if m.uses_classic_protocol:
                    if self.interop is not None:
                        self.interop.on_loaded_member(out, group, m, now_ms)
                    continue
                self.schedule_session(out, group.group_id, m.member_id, now_ms)
                if m.state is _UNREVOKED:
                    self.timers.schedule(
                        out,
                        consumer_rebalance_key(group.group_id, m.member_id),
                        now_ms + m.rebalance_timeout_ms,
                        TimerAction(
                            TimerKind.CONSUMER_REBALANCE,
                            group.group_id,
                            m.member_id,
                            m.member_epoch,
                        ),
                    )
        return n

    def forget_partition(self, partition: int) -> None:
        partition_of = self.partitions.partition_of
        for gid in [g for g in self.groups if partition_of(g) == partition]:
            self.timers.cancel_group(gid)
            del self.groups[gid]

    def replay(self, key: Any, value: Any) -> None:
        cg_replay.replay(self.groups, key, value)

    # ------------------------------------------------------------ deletion

    def delete_group(self, out: Result, group: ConsumerGroup) -> None:
        """Tombstone every record of an empty group and forget it (offsets are the caller's)."""
        writes = rec.consumer_group_tombstones(group)
        cg_replay.apply_all(out, self.partitions.partition_of(group.group_id), group, writes)
        self.timers.cancel_group(group.group_id)
        self.groups.pop(group.group_id, None)
