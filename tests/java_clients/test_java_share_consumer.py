"""KafkaShareConsumer 4.4.0 (KIP-932) against kgc, through ``kgc.clients.ShareConsume``.

Each test has its own topic and share group (``share.auto.offset.reset`` earliest, set
before consuming, as Kafka's ShareConsumerTest does) on one kgc whose
``group.share.delivery.count.limit`` is 2:

* implicit acknowledgement: two consumers split one partition's records with none delivered
  twice, every delivery count 1;
* explicit acknowledgement: a record RELEASEd comes back with ``deliveryCount()`` 2, a
  REJECTed one never comes back, one released at every delivery is archived after its
  second (the limit), and a group with a dead-letter topic finds both of those there;
* a consumer halted while holding records: another consumer gets them with count 2.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from support.javakit import Clients, Event, JavaClient
from support.kgc_process import KgcProcess

pytestmark = [pytest.mark.kafka, pytest.mark.integration]


@pytest.fixture(scope="module")
def kgc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KgcProcess]:
    proc = KgcProcess(
        tmp_path_factory.mktemp("java-share") / "data", "--group-share-delivery-count-limit", "2"
    )
    proc.start()
    proc.wait_loaded()
    yield proc
    if proc.alive():
        proc.kill()


def _setup(bootstrap: str, topic: str, group: str, n: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        fut.result(timeout=30)
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in {"share.auto.offset.reset": "earliest", **configs}.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(timeout=30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0


def _records(*consumers: JavaClient) -> list[Event]:
    return [e for c in consumers for e in c.of("record")]


def _wait(pred: Callable[[], bool], consumers: list[JavaClient], timeout: float = 60.0) -> None:
    """Until ``pred`` holds, re-checked whenever one of ``consumers`` reports an event."""
    deadline = time.monotonic() + timeout
    turn = 0
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("\n".join(c.describe() for c in consumers))
        c = consumers[turn % len(consumers)]
        turn += 1
        with c._cond:  # woken by the client's next event
            c._cond.wait(0.1)


def test_implicit_two_consumers_split_a_partition(kgc: KgcProcess, clients: Clients) -> None:
    boot = kgc.bootstrap
    _setup(boot, "jsplit", "jg-split", 500)
    a = clients.share_consumer(boot, "jg-split", ["jsplit"], name="a")
    b = clients.share_consumer(boot, "jg-split", ["jsplit"], name="b")
    _wait(lambda: len({e["offset"] for e in _records(a, b)}) >= 500, [a, b])
    for c in (a, b):
        c.request("close", "closed")
    offsets = [e["offset"] for e in _records(a, b)]
    assert sorted(offsets) == list(range(500))  # none delivered twice
    assert {e["delivery_count"] for e in _records(a, b)} == {1}
    assert [e for c in (a, b) for e in c.of("committed") if e["errors"]] == []


def test_explicit_release_reject_limit_and_dead_letters(kgc: KgcProcess, clients: Clients) -> None:
    boot = kgc.bootstrap
    dlq = "dlq.jg-explicit"
    admin = AdminClient({"bootstrap.servers": boot})
    topic = NewTopic(dlq, 1, 1, config={"errors.deadletterqueue.group.enable": "true"})
    for fut in admin.create_topics([topic]).values():
        fut.result(timeout=30)
    _setup(boot, "jexplicit", "jg-explicit", 10, **{"errors.deadletterqueue.topic.name": dlq})
    c = clients.share_consumer(
        boot,
        "jg-explicit",
        ["jexplicit"],
        mode="explicit",
        release_first=[3],
        release_always=[7],
        reject=[5],
    )

    def deliveries(offset: int) -> list[int]:
        return [e["delivery_count"] for e in c.of("record") if e["offset"] == offset]

    _wait(lambda: deliveries(3) == [1, 2] and deliveries(7) == [1, 2], [c])
    # The dead letters are written once the rejection and the last release are durable.
    reader = Consumer(
        {"bootstrap.servers": boot, "group.id": "jdlq-reader", "auto.offset.reset": "earliest"}
    )
    reader.subscribe([dlq])
    letters: list[Any] = []
    try:
        deadline = time.monotonic() + 60
        while len(letters) < 2:
            assert time.monotonic() < deadline, letters
            m = reader.poll(0.2)
            if m is not None and m.error() is None:
                letters.append(m)
    finally:
        reader.close()
    c.request("close", "closed")
    assert deliveries(5) == [1]  # rejected: never again
    assert deliveries(7) == [1, 2]  # released twice: archived at the limit
    assert all(deliveries(o) == [1] for o in (0, 1, 2, 4, 6, 8, 9))
    heads = [dict(m.headers() or []) for m in letters]
    assert [(h["__dlq.errors.offset"], h["__dlq.errors.delivery.count"]) for h in heads] == [
        (b"5", b"1"),
        (b"7", b"2"),
    ]
    assert [(m.key(), m.value()) for m in letters] == [(None, None), (None, None)]


def test_a_halted_consumers_records_go_to_another(kgc: KgcProcess, clients: Clients) -> None:
    boot = kgc.bootstrap
    _setup(boot, "jhalt", "jg-halt", 20)
    holder = clients.share_consumer(boot, "jg-halt", ["jhalt"], mode="explicit", hold=True)
    holder.wait_event("record")
    holder.send("halt")
    holder.wait_exit()
    other = clients.share_consumer(boot, "jg-halt", ["jhalt"])
    _wait(lambda: len({e["offset"] for e in other.of("record")}) >= 20, [other])
    other.request("close", "closed")
    assert 2 in {e["delivery_count"] for e in other.of("record")}
