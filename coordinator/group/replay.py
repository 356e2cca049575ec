"""Rebuilding state from the offsets log, and partition load/unload.

How this works
--------------
When this node becomes coordinator for an offsets-log partition the runtime
calls ``begin_load(p)``, feeds every record of the partition to
``replay(p, key, value)`` in log order, then calls ``load_complete(p, now)``.
Until then requests for groups of that partition answer
COORDINATOR_LOAD_IN_PROGRESS (and NOT_COORDINATOR for partitions never
loaded).

``replay`` applies one record: an OffsetCommit sets (or, tombstone, removes)
one offset, creating a "simple" Empty group if needed; a GroupMetadata value
replaces the group wholesale (Empty if it has no members, else Stable, each
member supporting just the selected protocol, as Kafka rebuilds it); a
GroupMetadata tombstone deletes the group.  Unknown record types (KIP-848
and later) are skipped.

Timers are not persisted, so ``load_complete`` re-arms a session timer for
every loaded member (a Stable group stays Stable if its members keep
heartbeating) and the periodic offset-expiration timer; a group that is
larger than group.max.size is rebalanced, as Kafka does.
"""

from __future__ import annotations

from coordinator.group.base import EXPIRE_OFFSETS_KEY, OffsetEntry, PartitionStatus
from coordinator.group.classic.group import ClassicGroup, Member
from coordinator.group.classic.state import GroupState
from coordinator.group.offsets import OffsetsMixin
from coordinator.group.types import Result
from protocol.errors import ErrorCode
from protocol.messages.join_group import JoinGroupResponse
from protocol.messages.sync_group import SyncGroupResponse
from storage.offsets_format import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)

__all__ = ["ReplayMixin"]


class ReplayMixin(OffsetsMixin):
    def begin_load(self, partition: int) -> None:
        self._forget_partition(partition)
        self.partitions[partition] = PartitionStatus.LOADING

    def replay(self, partition: int, key: bytes, value: bytes | None) -> None:
        k = decode_key(key)
        if isinstance(k, OffsetCommitKey):
            self._replay_offset(k, value)
        elif isinstance(k, GroupMetadataKey):
            self._replay_group(k.group, value)
        # Other key versions belong to newer group types; nothing to do.

    def _replay_offset(self, k: OffsetCommitKey, value: bytes | None) -> None:
        tp = (k.topic, k.partition)
        if value is None:
            offsets = self.offsets.get(k.group)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del self.offsets[k.group]
            return
        v = decode_offset_commit_value(value)
        if k.group not in self.groups:
            self.groups[k.group] = ClassicGroup(k.group)
        self.offsets.setdefault(k.group, {})[tp] = OffsetEntry(
            offset=v.offset,
            leader_epoch=v.leader_epoch,
            metadata=v.metadata,
            commit_timestamp_ms=v.commit_timestamp,
            expire_timestamp_ms=None if v.expire_timestamp == -1 else v.expire_timestamp,
        )

    def _replay_group(self, group_id: str, value: bytes | None) -> None:
        if value is None:
            self.groups.pop(group_id, None)
            if group_id in self.offsets:
                # Offsets outlived their group's metadata: keep them reachable.
                self.groups[group_id] = ClassicGroup(group_id)
            return
        v = decode_group_metadata_value(value)
        group = ClassicGroup(
            group_id,
            state=GroupState.STABLE if v.members else GroupState.EMPTY,
            state_timestamp_ms=None
            if v.current_state_timestamp == -1
            else v.current_state_timestamp,
            generation=v.generation,
            protocol_type=v.protocol_type or None,
            protocol_name=v.protocol,
            leader_id=v.leader,
        )
        for m in v.members:
            group.add(
                Member(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=(
                        m.session_timeout if m.rebalance_timeout == -1 else m.rebalance_timeout
                    ),
                    session_timeout_ms=m.session_timeout,
                    protocol_type=v.protocol_type,
                    protocols=[(v.protocol or "", m.subscription)],
                    assignment=m.assignment,
                )
            )
        # add() elects the first member when there is no leader; keep the recorded one.
        group.leader_id = v.leader
        group.subscribed_topics = group.compute_subscribed_topics()
        self.groups[group_id] = group

    def load_complete(self, partition: int, now_ms: int) -> Result:
        out = Result()
        self.partitions[partition] = PartitionStatus.LOADED
        loaded = 0
        for group in list(self.groups.values()):
            if self.partition_of(group.group_id) != partition:
                continue
            loaded += 1
            for m in group.members.values():
                self._reschedule_heartbeat(out, group, m, now_ms)
            if len(group.members) > self.config.group_max_size:
                self._prepare_rebalance(
                    out,
                    group,
                    f"freshly loaded group has {len(group.members)} members, over "
                    f"group.max.size {self.config.group_max_size}",
                    "join",
                    now_ms,
                )
        if EXPIRE_OFFSETS_KEY not in self._timers:
            self._arm_expiration(out, now_ms)
        out.events.append(f"offsets partition {partition} loaded: {loaded} groups")
        return out

    def fail_load(self, partition: int) -> None:
        """The partition's log cannot be replayed: forget it; its groups get NOT_COORDINATOR."""
        self._forget_partition(partition)
        self.partitions[partition] = PartitionStatus.FAILED

    def mark_all_loaded(self, now_ms: int = 0) -> Result:
        """Own and load every offsets partition at once (tests, single-node setups)."""
        out = Result()
        for p in range(self.config.offsets_topic_num_partitions):
            out.extend(self.load_complete(p, now_ms))
        return out

    def unload(self, partition: int, now_ms: int) -> Result:
        """Stop coordinating a partition: parked requests get NOT_COORDINATOR."""
        out = Result()
        for group in [
            g for g in self.groups.values() if self.partition_of(g.group_id) == partition
        ]:
            for m in group.members.values():
                if m.join_reply is not None:
                    out.replies.append(
                        (
                            m.join_reply,
                            JoinGroupResponse(
                                error_code=ErrorCode.NOT_COORDINATOR, member_id=m.member_id
                            ),
                        )
                    )
                    group.set_join_reply(m, None)
                if m.sync_reply is not None:
                    out.replies.append(
                        (m.sync_reply, SyncGroupResponse(error_code=ErrorCode.NOT_COORDINATOR))
                    )
                    m.sync_reply = None
            group.transition_to(GroupState.DEAD, now_ms)
            for key in [k for k, t in self._timers.items() if t.action.group_id == group.group_id]:
                self._cancel(out, key)
        self._forget_partition(partition)
        return out

    def _forget_partition(self, partition: int) -> None:
        self.partitions.pop(partition, None)
        for gid in [g for g in self.groups if self.partition_of(g) == partition]:
            del self.groups[gid]
            self.offsets.pop(gid, None)
            self.pending_txn_offsets.pop(gid, None)
        for gid in [g for g in self.offsets if self.partition_of(g) == partition]:
            del self.offsets[gid]
