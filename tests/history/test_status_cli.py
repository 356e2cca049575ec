"""A partition's status on real consumers against a real ``kgc serve``: STALL for a
consumer that keeps committing the same offset while records wait, STOP for one that stopped
committing with records waiting, OK for one caught up -- in ``kgc groups describe`` (column
STATUS, JSON ``status``) and in the metrics (``kgc_consumergroup_partition_status`` and the
group's worst, ``kgc_consumergroup_status``)."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from prometheus_client.parser import text_string_to_metric_families
from support.clikit import Run, call_cli
from support.groupkit import async_wait_until
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration

TOPIC = "events"


async def acli(kgc: KgcProcess, *args: str) -> Run:
    return await asyncio.to_thread(call_cli, *args, "--bootstrap-server", kgc.bootstrap)


def scrape(kgc: KgcProcess, name: str) -> dict[tuple[str, ...], float]:
    url = f"http://127.0.0.1:{kgc.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {
        tuple(sorted(s.labels.items())): s.value  # type: ignore[misc]
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name
    }


async def status_of(kgc: KgcProcess, group: str) -> str | None:
    desc = (await acli(kgc, "groups", "describe", group, "--output", "json")).json()
    (row,) = desc["offsets"]
    return row["status"]


async def test_stall_and_stop_on_real_consumers(tmp_path: Path) -> None:
    kgc = KgcProcess(
        tmp_path / "data",
        # every check of "stuck" follows one of its commits by one CLI call (in process) at
        # most, so 3 s without a commit is STOP for "stopped" alone
        "--offsets-status-stop-ms",
        "3000",
        "--offsets-status-window-commits",
        "3",
    )
    kgc.start()
    try:
        assert (await acli(kgc, "topics", "create", TOPIC, "--partitions", "1")).code == 0
        producer = AIOKafkaProducer(bootstrap_servers=kgc.bootstrap)
        await producer.start()
        try:
            for _ in range(10):
                await producer.send_and_wait(TOPIC, b"x", partition=0)
        finally:
            await producer.stop()
        tp = TopicPartition(TOPIC, 0)

        def member(group: str) -> AIOKafkaConsumer:
            return AIOKafkaConsumer(
                bootstrap_servers=kgc.bootstrap, group_id=group, enable_auto_commit=False
            )

        stuck, stopped, fine = member("stuck"), member("stopped"), member("fine")
        for c in (stuck, stopped, fine):
            await c.start()
            c.assign([tp])
        try:
            # stuck: alive, committing offset 2 again and again while 8 records wait
            for _ in range(3):
                await stuck.commit({tp: OffsetAndMetadata(2, "")})
            await stopped.commit({tp: OffsetAndMetadata(4, "")})  # then nothing more
            await fine.commit({tp: OffsetAndMetadata(10, "")})  # caught up
            assert await status_of(kgc, "stuck") == "STALL"
            assert await status_of(kgc, "fine") == "OK"
            await stuck.commit({tp: OffsetAndMetadata(2, "")})  # still alive, still stuck
            table = await acli(kgc, "groups", "describe", "stuck")
            assert table.out.splitlines()[0].split()[-1] == "STATUS"
            assert table.out.splitlines()[1].split()[-1] == "STALL", table.out

            await stuck.commit({tp: OffsetAndMetadata(2, "")})
            labels = (("group", "stuck"), ("partition", "0"), ("status", "STALL"), ("topic", TOPIC))
            assert scrape(kgc, "kgc_consumergroup_partition_status").get(labels) == 1
            assert (
                scrape(kgc, "kgc_consumergroup_status").get(
                    (("group", "stuck"), ("status", "STALL"))
                )
                == 1
            )

            # stopped: no commit for offsets.status.stop.ms with records waiting; the stuck
            # one keeps committing (STALL still), the caught-up one stays OK
            async def stopped_now() -> bool:
                await stuck.commit({tp: OffsetAndMetadata(2, "")})
                return await status_of(kgc, "stopped") == "STOP"

            await async_wait_until(stopped_now, timeout=60, interval=0.5, what="STOP")
            await stuck.commit({tp: OffsetAndMetadata(2, "")})
            assert await status_of(kgc, "stuck") == "STALL"
            assert await status_of(kgc, "fine") == "OK"  # caught up: never stopped
            await async_wait_until(
                lambda: scrape(kgc, "kgc_consumergroup_status").get(
                    (("group", "stopped"), ("status", "STOP"))
                ) == 1,
                what="the metrics say STOP",
            )  # fmt: skip
        finally:
            for c in (stuck, stopped, fine):
                await c.stop()
    finally:
        kgc.stop()
