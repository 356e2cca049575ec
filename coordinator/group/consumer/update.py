"""What a member's heartbeat changes in its group: steps 2 and 3 of Kafka's heartbeat.

How this works: ``reconcile_member`` takes the member as it was and as the request (a
ConsumerGroupHeartbeat, or a classic member's JoinGroup through ``interop.py``) describes
it, and writes, in order: its subscription (type 5) and the regular expressions it stops
using, a group-epoch bump when the subscribed names, a resolved regular expression, the
preferred server assignor or the subscribed topics' metadata change what should be assigned
(type 3), a new target when the group epoch is ahead of it (types 7 and 6), and the
member's next reconciliation step (type 8, Kafka's CurrentAssignmentBuilder in
``reconcile.py``).  Nothing has changed until every record is built; then they are applied
to the group as replay applies them, and the member's timers are re-armed.
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinator.group import records as rec
from coordinator.group.consumer import replay as cg_replay
from coordinator.group.consumer.assignors.spec import PartitionAssignorError
from coordinator.group.consumer.errors import HeartbeatError
from coordinator.group.consumer.group import (
    ConsumerGroup,
    count_subscription,
    preferred_assignor,
    uncount_subscription,
)
from coordinator.group.consumer.manager import (
    ConsumerGroupManager,
)
from coordinator.group.consumer.member import Assignment, ConsumerGroupMember, MemberState
from coordinator.group.consumer.metadata_hash import group_hash
from coordinator.group.consumer.reconcile import FencedMemberEpoch, next_member
from coordinator.group.consumer.regex import InvalidRegex, compile_regex
from coordinator.group.events import (
    BumpKind,
    ConsumerGroupEpochBumped,
)
from coordinator.group.timers import (
    TimerAction,
    TimerKind,
    consumer_rebalance_key,
)
from coordinator.group.types import Result
from protocol.errors import ErrorCode

__all__ = ["reconcile_member"]

_UNREVOKED = MemberState.UNREVOKED_PARTITIONS


class _Bump:
    """Why this heartbeat moves the group epoch: empty when it does not."""

    __slots__ = ("causes", "kinds")

    def __init__(self) -> None:
        self.kinds: list[BumpKind] = []
        self.causes: list[str] = []

    def add(self, kind: BumpKind, cause: str) -> None:
        self.kinds.append(kind)
        self.causes.append(cause)


def reconcile_member(
    mgr: ConsumerGroupManager,
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
    # A new group needs no bump of its own: it starts at epoch 1 (Kafka 4.3+), so its
    # first member joins at 1, or at 2 when it subscribes to topics.
    created = gid not in mgr.groups and not group.members
    bump = _Bump()
    refresh_regex = _subscription_changes(
        mgr, writes, group, old, updated, replaced, is_new, what, bump
    )
    group_epoch, refreshed, target_epoch, target = _epoch_and_target(
        mgr, writes, group, old, updated, replaced, is_new, now_ms, bump
    )

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
        mgr.reconciliations += 1

    # Apply: from here on nothing can fail.
    if gid not in mgr.groups:
        mgr.groups[gid] = group
    cg_replay.apply_all(out, mgr.partitions.partition_of(gid), group, writes)
    if mgr.interop is not None:
        mgr.interop.after_apply(out, now_ms)
    if refreshed:
        group.set_metadata_refresh_deadline(now_ms, group_epoch)
    if created:
        # Born at epoch 1 (no record says so): counted as the epoch's first move.
        out.events.append(ConsumerGroupEpochBumped(gid, 1, "group created", "created"))
    if bump.causes:
        out.events.append(
            ConsumerGroupEpochBumped(gid, group.group_epoch, "; ".join(bump.causes), bump.kinds[0])
        )
    if replaced is not None:
        mgr.cancel_member_timers(gid, replaced.member_id)
    if not member.uses_classic_protocol:
        _arm_member_timers(mgr, out, gid, old, member, now_ms)
    if refresh_regex or updated.subscribed_topic_regex or group.regex_count:
        mgr.maybe_refresh_regexes(out, group, now_ms, refresh_regex)
    return member


def _subscription_changes(
    mgr: ConsumerGroupManager,
    writes: list[rec.TypedRecord],
    group: ConsumerGroup,
    old: ConsumerGroupMember,
    updated: ConsumerGroupMember,
    replaced: ConsumerGroupMember | None,
    is_new: bool,
    what: str,
    bump: _Bump,
) -> bool:
    """The member's subscription records and the epoch bumps they call for (names, regular
    expressions, the preferred assignor); True if a new regular expression needs resolving."""
    gid = group.group_id
    if is_new or not updated.same_subscription(old):
        writes.append(rec.member_subscription(gid, updated))
        if updated.subscribed_topic_names != old.subscribed_topic_names:
            bump.add(
                "subscription",
                f"member {updated.member_id} {'joined' if is_new else 'changed'} "
                f"subscribing to {sorted(updated.subscribed_topic_names)}",
            )
    # Regular expressions (Kafka's maybeUpdateRegularExpressions).
    refresh_regex = False
    old_regex, new_regex = old.subscribed_topic_regex, updated.subscribed_topic_regex
    counted = not is_new and replaced is None
    if old_regex != new_regex:
        if old_regex and counted and group.regex_count.get(old_regex, 0) == 1:
            writes.append(rec.regex(gid, old_regex, None))
            if old_regex in group.resolved_regexes:
                bump.add("regex", f"member {updated.member_id} dropped regex {old_regex!r}")
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
                bump.add("regex", f"member {updated.member_id} subscribed to regex {new_regex!r}")

    # A change of the group's preferred server assignor (the one most members name)
    # calls for a new target too (Kafka 4.3+'s hasPreferredServerAssignorChanged; a
    # classic member's JoinGroup does not look, as Kafka's does not).
    if what == "heartbeat":
        before = group.preferred_assignor(mgr.default_assignor)
        after = _preferred_assignor(
            group, old if counted else replaced, updated, mgr.default_assignor
        )
        if after != before:
            bump.add(
                "assignor",
                f"member {updated.member_id} changed the preferred assignor from "
                f"{before} to {after}",
            )
    return refresh_regex


def _epoch_and_target(
    mgr: ConsumerGroupManager,
    writes: list[rec.TypedRecord],
    group: ConsumerGroup,
    old: ConsumerGroupMember,
    updated: ConsumerGroupMember,
    replaced: ConsumerGroupMember | None,
    is_new: bool,
    now_ms: int,
    bump: _Bump,
) -> tuple[int, bool, int, Assignment]:
    """The group epoch record (when bumped or the topics' metadata changed) and the target
    assignment (Kafka's updateTargetAssignment, computed lazily).

    Returns (group epoch, whether the metadata was looked at, target epoch, the member's
    target)."""
    gid = group.group_id
    group_epoch = group.group_epoch
    counted = not is_new and replaced is None
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
    if bump.kinds or group.has_metadata_expired(now_ms):
        refreshed = True
        names = set(names_count)
        for v in resolved_after.values():
            names |= v.topics
        metadata_hash = group_hash(names, mgr.topics, mgr.topic_hash_cache)
        if metadata_hash != group.metadata_hash and not bump.kinds:
            bump.add("metadata", "the subscribed topics' metadata changed")
        if bump.kinds:
            group_epoch += 1
            writes.append(rec.consumer_group_metadata(gid, group_epoch, metadata_hash))
        if group.has_legacy_partition_metadata:
            writes.append(rec.legacy_partition_metadata_tombstone(gid))

    if group_epoch <= group.assignment_epoch:
        stored = group.target.get(updated.member_id)
        if stored is None and replaced is not None:
            stored = group.target.get(replaced.member_id)
        return group_epoch, refreshed, group.assignment_epoch, {} if stored is None else stored
    name = _preferred_assignor(group, old if counted else replaced, updated, mgr.default_assignor)
    try:
        targets, changed = mgr.compute_target(
            group,
            updated,
            replaced.member_id if replaced is not None else None,
            frozenset(),
            mgr.topics,
            mgr.assignors[name],
            subscription_type,
            {r: v.topics for r, v in resolved_after.items()},
            group.spec_cache,
            mgr.topics_changes,
        )
    except PartitionAssignorError:
        raise HeartbeatError(ErrorCode.UNKNOWN) from None
    for mid, parts in changed:
        writes.append(rec.target_member(gid, mid, parts))
    writes.append(rec.target_metadata(gid, group_epoch))
    return group_epoch, refreshed, group_epoch, targets[updated.member_id]


def _arm_member_timers(
    mgr: ConsumerGroupManager,
    out: Result,
    gid: str,
    old: ConsumerGroupMember,
    member: ConsumerGroupMember,
    now_ms: int,
) -> None:
    """A consumer-protocol member's timers: the revocation deadline, and its session."""
    if member.state is _UNREVOKED and not member.same_assignment(old):
        mgr.timers.schedule(
            out,
            consumer_rebalance_key(gid, member.member_id),
            now_ms + member.rebalance_timeout_ms,
            TimerAction(TimerKind.CONSUMER_REBALANCE, gid, member.member_id, member.member_epoch),
        )
    elif member.state is not _UNREVOKED:
        mgr.timers.cancel(consumer_rebalance_key(gid, member.member_id))
    mgr.schedule_session(out, gid, member.member_id, now_ms)


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
