"""KafkaConsumer 4.4.0 with group.protocol=consumer (KIP-848) against kgc: the server-side
assignors uniform and range, partitions handed over member by member, regular-expression
subscriptions resolved by the client (subscribe(Pattern)) and by the server
(subscribe(SubscriptionPattern)) picking up a topic created later."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from support.javakit import Clients, JavaClient, Partition, wait_assignments
from support.kgc_process import KgcProcess

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

KEYS = [f"key-{i}" for i in range(12)]


def _consumed(c: JavaClient) -> list[tuple[str, int, int]]:
    return [(e["topic"], e["partition"], e["offset"]) for e in c.of("record")]


def _acked(acks: list[dict[str, object]]) -> list[tuple[str, int, int]]:
    return sorted((str(a["topic"]), int(str(a["partition"])), int(str(a["offset"]))) for a in acks)


def _first_time(c: JavaClient, event: str, tp: Partition) -> int:
    """When (ms) ``c`` first reported ``tp`` in an ``event`` (assigned/revoked) callback."""
    for e in c.of(event):
        if [tp[0], tp[1]] in e["partitions"]:
            return int(e["ms"])
    raise AssertionError(f"{c.name} never reported {event} {tp}: {c.describe()}")


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_consumer_protocol_members_share_the_partitions_and_hand_them_over(
    kgc848: KgcProcess, clients: Clients, topic_maker: Callable[..., None], assignor: str
) -> None:
    boot = kgc848.bootstrap
    clicks, views, group = f"clicks-{assignor}", f"views-{assignor}", f"site-{assignor}"
    for t in (clicks, views):
        topic_maker(boot, t, 4)
    everything = {(t, p) for t in (clicks, views) for p in range(4)}
    first = clients.produce(boot, f"{clicks},{views}", 20, keys=KEYS)

    def member(name: str) -> JavaClient:
        return clients.consumer(
            boot,
            group,
            topics=[clicks, views],
            protocol="consumer",
            assignor=assignor,
            client_id=name,
        )

    a = member("a")
    a.wait_for(lambda e: e["event"] == "committed" and len(_consumed(a)) == 40)
    assert sorted(_consumed(a)) == _acked(first)
    b = member("b")
    split = wait_assignments([a, b], everything)
    assert [len(s) for s in split] == [4, 4]
    if assignor == "range":
        # Co-partitioned: a member owns the same partition numbers of both topics.
        for s in split:
            assert {p for t, p in s if t == clicks} == {p for t, p in s if t == views}, split
    # Each partition that moved reached b only after a had given it up.
    for tp in split[1]:
        assert _first_time(a, "revoked", tp) <= _first_time(b, "assigned", tp)
    assert not _consumed(b), "b re-read records a had committed"

    a.send("close")
    a.wait_event("closed")
    assert a.wait_exit() == 0
    wait_assignments([b], everything)
    second = clients.produce(boot, f"{clicks},{views}", 10, keys=KEYS, value_prefix="w-")
    b.wait_for(lambda e: e["event"] == "committed" and len(_consumed(b)) == 20)
    assert sorted(_consumed(b)) == _acked(second)
    ends: dict[Partition, int] = {}
    for t, p, o in _acked(first + second):
        ends[(t, p)] = max(ends.get((t, p), 0), o + 1)
    committed = b.request("committed", "committed_read")["offsets"]
    assert {(t, p): o for t, p, o in committed} == {tp: ends.get(tp, 0) for tp in everything}


def test_regex_subscriptions_pick_up_a_topic_created_later(
    kgc848: KgcProcess, clients: Clients, topic_maker: Callable[..., None]
) -> None:
    boot = kgc848.bootstrap
    base = f"events-{uuid.uuid4().hex[:6]}"
    topic_maker(boot, f"{base}-1", 2)
    topic_maker(boot, f"other-{base}-1", 1)  # matches no whole-name pattern below
    # subscribe(Pattern): the client matches the names in its metadata (refreshed often here).
    by_client = clients.consumer(
        boot,
        f"{base}-client-regex",
        pattern=f"{base}-.*",
        protocol="consumer",
        client_id="client-regex",
        properties={"metadata.max.age.ms": "500"},
    )
    # subscribe(SubscriptionPattern): kgc resolves the RE2 expression, as Kafka's broker does.
    by_server = clients.consumer(
        boot,
        f"{base}-server-regex",
        re2_pattern=f"{base}-.*",
        protocol="consumer",
        client_id="server-regex",
    )
    first = {(f"{base}-1", 0), (f"{base}-1", 1)}
    for c in (by_client, by_server):
        wait_assignments([c], first)
    topic_maker(boot, f"{base}-2", 2)
    acks = clients.produce(boot, f"{base}-2", 10, keys=KEYS)
    both = first | {(f"{base}-2", 0), (f"{base}-2", 1)}
    for c in (by_client, by_server):
        wait_assignments([c], both)
        c.wait_for(lambda e, c=c: e["event"] == "committed" and len(_consumed(c)) == 10)
        assert sorted(_consumed(c)) == _acked(acks)
