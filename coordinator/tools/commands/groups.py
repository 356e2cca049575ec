"""``kgc groups list|describe|delete``: consumer groups, their members, offsets and lag.

How this works: groups are listed on every broker (ListGroups, with its state and type
filters), described at their coordinator (FindCoordinator, then ConsumerGroupDescribe for a
KIP-848 consumer group or DescribeGroups for a classic one, OffsetFetch), with log-end
offsets from each partition's leader (ListOffsets) for the lag, as Kafka's
kafka-consumer-groups.sh shows it.

A classic group's describe shows its offsets unless ``--members``/``--state`` ask for
other sections. A consumer group's shows all three by default, since its state (group
epoch, target assignment epoch, assignor) and members (epochs, subscriptions, current and
target assignment) are what an operator needs to see a rebalance in progress. A share
group's (KIP-932, ShareGroupDescribe) shows its state, its members (which may share
partitions) and its share-partitions' start offsets and lag (DescribeShareGroupOffsets), as
kafka-share-groups.sh does.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

from coordinator.tools.admin import (
    LATEST,
    Admin,
    AdminError,
    GroupDescription,
    Member,
    UsageError,
)
from coordinator.tools.commands.common import EXIT_ERROR, EXIT_OK, admin_for, leaf
from coordinator.tools.output import Output, records
from coordinator.tools.share_admin import describe_share_group, share_offsets

# Classic states, then the consumer-group (KIP-848) ones, then the streams groups' own
# (KIP-1071); ListGroups filters on any.
GROUP_STATES = (
    "Stable",
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Assigning",
    "Reconciling",
    "Dead",
    "NotReady",
)
GROUP_TYPES = ("classic", "consumer", "streams", "share")


def _state_names(text: str) -> list[str]:
    """``--state Stable`` or ``--state stable,empty`` (case-insensitive, as Kafka's tool)."""
    by_lower = {s.lower(): s for s in GROUP_STATES}
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in names if t.lower() not in by_lower]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown group state {(bad or [text])[0]!r} (one of {', '.join(GROUP_STATES)})"
        )
    return [by_lower[t.lower()] for t in names]


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
    states = sorted({s for ss in args.state or () for s in ss}) or None
    with admin_for(args) as admin:
        groups = admin.list_groups(states, types)
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
        desc = describe_share_group(admin, group) or desc
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
    statuses = admin.partition_statuses(desc.group_id) if committed else {}
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
                statuses.get(tp),
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
    # kgc's: the partition's status from the group's history (docs/history.md)
    "STATUS",
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
STREAMS_MEMBER_COLUMNS = [
    "GROUP",
    "MEMBER-ID",
    "PROCESS",
    "HOST",
    "CLIENT-ID",
    "MEMBER-EPOCH",
    "ACTIVE",
    "STANDBY",
    "TARGET-ACTIVE",
    "TARGET-STANDBY",
]
STREAMS_TOPOLOGY_COLUMNS = ["GROUP", "TOPOLOGY-EPOCH", "SUBTOPOLOGY", "SOURCE-TOPICS"]
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


def _epoch_state(desc: GroupDescription) -> tuple[list[str], list[list[Any]]]:
    """The state section of a group with epochs (consumer, share): coordinator, assignor,
    state, group and assignment epochs, members."""
    node, host, port = desc.coordinator
    row = [
        desc.group_id,
        f"{host}:{port} ({node})",
        desc.protocol or None,
        desc.state,
        desc.group_epoch,
        desc.assignment_epoch,
        len(desc.members),
    ]
    return CONSUMER_STATE_COLUMNS, [row]


def _consumer_sections(
    admin: Admin, desc: GroupDescription, args: argparse.Namespace
) -> dict[str, tuple[list[str], list[list[Any]]]]:
    """A KIP-848 group: every section unless some are asked for."""
    everything = not (args.offsets or args.members or args.state)
    sections: dict[str, tuple[list[str], list[list[Any]]]] = {}
    if args.state or everything:
        sections["state"] = _epoch_state(desc)
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


def _tasks(by_subtopology: dict[str, list[int]]) -> str | None:
    """Tasks as Kafka's tool shows them: ``0:[0,1]; 1:[2]`` (None when there are none)."""
    shown = [
        f"{s}:[{','.join(map(str, sorted(ps)))}]" for s, ps in sorted(by_subtopology.items()) if ps
    ]
    return "; ".join(shown) or None


def _streams_sections(
    admin: Admin, desc: GroupDescription, args: argparse.Namespace
) -> dict[str, tuple[list[str], list[list[Any]]]]:
    """A KIP-1071 streams group: state, members with their tasks, the topology, offsets."""
    everything = not (args.offsets or args.members or args.state)
    sections = _consumer_sections(admin, desc, args)
    sections.pop("members", None)
    if args.members or everything:
        sections["members"] = (
            STREAMS_MEMBER_COLUMNS,
            [
                [
                    desc.group_id,
                    m.member_id,
                    m.process_id,
                    m.host,
                    m.client_id,
                    m.member_epoch,
                    _tasks(m.tasks.get("active", {})),
                    _tasks(m.tasks.get("standby", {})),
                    _tasks(m.target_tasks.get("active", {})),
                    _tasks(m.target_tasks.get("standby", {})),
                ]
                for m in sorted(desc.members, key=lambda m: m.member_id)
            ],
        )
    if args.state or everything:
        sections["topology"] = (
            STREAMS_TOPOLOGY_COLUMNS,
            [
                [desc.group_id, desc.topology_epoch, sid, ",".join(topics)]
                for sid, topics in sorted(desc.subtopologies.items())
            ],
        )
    return sections


SHARE_MEMBER_COLUMNS = [
    "GROUP",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
    "MEMBER-EPOCH",
    "SUBSCRIPTION",
    "#PARTITIONS",
    "ASSIGNMENT",
]
SHARE_OFFSET_COLUMNS = ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]


def _share_sections(
    admin: Admin, desc: GroupDescription, args: argparse.Namespace
) -> dict[str, tuple[list[str], list[list[Any]]]]:
    """A KIP-932 share group: every section unless some are asked for (its members may
    share partitions; its offsets are the share-partitions' start offsets)."""
    everything = not (args.offsets or args.members or args.state)
    sections: dict[str, tuple[list[str], list[list[Any]]]] = {}
    if args.state or everything:
        sections["state"] = _epoch_state(desc)
    if args.members or everything:
        sections["members"] = (
            SHARE_MEMBER_COLUMNS,
            [
                [
                    desc.group_id,
                    m.member_id,
                    m.host,
                    m.client_id,
                    m.member_epoch,
                    _subscription(m),
                    sum(len(ps) for ps in m.assignment.values()),
                    _partitions(m.assignment),
                ]
                for m in sorted(desc.members, key=lambda m: m.member_id)
            ],
        )
    if args.offsets or everything:
        rows: list[list[Any]] = [
            [desc.group_id, t, p, None if start < 0 else start, None if lag < 0 else lag]
            for t, p, start, lag in share_offsets(admin, desc.group_id)
        ]
        sections["offsets"] = (SHARE_OFFSET_COLUMNS, rows)
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


def _total_lag(rows: list[list[Any]], columns: list[str] = OFFSET_COLUMNS) -> int:
    """The group's lag summed over its partitions (those with a known lag), as rpk's TOTAL-LAG."""
    return sum(r[columns.index("LAG")] or 0 for r in rows)


def _groups_to_describe(admin: Admin, args: argparse.Namespace) -> list[str]:
    """The named groups, or with ``--all-groups`` every consumer group the cluster lists (as
    Kafka's tool: protocol type ``consumer`` or none, so not Connect's or others')."""
    if args.all_groups:
        if args.group:
            raise UsageError("give group names or --all-groups, not both")
        return [g for g, _state, ptype, _type in admin.list_groups() if ptype in ("consumer", "")]
    if not args.group:
        raise UsageError("name a group (or several), or give --all-groups")
    return list(dict.fromkeys(args.group))  # in the order given, once each


def _describe_one(
    admin: Admin, group: str, args: argparse.Namespace, out: Output
) -> dict[str, Any] | list[tuple[str, tuple[list[str], list[list[Any]]]]]:
    """One group: its JSON object, or its tables (the offsets one followed by TOTAL-LAG)."""
    desc = _describe(admin, group)
    consumer = desc.group_type == "consumer"
    if desc.group_type == "streams":
        sections = _streams_sections(admin, desc, args)
    elif desc.group_type == "share":
        sections = _share_sections(admin, desc, args)
    elif consumer:
        sections = _consumer_sections(admin, desc, args)
    else:
        sections = _classic_sections(admin, desc, args)
    if out.json:
        obj: dict[str, Any] = {name: records(cols, rows) for name, (cols, rows) in sections.items()}
        if "state" in obj:
            obj["state"] = obj["state"][0]
        if consumer and "members" in obj:
            obj["members"] = _member_json(desc, obj["members"])
        if "offsets" in sections:
            obj["total_lag"] = _total_lag(sections["offsets"][1], sections["offsets"][0])
        return {"group": desc.group_id, "type": desc.group_type, "state_name": desc.state, **obj}
    # Kafka's tool's remarks, on stderr so stdout stays the tables
    if not desc.members and ("offsets" in sections or "members" in sections):
        out.note(f"Consumer group '{desc.group_id}' has no active members.")
    elif desc.state in REBALANCING:
        out.note(f"Warning: consumer group '{desc.group_id}' is rebalancing.")
    return list(sections.items())


REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")


def cmd_groups_describe(args: argparse.Namespace) -> int:
    """Describe one group, several, or ``--all-groups``; one group that cannot be described
    (it does not exist, its coordinator refuses) is named on stderr and the others are still
    shown, and the exit code is then 1."""
    out = Output(args)
    failed = 0
    described: list[dict[str, Any]] = []
    first = True
    with admin_for(args) as admin:
        names = _groups_to_describe(admin, args)
        for group in names:
            try:
                result = _describe_one(admin, group, args, out)
            except AdminError as exc:
                if len(names) == 1:
                    raise
                out.note(f"kgc: error: {exc}")
                failed += 1
                continue
            if isinstance(result, dict):
                described.append(result)
                continue
            for name, (cols, rows) in result:
                if not first:
                    print()
                first = False
                out.table(cols, rows)
                if name == "offsets":
                    print(f"TOTAL-LAG  {_total_lag(rows, cols)}")
    if out.json:
        single = len(args.group or ()) == 1 and not args.all_groups
        out.dump(described[0] if single and described else described)
    elif not names:
        out.note("No consumer groups.")
    return EXIT_ERROR if failed else EXIT_OK


def cmd_groups_delete(args: argparse.Namespace) -> int:
    out = Output(args)
    with admin_for(args) as admin:
        admin.delete_group(args.group)
    if out.json:
        out.dump({"group": args.group, "deleted": True})
    else:
        print(f"Deleted consumer group '{args.group}'.")
    return EXIT_OK


def add_commands(sub: Any, common: argparse.ArgumentParser) -> Any:
    """``kgc groups``' commands; returns its subcommands (``history`` adds its own)."""
    groups = sub.add_parser(
        "groups", help="list, describe and delete consumer groups"
    ).add_subparsers(dest="action", required=True)
    p = leaf(common, groups, "list", cmd_groups_list, "list consumer groups")
    p.add_argument(
        "--state",
        type=_state_names,
        action="append",
        metavar="STATE[,STATE]",
        help=f"only groups in these states ({', '.join(GROUP_STATES)}; case-insensitive; "
        "repeatable)",
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
        "describe groups: offsets and lag (with the group's TOTAL-LAG), members, state (a "
        "classic group shows its offsets by default, a consumer group all three)",
    )
    p.add_argument("group", nargs="*", help="one or more groups")
    p.add_argument(
        "--all-groups", action="store_true", help="every consumer group the cluster lists"
    )
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
    return groups
