"""``kgc offsets translate``: carry a group's position to another cluster holding the same records.

How this works: the group's committed offsets are read on the source (``--bootstrap-server``);
for each partition (``--topic`` narrows them) the source's records around the committed
offset are fetched and the record it points at is found on the target
(``--to-bootstrap-server``, secured by ``--to-command-config``) by timestamp, then by
content, as ``tools.translate`` describes; the offset found there is the new one. A
partition that cannot be placed exactly (its records gone on the source, no copy or more
than one on the target, the topic missing there) is listed with the reason and left as it
is. The plan is printed as ``kgc offsets reset`` prints it (with each source offset) and
committed on the target only with ``--execute``, as an admin, which the target accepts only
for a group without active members: that is checked before anything is read, as are the
group's existence on the source and the target's reachability, so bad input ends in one
line and changes nothing.
"""

from __future__ import annotations

import argparse
from typing import Any

from coordinator.tools.admin import Admin, AdminError, Unreachable, UsageError
from coordinator.tools.client import ClientConfigError, ClientSecurity
from coordinator.tools.commands.common import EXIT_OK, admin_for, leaf
from coordinator.tools.commands.offsets import _topic_partitions
from coordinator.tools.output import Output, records
from coordinator.tools.reader import PartitionReader
from coordinator.tools.translate import (
    CONTEXT,
    Placement,
    Rec,
    anchor_for,
    place,
    scan_done,
    scanned_past,
)

__all__ = ["add_commands"]

TopicPartition = tuple[str, int]
_PLAN = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "SOURCE-OFFSET"]
_LOOK_BACK = 4 * CONTEXT  # offsets read before a position for its context (markers between)


def _read(
    reader: PartitionReader, frm: int, end: int, *, until: int = -1, want: int = 0
) -> list[Rec]:
    """Data records from ``frm``: those before ``until``, or (``until`` < 0) at least
    ``want`` of them, never past the log end ``end``."""
    out: list[Rec] = []
    pos = frm
    while pos < end and (pos < until if until >= 0 else len(out) < want):
        got, pos = reader.read(pos)
        out += got
    return [r for r in out if r.offset < until] if until >= 0 else out


def _scan(reader: PartitionReader, frm: int, end: int, timestamp: int) -> tuple[list[Rec], bool]:
    """Target records from ``frm`` until ``scan_done`` or the log end (then whether the scan
    was complete), plus ``CONTEXT`` more so the last ones have their neighbours."""
    out: list[Rec] = []
    pos = frm
    while pos < end and not scan_done(out, timestamp):
        got, pos = reader.read(pos)
        out += got
    complete = pos >= end or scanned_past(out, timestamp)
    out += _read(reader, pos, end, want=CONTEXT)
    return out, complete


def _place_one(source: Admin, target: Admin, tp: TopicPartition, committed: int) -> Placement:
    topic, partition = tp
    try:
        src = PartitionReader(source, topic, partition)
    except AdminError as exc:
        return Placement(None, f"on the source: {exc}")
    start, end = src.bounds()
    if committed < start:
        return Placement(
            None,
            f"the committed offset is before the source's log start offset {start}: "
            "the records it points at are gone",
        )
    if committed > end:
        return Placement(None, f"the committed offset is past the source's log end offset {end}")
    before = _read(src, max(start, committed - _LOOK_BACK), end, until=committed)
    after = _read(src, committed, end, want=CONTEXT + 1)
    anchor = anchor_for(committed, before, after)
    if anchor is None:
        return Placement(None, "the source holds no record around the committed offset")
    try:
        dst = PartitionReader(target, topic, partition)
    except AdminError as exc:
        return Placement(None, f"on the target: {exc}")
    tstart, tend = dst.bounds()
    ts = anchor.record.timestamp
    at = dst.offset_for_time(ts)
    if at < 0:
        return Placement(
            None, f"no record on the target has a timestamp at or after {ts} (the anchor's)"
        )
    prefix = _read(dst, max(tstart, at - _LOOK_BACK), tend, until=at)[-CONTEXT:]
    scanned, complete = _scan(dst, at, tend, ts)
    return place(anchor, prefix + scanned, len(prefix), complete)


def _target_admin(args: argparse.Namespace) -> Admin:
    try:
        security = ClientSecurity.load(args.to_command_config) if args.to_command_config else None
    except ClientConfigError as exc:
        raise UsageError(f"--to-command-config: {exc}") from None
    return Admin(args.to_bootstrap_server, timeout=args.timeout or 10.0, security=security)


def _source_offsets(admin: Admin, args: argparse.Namespace) -> dict[TopicPartition, int]:
    committed = {tp: off for tp, (off, _m) in admin.committed_offsets(args.group).items()}
    if not committed:
        desc = admin.describe_group(args.group)
        if desc.state == "Dead":
            raise AdminError(f"group {args.group!r} does not exist on {args.bootstrap_server}")
        raise AdminError(
            f"group {args.group!r} has no committed offsets on {args.bootstrap_server}"
        )
    scope = args.topic or []
    if scope:
        committed = {
            tp: off
            for tp, off in committed.items()
            if any(tp[0] == t and (ps is None or tp[1] in ps) for t, ps in scope)
        }
        if not committed:
            raise AdminError(
                f"group {args.group!r} has no committed offsets for "
                + ", ".join(t for t, _ in scope)
            )
    return committed


def _target_current(target: Admin, args: argparse.Namespace) -> dict[TopicPartition, int]:
    desc = target.describe_group(args.group)
    if desc.members or desc.state not in ("Empty", "Dead"):
        raise AdminError(
            f"offsets can only be translated to a group without active members; "
            f"{args.group!r} is {desc.state} on {args.to_bootstrap_server} with "
            f"{len(desc.members)} member(s): stop its consumers there first"
        )
    if desc.state == "Dead":
        return {}
    return {tp: off for tp, (off, _m) in target.committed_offsets(args.group).items()}


def cmd_offsets_translate(args: argparse.Namespace) -> int:
    out = Output(args)
    with admin_for(args) as source, _target_admin(args) as target:
        committed = _source_offsets(source, args)
        try:
            current = _target_current(target, args)
        except Unreachable as exc:  # the hint names the target's own option
            raise Unreachable(
                "target: " + str(exc).replace("--command-config", "--to-command-config")
            ) from None
        new: dict[TopicPartition, int] = {}
        unplaced: list[dict[str, Any]] = []
        for tp, off in sorted(committed.items()):
            placed = _place_one(source, target, tp, off)
            if placed.offset is None:
                unplaced.append(
                    {"topic": tp[0], "partition": tp[1], "source_offset": off,
                     "reason": placed.reason}
                )  # fmt: skip
            else:
                new[tp] = placed.offset
        if not new:
            raise AdminError(
                f"no committed offset of group {args.group!r} could be placed on "
                f"{args.to_bootstrap_server}: "
                + "; ".join(f"{u['topic']}-{u['partition']}: {u['reason']}" for u in unplaced)
            )
        if args.execute:
            target.commit_offsets(args.group, new)
    rows = [
        [args.group, t, p, current.get((t, p)), off, committed[(t, p)]]
        for (t, p), off in sorted(new.items())
    ]
    warnings = [
        f"{u['topic']}-{u['partition']} (source offset {u['source_offset']}) was not placed "
        f"and is left as it is: {u['reason']}"
        for u in unplaced
    ]
    if out.json:
        out.dump(
            {
                "group": args.group,
                "to_bootstrap_server": args.to_bootstrap_server,
                "executed": bool(args.execute),
                "offsets": records(_PLAN, rows),
                "unplaced": unplaced,
                "warnings": warnings,
            }
        )
        return EXIT_OK
    for w in warnings:
        out.note(f"kgc: warning: {w}")
    out.table(_PLAN, rows)
    out.note(
        f"Offsets committed on {args.to_bootstrap_server}."
        if args.execute
        else "Dry run: nothing was changed. Add --execute to commit these offsets."
    )
    return EXIT_OK


def add_commands(common: argparse.ArgumentParser, offsets: Any) -> None:
    """``translate`` under ``kgc offsets``."""
    p = leaf(common, offsets, "translate", cmd_offsets_translate,
             "carry a group's committed offsets to another cluster holding the same records "
             "(found by timestamp, then key, value and headers; dry run unless --execute; "
             "the group must have no active members there)")  # fmt: skip
    p.add_argument("group")
    p.add_argument("--to-bootstrap-server", required=True, metavar="HOST:PORT",
                   help="the cluster to commit the translated offsets on")  # fmt: skip
    p.add_argument("--to-command-config", metavar="FILE", default=None,
                   help="client.properties with the target listener's security settings "
                   "(as --command-config; default: PLAINTEXT)")  # fmt: skip
    p.add_argument("--topic", type=_topic_partitions, action="append", metavar="TOPIC[:P[,P...]]",
                   help="only this topic, optionally some partitions (repeatable)")  # fmt: skip
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets on the target")
    mode.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
