"""kafka-consumer-groups (ConsumerGroupCommand) against Kafka and kgc, outputs compared.

Each test sets up the same groups on both servers with real clients (confluent-kafka): a
classic group and a consumer-protocol (KIP-848) group on one topic, which consumed and
committed offsets 4, 7 and 10 of three partitions of ten records. Every tool run names
both groups where the tool takes several, so one JVM per server covers both protocols.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.tools_kit import CONSUMER_GROUPS, Server, compare, run_pair
from support.tools_setup import (
    BASE_TS,
    LiveMembers,
    committed,
    consume_and_commit,
    create_topic,
    group_settled,
    produce,
    wait_until,
)

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

COMMITS = {0: 4, 1: 7, 2: 10}
PROTOCOLS = ("classic", "consumer")


def setup_groups(pair: list[Server], name: str) -> tuple[str, list[str]]:
    """A topic ``name`` (3 x 10 records) and groups ``name.classic``/``name.consumer``."""
    groups = [f"{name}.{p}" for p in PROTOCOLS]
    for s in pair:
        create_topic(s.bootstrap, name, 3)
        produce(s.bootstrap, name, 10, 3)
        for g, protocol in zip(groups, PROTOCOLS, strict=True):
            consume_and_commit(s.bootstrap, g, protocol, name, COMMITS)
    return name, groups


def cg(pair: list[Server], *args: str) -> list:  # type: ignore[type-arg]
    return run_pair(CONSUMER_GROUPS, ["--bootstrap-server", "{bootstrap}", *args], pair)


def group_args(groups: list[str]) -> list[str]:
    return [a for g in groups for a in ("--group", g)]


def start_members(pair: list[Server], members: LiveMembers, topic: str, groups: list[str]) -> None:
    """Two live members in each group on each server: member-a alone first, so that
    member-b then takes one partition from it on both servers."""
    for client_id, count in (("member-a", 1), ("member-b", 2)):
        for s in pair:
            for g, protocol in zip(groups, PROTOCOLS, strict=True):
                members.start(s.bootstrap, g, protocol, topic, client_id)
        for s in pair:
            for g in groups:
                wait_until(
                    f"{g} settled with {count} on {s.name}",
                    lambda s=s, g=g, count=count: group_settled(s.bootstrap, g, count),
                )


def test_list_and_describe_groups_with_live_members(
    pair: list[Server], live_members: LiveMembers
) -> None:
    topic, groups = setup_groups(pair, "kt.cg.live")
    start_members(pair, live_members, topic, groups)
    by_group = group_args(groups)

    # --list: every group of the server, so only this test's rows and the header are
    # compared (the shared broker holds every other test's groups, whatever their names),
    # the rows sorted: Kafka lists its groups in the order of its hash tables.
    def ours(lines: list[str]) -> list[str]:
        header = [x for x in lines if x.startswith("GROUP ")]
        return header + sorted(x for x in lines if x.split(" ")[0] in groups)

    compare("tools.consumer-groups.list", cg(pair, "--list"), transform=ours)
    compare("tools.consumer-groups.list-state", cg(pair, "--list", "--state"), transform=ours)
    compare("tools.consumer-groups.list-type", cg(pair, "--list", "--type"), transform=ours)
    compare(
        "tools.consumer-groups.list-state-filter",
        cg(pair, "--list", "--state", "Stable"),
        transform=ours,
    )

    compare(
        "tools.consumer-groups.describe-offsets", cg(pair, "--describe", "--offsets", *by_group)
    )
    compare(
        "tools.consumer-groups.describe-members-verbose",
        cg(pair, "--describe", "--members", "--verbose", *by_group),
    )
    compare(
        "tools.consumer-groups.describe-state-verbose",
        cg(pair, "--describe", "--state", "--verbose", *by_group),
    )
    # A group with members refuses a reset and an offset delete of a topic it consumes.
    runs = cg(pair, "--reset-offsets", "--to-earliest", "--all-topics", "--execute", *by_group)
    compare("tools.consumer-groups.reset-active", runs)
    compare("tools.consumer-groups.reset-active", runs, stream="stderr")
    for g in groups:
        runs = cg(pair, "--delete-offsets", "--group", g, "--topic", topic)
        compare("tools.consumer-groups.delete-offsets-active", runs)
        compare("tools.consumer-groups.delete-offsets-active", runs, stream="stderr")
    # Nothing changed.
    for g in groups:
        assert committed(pair[1].bootstrap, g) == {(topic, p): o for p, o in COMMITS.items()}


def _iso(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def test_reset_offsets_every_mode_dry_run_and_execute(pair: list[Server], tmp_path: Path) -> None:
    topic, groups = setup_groups(pair, "kt.cg.reset")
    for s in pair:
        for g in groups:
            wait_until(f"{g} empty on {s.name}", lambda s=s, g=g: group_settled(s.bootstrap, g, 0))
    by_group = group_args(groups)

    plan = tmp_path / "plan.csv"
    plan.write_text(
        "".join(f"{g},{topic},{p},{o}\n" for g in groups for p, o in ((0, 1), (1, 9), (2, 6)))
    )
    # Records i are stamped BASE_TS + 10 i s: the first at or after +35 s is offset 4, and
    # the duration back from now to +55 s (the tools start within seconds) finds offset 6.
    modes: list[tuple[str, list[str]]] = [
        ("to-earliest", ["--to-earliest", "--all-topics"]),
        ("to-latest", ["--to-latest", "--topic", f"{topic}:0,2"]),
        ("to-offset", ["--to-offset", "5", "--all-topics"]),
        ("shift-by", ["--shift-by", "-2", "--topic", topic]),
        ("to-datetime", ["--to-datetime", _iso(BASE_TS + 35_000), "--all-topics"]),
        ("by-duration", None),  # type: ignore[list-item]
        ("from-file", ["--from-file", str(plan)]),
        ("to-current", ["--to-current", "--all-topics"]),
    ]
    for mode, args in modes:
        if args is None:
            seconds = int(time.time() - (BASE_TS + 55_000) / 1000)
            args = ["--by-duration", f"PT{seconds}S", "--all-topics"]
        for action in ("--dry-run", "--execute"):
            before = [{g: committed(s.bootstrap, g) for g in groups} for s in pair]
            runs = cg(pair, "--reset-offsets", *args, action, *by_group)
            compare(f"tools.consumer-groups.reset.{mode}", runs)
            compare(f"tools.consumer-groups.reset.{mode}", runs, stream="stderr")
            after = [{g: committed(s.bootstrap, g) for g in groups} for s in pair]
            assert after[0] == after[1], f"{mode} {action}: committed offsets differ"
            if action == "--dry-run":
                assert after == before, f"{mode}: a dry run changed offsets"

    # --export prints the plan as the CSV --from-file reads.
    runs = cg(
        pair,
        "--reset-offsets",
        "--shift-by",
        "1",
        "--all-topics",
        "--dry-run",
        "--export",
        *by_group,
    )
    compare("tools.consumer-groups.reset.export", runs)


def test_delete_offsets_and_delete_groups(pair: list[Server]) -> None:
    topic, groups = setup_groups(pair, "kt.cg.delete")
    other = "kt.cg.delete2"
    for s in pair:
        create_topic(s.bootstrap, other, 1)
        produce(s.bootstrap, other, 3, 1)
        for g, protocol in zip(groups, PROTOCOLS, strict=True):
            consume_and_commit(s.bootstrap, g, protocol, other, {0: 2})
        for g in groups:
            wait_until(f"{g} empty on {s.name}", lambda s=s, g=g: group_settled(s.bootstrap, g, 0))

    for g in groups:
        runs = cg(
            pair,
            "--delete-offsets",
            "--group",
            g,
            "--topic",
            f"{other}:0",
            "--topic",
            "kt.cg.nosuch",
        )
        compare("tools.consumer-groups.delete-offsets", runs)
        compare("tools.consumer-groups.delete-offsets", runs, stream="stderr")
        for s in pair:
            assert committed(s.bootstrap, g) == {(topic, p): o for p, o in COMMITS.items()}

    runs = cg(pair, "--delete", *group_args([*groups, "kt.cg.nosuch"]))
    compare("tools.consumer-groups.delete", runs)
    compare("tools.consumer-groups.delete", runs, stream="stderr")
    runs = cg(pair, "--describe", *group_args(groups))
    compare("tools.consumer-groups.describe-deleted", runs)
    compare("tools.consumer-groups.describe-deleted", runs, stream="stderr")
