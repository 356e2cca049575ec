"""``kgc topics list|describe|create|delete``.

How this works: topics are read from Metadata (with log start and end offsets from
ListOffsets for ``describe``) and changed with CreateTopics and DeleteTopics.
"""

from __future__ import annotations

import argparse
import base64
from typing import Any

from coordinator.tools.admin import EARLIEST, LATEST
from coordinator.tools.commands.common import EXIT_OK, admin_for, leaf
from coordinator.tools.output import Output, show


def _kafka_uuid(raw: bytes) -> str:
    """A topic id as Kafka prints it (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _config_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"bad config {text!r}: expected KEY=VALUE")
    return key, value


def cmd_topics_list(args: argparse.Namespace) -> int:
    out = Output(args)
    with admin_for(args) as admin:
        topics = admin.list_topics(include_internal=args.include_internal)
    show(
        out,
        ["TOPIC", "PARTITIONS", "INTERNAL"],
        [[t.name, len(t.partitions), t.internal] for t in topics],
    )
    return EXIT_OK


def cmd_topics_describe(args: argparse.Namespace) -> int:
    out = Output(args)
    with admin_for(args) as admin:
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
    show(
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
    with admin_for(args) as admin:
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
    with admin_for(args) as admin:
        admin.delete_topic(args.topic)
    if out.json:
        out.dump({"topic": args.topic, "deleted": True})
    else:
        print(f"Deleted topic '{args.topic}'.")
    return EXIT_OK


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    topics = sub.add_parser(
        "topics", help="list, describe, create and delete topics"
    ).add_subparsers(dest="action", required=True)
    p = leaf(common, topics, "list", cmd_topics_list, "list topics")
    p.add_argument("--include-internal", action="store_true", help="also list internal topics")
    p = leaf(
        common,
        topics,
        "describe",
        cmd_topics_describe,
        "partitions, leaders and offsets of topics (all when none named)",
    )
    p.add_argument("topics", nargs="*")
    p = leaf(common, topics, "create", cmd_topics_create, "create a topic")
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
    p = leaf(common, topics, "delete", cmd_topics_delete, "delete a topic")
    p.add_argument("topic")
