"""``kgc groups list|describe|delete``: consumer groups, their members, offsets and lag.

How this works: groups are listed on every broker (ListGroups), described at their
coordinator (FindCoordinator, DescribeGroups, OffsetFetch), with log-end offsets from each
partition's leader (ListOffsets) for the lag, as Kafka's kafka-consumer-groups.sh shows it.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

from coordinator.tools.admin import LATEST, Admin, AdminError, GroupDescription, Member
from coordinator.tools.commands.common import EXIT_OK, admin_for, leaf
from coordinator.tools.output import Output, records

GROUP_STATES = ("Stable", "Empty", "PreparingRebalance", "CompletingRebalance", "Dead")


def _state_name(text: str) -> str:
    for s in GROUP_STATES:
        if s.lower() == text.lower():
            return s
    raise argparse.ArgumentTypeError(
        f"unknown group state {text!r} (one of {', '.join(GROUP_STATES)})"
    )


def cmd_groups_list(args: argparse.Namespace) -> int:
    out = Output(args)
    with admin_for(args) as admin:
        groups = admin.list_groups([args.state] if args.state else None)
    if args.state:
        groups = [g for g in groups if g[1].lower() == args.state.lower()]
    if out.json:
        out.dump([{"group": g, "state": s, "protocol_type": t} for g, s, t in groups])
    else:
        out.table(
            ["GROUP", "STATE", "PROTOCOL-TYPE"], [(g, s or None, t or None) for g, s, t in groups]
        )
    return EXIT_OK


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


def cmd_groups_describe(args: argparse.Namespace) -> int:
    out = Output(args)
    with admin_for(args) as admin:
        desc = _describe(admin, args.group)
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
            sections["offsets"] = (
                [
                    "GROUP",
                    "TOPIC",
                    "PARTITION",
                    "CURRENT-OFFSET",
                    "LOG-END-OFFSET",
                    "LAG",
                    "CONSUMER-ID",
                    "HOST",
                    "CLIENT-ID",
                ],
                _offset_rows(admin, desc),
            )
    if out.json:
        obj: dict[str, Any] = {name: records(cols, rows) for name, (cols, rows) in sections.items()}
        if "state" in obj:
            obj["state"] = obj["state"][0]
        out.dump({"group": desc.group_id, "state_name": desc.state, **obj})
        return EXIT_OK
    if not desc.members and (want_offsets or args.members):
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
    p = leaf(
        common,
        groups,
        "describe",
        cmd_groups_describe,
        "describe a group: offsets and lag (default), members, state",
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
        help="coordinator, assignment strategy, state and member count",
    )
    p = leaf(common, groups, "delete", cmd_groups_delete, "delete an empty group and its offsets")
    p.add_argument("group")
