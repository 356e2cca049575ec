"""ConsumerGroupManager: the consumer groups (KIP-848) of one shard, as Kafka's GroupMetadataManager runs them.

How this works
--------------
A ConsumerGroupHeartbeat is handled in three steps, as in Kafka:

1. **Validate** the request and find the group and the member (creating them on a join,
   epoch 0), checking epochs, static-membership rules and the group size. Nothing has
   changed yet, so an error is just an answer.
2. **Compute** what the heartbeat changes, into a list of typed records: the member's new
   subscription (type 5), a group-epoch bump when the subscribed topics or the group's
   preferred server assignor change what should be assigned (type 3; a new group starts
   at epoch 1 without one, Kafka 4.3+), a new target assignment when the group epoch is ahead of it (types
   7 and 6), and the member's next reconciliation step (type 8).
3. **Apply**: every record is encoded for the log and replayed into the group
   (``apply``), exactly as a restarted coordinator replays the log; then the soft state
   (timers, metadata refresh deadline) is updated and the answer built. The runtime sends
   the answer only once the records are durable.

Leaving (epoch -1), a static member's temporary leave (epoch -2), a session or rebalance
timeout, and LeaveGroup by an admin all end in ``fence_members``: tombstones for the
member's records and one group-epoch bump. The target is not recomputed there: the next
heartbeat does it (Kafka computes targets lazily too).

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
from coordinator.group.consumer.assignors.spec import PartitionAssignorError
from coordinator.group.consumer.errors import HeartbeatError
from coordinator.group.consumer.group import (
    ConsumerGroup,
    ResolvedRegex,
    count_subscription,
    preferred_assignor,
    uncount_subscription,
)
from coordinator.group.consumer.member import (
    ConsumerGroupMember,
    MemberState,
)
from coordinator.group.consumer.metadata_hash import group_hash
from coordinator.group.consumer.reconcile import FencedMemberEpoch, next_member
from coordinator.group.consumer.regex import InvalidRegex, compile_regex, resolve
from coordinator.group.consumer.target import TargetBuilder, build_target
from coordinator.group.events import (
    BumpKind,
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
from coordinator.group.types import GroupConfig, RequestContext, Result
from protocol.errors import ErrorCode
from protocol.framing import reusable
from protocol.messages import consumer_group_describe as cgd
from protocol.messages import consumer_group_heartbeat as cgh

__all__ = ["ConsumerGroupManager", "new_member_id"]

_ST = MemberState.STABLE
_UNREVOKED = MemberState.UNREVOKED_PARTITIONS
LEAVE_EPOCH = -1
TEMPORARY_LEAVE_EPOCH = -2
REGEX_BATCH_REFRESH_MIN_INTERVAL_MS = 10_000


def new_member_id() -> str:
    """A member id as Kafka generates one (a random Uuid in URL-safe base64, 22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _owned(req: cgh.ConsumerGroupHeartbeatRequest) -> dict[bytes, frozenset[int]] | None:
    if req.topic_partitions is None:
        return None
    out: dict[bytes, frozenset[int]] = {}
    for tp in req.topic_partitions:
        if tp.partitions:
            out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return out


def _blank(s: str | None) -> bool:
    return s is not None and not s.strip()


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
        # Set by the shard for conversions to and from classic groups (``interop.py``).
        self.interop: Any = None
        # For the metrics: current-assignment (type 8) records written by heartbeats. The
        # target builder is an attribute so that the metrics can time it from outside:
        # nothing here reads a clock.
        self.reconciliations = 0
        self.compute_target: TargetBuilder = build_target

    # ------------------------------------------------------------ ConsumerGroupHeartbeat

    def consumer_group_heartbeat(
        self, ctx: RequestContext, req: cgh.ConsumerGroupHeartbeatRequest, now_ms: int
    ) -> Result:
        out = Result()
        resp = self._steady_heartbeat(ctx, req, now_ms)
        if resp is not None:
            out.replies.append((ctx.reply_to, resp))
            return out
        try:
            self._validate(ctx.api_version, req)
            err = self.partitions.precheck(req.group_id)
            if err is not None:
                raise HeartbeatError(err)
            if req.member_epoch in (LEAVE_EPOCH, TEMPORARY_LEAVE_EPOCH):
                resp = self._leave(out, req, now_ms)
            else:
                resp = self._heartbeat(out, ctx, req, now_ms)
        except HeartbeatError as e:
            if self.interop is not None:
                self.interop.discard_pending()
            resp = cgh.ConsumerGroupHeartbeatResponse(error_code=e.code, error_message=e.message)
        out.replies.append((ctx.reply_to, resp))
        return out

    def _steady_heartbeat(
        self, ctx: RequestContext, req: cgh.ConsumerGroupHeartbeatRequest, now_ms: int
    ) -> cgh.ConsumerGroupHeartbeatResponse | None:
        """The answer to a heartbeat that changes nothing, or None to take the full path.

        Most heartbeats come from a member that owns exactly its target, in a group whose
        target is current: they only prove the member alive. Every condition below is one
        under which the full path would validate the request, write nothing, change no state
        and answer just (member id, epoch, interval); anything else goes the full way.
        """
        group = self.groups.get(req.group_id)
        if group is None:
            return None
        member = group.members.get(req.member_id)
        if (
            member is None
            or req.member_epoch != member.member_epoch
            or member.state is not _ST
            or member.member_epoch != group.assignment_epoch
            or group.group_epoch != group.assignment_epoch
            or req.rebalance_timeout_ms != -1
            or req.subscribed_topic_names is not None
            or req.subscribed_topic_regex is not None
            or req.server_assignor is not None
            or req.rack_id is not None
            or req.instance_id != member.instance_id
            or member.classic_member_metadata is not None
            or ctx.client_id != member.client_id
            or ctx.client_host != member.client_host
            or group.regex_count
            or now_ms >= group.metadata_refresh_deadline_ms
            or group.group_epoch < group.metadata_refresh_epoch
            or self.partitions.precheck(req.group_id) is not None
        ):
            return None
        timer = group.session_timers.get(member.member_id)
        session_ms, interval_ms = self.group_configs.get(req.group_id, self.default_timeouts)
        deadline = now_ms + session_ms
        if timer is None or deadline < timer.armed_ms:
            return None
        timer.deadline_ms = deadline  # moved later in place (see timers.py)
        # The same answer object while the epoch (and the group's interval) stays: the
        # server encodes it once.
        resp = group.steady_responses.get(member.member_id)
        if (
            resp is None
            or resp.member_epoch != member.member_epoch
            or resp.heartbeat_interval_ms != interval_ms
        ):
            resp = group.steady_responses[member.member_id] = reusable(
                cgh.ConsumerGroupHeartbeatResponse(
                    member_id=member.member_id,
                    member_epoch=member.member_epoch,
                    heartbeat_interval_ms=interval_ms,
                )
            )
        return resp

    def _validate(self, version: int, req: cgh.ConsumerGroupHeartbeatRequest) -> None:
        bad = ErrorCode.INVALID_REQUEST
        epoch = req.member_epoch
        if (version >= 1 or epoch > 0 or epoch == LEAVE_EPOCH) and not req.member_id.strip():
            raise HeartbeatError(bad, "MemberId can't be empty.")
        if not req.group_id.strip():
            raise HeartbeatError(bad, "GroupId can't be empty.")
        if _blank(req.instance_id):
            raise HeartbeatError(bad, "InstanceId can't be empty.")
        if _blank(req.rack_id):
            raise HeartbeatError(bad, "RackId can't be empty.")
        if epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise HeartbeatError(bad, "RebalanceTimeoutMs must be provided in first request.")
            if req.topic_partitions is None or req.topic_partitions:
                raise HeartbeatError(bad, "TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise HeartbeatError(
                    bad,
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                    "when (re-)joining.",
                )
        elif epoch == TEMPORARY_LEAVE_EPOCH:
            if req.instance_id is None:
                raise HeartbeatError(bad, "InstanceId can't be null.")
        elif epoch < TEMPORARY_LEAVE_EPOCH:
            raise HeartbeatError(bad, "MemberEpoch is invalid.")
        if req.server_assignor is not None and req.server_assignor not in self.assignors:
            raise HeartbeatError(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {req.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(self.assignors)}.",
            )

    def _heartbeat(
        self,
        out: Result,
        ctx: RequestContext,
        req: cgh.ConsumerGroupHeartbeatRequest,
        now_ms: int,
    ) -> cgh.ConsumerGroupHeartbeatResponse:
        gid = req.group_id
        epoch = req.member_epoch
        writes: list[rec.TypedRecord] = []
        group = self.groups.get(gid)
        if group is None:
            other = self.other_group_type(gid)
            if other is not None:
                if epoch != 0 or self.interop is None:
                    raise HeartbeatError(
                        ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group."
                    )
                # An empty classic group is replaced; a live one is upgraded online.
                group = self.interop.convert_classic_group(out, writes, gid, now_ms)
            elif epoch != 0:
                raise HeartbeatError(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {gid} not found."
                )
            else:
                group = ConsumerGroup(gid)  # registered when its first record is applied
        member_id = req.member_id
        if len(group.members) >= self.config.consumer_group_max_size and (
            not member_id or member_id not in group.members
        ):
            raise HeartbeatError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of "
                f"{self.config.consumer_group_max_size} members.",
            )
        if not member_id:
            member_id = self.new_member_id()
        owned = _owned(req)
        replaced: ConsumerGroupMember | None = None
        if req.instance_id is None:
            old = group.members.get(member_id)
            if old is None:
                if epoch != 0:
                    raise HeartbeatError(
                        ErrorCode.UNKNOWN_MEMBER_ID,
                        f"Member {member_id} is not a member of group {gid}.",
                    )
                old = ConsumerGroupMember(member_id)
                is_new = True
            else:
                _check_epoch(old, epoch, owned)
                is_new = False
        else:
            old, replaced, is_new = self._static_member(group, member_id, req, owned)
        if replaced is not None:
            writes.extend(rec.member_removed(gid, replaced.member_id))
            # The replacement inherits the old member's target and assignment at epoch 0.
            writes.append(rec.member_subscription(gid, old))
            target_of_old = group.target.get(replaced.member_id)
            writes.append(rec.target_member(gid, member_id, target_of_old or {}))
            writes.append(rec.current_assignment(gid, old))

        updated = old.copy()
        if req.instance_id is not None:
            updated.instance_id = req.instance_id
        if req.rack_id is not None:
            updated.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            updated.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.server_assignor is not None:
            updated.server_assignor = req.server_assignor
        if req.subscribed_topic_names is not None:
            updated.subscribed_topic_names = frozenset(req.subscribed_topic_names)
        if req.subscribed_topic_regex is not None:
            updated.subscribed_topic_regex = req.subscribed_topic_regex
        updated.client_id = ctx.client_id
        updated.client_host = ctx.client_host
        updated.classic_member_metadata = None

        response = self.reconcile_member(
            out, writes, group, old, updated, replaced, is_new, owned, now_ms, "heartbeat"
        )
        member = response
        full = (
            req.rebalance_timeout_ms != -1
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
            and req.topic_partitions is not None
        )
        resp = cgh.ConsumerGroupHeartbeatResponse(
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.group_configs.get(req.group_id, self.default_timeouts)[1],
        )
        if epoch == 0 or full or member.assigned != old.assigned:
            resp.assignment = cgh.Assignment(
                topic_partitions=[
                    cgh.AssignmentTopicPartitions(topic_id=t, partitions=sorted(ps))
                    for t, ps in member.assigned.items()
                ]
            )
        return resp

    def _static_member(
        self,
        group: ConsumerGroup,
        member_id: str,
        req: cgh.ConsumerGroupHeartbeatRequest,
        owned: Mapping[bytes, frozenset[int]] | None,
    ) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None, bool]:
        """(the member to update, the static member it replaces, whether it is new)."""
        iid = req.instance_id
        assert iid is not None
        holder = group.member_by_instance(iid)
        if req.member_epoch == 0:
            if holder is None:
                old = group.members.get(member_id)
                if old is not None:
                    return old, None, False
                m = ConsumerGroupMember(member_id)
                return m, None, True
            if holder.member_id == member_id:
                return holder, None, False  # a known member rejoining (Kafka 4.2)
            if holder.member_epoch != TEMPORARY_LEAVE_EPOCH and not holder.uses_classic_protocol:
                raise HeartbeatError(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {iid} cannot join the group "
                    f"because the instance id is owned by {holder.member_id} member.",
                )
            m = holder.copy(member_id)
            m.member_epoch = 0
            m.previous_member_epoch = 0
            m.pending_revocation = {}
            return m, holder, False
        if holder is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {iid} is unknown.")
        if holder.member_id != member_id:
            raise HeartbeatError(
                ErrorCode.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {iid} was fenced by member "
                f"{holder.member_id}.",
            )
        _check_epoch(holder, req.member_epoch, owned)
        return holder, None, False

    def reconcile_member(
        self,
        out: Result,
        writes: list[rec.TypedRecord],
        group: ConsumerGroup,
        old: ConsumerGroupMember,
        updated: ConsumerGroupMember,
        replaced: ConsumerGroupMember | None,
        is_new: bool,
        owned: Mapping[bytes, frozenset[int]] | None,
        now_ms: int,
        what: str,
    ) -> ConsumerGroupMember:
        """Steps 3-8 of Kafka's heartbeat for ``updated`` (a consumer or a classic member).

        Appends the records, applies them, re-arms the member's timers; returns the member
        as it is now.
        """
        gid = group.group_id
        group_epoch = group.group_epoch
        # A new group needs no bump of its own: it starts at epoch 1 (Kafka 4.3+), so its
        # first member joins at 1, or at 2 when it subscribes to topics.
        created = gid not in self.groups and not group.members
        bump = False
        causes: list[str] = []
        kinds: list[BumpKind] = []
        if is_new or not updated.same_subscription(old):
            writes.append(rec.member_subscription(gid, updated))
            if updated.subscribed_topic_names != old.subscribed_topic_names:
                bump = True
                kinds.append("subscription")
                causes.append(
                    f"member {updated.member_id} {'joined' if is_new else 'changed'} "
                    f"subscribing to {sorted(updated.subscribed_topic_names)}"
                )
        # Regular expressions (Kafka's maybeUpdateRegularExpressions).
        refresh_regex = False
        old_regex, new_regex = old.subscribed_topic_regex, updated.subscribed_topic_regex
        counted = not is_new and replaced is None
        if old_regex != new_regex:
            if old_regex and counted and group.regex_count.get(old_regex, 0) == 1:
                writes.append(rec.regex(gid, old_regex, None))
                if old_regex in group.resolved_regexes:
                    bump = True
                    kinds.append("regex")
                    causes.append(f"member {updated.member_id} dropped regex {old_regex!r}")
            if new_regex:
                if group.regex_count.get(new_regex, 0) == 0:
                    try:
                        compile_regex(new_regex)
                    except InvalidRegex as e:
                        raise HeartbeatError(
                            ErrorCode.INVALID_REGULAR_EXPRESSION,
                            f"SubscribedTopicRegex `{new_regex}` is not a valid regular "
                            f"expression: {e}.",
                        ) from None
                    refresh_regex = True
                elif new_regex in group.resolved_regexes:
                    bump = True
                    kinds.append("regex")
                    causes.append(f"member {updated.member_id} subscribed to regex {new_regex!r}")

        # A change of the group's preferred server assignor (the one most members name)
        # calls for a new target too (Kafka 4.3+'s hasPreferredServerAssignorChanged; a
        # classic member's JoinGroup does not look, as Kafka's does not).
        if what == "heartbeat":
            before = group.preferred_assignor(self.default_assignor)
            after = _preferred_assignor(
                group, old if counted else replaced, updated, self.default_assignor
            )
            if after != before:
                bump = True
                kinds.append("assignor")
                causes.append(
                    f"member {updated.member_id} changed the preferred assignor from "
                    f"{before} to {after}"
                )

        # Would-be counters, with this member's change.
        names_count = dict(group.names_count)
        regex_count = dict(group.regex_count)
        if counted:
            uncount_subscription(names_count, regex_count, old)
        elif replaced is not None:
            uncount_subscription(names_count, regex_count, replaced)
        count_subscription(names_count, regex_count, updated)
        resolved_after = {r: v for r, v in group.resolved_regexes.items() if r in regex_count}
        members_after = len(group.members) + (1 if is_new else 0)
        subscription_type = group.subscription_type(names_count, regex_count, members_after)

        metadata_hash = group.metadata_hash
        refreshed = False
        if bump or group.has_metadata_expired(now_ms):
            refreshed = True
            names = set(names_count)
            for v in resolved_after.values():
                names |= v.topics
            metadata_hash = group_hash(names, self.topics, self.topic_hash_cache)
            if metadata_hash != group.metadata_hash:
                if not bump:
                    kinds.append("metadata")
                    causes.append("the subscribed topics' metadata changed")
                bump = True
            if bump:
                group_epoch += 1
                writes.append(rec.consumer_group_metadata(gid, group_epoch, metadata_hash))
            if group.has_legacy_partition_metadata:
                writes.append(rec.legacy_partition_metadata_tombstone(gid))

        # The target (Kafka's updateTargetAssignment), computed lazily.
        target_epoch = group.assignment_epoch
        if group_epoch > group.assignment_epoch:
            name = _preferred_assignor(
                group, old if counted else replaced, updated, self.default_assignor
            )
            try:
                targets, changed = self.compute_target(
                    group,
                    updated,
                    replaced.member_id if replaced is not None else None,
                    frozenset(),
                    self.topics,
                    self.assignors[name],
                    subscription_type,
                    {r: v.topics for r, v in resolved_after.items()},
                    group.spec_cache,
                    self.topics_changes,
                )
            except PartitionAssignorError:
                raise HeartbeatError(ErrorCode.UNKNOWN) from None
            for mid, parts in changed:
                writes.append(rec.target_member(gid, mid, parts))
            writes.append(rec.target_metadata(gid, group_epoch))
            target_epoch = group_epoch
            target = targets[updated.member_id]
        else:
            stored = group.target.get(updated.member_id)
            if stored is None and replaced is not None:
                stored = group.target.get(replaced.member_id)
            target = {} if stored is None else stored

        # Reconciliation (Kafka's maybeReconcile).
        # A classic member reconciles too, against the partitions its JoinGroup says it
        # owns; only its timers differ (join/sync timers instead of the rebalance timer).
        member = updated
        if not updated.is_reconciled_to(target_epoch):
            try:
                member = next_member(
                    updated, target_epoch, target, owned, group.current_partition_epoch
                )
            except FencedMemberEpoch as e:
                raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, str(e)) from None
        if is_new or replaced is not None or not member.same_assignment(old):
            writes.append(rec.current_assignment(gid, member))
            self.reconciliations += 1

        # Apply: from here on nothing can fail.
        if gid not in self.groups:
            self.groups[gid] = group
        cg_replay.apply_all(out, self.partitions.partition_of(gid), group, writes)
        if self.interop is not None:
            self.interop.after_apply(out, now_ms)
        if refreshed:
            group.set_metadata_refresh_deadline(now_ms, group_epoch)
        if created:
            # Born at epoch 1 (no record says so): counted as the epoch's first move.
            out.events.append(ConsumerGroupEpochBumped(gid, 1, "group created", "created"))
        if bump and causes:
            out.events.append(
                ConsumerGroupEpochBumped(gid, group.group_epoch, "; ".join(causes), kinds[0])
            )
        if replaced is not None:
            self._cancel_member_timers(gid, replaced.member_id)
        if not member.uses_classic_protocol:
            if member.state is _UNREVOKED and not member.same_assignment(old):
                self.timers.schedule(
                    out,
                    consumer_rebalance_key(gid, member.member_id),
                    now_ms + member.rebalance_timeout_ms,
                    TimerAction(
                        TimerKind.CONSUMER_REBALANCE, gid, member.member_id, member.member_epoch
                    ),
                )
            elif member.state is not _UNREVOKED:
                self.timers.cancel(consumer_rebalance_key(gid, member.member_id))
            self.schedule_session(out, gid, member.member_id, now_ms)
        if refresh_regex or new_regex or group.regex_count:
            self._maybe_refresh_regexes(out, group, now_ms, refresh_regex)
        return member

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

    def _cancel_member_timers(self, gid: str, member_id: str) -> None:
        self.timers.cancel(consumer_session_key(gid, member_id))
        group = self.groups.get(gid)
        if group is not None:
            group.session_timers.pop(member_id, None)
            group.steady_responses.pop(member_id, None)
        self.timers.cancel(consumer_rebalance_key(gid, member_id))
        if self.interop is not None:
            self.interop.cancel_classic_timers(gid, member_id)

    # ------------------------------------------------------------ leaving and fencing

    def _leave(
        self, out: Result, req: cgh.ConsumerGroupHeartbeatRequest, now_ms: int
    ) -> cgh.ConsumerGroupHeartbeatResponse:
        gid = req.group_id
        group = self.groups.get(gid)
        if group is None:
            if self.other_group_type(gid) is not None:
                raise HeartbeatError(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group."
                )
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
        iid = req.instance_id
        if iid is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise HeartbeatError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {req.member_id} is not a member of group {gid}.",
                )
            self.fence_members(out, group, [member], now_ms, "left the group", "left")
            return cgh.ConsumerGroupHeartbeatResponse(member_id=req.member_id, member_epoch=-1)
        holder = group.member_by_instance(iid)
        if holder is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {iid} is unknown.")
        if holder.member_id != req.member_id:
            raise HeartbeatError(
                ErrorCode.FENCED_INSTANCE_ID,
                f"Static member {req.member_id} with instance id {iid} was fenced by member "
                f"{holder.member_id}.",
            )
        if req.member_epoch == TEMPORARY_LEAVE_EPOCH:
            m = holder.copy()
            m.member_epoch = TEMPORARY_LEAVE_EPOCH
            m.pending_revocation = {}
            cg_replay.apply_all(
                out, self.partitions.partition_of(gid), group, [rec.current_assignment(gid, m)]
            )
            self.timers.cancel(consumer_rebalance_key(gid, m.member_id))
            return cgh.ConsumerGroupHeartbeatResponse(
                member_id=holder.member_id, member_epoch=TEMPORARY_LEAVE_EPOCH
            )
        self.fence_members(out, group, [holder], now_ms, "left the group", "left")
        return cgh.ConsumerGroupHeartbeatResponse(member_id=req.member_id, member_epoch=-1)

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
            self._cancel_member_timers(gid, mid)
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

    def _maybe_refresh_regexes(
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

    # ------------------------------------------------------------ ConsumerGroupDescribe

    def consumer_group_describe(
        self, ctx: RequestContext, req: cgd.ConsumerGroupDescribeRequest, now_ms: int
    ) -> Result:
        out = Result()
        groups: list[cgd.DescribedGroup] = []
        for gid in req.group_ids:
            groups.append(self.describe_one(gid, ctx.api_version))
        out.replies.append((ctx.reply_to, cgd.ConsumerGroupDescribeResponse(groups=groups)))
        return out

    def describe_one(self, gid: str, version: int) -> cgd.DescribedGroup:
        if not gid:
            return cgd.DescribedGroup(group_id="", error_code=ErrorCode.INVALID_GROUP_ID)
        err = self.partitions.availability_error(gid)
        if err is not None:
            return cgd.DescribedGroup(group_id=gid, error_code=err)
        group = self.groups.get(gid)
        if group is None:
            msg = (
                f"Group {gid} is not a consumer group."
                if self.other_group_type(gid) is not None
                else f"Group {gid} not found."
            )
            return cgd.DescribedGroup(
                group_id=gid, error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=msg
            )
        members = []
        for m in group.members.values():
            members.append(
                cgd.Member(
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=sorted(m.subscribed_topic_names),
                    subscribed_topic_regex=m.subscribed_topic_regex,
                    # What the member holds: pending revocation included (Kafka 4.4).
                    assignment=cgd.Assignment(
                        topic_partitions=self._named(_held(m), cgd.TopicPartitions)
                    ),
                    target_assignment=cgd.MemberAssignment(
                        topic_partitions=self._named(
                            group.target.get(m.member_id, {}), cgd.MemberAssignmentTopicPartitions
                        )
                    ),
                    member_type=(0 if m.uses_classic_protocol else 1) if version >= 1 else -1,
                )
            )
        return cgd.DescribedGroup(
            group_id=gid,
            group_state=group.state.value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.preferred_assignor(self.default_assignor),
            members=members,
        )

    def _named(self, parts: Mapping[bytes, Iterable[int]], cls: Any) -> list[Any]:
        """``parts`` by topic, named; a list of partitions keeps its order, a set is sorted."""
        out = []
        for topic_id, ps in parts.items():
            t = self.topics.topic_by_id(topic_id)
            if t is None:
                continue  # Kafka leaves out topics missing from its metadata image
            partitions = ps if isinstance(ps, list) else sorted(ps)
            out.append(cls(topic_id=topic_id, topic_name=t.name, partitions=partitions))
        return out


def _held(m: ConsumerGroupMember) -> dict[bytes, list[int]]:
    """The partitions ``m`` holds, per topic: assigned, then those it has yet to give back
    (the order of Kafka's accumulateTopicPartitions)."""
    held = {topic_id: sorted(ps) for topic_id, ps in m.assigned.items()}
    for topic_id, ps in m.pending_revocation.items():
        held.setdefault(topic_id, []).extend(sorted(ps))
    return held


def _check_epoch(
    member: ConsumerGroupMember, received: int, owned: Mapping[bytes, frozenset[int]] | None
) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid, with 4.2's rejoin at epoch 0."""
    stored = member.member_epoch
    if received == 0 or received == stored:
        return
    if received > stored:
        raise HeartbeatError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a greater member epoch ({received}) than the "
            f"one known by the group coordinator ({stored}). The member must abandon all "
            "its partitions and rejoin.",
        )
    if received == member.previous_member_epoch and owned is not None:
        assigned = member.assigned
        if all(ps <= assigned.get(t, frozenset()) for t, ps in owned.items()):
            return
    raise HeartbeatError(
        ErrorCode.FENCED_MEMBER_EPOCH,
        f"The consumer group member has a smaller member epoch ({received}) than the one "
        f"known by the group coordinator ({stored}). The member must abandon all its "
        "partitions and rejoin.",
    )


def _preferred_assignor(
    group: ConsumerGroup,
    old: ConsumerGroupMember | None,
    updated: ConsumerGroupMember,
    default: str,
) -> str:
    """The preferred assignor with this heartbeat's change counted."""
    counts = dict(group.assignor_count)
    if old is not None and old.server_assignor is not None:
        n = counts.get(old.server_assignor, 0) - 1
        if n > 0:
            counts[old.server_assignor] = n
        else:
            counts.pop(old.server_assignor, None)
    if updated.server_assignor is not None:
        counts[updated.server_assignor] = counts.get(updated.server_assignor, 0) + 1
    return preferred_assignor(counts, default)
