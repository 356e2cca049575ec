"""librdkafka's ShareConsumer (confluent-kafka 2.16) in a share group of a real ``kgc serve``:
membership seen from the group coordinator's side.

How this works: two share consumers subscribe to a one-partition topic whose group starts at
the earliest offset (the group config ``share.auto.offset.reset``). Both are given the
partition (the simple assignor shares it: more members than partitions), the records are
split between them with none delivered twice, ShareGroupDescribe shows both members with
``t:0``; closing a consumer sends its leave heartbeat (epoch -1), after which the group
has one member, then none (Empty).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Producer, ShareConsumer
from support.groupkit import create_topic
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.messages import incremental_alter_configs as iac
from protocol.messages import share_group_describe as sgd

pytestmark = pytest.mark.integration

TOPIC = "tasks"
GROUP = "workers"
RECORDS = 200


def describe(bootstrap: str) -> Any:
    with Connection.to(bootstrap) as conn:
        _, resp = conn.request(sgd.API_KEY, sgd.ShareGroupDescribeRequest(group_ids=[GROUP]))
    return resp.groups[0]


def until(what: str, check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_two_share_consumers_share_a_partition_and_leave(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, TOPIC, 1)
    with Connection.to(kgc.bootstrap) as conn:
        _, resp = conn.request(
            iac.API_KEY,
            iac.IncrementalAlterConfigsRequest(
                resources=[
                    iac.AlterConfigsResource(
                        resource_type=32,
                        resource_name=GROUP,
                        configs=[
                            iac.AlterableConfig(name="share.auto.offset.reset", value="earliest")
                        ],
                    )
                ]
            ),
        )
        assert resp.responses[0].error_code == 0
    producer = Producer({"bootstrap.servers": kgc.bootstrap})
    for i in range(RECORDS):
        producer.produce(TOPIC, value=str(i).encode())
    assert producer.flush(30) == 0
    conf = {"bootstrap.servers": kgc.bootstrap, "group.id": GROUP}
    consumers = [ShareConsumer({**conf, "client.id": f"w{i}"}) for i in range(2)]
    seen: dict[int, int] = {}
    try:
        for c in consumers:
            c.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while len(seen) < RECORDS:
            assert time.monotonic() < deadline, f"{len(seen)} of {RECORDS} records"
            for c in consumers:
                for msg in c.poll(0.2) or []:
                    if msg.error() is None:
                        seen[msg.offset()] = seen.get(msg.offset(), 0) + 1
        assert sorted(seen) == list(range(RECORDS))
        assert set(seen.values()) == {1}  # none delivered twice

        def both_assigned() -> Any:
            d = describe(kgc.bootstrap)
            parts = {
                m.client_id: [tp.partitions for tp in m.assignment.topic_partitions]
                for m in d.members
            }
            return d if parts == {"w0": [[0]], "w1": [[0]]} else None

        d = until("both members assigned the partition", both_assigned)
        assert (d.group_state, d.assignor_name) == ("Stable", "simple")
        consumers.pop().close()
        d = until(
            "one member left",
            lambda: (g := describe(kgc.bootstrap)).members and len(g.members) == 1 and g,
        )
        assert [m.client_id for m in d.members] == ["w0"]
        consumers.pop().close()
        d = until(
            "an empty group", lambda: (g := describe(kgc.bootstrap)).group_state == "Empty" and g
        )
        assert d.members == []
    finally:
        for c in consumers:
            c.close()
