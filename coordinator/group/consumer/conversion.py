"""Converting a group between the classic and the consumer types, both ways.

How this works (Kafka's GroupMetadataManager ``convertToConsumerGroup``,
``convertToClassicGroup``):

* **Upgrade** (a ConsumerGroupHeartbeat at epoch 0 for a classic group): an empty classic
  group is simply replaced; a live one is converted when ``group.consumer.migration.policy``
  allows it: every classic member becomes a consumer-group member at the group's
  generation, owning its last assignment.  The classic group is dropped once the new
  group's records are applied (``after_apply``), or kept if the heartbeat fails
  (``discard_pending``).
* **Downgrade**: when the last consumer-protocol member leaves and only classic members
  remain, the group becomes a classic group again (policy permitting) at generation = group
  epoch, each member keeping its target, and a rebalance starts.

Every conversion writes the tombstones of the old form and the records of the new one in
the same operation, so the log never holds the group twice.  ``GroupConversions`` also
holds what the classic APIs of ``interop.py`` share with it (the two managers, topic names
to ids and back); ``ClassicInterop`` extends it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.group import records as rec
from coordinator.group.classic import rebalance
from coordinator.group.classic.group import ClassicGroup, ClassicGroupMember
from coordinator.group.classic.manager import ClassicGroupManager
from coordinator.group.classic.state import ClassicGroupState
from coordinator.group.classic.subscription import (
    encode_assignment,
    parse_assignment,
    parse_subscription,
)
from coordinator.group.consumer import replay as cg_replay
from coordinator.group.consumer.errors import HeartbeatError
from coordinator.group.consumer.group import ConsumerGroup
from coordinator.group.consumer.member import Assignment, ConsumerGroupMember, MemberState
from coordinator.group.consumer.metadata_hash import group_hash
from coordinator.group.events import GroupConversionRefused
from coordinator.group.types import Result
from protocol.errors import ErrorCode
from protocol.messages.join_group import JoinGroupResponse
from protocol.messages.sync_group import SyncGroupResponse
from storage.records import ClassicMemberMetadata

if TYPE_CHECKING:
    from coordinator.group.consumer.manager import ConsumerGroupManager

__all__ = ["CONSUMER_PROTOCOL_TYPE", "GroupConversions"]

CONSUMER_PROTOCOL_TYPE = "consumer"
_E = ClassicGroupState.EMPTY


class GroupConversions:
    def __init__(self, consumer: ConsumerGroupManager, classic: ClassicGroupManager) -> None:
        self.consumer = consumer
        self.classic = classic
        self.config = consumer.config
        self.timers = consumer.timers

    @property
    def policy(self) -> str:
        return self.config.consumer_group_migration_policy.lower()

    # ------------------------------------------------------------ names <-> ids

    def _to_ids(self, parts: list[tuple[str, list[int]]]) -> dict[bytes, frozenset[int]]:
        out: dict[bytes, frozenset[int]] = {}
        for topic, ps in parts:
            t = self.consumer.topics.topic(topic)
            if t is not None and ps:
                out[t.topic_id] = out.get(t.topic_id, frozenset()) | frozenset(ps)
        return out

    def _to_names(self, parts: Assignment) -> list[tuple[str, list[int]]]:
        out = []
        for topic_id, ps in parts.items():
            t = self.consumer.topics.topic_by_id(topic_id)
            if t is not None:
                out.append((t.name, sorted(ps)))
        return sorted(out)

    @staticmethod
    def _subscription_version(m: ConsumerGroupMember) -> int:
        meta = m.classic_member_metadata
        if meta is None or not meta.supported_protocols:
            return 0
        data = meta.supported_protocols[0][1]
        return int.from_bytes(data[:2], "big", signed=True) if len(data) >= 2 else 0

    def assignment_bytes(self, m: ConsumerGroupMember, parts: Assignment) -> bytes:
        return encode_assignment(self._subscription_version(m), self._to_names(parts))

    # ------------------------------------------------------------ upgrade

    def convert_classic_group(
        self, out: Result, writes: list[rec.TypedRecord], gid: str, now_ms: int
    ) -> ConsumerGroup:
        """A consumer member joins where a classic group lives: replace or upgrade it.

        The classic group's tombstone and the new group's records go to ``writes``; the
        classic group is dropped once they are applied (``after_apply``).
        """
        classic = self.classic.groups[gid]
        key, _ = rec.classic_group_tombstone(gid)
        group = ConsumerGroup(gid)
        if classic.is_in(_E):
            writes.append((key, None))
            self._pending_removal = gid
            return group
        reason = self._upgrade_refusal(classic)
        if reason is not None:
            out.events.append(GroupConversionRefused(gid, reason))
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, reason)
        writes.append((key, None))
        converted: list[rec.TypedRecord] = []
        members: list[ConsumerGroupMember] = []
        targets: dict[str, dict[bytes, frozenset[int]]] = {}
        for cm in classic.members.values():
            sub = parse_subscription(cm.metadata(classic.protocol_name))
            assert sub is not None  # checked by _upgrade_refusal
            parsed = parse_assignment(cm.assignment)
            assert parsed is not None
            m = ConsumerGroupMember(cm.member_id)
            m.instance_id = cm.group_instance_id
            m.rack_id = sub.rack_id
            m.client_id = cm.client_id
            m.client_host = cm.client_host
            m.subscribed_topic_names = frozenset(sub.topics)
            m.rebalance_timeout_ms = cm.rebalance_timeout_ms
            m.classic_member_metadata = ClassicMemberMetadata(
                cm.session_timeout_ms, [(name, meta) for name, meta in cm.protocols]
            )
            m.member_epoch = m.previous_member_epoch = classic.generation
            m.state = MemberState.STABLE
            m.assigned = self._to_ids(parsed[0])
            targets[m.member_id] = dict(m.assigned)
            members.append(m)
        names = set().union(*(m.subscribed_topic_names for m in members)) if members else set()
        h = group_hash(names, self.consumer.topics, self.consumer.topic_hash_cache)
        for m in members:
            converted.append(rec.member_subscription(gid, m))
        converted.append(rec.consumer_group_metadata(gid, classic.generation, h))
        for m in members:
            converted.append(rec.target_member(gid, m.member_id, targets[m.member_id]))
        converted.append(rec.target_metadata(gid, classic.generation))
        for m in members:
            converted.append(rec.current_assignment(gid, m))
        for key_, value in converted:
            cg_replay.apply(group, key_, value)
        writes.extend(converted)
        self._pending_removal = gid
        self._upgraded = classic
        return group

    def _upgrade_refusal(self, classic: ClassicGroup) -> str | None:
        gid = classic.group_id
        if self.policy not in ("upgrade", "bidirectional"):
            return f"Cannot upgrade classic group {gid} to consumer group because the online upgrade is disabled."
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return f"Cannot upgrade classic group {gid} to consumer group because it is not a consumer group."
        if len(classic.members) > self.config.consumer_group_max_size:
            return (
                f"Cannot upgrade classic group {gid} to consumer group because its group size "
                "exceeds the consumer group maximum size."
            )
        for cm in classic.members.values():
            if parse_subscription(cm.metadata(classic.protocol_name)) is None:
                return f"Cannot upgrade classic group {gid} to consumer group because its member subscription cannot be parsed."
            parsed = parse_assignment(cm.assignment)
            if parsed is None:
                return f"Cannot upgrade classic group {gid} to consumer group because its member assignment cannot be parsed."
            if parsed[1]:
                return (
                    f"Cannot upgrade classic group {gid} to consumer group because an "
                    "unsupported custom assignor is in use."
                )
        return None

    _pending_removal: str | None = None
    _upgraded: ClassicGroup | None = None

    def after_apply(self, out: Result, now_ms: int) -> None:
        """The records of a conversion are applied: finish the classic side."""
        gid, self._pending_removal = self._pending_removal, None
        upgraded, self._upgraded = self._upgraded, None
        if gid is None:
            return
        classic = self.classic.groups.pop(gid, None)
        if classic is None:
            return
        for cm in classic.members.values():
            # Pending joins and syncs learn that the group moved on.
            self.classic.reply_join(
                out,
                cm,
                classic,
                JoinGroupResponse(
                    error_code=ErrorCode.REBALANCE_IN_PROGRESS, member_id=cm.member_id
                ),
            )
            self.classic.reply_sync(
                out, cm, SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
            )
        self.timers.cancel_group(gid)
        classic.transition_to(ClassicGroupState.DEAD, now_ms)
        if upgraded is not None:
            group = self.consumer.groups.get(gid)
            if group is not None:
                for m in group.members.values():
                    meta = m.classic_member_metadata
                    if meta is not None:
                        self.consumer.schedule_session(
                            out, gid, m.member_id, now_ms, meta.session_timeout_ms
                        )

    def discard_pending(self) -> None:
        """The heartbeat that started a conversion failed: nothing of it happened."""
        self._pending_removal = None
        self._upgraded = None

    # ------------------------------------------------------------ downgrade

    def maybe_downgrade(
        self,
        out: Result,
        group: ConsumerGroup,
        gone: list[ConsumerGroupMember],
        now_ms: int,
        why: str,
    ) -> bool:
        """Members are being fenced: if only classic members remain, become a classic group."""
        removed = {m.member_id for m in gone}
        remaining = [m for mid, m in group.members.items() if mid not in removed]
        if not remaining or any(m.classic_member_metadata is None for m in remaining):
            return False
        if self.policy not in ("downgrade", "bidirectional"):
            return False
        if len(remaining) > self.config.group_max_size:
            return False
        gid = group.group_id
        writes = rec.consumer_group_tombstones(group)
        classic = ClassicGroup(gid, state_timestamp_ms=now_ms)
        classic.generation = group.group_epoch
        classic.protocol_type = CONSUMER_PROTOCOL_TYPE
        for m in remaining:
            meta = m.classic_member_metadata
            assert meta is not None
            classic.add(
                ClassicGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=meta.session_timeout_ms,
                    protocol_type=CONSUMER_PROTOCOL_TYPE,
                    protocols=list(meta.supported_protocols),
                    assignment=self.assignment_bytes(m, group.target.get(m.member_id, {})),
                )
            )
        classic.protocol_name = classic.select_protocol()
        # Kafka builds the classic group Stable at once (ClassicGroup.fromConsumerGroup).
        classic.state = ClassicGroupState.STABLE
        p = self.consumer.partitions.partition_of(gid)
        record = rec.group_metadata_record(p, classic)
        writes.append((record[1], record[2]))
        cg_replay.apply_all(out, p, group, writes)
        self.timers.cancel_group(gid)
        self.consumer.groups.pop(gid, None)
        self.classic.groups[gid] = classic
        classic.subscribed_topics = classic.compute_subscribed_topics()
        for cm in classic.members.values():
            self.classic.reschedule_heartbeat(out, classic, cm, now_ms)
        rebalance.prepare_rebalance(
            self.classic,
            out,
            classic,
            f"consumer group {gid} downgraded to a classic group: {', '.join(sorted(removed))} {why}",
            "leave",
            now_ms,
        )
        return True
