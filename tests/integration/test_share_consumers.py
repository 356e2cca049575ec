"""confluent-kafka's ShareConsumer (librdkafka 2.16) against a real ``kgc serve``.

Each test creates its topic, sets the group's ``share.auto.offset.reset`` to earliest (as
Kafka's ShareConsumerTest does first) and produces before consuming:

* two consumers split one partition's records with none delivered twice;
* a RELEASEd record comes back with delivery count 2; a REJECTed one never does;
* a consumer killed (SIGKILL) while holding records: its connection closes and another
  consumer gets them at once, with delivery count 2;
* the delivery limit (``group.share.delivery.count.limit`` 2) archives a record released
  twice;
* a SIGKILL and restart of kgc redelivers nothing that was acknowledged;
* dead letters (KIP-1191): a rejected record and one released to the limit are copied,
  key, value and provenance headers, to the group's dead-letter topic, read back by a
  plain consumer.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from support.groupkit import create_topic
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration

DEADLINE_S = 60.0


def _kgc(data_dir: Path) -> Iterator[KgcProcess]:
    proc = KgcProcess(data_dir, "--group-share-delivery-count-limit", "2")
    proc.start()
    proc.wait_loaded()
    yield proc
    if proc.alive():
        proc.kill()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KgcProcess]:
    """One server for the tests that do not stop it (each has its own topic and group)."""
    yield from _kgc(tmp_path_factory.mktemp("share") / "data")


@pytest.fixture
def kgc(tmp_path: Path) -> Iterator[KgcProcess]:
    yield from _kgc(tmp_path / "data")


def earliest(bootstrap: str, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                "share.auto.offset.reset",
                "earliest",
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(timeout=30)


def produce(bootstrap: str, topic: str, n: int, start: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, value=f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0


def consumer(bootstrap: str, group: str, explicit: bool = False) -> ShareConsumer:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "fetch.wait.max.ms": 100,
    }
    if explicit:
        config["share.acknowledgement.mode"] = "explicit"
    c = ShareConsumer(config)
    return c


def poll_until(
    consumers: list[ShareConsumer],
    done: Callable[[], bool],
    on_message: Callable[[int, Any], None],
    deadline_s: float = DEADLINE_S,
) -> None:
    end = time.monotonic() + deadline_s
    while not done():
        assert time.monotonic() < end, "timed out"
        for i, c in enumerate(consumers):
            for m in c.poll(0.2) or []:
                if m.error() is None:
                    on_message(i, m)


def test_two_consumers_split_a_partition_without_duplicates(shared: KgcProcess) -> None:
    kgc = shared
    create_topic(kgc.bootstrap, "split", 1)
    earliest(kgc.bootstrap, "g-split")
    produce(kgc.bootstrap, "split", 1000)
    a, b = consumer(kgc.bootstrap, "g-split"), consumer(kgc.bootstrap, "g-split")
    a.subscribe(["split"])
    b.subscribe(["split"])
    seen: dict[int, list[int]] = {}
    counts: set[int] = set()

    def got(i: int, m: Any) -> None:
        seen.setdefault(m.offset(), []).append(i)
        counts.add(m.delivery_count())

    try:
        poll_until([a, b], lambda: len(seen) >= 1000, got)
    finally:
        a.close()
        b.close()
    assert sorted(seen) == list(range(1000))
    assert all(len(v) == 1 for v in seen.values())  # none delivered twice
    assert counts == {1}


def test_release_comes_back_with_count_two_and_reject_never(shared: KgcProcess) -> None:
    kgc = shared
    create_topic(kgc.bootstrap, "rel", 1)
    earliest(kgc.bootstrap, "g-rel")
    produce(kgc.bootstrap, "rel", 10)
    c = consumer(kgc.bootstrap, "g-rel", explicit=True)
    c.subscribe(["rel"])
    deliveries: list[tuple[int, int]] = []

    def got(_: int, m: Any) -> None:
        deliveries.append((m.offset(), m.delivery_count()))
        if m.offset() == 3 and m.delivery_count() == 1:
            c.acknowledge(m, AcknowledgeType.RELEASE)
        elif m.offset() == 5:
            c.acknowledge(m, AcknowledgeType.REJECT)
        else:
            c.acknowledge(m)

    try:
        poll_until([c], lambda: (3, 2) in deliveries, got)
        c.commit_sync()
        # A few more polls: the rejected record never comes back.
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            for m in c.poll(0.2) or []:
                if m.error() is None:
                    got(0, m)
        c.commit_sync()
    finally:
        c.close()
    assert [d for d in deliveries if d[0] == 5] == [(5, 1)]
    assert [d for d in deliveries if d[0] == 3] == [(3, 1), (3, 2)]


KILLED = textwrap.dedent(
    """
    import sys
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                       "share.acknowledgement.mode": "explicit", "fetch.wait.max.ms": 100})
    c.subscribe([sys.argv[3]])
    while True:
        msgs = [m for m in (c.poll(0.5) or []) if m.error() is None]
        if msgs:
            print(len(msgs), flush=True)
            sys.stdin.read()  # hold them until killed
    """
)


def test_a_killed_consumers_records_go_to_another(shared: KgcProcess) -> None:
    kgc = shared
    create_topic(kgc.bootstrap, "kill", 1)
    earliest(kgc.bootstrap, "g-kill")
    produce(kgc.bootstrap, "kill", 20)
    holder = subprocess.Popen(
        [sys.executable, "-c", KILLED, kgc.bootstrap, "g-kill", "kill"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ},
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert int(line) > 0
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    c = consumer(kgc.bootstrap, "g-kill")
    c.subscribe(["kill"])
    counts: dict[int, int] = {}
    started = time.monotonic()
    try:
        poll_until(
            [c],
            lambda: len(counts) >= 20,
            lambda _, m: counts.setdefault(m.offset(), m.delivery_count()),
        )
    finally:
        c.close()
    # Released when its connection closed, not after the 30 s lock.
    assert time.monotonic() - started < 25
    assert 2 in counts.values()


def test_delivery_limit_archives(shared: KgcProcess) -> None:
    kgc = shared
    create_topic(kgc.bootstrap, "lim", 1)
    earliest(kgc.bootstrap, "g-lim")
    produce(kgc.bootstrap, "lim", 1)
    c = consumer(kgc.bootstrap, "g-lim", explicit=True)
    c.subscribe(["lim"])
    deliveries: list[int] = []

    def got(_: int, m: Any) -> None:
        deliveries.append(m.delivery_count())
        c.acknowledge(m, AcknowledgeType.RELEASE)

    try:
        poll_until([c], lambda: len(deliveries) >= 2, got)
        c.commit_sync()
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            for m in c.poll(0.2) or []:
                if m.error() is None:
                    got(0, m)
            c.commit_sync()
    finally:
        c.close()
    assert deliveries == [1, 2]  # limit 2: archived after its second delivery


@pytest.mark.slow  # its own server, killed and restarted
def test_kgc_killed_and_restarted_redelivers_nothing_acknowledged(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "crash", 1)
    earliest(kgc.bootstrap, "g-crash")
    produce(kgc.bootstrap, "crash", 100)
    c = consumer(kgc.bootstrap, "g-crash", explicit=True)
    c.subscribe(["crash"])
    acked: set[int] = set()

    def got(_: int, m: Any) -> None:
        if m.offset() < 50:
            c.acknowledge(m)
            acked.add(m.offset())
        else:
            c.acknowledge(m, AcknowledgeType.RELEASE)

    try:
        poll_until([c], lambda: len(acked) >= 50, got)
        c.commit_sync()  # answered once durable
    finally:
        c.close()
    kgc.kill()
    kgc.start()
    kgc.wait_loaded()
    again: dict[int, int] = {}
    c = consumer(kgc.bootstrap, "g-crash")
    c.subscribe(["crash"])
    try:
        poll_until(
            [c],
            lambda: len(again) >= 50,
            lambda _, m: again.setdefault(m.offset(), m.delivery_count()),
        )
    finally:
        c.close()
    assert sorted(again) == list(range(50, 100))  # nothing acknowledged came back


@pytest.mark.slow  # about 5 s: a share group joining, a plain consumer reading back
def test_dead_letters_of_rejected_and_exhausted_records(shared: KgcProcess) -> None:
    kgc = shared
    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
    dlq = NewTopic("dlq.g-dlq", 1, 1, config={"errors.deadletterqueue.group.enable": "true"})
    for fut in admin.create_topics([dlq]).values():
        fut.result(timeout=30)
    create_topic(kgc.bootstrap, "dl", 1)
    earliest(kgc.bootstrap, "g-dlq")
    group_configs = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in (
            ("errors.deadletterqueue.topic.name", "dlq.g-dlq"),
            ("errors.deadletterqueue.copy.record.enable", "true"),
        )
    ]
    resource = ConfigResource(ResourceType.GROUP, "g-dlq", incremental_configs=group_configs)
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(timeout=30)
    p = Producer({"bootstrap.servers": kgc.bootstrap})
    for i in range(3):
        p.produce("dl", key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0
    c = consumer(kgc.bootstrap, "g-dlq", explicit=True)
    c.subscribe(["dl"])
    deliveries: list[tuple[int, int]] = []

    def got(_: int, m: Any) -> None:
        deliveries.append((m.offset(), m.delivery_count()))
        kind = {0: AcknowledgeType.ACCEPT, 1: AcknowledgeType.REJECT}.get(m.offset())
        c.acknowledge(m, kind or AcknowledgeType.RELEASE)  # offset 2: released to the limit

    try:
        poll_until([c], lambda: (2, 2) in deliveries, got)
        c.commit_sync()
    finally:
        c.close()
    reader = Consumer(
        {
            "bootstrap.servers": kgc.bootstrap,
            "group.id": "dlq-reader",
            "auto.offset.reset": "earliest",
        }
    )
    reader.subscribe(["dlq.g-dlq"])
    letters: list[Any] = []
    try:
        end = time.monotonic() + DEADLINE_S
        while len(letters) < 2:
            assert time.monotonic() < end, "timed out"
            m = reader.poll(0.2)
            if m is not None and m.error() is None:
                letters.append(m)
    finally:
        reader.close()
    got_letters = [(m.key(), m.value(), dict(m.headers() or [])) for m in letters]
    assert got_letters == [
        (
            b"k1",
            b"v1",
            {
                "__dlq.errors.topic": b"dl",
                "__dlq.errors.partition": b"0",
                "__dlq.errors.offset": b"1",
                "__dlq.errors.group": b"g-dlq",
                "__dlq.errors.delivery.count": b"1",
                "__dlq.errors.message": b"Offset rejected by client.",
            },
        ),
        (
            b"k2",
            b"v2",
            {
                "__dlq.errors.topic": b"dl",
                "__dlq.errors.partition": b"0",
                "__dlq.errors.offset": b"2",
                "__dlq.errors.group": b"g-dlq",
                "__dlq.errors.delivery.count": b"2",
                "__dlq.errors.message": b"Offset delivery count exceeded the threshold.",
            },
        ),
    ]
