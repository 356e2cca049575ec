"""The one wide row every audit decoder emits, and the builders of its finding rows.

How this works: all rows share one schema (``SCHEMA``; ``SPARK_SCHEMA`` is the same for
Spark's ``mapInArrow``), each row a dict of the columns it uses, unused columns null; the
``kind`` column tells what a row is (decode.py lists the kinds). ``finding_row`` builds an ``F``
row; ``value_finding_row`` one for a value that does not decode (a version the audit does not
know is a warning, garbage an error). ``classify_path`` tells which files of a data directory
the decoders read. ``OUT_SCHEMA`` is, built the same way, the row of the report stitch.py emits.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from storage.local.manager import parse_partition_dir
from storage.local.segment import parse_segment_name
from storage.records import (
    OffsetsFormatError,
)

CATALOG_NAME = "topics.json"
CHECKPOINT_NAME = "log-start-offset"

_COLUMNS: list[tuple[str, pa.DataType, str]] = [
    ("kind", pa.string(), "string"),
    ("src", pa.string(), "string"),
    ("opart", pa.int32(), "int"),
    ("seg", pa.int64(), "bigint"),
    ("grp", pa.string(), "string"),
    ("topic", pa.string(), "string"),
    ("part", pa.int32(), "int"),
    ("lo1", pa.int64(), "bigint"),
    ("lo2", pa.int64(), "bigint"),
    ("off1", pa.int64(), "bigint"),
    ("off2", pa.int64(), "bigint"),
    ("ts1", pa.int64(), "bigint"),
    ("ts2", pa.int64(), "bigint"),
    ("tsmax", pa.int64(), "bigint"),
    ("ep1", pa.int32(), "int"),
    ("ep2", pa.int32(), "int"),
    ("n", pa.int64(), "bigint"),
    ("n2", pa.int64(), "bigint"),
    ("lead_tomb", pa.int64(), "bigint"),
    ("last_tomb", pa.bool_(), "boolean"),
    ("expire", pa.int64(), "bigint"),
    ("state_ts", pa.int64(), "bigint"),
    ("members", pa.int32(), "int"),
    ("ptype", pa.string(), "string"),
    ("expected", pa.int32(), "int"),
    ("severity", pa.string(), "string"),
    ("chk", pa.string(), "string"),
    ("detail", pa.string(), "string"),
    ("size", pa.int64(), "bigint"),
]
SCHEMA = pa.schema([(n, t) for n, t, _ in _COLUMNS])
SPARK_SCHEMA = ", ".join(f"{n} {s}" for n, _, s in _COLUMNS)
NAMES = [n for n, _, _ in _COLUMNS]

Row = dict[str, Any]


# Where a finding belongs in file order: (batch, record, rank within the record), with
# record -1 for a batch's own findings.  Findings are made per kind and sorted at the end.
Order = tuple[int, int, int]
Finding = tuple[Order, Row]
CommitKey = tuple[str, str, int]  # (group, topic, partition)
Ints = NDArray[np.int64]


def classify_path(path: str) -> tuple[str, str | None, int | None, int | None]:
    """(kind, topic, partition, segment base) of a path: kind is log/checkpoint/catalog/other."""
    parts = path.rstrip("/").rsplit("/", 2)
    name = parts[-1]
    if name == CATALOG_NAME:
        return "catalog", None, None, None
    if len(parts) < 2:
        return "other", None, None, None
    parsed = parse_partition_dir(parts[-2])
    if parsed is None:
        return "other", None, None, None
    if name == CHECKPOINT_NAME:
        return "checkpoint", parsed[0], parsed[1], None
    base = parse_segment_name(name)
    if base is None:
        return "other", None, None, None
    return "log", parsed[0], parsed[1], base


def value_finding_row(
    src: str,
    opart: int,
    seg: int,
    what: str,
    error: OffsetsFormatError,
    log_offset: int,
    group: str,
    topic: str | None = None,
    partition: int | None = None,
) -> Row:
    """A value that does not decode: a version we do not know (warn) or garbage (error)."""
    unknown_version = "version" in str(error)
    return finding_row(
        src,
        opart,
        seg,
        "warn" if unknown_version else "error",
        "unknown_record_version" if unknown_version else "undecodable_record",
        f"{what} value: {error}",
        log_offset,
        group,
        topic,
        partition,
    )


def finding_row(
    src: str,
    opart: int | None,
    seg: int | None,
    severity: str,
    check: str,
    detail: str,
    log_offset: int | None = None,
    group: str | None = None,
    topic: str | None = None,
    partition: int | None = None,
) -> Row:
    return {
        "kind": "F",
        "src": src,
        "opart": opart,
        "seg": seg,
        "grp": group,
        "topic": topic,
        "part": partition,
        "lo1": log_offset,
        "severity": severity,
        "chk": check,
        "detail": detail,
    }


# The report: one wide row per group, partition, member, finding or summary (stitch.py).
_OUT: list[tuple[str, pa.DataType, str]] = [
    ("kind", pa.string(), "string"),
    ("group", pa.string(), "string"),
    ("topic", pa.string(), "string"),
    ("partition", pa.int32(), "int"),
    ("committed_offset", pa.int64(), "bigint"),
    ("log_end_offset", pa.int64(), "bigint"),
    ("lag", pa.int64(), "bigint"),
    ("leader_epoch", pa.int32(), "int"),
    ("last_commit_ms", pa.int64(), "bigint"),
    ("commit_count", pa.int64(), "bigint"),
    ("status", pa.string(), "string"),
    ("log_start_offset", pa.int64(), "bigint"),
    ("offsets_partition", pa.int32(), "int"),
    ("first_commit_ms", pa.int64(), "bigint"),
    ("expected_partition", pa.int32(), "int"),
    ("record_offset", pa.int64(), "bigint"),
    ("state", pa.string(), "string"),
    ("members", pa.int32(), "int"),
    ("generation", pa.int32(), "int"),
    ("state_ms", pa.int64(), "bigint"),
    ("severity", pa.string(), "string"),
    ("check", pa.string(), "string"),
    ("log_offset", pa.int64(), "bigint"),
    ("detail", pa.string(), "string"),
    ("partitions", pa.int32(), "int"),
    ("total_lag", pa.int64(), "bigint"),
    ("worst_status", pa.string(), "string"),
    ("commits_per_min", pa.float64(), "double"),
    ("top", pa.bool_(), "boolean"),
    # consumer groups (KIP-848): G rows' type and target epoch, and their members' M rows
    ("group_type", pa.string(), "string"),
    ("assignment_epoch", pa.int32(), "int"),
    ("member_id", pa.string(), "string"),
    ("instance_id", pa.string(), "string"),
    ("client_id", pa.string(), "string"),
    ("client_host", pa.string(), "string"),
    ("member_epoch", pa.int32(), "int"),
    ("previous_member_epoch", pa.int32(), "int"),
    ("member_state", pa.string(), "string"),
    ("assigned", pa.string(), "string"),
    ("pending", pa.string(), "string"),
    ("target", pa.string(), "string"),
    ("subscribed", pa.string(), "string"),
]
OUT_SCHEMA = pa.schema([(n, t) for n, t, _ in _OUT])
OUT_SPARK_SCHEMA = ", ".join(f"`{n}` {s}" for n, _, s in _OUT)
OUT_NAMES = [n for n, _, _ in _OUT]
