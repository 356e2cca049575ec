"""Moving one member towards its target, revoke before assign (Kafka's streams CurrentAssignmentBuilder).

How this works: ``reconcile`` takes the member, the target epoch and tasks, who holds which
task (the group's indexes: the process holding each active task, the processes holding each
standby and warm-up) and the tasks the member reported owning (None when the heartbeat did
not carry them), and returns the member's next state; the caller writes a record when it
changed. From its state:

* STABLE at an older epoch, or UNRELEASED_TASKS: compute the next assignment;
* UNREVOKED_TASKS: wait until the member reports none of its pending-revocation tasks,
  then compute the next assignment at epoch + 1;
* UNKNOWN: fence it unless it reports owning nothing.

The next assignment, per role: kept = current & target (actives keep their epoch),
revoke = current - kept, add = target - kept - unreleased (new actives get the target
epoch). An active task is unreleased while any process runs it (assigned or pending
revocation) or another member of this process holds it as standby or warm-up; a standby
while this process runs it as active (another member), holds it as standby, or another
member of it holds it as warm-up; a warm-up likewise. A role change within the member
takes effect at once (an active demoted to standby, standby <-> warm-up), and a standby or
warm-up being promoted stays until the active is granted. Then: something to revoke that
the member still owns -> UNREVOKED_TASKS at epoch e with the kept tasks; else something
to add -> the target epoch with kept + added (UNRELEASED_TASKS if something was held back,
else STABLE); else held back -> UNRELEASED_TASKS; else STABLE.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from coordinator.group.streams.group import (
    Active,
    MemberState,
    StreamsGroupMember,
    Tasks,
    TasksTuple,
)

__all__ = ["FencedUnknownState", "reconcile"]


class FencedUnknownState(Exception):
    """A member in an unknown state reported tasks: FENCED_MEMBER_EPOCH."""


Owners = Callable[[str, int], set[str]]


def _contains_any(owned: TasksTuple, active: Active, standby: Tasks, warmup: Tasks) -> bool:
    for mine, theirs in ((owned.active, active), (owned.standby, standby), (owned.warmup, warmup)):
        for s, ps in theirs.items():
            got = mine.get(s)
            if got and not got.isdisjoint(ps):
                return True
    return False


def reconcile(
    member: StreamsGroupMember,
    target_epoch: int,
    target: TasksTuple,
    active_owner: Callable[[str, int], str | None],
    standby_owners: Owners,
    warmup_owners: Owners,
    owned: TasksTuple | None,
) -> StreamsGroupMember:
    """The member's next assignment state (the member itself when nothing changes)."""
    st = member.state
    if st == MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        epoch = member.member_epoch
    elif st == MemberState.UNREVOKED_TASKS:
        if owned is None or _contains_any(
            owned, member.pending_active, member.pending_standby, member.pending_warmup
        ):
            return member
        epoch = member.member_epoch + 1
    elif st == MemberState.UNRELEASED_TASKS:
        epoch = member.member_epoch
    else:
        if owned is None or not owned.is_empty():
            raise FencedUnknownState(
                "The streams group member is in a unknown state. "
                "The member must abandon all its tasks and rejoin."
            )
        epoch = target_epoch
    return _next(
        member, epoch, target_epoch, target, active_owner, standby_owners, warmup_owners, owned
    )


def _diff_active(
    current: Active,
    target: Tasks,
    target_epoch: int,
    unreleased: Callable[[str, int], bool],
) -> tuple[dict[str, dict[int, int]], dict[str, dict[int, int]], dict[str, dict[int, int]], bool]:
    kept: dict[str, dict[int, int]] = {}
    revoke: dict[str, dict[int, int]] = {}
    add: dict[str, dict[int, int]] = {}
    held = False
    for s in set(current) | set(target):
        cur = current.get(s, {})
        tgt = target.get(s, frozenset())
        k = {p: e for p, e in cur.items() if p in tgt}
        r = {p: e for p, e in cur.items() if p not in k}
        a: dict[int, int] = {}
        for p in tgt:
            if p in k:
                continue
            if unreleased(s, p):
                held = True
            else:
                a[p] = target_epoch
        if k:
            kept[s] = k
        if r:
            revoke[s] = r
        if a:
            add[s] = a
    return kept, revoke, add, held


def _diff(
    current: Tasks, target: Tasks, unreleased: Callable[[str, int], bool]
) -> tuple[dict[str, set[int]], dict[str, set[int]], dict[str, set[int]], bool]:
    kept: dict[str, set[int]] = {}
    revoke: dict[str, set[int]] = {}
    add: dict[str, set[int]] = {}
    held = False
    for s in set(current) | set(target):
        cur = current.get(s, frozenset())
        tgt = target.get(s, frozenset())
        k = set(cur & tgt)
        r = set(cur - k)
        a = set()
        for p in tgt - k:
            if unreleased(s, p):
                held = True
            else:
                a.add(p)
        if k:
            kept[s] = k
        if r:
            revoke[s] = r
        if a:
            add[s] = a
    return kept, revoke, add, held


def _has(tasks: dict[str, set[int]] | dict[str, dict[int, int]] | Tasks, s: str, p: int) -> bool:
    got = tasks.get(s)
    return got is not None and p in got


def _remove(tasks: dict[str, set[int]], s: str, p: int) -> None:
    got = tasks.get(s)
    if got is not None and p in got:
        got.discard(p)
        if not got:
            del tasks[s]


def _grant(pending: dict[str, set[int]], assigned: dict[str, set[int]], s: str, p: int) -> None:
    _remove(pending, s, p)
    assigned.setdefault(s, set()).add(p)


def _role_changes(
    member: StreamsGroupMember,
    target: TasksTuple,
    s_kept: dict[str, set[int]],
    s_revoke: dict[str, set[int]],
    s_add: dict[str, set[int]],
    w_kept: dict[str, set[int]],
    w_revoke: dict[str, set[int]],
    w_add: dict[str, set[int]],
) -> None:
    """Role changes within the member take effect at once (Kafka 4.4): a demoted active
    becomes a standby now (the active stays pending revocation), standby <-> warm-up swap in
    place, and a standby or warm-up promoted to active needs no revocation."""
    cur_active, cur_standby, cur_warmup = member.active, member.standby, member.warmup
    for s, parts in cur_active.items():
        for p in parts:
            if _has(s_add, s, p):
                _grant(s_add, s_kept, s, p)
    for outgoing, out_revoke, incoming_add, incoming_kept in (
        (cur_standby, s_revoke, w_add, w_kept),
        (cur_warmup, w_revoke, s_add, s_kept),
    ):
        for s, ps in outgoing.items():
            for p in ps:
                if _has(incoming_add, s, p):
                    _grant(incoming_add, incoming_kept, s, p)
                    _remove(out_revoke, s, p)

    for role, revoke in ((cur_standby, s_revoke), (cur_warmup, w_revoke)):
        for s, ps in role.items():
            for p in ps:
                if p in target.active.get(s, frozenset()):
                    _remove(revoke, s, p)


def _keep_promoted(
    member: StreamsGroupMember,
    target: TasksTuple,
    to_revoke: bool,
    a_add: dict[str, dict[int, int]],
    s_kept: dict[str, set[int]],
    w_kept: dict[str, set[int]],
) -> None:
    """A standby or warm-up being promoted stays until its active task is granted."""
    for role, kept in ((member.standby, s_kept), (member.warmup, w_kept)):
        for s, ps in role.items():
            tgt_active = target.active.get(s, frozenset())
            granted = a_add.get(s, {})
            for p in ps:
                promoted_now = not to_revoke and p in granted
                if p in tgt_active and not promoted_now:
                    kept.setdefault(s, set()).add(p)


def _next(
    member: StreamsGroupMember,
    epoch: int,
    target_epoch: int,
    target: TasksTuple,
    active_owner: Callable[[str, int], str | None],
    standby_owners: Owners,
    warmup_owners: Owners,
    owned: TasksTuple | None,
) -> StreamsGroupMember:
    pid = member.process_id
    cur_active, cur_standby, cur_warmup = member.active, member.standby, member.warmup

    def other_here(owners: Owners, mine: Tasks, s: str, p: int) -> bool:
        return pid in owners(s, p) and not _has(mine, s, p)

    def unreleased_active(s: str, p: int) -> bool:
        return (
            active_owner(s, p) is not None
            or other_here(standby_owners, cur_standby, s, p)
            or other_here(warmup_owners, cur_warmup, s, p)
        )

    def unreleased_standby(s: str, p: int) -> bool:
        return (
            (active_owner(s, p) == pid and not _has(cur_active, s, p))
            or pid in standby_owners(s, p)
            or other_here(warmup_owners, cur_warmup, s, p)
        )

    def unreleased_warmup(s: str, p: int) -> bool:
        return (
            active_owner(s, p) == pid
            or other_here(standby_owners, cur_standby, s, p)
            or pid in warmup_owners(s, p)
        )

    a_kept, a_revoke, a_add, a_held = _diff_active(
        cur_active, target.active, target_epoch, unreleased_active
    )
    s_kept, s_revoke, s_add, s_held = _diff(cur_standby, target.standby, unreleased_standby)
    w_kept, w_revoke, w_add, w_held = _diff(cur_warmup, target.warmup, unreleased_warmup)

    _role_changes(member, target, s_kept, s_revoke, s_add, w_kept, w_revoke, w_add)
    pending_revocation = bool(a_revoke or s_revoke or w_revoke)
    to_revoke = pending_revocation and (
        owned is None
        or _contains_any(
            owned,
            a_revoke,
            {k: frozenset(v) for k, v in s_revoke.items()},
            {k: frozenset(v) for k, v in w_revoke.items()},
        )
    )
    _keep_promoted(member, target, to_revoke, a_add, s_kept, w_kept)

    held = a_held or s_held or w_held
    if to_revoke:
        return dataclasses.replace(
            member,
            state=MemberState.UNREVOKED_TASKS,
            member_epoch=epoch,
            previous_member_epoch=member.member_epoch,
            active=a_kept,
            standby=_frozen(s_kept),
            warmup=_frozen(w_kept),
            pending_active=a_revoke,
            pending_standby=_frozen(s_revoke),
            pending_warmup=_frozen(w_revoke),
        )
    if a_add or s_add or w_add:
        active = {s: dict(eps) for s, eps in a_kept.items()}
        for s, eps in a_add.items():
            active.setdefault(s, {}).update(eps)
        standby = {s: set(ps) for s, ps in s_kept.items()}
        for s, sps in s_add.items():
            standby.setdefault(s, set()).update(sps)
        warmup = {s: set(ps) for s, ps in w_kept.items()}
        for s, wps in w_add.items():
            warmup.setdefault(s, set()).update(wps)
        return _settled(
            member,
            target_epoch,
            MemberState.UNRELEASED_TASKS if held else MemberState.STABLE,
            active,
            standby,
            warmup,
        )
    return _settled(
        member,
        target_epoch,
        MemberState.UNRELEASED_TASKS if held else MemberState.STABLE,
        a_kept,
        s_kept,
        w_kept,
    )


def _frozen(tasks: dict[str, set[int]]) -> Tasks:
    return {s: frozenset(ps) for s, ps in tasks.items() if ps}


def _settled(
    member: StreamsGroupMember,
    target_epoch: int,
    state: int,
    active: dict[str, dict[int, int]],
    standby: dict[str, set[int]],
    warmup: dict[str, set[int]],
) -> StreamsGroupMember:
    return dataclasses.replace(
        member,
        state=state,
        member_epoch=target_epoch,
        previous_member_epoch=member.member_epoch,
        active={s: ps for s, ps in active.items() if ps},
        standby=_frozen(standby),
        warmup=_frozen(warmup),
        pending_active={},
        pending_standby={},
        pending_warmup={},
    )
