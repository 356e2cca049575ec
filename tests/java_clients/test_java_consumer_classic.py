"""KafkaConsumer 4.4.0 with group.protocol=classic against kgc: assignors, hand-over, static
members (the static-membership scenario also runs against the reference Kafka broker)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from support.javakit import Clients, JavaClient, Partition, assignment, status, wait_assignments
from support.kafkaserver import KafkaServer
from support.kgc_process import KgcProcess

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

KEYS = [f"key-{i}" for i in range(12)]


def _ends(acks: list[dict[str, object]]) -> dict[Partition, int]:
    ends: dict[Partition, int] = {}
    for a in acks:
        tp = (str(a["topic"]), int(str(a["partition"])))
        ends[tp] = max(ends.get(tp, 0), int(str(a["offset"])) + 1)
    return ends


def _consumed(c: JavaClient) -> list[tuple[str, int, int]]:
    return [(e["topic"], e["partition"], e["offset"]) for e in c.of("record")]


def _revoked(c: JavaClient, after: int = 0) -> list[set[Partition]]:
    return [
        {(t, p) for t, p in e["partitions"]} for e in c.events[after:] if e["event"] == "revoked"
    ]


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_two_members_split_the_partitions_and_hand_them_over_with_their_offsets(
    kgc: KgcProcess, clients: Clients, topic_maker: Callable[..., None], assignor: str
) -> None:
    topic, group = f"orders-{assignor}", f"billing-{assignor}"
    topic_maker(kgc.bootstrap, topic, 4)
    everything = {(topic, p) for p in range(4)}
    first = clients.produce(kgc.bootstrap, topic, 40, keys=KEYS)

    a = clients.consumer(kgc.bootstrap, group, topics=[topic], assignor=assignor, client_id="a")
    a.wait_for(lambda e: e["event"] == "committed" and len(_consumed(a)) == 40)
    assert sorted(_consumed(a)) == sorted(
        (topic, int(x["partition"]), int(x["offset"])) for x in first
    )
    assert assignment(a) == everything
    joined = a.mark()

    b = clients.consumer(kgc.bootstrap, group, topics=[topic], assignor=assignor, client_id="b")
    split = wait_assignments([a, b], everything)
    assert sorted(len(s) for s in split) == [2, 2]
    # Eager (range) revokes everything before the rebalance; cooperative only what moves.
    moved = everything - split[0]
    revoked_a = set().union(*_revoked(a, joined))
    assert revoked_a == (everything if assignor == "range" else moved)
    assert not _consumed(b), "b re-read records a had committed"

    b_before = b.mark()
    a.send("close")
    a.wait_event("closed")
    assert a.wait_exit() == 0
    wait_assignments([b], everything)
    revoked_b = set().union(*_revoked(b, b_before))
    assert revoked_b == (split[1] if assignor == "range" else set())

    second = clients.produce(kgc.bootstrap, topic, 20, keys=KEYS, value_prefix="w-")
    b.wait_for(lambda e: e["event"] == "committed" and len(_consumed(b)) == 20)
    assert sorted(_consumed(b)) == sorted(
        (topic, int(x["partition"]), int(x["offset"])) for x in second
    ), "b read other records than the ones produced after a left"
    ends = _ends(first + second)
    committed = b.request("committed", "committed_read")["offsets"]
    assert {(t, p): o for t, p, o in committed} == {tp: ends.get(tp, 0) for tp in everything}


def _static_restart(bootstrap: str, clients: Clients, topic: str, group: str) -> dict[str, object]:
    """Two static members; one closes and comes back with its instance id. What each saw."""
    everything = {(topic, p) for p in range(4)}
    a = clients.consumer(bootstrap, group, topics=[topic], instance_id="a", client_id="a")
    b = clients.consumer(bootstrap, group, topics=[topic], instance_id="b", client_id="b")
    split = wait_assignments([a, b], everything)
    before_a, before_b = status(a), status(b)
    b_mark = b.mark()
    a.send("close")
    a.wait_event("closed")
    assert a.wait_exit() == 0
    a2 = clients.consumer(bootstrap, group, topics=[topic], instance_id="a", client_id="a")
    got = a2.wait_event("assigned")
    after_b = status(b)
    return {
        "a_partitions": split[0],
        "a2_partitions": {(t, p) for t, p in got["assignment"]},
        "same_generation": got["generation"] == before_a["generation"],
        "a2_new_member_id": got["member_id"] != before_a["member_id"],
        "b_rebalanced": [
            e["event"] for e in b.events[b_mark:] if e["event"] in ("revoked", "assigned", "lost")
        ],
        "b_same_generation": after_b["generation"] == before_b["generation"],
        "b_partitions": {(t, p) for t, p in after_b["assignment"]},
        "b_partitions_before": split[1],
    }


def test_static_member_restart_keeps_its_partitions_without_a_rebalance_as_in_kafka(
    kgc: KgcProcess, kafka_broker: KafkaServer, clients: Clients, topic_maker: Callable[..., None]
) -> None:
    seen = {}
    for name, bootstrap in (("kgc", kgc.bootstrap), ("kafka", kafka_broker.bootstrap)):
        topic, group = f"static-{uuid.uuid4().hex[:8]}", f"static-{uuid.uuid4().hex[:8]}"
        topic_maker(bootstrap, topic, 4)
        seen[name] = _static_restart(bootstrap, clients, topic, group)
    got = seen["kgc"]
    assert got["a2_partitions"] == got["a_partitions"]
    assert got["same_generation"] and got["a2_new_member_id"]
    assert got["b_rebalanced"] == [] and got["b_same_generation"]
    assert got["b_partitions"] == got["b_partitions_before"]
    # Kafka does the same (partitions differ only by which member id sorts first).
    ref = seen["kafka"]
    assert {k: v for k, v in got.items() if "partitions" not in k} == {
        k: v for k, v in ref.items() if "partitions" not in k
    }
    assert ref["a2_partitions"] == ref["a_partitions"]
