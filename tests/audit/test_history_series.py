"""The audit's history job without Spark: a history segment's rows (``history_rows``), the
cluster table's (``decode_history_values``, merged rows too) and the per-group lag and
commit-rate series built from them (``series``)."""

from __future__ import annotations

import pyarrow as pa

from coordinator.audit.history import decode_history_values, history_rows, series
from coordinator.audit.html_report import render
from coordinator.audit.stitch import TopicLog
from coordinator.group.records import OffsetEntry, offset_commit_record, offset_commit_tombstone
from coordinator.history.codec import encode, merge
from coordinator.history.model import DELETED, OffsetChange
from storage.record_batch import encode_batch, encode_timed_values

T = 1_764_000_000_000


def change(
    group: str, offsets: dict[tuple[str, int], int | None], unchanged: int = 0
) -> OffsetChange:
    records = [
        offset_commit_tombstone(1, group, t, p)
        if off is None
        else offset_commit_record(1, group, t, p, OffsetEntry(off, -1, "", T))
        for (t, p), off in offsets.items()
    ]
    n = len(offsets)
    return OffsetChange(1, group, "m-1", "c-1", "/127.0.0.1", records, [-1] * n, [unchanged] * n)


def test_a_segment_gives_one_row_per_offset_change_with_its_commits() -> None:
    values = [
        encode(T, [change("billing", {("orders", 0): 5, ("orders", 1): 7})]),
        encode(T + 1000, [change("billing", {("orders", 0): 9}, unchanged=3)]),
        encode(T + 2000, [change("billing", {("orders", 1): None})]),
    ]
    segment = b"".join(
        encode_batch(i, [(None, v)], timestamp_ms=T + 1000 * i) for i, v in enumerate(values)
    )
    segment += b"\x00" * 20  # a torn tail is not a batch
    assert list(history_rows(segment)) == [
        ("billing", "orders", 0, T, 5, 1),
        ("billing", "orders", 1, T, 7, 1),
        ("billing", "orders", 0, T + 1000, 9, 4),
        ("billing", "orders", 1, T + 2000, DELETED, 1),
    ]
    bad = encode_batch(0, [(None, b"not a history value")], timestamp_ms=T)
    assert [r[0] for r in history_rows(bad)] == ["__bad_value__"]


def test_a_batch_of_carried_plain_values_compressed_together_gives_their_rows() -> None:
    # The local log's carried values: plain values, spilled as one lz4-compressed batch
    # (and, replayed after a crash, as an uncompressed one).
    values = [
        (T + i, encode(T + i, [change("billing", {("orders", 0): 5 + i})], compressed=False))
        for i in range(3)
    ]
    expected = [("billing", "orders", 0, T + i, 5 + i, 1) for i in range(3)]
    for lz4 in (True, False):
        assert list(history_rows(encode_timed_values(0, values, lz4=lz4))) == expected


def test_the_tables_merged_rows_give_the_rows_of_their_turns() -> None:
    # The cluster's table through the JDBC source: a round's row and a merged row (the
    # merge of the history table, codec version 2) in one batch of the value column.
    turns = [
        encode(T, [change("billing", {("orders", 0): 5})]),
        encode(T + 1000, [change("billing", {("orders", 0): 9}, unchanged=3)]),
        encode(T + 2000, [change("ads", {("clicks", 2): 1})]),
    ]
    batch = pa.RecordBatch.from_arrays(
        [pa.array([turns[0], merge(turns[1:])], type=pa.binary())], names=["value"]
    )
    (out,) = decode_history_values(iter([batch]))
    assert list(zip(*(c.to_pylist() for c in out.columns), strict=True)) == [
        ("billing", "orders", 0, T, 5, 1),
        ("billing", "orders", 0, T + 1000, 9, 4),
        ("ads", "clicks", 2, T + 2000, 1, 1),
    ]


def test_series_lag_and_commit_rate_per_bucket() -> None:
    # the log's end: 10 at T, 20 from T+30s, 40 from T+90s
    log = TopicLog(0, 40, 0, ((T, 10), (T + 30_000, 20), (T + 90_000, 40)))
    rows = [  # (group, topic, partition, bucket, last offset, commits); 4 buckets of 30 s
        ("billing", "orders", 0, 0, 10, 2),
        ("billing", "orders", 0, 2, 40, 3),
        ("slow", "orders", 0, 0, 5, 1),
    ]
    got = {s.group: s for s in series(rows, {("orders", 0): log}, T, T + 120_000, buckets=4)}
    billing, slow = got["billing"], got["slow"]
    assert billing.times_ms == [T + 30_000, T + 60_000, T + 90_000, T + 120_000]
    assert billing.lag == [10, 10, 0, 0]  # end_at(bucket end) - committed
    assert billing.commit_rate == [4.0, 0.0, 6.0, 0.0]  # per minute, 30 s buckets
    assert billing.commits == 5
    assert slow.lag == [15, 15, 35, 35]
    assert series(rows, {}, T, T + 120_000, buckets=4)[0].lag == [None] * 4  # no log: unknown
    # older segments before the newest one's time line (from T+60s): no lag before it
    rolled = TopicLog(0, 40, 20, ((T + 60_000, 30), (T + 90_000, 40)))
    got = series(rows[:2], {("orders", 0): rolled}, T, T + 120_000, buckets=4)[0]
    assert got.lag == [None, 20, 0, 0]


def test_the_page_escapes_and_embeds() -> None:
    s = series([("<g>", "orders", 0, 0, 1, 1)], {}, T, T + 60_000, buckets=2)
    findings = [{"severity": "error", "check": "x", "group": "<g>", "topic": None,
                 "partition": None, "detail": "<script>alert(1)</script>"}]  # fmt: skip
    page = render({"start_ms": T, "end_ms": T + 60_000, "step_ms": 30_000, "groups": s,
                   "bad_values": 0}, findings, {"source": "/d", "now_ms": T})  # fmt: skip
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
    assert 'data-group="&lt;g&gt;"' in page
    assert page.count('class="kgc-chart"') == 1
    assert "No group history" in render(None, [], {})
