"""``kgc offsets reset|delete``: change a group's committed offsets.

How this works: a reset works as Kafka's kafka-consumer-groups.sh --reset-offsets: for each
group (one, several, or ``--all-groups``), every one of which must have no active members,
it takes the scope (``--topic``; ``--all-topics``, the partitions the group has committed
offsets for; or the partitions of a ``--from-file`` CSV) and computes the new offsets from
the log (ListOffsets: start, end, or by time for ``--to-datetime``/``--by-duration``) or from
the committed ones (``--shift-by``, ``--to-current``). Offsets given as numbers
(``--to-offset``, ``--shift-by``, ``--from-file``) are clamped into the log with a warning
each, as Kafka's tool does. The plan is printed (a table, JSON, or with ``--export`` Kafka's
CSV that ``--from-file`` reads back) and committed only with ``--execute`` (OffsetCommit as
an admin: generation -1, which the coordinator accepts only for a group without active
members). A delete is OffsetDelete.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from coordinator.tools.admin import EARLIEST, LATEST, Admin, AdminError, UsageError
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


# java.time.Duration.parse's text form, the one Kafka's --by-duration takes: PnDTnHnMn.nS,
# each number optionally signed, the whole optionally negated, letters in either case.
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def _duration_ms(text: str) -> int:
    """``--by-duration``: an ISO 8601 duration as Java's ``Duration.parse`` reads it, in ms."""
    m = _DURATION.fullmatch(text.strip())
    # as Java: at least one of the parts, and a "T" only with a part after it
    if m is None or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 6)):
        raise argparse.ArgumentTypeError(
            f"bad duration {text!r}: expected PnDTnHnMnS, e.g. PT30M or P1DT12H"
        )
    sign, days, _t, hours, minutes, seconds, fraction = m.groups()
    frac_ms = int((fraction or "").ljust(3, "0")[:3])  # below a millisecond is dropped
    if (seconds or "").startswith("-"):
        frac_ms = -frac_ms  # the fraction takes the seconds' sign: "PT-1.5S" is -1.5 s
    ms = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000
    ms += int(seconds or 0) * 1000 + frac_ms
    return -ms if sign == "-" else ms


def _targets(
    admin: Admin,
    topics: list[tuple[str, list[int] | None]],
    committed: dict[tuple[str, int], int],
) -> list[tuple[str, int]]:
    """``--topic`` scopes: every partition of a topic (as Metadata lists them; for a deleted
    topic, those the group has offsets for), or the partitions named."""
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


@dataclass(slots=True)
class Plan:
    """The new offsets of each group's partitions, and the warnings computing them gave."""

    offsets: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    current: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _read_plan_file(path: Path, groups: list[str]) -> dict[str, dict[tuple[str, int], int]]:
    """``--from-file``: Kafka's reset CSV (no header), ``topic,partition,offset`` for one group
    or ``group,topic,partition,offset``; which one is told by the first line, as Kafka's tool
    tells it (three fields with numbers where numbers belong, and one group asked for)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"--from-file: cannot read {path}: {exc.strerror or exc}") from None
    rows = [(n, r) for n, r in enumerate(csv.reader(io.StringIO(text)), 1) if r]
    if not rows:
        raise UsageError(f"--from-file: {path} has no offsets")

    def numbers(row: list[str]) -> bool:
        return len(row) >= 2 and all(x.strip().lstrip("-").isdigit() for x in row[-2:])

    no_group = len(rows[0][1]) == 3 and numbers(rows[0][1])
    if no_group and len(groups) != 1:
        raise UsageError(
            f"--from-file: {path} has no group column (topic,partition,offset): name one group"
        )
    plan: dict[str, dict[tuple[str, int], int]] = {}
    width = 3 if no_group else 4
    for n, row in rows:
        if len(row) != width or not numbers(row):
            raise UsageError(
                f"--from-file: {path} line {n}: expected "
                + ("topic,partition,offset" if no_group else "group,topic,partition,offset")
            )
        group = groups[0] if no_group else row[0]
        topic, part, off = row[-3:]
        plan.setdefault(group, {})[(topic, int(part))] = int(off)
    return plan


def _clamp(
    group: str,
    wanted: dict[tuple[str, int], int],
    start: dict[tuple[str, int], int],
    end: dict[tuple[str, int], int],
    warnings: list[str],
) -> dict[tuple[str, int], int]:
    """Offsets asked for by number (--to-offset, --shift-by, --from-file) kept inside the log,
    each one moved named in a warning, as Kafka's tool does (checkOffsetsRange)."""
    out: dict[tuple[str, int], int] = {}
    for tp, off in wanted.items():
        if off > end[tp]:
            warnings.append(
                f"group {group}: new offset {off} is higher than the log end offset of "
                f"{tp[0]}-{tp[1]}: set to {end[tp]}"
            )
            off = end[tp]
        elif off < start[tp]:
            warnings.append(
                f"group {group}: new offset {off} is lower than the log start offset of "
                f"{tp[0]}-{tp[1]}: set to {start[tp]}"
            )
            off = start[tp]
        out[tp] = off
    return out


def _by_time(
    admin: Admin, tps: list[tuple[str, int]], timestamp: int, warnings: list[str]
) -> dict[tuple[str, int], int]:
    """The first offset at or after ``timestamp``; the log end where no record is that late."""
    found = admin.log_offsets(tps, timestamp) if tps else {}
    late = [tp for tp in tps if found[tp] < 0]
    if late:
        end = admin.log_offsets(late, LATEST)
        for tp in late:
            warnings.append(
                f"partition {tp[1]} of topic {tp[0]} has no record at or after that time: "
                f"set to its log end offset {end[tp]}"
            )
            found[tp] = end[tp]
    return found


def _plan_group(
    admin: Admin,
    group: str,
    args: argparse.Namespace,
    committed: dict[tuple[str, int], int],
    from_file: dict[tuple[str, int], int] | None,
    now_ms: int,
    warnings: list[str],
) -> dict[tuple[str, int], int]:
    """One group's new offsets, as Kafka's tool computes them (prepareOffsetsToReset)."""
    if from_file is not None:
        tps = sorted(from_file)
    elif args.all_topics:
        tps = sorted(committed)  # Kafka's scope: the partitions the group has offsets for
    else:
        tps = _targets(admin, args.topic, committed)
    if not tps:
        return {}
    if args.to_earliest:
        return admin.log_offsets(tps, EARLIEST)
    if args.to_latest:
        return admin.log_offsets(tps, LATEST)
    if args.to_datetime is not None:
        return _by_time(admin, tps, args.to_datetime, warnings)
    if args.by_duration is not None:
        return _by_time(admin, tps, now_ms - args.by_duration, warnings)
    if args.to_current:
        # the committed offset as it is (not clamped); the log end where there is none
        missing = [tp for tp in tps if tp not in committed]
        ends = admin.log_offsets(missing, LATEST) if missing else {}
        return {tp: committed[tp] if tp in committed else ends[tp] for tp in tps}
    if args.to_offset is not None:
        wanted = dict.fromkeys(tps, args.to_offset)
    elif args.shift_by is not None:
        unknown = [tp for tp in tps if tp not in committed]
        if unknown:
            tp = unknown[0]
            raise AdminError(
                f"group {group!r}: {tp[0]}-{tp[1]} has no committed offset to shift from"
            )
        wanted = {tp: committed[tp] + args.shift_by for tp in tps}
    else:
        assert from_file is not None
        wanted = dict(from_file)
    return _clamp(
        group, wanted, admin.log_offsets(tps, EARLIEST), admin.log_offsets(tps, LATEST), warnings
    )


def _groups_to_reset(admin: Admin, args: argparse.Namespace) -> list[str]:
    if args.all_groups:
        if args.group:
            raise UsageError("give group names or --all-groups, not both")
        groups = [g for g, _s, ptype, _t in admin.list_groups() if ptype in ("consumer", "")]
        if not groups:
            raise AdminError("there are no consumer groups")
        return groups
    if not args.group:
        raise UsageError("name a group (or several), or give --all-groups")
    return list(dict.fromkeys(args.group))


def _check_usage(args: argparse.Namespace) -> None:
    """What argparse cannot say: a scope unless --from-file, none with it; --export is CSV."""
    scoped = bool(args.topic) or args.all_topics
    if args.from_file is None and not scoped:
        raise UsageError("one of the reset scopes is required: --topic or --all-topics")
    if args.from_file is not None and scoped:
        raise UsageError(
            "--from-file takes its partitions from the file: drop --topic/--all-topics"
        )
    if args.export and getattr(args, "output", "table") == "json":
        raise UsageError("--export prints Kafka's CSV: drop --output json")


def cmd_offsets_reset(args: argparse.Namespace) -> int:
    _check_usage(args)
    out = Output(args)
    plan = Plan()
    now_ms = time.time_ns() // 1_000_000
    with admin_for(args) as admin:
        groups = _groups_to_reset(admin, args)
        from_file = _read_plan_file(args.from_file, groups) if args.from_file else None
        # every group must be inactive before anything is committed (Kafka refuses the same)
        active = []
        for group in groups:
            desc = admin.describe_group(group)
            if desc.members or desc.state not in ("Empty", "Dead"):
                active.append(f"{group!r} is {desc.state} with {len(desc.members)} member(s)")
            elif desc.state != "Dead":
                plan.current[group] = {
                    tp: off for tp, (off, _meta) in admin.committed_offsets(group).items()
                }
        if active:
            raise AdminError(
                "offsets can only be reset while a group has no active members; "
                + "; ".join(active)
                + ": stop its consumers first"
            )
        for group in groups:
            committed = plan.current.get(group, {})
            if from_file is not None and group not in from_file:
                plan.warnings.append(f"{args.from_file} has no offsets for group {group}")
                continue
            new = _plan_group(
                admin,
                group,
                args,
                committed,
                None if from_file is None else from_file[group],
                now_ms,
                plan.warnings,
            )
            if new:
                plan.offsets[group] = new
        if not plan.offsets:
            what = f"group {groups[0]!r}" if len(groups) == 1 else "the groups"
            raise AdminError(
                f"{what} has no committed offsets to reset"
                if args.all_topics
                else f"nothing to reset for {what}"
            )
        if args.execute:
            for group, offsets in plan.offsets.items():
                admin.commit_offsets(group, offsets)
    for w in plan.warnings:
        out.note(f"kgc: warning: {w}")
    _show_plan(out, args, groups, plan)
    return EXIT_OK


def _show_plan(out: Output, args: argparse.Namespace, groups: list[str], plan: Plan) -> None:
    rows = [
        [group, t, p, plan.current.get(group, {}).get((t, p)), off]
        for group, offsets in plan.offsets.items()
        for (t, p), off in sorted(offsets.items())
    ]
    columns = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]
    if args.export:
        # Kafka's CSV, no header: topic,partition,offset when one group was named, else with
        # the group first (what --from-file reads back)
        single = len(args.group or ()) == 1 and not args.all_groups
        w = csv.writer(sys.stdout, lineterminator="\n")
        for group, t, p, _cur, off in rows:
            w.writerow([t, p, off] if single else [group, t, p, off])
    elif out.json:
        obj: dict[str, Any] = (
            {"group": groups[0]} if len(groups) == 1 else {"groups": list(plan.offsets)}
        )
        obj.update(
            executed=bool(args.execute),
            offsets=records(columns, rows),
            warnings=plan.warnings,
        )
        out.dump(obj)
    else:
        out.table(columns, rows)
    if not out.json:
        out.note(
            "Offsets committed."
            if args.execute
            else "Dry run: nothing was changed. Add --execute to commit these offsets."
        )


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


def add_commands(sub: Any, common: argparse.ArgumentParser) -> Any:
    """``kgc offsets``' commands; returns its subcommands (``history`` adds its own)."""
    offsets = sub.add_parser(
        "offsets", help="reset or delete a group's committed offsets"
    ).add_subparsers(dest="action", required=True)
    p = leaf(
        common,
        offsets,
        "reset",
        cmd_offsets_reset,
        "reset groups' offsets (dry run unless --execute; a group must have no active members)",
    )
    p.add_argument("group", nargs="*", help="one or more groups")
    p.add_argument(
        "--all-groups", action="store_true", help="every consumer group the cluster lists"
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--topic",
        type=_topic_partitions,
        action="append",
        metavar="TOPIC[:P[,P...]]",
        help="topic, optionally some partitions (repeatable)",
    )
    which.add_argument(
        "--all-topics",
        action="store_true",
        help="every partition the group has a committed offset for",
    )
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped into the log)")
    to.add_argument(
        "--shift-by",
        type=int,
        metavar="N",
        help="the committed offset plus N (may be negative; clamped into the log)",
    )
    to.add_argument(
        "--to-datetime",
        type=_datetime_ms,
        metavar="ISO",
        help="the first offset at or after this time (ISO 8601; no zone = local time)",
    )
    to.add_argument(
        "--by-duration",
        type=_duration_ms,
        metavar="PnDTnHnMnS",
        help="the first offset at or after this long ago (e.g. PT30M, P1DT12H)",
    )
    to.add_argument(
        "--to-current",
        action="store_true",
        help="the committed offset (the log end offset where there is none)",
    )
    to.add_argument(
        "--from-file",
        type=Path,
        metavar="CSV",
        help="offsets from Kafka's CSV, topic,partition,offset or group,topic,partition,offset "
        "(what --export prints; clamped into the log; no --topic/--all-topics)",
    )
    p.add_argument(
        "--export",
        action="store_true",
        help="print the plan as Kafka's CSV (topic,partition,offset; with the group first "
        "when several groups are reset) instead of the table",
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
    return offsets
