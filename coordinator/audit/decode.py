"""Executor-side decoder: one segment file in, a few summary rows out (pure Python + pyarrow).

How this works
--------------
Spark's ``binaryFile`` source hands ``mapInArrow`` Arrow batches of (path, content) rows, one
file per task.  ``decode_batches`` walks each file with kgc's own codec
(``storage.record_batch`` / ``storage.offsets_format``, shared with the server) and, instead of
shipping one row per record back to the JVM, *combines* inside the task:

* ``K`` one row per (segment, group, topic, partition): first/last log offset, committed
  offset, commit time and leader epoch, number of commits and tombstones, whether the key's
  first event in the segment is a tombstone and whether its last one is;
* ``W`` the last ``window`` commits of each key in the segment (for Burrow's rules);
* ``G`` one row per (segment, group) for GroupMetadata records (first/last generation, the
  last value's member count / protocol type / state timestamp, tombstones);
* ``S`` one row per offsets segment (first/last offset, record and batch counts, size);
* ``F`` findings visible inside one segment (CRC, truncation, unknown versions, offsets going
  backwards between batches, and per-key rewinds / timestamp or epoch regressions between
  consecutive records of the same segment);
* ``T`` / ``P`` for topic-partition segments: first and next offset, and a down-sampled
  (max timestamp, next offset) time line so lag *at commit time* can be estimated;
* ``C`` the topic catalog (``topics.json``) and ``L`` ``log-start-offset`` checkpoints.

The driver stitches segments together (checks across segment boundaries use the first/last
columns), so a million commits become a few thousand rows.  All rows share one wide schema
(``SCHEMA``); unused columns are null.  Nothing here imports pyspark, so the module is cheap to
import on workers and testable without a JVM.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from storage.manager import parse_partition_dir
from storage.offsets_format import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetsFormatError,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    partition_for,
)
from storage.record_batch import (
    CorruptBatchError,
    UnsupportedCompressionError,
    iter_batches,
    iter_record_tuples,
    verify_crc,
)
from storage.segment import parse_segment_name

__all__ = [
    "CATALOG_NAME",
    "CHECKPOINT_NAME",
    "OFFSETS_TOPIC",
    "SCHEMA",
    "SPARK_SCHEMA",
    "classify_path",
    "decode_batches",
    "decode_file",
]

CATALOG_NAME = "topics.json"
CHECKPOINT_NAME = "log-start-offset"
_TIMELINE_POINTS = 256

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
_NAMES = [n for n, _, _ in _COLUMNS]

Row = dict[str, Any]


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


def _value_finding(
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
    return _finding(
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


def _finding(
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


class _KeyState:
    """Per (group, topic, partition) accumulator inside one segment."""

    __slots__ = (
        "ep1",
        "ep2",
        "expire",
        "last_tomb",
        "lead_tomb",
        "lo1",
        "lo2",
        "n",
        "ntomb",
        "off1",
        "off2",
        "prev_off",
        "prev_ts",
        "ts1",
        "ts2",
        "tsmax",
        "win",
    )

    def __init__(self, lo: int) -> None:
        self.lo1 = lo
        self.lo2 = lo
        self.off1: int | None = None
        self.off2: int | None = None
        self.ts1: int | None = None
        self.ts2: int | None = None
        self.tsmax: int | None = None
        self.ep1 = -1
        self.ep2 = -1
        self.n = 0
        self.ntomb = 0
        self.lead_tomb: int | None = None
        self.last_tomb = False
        self.expire = -1
        self.prev_off: int | None = None
        self.prev_ts: int | None = None
        self.win: list[tuple[int, int, int, int]] = []


class _GroupState:
    __slots__ = (
        "g1",
        "g2",
        "last_tomb",
        "lead_tomb",
        "lo1",
        "lo2",
        "members",
        "n",
        "ntomb",
        "ptype",
        "state_ts",
    )

    def __init__(self, lo: int) -> None:
        self.lo1 = lo
        self.lo2 = lo
        self.g1: int | None = None
        self.g2: int | None = None
        self.n = 0
        self.ntomb = 0
        self.lead_tomb: int | None = None
        self.last_tomb = False
        self.members: int | None = None
        self.ptype: str | None = None
        self.state_ts: int | None = None


def _decode_offsets_segment(
    src: str,
    opart: int,
    seg: int,
    buf: bytes,
    window: int,
    num_partitions: int,
    future_limit_ms: int,
) -> list[Row]:
    rows: list[Row] = []
    keys: dict[tuple[str, str, int], _KeyState] = {}
    groups: dict[str, _GroupState] = {}
    key_cache: dict[bytes, object] = {}
    expected_cache: dict[str, int] = {}
    first_offset: int | None = None
    last_offset: int | None = None
    prev_last: int | None = None
    records = 0
    batches = 0
    max_ts = -1
    end = 0
    trim = 2 * window
    try:
        for h, start, end in iter_batches(buf):
            batches += 1
            if first_offset is None:
                first_offset = h.base_offset
            if prev_last is not None and h.base_offset <= prev_last:
                rows.append(
                    _finding(
                        src,
                        opart,
                        seg,
                        "error",
                        "non_monotonic_offsets",
                        f"batch at byte {start} starts at offset {h.base_offset}, "
                        f"not after the previous batch's last offset {prev_last}",
                        h.base_offset,
                    )
                )
            prev_last = h.last_offset if prev_last is None else max(prev_last, h.last_offset)
            last_offset = prev_last
            if h.max_timestamp > max_ts:
                max_ts = h.max_timestamp
            if not verify_crc(buf, start, end):
                rows.append(
                    _finding(
                        src,
                        opart,
                        seg,
                        "error",
                        "crc_mismatch",
                        f"CRC32C mismatch in batch at byte {start} "
                        f"(offsets {h.base_offset}..{h.last_offset}); its records were skipped",
                        h.base_offset,
                    )
                )
                continue
            if h.is_control:
                continue
            try:
                tuples = list(iter_record_tuples(buf[start:end]))
            except (CorruptBatchError, UnsupportedCompressionError) as e:
                check = (
                    "truncated_batch"
                    if isinstance(e, CorruptBatchError)
                    else "unsupported_compression"
                )
                rows.append(_finding(src, opart, seg, "error", check, str(e), h.base_offset))
                continue
            records += len(tuples)
            for lo, _bts, kb, vb in tuples:
                if kb is None:
                    rows.append(
                        _finding(
                            src,
                            opart,
                            seg,
                            "error",
                            "undecodable_record",
                            "record without a key",
                            lo,
                        )
                    )
                    continue
                k = key_cache.get(kb)
                if k is None:
                    try:
                        dk = decode_key(kb)
                    except OffsetsFormatError as e:
                        rows.append(
                            _finding(
                                src, opart, seg, "error", "undecodable_record", f"key: {e}", lo
                            )
                        )
                        continue
                    if isinstance(dk, OffsetCommitKey):
                        k = (dk.group, dk.topic, dk.partition)
                    elif isinstance(dk, GroupMetadataKey):
                        k = dk.group
                    else:
                        k = dk
                    key_cache[kb] = k
                if type(k) is tuple:
                    st = keys.get(k)
                    if st is None:
                        st = keys[k] = _KeyState(lo)
                        g = k[0]
                        if g not in expected_cache:
                            expected_cache[g] = partition_for(g, num_partitions)
                    st.lo2 = lo
                    if vb is None:
                        st.ntomb += 1
                        st.last_tomb = True
                        if st.n == 0 and st.lead_tomb is None:
                            st.lead_tomb = lo
                        st.prev_off = None
                        st.prev_ts = None
                        continue
                    try:
                        v = decode_offset_commit_value(vb)
                    except OffsetsFormatError as e:
                        rows.append(
                            _value_finding(
                                src, opart, seg, "offset commit", e, lo, k[0], k[1], k[2]
                            )
                        )
                        continue
                    off = v.offset
                    ts = v.commit_timestamp
                    ep = v.leader_epoch
                    st.last_tomb = False
                    if st.n == 0:
                        st.off1 = off
                        st.ts1 = ts
                        st.ep1 = ep
                    else:
                        po = st.prev_off
                        if po is not None:
                            if off < po:
                                rows.append(
                                    _finding(
                                        src,
                                        opart,
                                        seg,
                                        "warn",
                                        "offset_rewind",
                                        f"committed offset went from {po} to {off}",
                                        lo,
                                        *k,
                                    )
                                )
                            pt = st.prev_ts
                            if pt is not None and ts < pt:
                                rows.append(
                                    _finding(
                                        src,
                                        opart,
                                        seg,
                                        "warn",
                                        "commit_timestamp_backwards",
                                        f"commit timestamp went from {pt} to {ts}",
                                        lo,
                                        *k,
                                    )
                                )
                        if ep != -1 and st.ep2 != -1 and ep < st.ep2:
                            rows.append(
                                _finding(
                                    src,
                                    opart,
                                    seg,
                                    "warn",
                                    "leader_epoch_regression",
                                    f"leader epoch went from {st.ep2} to {ep}",
                                    lo,
                                    *k,
                                )
                            )
                    if ts > future_limit_ms:
                        rows.append(
                            _finding(
                                src,
                                opart,
                                seg,
                                "warn",
                                "commit_timestamp_in_future",
                                f"commit timestamp {ts} is after the audit time",
                                lo,
                                *k,
                            )
                        )
                    st.n += 1
                    st.off2 = off
                    st.ts2 = ts
                    if st.tsmax is None or ts > st.tsmax:
                        st.tsmax = ts
                    if ep != -1:
                        st.ep2 = ep
                        if st.ep1 == -1:
                            st.ep1 = ep
                    st.expire = v.expire_timestamp
                    st.prev_off = off
                    st.prev_ts = ts
                    win = st.win
                    win.append((lo, off, ts, ep))
                    if len(win) > trim:
                        del win[:-window]
                elif type(k) is str:
                    gs = groups.get(k)
                    if gs is None:
                        gs = groups[k] = _GroupState(lo)
                        if k not in expected_cache:
                            expected_cache[k] = partition_for(k, num_partitions)
                    gs.lo2 = lo
                    if vb is None:
                        gs.ntomb += 1
                        gs.last_tomb = True
                        if gs.n == 0 and gs.lead_tomb is None:
                            gs.lead_tomb = lo
                        continue
                    try:
                        gv = decode_group_metadata_value(vb)
                    except OffsetsFormatError as e:
                        rows.append(_value_finding(src, opart, seg, "group metadata", e, lo, k))
                        continue
                    if gs.g2 is not None and gv.generation < gs.g2 and not gs.last_tomb:
                        rows.append(
                            _finding(
                                src,
                                opart,
                                seg,
                                "warn",
                                "generation_regression",
                                f"generation went from {gs.g2} to {gv.generation}",
                                lo,
                                k,
                            )
                        )
                    if gs.n == 0:
                        gs.g1 = gv.generation
                    gs.last_tomb = False
                    gs.n += 1
                    gs.g2 = gv.generation
                    gs.members = len(gv.members)
                    gs.ptype = gv.protocol_type
                    gs.state_ts = gv.current_state_timestamp
                else:
                    assert isinstance(k, UnknownKey)
                    rows.append(
                        _finding(
                            src,
                            opart,
                            seg,
                            "warn",
                            "unknown_record_version",
                            f"key version {k.version} is not an offset commit or classic "
                            "group record (newer Kafka record type?)",
                            lo,
                        )
                    )
        if end < len(buf):
            rows.append(
                _finding(
                    src,
                    opart,
                    seg,
                    "error",
                    "truncated_batch",
                    f"{len(buf) - end} bytes at the end of the segment (from byte {end}) "
                    "are not a complete batch",
                    prev_last + 1 if prev_last is not None else seg,
                )
            )
    except CorruptBatchError as e:
        rows.append(
            _finding(
                src,
                opart,
                seg,
                "error",
                "corrupt_batch",
                f"{e}; the rest of the segment ({len(buf) - end} bytes) was not read",
                prev_last + 1 if prev_last is not None else seg,
            )
        )

    rows.append(
        {
            "kind": "S",
            "src": src,
            "opart": opart,
            "seg": seg,
            "lo1": first_offset,
            "lo2": last_offset,
            "n": records,
            "n2": batches,
            "size": len(buf),
            "tsmax": max_ts,
        }
    )
    for (g, t, p), st in keys.items():
        exp = expected_cache[g]
        rows.append(
            {
                "kind": "K",
                "src": src,
                "opart": opart,
                "seg": seg,
                "grp": g,
                "topic": t,
                "part": p,
                "lo1": st.lo1,
                "lo2": st.lo2,
                "off1": st.off1,
                "off2": st.off2,
                "ts1": st.ts1,
                "ts2": st.ts2,
                "tsmax": st.tsmax,
                "ep1": st.ep1,
                "ep2": st.ep2,
                "n": st.n,
                "n2": st.ntomb,
                "lead_tomb": st.lead_tomb,
                "last_tomb": st.last_tomb,
                "expire": st.expire,
                "expected": exp,
            }
        )
        for lo, off, ts, ep in st.win[-window:]:
            rows.append(
                {
                    "kind": "W",
                    "opart": opart,
                    "seg": seg,
                    "grp": g,
                    "topic": t,
                    "part": p,
                    "lo1": lo,
                    "off1": off,
                    "ts1": ts,
                    "ep1": ep,
                }
            )
    for g, gs in groups.items():
        rows.append(
            {
                "kind": "G",
                "src": src,
                "opart": opart,
                "seg": seg,
                "grp": g,
                "lo1": gs.lo1,
                "lo2": gs.lo2,
                "ep1": gs.g1,
                "ep2": gs.g2,
                "n": gs.n,
                "n2": gs.ntomb,
                "lead_tomb": gs.lead_tomb,
                "last_tomb": gs.last_tomb,
                "members": gs.members,
                "ptype": gs.ptype,
                "state_ts": gs.state_ts,
                "expected": expected_cache[g],
            }
        )
    return rows


def _decode_topic_segment(src: str, topic: str, part: int, seg: int, buf: bytes) -> list[Row]:
    """First/next offset of a topic segment plus a down-sampled time line."""
    first: int | None = None
    nxt = seg
    batches = 0
    points: list[tuple[int, int]] = []
    running_ts = -1
    rows: list[Row] = []
    end = 0
    try:
        for h, _start, batch_end in iter_batches(buf):
            end = batch_end
            batches += 1
            if first is None:
                first = h.base_offset
            nxt = max(nxt, h.next_offset)
            if h.max_timestamp > running_ts:
                running_ts = h.max_timestamp
            points.append((running_ts, nxt))
    except CorruptBatchError as e:
        rows.append(
            _finding(
                src,
                None,
                seg,
                "error",
                "corrupt_batch",
                f"{topic}-{part}: {e}",
                nxt,
                None,
                topic,
                part,
            )
        )
    if end < len(buf) and not rows:
        rows.append(
            _finding(
                src,
                None,
                seg,
                "error",
                "truncated_batch",
                f"{topic}-{part}: {len(buf) - end} bytes at the end of the segment "
                "are not a complete batch",
                nxt,
                None,
                topic,
                part,
            )
        )
    step = max(1, len(points) // _TIMELINE_POINTS)
    sampled = points[step - 1 :: step]
    if points and (not sampled or sampled[-1] != points[-1]):
        sampled.append(points[-1])
    rows.append(
        {
            "kind": "T",
            "src": src,
            "topic": topic,
            "part": part,
            "seg": seg,
            "lo1": first,
            "lo2": nxt,
            "n2": batches,
            "size": len(buf),
        }
    )
    for ts, off in sampled:
        rows.append({"kind": "P", "topic": topic, "part": part, "seg": seg, "ts1": ts, "off1": off})
    return rows


def decode_file(
    path: str,
    content: bytes,
    *,
    window: int = 10,
    num_partitions: int = 50,
    future_limit_ms: int = 2**62,
) -> list[Row]:
    """Rows for one file of the data directory (segment, checkpoint or catalog)."""
    kind, topic, part, seg = classify_path(path)
    if kind == "catalog":
        try:
            catalog = json.loads(content.decode())
            return [
                {"kind": "C", "src": path, "topic": str(t["name"]), "n": int(t["partitions"])}
                for t in catalog
            ]
        except (ValueError, KeyError, TypeError) as e:
            return [_finding(path, None, None, "error", "unreadable_catalog", f"{path}: {e}")]
    if kind == "checkpoint":
        lines = content.decode(errors="replace").split()
        if len(lines) == 2 and lines[0] == "0" and lines[1].lstrip("-").isdigit():
            return [{"kind": "L", "src": path, "topic": topic, "part": part, "off1": int(lines[1])}]
        return [
            _finding(
                path,
                None,
                None,
                "warn",
                "unreadable_checkpoint",
                f"{path}: {content[:40]!r}",
                None,
                None,
                topic,
                part,
            )
        ]
    if kind != "log":
        return []
    assert topic is not None and part is not None and seg is not None
    if topic == OFFSETS_TOPIC:
        return _decode_offsets_segment(
            path, part, seg, content, window, num_partitions, future_limit_ms
        )
    return _decode_topic_segment(path, topic, part, seg, content)


def decode_batches(
    batches: Iterator[pa.RecordBatch],
    *,
    window: int,
    num_partitions: int,
    future_limit_ms: int,
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: binaryFile batches in, ``SCHEMA`` batches out."""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the loops allocate many short-lived tuples; a paused GC is ~4x cheaper
    try:
        for batch in batches:
            paths = batch.column("path").to_pylist()
            contents = batch.column("content")
            for i, path in enumerate(paths):
                content = contents[i].as_py() or b""
                rows = decode_file(
                    path,
                    content,
                    window=window,
                    num_partitions=num_partitions,
                    future_limit_ms=future_limit_ms,
                )
                if rows:
                    cols = {n: [r.get(n) for r in rows] for n in _NAMES}
                    yield pa.RecordBatch.from_pydict(cols, schema=SCHEMA)
    finally:
        if gc_was_enabled:
            gc.enable()
