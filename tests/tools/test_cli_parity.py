"""kafka-consumer-groups.sh / rpk parity of ``kgc groups`` and ``kgc offsets`` against a real
``kgc serve``: several groups and ``--all-groups`` with TOTAL-LAG, state and type filters, the
reset modes ``--to-current``, ``--by-duration``, ``--from-file`` and ``--export`` in Kafka's
CSV, ``--all-topics`` scoped to the committed partitions, clamp warnings; exit codes.

Groups here only commit (confluent-kafka's ``commit`` without joining: Kafka's "simple"
consumer groups), so they are Empty and their offsets can be reset while the test runs.
"""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.clikit import Run, call_cli, run_cli
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration

TOPIC = "payments"
PARTITIONS = 3
RECORDS = 10  # per partition
SPACING_MS = 20_000  # between a partition's record timestamps


def kcli(kgc: KgcProcess, *args: str) -> Run:
    """``kgc *args`` in process (support.clikit); test_exit_codes_and_version keeps subprocesses."""
    return call_cli(*args, "--bootstrap-server", kgc.bootstrap)


def fill(kgc: KgcProcess, topic: str = TOPIC, partitions: int = PARTITIONS) -> int:
    """RECORDS records per partition, record i stamped ``base + i * SPACING_MS`` with base
    400 s ago; returns base."""
    r = kcli(kgc, "topics", "create", topic, "--partitions", str(partitions))
    assert r.code == 0, r
    base = int(time.time() * 1000) - RECORDS * 2 * SPACING_MS
    producer = Producer({"bootstrap.servers": kgc.bootstrap, "linger.ms": 0})
    for i in range(RECORDS):
        for p in range(partitions):
            producer.produce(topic, b"x", partition=p, timestamp=base + i * SPACING_MS)
    assert producer.flush(30) == 0
    return base


def commit(kgc: KgcProcess, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit as a simple consumer (no JoinGroup): the group stays Empty."""
    c = Consumer({"bootstrap.servers": kgc.bootstrap, "group.id": group})
    try:
        c.commit(
            offsets=[TopicPartition(t, p, off) for (t, p), off in offsets.items()],
            asynchronous=False,
        )
    finally:
        c.close()


def committed(kgc: KgcProcess, group: str) -> dict[tuple[str, int], int]:
    r = kcli(kgc, "groups", "describe", group, "--output", "json")
    assert r.code == 0, r
    return {
        (row["topic"], row["partition"]): row["current_offset"]
        for row in r.json()["offsets"]
        if row["current_offset"] is not None
    }


def test_describe_several_groups_all_groups_and_list_filters(kgc: KgcProcess) -> None:
    fill(kgc)
    commit(kgc, "alpha", {(TOPIC, 0): 4, (TOPIC, 1): 9})  # lag 6 + 1
    commit(kgc, "beta", {(TOPIC, 2): 0})  # lag 10

    # Two groups: a table each (header, rows), each followed by its TOTAL-LAG line.
    r = kcli(kgc, "groups", "describe", "alpha", "beta")
    assert r.code == 0, r
    print("\n" + r.out)
    blocks = [b.splitlines() for b in r.out.strip().split("\n\n")]
    assert len(blocks) == 2, r.out
    for block, group, rows, lag in ((blocks[0], "alpha", 2, 7), (blocks[1], "beta", 1, 10)):
        assert block[0].split()[:6] == [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
        ]
        assert [ln.split()[0] for ln in block[1:-1]] == [group] * rows
        assert block[-1].split() == ["TOTAL-LAG", str(lag)]

    # One of them missing: the other is still shown, the missing one named, exit 1.
    r = kcli(kgc, "groups", "describe", "alpha", "nope")
    assert r.code == 1, r
    assert "TOTAL-LAG  7" in r.out and "'nope' does not exist" in r.err

    # --all-groups: every group, as a JSON list with total_lag.
    r = kcli(kgc, "groups", "describe", "--all-groups", "--output", "json")
    assert r.code == 0, r
    got = {g["group"]: g["total_lag"] for g in r.json()}
    assert got == {"alpha": 7, "beta": 10}
    # one named group stays one object, as before
    assert kcli(kgc, "groups", "describe", "beta", "--output", "json").json()["total_lag"] == 10

    # --state takes several states (case-insensitive, comma-separated or repeated).
    def listed(*flags: str) -> set[str]:
        r = kcli(kgc, "groups", "list", *flags, "--output", "json")
        assert r.code == 0, r
        return {g["group"] for g in r.json()}

    assert listed("--state", "stable,EMPTY") == {"alpha", "beta"}
    assert listed("--state", "Stable", "--state", "Dead") == set()
    assert listed("--state", "Empty", "--type", "classic") == {"alpha", "beta"}
    assert listed("--type", "consumer") == set()


def test_reset_modes_current_duration_all_topics_and_clamping(kgc: KgcProcess) -> None:
    fill(kgc)
    commit(kgc, "g", {(TOPIC, 1): 3})  # partitions 0 and 2 have no offset

    def reset(*how: str, execute: bool = False) -> tuple[dict[tuple[str, int], int], Run]:
        r = kcli(
            kgc,
            "offsets",
            "reset",
            "g",
            *how,
            *(["--execute"] if execute else []),
            "--output",
            "json",
        )
        assert r.code == 0, r
        return {
            (row["topic"], row["partition"]): row["new_offset"] for row in r.json()["offsets"]
        }, r

    # --all-topics is the partitions the group has offsets for, not every partition of TOPIC
    plan, _ = reset("--all-topics", "--to-earliest")
    assert plan == {(TOPIC, 1): 0}

    # --to-current: the committed offset, the log end where there is none
    plan, _ = reset("--topic", TOPIC, "--to-current")
    assert plan == {(TOPIC, 0): RECORDS, (TOPIC, 1): 3, (TOPIC, 2): RECORDS}

    # --by-duration: records are 20 s apart, the first 400 s ago; 290 s ago falls between
    # records 5 (300 s ago) and 6 (280 s ago), whatever the few seconds the CLI takes
    plan, _ = reset("--topic", f"{TOPIC}:0,1", "--by-duration", "PT4M50S")
    assert plan == {(TOPIC, 0): 6, (TOPIC, 1): 6}
    # a time after every record: the log end, with a warning per partition
    plan, r = reset("--topic", f"{TOPIC}:2", "--by-duration=-PT1H")  # "=": a leading "-"
    assert plan == {(TOPIC, 2): RECORDS}
    assert "no record at or after that time" in r.err and r.json()["warnings"]

    # numbers outside the log are clamped, each one named on stderr as Kafka's tool warns
    r = kcli(kgc, "offsets", "reset", "g", "--topic", f"{TOPIC}:1", "--to-offset", "1000")
    assert r.code == 0, r
    assert (
        f"new offset 1000 is higher than the log end offset of {TOPIC}-1: set to {RECORDS}" in r.err
    )
    assert r.out.splitlines()[1].split()[-1] == str(RECORDS)
    plan, r = reset("--topic", f"{TOPIC}:1", "--shift-by", "-50", execute=True)
    assert plan == {(TOPIC, 1): 0}
    assert "new offset -47 is lower than the log start offset" in r.err
    assert committed(kgc, "g") == {(TOPIC, 1): 0}
    # an offset inside the log: no warning
    _, r = reset("--topic", f"{TOPIC}:1", "--to-offset", "5")
    assert "warning" not in r.err and r.json()["warnings"] == []


def test_export_and_from_file_round_trip(kgc: KgcProcess, tmp_path: Path) -> None:
    fill(kgc)
    commit(kgc, "one", {(TOPIC, 0): 2, (TOPIC, 1): 2})
    commit(kgc, "two", {(TOPIC, 2): 5})

    # One group: Kafka's topic,partition,offset, no header, nothing else on stdout.
    r = kcli(kgc, "offsets", "reset", "one", "--all-topics", "--shift-by", "3", "--export")
    assert r.code == 0, r
    assert r.out == f"{TOPIC},0,5\n{TOPIC},1,5\n"
    assert "Dry run" in r.err
    # Several groups: the group first.
    r = kcli(kgc, "offsets", "reset", "one", "two", "--all-topics", "--to-latest", "--export")
    assert r.code == 0, r
    assert list(csv.reader(io.StringIO(r.out))) == [
        ["one", TOPIC, "0", str(RECORDS)],
        ["one", TOPIC, "1", str(RECORDS)],
        ["two", TOPIC, "2", str(RECORDS)],
    ]

    # --from-file reads back what --export printed, and executes it.
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{TOPIC},0,7\n{TOPIC},2,1\n")
    r = kcli(kgc, "offsets", "reset", "one", "--from-file", str(plan), "--execute")
    assert r.code == 0, r
    assert committed(kgc, "one") == {(TOPIC, 0): 7, (TOPIC, 1): 2, (TOPIC, 2): 1}
    # the grouped form for two groups, with an offset past the end clamped (and named)
    plan.write_text(f"one,{TOPIC},1,4\ntwo,{TOPIC},2,99\n")
    r = kcli(kgc, "offsets", "reset", "one", "two", "--from-file", str(plan), "--execute")
    assert r.code == 0, r
    assert "new offset 99 is higher than the log end offset" in r.err
    assert committed(kgc, "one") == {(TOPIC, 0): 7, (TOPIC, 1): 4, (TOPIC, 2): 1}
    assert committed(kgc, "two") == {(TOPIC, 2): RECORDS}
    # an export, fed back, plans the same offsets
    exported = kcli(kgc, "offsets", "reset", "one", "--all-topics", "--to-current", "--export")
    plan.write_text(exported.out)
    again = kcli(kgc, "offsets", "reset", "one", "--from-file", str(plan), "--export")
    assert (
        again.code == 0 and again.out == exported.out == f"{TOPIC},0,7\n{TOPIC},1,4\n{TOPIC},2,1\n"
    )

    # bad usage, each exit 2 with one line: a bad file line, no group column for two groups,
    # a scope beside --from-file, --export with JSON
    plan.write_text(f"{TOPIC},zero,1\n")
    kcli(kgc, "offsets", "reset", "one", "--from-file", str(plan)).assert_clean_error(2)
    plan.write_text(f"{TOPIC},0,1\n")
    kcli(kgc, "offsets", "reset", "one", "two", "--from-file", str(plan)).assert_clean_error(2)
    kcli(
        kgc, "offsets", "reset", "one", "--from-file", str(plan), "--all-topics"
    ).assert_clean_error(2)
    kcli(
        kgc,
        "offsets",
        "reset",
        "one",
        "--all-topics",
        "--to-latest",
        "--export",
        "--output",
        "json",
    ).assert_clean_error(2)


def test_exit_codes_and_version(kgc: KgcProcess, tmp_path: Path) -> None:
    from importlib import metadata

    v = run_cli("--version")
    assert v.code == 0 and v.out.strip() == f"kgc {metadata.version('kgc')}", v

    # bad usage is 2 everywhere, with one line
    for args in (
        ("groups", "describe"),  # no group
        ("groups", "describe", "g", "--all-groups"),
        ("offsets", "reset", "g", "--to-earliest"),  # no scope
        ("groups", "list", "--state", "Sleeping"),
        ("offsets", "reset", "g", "--topic", TOPIC, "--by-duration", "90m"),
    ):
        r = kcli(kgc, *args)
        assert r.code == 2 and "Traceback" not in r.err, r
    run_cli("health", "--bootstrap-server", "no-port").assert_clean_error(2)
    r = run_cli("serve", "--config", str(tmp_path / "missing.properties"))
    r.assert_clean_error(2)
    # the server said no: 1; nothing listening: 3 -- through the entry point itself
    run_cli("groups", "describe", "nope", "--bootstrap-server", kgc.bootstrap).assert_clean_error(1)
    kgc.stop()
    run_cli("groups", "list", "--bootstrap-server", kgc.bootstrap).assert_clean_error(3)
