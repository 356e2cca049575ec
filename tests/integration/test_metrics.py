"""The Prometheus endpoint of a real ``kgc serve``, scraped around a real rebalance."""

from __future__ import annotations

import time
import urllib.request

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families
from support.groupkit import async_wait_until
from support.kgc_process import KgcProcess

from coordinator.group.events import (
    GenerationCompleted,
    GroupEmptied,
    GroupStable,
    OffsetsExpired,
    RebalanceStarted,
)
from coordinator.metrics import Metrics
from coordinator.tools.admin import Admin
from protocol.messages import heartbeat, join_group, offset_commit

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(kgc: KgcProcess) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{kgc.metrics_port}/metrics", timeout=5) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over every series of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def consumer(kgc: KgcProcess, client_id: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        "clicks",
        bootstrap_servers=kgc.bootstrap,
        group_id="dashboards",
        client_id=client_id,
        enable_auto_commit=False,
        session_timeout_ms=10000,
        heartbeat_interval_ms=300,
    )


@pytest.mark.integration
async def test_counters_move_during_a_rebalance(kgc: KgcProcess) -> None:
    with Admin(kgc.bootstrap) as admin:
        admin.create_topic("clicks", 4, 1, {})
    before = scrape(kgc)
    assert ("kgc_connections", (("listener", "PLAINTEXT"),)) in before
    assert total(before, "kgc_offsets_partition_load_seconds") >= 0  # present once loading is done

    first = consumer(kgc, "dash-1")
    await first.start()
    second: AIOKafkaConsumer | None = None
    try:
        await async_wait_until(
            lambda: len(first.assignment()) == 4, what="the first member owning all partitions"
        )
        await first.commit({tp: OffsetAndMetadata(0, "") for tp in first.assignment()})
        one = scrape(kgc)
        assert value(one, "kgc_group_members", group="dashboards") == 1
        assert value(one, "kgc_groups", state="Stable") >= 1
        assert total(one, "kgc_rebalances_total") >= 1
        assert total(one, "kgc_offset_commits_total") >= 4
        assert value(one, "kgc_offsets_stored") >= 4
        assert value(one, "kgc_connections", listener="PLAINTEXT") >= 1
        assert total(one, "kgc_requests_total", api="JoinGroup") >= 1
        assert total(one, "kgc_requests_total", api="Heartbeat") >= 0
        assert total(one, "kgc_request_duration_seconds_count", api="SyncGroup") >= 1

        # A second member joins: a rebalance with cause "join" that completes.
        second = consumer(kgc, "dash-2")
        await second.start()
        await async_wait_until(
            lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2,
            what="both members owning 2 partitions",
        )
        await async_wait_until(
            lambda: value(scrape(kgc), "kgc_group_members", group="dashboards") == 2,
            what="the scrape showing 2 members",
        )
        two = scrape(kgc)
        assert value(two, "kgc_rebalances_total", cause="join") > value(
            one, "kgc_rebalances_total", cause="join"
        )
        assert value(two, "kgc_rebalance_duration_seconds_count") > value(
            one, "kgc_rebalance_duration_seconds_count"
        )
        assert (
            total(two, "kgc_requests_total", api="JoinGroup")
            >= total(one, "kgc_requests_total", api="JoinGroup") + 2
        )
        # During the rebalance heartbeats are answered REBALANCE_IN_PROGRESS, counted by error code.
        assert total(two, "kgc_requests_total", api="Heartbeat", error="REBALANCE_IN_PROGRESS") >= 1
    finally:
        if second is not None:
            await second.stop()
        await first.stop()
    three = scrape(kgc)
    assert value(three, "kgc_rebalances_total", cause="leave") >= 1
    assert value(three, "kgc_group_members", group="dashboards") == 0
    assert value(three, "kgc_groups", state="Empty") >= 1

    # Storage: the offsets log holds the group's records and was fsynced.
    offsets_bytes = total(three, "kgc_log_size_bytes", topic="__consumer_offsets")
    assert offsets_bytes > 0
    assert total(three, "kgc_log_segments", topic="__consumer_offsets") >= 1
    assert value(three, "kgc_fsync_duration_seconds_count") >= 1
    assert value(three, "kgc_compaction_runs_total") >= 0
    assert value(three, "process_resident_memory_bytes") > 0


@pytest.mark.integration
def test_metrics_port_zero_disables_the_endpoint(tmp_path: object) -> None:
    from pathlib import Path

    proc = KgcProcess(Path(str(tmp_path)) / "data")
    proc.start()
    try:
        proc_off = KgcProcess(Path(str(tmp_path)) / "data2", "--metrics-port", "0")
        proc_off.start()
        try:
            assert "metrics on" not in proc_off.log()
        finally:
            proc_off.stop()
        assert "metrics on" in proc.log()
    finally:
        proc.stop()


def test_request_accounting_by_api_version_and_error() -> None:
    m = Metrics(process_metrics=False)
    t0 = time.perf_counter()
    for _ in range(3):
        m.on_request(join_group.API_KEY, 9, join_group.Response(error_code=0), t0)
    m.on_request(
        join_group.API_KEY, 9, join_group.Response(error_code=79), t0
    )  # MEMBER_ID_REQUIRED
    m.on_request(heartbeat.API_KEY, 4, heartbeat.Response(error_code=27), t0)
    m.on_request(3, 12, b"cached metadata body", t0)
    commit = offset_commit.Response(
        topics=[
            offset_commit.OffsetCommitResponseTopic(
                name="t",
                partitions=[
                    offset_commit.OffsetCommitResponsePartition(partition_index=p, error_code=0)
                    for p in range(3)
                ],
            )
        ]
    )
    m.on_request(offset_commit.API_KEY, 9, commit, t0)
    m.on_connection(+1)
    m.on_connection(+1)
    m.on_connection(-1)
    m.group_events([OffsetsExpired(5, ())], 0)
    samples: Samples = {}
    for family in text_string_to_metric_families(m.render().decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    assert value(samples, "kgc_requests_total", api="JoinGroup", version="9", error="NONE") == 3
    assert (
        value(
            samples, "kgc_requests_total", api="JoinGroup", version="9", error="MEMBER_ID_REQUIRED"
        )
        == 1
    )
    assert (
        value(
            samples,
            "kgc_requests_total",
            api="Heartbeat",
            version="4",
            error="REBALANCE_IN_PROGRESS",
        )
        == 1
    )
    assert value(samples, "kgc_requests_total", api="Metadata", version="12", error="NONE") == 1
    assert value(samples, "kgc_request_duration_seconds_count", api="JoinGroup") == 4
    assert value(samples, "kgc_offset_commits_total") == 3
    assert value(samples, "kgc_connections") == 1
    assert value(samples, "kgc_connections_opened_total") == 2
    assert value(samples, "kgc_offsets_expired_total") == 5


def test_rebalance_duration_from_events() -> None:
    m = Metrics(process_metrics=False)
    m.group_events([RebalanceStarted("g", 0, "join", "new member m joined")], 1000)
    m.group_events(
        [GenerationCompleted("g", 1, "new member m joined", 1, "range", "m")],
        4000,
    )
    m.group_events([GroupStable("g", 1, "m", 1, ())], 4500)
    assert m.rebalance_duration._sum.get() == pytest.approx(3.5)
    # A rebalance that restarts before it settles counts from its first start; ending
    # Empty ends it too.
    m.group_events([RebalanceStarted("h", 3, "leave", "members left the group: x")], 10_000)
    m.group_events([RebalanceStarted("h", 3, "session_timeout", "member y expired")], 11_000)
    m.group_events([GroupEmptied("h", 4, "members left the group: x")], 12_000)
    assert m.rebalance_duration._sum.get() == pytest.approx(5.5)
