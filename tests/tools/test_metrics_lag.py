"""Consumer-lag metrics and per-group rebalance counters, in process (coordinator/metrics/lag.py).

How this works: real partition logs in a temporary directory (``LogManager``), written with
batches whose records carry distinct timestamps, and a stand-in for the group core that is
only its ``offsets`` map (group -> (topic, partition) -> entry), which is all the lag
tracker reads. The HTTP test serves a real ``Metrics`` on the running loop and scrapes it
from a thread while a ticker task measures how long the loop is kept from running.
"""

from __future__ import annotations

import asyncio
import gc
import gzip
import struct
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from crc32c import crc32c
from prometheus_client.parser import text_string_to_metric_families

from coordinator.group.events import (
    ConsumerGroupEpochBumped,
    ConsumerMembersFenced,
    GroupDeleted,
    OffsetsExpired,
    RebalanceStarted,
)
from coordinator.metrics import Metrics
from coordinator.metrics.lag import _RowFamily, record_timestamp
from storage.local.log import LogConfig, PartitionLog
from storage.local.manager import LogManager
from storage.record_batch import (
    ATTR_LOG_APPEND_TIME,
    HEADER_SIZE,
    LOG_OVERHEAD,
    Record,
    encode_batch,
    parse_header,
)

T0 = 1_700_000_000_000  # a fixed wall-clock time (ms) for record timestamps
NOW = T0 + 3_600_000


@dataclass
class Entry:
    offset: int


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def series(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def key(group: str, topic: str, partition: int) -> tuple[tuple[str, str], ...]:
    return (("group", group), ("partition", str(partition)), ("topic", topic))


def batch(base: int, timestamps: list[int], append_time: int | None = None) -> bytes:
    """One uncompressed batch, record i at offset base+i with timestamp timestamps[i]."""
    first = timestamps[0]
    records = [Record(i, ts - first, None, b"v%d" % i) for i, ts in enumerate(timestamps)]
    data = bytearray(encode_batch(base, records, timestamp_ms=first))
    if append_time is not None:
        # As the data plane stamps LogAppendTime topics: the attribute bit and the max
        # timestamp (the append time) in the header.
        struct.pack_into(">h", data, 21, parse_header(data).attributes | ATTR_LOG_APPEND_TIME)
        struct.pack_into(">q", data, 35, append_time)
    return with_crc(data)


def with_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def gzipped(data: bytes) -> bytes:
    """The same batch with its records gzip-compressed (codec 1), as producers send it."""
    body = gzip.compress(data[HEADER_SIZE:])
    head = bytearray(data[:HEADER_SIZE])
    struct.pack_into(">i", head, 8, HEADER_SIZE - LOG_OVERHEAD + len(body))
    struct.pack_into(">h", head, 21, parse_header(data).attributes | 1)
    return with_crc(head + body)


def shard(offsets: dict[str, dict[tuple[str, int], Entry]]) -> SimpleNamespace:
    """What the metrics read of the group core: committed offsets, no groups."""
    return SimpleNamespace(offsets=offsets, groups_snapshot=list)


def open_log(tmp_path: Path, name: str = "t-0") -> PartitionLog:
    return PartitionLog(tmp_path / name, LogConfig(flush_policy="none"))


def test_record_timestamp_is_the_records_own(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append(batch(0, [T0 + 1000 * i for i in range(5)]))  # offsets 0-4
    plog.append(gzipped(batch(5, [T0 + 10_000 + 7 * i for i in range(5)])))  # 5-9, gzip
    append_time = T0 + 99_000
    plog.append(batch(10, [T0, T0 + 1, T0 + 2], append_time=append_time))  # 10-12
    end = plog.log_end_offset
    assert end == 13
    # Mid-batch offsets answer their own record's timestamp, not the batch's first.
    assert record_timestamp(plog, 0, end) == T0
    assert record_timestamp(plog, 3, end) == T0 + 3000
    assert record_timestamp(plog, 7, end) == T0 + 10_014
    # A LogAppendTime batch: every record carries the append time.
    assert record_timestamp(plog, 11, end) == append_time
    # Nothing at or past the end (the high watermark a caller passes).
    assert record_timestamp(plog, 13, end) is None
    assert record_timestamp(plog, 5, 5) is None


def test_record_timestamp_skips_records_compacted_away(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    # The batch spans offsets 0-3 but holds only offsets 0 and 3 (1 and 2 were compacted).
    records = [Record(0, 0, b"a", b"1"), Record(3, 500, b"b", b"2")]
    plog.append(encode_batch(0, records, timestamp_ms=T0))
    plog.append(batch(4, [T0 + 900]))
    assert record_timestamp(plog, 1, plog.log_end_offset) == T0 + 500
    # A batch whose last records are gone sends the lookup to the next batch: this one
    # spans offsets 0-2 (its header's last offset delta) but holds only offset 0.
    plog2 = open_log(tmp_path, "t-1")
    only_first = bytearray(encode_batch(0, [Record(0, 0, b"a", b"1")], timestamp_ms=T0))
    struct.pack_into(">i", only_first, 23, 2)
    plog2.append(with_crc(only_first))
    plog2.append(batch(3, [T0 + 42]))
    assert record_timestamp(plog2, 1, plog2.log_end_offset) == T0 + 42


def lag_setup(
    tmp_path: Path, max_series: int = 100
) -> tuple[Metrics, dict[str, dict[tuple[str, int], Entry]], list[int]]:
    logs = LogManager(tmp_path / "data")
    cfg = LogConfig(flush_policy="none")
    for p in range(2):
        plog = logs.get_or_create("orders", p, cfg)
        plog.append(batch(0, [T0 + 1000 * i for i in range(10)]))
    offsets: dict[str, dict[tuple[str, int], Entry]] = {}
    m = Metrics(process_metrics=False, shard=shard(offsets), logs=logs, lag_max_series=max_series)
    clock = [NOW]
    m.lag.clock = lambda: clock[0]
    return m, offsets, clock


def test_lag_in_records_and_seconds(tmp_path: Path) -> None:
    m, offsets, clock = lag_setup(tmp_path)
    offsets["billing"] = {("orders", 0): Entry(4), ("orders", 1): Entry(10)}
    offsets["remote"] = {("elsewhere", 0): Entry(77)}  # a topic this node does not hold
    s = parse(m.render().decode())
    committed = series(s, "kgc_consumergroup_committed_offset")
    assert committed == {
        key("billing", "orders", 0): 4,
        key("billing", "orders", 1): 10,
        key("remote", "elsewhere", 0): 77,
    }
    lag = series(s, "kgc_consumergroup_lag")
    assert lag == {key("billing", "orders", 0): 6, key("billing", "orders", 1): 0}
    seconds = series(s, "kgc_consumergroup_lag_seconds")
    assert seconds == {
        key("billing", "orders", 0): (NOW - (T0 + 4000)) / 1000,
        key("billing", "orders", 1): 0.0,  # caught up
    }
    ends = series(s, "kgc_partition_log_end_offset")
    assert ends == {
        (("partition", "0"), ("topic", "orders")): 10,
        (("partition", "1"), ("topic", "orders")): 10,
    }
    assert s[("kgc_consumergroup_lag_series_dropped", ())] == 0

    # The table is cached: a commit within LAG_CACHE_MS shows at the next refresh.
    offsets["billing"][("orders", 0)] = Entry(9)
    assert (
        series(parse(m.render().decode()), "kgc_consumergroup_committed_offset")[
            key("billing", "orders", 0)
        ]
        == 4
    )
    clock[0] += 1000
    s = parse(m.render().decode())
    assert series(s, "kgc_consumergroup_lag")[key("billing", "orders", 0)] == 1
    assert (
        series(s, "kgc_consumergroup_lag_seconds")[key("billing", "orders", 0)]
        == (clock[0] - (T0 + 9000)) / 1000
    )


def test_committed_below_the_log_start_measures_from_the_oldest_record_left(tmp_path: Path) -> None:
    m, offsets, _clock = lag_setup(tmp_path)
    plog = m.logs.get("orders", 0)
    plog.roll()
    plog.append(batch(10, [T0 + 50_000, T0 + 51_000]))
    assert plog.delete_segments_before(10) == 1  # offsets 0-9 are gone
    offsets["slow"] = {("orders", 0): Entry(2)}
    s = parse(m.render().decode())
    assert series(s, "kgc_consumergroup_lag")[key("slow", "orders", 0)] == 10  # 12 - 2
    assert (
        series(s, "kgc_consumergroup_lag_seconds")[key("slow", "orders", 0)]
        == (NOW - (T0 + 50_000)) / 1000
    )


def test_in_cluster_mode_only_partitions_this_node_leads_report_lag(tmp_path: Path) -> None:
    m, offsets, _clock = lag_setup(tmp_path)
    led = m.logs.get("orders", 0)
    # A DataPlane's view in cluster mode: logs of both partitions are here, but only
    # partition 0's lease is held (the other is being taken over, or led elsewhere).
    m.data = SimpleNamespace(logs=m.logs, hosted=False, leader_epochs={led: 7})  # type: ignore[assignment]
    offsets["billing"] = {("orders", 0): Entry(4), ("orders", 1): Entry(4)}
    s = parse(m.render().decode())
    assert set(series(s, "kgc_consumergroup_committed_offset")) == {
        key("billing", "orders", 0),
        key("billing", "orders", 1),
    }
    assert series(s, "kgc_consumergroup_lag") == {key("billing", "orders", 0): 6}
    assert set(series(s, "kgc_consumergroup_lag_seconds")) == {key("billing", "orders", 0)}


def test_the_cap_is_sticky_and_counts_what_it_drops(tmp_path: Path) -> None:
    m, offsets, clock = lag_setup(tmp_path, max_series=2)
    offsets["a"] = {("orders", 0): Entry(1), ("orders", 1): Entry(2)}
    offsets["b"] = {("orders", 0): Entry(3)}
    s = parse(m.render().decode())
    assert set(series(s, "kgc_consumergroup_committed_offset")) == {
        key("a", "orders", 0),
        key("a", "orders", 1),
    }
    assert len(series(s, "kgc_consumergroup_lag")) == 2
    assert s[("kgc_consumergroup_lag_series_dropped", ())] == 1

    # A group created later does not take an admitted series' place...
    offsets = {"0-first": {("orders", 1): Entry(5)}, **offsets}
    m.lag.shard = shard(offsets)
    clock[0] += 1000
    s = parse(m.render().decode())
    assert set(series(s, "kgc_consumergroup_committed_offset")) == {
        key("a", "orders", 0),
        key("a", "orders", 1),
    }
    assert s[("kgc_consumergroup_lag_series_dropped", ())] == 2
    # ...until one goes: then the next scrape admits another.
    del offsets["a"]
    clock[0] += 1000
    s = parse(m.render().decode())
    assert set(series(s, "kgc_consumergroup_committed_offset")) == {
        key("0-first", "orders", 1),
        key("b", "orders", 0),
    }
    assert s[("kgc_consumergroup_lag_series_dropped", ())] == 0


def test_no_lag_metrics_with_a_cap_of_zero(tmp_path: Path) -> None:
    m, offsets, _clock = lag_setup(tmp_path, max_series=0)
    offsets["a"] = {("orders", 0): Entry(1)}
    text = m.render().decode()
    assert "kgc_consumergroup" not in text


def test_rebalances_per_group_by_cause() -> None:
    m = Metrics(process_metrics=False, shard=shard({}))
    m.group_events(
        [
            RebalanceStarted("shop", 0, "join", "member joined"),
            RebalanceStarted("shop", 1, "join", "member joined"),
            RebalanceStarted("shop", 2, "session_timeout", "member expired"),
            RebalanceStarted("ledger", 4, "metadata_change", "topic grew"),
            ConsumerGroupEpochBumped("kip848", 1, "created", kind="created"),
            ConsumerGroupEpochBumped("kip848", 2, "m subscribed", kind="subscription"),
            ConsumerMembersFenced("kip848", 3, ("m1", "m2"), "session timeout", "session_timeout"),
        ],
        NOW,
    )
    s = parse(m.render().decode())
    got = series(s, "kgc_group_rebalances_total")
    assert got == {
        (("cause", "join"), ("group", "shop")): 2,
        (("cause", "session_timeout"), ("group", "shop")): 1,
        (("cause", "metadata_change"), ("group", "ledger")): 1,
        (("cause", "created"), ("group", "kip848")): 1,
        (("cause", "subscription"), ("group", "kip848")): 1,
        (("cause", "session_timeout"), ("group", "kip848")): 1,
    }
    # A deleted group's counters go with it (deleted by DeleteGroups or by offset expiry).
    m.group_events([GroupDeleted("shop"), OffsetsExpired(3, ("ledger",))], NOW)
    got = series(parse(m.render().decode()), "kgc_group_rebalances_total")
    assert {dict(k)["group"] for k in got} == {"kip848"}


async def test_a_scrape_of_10k_lag_series_keeps_the_loop_responsive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10,000 (group, partition) series, every one behind (a timestamp lookup each),
    served over HTTP: the lag work runs on the loop in short slices, the samples are made
    and formatted on the HTTP thread, and the loop keeps running throughout."""
    logs = LogManager(tmp_path / "data")
    cfg = LogConfig(flush_policy="none")
    partitions = 100
    for p in range(partitions):
        plog = logs.get_or_create("events", p, cfg)
        for b in range(10):
            plog.append(batch(b * 10, [T0 + 1000 * (b * 10 + i) for i in range(10)]))
    offsets: dict[str, dict[tuple[str, int], Entry]] = {
        f"group-{g}": {("events", p): Entry((g + p) % 99) for p in range(partitions)}
        for g in range(100)
    }
    m = Metrics(process_metrics=False, shard=shard(offsets), logs=logs)
    port = await m.serve("127.0.0.1", 0)
    loop_thread = threading.get_ident()
    sample_threads: set[int] = set()
    made = vars(_RowFamily)["samples"].fget
    assert made is not None

    def samples(family: _RowFamily) -> list[Any]:
        sample_threads.add(threading.get_ident())
        return made(family)  # type: ignore[no-any-return]

    monkeypatch.setattr(_RowFamily, "samples", property(samples, lambda _f, _v: None))
    worst = 0.0
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal worst, ticks
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            t = loop.time()
            await asyncio.sleep(0.001)
            worst = max(worst, loop.time() - t - 0.001)
            ticks += 1

    def scrape() -> tuple[float, str]:
        t = time.perf_counter()
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/metrics", headers={"Accept-Encoding": "gzip"}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            body = gzip.decompress(resp.read()).decode()
        return time.perf_counter() - t, body

    gc.collect()  # the setup's garbage is not the scrape's to collect
    tick = asyncio.create_task(ticker())
    try:
        await asyncio.sleep(0.05)
        cold, body = await asyncio.to_thread(scrape)  # every timestamp looked up
        table = m.lag.last
        cold_ticks = ticks
        m.lag.clock = lambda: int(time.time() * 1000) + 5000  # past the cache: recompute
        warm, _ = await asyncio.to_thread(scrape)  # timestamps cached
    finally:
        stop.set()
        await tick
        await m.stop()
    s = parse(body)  # (after the ticker: parsing 30,000 samples here would hold the loop)
    assert table is not None
    print(
        f"\n10k lag series: cold scrape {cold * 1000:.0f} ms (loop busy "
        f"{table.busy_seconds * 1000:.0f} ms in {table.slices} slices), warm "
        f"{warm * 1000:.0f} ms, longest loop stall {worst * 1000:.1f} ms"
    )
    assert len(series(s, "kgc_consumergroup_lag_seconds")) == 10_000
    assert s[("kgc_consumergroup_lag_series_dropped", ())] == 0
    # 10,000 lookups are far more than one slice of work (~25 us each at best): the loop
    # got control back between slices, and the ticker ran all along.
    assert table.slices >= 50
    assert cold_ticks >= table.slices // 2
    # The samples were made (and formatted) on the HTTP thread, never on the loop.
    assert sample_threads and loop_thread not in sample_threads
    # What is left on the loop is the slices themselves, the OS scheduling a loaded
    # machine and full garbage collections the scrape's allocations may trigger (they hold
    # the GIL for a time that grows with the heap: 50-150 ms in this pytest process). In
    # one go the lookups alone would hold it 0.6 s on an idle machine here.
    assert worst < 1.0, f"the loop was held {worst * 1000:.0f} ms"


@pytest.mark.parametrize("path", ["/healthz"])
async def test_healthz_answers_once_the_loop_runs(path: str) -> None:
    m = Metrics(process_metrics=False)
    port = await m.serve("127.0.0.1", 0)
    try:

        def get() -> tuple[int, bytes]:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                return r.status, r.read()

        assert await asyncio.to_thread(get) == (200, b"ok\n")
    finally:
        await m.stop()
