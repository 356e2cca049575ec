"""``kgc groups list|describe|delete``: consumer groups, their members, offsets and lag.

How this works: groups are listed on every broker (ListGroups, with its state and type
filters), described at their coordinator (FindCoordinator, then ConsumerGroupDescribe for a
KIP-848 consumer group or DescribeGroups for a classic one, OffsetFetch), with log-end
offsets from each partition's leader (ListOffsets) for the lag, as Kafka's
kafka-consumer-groups.sh shows it.

A classic group's describe shows its offsets unless ``--members``/``--state`` ask for
other sections. A consumer group's shows all three by default, since its state (group
epoch, target assignment epoch, assignor) and members (epochs, subscriptions, current and
target assignment) are what an operator needs to see a rebalance in progress.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

from coordinator.tools.admin import LATEST, Admin, AdminError, GroupDescription, Member
from coordinator.tools.commands.common import EXIT_OK, admin_for, leaf
from coordinator.tools.output import Output, records

# Classic states, then the consumer-group (KIP-848) ones; ListGroups filters on any.
GROUP_STATES = (
    "Stable",
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Assigning",
    "Reconciling",
    "Dead",
)
GROUP_TYPES = ("classic", "consumer")


def _state_name(text: str) -> str:
    for s in GROUP_STATES:
        if s.lower() == text.lower():
            return s
    raise argparse.ArgumentTypeError(
        f"unknown group state {text!r} (one of {', '.join(GROUP_STATES)})"
    )


def _type_names(text: str) -> list[str]:
    """``--type consumer`` or ``--type classic,consumer`` (case-insensitive)."""
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    bad = [t for t in names if t not in GROUP_TYPES]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown group type {text!r} (one of {', '.join(GROUP_TYPES)})"
        )
    return names


def cmd_groups_list(args: argparse.Namespace) -> int:
    out = Output(args)
    types = sorted({t for ts in args.type or () for t in ts}) or None
    with admin_for(args) as admin:
        groups = admin.list_groups([args.state] if args.state else None, types)
    if out.json:
        out.dump(
            [{"group": g, "type": gt, "state": s, "protocol_type": t} for g, s, t, gt in groups]
        )
    else:
        out.table(
            ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"],
            [(g, gt, s or None, t or None) for g, s, t, gt in groups],
        )
    return EXIT_OK


def _partitions(assignment: dict[str, list[int]]) -> str | None:
    """``topic:0,1,2`` per topic, topics joined by ``,`` (None when empty)."""
    return (
        ",".join(
            f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(assignment.items()) if ps
        )
        or None
    )


def _subscription(m: Member) -> str | None:
    parts = list(sorted(m.subscribed_topic_names))
    if m.subscribed_topic_regex:
        parts.append(f"/{m.subscribed_topic_regex}/")
    return ",".join(parts) or None


def _describe(admin: Admin, group: str) -> GroupDescription:
    desc = admin.describe_group(group)
    if desc.state == "Dead":
        raise AdminError(f"consumer group {group!r} does not exist")
    return desc


def _offset_rows(admin: Admin, desc: GroupDescription) -> list[list[Any]]:
    committed = admin.committed_offsets(desc.group_id)
    owner: dict[tuple[str, int], Member] = {}
    for m in desc.members:
        for topic, parts in m.assignment.items():
            for p in parts:
                owner[(topic, p)] = m
    tps = sorted(set(committed) | set(owner))
    ends: dict[tuple[str, int], int] = {}
    for topic in sorted({t for t, _ in tps}):
        # A deleted topic: its committed offsets are still shown, without an end offset.
        with contextlib.suppress(AdminError):
            ends.update(admin.log_offsets([tp for tp in tps if tp[0] == topic], LATEST))
    rows = []
    for tp in tps:
        current = committed[tp][0] if tp in committed else None
        end = ends.get(tp)
        lag = (
            max(end - current, 0) if current is not None and end is not None and end >= 0 else None
        )
        member = owner.get(tp)
        rows.append(
            [
                desc.group_id,
                tp[0],
                tp[1],
                current,
                end,
                lag,
                member.member_id if member else None,
                member.host if member else None,
                member.client_id if member else None,
            ]
        )
    return rows


OFFSET_COLUMNS = [
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
]
CONSUMER_STATE_COLUMNS = [
    "GROUP",
    "COORDINATOR (ID)",
    "ASSIGNMENT-STRATEGY",
    "STATE",
    "GROUP-EPOCH",
    "ASSIGNMENT-EPOCH",
    "#MEMBERS",
]
CONSUMER_MEMBER_COLUMNS = [
    "GROUP",
    "CONSUMER-ID",
    "GROUP-INSTANCE-ID",
    "HOST",
    "CLIENT-ID",
    "MEMBER-EPOCH",
    "MEMBER-TYPE",
    "SUBSCRIPTION",
    "#PARTITIONS",
    "ASSIGNMENT",
    "TARGET-ASSIGNMENT",
]


def _classic_sections(
    admin: Admin, desc: GroupDescription, args: argparse.Namespace
) -> dict[str, tuple[list[str], list[list[Any]]]]:
    sections: dict[str, tuple[list[str], list[list[Any]]]] = {}
    want_offsets = args.offsets or not (args.members or args.state)
    if args.state:
        node, host, port = desc.coordinator
        sections["state"] = (
            ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
            [
                [
                    desc.group_id,
                    f"{host}:{port} ({node})",
                    desc.protocol or None,
                    desc.state,
                    len(desc.members),
                ]
            ],
        )
    if args.members:
        sections["members"] = (
            [
                "GROUP",
                "CONSUMER-ID",
                "GROUP-INSTANCE-ID",
                "HOST",
                "CLIENT-ID",
                "#PARTITIONS",
                "ASSIGNMENT",
            ],
            [
                [
                    desc.group_id,
                    m.member_id,
                    m.instance_id,
                    m.host,
                    m.client_id,
                    sum(len(ps) for ps in m.assignment.values()),
                    ",".join(
                        f"{t}:{','.join(map(str, sorted(ps)))}"
                        for t, ps in sorted(m.assignment.items())
                    )
                    or None,
                ]
                for m in sorted(desc.members, key=lambda m: m.member_id)
            ],
        )
    if want_offsets:
        sections["offsets"] = (OFFSET_COLUMNS, _offset_rows(admin, desc))
    return sections


def _consumer_sections(
    admin: Admin, desc: GroupDescription, args: argparse.Namespace
) -> dict[str, tuple[list[str], list[list[Any]]]]:
    """A KIP-848 group: every section unless some are asked for."""
    everything = not (args.offsets or args.members or args.state)
    sections: dict[str, tuple[list[str], list[list[Any]]]] = {}
    if args.state or everything:
        node, host, port = desc.coordinator
        sections["state"] = (
            CONSUMER_STATE_COLUMNS,
            [
                [
                    desc.group_id,
                    f"{host}:{port} ({node})",
                    desc.protocol or None,
                    desc.state,
                    desc.group_epoch,
                    desc.assignment_epoch,
                    len(desc.members),
                ]
            ],
        )
    if args.members or everything:
        sections["members"] = (
            CONSUMER_MEMBER_COLUMNS,
            [
                [
                    desc.group_id,
                    m.member_id,
                    m.instance_id,
                    m.host,
                    m.client_id,
                    m.member_epoch,
                    m.member_type,
                    _subscription(m),
                    sum(len(ps) for ps in m.assignment.values()),
                    _partitions(m.assignment),
                    _partitions(m.target_assignment),
                ]
                for m in sorted(desc.members, key=lambda m: m.member_id)
            ],
        )
    if args.offsets or everything:
        sections["offsets"] = (OFFSET_COLUMNS, _offset_rows(admin, desc))
    return sections


def _member_json(desc: GroupDescription, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A consumer group's member rows, with the subscription and assignments structured too."""
    by_id = {m.member_id: m for m in desc.members}
    for row in rows:
        m = by_id[row["consumer_id"]]
        row["rack_id"] = m.rack_id
        row["subscribed_topic_names"] = sorted(m.subscribed_topic_names)
        row["subscribed_topic_regex"] = m.subscribed_topic_regex
        row["assigned_partitions"] = {t: ps for t, ps in m.assignment.items() if ps}
        row["target_partitions"] = {t: ps for t, ps in m.target_assignment.items() if ps}
    return rows


def cmd_groups_describe(args: argparse.Namespace) -> int:
    out = Output(args)
    with admin_for(args) as admin:
        desc = _describe(admin, args.group)
        consumer = desc.group_type == "consumer"
        sections = (
            _consumer_sections(admin, desc, args)
            if consumer
            else _classic_sections(admin, desc, args)
        )
    if out.json:
        obj: dict[str, Any] = {name: records(cols, rows) for name, (cols, rows) in sections.items()}
        if "state" in obj:
            obj["state"] = obj["state"][0]
        if consumer and "members" in obj:
            obj["members"] = _member_json(desc, obj["members"])
        out.dump({"group": desc.group_id, "type": desc.group_type, "state_name": desc.state, **obj})
        return EXIT_OK
    if not desc.members and ("offsets" in sections or "members" in sections):
        out.note(f"Consumer group '{desc.group_id}' has no active members.")
    for i, (cols, rows) in enumerate(sections.values()):
        if i:
            print()
        out.table(cols, rows)
    return EXIT_OK


def cmd_groups_delete(args: argparse.Namespace) -> int:
    out = Output(args)
    with admin_for(args) as admin:
        admin.delete_group(args.group)
    if out.json:
        out.dump({"group": args.group, "deleted": True})
    else:
        print(f"Deleted consumer group '{args.group}'.")
    return EXIT_OK


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    groups = sub.add_parser(
        "groups", help="list, describe and delete consumer groups"
    ).add_subparsers(dest="action", required=True)
    p = leaf(common, groups, "list", cmd_groups_list, "list consumer groups")
    p.add_argument(
        "--state", type=_state_name, help=f"only groups in this state ({', '.join(GROUP_STATES)})"
    )
    p.add_argument(
        "--type",
        type=_type_names,
        action="append",
        metavar="TYPE[,TYPE]",
        help=f"only groups of these types ({', '.join(GROUP_TYPES)}; repeatable)",
    )
    p = leaf(
        common,
        groups,
        "describe",
        cmd_groups_describe,
        "describe a group: offsets and lag, members, state (a classic group shows its "
        "offsets by default, a consumer group all three)",
    )
    p.add_argument("group")
    p.add_argument(
        "--offsets",
        action="store_true",
        help="committed offsets, log-end offsets and lag per partition (the default)",
    )
    p.add_argument("--members", action="store_true", help="members with their assigned partitions")
    p.add_argument(
        "--state",
        action="store_true",
        help="coordinator, assignment strategy, state and member count (and a consumer "
        "group's group and assignment epochs)",
    )
    p = leaf(common, groups, "delete", cmd_groups_delete, "delete an empty group and its offsets")
    p.add_argument("group")
