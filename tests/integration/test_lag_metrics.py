"""Consumer lag and rebalance metrics of a real ``kgc serve``, against the records' own times.

How this works: a real ``kgc serve`` (``KgcProcess``), real confluent-kafka producers and
consumers. The producer sets each record's timestamp (minutes apart, so that a lookup
landing one record off is off by a minute) and sends gzip batches of many records, so a
committed offset falls inside a batch; a LogAppendTime topic has the broker's times. The
consumer group reads everything (the test keeps each record's timestamp as the client
sees it), commits offsets partway, and the producer goes on writing. The scrape must then
show, per partition, the committed offset, the lag in records, the high watermark and the
lag in seconds, which must equal now minus the timestamp of the record at the committed
offset: "now" is bounded by a time taken before the commit and one after the scrape.
The other tests check the exposition's negotiation (OpenMetrics, gzip, ``name[]``) as
Prometheus and a browser ask for it, and the series cap.
"""

from __future__ import annotations

import gzip
import time
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families
from support.groupkit import wait_until
from support.kgc_process import KgcProcess

from coordinator.tools.admin import Admin

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
CLASSIC_CAUSES = {"join", "leave", "session_timeout", "metadata_change", "static_replacement"}
CONSUMER_CAUSES = {"created", "subscription", "metadata", "regex"}


def get(
    kgc: KgcProcess, path: str = "/metrics", headers: dict[str, str] | None = None
) -> tuple[int, Message, bytes]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{kgc.metrics_port}{path}", headers=headers or {}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def samples(text: str, *, openmetrics: bool = False) -> Samples:
    parse = openmetrics_families if openmetrics else text_string_to_metric_families
    out: Samples = {}
    for family in parse(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape(kgc: KgcProcess) -> Samples:
    status, _headers, body = get(kgc)
    assert status == 200
    return samples(body.decode())


def lag_key(group: str, topic: str, partition: int) -> tuple[tuple[str, str], ...]:
    return (("group", group), ("partition", str(partition)), ("topic", topic))


def part_key(topic: str, partition: int) -> tuple[tuple[str, str], ...]:
    return (("partition", str(partition)), ("topic", topic))


def by_name(s: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (n, labels), v in s.items() if n == name}


def producer(kgc: KgcProcess) -> Producer:
    # Many records per batch (linger), gzip: committed offsets land inside batches.
    return Producer(
        {
            "bootstrap.servers": kgc.bootstrap,
            "linger.ms": 200,
            "compression.type": "gzip",
            "enable.idempotence": False,
        }
    )


def test_lag_in_records_and_seconds_matches_the_records_timestamps(kgc: KgcProcess) -> None:
    with Admin(kgc.bootstrap) as admin:
        admin.create_topic("orders", 2, 1, {})
        admin.create_topic("audit", 2, 1, {"message.timestamp.type": "LogAppendTime"})
    now_ms = int(time.time() * 1000)
    base = now_ms - 3_600_000  # an hour ago, one record a minute
    prod = producer(kgc)
    for i in range(30):
        for p in (0, 1):
            prod.produce("orders", b"order-%d" % i, partition=p, timestamp=base + i * 60_000 + p)
    for i in range(10):
        for p in (0, 1):
            prod.produce("audit", b"event-%d" % i, partition=p)
    assert prod.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": kgc.bootstrap,
            "group.id": "billing",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    seen: dict[tuple[str, int, int], int] = {}  # (topic, partition, offset) -> timestamp

    def consume(until: int) -> None:
        deadline = time.monotonic() + 60
        while len(seen) < until:
            assert time.monotonic() < deadline, f"consumed {len(seen)} of {until}"
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
                assert topic is not None and partition is not None and offset is not None
                _kind, seen[(topic, partition, offset)] = msg.timestamp()

    try:
        consumer.subscribe(["orders", "audit"])
        consume(80)
        before_commit = time.time()
        consumer.commit(
            offsets=[
                TopicPartition("orders", 0, 7),
                TopicPartition("orders", 1, 30),
                TopicPartition("audit", 0, 4),
                TopicPartition("audit", 1, 10),
            ],
            asynchronous=False,
        )
        # The producer goes on: orders-1 gets records the group has not committed past.
        for i in range(5):
            prod.produce("orders", b"late-%d" % i, partition=1, timestamp=base + (40 + i) * 60_000)
        assert prod.flush(30) == 0
        consume(85)  # read (not committed): the test learns their timestamps as stored

        expected_committed = {
            lag_key("billing", "orders", 0): 7,
            lag_key("billing", "orders", 1): 30,
            lag_key("billing", "audit", 0): 4,
            lag_key("billing", "audit", 1): 10,
        }
        last: Samples = {}

        def settled() -> bool:
            nonlocal last
            last = scrape(kgc)
            committed = {
                k: v
                for k, v in by_name(last, "kgc_consumergroup_committed_offset").items()
                if dict(k)["group"] == "billing"
            }
            return (
                committed == expected_committed
                and by_name(last, "kgc_partition_log_end_offset").get(part_key("orders", 1)) == 35
            )

        wait_until(settled, what="the scrape showing the commit and the late records")
        after_scrape = time.time()
        s = last
        lag = by_name(s, "kgc_consumergroup_lag")
        assert lag[lag_key("billing", "orders", 0)] == 30 - 7
        assert lag[lag_key("billing", "orders", 1)] == 35 - 30
        assert lag[lag_key("billing", "audit", 0)] == 10 - 4
        assert lag[lag_key("billing", "audit", 1)] == 0
        ends = by_name(s, "kgc_partition_log_end_offset")
        assert ends[part_key("orders", 0)] == 30
        assert ends[part_key("audit", 0)] == ends[part_key("audit", 1)] == 10

        seconds = by_name(s, "kgc_consumergroup_lag_seconds")
        assert seconds[lag_key("billing", "audit", 1)] == 0  # caught up
        for topic, partition, offset in (("orders", 0, 7), ("orders", 1, 30), ("audit", 0, 4)):
            ts = seen[(topic, partition, offset)]
            got = seconds[lag_key("billing", topic, partition)]
            # The server's "now" lies between the commit and the end of the scrape.
            low = (before_commit * 1000 - ts) / 1000 - 0.002
            high = (after_scrape * 1000 - ts) / 1000 + 0.002
            assert low <= got <= high, (topic, partition, offset, ts, got, low, high)
        # CreateTime records a minute apart: the exact record, not its batch's first.
        assert (
            seconds[lag_key("billing", "orders", 0)]
            > (after_scrape * 1000 - (base + 8 * 60_000)) / 1000
        )
        assert s[("kgc_consumergroup_lag_series_dropped", ())] == 0

        # The group's join was a rebalance, counted for this group by cause.
        rebalances = {
            dict(k)["cause"]: v
            for k, v in by_name(s, "kgc_group_rebalances_total").items()
            if dict(k)["group"] == "billing"
        }
        assert rebalances.get("join", 0) >= 1
        assert set(rebalances) <= CLASSIC_CAUSES
    finally:
        consumer.close()


def test_consumer_group_epoch_bumps_are_counted_per_group(kgc: KgcProcess) -> None:
    with Admin(kgc.bootstrap) as admin:
        admin.create_topic("events", 2, 1, {})
    consumer = Consumer(
        {
            "bootstrap.servers": kgc.bootstrap,
            "group.id": "kip848",
            "group.protocol": "consumer",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe(["events"])

        def assigned() -> bool:
            consumer.poll(0.1)
            return len(consumer.assignment()) == 2

        wait_until(assigned, what="the consumer-protocol member owning both partitions")
        causes = {
            dict(k)["cause"]: v
            for k, v in by_name(scrape(kgc), "kgc_group_rebalances_total").items()
            if dict(k)["group"] == "kip848"
        }
        assert sum(causes.values()) >= 1
        assert set(causes) <= CONSUMER_CAUSES, causes
    finally:
        consumer.close()
    # Leaving fences the member: one more bump, under the fencing's kind.
    wait_until(
        lambda: (
            by_name(scrape(kgc), "kgc_group_rebalances_total").get(
                (("cause", "left"), ("group", "kip848")), 0
            )
            == 1
        ),
        what="the member's leave counted",
    )


def test_exposition_negotiates_openmetrics_and_gzip(kgc: KgcProcess) -> None:
    with Admin(kgc.bootstrap) as admin:
        admin.create_topic("clicks", 1, 1, {})
    prod = producer(kgc)
    for i in range(3):
        prod.produce("clicks", b"c%d" % i, partition=0)
    assert prod.flush(30) == 0
    committer = Consumer({"bootstrap.servers": kgc.bootstrap, "group.id": "dash"})
    committer.commit(offsets=[TopicPartition("clicks", 0, 1)], asynchronous=False)
    committer.close()

    # Prometheus' classic text format when nothing is asked for.
    status, headers, body = get(kgc)
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert headers.get("Content-Encoding") is None
    plain = samples(body.decode())
    assert plain[("kgc_consumergroup_lag", lag_key("dash", "clicks", 0))] == 2

    # OpenMetrics when the Accept header asks for it (as Prometheus does), gzip when
    # Accept-Encoding allows it: the body parses with the OpenMetrics parser, lag included.
    for encoding in ("", "gzip"):
        status, headers, body = get(
            kgc, headers={"Accept": f"{OPENMETRICS},text/plain;q=0.5", "Accept-Encoding": encoding}
        )
        assert status == 200
        assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
        if encoding:
            assert headers["Content-Encoding"] == "gzip"
            body = gzip.decompress(body)
        else:
            assert headers.get("Content-Encoding") is None
        text = body.decode()
        assert text.endswith("# EOF\n")
        om = samples(text, openmetrics=True)
        assert om[("kgc_consumergroup_committed_offset", lag_key("dash", "clicks", 0))] == 1
        assert om[("kgc_consumergroup_lag", lag_key("dash", "clicks", 0))] == 2
        assert ("kgc_consumergroup_lag_seconds", lag_key("dash", "clicks", 0)) in om
        assert any(n == "kgc_requests_total" for n, _ in om)

    # Text format, gzip.
    status, headers, body = get(kgc, headers={"Accept-Encoding": "gzip, deflate"})
    assert headers["Content-Encoding"] == "gzip"
    assert samples(gzip.decompress(body).decode()).keys() >= {
        ("kgc_consumergroup_lag", lag_key("dash", "clicks", 0))
    }

    # prometheus_client's name[] filter: only the samples named.
    status, _headers, body = get(kgc, "/metrics?name[]=kgc_consumergroup_lag&name[]=kgc_groups")
    assert status == 200
    assert {n for n, _ in samples(body.decode())} == {"kgc_consumergroup_lag", "kgc_groups"}

    # The health probe answers from the event loop; other methods are refused.
    assert get(kgc, "/healthz")[::2] == (200, b"ok\n")
    req = urllib.request.Request(f"http://127.0.0.1:{kgc.metrics_port}/metrics", data=b"x")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=10)
    assert refused.value.code == 405


def test_the_series_cap_keeps_reported_series_and_counts_the_rest(tmp_path: Path) -> None:
    kgc = KgcProcess(tmp_path / "data", "--metrics-lag-max-series", "3")
    kgc.start()
    try:
        with Admin(kgc.bootstrap) as admin:
            admin.create_topic("t", 4, 1, {})
        prod = producer(kgc)
        for p in range(4):
            prod.produce("t", b"x", partition=p)
        assert prod.flush(30) == 0
        for group, parts in (("a", range(4)), ("b", range(1))):
            c = Consumer({"bootstrap.servers": kgc.bootstrap, "group.id": group})
            c.commit(offsets=[TopicPartition("t", p, 0) for p in parts], asynchronous=False)
            c.close()
        last: Samples = {}

        def reported(want: set[tuple[str, int]], dropped: int) -> bool:
            nonlocal last
            last = scrape(kgc)
            got = {
                (dict(k)["group"], int(dict(k)["partition"]))
                for k in by_name(last, "kgc_consumergroup_committed_offset")
            }
            return got == want and last[("kgc_consumergroup_lag_series_dropped", ())] == dropped

        # The first three committed are reported (each with its lag), two are counted.
        wait_until(lambda: reported({("a", 0), ("a", 1), ("a", 2)}, 2), what="the cap")
        assert len(by_name(last, "kgc_consumergroup_lag")) == 3
        assert len(by_name(last, "kgc_consumergroup_lag_seconds")) == 3
        # Group b commits again: the reported series keep their places.
        c = Consumer({"bootstrap.servers": kgc.bootstrap, "group.id": "b"})
        c.commit(offsets=[TopicPartition("t", 0, 1)], asynchronous=False)
        c.close()
        wait_until(
            lambda: (
                reported({("a", 0), ("a", 1), ("a", 2)}, 2)
                and last[("kgc_consumergroup_lag", lag_key("a", "t", 0))] == 1
            ),
            what="the same series after b's commit",
        )
        # Group a is deleted: its places go to the series that waited.
        admin_client = AdminClient({"bootstrap.servers": kgc.bootstrap})
        for future in admin_client.delete_consumer_groups(["a"]).values():
            future.result(30)
        wait_until(lambda: reported({("b", 0)}, 0), what="b's series once a is gone")
        assert last[("kgc_consumergroup_lag", lag_key("b", "t", 0))] == 0
    finally:
        kgc.stop()
