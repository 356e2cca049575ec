"""The offsets audit end to end on logs written by kgc's own storage code.

A clean log must produce no findings and hand-computed lag figures; each anomaly is injected
into an otherwise clean log and must be reported with exactly the expected keys and offsets,
with nothing else flagged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.testing import assertDataFrameEqual
from support.auditkit import (
    FINDING_SCHEMA,
    GROUP_SCHEMA,
    INJECTIONS,
    N_OPARTS,
    NOW,
    OP,
    PARTITION_SCHEMA,
    Expected,
    PostClose,
    build,
    inject_commit_for_unknown_partition,
    inject_tombstone_without_record,
    inject_truncated_batch,
    inject_wrong_partition,
)
from support.logbuilder import DataDir

from coordinator import cli
from coordinator.audit.job import AuditOptions, run_audit
from storage.records import (
    partition_for,
)

pytestmark = pytest.mark.spark


def audit(spark: Any, root: Path, **kw: Any) -> Any:
    return run_audit(spark, AuditOptions(str(root), now_ms=NOW, **kw))


# ---------------------------------------------------------------- clean log


def test_clean_log_has_no_findings_and_correct_lag(spark: Any, tmp_path: Path) -> None:
    root, _ = build(tmp_path)
    result = audit(spark, root)
    try:
        assert result.findings.count() == 0
        last = NOW - 8000 + 4 * 1500
        expected_parts = spark.createDataFrame(
            [
                ("g1", "orders", 0, 500, 500, 0, -1, last, 5, "OK", 0, OP),
                ("g1", "orders", 1, 250, 300, 50, -1, last, 5, "OK", 0, OP),
            ],
            PARTITION_SCHEMA,
        )
        assertDataFrameEqual(result.partitions.select(*expected_parts.columns), expected_parts)
        # 10 commits between the first (NOW-8000) and last (NOW-2000): 10 per 6 s = 100/min
        expected_groups = spark.createDataFrame(
            [("g1", "Stable", 2, 2, 50, "OK", 100.0, 3)], GROUP_SCHEMA
        )
        assertDataFrameEqual(result.groups, expected_groups)
        assert result.stats["records"] == 11 and result.stats["offsets_partitions"] == N_OPARTS
    finally:
        result.release()


def test_cli_exit_codes_and_report_files(spark: Any, tmp_path: Path, capsys: Any) -> None:
    root, _ = build(tmp_path)
    out = tmp_path / "out"
    args = ["audit", "--log-dir", str(root), "--out", str(out), "--now-ms", str(NOW)]
    assert cli.main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_code"] == 0 and summary["findings"]["total"] == 0
    assert summary["partitions"] == 2 and summary["total_lag"] == 50
    parts = spark.read.parquet(str(out / "partitions"))
    assert sorted((r["partition"], r["lag"]) for r in parts.collect()) == [(0, 0), (1, 50)]
    assert spark.read.parquet(str(out / "findings")).count() == 0
    assert "No findings." in capsys.readouterr().out

    # an error-level finding: exit 4 by default, 0 with --fail-on none; JSON output
    bad = tmp_path / "bad"
    bad_root, _ = build(bad, inject_truncated_batch)
    args = ["audit", "--log-dir", str(bad_root), "--out", str(out), "--now-ms", str(NOW)]
    assert cli.main(args) == 4
    assert "truncated_batch" in capsys.readouterr().out
    assert cli.main([*args, "--fail-on", "none", "--format", "json", "--quiet"]) == 0
    rows = json.loads((out / "findings.json").read_text())  # one JSON file per report
    assert [r["check"] for r in rows] == ["truncated_batch"]


def test_missing_log_dir_is_an_error(spark: Any, tmp_path: Path, capsys: Any) -> None:
    args = ["audit", "--log-dir", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]
    assert cli.main(args) == 2  # bad usage, before Spark
    assert "does not exist" in capsys.readouterr().err
    args = ["audit", "--log-dir", str(tmp_path), "--out", str(tmp_path / "o")]
    assert cli.main(args) == 1  # a directory without segments: the audit cannot run
    assert "no log segments" in capsys.readouterr().err


def test_without_pyspark_prints_install_hint(monkeypatch: Any, tmp_path: Path, capsys: Any) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pyspark", None)
    assert cli.main(["audit", "--log-dir", str(tmp_path), "--out", str(tmp_path / "o")]) == 1
    assert "pip install 'kgc[audit]'" in capsys.readouterr().err


# ---------------------------------------------------------------- anomalies


@pytest.mark.parametrize("inject", INJECTIONS, ids=lambda f: f.__name__.removeprefix("inject_"))
def test_injected_anomaly_is_found_and_nothing_else(
    spark: Any, tmp_path: Path, inject: Callable[[DataDir], tuple[Expected, PostClose | None]]
) -> None:
    root, expected = build(tmp_path, inject)
    result = audit(spark, root)
    try:
        actual = result.findings.select(
            "severity", "check", "group", "topic", "partition", "log_offset"
        )
        assertDataFrameEqual(actual, spark.createDataFrame(expected, FINDING_SCHEMA))
        if inject is inject_commit_for_unknown_partition:
            # no topic log: lag and status unknown, and not counted in the group's worst status
            rows = result.partitions.filter("partition = 5 OR topic = 'gone'").collect()
            assert [(r["lag"], r["status"]) for r in rows] == [(None, None), (None, None)]
            assert result.groups.collect()[0]["worst_status"] == "OK"
        if inject is inject_wrong_partition:
            # all of a misplaced group's rows meet in one task: its window and group row too
            row = result.partitions.filter("`group` = 'gx'").collect()[0]
            wrong = (partition_for("gx", N_OPARTS) + 1) % N_OPARTS
            assert (row["lag"], row["status"], row["offsets_partition"]) == (0, "OK", wrong)
            g = result.groups.filter("`group` = 'gx'").collect()[0]
            assert (g["state"], g["partitions"], g["worst_status"]) == ("Stable", 1, "OK")
        if inject is inject_tombstone_without_record:
            assert [r["partition"] for r in result.partitions.collect()] == [0]
    finally:
        result.release()


# ---------------------------------------------------------------- consumer groups (KIP-848)


def test_consumer_group_members_and_assignment_anomalies(
    spark: Any, tmp_path: Path, capsys: Any
) -> None:
    """g1 (classic) as in the baseline; cg (consumer protocol) on topic pay (3 partitions):
    member a gets pay-0/1, b pay-2 then a new target moves pay-1 to b, a is still revoking it
    but b's current assignment already has it (owned twice), and nobody targets pay-2 any more
    (unassigned).  A third member c joins and leaves (tombstones) in a later segment."""
    from storage.records import (
        ConsumerGroupCurrentMemberAssignmentKey as CurKey,
    )
    from storage.records import (
        ConsumerGroupCurrentMemberAssignmentValue as Cur,
    )
    from storage.records import ConsumerGroupMemberMetadataKey as MemberKey
    from storage.records import ConsumerGroupMemberMetadataValue as Member
    from storage.records import ConsumerGroupMetadataKey as EpochKey
    from storage.records import ConsumerGroupMetadataValue as Epoch
    from storage.records import ConsumerGroupTargetAssignmentMemberKey as TargetKey
    from storage.records import (
        ConsumerGroupTargetAssignmentMemberValue as Target,
    )
    from storage.records import (
        ConsumerGroupTargetAssignmentMetadataKey as TargetEpochKey,
    )
    from storage.records import (
        ConsumerGroupTargetAssignmentMetadataValue as TargetEpoch,
    )
    from storage.records import TopicPartitions as TP
    from storage.records import encode_consumer_group_key as ek
    from storage.records import encode_consumer_group_value as ev

    pay = bytes(range(1, 17))

    def member(m: str) -> tuple[bytes, bytes]:
        value = Member(None, None, f"client-{m}", "/10.0.0.1", ["pay"], "", 45000, "uniform")
        return ek(MemberKey("cg", m)), ev(value)

    def cur(
        m: str, e: int, state: int, owned: list[int], pending: list[int]
    ) -> tuple[bytes, bytes]:
        value = Cur(e, e - 1, state, [TP(pay, owned)], [TP(pay, pending)] if pending else [])
        return ek(CurKey("cg", m)), ev(value)

    def tgt(m: str, parts: list[int]) -> tuple[bytes, bytes]:
        return ek(TargetKey("cg", m)), ev(Target([TP(pay, parts)]))

    def epochs(e: int) -> list[tuple[bytes, bytes]]:
        return [(ek(EpochKey("cg")), ev(Epoch(e))), (ek(TargetEpochKey("cg")), ev(TargetEpoch(e)))]

    def inject(dd: DataDir) -> tuple[Expected, None]:
        dd.topic("pay", 3, {0: 10, 1: 10, 2: 10}, ts=NOW - 9000, topic_id=pay)
        ts = NOW - 5000
        dd.records("cg", [member("a"), member("b"), tgt("a", [0, 1]), tgt("b", [2])], ts)
        dd.records("cg", [*epochs(1), cur("a", 1, 0, [0, 1], []), cur("b", 1, 0, [2], [])], ts)
        dd.roll("cg")
        dd.records("cg", [member("c"), cur("c", 1, 0, [], [])], ts + 100)
        dd.records(
            "cg", [(ek(CurKey("cg", "c")), None), (ek(MemberKey("cg", "c")), None)], ts + 200
        )
        dd.records("cg", [tgt("a", [0]), tgt("b", [1]), *epochs(2)], ts + 300)
        dd.records("cg", [cur("a", 2, 1, [0], [1]), cur("b", 2, 0, [1], [])], ts + 400)
        return [], None

    root, _ = build(tmp_path, inject)
    out = tmp_path / "out"
    args = ["audit", "--log-dir", str(root), "--out", str(out), "--now-ms", str(NOW)]
    assert cli.main([*args, "--format", "json"]) == 4  # the double assignment is an error
    console = capsys.readouterr().out
    assert "Consumer groups (KIP-848):" in console and "partition_assigned_twice" in console

    summary = json.loads((out / "summary.json").read_text())
    (cg,) = summary["consumer_groups"]
    assert (cg["group"], cg["state"], cg["group_epoch"], cg["assignment_epoch"]) == (
        "cg",
        "Reconciling",
        2,
        2,
    )
    got = {
        m["member_id"]: (
            m["member_epoch"],
            m["member_state"],
            m["assigned"],
            m["pending"],
            m["target"],
            m["subscribed"],
        )
        for m in cg["members"]
    }
    assert got == {
        "a": (2, "UNREVOKED_PARTITIONS", "pay:0", "pay:1", "pay:0", "pay"),
        "b": (2, "STABLE", "pay:1", "", "pay:1", "pay"),
    }
    assert [(a["severity"], a["check"], a["topic"], a["partition"]) for a in cg["anomalies"]] == [
        ("error", "partition_assigned_twice", "pay", 1),
        ("warn", "partition_unassigned", "pay", 2),
    ]
    # the members table, and the groups table: cg is a consumer group, g1 untouched
    members = json.loads((out / "members.json").read_text())
    assert sorted((r["group"], r["member_id"], r["member_epoch"]) for r in members) == [
        ("cg", "a", 2),
        ("cg", "b", 2),
    ]
    groups = {r["group"]: r for r in json.loads((out / "groups.json").read_text())}
    assert (groups["cg"]["state"], groups["cg"]["members"], groups["cg"]["generation"]) == (
        "Reconciling",
        2,
        2,
    )
    assert (groups["g1"]["state"], groups["g1"]["members"]) == ("Stable", 2)
    checks = sorted(
        (r["check"], r["group"]) for r in json.loads((out / "findings.json").read_text())
    )
    # no unknown_record_version for the consumer-group records
    assert checks == [
        ("group_without_offsets", "cg"),
        ("partition_assigned_twice", "cg"),
        ("partition_unassigned", "cg"),
    ]
