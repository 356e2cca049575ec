"""The audit's consumer-group (KIP-848) report without Spark: decode hand-built segments of
records written by ``storage.records``'s encoders, then stitch and report them
as the Spark job's reduce step does (``stitch.report_rows``).

Expected figures are worked out by hand from the records listed in each test.
"""

from __future__ import annotations

from typing import Any

import pytest

from storage.record_batch import encode_batch
from storage.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    TopicPartitions,
    encode_consumer_group_key,
    encode_consumer_group_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from storage.records import partition_for as kafka_partition

pytest.importorskip("numpy")
pytest.importorskip("pyarrow")

from coordinator.audit.decode import decode_file
from coordinator.audit.schema import NAMES
from coordinator.audit.stitch import Context, report_rows

NPARTS = 4
ORDERS = bytes(range(16))
OTHER = bytes(range(16, 32))
NOW = 1_700_000_000_000

Record = tuple[bytes, bytes | None]


def rec(key: ConsumerGroupKey, value: ConsumerGroupValue | None) -> Record:
    data = None if value is None else encode_consumer_group_value(value)
    return encode_consumer_group_key(key), data


def epoch(g: str, e: int) -> Record:
    return rec(ConsumerGroupMetadataKey(g), ConsumerGroupMetadataValue(e))


def target_epoch(g: str, e: int) -> Record:
    return rec(
        ConsumerGroupTargetAssignmentMetadataKey(g), ConsumerGroupTargetAssignmentMetadataValue(e)
    )


def member(g: str, m: str, topics: list[str], regex: str | None = None) -> Record:
    value = ConsumerGroupMemberMetadataValue(
        None, None, f"client-{m}", "/127.0.0.1", topics, regex, 45000, "uniform"
    )
    return rec(ConsumerGroupMemberMetadataKey(g, m), value)


def target(g: str, m: str, parts: dict[bytes, list[int]]) -> Record:
    tps = [TopicPartitions(t, ps) for t, ps in parts.items()]
    return rec(
        ConsumerGroupTargetAssignmentMemberKey(g, m), ConsumerGroupTargetAssignmentMemberValue(tps)
    )


def current(
    g: str,
    m: str,
    e: int,
    state: int,
    assigned: dict[bytes, list[int]],
    pending: dict[bytes, list[int]] | None = None,
) -> Record:
    value = ConsumerGroupCurrentMemberAssignmentValue(
        e,
        e - 1,
        state,
        [TopicPartitions(t, ps) for t, ps in assigned.items()],
        [TopicPartitions(t, ps) for t, ps in (pending or {}).items()],
    )
    return rec(ConsumerGroupCurrentMemberAssignmentKey(g, m), value)


def gone(key: ConsumerGroupKey) -> Record:
    return rec(key, None)


def decode(opart: int, segments: list[list[Record]]) -> list[dict[str, Any]]:
    """Each segment's records in one batch, offsets continuing; rows filled as Spark's are."""
    rows: list[dict[str, Any]] = []
    base = 0
    for records in segments:
        buf = encode_batch(base, records, timestamp_ms=NOW)
        path = f"/data/__consumer_offsets-{opart}/{base:020d}.log"
        for r in decode_file(path, buf, window=5, num_partitions=NPARTS):
            rows.append({n: r.get(n) for n in NAMES})
        base += len(records)
    return rows


def context(catalog: bool = True) -> Context:
    return Context(
        now_ms=NOW,
        window=5,
        retention_ms=7 * 86_400_000,
        num_partitions=NPARTS,
        catalog={"orders": 4, "other": 2} if catalog else None,
        topic_ids={"orders": ORDERS.hex(), "other": OTHER.hex()} if catalog else {},
    )


def report(segments: list[list[Record]], group: str, catalog: bool = True) -> list[dict[str, Any]]:
    return report_rows(decode(kafka_partition(group, NPARTS), segments), context(catalog), 100)


def members(out: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["member_id"]: r for r in out if r["kind"] == "M"}


def findings(out: list[dict[str, Any]]) -> list[tuple[str, str, str | None, int | None]]:
    return [
        (r["severity"], r["check"], r["topic"], r["partition"]) for r in out if r["kind"] == "F"
    ]


def group_row(out: list[dict[str, Any]], g: str) -> dict[str, Any]:
    (row,) = [r for r in out if r["kind"] == "G" and r["group"] == g]
    return row


# ---------------------------------------------------------------- a group's life


def life() -> list[list[Record]]:
    g = "cg"
    first = [
        epoch(g, 1),  # 0
        member(g, "m1", ["orders"]),  # 1
        target(g, "m1", {ORDERS: [0, 1, 2, 3]}),  # 2
        target_epoch(g, 1),  # 3
        current(g, "m1", 1, 0, {ORDERS: [0, 1, 2, 3]}),  # 4
        (encode_offset_commit_key(g, "orders", 0), encode_offset_commit_value(10, "", NOW)),  # 5
    ]
    second = [
        member(g, "m2", ["orders"]),  # 6
        epoch(g, 2),  # 7
        target(g, "m1", {ORDERS: [0, 1]}),  # 8
        target(g, "m2", {ORDERS: [2, 3]}),  # 9
        target_epoch(g, 2),  # 10
        current(g, "m1", 2, 1, {ORDERS: [0, 1]}, {ORDERS: [2, 3]}),  # 11: UNREVOKED
        current(g, "m2", 2, 2, {}),  # 12: UNRELEASED
        member(g, "m3", ["orders"]),  # 13
        current(g, "m3", 2, 0, {}),  # 14
        gone(ConsumerGroupCurrentMemberAssignmentKey(g, "m3")),  # 15: m3 leaves
        gone(ConsumerGroupTargetAssignmentMemberKey(g, "m3")),  # 16
        gone(ConsumerGroupMemberMetadataKey(g, "m3")),  # 17
    ]
    return [first, second]


def test_decode_keeps_the_last_record_of_each_key_per_segment() -> None:
    rows = decode(kafka_partition("cg", NPARTS), life())
    q = [
        (r["seg"], r["part"], r["topic"], r["lo1"], r["lo2"], r["n"], r["last_tomb"])
        for r in rows
        if r["kind"] == "Q"
    ]
    assert sorted(q) == sorted(
        [
            (0, 3, None, 0, 0, 1, False),
            (0, 5, "m1", 1, 1, 1, False),
            (0, 7, "m1", 2, 2, 1, False),
            (0, 6, None, 3, 3, 1, False),
            (0, 8, "m1", 4, 4, 1, False),
            (6, 5, "m2", 6, 6, 1, False),
            (6, 3, None, 7, 7, 1, False),
            (6, 7, "m1", 8, 8, 1, False),
            (6, 7, "m2", 9, 9, 1, False),
            (6, 6, None, 10, 10, 1, False),
            (6, 8, "m1", 11, 11, 1, False),
            (6, 8, "m2", 12, 12, 1, False),
            (6, 5, "m3", 13, 17, 2, True),
            (6, 8, "m3", 14, 15, 2, True),
            (6, 7, "m3", 16, 16, 1, True),
        ]
    )
    # consumer-group records are no longer "unknown record versions"
    assert not [r for r in rows if r["kind"] == "F"]


def test_members_epochs_and_partitions_after_replay() -> None:
    out = report(life(), "cg")
    ms = members(out)
    assert set(ms) == {"m1", "m2"}  # m3's tombstones removed it
    m1, m2 = ms["m1"], ms["m2"]
    assert (m1["member_epoch"], m1["previous_member_epoch"], m1["member_state"]) == (
        2,
        1,
        "UNREVOKED_PARTITIONS",
    )
    assert (m1["assigned"], m1["pending"], m1["target"]) == (
        "orders:0,1",
        "orders:2,3",
        "orders:0,1",
    )
    assert (m2["member_epoch"], m2["member_state"]) == (2, "UNRELEASED_PARTITIONS")
    assert (m2["assigned"], m2["pending"], m2["target"]) == ("", "", "orders:2,3")
    assert m1["subscribed"] == "orders" and m1["client_id"] == "client-m1"
    assert (m1["generation"], m1["assignment_epoch"]) == (2, 2)
    g = group_row(out, "cg")
    assert (g["state"], g["members"], g["generation"], g["group_type"], g["assignment_epoch"]) == (
        "Reconciling",
        2,
        2,
        "consumer",
        2,
    )
    assert g["partitions"] == 1  # its committed offset
    # a consistent hand-over: nothing owned twice, every partition in a target; the group's
    # offsets belong to a live group (no offsets_without_group)
    assert findings(out) == []


def test_all_members_reconciled_is_stable_and_deleted_group_is_dead() -> None:
    g = "cg"
    stable = [
        [
            epoch(g, 3),
            member(g, "a", ["orders"]),
            target(g, "a", {ORDERS: [0, 1, 2, 3]}),
            target_epoch(g, 3),
            current(g, "a", 3, 0, {ORDERS: [0, 1, 2, 3]}),
        ]
    ]
    out = report(stable, g)
    assert group_row(out, g)["state"] == "Stable" and findings(out) == [
        ("info", "group_without_offsets", None, None)
    ]
    # DeleteGroups: 8, 7 tombstones, 6, 5, 3 tombstones
    deleted = [
        *stable,
        [
            gone(ConsumerGroupCurrentMemberAssignmentKey(g, "a")),
            gone(ConsumerGroupTargetAssignmentMemberKey(g, "a")),
            gone(ConsumerGroupTargetAssignmentMetadataKey(g)),
            gone(ConsumerGroupMemberMetadataKey(g, "a")),
            gone(ConsumerGroupMetadataKey(g)),
        ],
    ]
    out = report(deleted, g)
    assert group_row(out, g)["state"] == "Dead" and members(out) == {}
    # an epoch ahead of the target's: Assigning
    assigning = [*stable, [epoch(g, 4)]]
    assert group_row(report(assigning, g), g)["state"] == "Assigning"


# ---------------------------------------------------------------- anomalies


def test_partition_in_two_current_assignments_is_an_error() -> None:
    g = "bad"
    segs = [
        [
            epoch(g, 5),
            member(g, "a", ["orders"]),
            member(g, "b", ["orders"]),
            target(g, "a", {ORDERS: [0, 1]}),
            target(g, "b", {ORDERS: [2, 3]}),
            target_epoch(g, 5),
            current(g, "a", 5, 0, {ORDERS: [0, 1]}, {ORDERS: [2]}),  # 6: still revoking 2
            current(g, "b", 5, 0, {ORDERS: [2, 3]}),  # 7: already owns 2
        ]
    ]
    out = report(segs, g)
    assert findings(out) == [
        ("error", "partition_assigned_twice", "orders", 2),
        ("info", "group_without_offsets", None, None),
    ]
    (f,) = [r for r in out if r.get("check") == "partition_assigned_twice"]
    assert f["log_offset"] == 7 and f["group"] == g
    assert f["detail"] == "partition orders-2 is in the current assignment of a and b"


def test_subscribed_partitions_in_no_target() -> None:
    g = "bad"
    segs = [
        [
            epoch(g, 5),
            member(g, "a", ["orders", "unknown-topic"]),
            member(g, "b", [], regex="oth.*"),
            rec(
                ConsumerGroupRegularExpressionKey(g, "oth.*"),
                ConsumerGroupRegularExpressionValue(["other"], 1, NOW),
            ),
            target(g, "a", {ORDERS: [0, 1]}),
            target(g, "b", {ORDERS: [2]}),
            target_epoch(g, 5),  # 6
            current(g, "a", 5, 0, {ORDERS: [0, 1]}),
            current(g, "b", 5, 0, {ORDERS: [2]}),
        ]
    ]
    out = report(segs, g)
    # orders-3 (catalog: 4 partitions) and both partitions of other (the regex's topic)
    assert [f for f in findings(out) if f[1] == "partition_unassigned"] == [
        ("warn", "partition_unassigned", "orders", 3),
        ("warn", "partition_unassigned", "other", 0),
    ]
    f = next(r for r in out if r.get("topic") == "orders" and r["kind"] == "F")
    assert f["log_offset"] == 6
    assert (
        f["detail"] == "1 of 4 partitions of subscribed topic orders are in no member's target: 3"
    )
    # the target behind the group epoch: a recomputation is due, info only
    out = report([[*segs[0], epoch(g, 6)]], g)
    unassigned = [f for f in findings(out) if f[1] == "partition_unassigned"]
    assert unassigned == [
        ("info", "partition_unassigned", "orders", 3),
        ("info", "partition_unassigned", "other", 0),
    ]


def test_without_catalog_only_owned_partitions_missing_from_targets_count() -> None:
    g = "nocat"
    segs = [
        [
            epoch(g, 2),
            member(g, "a", ["orders"]),
            target(g, "a", {ORDERS: [0, 1]}),
            target_epoch(g, 2),
            current(g, "a", 2, 0, {ORDERS: [0, 1, 5]}),
        ]
    ]
    out = report(segs, g, catalog=False)
    unassigned = [r for r in out if r.get("check") == "partition_unassigned"]
    assert [(r["severity"], r["partition"]) for r in unassigned] == [("warn", 5)]
    assert unassigned[0]["topic"] == "AAECAwQFBgcICQoLDA0ODw"  # Kafka's form of the id
    assert members(out)["a"]["assigned"] == "AAECAwQFBgcICQoLDA0ODw:0,1,5"


def test_undecodable_consumer_group_value_is_a_finding_and_keeps_the_previous_value() -> None:
    g = "cg"
    broken = (encode_consumer_group_key(ConsumerGroupMetadataKey(g)), b"\x00\x00\x00")
    out = report([[epoch(g, 4), member(g, "a", ["orders"]), broken]], g)
    assert ("error", "undecodable_record", None, None) in findings(out)
    assert group_row(out, g)["generation"] == 4
