"""The data plane with real clients: produce and read back, idempotence, restarts, offsets.

Consumers run in assign() mode (no group needed); the group tests live in
test_dataplane_groups.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.crashkit import BackgroundProducer, read_all_confluent, wait_acked
from support.dataplanekit import (
    JS_DIR,
    check_order,
    create_topic,
    keyed_messages,
    produce_confluent,
)
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration

N = 5000
PARTITIONS = 6


def test_confluent_round_trip_keeps_per_partition_order(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "conf", PARTITIONS)
    msgs = keyed_messages(N)
    produce_confluent(kgc.bootstrap, "conf", msgs)
    records = read_all_confluent(kgc.bootstrap, "conf", PARTITIONS)
    assert len(records) == N
    assert len({p for p, _, _ in records}) == PARTITIONS
    assert sum(check_order(records).values()) == N


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_pass_through(kgc: KgcProcess, codec: str) -> None:
    create_topic(kgc.bootstrap, "z", PARTITIONS)
    msgs = keyed_messages(2000, size=200)
    produce_confluent(kgc.bootstrap, "z", msgs, **{"compression.type": codec})
    records = read_all_confluent(kgc.bootstrap, "z", PARTITIONS)
    assert sum(check_order(records).values()) == 2000


def test_kafka_python_round_trip(kgc: KgcProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    create_topic(kgc.bootstrap, "kp", PARTITIONS)
    msgs = keyed_messages(N)
    producer = KafkaProducer(bootstrap_servers=kgc.bootstrap, acks="all", linger_ms=5)
    futures = [producer.send("kp", key=k, value=v) for k, v in msgs]
    producer.flush(30)
    metas = [f.get(timeout=30) for f in futures]
    producer.close()
    assert {m.partition for m in metas} == set(range(PARTITIONS))
    consumer = KafkaConsumer(
        bootstrap_servers=kgc.bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        group_id=None,
    )
    tps = [KTP("kp", p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(tps)
    assert sum(ends.values()) == N
    records: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 60
    while len(records) < N and time.monotonic() < deadline:
        for tp, batch in consumer.poll(timeout_ms=1000).items():
            records += [(tp.partition, r.key, r.value) for r in batch]
    assert consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
    ts = metas[100].timestamp
    found = consumer.offsets_for_times({KTP("kp", metas[100].partition): ts})
    hit = found[KTP("kp", metas[100].partition)]
    assert hit is not None and hit.offset <= metas[100].offset
    consumer.close()
    assert len(records) == N
    assert sum(check_order(records).values()) == N


async def test_aiokafka_round_trip(kgc: KgcProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    create_topic(kgc.bootstrap, "aio", PARTITIONS)
    msgs = keyed_messages(N)
    producer = AIOKafkaProducer(
        bootstrap_servers=kgc.bootstrap, acks="all", linger_ms=5, enable_idempotence=True
    )
    await producer.start()
    try:
        futs = [await producer.send("aio", key=k, value=v) for k, v in msgs]
        for f in futs:
            await f
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kgc.bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        group_id=None,
    )
    await consumer.start()
    try:
        tps = [ATP("aio", p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        records: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 60
        while len(records) < N and time.monotonic() < deadline:
            for tp, batch in (await consumer.getmany(timeout_ms=1000)).items():
                records += [(tp.partition, r.key, r.value) for r in batch]
        ends = await consumer.end_offsets(tps)
        assert sum(ends.values()) == N
    finally:
        await consumer.stop()
    assert len(records) == N
    assert sum(check_order(records).values()) == N


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed")
def test_kafkajs_producer_round_trip(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "js", PARTITIONS)
    out = subprocess.run(
        ["node", str(JS_DIR / "dataplane_produce.js"), kgc.bootstrap, "js", "3000"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr + kgc.log()
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["acked"] == 3000
    # kafkajs' own ListOffsets view agrees with what we read back.
    assert sum(int(o["high"]) for o in report["offsets"]) == 3000
    records = read_all_confluent(kgc.bootstrap, "js", PARTITIONS)
    assert len(records) == 3000
    assert sum(check_order(records).values()) == 3000


def test_list_offsets_via_clients(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "lo", 1)
    p = Producer({"bootstrap.servers": kgc.bootstrap, "acks": "all", "linger.ms": 0})
    for i, ts in enumerate([1_000_000, 2_000_000, 3_000_000]):
        for j in range(10):
            p.produce("lo", partition=0, value=b"%d-%d" % (i, j), timestamp=ts + j)
        p.flush(10)
    c = Consumer({"bootstrap.servers": kgc.bootstrap, "group.id": "lo"})
    try:
        assert c.get_watermark_offsets(TopicPartition("lo", 0), timeout=10) == (0, 30)
        (tp,) = c.offsets_for_times([TopicPartition("lo", 0, 2_000_005)], timeout=10)
        assert tp.offset == 15
        (tp,) = c.offsets_for_times([TopicPartition("lo", 0, 9_000_000)], timeout=10)
        assert tp.offset == -1  # librdkafka's OFFSET_END for "no such record"
    finally:
        c.close()


def test_idempotent_producer_writes_no_duplicates(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "idem", PARTITIONS)
    msgs = keyed_messages(N)
    produce_confluent(
        kgc.bootstrap,
        "idem",
        msgs,
        **{
            "enable.idempotence": True,
            "max.in.flight.requests.per.connection": 5,
            "batch.size": 2048,
        },
    )
    records = read_all_confluent(kgc.bootstrap, "idem", PARTITIONS)
    assert len(records) == N
    assert not [v for v, c in Counter(v for _, _, v in records).items() if c > 1]
    assert sum(check_order(records).values()) == N


# sigterm is slow (8 s): sigkill here and tests/faults/test_clean_stop.py's SIGTERM after serving.
@pytest.mark.parametrize("how", [pytest.param("sigterm", marks=pytest.mark.slow), "sigkill"])
def test_restart_mid_stream_loses_nothing_acknowledged(kgc: KgcProcess, how: str) -> None:
    create_topic(kgc.bootstrap, "crash", PARTITIONS)
    bp = BackgroundProducer(kgc.bootstrap, "crash", **{"enable.idempotence": True})
    bp.thread.start()
    for round_ in range(2):
        wait_acked(bp, 2000 * (round_ + 1))
        if how == "sigkill":
            kgc.kill()
        else:
            assert kgc.stop() == 0
        # An outage, not a wait for something: the producer's requests fail while it lasts.
        time.sleep(0.5)
        kgc.start()
    wait_acked(bp, 6000)
    bp.finish()
    assert not bp.failed, bp.failed[:5]
    records = read_all_confluent(kgc.bootstrap, "crash", PARTITIONS)
    values = [v for _, _, v in records]
    assert bp.acked <= set(values), f"lost {len(bp.acked - set(values))} acknowledged messages"
    dupes = [v for v, c in Counter(values).items() if c > 1]
    assert not dupes, f"{len(dupes)} duplicates, e.g. {dupes[:3]}"
    # Per key, messages are in send order (idempotence keeps order across retries).
    last: dict[bytes | None, int] = {}
    for _, k, v in records:
        assert v is not None
        n = int(v[2:])
        assert n > last.get(k, -1)
        last[k] = n
