"""``kgc cluster describe``: the nodes of a cluster and which partitions each one leads.

Read through Metadata from any node (so it also describes a Kafka cluster): the live brokers,
and for every partition (``__consumer_offsets`` included) its leader and leader epoch. In
kgc's cluster mode the leader is the node holding the partition's lease and the epoch is
the lease's fencing epoch; a partition without a leader is being taken over.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from coordinator.tools.commands.common import EXIT_ERROR, EXIT_OK, admin_for, leaf
from coordinator.tools.output import Output, records
from storage.records import OFFSETS_TOPIC


def cmd_cluster_describe(args: argparse.Namespace) -> int:
    out = Output(args)
    with admin_for(args) as admin:
        resp = admin.metadata(None)
        offsets = admin.metadata([OFFSETS_TOPIC])
    topics = [t for t in resp.topics if t.name != OFFSETS_TOPIC] + [
        t for t in offsets.topics if not t.error_code
    ]
    led_offsets: Counter[int] = Counter()
    led_topics: Counter[int] = Counter()
    leaderless: list[str] = []
    rows: list[list[Any]] = []
    for t in sorted(topics, key=lambda t: t.name or ""):
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            if p.leader_id < 0:
                leaderless.append(f"{t.name}-{p.partition_index}")
            elif t.name == OFFSETS_TOPIC:
                led_offsets[p.leader_id] += 1
            else:
                led_topics[p.leader_id] += 1
            rows.append([t.name, p.partition_index, p.leader_id, p.leader_epoch])
    brokers = sorted(resp.brokers, key=lambda b: b.node_id)
    node_columns = [
        "NODE", "HOST", "PORT", "RACK", "CONTROLLER", "OFFSETS-PARTITIONS", "TOPIC-PARTITIONS"
    ]  # fmt: skip
    node_rows = [
        [
            b.node_id,
            b.host,
            b.port,
            b.rack or "",
            b.node_id == resp.controller_id,
            led_offsets[b.node_id],
            led_topics[b.node_id],
        ]
        for b in brokers
    ]
    partition_columns = ["TOPIC", "PARTITION", "LEADER", "LEADER-EPOCH"]
    if out.json:
        out.dump(
            {
                "nodes": records(node_columns, node_rows),
                "partitions": records(partition_columns, rows) if args.partitions else None,
                "leaderless": leaderless,
            }
        )
    else:
        out.table(node_columns, node_rows)
        if args.partitions:
            out.table(partition_columns, rows)
    if leaderless:
        out.note(f"{len(leaderless)} partition(s) without a leader: " + ", ".join(leaderless[:20]))
        return EXIT_ERROR
    return EXIT_OK


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    cmds = sub.add_parser(
        "cluster", help="the nodes of the cluster and what they lead"
    ).add_subparsers(dest="action", required=True)
    p = leaf(
        common,
        cmds,
        "describe",
        cmd_cluster_describe,
        "list the live nodes and how many partitions each leads; exit 1 if any has no leader",
    )
    p.add_argument("--partitions", action="store_true", help="also list every partition's leader")
