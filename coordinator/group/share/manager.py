"""ShareGroupManager: the share groups (KIP-932) of one shard, and what changes them besides a heartbeat.

How this works
--------------
The manager holds the groups by id, the topics image, and the soft state of the heartbeats
(session timers). The APIs are functions beside it: ShareGroupHeartbeat in
``heartbeat.py``, ShareGroupDescribe in ``describe.py``; the shard binds them. What stays
here is what every path shares or what happens without a request: a member's session
timer, ``fence_member`` (a leave or an expired session: the member's tombstones and one
group-epoch bump), the end of a share-state initialization (the share coordinator answered:
the partitions move from *initializing* to *initialized*, or back out so a later heartbeat
retries), deleted topics (dropped from the state-partition metadata), loading a partition
and replaying its records, and deleting a group.

The share-partitions' durable state lives in the share coordinator (``SharePersister``),
which the pure core cannot call: a heartbeat that records partitions as initializing
reports ``ShareStateInitializing``, the runtime calls the persister and hands its answer
back to ``state_initialized``, as Kafka's GroupCoordinatorService does from a timer task
after the heartbeat's records are written. Each step checks the group's current records,
so an answer that arrives after the group changed (or was rebuilt from the log) only moves
what is still initializing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from coordinator.group.consumer.metadata_hash import group_hash
from coordinator.group.events import FenceKind, ShareMembersFenced
from coordinator.group.partitions import Partitions
from coordinator.group.records import TypedRecord
from coordinator.group.share import replay as sg_replay
from coordinator.group.share.group import ShareGroup, ShareMember, TopicInit
from coordinator.group.timers import TimerAction, TimerKind, Timers, share_session_key
from coordinator.group.topics import StaticTopics, TopicsImage
from coordinator.group.types import GroupConfig, Result

__all__ = ["ShareGroupManager"]

MAX_INT = 2147483647


class ShareGroupManager:
    def __init__(
        self,
        config: GroupConfig,
        partitions: Partitions,
        timers: Timers,
        *,
        topics: TopicsImage | None = None,
        other_group_type: Callable[[str], str | None] = lambda gid: None,
    ) -> None:
        self.config = config
        self.partitions = partitions
        self.timers = timers
        self.topics: TopicsImage = topics if topics is not None else StaticTopics()
        # (session timeout, heartbeat interval): the broker's group.share.* defaults, or a
        # group's share.session.timeout.ms / share.heartbeat.interval.ms GROUP configs.
        self.default_timeouts = (
            config.share_group_session_timeout_ms,
            config.share_group_heartbeat_interval_ms,
        )
        self.group_configs: Mapping[str, tuple[int, int]] = {}
        # The type of a non-share group with this id ("classic", "consumer"), None if none.
        self.other_group_type = other_group_type
        self.groups: dict[str, ShareGroup] = {}
        self.topic_hash_cache: dict[str, int] = {}

    def timeouts(self, gid: str) -> tuple[int, int]:
        return self.group_configs.get(gid, self.default_timeouts)

    def apply(self, out: Result, group: ShareGroup, writes: list[TypedRecord]) -> None:
        """Write and apply ``writes``; a group new to the shard is registered by them."""
        if not writes:
            return
        sg_replay.apply_all(out, self.partitions.partition_of(group.group_id), group, writes)
        self.groups.setdefault(group.group_id, group)

    # ------------------------------------------------------------ sessions

    def schedule_session(self, out: Result, group: ShareGroup, member_id: str, now_ms: int) -> None:
        gid = group.group_id
        timer = self.timers.schedule(
            out,
            share_session_key(gid, member_id),
            now_ms + self.timeouts(gid)[0],
            TimerAction(TimerKind.SHARE_SESSION, gid, member_id),
        )
        group.session_timers[member_id] = timer

    def cancel_session(self, group: ShareGroup, member_id: str) -> None:
        self.timers.cancel(share_session_key(group.group_id, member_id))
        group.session_timers.pop(member_id, None)

    def fence_member(
        self,
        out: Result,
        group: ShareGroup,
        member: ShareMember,
        now_ms: int,
        why: str,
        kind: FenceKind,
    ) -> None:
        """Kafka's shareGroupFenceMember: the member's tombstones and one epoch bump, with
        the metadata hash recomputed without it. Records it holds are not released here:
        the share-partition leader releases them when its share session ends."""
        gid = group.group_id
        names = dict(group.names_count)
        for name in member.subscribed_topic_names:
            n = names.get(name, 0) - 1
            if n > 0:
                names[name] = n
            else:
                names.pop(name, None)
        writes = sg_replay.member_removed(gid, member.member_id)
        metadata_hash = group_hash(names, self.topics, self.topic_hash_cache)
        writes.append(sg_replay.group_metadata(gid, group.group_epoch + 1, metadata_hash))
        if group.members.keys() == {member.member_id}:
            # Nobody is left to compute a target: the empty one is current at the new
            # epoch (Kafka 4.4, as for consumer groups).
            writes.append(sg_replay.target_metadata(gid, group.group_epoch + 1))
        self.apply(out, group, writes)
        group.metadata_refresh_deadline_ms = now_ms + MAX_INT
        self.cancel_session(group, member.member_id)
        out.events.append(
            ShareMembersFenced(gid, group.group_epoch, (member.member_id,), why, kind)
        )

    def on_timer(self, out: Result, action: TimerAction, now_ms: int) -> None:
        group = self.groups.get(action.group_id)
        if group is None:
            return
        member = group.members.get(action.member_id)
        if member is not None and action.kind is TimerKind.SHARE_SESSION:
            self.fence_member(out, group, member, now_ms, "session expired", "session_timeout")

    # ------------------------------------------------------------ share-partition state

    def state_initialized(
        self,
        gid: str,
        done: Mapping[bytes, Iterable[int]],
        failed: Mapping[bytes, Iterable[int]],
        now_ms: int,
    ) -> Result:
        """The share coordinator initialized ``done`` and refused ``failed`` (topic id ->
        partitions): move them out of *initializing* (Kafka's initializeShareGroupState /
        uninitializeShareGroupState). Partitions no longer initializing are left alone."""
        out = Result()
        group = self.groups.get(gid)
        if group is None or self.partitions.availability_error(gid) is not None:
            return out
        initializing = dict(group.initializing)
        initialized = dict(group.initialized)
        changed = False
        for outcome, parts_by_topic in ((True, done), (False, failed)):
            for t, parts in parts_by_topic.items():
                cur = initializing.get(t)
                if cur is None:
                    continue
                moved = cur.partitions & frozenset(parts)
                if not moved:
                    continue
                changed = True
                rest = cur.partitions - moved
                if rest:
                    initializing[t] = TopicInit(cur.name, rest)
                else:
                    del initializing[t]
                if outcome:
                    old = initialized.get(t)
                    have = old.partitions if old is not None else frozenset()
                    initialized[t] = TopicInit(cur.name, have | moved)
        if changed:
            record = sg_replay.state_partition_metadata(
                gid, initializing, initialized, group.deleting
            )
            self.apply(out, group, [record])
        return out

    # ------------------------------------------------------------ topics

    def topics_changed(self, names: Iterable[str], now_ms: int) -> Result:
        """Topics were created, deleted or grew: subscribed groups look again at their next
        heartbeat; a deleted topic leaves the groups' state-partition metadata (Kafka's
        maybeCleanupShareGroupState)."""
        out = Result()
        changed = set(names)
        for n in changed:
            self.topic_hash_cache.pop(n, None)
        exists = self.topics.topic_by_id
        for group in list(self.groups.values()):
            if changed & group.subscribed_topic_names():
                group.request_metadata_refresh()
            if self.partitions.availability_error(group.group_id) is not None:
                continue
            gone = [
                t
                for t in (*group.initializing, *group.initialized, *group.deleting)
                if exists(t) is None
            ]
            if gone:
                record = sg_replay.state_partition_metadata(
                    group.group_id,
                    {t: v for t, v in group.initializing.items() if t not in gone},
                    {t: v for t, v in group.initialized.items() if t not in gone},
                    {t: v for t, v in group.deleting.items() if t not in gone},
                )
                self.apply(out, group, [record])
        return out

    # ------------------------------------------------------------ loading

    def on_loaded(self, out: Result, partition: int, now_ms: int) -> int:
        """Timers are not persisted: re-arm every member's session."""
        n = 0
        partition_of = self.partitions.partition_of
        for group in self.groups.values():
            if partition_of(group.group_id) != partition:
                continue
            n += 1
            group.request_metadata_refresh()
            for t in group.initializing:
                group.initializing_since[t] = now_ms
            for mid in group.members:
                self.schedule_session(out, group, mid, now_ms)
        return n

    def forget_partition(self, partition: int) -> None:
        partition_of = self.partitions.partition_of
        for gid in [g for g in self.groups if partition_of(g) == partition]:
            self.timers.cancel_group(gid)
            del self.groups[gid]

    def replay(self, key: Any, value: Any) -> None:
        sg_replay.replay(self.groups, key, value)

    # ------------------------------------------------------------ deletion

    def initialized_topics(self, gid: str) -> dict[bytes, tuple[str, frozenset[int]]]:
        """The group's initialized share-partitions by topic id, with the topic's name
        (DescribeShareGroupOffsets of all topics); {} for an unknown group."""
        group = self.groups.get(gid)
        if group is None:
            return {}
        return {t: (ti.name, ti.partitions) for t, ti in group.initialized.items()}

    def deletable_state(self, gid: str) -> dict[bytes, list[int]] | None:
        """The share-partitions whose state DeleteGroups deletes before the group (Kafka's
        sharePartitionDeleteRequests: initialized, initializing, and what is left deleting
        of topics that still exist); None unless ``gid`` is an empty share group here."""
        group = self.groups.get(gid)
        if group is None or group.members or self.partitions.availability_error(gid):
            return None
        out: dict[bytes, set[int]] = {}
        for topics in (group.initialized, group.initializing):
            for t, ti in topics.items():
                out.setdefault(t, set()).update(ti.partitions)
        for t in group.deleting:
            topic = self.topics.topic_by_id(t)
            if topic is not None:
                out.setdefault(t, set()).update(range(topic.num_partitions))
        return {t: sorted(ps) for t, ps in out.items() if ps}

    def delete_group(self, out: Result, group: ShareGroup) -> None:
        """Tombstone every record of an empty group and forget it."""
        self.apply(out, group, sg_replay.group_tombstones(group))
        self.timers.cancel_group(group.group_id)
        self.groups.pop(group.group_id, None)
