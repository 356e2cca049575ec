"""StreamsGroupManager: the streams groups (KIP-1071) of one shard, and what changes them besides a heartbeat.

How this works: the manager holds the groups by id, the topics image, the GROUP configs
(``streams.*``) and the timers of their members. The heartbeat (``heartbeat.py``) and the
describe (``describe.py``) are functions of the manager beside it. What stays here is what
every path shares or what happens without a request: the configs a group runs with,
arming and cancelling a member's timers, ``fence_member`` (a leave, a session or
rebalance timeout: the member's tombstones and one group-epoch bump; the next heartbeat
of another member computes the new target, as Kafka's lazy targets do), the target
assignment (``compute_target``, also when the initial rebalance delay ends), topic
changes, loading a partition and replaying its records, deleting an empty group.
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinator.group.consumer.metadata_hash import group_hash
from coordinator.group.partitions import Partitions
from coordinator.group.streams import records as rec
from coordinator.group.streams.assignor import AssignmentMember, SubtopologySpec, assign
from coordinator.group.streams.configure import ConfiguredTopology
from coordinator.group.streams.group import (
    MemberState,
    StreamsGroup,
    StreamsGroupMember,
    TasksTuple,
)
from coordinator.group.timers import (
    TimerAction,
    TimerKind,
    Timers,
    streams_initial_delay_key,
    streams_rebalance_key,
    streams_session_key,
)
from coordinator.group.topics import StaticTopics, TopicsImage
from coordinator.group.types import GroupConfig, Result
from storage.records.streams_group import StreamsGroupKey

__all__ = ["NUM_STANDBY_REPLICAS", "RACK_AWARE_ASSIGNMENT_TAGS", "StreamsGroupManager"]

NUM_STANDBY_REPLICAS = "num.standby.replicas"
RACK_AWARE_ASSIGNMENT_TAGS = "rack.aware.assignment.tags"
# The GROUP configs a streams group may override (Kafka's GroupConfig streams.* names).
SESSION = "streams.session.timeout.ms"
HEARTBEAT = "streams.heartbeat.interval.ms"
STANDBYS = "streams.num.standby.replicas"
INITIAL_DELAY = "streams.initial.rebalance.delay.ms"
ASSIGNMENT_INTERVAL = "streams.assignment.interval.ms"
TAGS = "streams.rack.aware.assignment.tags"
TASK_OFFSET_INTERVAL = "streams.task.offset.interval.ms"
RECOVERY_LAG = "streams.acceptable.recovery.lag"


class StreamsGroupManager:
    def __init__(
        self,
        config: GroupConfig,
        partitions: Partitions,
        timers: Timers,
        *,
        topics: TopicsImage | None = None,
    ) -> None:
        self.config = config
        self.partitions = partitions
        self.timers = timers
        self.topics: TopicsImage = topics if topics is not None else StaticTopics()
        self.groups: dict[str, StreamsGroup] = {}
        # A group's streams.* GROUP configs, replaced whole by the config store (numbers; the
        # rack-aware tags as their comma-joined list).
        self.group_configs: Mapping[str, Mapping[str, int | str]] = {}
        self.topic_hash_cache: dict[str, int] = {}

    # ------------------------------------------------------------ configs

    def _config(self, gid: str, name: str, default: int) -> int:
        value = self.group_configs.get(gid, {}).get(name, default)
        return value if isinstance(value, int) else default

    def session_timeout_ms(self, gid: str) -> int:
        return self._config(gid, SESSION, self.config.streams_group_session_timeout_ms)

    def heartbeat_interval_ms(self, gid: str) -> int:
        return self._config(gid, HEARTBEAT, self.config.streams_group_heartbeat_interval_ms)

    def initial_delay_ms(self, gid: str) -> int:
        return self._config(
            gid, INITIAL_DELAY, self.config.streams_group_initial_rebalance_delay_ms
        )

    def assignment_interval_ms(self, gid: str) -> int:
        return self._config(
            gid, ASSIGNMENT_INTERVAL, self.config.streams_group_assignment_interval_ms
        )

    def task_offset_interval_ms(self, gid: str) -> int:
        return self._config(
            gid, TASK_OFFSET_INTERVAL, self.config.streams_group_task_offset_interval_ms
        )

    def acceptable_recovery_lag(self, gid: str) -> int:
        return self._config(gid, RECOVERY_LAG, self.config.streams_group_acceptable_recovery_lag)

    def rack_aware_assignment_tags(self, gid: str) -> str:
        """The group's ``streams.rack.aware.assignment.tags`` (even empty), else the broker's,
        comma-joined."""
        own = self.group_configs.get(gid, {}).get(TAGS)
        if isinstance(own, str):
            return own
        return ",".join(self.config.streams_group_rack_aware_assignment_tags)

    def assignment_configs(self, gid: str) -> dict[str, str]:
        """What the assignor runs with (Kafka's streamsGroupAssignmentConfigs: the tags only
        when there are some); a change from the stored ones bumps the epoch."""
        n = self._config(gid, STANDBYS, self.config.streams_group_num_standby_replicas)
        out = {NUM_STANDBY_REPLICAS: str(n)}
        tags = self.rack_aware_assignment_tags(gid)
        if tags:
            out[RACK_AWARE_ASSIGNMENT_TAGS] = tags
        return out

    # ------------------------------------------------------------ timers

    def schedule_session(self, out: Result, gid: str, member_id: str, now_ms: int) -> None:
        self.timers.schedule(
            out,
            streams_session_key(gid, member_id),
            now_ms + self.session_timeout_ms(gid),
            TimerAction(TimerKind.STREAMS_SESSION, gid, member_id),
        )

    def schedule_rebalance(self, out: Result, gid: str, m: StreamsGroupMember, now_ms: int) -> None:
        self.timers.schedule(
            out,
            streams_rebalance_key(gid, m.member_id),
            now_ms + max(m.rebalance_timeout_ms, 0),
            TimerAction(TimerKind.STREAMS_REBALANCE, gid, m.member_id, m.member_epoch),
        )

    def cancel_member_timers(self, gid: str, member_id: str) -> None:
        self.timers.cancel(streams_session_key(gid, member_id))
        self.timers.cancel(streams_rebalance_key(gid, member_id))

    def on_timer(self, out: Result, action: TimerAction, now_ms: int) -> None:
        group = self.groups.get(action.group_id)
        if group is None:
            return
        if action.kind is TimerKind.STREAMS_INITIAL_DELAY:
            self._delayed_target(out, group, now_ms)
            return
        member = group.members.get(action.member_id)
        if member is None:
            return
        if action.kind is TimerKind.STREAMS_SESSION or (
            action.kind is TimerKind.STREAMS_REBALANCE and member.member_epoch == action.generation
        ):
            self.fence_member(out, group, member)

    # ------------------------------------------------------------ membership

    def fence_member(self, out: Result, group: StreamsGroup, member: StreamsGroupMember) -> None:
        """Remove a member: its tombstones and the group epoch + 1 (Kafka's streamsGroupFenceMember)."""
        gid = group.group_id
        writes = rec.member_removed(gid, member.member_id)
        writes.append(
            rec.group_metadata(
                gid,
                group.group_epoch + 1,
                group.metadata_hash,
                group.validated_topology_epoch,
                group.last_assignment_configs,
            )
        )
        rec.apply_all(out, self.partitions.partition_of(gid), group, writes)
        self.cancel_member_timers(gid, member.member_id)

    # ------------------------------------------------------------ target assignment

    def compute_target(
        self,
        group: StreamsGroup,
        epoch: int,
        members: Mapping[str, StreamsGroupMember],
        configured: ConfiguredTopology,
        configs: Mapping[str, str],
        now_ms: int,
    ) -> tuple[list[rec.StreamsRecord], dict[str, TasksTuple]]:
        """The new target of every member at ``epoch`` and its records (21 changed, then 20)."""
        gid = group.group_id
        targets: dict[str, TasksTuple] = {}
        if configured.is_ready and configured.subtopologies is not None:
            subs = [
                SubtopologySpec(sid, s.number_of_tasks, s.stateful)
                for sid, s in configured.subtopologies.items()
            ]
            specs = []
            for mid, m in members.items():
                prev = group.targets.get(mid, TasksTuple())
                offsets: dict[str, dict[int, int]] = {}
                for (s, p), off in group.task_offsets.get(mid, {}).items():
                    offsets.setdefault(s, {})[p] = off
                specs.append(
                    AssignmentMember(mid, m.process_id, prev.active, prev.standby, offsets)
                )
            standbys = int(configs.get(NUM_STANDBY_REPLICAS, "0"))
            for mid, tasks in assign(specs, subs, standbys).items():
                targets[mid] = TasksTuple(
                    {s: frozenset(ps) for s, ps in tasks.active.items()},
                    {s: frozenset(ps) for s, ps in tasks.standby.items()},
                )
        else:
            targets = {mid: TasksTuple() for mid in members}
        writes: list[rec.StreamsRecord] = []
        for mid, t in targets.items():
            if group.targets.get(mid) != t:
                writes.append(rec.target_member(gid, mid, t))
        writes.append(rec.target_metadata(gid, epoch, now_ms))
        return writes, targets

    def _delayed_target(self, out: Result, group: StreamsGroup, now_ms: int) -> None:
        """The initial rebalance delay ended: compute the target at the current epoch."""
        if group.is_empty() or group.configured_topology is None:
            return
        if group.group_epoch <= group.assignment_epoch:
            return
        writes, _ = self.compute_target(
            group,
            group.group_epoch,
            group.members,
            group.configured_topology,
            group.last_assignment_configs,
            now_ms,
        )
        rec.apply_all(out, self.partitions.partition_of(group.group_id), group, writes)

    def schedule_initial_delay(self, out: Result, gid: str, now_ms: int) -> None:
        delay = self.initial_delay_ms(gid)
        key = streams_initial_delay_key(gid)
        if delay > 0 and key not in self.timers:
            self.timers.schedule(
                out, key, now_ms + delay, TimerAction(TimerKind.STREAMS_INITIAL_DELAY, gid)
            )

    def initial_delay_active(self, gid: str) -> bool:
        return streams_initial_delay_key(gid) in self.timers

    # ------------------------------------------------------------ topics

    def metadata_hash(self, names: set[str]) -> int:
        return group_hash(names, self.topics, self.topic_hash_cache)

    def topics_changed(self, names: list[str]) -> None:
        """Topics were created, grew or were deleted: groups needing them look again."""
        changed = set(names)
        for n in changed:
            self.topic_hash_cache.pop(n, None)
        for group in self.groups.values():
            if group.topology is not None and changed & group.topology.required_topics():
                group.metadata_refresh = True

    # ------------------------------------------------------------ loading

    def replay(self, key: StreamsGroupKey, value: object) -> None:
        group = self.groups.get(key.group)
        if group is None:
            if value is None:
                return
            group = self.groups[key.group] = StreamsGroup(key.group, self.topics)
        if not rec.apply(group, key, value):
            self.groups.pop(key.group, None)

    def on_loaded(self, out: Result, partition: int, now_ms: int) -> int:
        """Timers are not persisted: sessions for every member, rebalances for those revoking."""
        n = 0
        for group in self.groups.values():
            if self.partitions.partition_of(group.group_id) != partition:
                continue
            n += 1
            group.metadata_refresh = True
            for m in group.members.values():
                self.schedule_session(out, group.group_id, m.member_id, now_ms)
                if m.state == MemberState.UNREVOKED_TASKS:
                    self.schedule_rebalance(out, group.group_id, m, now_ms)
        return n

    def forget_partition(self, partition: int) -> None:
        for gid in [g for g in self.groups if self.partitions.partition_of(g) == partition]:
            self.timers.cancel_group(gid)
            del self.groups[gid]

    def delete_group(self, out: Result, group: StreamsGroup) -> None:
        """Tombstone every record of an empty group and forget it (offsets are the caller's)."""
        writes = rec.group_tombstones(group)
        rec.apply_all(out, self.partitions.partition_of(group.group_id), group, writes)
        self.timers.cancel_group(group.group_id)
        self.groups.pop(group.group_id, None)
