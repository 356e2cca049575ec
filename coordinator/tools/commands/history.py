"""``kgc offsets history|restore|undo`` and ``kgc groups history``: a group's kept history.

How this works: every command reads the group's history from its coordinator with kgc's
DescribeGroupHistory (``apis/history.py``; DESCRIBE on the group). ``offsets history`` lists
each change of a committed offset, oldest first; ``groups history`` the group's
rebalances and epoch bumps with their cause and member. ``offsets restore --as-of`` sets
each partition back to the offset it had at that time: the last change at or before it
(partitions without one are left as they are and listed). ``offsets undo`` reverts the
group's last admin change -- the offsets one admin request (a reset, a restore, an
import, a delete) changed, found as the newest admin entries of one time and client --
setting each partition back to the offset just before it (deleting an offset that did
not exist before). Both plan first and commit only with ``--execute``, as an admin
(OffsetCommit with generation -1, OffsetDelete), and, as ``kgc offsets reset``, only for a
group without active members; a time before the retained history is refused.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from coordinator.history.model import EXPIRED_CLIENT, TRANSACTION_CLIENT
from coordinator.tools.admin import Admin, AdminError
from coordinator.tools.commands.common import EXIT_OK, admin_for, leaf
from coordinator.tools.commands.offsets import _datetime_ms, _topic_partitions
from coordinator.tools.output import Output, records

__all__ = ["add_group_commands", "add_offset_commands"]

DELETED = -1
TopicPartition = tuple[str, int]
_PLAN = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def _scope(args: argparse.Namespace) -> dict[str, list[int] | None] | None:
    """``--topic`` as DescribeGroupHistory's filter (None: every topic; a topic's None:
    every partition of it)."""
    topics = getattr(args, "topic", None)
    if not topics:
        return None
    scope: dict[str, list[int] | None] = {}
    for topic, parts in topics:
        had = scope.get(topic, [])
        scope[topic] = None if parts is None or had is None else sorted({*had, *parts})
    return scope


def _in_scope(scope: dict[str, list[int] | None] | None, tp: TopicPartition) -> bool:
    if scope is None:
        return True
    if tp[0] not in scope:
        return False
    parts = scope[tp[0]]
    return parts is None or tp[1] in parts


def _not_admin(member_id: str, client_id: str) -> str | None:
    """What made a change without a member that is not an admin's: the offsets retention
    or a transaction's COMMIT marker (the server names them in the client id)."""
    if member_id:
        return None
    if client_id == EXPIRED_CLIENT:
        return "(expiry)"
    if client_id.startswith(TRANSACTION_CLIENT):
        return "(transaction)"
    return None


def cmd_offsets_history(args: argparse.Namespace) -> int:
    out = Output(args)
    with admin_for(args) as admin:
        resp = admin.group_history(args.group, args.from_ms, args.to_ms, _scope(args))
    columns = [
        "TIME", "TIMESTAMP-MS", "TOPIC", "PARTITION", "OFFSET", "PREVIOUS-OFFSET",
        "LEADER-EPOCH", "METADATA", "COMMIT-TIMESTAMP-MS", "MEMBER-ID", "CLIENT-ID",
        "CLIENT-HOST", "ADMIN", "UNCHANGED-COMMITS",
    ]  # fmt: skip
    rows = [
        [
            iso(c.timestamp_ms), c.timestamp_ms, c.topic, c.partition_index,
            None if c.committed_offset == DELETED else c.committed_offset,
            None if c.previous_offset < 0 else c.previous_offset,
            c.committed_leader_epoch, c.metadata, c.commit_timestamp_ms, c.member_id,
            c.client_id, c.client_host,
            not c.member_id and _not_admin(c.member_id, c.client_id) is None,
            c.unchanged_commits,
        ]
        for c in resp.offset_changes
    ]  # fmt: skip
    if out.json:
        out.dump(records(columns, rows))
    else:
        keep = [0, 2, 3, 4, 5, 9, 10, 11, 13]
        table = [[r[i] for i in keep] for r in rows]
        for row in table:
            if not row[5]:
                row[5] = _not_admin("", str(row[6] or "")) or "(admin)"
            if row[3] is None:
                row[3] = "(deleted)"
        out.table(
            [
                "TIME",
                "TOPIC",
                "PARTITION",
                "OFFSET",
                "PREVIOUS",
                "MEMBER-ID",
                "CLIENT-ID",
                "HOST",
                "UNCHANGED",
            ],
            table,
        )
        if not rows:
            out.note(f"group {args.group} has no offset changes in that time")
    return EXIT_OK


_CONSUMER_KINDS = ("epoch_bumped", "members_fenced")


def cmd_groups_history(args: argparse.Namespace) -> int:
    out = Output(args)
    with admin_for(args) as admin:
        resp = admin.group_history(args.group, args.from_ms, args.to_ms)
    items = []
    for m in resp.membership_changes:
        epoch = m.kind in _CONSUMER_KINDS
        items.append(
            {
                "time": iso(m.timestamp_ms),
                "timestamp_ms": m.timestamp_ms,
                "kind": m.kind,
                ("epoch" if epoch else "generation"): m.generation_or_epoch,
                "cause": m.cause,
                "member_id": m.member_id,
                "members": None if m.members < 0 else m.members,
                "duration_ms": None if m.duration_ms < 0 else m.duration_ms,
                "reason": m.reason,
            }
        )
    if out.json:
        out.dump(items)
        return EXIT_OK
    rows = [
        [
            i["time"], i["kind"], i.get("generation", i.get("epoch")), i["cause"] or None,
            i["member_id"] or None, i["members"], i["duration_ms"], i["reason"] or None,
        ]
        for i in items
    ]  # fmt: skip
    out.table(
        [
            "TIME",
            "KIND",
            "GENERATION/EPOCH",
            "CAUSE",
            "MEMBER-ID",
            "MEMBERS",
            "DURATION-MS",
            "REASON",
        ],
        rows,
    )
    if not rows:
        out.note(f"group {args.group} has no membership changes in that time")
    return EXIT_OK


def _inactive(admin: Admin, group: str, what: str) -> dict[TopicPartition, int]:
    """The group's committed offsets; refused while it has active members (as a reset)."""
    desc = admin.describe_group(group)
    if desc.members or desc.state not in ("Empty", "Dead"):
        raise AdminError(
            f"offsets can only be {what} while a group has no active members; {group!r} is "
            f"{desc.state} with {len(desc.members)} member(s): stop its consumers first"
        )
    return {tp: off for tp, (off, _m) in admin.committed_offsets(group).items()}


def _history_since(resp: Any, group: str, as_of: int) -> None:
    if resp.history_start_ms < 0:
        raise AdminError(f"group {group!r} has no history kept (nothing was committed since)")
    if as_of < resp.history_start_ms:
        raise AdminError(
            f"{iso(as_of)} is before the history kept for group {group!r}, which starts at "
            f"{iso(resp.history_start_ms)} (offsets.history.retention.ms={resp.retention_ms})"
        )


def _execute(admin: Admin, group: str, new: dict[TopicPartition, int]) -> None:
    commits = {tp: off for tp, off in new.items() if off != DELETED}
    if commits:
        admin.commit_offsets(group, commits)
    deletes: dict[str, list[int]] = {}
    for (t, p), off in sorted(new.items()):
        if off == DELETED:
            deletes.setdefault(t, []).append(p)
    for t, ps in deletes.items():
        admin.delete_offsets(group, t, ps)


def _show(
    out: Output,
    args: argparse.Namespace,
    current: dict[TopicPartition, int],
    new: dict[TopicPartition, int],
    warnings: list[str],
) -> None:
    rows = [
        [args.group, t, p, current.get((t, p)), None if off == DELETED else off]
        for (t, p), off in sorted(new.items())
    ]
    for w in warnings:
        out.note(f"kgc: warning: {w}")
    if out.json:
        out.dump(
            {
                "group": args.group,
                "executed": bool(args.execute),
                "offsets": records(_PLAN, rows),
                "warnings": warnings,
            }
        )
        return
    out.table(_PLAN, rows)
    out.note(
        "Offsets committed."
        if args.execute
        else "Dry run: nothing was changed. Add --execute to commit these offsets."
    )


def cmd_offsets_restore(args: argparse.Namespace) -> int:
    out = Output(args)
    as_of = args.as_of
    warnings: list[str] = []
    with admin_for(args) as admin:
        resp = admin.group_history(args.group, topics=_scope(args))
        _history_since(resp, args.group, as_of)
        current = _inactive(admin, args.group, "restored")
        at: dict[TopicPartition, int] = {}
        known: set[TopicPartition] = set(current)
        for c in resp.offset_changes:  # oldest first: the last one at or before wins
            tp = (c.topic, c.partition_index)
            known.add(tp)
            if c.timestamp_ms <= as_of:
                at[tp] = c.committed_offset
        scope = _scope(args)
        new: dict[TopicPartition, int] = {}
        for tp in sorted(known):
            if not _in_scope(scope, tp):
                continue
            off = at.get(tp, DELETED)
            if off == DELETED:
                warnings.append(
                    f"{tp[0]}-{tp[1]} had no committed offset at {iso(as_of)}: left at "
                    + ("none" if tp not in current else str(current[tp]))
                )
                continue
            new[tp] = off
        if not new:
            raise AdminError(f"group {args.group!r} had no committed offsets at {iso(as_of)}")
        if args.execute:
            _execute(admin, args.group, new)
    _show(out, args, current, new, warnings)
    return EXIT_OK


def cmd_offsets_undo(args: argparse.Namespace) -> int:
    out = Output(args)
    warnings: list[str] = []
    with admin_for(args) as admin:
        resp = admin.group_history(args.group)
        admin_changes = [
            c
            for c in resp.offset_changes
            if not c.member_id and _not_admin(c.member_id, c.client_id) is None
        ]
        if not admin_changes:
            raise AdminError(f"group {args.group!r} has no admin change of its offsets to undo")
        last = admin_changes[-1]
        op = [
            c
            for c in admin_changes
            if c.timestamp_ms == last.timestamp_ms and c.client_id == last.client_id
        ]
        current = _inactive(admin, args.group, "undone")
        new: dict[TopicPartition, int] = {}
        for c in op:
            new[(c.topic, c.partition_index)] = (
                c.previous_offset if c.previous_offset >= 0 else DELETED
            )
        for c in resp.offset_changes:
            tp = (c.topic, c.partition_index)
            if c.timestamp_ms > last.timestamp_ms and tp in new:
                warnings.append(
                    f"{tp[0]}-{tp[1]} changed again after that change (to {c.committed_offset} "
                    f"at {iso(c.timestamp_ms)}): undo sets it back all the same"
                )
        new = {tp: off for tp, off in new.items() if not (off == DELETED and tp not in current)}
        out.note(
            f"undoing the admin change of {iso(last.timestamp_ms)} by client "
            f"{last.client_id or '-'} from {last.client_host or '-'} ({len(op)} partition(s))"
        )
        if args.execute and new:
            _execute(admin, args.group, new)
    _show(out, args, current, new, warnings)
    return EXIT_OK


def _times(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="from_ms", type=_datetime_ms, default=-1, metavar="ISO",
                   help="only what happened at or after this time (ISO 8601; no zone = local)")  # fmt: skip
    p.add_argument("--to", dest="to_ms", type=_datetime_ms, default=-1, metavar="ISO",
                   help="only what happened at or before this time")  # fmt: skip


def _topics(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", type=_topic_partitions, action="append", metavar="TOPIC[:P[,P...]]",
                   help="only this topic, optionally some partitions (repeatable)")  # fmt: skip


def _mode(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")


def add_offset_commands(common: argparse.ArgumentParser, offsets: Any) -> None:
    """``history``, ``restore``, ``undo`` under ``kgc offsets``."""
    p = leaf(common, offsets, "history", cmd_offsets_history,
             "each change of a group's committed offsets, oldest first (kgc keeps them for "
             "offsets.history.retention.ms)")  # fmt: skip
    p.add_argument("group")
    _topics(p)
    _times(p)
    p = leaf(common, offsets, "restore", cmd_offsets_restore,
             "set a group's offsets back to what they were at a time (dry run unless "
             "--execute; the group must have no active members)")  # fmt: skip
    p.add_argument("group")
    p.add_argument("--as-of", required=True, type=_datetime_ms, metavar="ISO",
                   help="the time to go back to (ISO 8601; no zone = local time)")  # fmt: skip
    _topics(p)
    _mode(p)
    p = leaf(common, offsets, "undo", cmd_offsets_undo,
             "undo the last admin change of a group's offsets (a reset, restore, import or "
             "delete; dry run unless --execute; no active members)")  # fmt: skip
    p.add_argument("group")
    _mode(p)


def add_group_commands(common: argparse.ArgumentParser, groups: Any) -> None:
    """``history`` under ``kgc groups``."""
    p = leaf(common, groups, "history", cmd_groups_history,
             "a group's rebalances (classic) and epoch bumps (consumer groups) with their "
             "cause and member, oldest first")  # fmt: skip
    p.add_argument("group")
    _times(p)
