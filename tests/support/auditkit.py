"""Clean data directories and injected anomalies for the offsets-audit tests.

How this works: ``build(tmp_path, inject)`` writes a clean data directory with kgc's own
storage code (``baseline``: two partitions of ``orders`` and a Stable group ``g1`` that
committed five times), lets ``inject`` add one anomaly (each ``inject_*`` returns the findings
the audit must report, and optionally a change to make on disk after the logs are closed) and
returns the directory with those expected findings. ``INJECTIONS`` lists every injection; the
``*_SCHEMA`` strings are the audit's report schemas as Spark DDL.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from storage.files import write_checkpoint
from storage.record_batch import encode_batch
from storage.records import (
    encode_offset_commit_key,
    encode_offset_commit_value,
    partition_for,
)
from support.logbuilder import OFFSETS, DataDir

NOW = 1_700_000_000_000
DAY = 86_400_000
N_OPARTS = 4
OP = partition_for("g1", N_OPARTS)  # where g1 lives in the offsets log
FINDING_SCHEMA = (
    "severity string, `check` string, `group` string, topic string, `partition` int, "
    "log_offset bigint"
)
PARTITION_SCHEMA = (
    "`group` string, topic string, `partition` int, committed_offset bigint, "
    "log_end_offset bigint, lag bigint, leader_epoch int, last_commit_ms bigint, "
    "commit_count bigint, status string, log_start_offset bigint, offsets_partition int"
)
GROUP_SCHEMA = (
    "`group` string, state string, members int, partitions int, total_lag bigint, "
    "worst_status string, commits_per_min double, generation int"
)

Expected = list[tuple[str, str, str | None, str | None, int | None, int]]
PostClose = Callable[[Path], None]


def baseline(dd: DataDir) -> None:
    """orders-0 has 500 records, orders-1 300; g1 (Stable, 2 members) commits 5 times each."""
    dd.topic("orders", 2, {0: 500, 1: 300}, ts=NOW - 9000)
    dd.group("g1", 2, 3, NOW - 8500)
    for i in range(5):
        ts = NOW - 8000 + i * 1500
        dd.commit("g1", "orders", 0, 100 * (i + 1), ts)
        dd.commit("g1", "orders", 1, 50 * (i + 1), ts)


def segment(root: Path, opart: int = OP) -> Path:
    return sorted((root / f"{OFFSETS}-{opart}").glob("*.log"))[-1]


def build(
    tmp_path: Path, inject: Callable[[DataDir], tuple[Expected, PostClose | None]] | None = None
) -> tuple[Path, Expected]:
    root = tmp_path / "data"
    dd = DataDir(root, N_OPARTS)
    baseline(dd)
    expected: Expected = []
    post = None
    if inject is not None:
        expected, post = inject(dd)
    dd.close()
    if post is not None:
        post(root)
    return root, expected


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def inject_crc_mismatch(dd: DataDir) -> tuple[Expected, PostClose]:
    x = dd.commit("g1", "orders", 0, 500, NOW - 1000)

    def corrupt(root: Path) -> None:
        seg = segment(root)
        data = bytearray(seg.read_bytes())
        data[-1] ^= 0xFF  # last byte of the last batch: its commit timestamp
        seg.write_bytes(bytes(data))

    return [("error", "crc_mismatch", None, OFFSETS, OP, x)], corrupt


def inject_truncated_batch(dd: DataDir) -> tuple[Expected, PostClose]:
    end = dd.olog("g1").log_end_offset
    return [("error", "truncated_batch", None, OFFSETS, OP, end)], lambda root: _append(
        segment(root), b"\x00" * 30
    )


def inject_unknown_record_version(dd: DataDir) -> tuple[Expected, None]:
    x, _ = dd.olog("g1").append_records([(b"\x00\x09future", b"\x00\x00")], timestamp_ms=NOW)
    return [("warn", "unknown_record_version", None, OFFSETS, OP, x)], None


def _commit_batch(base: int, offset: int, ts: int) -> bytes:
    rec = (encode_offset_commit_key("g1", "orders", 0), encode_offset_commit_value(offset, "", ts))
    return encode_batch(base, [rec], timestamp_ms=ts)


def inject_non_monotonic_offsets(dd: DataDir) -> tuple[Expected, PostClose]:
    return [("error", "non_monotonic_offsets", None, OFFSETS, OP, 3)], lambda root: _append(
        segment(root), _commit_batch(3, 500, NOW - 1000)
    )


def inject_overlapping_segments(dd: DataDir) -> tuple[Expected, PostClose]:
    def overlap(root: Path) -> None:
        (root / f"{OFFSETS}-{OP}" / f"{5:020d}.log").write_bytes(_commit_batch(5, 500, NOW - 1000))

    return [("error", "overlapping_segments", None, OFFSETS, OP, 5)], overlap


def inject_wrong_partition(dd: DataDir) -> tuple[Expected, None]:
    wrong = (partition_for("gx", N_OPARTS) + 1) % N_OPARTS
    x = dd.group("gx", 1, 1, NOW - 3000, opart=wrong)
    dd.commit("gx", "orders", 0, 500, NOW - 2500, opart=wrong)
    return [("error", "wrong_partition", "gx", OFFSETS, wrong, x)], None


def inject_offset_rewind(dd: DataDir) -> tuple[Expected, None]:
    x = dd.commit("g1", "orders", 1, 100, NOW - 1000)
    return [("warn", "offset_rewind", "g1", "orders", 1, x)], None


def inject_offset_rewind_across_segments(dd: DataDir) -> tuple[Expected, None]:
    dd.roll("g1")
    x = dd.commit("g1", "orders", 1, 100, NOW - 1000)
    return [("warn", "offset_rewind", "g1", "orders", 1, x)], None


def inject_commit_beyond_log_end(dd: DataDir) -> tuple[Expected, None]:
    x = dd.commit("g1", "orders", 1, 900, NOW - 1000)
    return [("error", "commit_beyond_log_end", "g1", "orders", 1, x)], None


def inject_commit_below_log_start(dd: DataDir) -> tuple[Expected, PostClose]:
    dd.group("g2", 1, 1, NOW - 3000)
    x = dd.commit("g2", "orders", 0, 50, NOW - 2500)

    def start_at_100(root: Path) -> None:
        write_checkpoint(root / "orders-0" / "log-start-offset", 100, sync=False)

    return [("warn", "commit_below_log_start", "g2", "orders", 0, x)], start_at_100


def inject_offsets_past_retention(dd: DataDir) -> tuple[Expected, None]:
    dd.group("ge", 0, 2, NOW - 8 * DAY)
    x = dd.commit("ge", "orders", 0, 500, NOW - 8 * DAY - 1000)
    return [("warn", "offsets_past_retention", "ge", "orders", 0, x)], None


def inject_tombstone_without_record(dd: DataDir) -> tuple[Expected, None]:
    # g1's orders-1 had commits before its tombstone: not flagged (and no longer live).
    dd.tombstone("g1", "orders", 1, ts=NOW - 1000)
    x = dd.tombstone("g1", "orders", 7, ts=NOW - 1000)
    y = dd.tombstone("g3", ts=NOW - 1000)
    return [
        ("info", "tombstone_without_record", "g1", "orders", 7, x),
        ("info", "tombstone_without_record", "g3", None, None, y),
    ], None


def inject_offsets_without_group(dd: DataDir) -> tuple[Expected, None]:
    x = dd.commit("solo", "orders", 0, 500, NOW - 3000)
    return [("info", "offsets_without_group", "solo", None, None, x)], None


def inject_group_without_offsets(dd: DataDir) -> tuple[Expected, None]:
    x = dd.group("lonely", 1, 1, NOW - 3000)
    return [("info", "group_without_offsets", "lonely", None, None, x)], None


def inject_commit_for_unknown_partition(dd: DataDir) -> tuple[Expected, None]:
    x = dd.commit("g1", "orders", 5, 10, NOW - 1000)
    y = dd.commit("g1", "gone", 0, 10, NOW - 1000)
    return [
        ("warn", "commit_for_unknown_partition", "g1", "orders", 5, x),
        ("warn", "commit_for_unknown_partition", "g1", "gone", 0, y),
    ], None


def inject_commit_timestamp_in_future(dd: DataDir) -> tuple[Expected, None]:
    x = dd.commit("g1", "orders", 0, 500, NOW + 3_600_000)
    return [("warn", "commit_timestamp_in_future", "g1", "orders", 0, x)], None


def inject_commit_timestamp_backwards(dd: DataDir) -> tuple[Expected, None]:
    x = dd.commit("g1", "orders", 0, 500, NOW - 5000)
    return [("warn", "commit_timestamp_backwards", "g1", "orders", 0, x)], None


def inject_leader_epoch_regression(dd: DataDir) -> tuple[Expected, None]:
    dd.commit("g1", "orders", 0, 500, NOW - 1500, epoch=5)
    x = dd.commit("g1", "orders", 0, 500, NOW - 1000, epoch=3)
    return [("warn", "leader_epoch_regression", "g1", "orders", 0, x)], None


def inject_generation_regression(dd: DataDir) -> tuple[Expected, None]:
    x = dd.group("g1", 2, 2, NOW - 1000)
    return [("warn", "generation_regression", "g1", None, None, x)], None


INJECTIONS = [v for k, v in sorted(globals().items()) if k.startswith("inject_")]
