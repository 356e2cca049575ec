"""The ``kgc`` command: ``kgc serve`` runs the server; other subcommands operate on one.

How this works: argparse subcommands; each returns an exit status. Errors a user can cause
(bad flags, bad settings, an unreachable server) end in one line on stderr, never a
traceback.

The operator commands (``groups``, ``offsets``, ``topics``, ``health``) speak the plain Kafka
protocol through ``coordinator.tools.admin``, so they work against kgc and any Kafka-compatible
broker (``--bootstrap-server``). They print rich tables for people and, with
``--output json``, JSON for scripts. Exit codes: 0 ok, 1 the server answered with an error
or the group/topic does not exist, 2 bad usage, 3 the server could not be reached.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from coordinator import config

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
GROUP_STATES = ("Stable", "Empty", "PreparingRebalance", "CompletingRebalance", "Dead")


def setup_logging(level: str, fmt: str) -> None:
    from coordinator.logs import setup_logging as setup

    setup(level, fmt)


def cmd_serve(args: argparse.Namespace) -> int:
    from coordinator.app import run

    try:
        settings = config.load(args)
    except OSError as exc:  # e.g. the --config file cannot be read
        print(
            f"kgc: error: cannot read configuration: {exc.strerror or exc}: {exc.filename}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    setup_logging(settings.log_level, settings.log_format)
    try:
        run(settings)
    except OSError as exc:  # the port is taken, the data directory is not writable, ...
        logging.getLogger("kgc").debug("start-up failed", exc_info=True)
        print(f"kgc: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return 0


# -- output: rich tables for people, JSON for scripts


class Output:
    def __init__(self, args: argparse.Namespace) -> None:
        self.json = getattr(args, "output", "table") == "json"

    def table(self, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        from rich import box
        from rich.console import Console
        from rich.table import Table

        tty = sys.stdout.isatty()
        table = Table(box=box.SIMPLE_HEAD if tty else None, pad_edge=False, show_edge=False)
        for col in columns:
            table.add_column(col, no_wrap=not tty, overflow="fold")
        for row in rows:
            table.add_row(*("-" if v is None else str(v) for v in row))
        if tty:
            Console(highlight=False).print(table)
            return
        # Pipes get plain aligned columns, never wrapped or cut, without trailing blanks.
        console = Console(width=100_000, highlight=False, color_system=None, file=io.StringIO())
        with console.capture() as cap:
            console.print(table)
        sys.stdout.write("".join(line.rstrip() + "\n" for line in cap.get().splitlines()))

    def dump(self, obj: Any) -> None:
        print(json.dumps(obj, indent=2, sort_keys=False))

    def note(self, text: str) -> None:
        """Human remarks go to stderr so stdout stays parseable."""
        print(text, file=sys.stderr)


def _records(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    keys = [
        c.lower().replace("#", "num_").replace("-", "_").replace(" (id)", "").replace(" ", "_")
        for c in columns
    ]
    return [dict(zip(keys, row, strict=True)) for row in rows]


def _show(out: Output, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    if out.json:
        out.dump(_records(columns, rows))
    else:
        out.table(columns, rows)


def _admin(args: argparse.Namespace) -> Any:
    from coordinator.tools.admin import Admin

    return Admin(args.bootstrap_server, timeout=args.timeout or 10.0)


def _state_name(text: str) -> str:
    for s in GROUP_STATES:
        if s.lower() == text.lower():
            return s
    raise argparse.ArgumentTypeError(
        f"unknown group state {text!r} (one of {', '.join(GROUP_STATES)})"
    )


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


def _kafka_uuid(raw: bytes) -> str:
    """A topic id as Kafka prints it (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _config_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"bad config {text!r}: expected KEY=VALUE")
    return key, value


# -- groups


def cmd_groups_list(args: argparse.Namespace) -> int:
    out = Output(args)
    with _admin(args) as admin:
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


def _describe(admin: Any, group: str) -> Any:
    from coordinator.tools.admin import AdminError

    desc = admin.describe_group(group)
    if desc.state == "Dead":
        raise AdminError(f"consumer group {group!r} does not exist")
    return desc


def _offset_rows(admin: Any, desc: Any) -> list[list[Any]]:
    from coordinator.tools.admin import LATEST, AdminError

    committed = admin.committed_offsets(desc.group_id)
    owner: dict[tuple[str, int], Any] = {}
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
        m = owner.get(tp)
        rows.append(
            [
                desc.group_id,
                tp[0],
                tp[1],
                current,
                end,
                lag,
                m.member_id if m else None,
                m.host if m else None,
                m.client_id if m else None,
            ]
        )
    return rows


def cmd_groups_describe(args: argparse.Namespace) -> int:
    out = Output(args)
    with _admin(args) as admin:
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
        obj: dict[str, Any] = {
            name: _records(cols, rows) for name, (cols, rows) in sections.items()
        }
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
    with _admin(args) as admin:
        admin.delete_group(args.group)
    if out.json:
        out.dump({"group": args.group, "deleted": True})
    else:
        print(f"Deleted consumer group '{args.group}'.")
    return EXIT_OK


# -- offsets


def _targets(
    admin: Any,
    group: str,
    topics: list[tuple[str, list[int] | None]],
    committed: dict[tuple[str, int], Any],
) -> list[tuple[str, int]]:
    from coordinator.tools.admin import AdminError

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
    from coordinator.tools.admin import EARLIEST, LATEST, AdminError

    out = Output(args)
    with _admin(args) as admin:
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
                "offsets": _records(
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
    with _admin(args) as admin:
        committed = admin.committed_offsets(args.group)
        rows = []
        for topic, parts in args.topic:
            chosen = parts if parts is not None else sorted(p for t, p in committed if t == topic)
            if not chosen:
                continue
            admin.delete_offsets(args.group, topic, chosen)
            rows += [[topic, p, "deleted"] for p in chosen]
    if not rows:
        from coordinator.tools.admin import AdminError

        raise AdminError(
            f"group {args.group!r} has no committed offsets for {', '.join(t for t, _ in args.topic)}"
        )
    _show(out, ["TOPIC", "PARTITION", "STATUS"], rows)
    return EXIT_OK


# -- topics


def cmd_topics_list(args: argparse.Namespace) -> int:
    out = Output(args)
    with _admin(args) as admin:
        topics = admin.list_topics(include_internal=args.include_internal)
    _show(
        out,
        ["TOPIC", "PARTITIONS", "INTERNAL"],
        [[t.name, len(t.partitions), t.internal] for t in topics],
    )
    return EXIT_OK


def cmd_topics_describe(args: argparse.Namespace) -> int:
    from coordinator.tools.admin import EARLIEST, LATEST

    out = Output(args)
    with _admin(args) as admin:
        topics = admin.describe_topics(args.topics or None)
        rows = []
        for t in topics:
            tps = [(t.name, p[0]) for p in t.partitions]
            starts = admin.log_offsets(tps, EARLIEST) if tps else {}
            ends = admin.log_offsets(tps, LATEST) if tps else {}
            for p, leader, replicas, isr in t.partitions:
                rows.append(
                    [
                        t.name,
                        _kafka_uuid(t.topic_id),
                        p,
                        leader,
                        ",".join(map(str, replicas)),
                        ",".join(map(str, isr)),
                        starts.get((t.name, p)),
                        ends.get((t.name, p)),
                    ]
                )
    _show(
        out,
        [
            "TOPIC",
            "TOPIC-ID",
            "PARTITION",
            "LEADER",
            "REPLICAS",
            "ISR",
            "LOG-START-OFFSET",
            "LOG-END-OFFSET",
        ],
        rows,
    )
    return EXIT_OK


def cmd_topics_create(args: argparse.Namespace) -> int:
    out = Output(args)
    with _admin(args) as admin:
        admin.create_topic(
            args.topic, args.partitions, args.replication_factor, dict(args.config or [])
        )
    if out.json:
        out.dump({"topic": args.topic, "created": True, "partitions": args.partitions})
    else:
        print(f"Created topic '{args.topic}'.")
    return EXIT_OK


def cmd_topics_delete(args: argparse.Namespace) -> int:
    out = Output(args)
    with _admin(args) as admin:
        admin.delete_topic(args.topic)
    if out.json:
        out.dump({"topic": args.topic, "deleted": True})
    else:
        print(f"Deleted topic '{args.topic}'.")
    return EXIT_OK


# -- health


def cmd_health(args: argparse.Namespace) -> int:
    """Healthy: the server answers ApiVersions and Metadata reports no partition offline.

    Partitions are checked through Metadata (every topic, plus ``__consumer_offsets`` asked
    for by name), Kafka's own way of saying a replica's log is unusable: a partition error
    such as LEADER_NOT_AVAILABLE or this node among its ``offline_replicas``. kgc reports so
    a partition whose log holds a corrupt batch or whose offsets could not be loaded.
    """
    from coordinator.tools.admin import Admin, AdminError, Unreachable, error_name

    out = Output(args)
    t0 = time.perf_counter()
    try:
        with Admin(args.bootstrap_server, timeout=args.timeout or 5.0) as admin:
            apis = admin.api_versions()
            offline: list[str] = []
            for resp in (admin.metadata(None), admin.metadata(["__consumer_offsets"])):
                for t in resp.topics:
                    if t.error_code:  # e.g. no __consumer_offsets yet on a fresh Kafka
                        continue
                    for p in sorted(t.partitions, key=lambda p: p.partition_index):
                        if p.error_code or p.offline_replicas:
                            why = error_name(p.error_code) if p.error_code else "offline replica"
                            offline.append(f"{t.name}-{p.partition_index} ({why})")
    except (AdminError, Unreachable) as exc:
        if out.json:
            out.dump(
                {"healthy": False, "bootstrap_server": args.bootstrap_server, "error": str(exc)}
            )
        print(f"kgc: unhealthy: {exc}", file=sys.stderr)
        return EXIT_ERROR  # HEALTHCHECK wants 0 or 1
    ms = (time.perf_counter() - t0) * 1000
    if offline:
        if out.json:
            out.dump(
                {
                    "healthy": False,
                    "bootstrap_server": args.bootstrap_server,
                    "error": "partitions offline",
                    "offline_partitions": offline,
                }
            )
        print(
            f"kgc: unhealthy: {len(offline)} partition(s) offline (damaged log or failed load): "
            + ", ".join(offline),
            file=sys.stderr,
        )
        return EXIT_ERROR
    if out.json:
        out.dump(
            {
                "healthy": True,
                "bootstrap_server": args.bootstrap_server,
                "apis": len(apis),
                "latency_ms": round(ms, 2),
            }
        )
    else:
        print(f"ok: {args.bootstrap_server} answered ApiVersions ({len(apis)} APIs) in {ms:.1f} ms")
    return EXIT_OK


def add_admin_commands(sub: Any) -> None:
    """``groups``, ``offsets``, ``topics`` and ``health``: operate a running server."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        default=os.environ.get("KGC_BOOTSTRAP_SERVER", DEFAULT_BOOTSTRAP),
        help=f"server to talk to (env KGC_BOOTSTRAP_SERVER; default {DEFAULT_BOOTSTRAP})",
    )
    common.add_argument(
        "--output",
        choices=("table", "json"),
        default="table",
        help="table for people (default), json for scripts",
    )
    common.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="per-request timeout (default 10; 5 for health)",
    )

    def leaf(
        parent: Any, name: str, func: Callable[[argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(
            name, parents=[common], help=help, description=help
        )
        p.set_defaults(func=func, admin=True)
        return p

    groups = sub.add_parser(
        "groups", help="list, describe and delete consumer groups"
    ).add_subparsers(dest="action", required=True)
    p = leaf(groups, "list", cmd_groups_list, "list consumer groups")
    p.add_argument(
        "--state", type=_state_name, help=f"only groups in this state ({', '.join(GROUP_STATES)})"
    )
    p = leaf(
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
    p = leaf(groups, "delete", cmd_groups_delete, "delete an empty group and its offsets")
    p.add_argument("group")

    offsets = sub.add_parser(
        "offsets", help="reset or delete a group's committed offsets"
    ).add_subparsers(dest="action", required=True)
    p = leaf(
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

    topics = sub.add_parser(
        "topics", help="list, describe, create and delete topics"
    ).add_subparsers(dest="action", required=True)
    p = leaf(topics, "list", cmd_topics_list, "list topics")
    p.add_argument("--include-internal", action="store_true", help="also list internal topics")
    p = leaf(
        topics,
        "describe",
        cmd_topics_describe,
        "partitions, leaders and offsets of topics (all when none named)",
    )
    p.add_argument("topics", nargs="*")
    p = leaf(topics, "create", cmd_topics_create, "create a topic")
    p.add_argument("topic")
    p.add_argument(
        "--partitions",
        type=int,
        default=-1,
        help="partition count (default: the broker's num.partitions)",
    )
    p.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        help="replication factor (default: the broker's)",
    )
    p.add_argument(
        "--config",
        type=_config_pair,
        action="append",
        metavar="KEY=VALUE",
        help="topic config (repeatable)",
    )
    p = leaf(topics, "delete", cmd_topics_delete, "delete a topic")
    p.add_argument("topic")

    leaf(
        sub,
        "health",
        cmd_health,
        "check that a server answers and no partition is offline; exit 0 healthy, 1 not",
    )


def cmd_audit(args: argparse.Namespace) -> int:
    """``kgc audit``: the Spark offsets audit (pyspark is imported only here, lazily)."""
    from coordinator.audit.cli import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kgc", description="kgc: a Kafka group coordinator")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run the server",
        description="Run the kgc server. Every setting is shown with its Kafka property name, environment variable and default.",
    )
    config.add_arguments(serve)
    serve.set_defaults(func=cmd_serve)
    add_admin_commands(sub)
    audit = sub.add_parser(
        "audit",
        help="audit an offsets log with Spark (needs kgc[audit])",
        description="Audit a kgc data directory's __consumer_offsets log with Apache Spark: "
        "lag, Burrow status and integrity/lifecycle findings as Parquet or JSON tables.",
    )
    from coordinator.audit.cli import add_arguments as add_audit_arguments

    add_audit_arguments(audit)
    audit.set_defaults(func=cmd_audit)
    return parser


def run_admin(args: argparse.Namespace) -> int:
    """Run an operator command, turning every failure into one line and an exit code."""
    from coordinator.tools.admin import AdminError, Unreachable

    try:
        return int(args.func(args))
    except AdminError as exc:
        print(f"kgc: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Unreachable as exc:
        print(f"kgc: error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except BrokenPipeError:
        return EXIT_OK  # `kgc ... | head`
    except Exception as exc:
        print(f"kgc: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "admin", False):
            return run_admin(args)
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
