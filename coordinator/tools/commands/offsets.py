"""``kgc offsets reset|delete``: change a group's committed offsets.

How this works: a reset computes the new offset of every chosen partition from the log's
start and end offsets (ListOffsets), clamps it into the log as Kafka's tool does, prints the
plan and commits it only with ``--execute`` (OffsetCommit as an admin: generation -1, which
the coordinator accepts only for a group without active members). A delete is OffsetDelete.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from coordinator.tools.admin import EARLIEST, LATEST, Admin, AdminError
from coordinator.tools.commands.common import EXIT_OK, admin_for, leaf
from coordinator.tools.output import Output, records, show


def _topic_partitions(text: str) -> tuple[str, list[int] | None]:
    topic, sep, parts = text.partition(":")
    if not topic:
        raise argparse.ArgumentTypeError(f"bad topic {text!r}: expected TOPIC or TOPIC:P[,P...]")
    if not sep:
        return topic, None
    try:
        return topic, sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bad partitions in {text!r}: expected TOPIC:P[,P...]"
        ) from None


def _datetime_ms(text: str) -> int:
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bad date-time {text!r}: expected ISO 8601, e.g. 2024-05-01T12:00:00Z"
        ) from None
    if dt.tzinfo is None:
        dt = dt.astimezone()  # local time, as Kafka's tool reads it
    return int(dt.timestamp() * 1000)


def _targets(
    admin: Admin,
    group: str,
    topics: list[tuple[str, list[int] | None]],
    committed: dict[tuple[str, int], Any],
) -> list[tuple[str, int]]:
    tps: set[tuple[str, int]] = set()
    for topic, parts in topics:
        try:
            known = set(admin.partitions(topic))
        except AdminError:
            known = {p for t, p in committed if t == topic}
            if not known:
                raise
        chosen = set(parts) if parts is not None else known
        missing = chosen - known
        if missing:
            raise AdminError(f"topic {topic!r} has no partition {min(missing)}")
        tps |= {(topic, p) for p in chosen}
    return sorted(tps)


def cmd_offsets_reset(args: argparse.Namespace) -> int:
    out = Output(args)
    with admin_for(args) as admin:
        desc = admin.describe_group(args.group)
        if desc.members or desc.state not in ("Empty", "Dead"):
            raise AdminError(
                f"offsets of group {args.group!r} can only be reset while it has no active members; "
                f"it is {desc.state} with {len(desc.members)} member(s): stop its consumers first"
            )
        committed = admin.committed_offsets(args.group) if desc.state != "Dead" else {}
        if args.all_topics:
            topics: list[tuple[str, list[int] | None]] = [
                (t, None) for t in sorted({t for t, _ in committed})
            ]
            if not topics:
                raise AdminError(f"group {args.group!r} has no committed offsets to reset")
        else:
            topics = args.topic
        tps = _targets(admin, args.group, topics, committed)
        earliest = admin.log_offsets(tps, EARLIEST)
        latest = admin.log_offsets(tps, LATEST)
        plan: dict[tuple[str, int], int] = {}
        for tp in tps:
            lo, hi = earliest[tp], latest[tp]
            current = committed[tp][0] if tp in committed else None
            if args.to_earliest:
                new = lo
            elif args.to_latest:
                new = hi
            elif args.to_offset is not None:
                new = args.to_offset
            elif args.shift_by is not None:
                if current is None:
                    raise AdminError(f"{tp[0]}-{tp[1]} has no committed offset to shift from")
                new = current + args.shift_by
            else:
                found = admin.log_offsets([tp], args.to_datetime)[tp]
                new = hi if found < 0 else found
            plan[tp] = min(max(new, lo), hi)  # clamped into the log, as Kafka's tool does
        if args.execute:
            admin.commit_offsets(args.group, plan)
    rows = [
        [args.group, t, p, committed[(t, p)][0] if (t, p) in committed else None, off]
        for (t, p), off in sorted(plan.items())
    ]
    if out.json:
        out.dump(
            {
                "group": args.group,
                "executed": bool(args.execute),
                "offsets": records(
                    ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"], rows
                ),
            }
        )
    else:
        out.table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"], rows)
        out.note(
            "Offsets committed."
            if args.execute
            else "Dry run: nothing was changed. Add --execute to commit these offsets."
        )
    return EXIT_OK


def cmd_offsets_delete(args: argparse.Namespace) -> int:
    out = Output(args)
    with admin_for(args) as admin:
        committed = admin.committed_offsets(args.group)
        rows = []
        for topic, parts in args.topic:
            chosen = parts if parts is not None else sorted(p for t, p in committed if t == topic)
            if not chosen:
                continue
            admin.delete_offsets(args.group, topic, chosen)
            rows += [[topic, p, "deleted"] for p in chosen]
    if not rows:
        raise AdminError(
            f"group {args.group!r} has no committed offsets for {', '.join(t for t, _ in args.topic)}"
        )
    show(out, ["TOPIC", "PARTITION", "STATUS"], rows)
    return EXIT_OK


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    offsets = sub.add_parser(
        "offsets", help="reset or delete a group's committed offsets"
    ).add_subparsers(dest="action", required=True)
    p = leaf(
        common,
        offsets,
        "reset",
        cmd_offsets_reset,
        "reset a group's offsets (dry run unless --execute; the group must have no active members)",
    )
    p.add_argument("group")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--topic",
        type=_topic_partitions,
        action="append",
        metavar="TOPIC[:P[,P...]]",
        help="topic, optionally some partitions (repeatable)",
    )
    which.add_argument(
        "--all-topics", action="store_true", help="every topic the group has offsets for"
    )
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped into the log)")
    to.add_argument(
        "--shift-by", type=int, metavar="N", help="the committed offset plus N (may be negative)"
    )
    to.add_argument(
        "--to-datetime",
        type=_datetime_ms,
        metavar="ISO",
        help="the first offset at or after this time (ISO 8601; no zone = local time)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    p = leaf(
        common,
        offsets,
        "delete",
        cmd_offsets_delete,
        "delete a group's committed offsets for a topic (OffsetDelete)",
    )
    p.add_argument("group")
    p.add_argument(
        "--topic",
        type=_topic_partitions,
        action="append",
        required=True,
        metavar="TOPIC[:P[,P...]]",
        help="topic, optionally some partitions (repeatable)",
    )
