"""Reconciliation: moving one member from what it owns towards its target, one step a heartbeat.

How this works (Kafka's ``CurrentAssignmentBuilder``): given the member, its target and the
target epoch, and what the member reports owning (``owned``: None on a partial heartbeat),
compute the member's next (epoch, state, assigned, pending revocation):

* partitions of the target it owns already are kept;
* partitions it owns that are not in the target must be revoked first: while the member
  still reports any of them it stays UNREVOKED_PARTITIONS at its old epoch, with ``assigned``
  cut down to what it keeps (so it learns what to give up) -- the group-wide barrier of the
  classic protocol becomes a per-member one;
* target partitions nobody owns are added, and the member moves to the target epoch;
  target partitions another member still owns (or still has to revoke) are held back
  (UNRELEASED_PARTITIONS) and picked up by a later heartbeat once they are free.

Assignment epochs (Kafka 4.3+, KIP-1251): a partition new to the member gets the target
epoch; a partition it keeps, or must give up, keeps the epoch it was assigned at.

A partial heartbeat (``owned is None``) never acknowledges a revocation. Kafka 4.2's rules
are followed where 4.1 and 4.2 differ (a partition held only by the member's own pending
revocation does not count as unreleased; UNREVOKED retries at the member's epoch).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from coordinator.group.consumer.member import Assignment, ConsumerGroupMember, MemberState

__all__ = ["FencedMemberEpoch", "next_member"]


class FencedMemberEpoch(Exception):
    """The member is in a state it cannot be moved out of (UNKNOWN and still owning)."""


def _owns_any(owned: Mapping[bytes, frozenset[int]] | None, parts: Assignment) -> bool:
    if owned is None:
        return True  # a partial heartbeat acknowledges nothing
    for topic_id, ps in parts.items():
        have = owned.get(topic_id)
        if have and not have.isdisjoint(ps):
            return True
    return False


def next_member(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    owned: Mapping[bytes, frozenset[int]] | None,
    partition_epoch: Callable[[bytes, int], int],
) -> ConsumerGroupMember:
    """The member after one reconciliation step (``member`` itself if nothing changes).

    ``partition_epoch(topic, p)``: the epoch of whoever owns the partition now, -1 if free.
    """
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _compute(
                member, member.member_epoch, target_epoch, target, owned, partition_epoch
            )
        return member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _compute(member, member.member_epoch, target_epoch, target, owned, partition_epoch)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _compute(member, member.member_epoch, target_epoch, target, owned, partition_epoch)
    # UNKNOWN
    if owned is None or any(owned.values()):
        raise FencedMemberEpoch(
            f"The consumer group member {member.member_id} is in an unknown state and must rejoin."
        )
    return _compute(member, target_epoch, target_epoch, target, owned, partition_epoch)


def _compute(
    member: ConsumerGroupMember,
    epoch_to_use: int,
    target_epoch: int,
    target: Assignment,
    owned: Mapping[bytes, frozenset[int]] | None,
    partition_epoch: Callable[[bytes, int], int],
) -> ConsumerGroupMember:
    current = member.assigned
    kept: dict[bytes, frozenset[int]] = {}
    revoke: dict[bytes, frozenset[int]] = {}
    add: dict[bytes, frozenset[int]] = {}
    unreleased = False
    own_pending = member.pending_revocation
    for topic_id in target.keys() | current.keys():
        tgt = target.get(topic_id, frozenset())
        cur = current.get(topic_id, frozenset())
        k = cur & tgt
        if k:
            kept[topic_id] = k
        r = cur - k
        if r:
            revoke[topic_id] = r
        candidates = tgt - k
        if candidates:
            mine = own_pending.get(topic_id, frozenset())
            free = []
            for p in candidates:
                if partition_epoch(topic_id, p) == -1 or p in mine:
                    # Kafka 4.2: a partition held only by this member's own pending
                    # revocation is not someone else's to release.
                    free.append(p)
                else:
                    unreleased = True
            if free:
                add[topic_id] = frozenset(free)
    new = member.copy()
    if revoke and _owns_any(owned, revoke):
        new.state = MemberState.UNREVOKED_PARTITIONS
        new.previous_member_epoch = member.member_epoch
        new.member_epoch = epoch_to_use
        new.assigned = kept
        new.pending_revocation = revoke
        new.assignment_epochs = _epochs(member, (kept, revoke), {}, 0)
    elif add:
        assigned = dict(kept)
        for topic_id, ps in add.items():
            assigned[topic_id] = assigned.get(topic_id, frozenset()) | ps
        new.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        new.previous_member_epoch = member.member_epoch
        new.member_epoch = target_epoch
        new.assigned = assigned
        new.pending_revocation = {}
        new.assignment_epochs = _epochs(member, (kept,), add, target_epoch)
    else:
        new.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        new.previous_member_epoch = member.member_epoch
        new.member_epoch = target_epoch
        new.assigned = kept
        new.pending_revocation = {}
        new.assignment_epochs = _epochs(member, (kept,), {}, 0)
    if new.same_assignment(member):
        return member
    return new


def _epochs(
    member: ConsumerGroupMember,
    held: tuple[Assignment, ...],
    added: Assignment,
    target_epoch: int,
) -> dict[bytes, dict[int, int]]:
    """The assignment epochs after a step: ``held`` (partitions the member had assigned)
    keep theirs, ``added`` ones get ``target_epoch``."""
    out: dict[bytes, dict[int, int]] = {}
    for parts in held:
        for topic_id, ps in parts.items():
            epochs = out.setdefault(topic_id, {})
            for p in ps:
                e = member.epoch_of(topic_id, p)
                epochs[p] = target_epoch if e is None else e
    for topic_id, ps in added.items():
        epochs = out.setdefault(topic_id, {})
        for p in ps:
            epochs[p] = target_epoch
    return out
