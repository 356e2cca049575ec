"""KIP-932 share partitions, Kafka vs kgc: ShareFetch and ShareAcknowledge.

One member joins a share group on a one-partition topic holding two batches of five
records (the group's ``share.auto.offset.reset`` set to earliest first, as Kafka's
ShareConsumerTest does), heartbeats (unrecorded) until it is assigned, then: a ShareFetch
opening a session (the acquired ranges, delivery counts and the raw batches compared), a
piggybacked acknowledgement (accept, release, reject, per offset and per batch) with the
released record coming back with delivery count 2, a standalone ShareAcknowledge, the
session errors (a wrong epoch, no session, epoch 0 with acknowledgements, ShareAcknowledge
at epoch 0), an acknowledgement of records another member holds, an invalid batch, and the
session closed with epoch -1. A second member's fetch then gets the records the first one
held when its session closed, with their delivery counts.

Dead letters (KIP-1191): with the group's dead-letter topic set (copying records), a
rejected record and one released to the delivery limit, then the dead-letter topic's
records (key, value, headers, batch producer fields) compared.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from support.diffkit import Side

from protocol.messages import fetch, list_offsets, produce
from protocol.messages import incremental_alter_configs as iac
from protocol.messages import share_acknowledge as sa
from protocol.messages import share_fetch as sf
from protocol.messages import share_group_heartbeat as sgh
from storage.record_batch import decode_records, encode_batch, iter_batches

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

SHARE_FETCH, SHARE_ACK, SG_HEARTBEAT = sf.API_KEY, sa.API_KEY, sgh.API_KEY
ACCEPT, RELEASE, REJECT = 1, 2, 3
TS = 1_700_000_000_000


def _configs(side: Side, group: str, **configs: str) -> None:
    req = iac.IncrementalAlterConfigsRequest(
        resources=[
            iac.AlterConfigsResource(
                resource_type=32,
                resource_name=group,
                configs=[iac.AlterableConfig(name=k, value=v) for k, v in configs.items()],
            )
        ]
    )
    _, resp = side.untimed().request(iac.API_KEY, req, version=1)
    assert not resp.responses[0].error_code, resp


def _produce(
    side: Side, topic: str, n: int, tag: str, *, keyed: bool = False, partition: int = 0
) -> None:
    """``n`` records in one batch, values ``<tag><i>`` (keys ``k<i>`` when ``keyed``)."""
    records = [(f"k{i}".encode() if keyed else None, f"{tag}{i}".encode()) for i in range(n)]
    batch = encode_batch(0, records, timestamp_ms=TS)
    data = produce.PartitionProduceData(index=partition, records=batch)
    req = produce.ProduceRequest(
        acks=-1,
        timeout_ms=30000,
        topic_data=[produce.TopicProduceData(name=topic, partition_data=[data])],
    )
    _, resp = side.untimed().request(produce.API_KEY, req, version=9)
    assert resp.responses[0].partition_responses[0].error_code == 0, resp


def _ready(side: Side, topic: str) -> None:
    side.create_topic(topic, 1, retention_ms="-1")
    deadline = time.monotonic() + side.timeout
    req = list_offsets.ListOffsetsRequest(
        replica_id=-1,
        topics=[
            list_offsets.ListOffsetsTopic(
                name=topic,
                partitions=[list_offsets.ListOffsetsPartition(partition_index=0, timestamp=-1)],
            )
        ],
    )
    while time.monotonic() < deadline:
        _, resp = side.untimed().request(list_offsets.API_KEY, req, version=7)
        if resp.topics[0].partitions[0].error_code == 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"{side.label}: {topic} does not serve ListOffsets")


def _assigned(side: Side, group: str, member: str, topic: str) -> bytes:
    """Heartbeat (unrecorded) until ``member`` holds the topic's partition; its topic id."""
    conn = side.untimed()
    epoch = 0
    topics: list[str] | None = [topic]
    deadline = time.monotonic() + side.timeout
    while True:
        r = conn.call(
            SG_HEARTBEAT,
            1,
            sgh.ShareGroupHeartbeatRequest(
                group_id=group, member_id=member, member_epoch=epoch, subscribed_topic_names=topics
            ),
        )
        assert not r.error_code, r
        if r.assignment is not None and r.assignment.topic_partitions:
            return bytes(r.assignment.topic_partitions[0].topic_id)
        epoch, topics = r.member_epoch, None
        assert time.monotonic() < deadline, f"{side.label}: {member} never assigned"
        time.sleep(0.05)


def _fetch(
    group: str,
    member: str,
    epoch: int,
    topic_id: bytes,
    acks: list[tuple[int, int, list[int]]] | None = None,
    *,
    with_partition: bool = True,
    wait_ms: int = 5000,
) -> sf.ShareFetchRequest:
    partitions = []
    if with_partition or acks:
        partitions = [
            sf.FetchPartition(
                partition_index=0,
                acknowledgement_batches=[
                    sf.AcknowledgementBatch(f, last, t) for f, last, t in acks or []
                ],
            )
        ]
    return sf.ShareFetchRequest(
        group_id=group,
        member_id=member,
        share_session_epoch=epoch,
        max_wait_ms=wait_ms,
        min_bytes=1,
        max_bytes=52428800,
        max_records=500,
        batch_size=500,
        topics=[sf.FetchTopic(topic_id=topic_id, partitions=partitions)] if partitions else [],
    )


def _ack(
    group: str, member: str, epoch: int, topic_id: bytes, acks: list[tuple[int, int, list[int]]]
) -> sa.ShareAcknowledgeRequest:
    return sa.ShareAcknowledgeRequest(
        group_id=group,
        member_id=member,
        share_session_epoch=epoch,
        topics=[
            sa.AcknowledgeTopic(
                topic_id=topic_id,
                partitions=[
                    sa.AcknowledgePartition(
                        partition_index=0,
                        acknowledgement_batches=[
                            sa.AcknowledgementBatch(f, last, t) for f, last, t in acks
                        ],
                    )
                ],
            )
        ],
    )


def share_fetch_scenario(side: Side) -> None:
    group = side.name("sf")
    topic = side.name("sf-t")
    _ready(side, topic)
    side.wait_coordinator(group)
    _configs(side, group, **{"share.auto.offset.reset": "earliest"})
    _produce(side, topic, 5, "a")
    _produce(side, topic, 5, "b")
    tid = _assigned(side, group, "m1", topic)
    a = side.member("a", "share-a")
    a.call(SHARE_FETCH, 1, _fetch(group, "m1", 0, tid), step="open_and_acquire")
    acks = [(0, 2, [ACCEPT]), (3, 3, [RELEASE]), (4, 4, [REJECT]), (5, 6, [ACCEPT, ACCEPT])]
    a.call(SHARE_FETCH, 1, _fetch(group, "m1", 1, tid, acks, with_partition=False), step="acks")
    a.call(SHARE_ACK, 1, _ack(group, "m1", 2, tid, [(3, 3, [ACCEPT])]), step="ack_released")
    a.call(SHARE_FETCH, 1, _fetch(group, "m1", 9, tid, wait_ms=0), step="wrong_epoch")
    a.call(SHARE_FETCH, 1, _fetch(group, "nobody", 4, tid, wait_ms=0), step="no_session")
    a.call(SHARE_ACK, 1, _ack(group, "m1", 0, tid, [(7, 7, [ACCEPT])]), step="ack_epoch0")
    a.call(
        SHARE_FETCH,
        1,
        _fetch(group, "m2", 0, tid, [(7, 7, [ACCEPT])], wait_ms=0),
        step="epoch0_with_acks",
    )
    b = side.member("b", "share-b")
    b.call(SHARE_FETCH, 1, _fetch(group, "m2", 0, tid, wait_ms=0), step="m2_opens")
    b.call(SHARE_ACK, 1, _ack(group, "m2", 1, tid, [(7, 7, [ACCEPT])]), step="not_the_owner")
    a.call(SHARE_ACK, 1, _ack(group, "m1", 3, tid, [(8, 7, [ACCEPT])]), step="invalid_batch")
    a.call(
        SHARE_FETCH,
        1,
        _fetch(group, "m1", -1, tid, [(7, 7, [ACCEPT])], with_partition=False),
        step="close",
    )
    b.call(SHARE_FETCH, 1, _fetch(group, "m2", 2, tid), step="m2_gets_the_rest")


def test_share_fetch_and_acknowledge(diff_shared: Any) -> None:
    diff_shared(share_fetch_scenario)


def _dead_letters(side: Side, topic: str, n: int) -> list[dict[str, Any]]:
    """The first ``n`` records of ``topic``'s partition 0 (polled, untimed): key, value and
    headers, with their batch's producer fields (the timestamps are the time of writing)."""
    req = fetch.FetchRequest(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            fetch.FetchTopic(
                topic=topic,
                partitions=[
                    fetch.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
                ],
            )
        ],
    )
    deadline = time.monotonic() + side.timeout
    while True:
        _, resp = side.untimed().request(fetch.API_KEY, req, version=12)
        data = resp.responses[0].partitions[0].records or b""
        out = []
        for h, start, end in iter_batches(data):
            for r in decode_records(data[start:end]):
                out.append(
                    {
                        "offset": h.base_offset + r.offset_delta,
                        "producer_id": h.producer_id,
                        "attributes": h.attributes,
                        "key": r.key,
                        "value": r.value,
                        "headers": [(k, v) for k, v in r.headers],
                    }
                )
        if len(out) >= n:
            return out
        assert time.monotonic() < deadline, f"{side.label}: {len(out)} dead letters in {topic}"
        time.sleep(0.1)


def share_dead_letters_scenario(side: Side) -> None:
    """KIP-1191: a rejected record and one released to the delivery limit (2, the group's)
    go to the group's dead-letter topic, copied, with the provenance headers."""
    group = side.name("sfd")
    topic = side.name("sfd-t")
    dlq = side.name("dlq.sfd")
    _ready(side, topic)
    side.create_topic(dlq, 1, errors_deadletterqueue_group_enable="true")
    side.wait_coordinator(group)
    _configs(
        side,
        group,
        **{
            "share.auto.offset.reset": "earliest",
            "share.delivery.count.limit": "2",
            "errors.deadletterqueue.topic.name": dlq,
            "errors.deadletterqueue.copy.record.enable": "true",
        },
    )
    _produce(side, topic, 4, "v", keyed=True)
    tid = _assigned(side, group, "m1", topic)
    a = side.member("a", "share-dlq")
    a.call(SHARE_FETCH, 1, _fetch(group, "m1", 0, tid), step="acquire")
    acks = [(0, 0, [ACCEPT]), (1, 1, [REJECT]), (2, 2, [RELEASE]), (3, 3, [ACCEPT])]
    a.call(SHARE_FETCH, 1, _fetch(group, "m1", 1, tid, acks), step="reject_and_release")
    a.call(SHARE_ACK, 1, _ack(group, "m1", 2, tid, [(2, 2, [RELEASE])]), step="release_at_limit")
    side.note("dead_letters", fetch.API_KEY, 12, _dead_letters(side, dlq, 2))
    a.call(SHARE_FETCH, 1, _fetch(group, "m1", 3, tid, wait_ms=500), step="nothing_left")


def test_share_dead_letters(diff_shared: Any) -> None:
    diff_shared(share_dead_letters_scenario)


def share_rotation_scenario(side: Side) -> None:
    """Two partitions, three one-record batches each, MaxRecords 1: which partition a fetch
    acquires from as the session epoch moves (Kafka's round-robin rotation), then a fetch
    whose MinBytes the partitions cannot reach (answered at MaxWaitMs with what there is)."""
    group = side.name("sfr")
    topic = side.name("sfr-t")
    side.create_topic(topic, 2, retention_ms="-1")
    side.wait_coordinator(group)
    _configs(side, group, **{"share.auto.offset.reset": "earliest"})
    for i in range(3):
        for p in (0, 1):
            _produce(side, topic, 1, f"p{p}-{i}.", partition=p)
    conn = side.untimed()
    epoch, topics = 0, [topic]
    deadline = time.monotonic() + side.timeout
    while True:  # until the member holds both partitions
        r = conn.call(
            SG_HEARTBEAT,
            1,
            sgh.ShareGroupHeartbeatRequest(
                group_id=group, member_id="m1", member_epoch=epoch, subscribed_topic_names=topics
            ),
        )
        assert not r.error_code, r
        held = r.assignment.topic_partitions if r.assignment is not None else []
        if held and sorted(held[0].partitions) == [0, 1]:
            tid = bytes(held[0].topic_id)
            break
        epoch, topics = r.member_epoch, None
        assert time.monotonic() < deadline, f"{side.label}: never assigned both partitions"
        time.sleep(0.05)
    a = side.member("a", "share-rot")

    def req(epoch: int, partitions: list[int], **kw: Any) -> sf.ShareFetchRequest:
        fetch_topics = [
            sf.FetchTopic(
                topic_id=tid, partitions=[sf.FetchPartition(partition_index=p) for p in partitions]
            )
        ]
        return sf.ShareFetchRequest(
            group_id=group,
            member_id="m1",
            share_session_epoch=epoch,
            max_wait_ms=kw.get("wait_ms", 5000),
            min_bytes=kw.get("min_bytes", 1),
            max_bytes=52428800,
            max_records=kw.get("max_records", 1),
            batch_size=1,
            topics=fetch_topics if partitions else [],
        )

    a.call(SHARE_FETCH, 1, req(0, [0, 1]), step="epoch0")
    for e in (1, 2, 3):
        a.call(SHARE_FETCH, 1, req(e, []), step=f"epoch{e}")
    a.call(
        SHARE_FETCH,
        1,
        req(4, [], wait_ms=500, min_bytes=1 << 20, max_records=500),
        step="min_bytes_unreached",
    )


def test_share_partition_rotation_and_min_bytes(diff_shared: Any) -> None:
    diff_shared(share_rotation_scenario)


def share_throttle_scenario(side: Side) -> None:
    """Kafka 4.2+'s throttled redelivery: ten records in one batch released at every
    delivery (the default delivery limit, 5): what each fetch acquires as their counts pass
    half the limit and reach its last attempt."""
    group = side.name("sft")
    topic = side.name("sft-t")
    _ready(side, topic)
    side.wait_coordinator(group)
    _configs(side, group, **{"share.auto.offset.reset": "earliest"})
    _produce(side, topic, 10, "t")
    tid = _assigned(side, group, "m1", topic)
    a = side.member("a", "share-throttle")
    r = a.call(SHARE_FETCH, 1, _fetch(group, "m1", 0, tid), step="fetch1")
    epoch = 1
    for n in range(2, 14):
        got = [
            (x.first_offset, x.last_offset)
            for t in r.responses
            for p in t.partitions
            for x in p.acquired_records
        ]
        if not got:
            break
        # Released by a ShareAcknowledge of its own: Kafka handles the acknowledgements of a
        # ShareFetch alongside its fetch, so which records it meets released is a race.
        acks = [(f, last, [RELEASE]) for f, last in got]
        a.call(SHARE_ACK, 1, _ack(group, "m1", epoch, tid, acks), step=f"release{n - 1}")
        r = a.call(SHARE_FETCH, 1, _fetch(group, "m1", epoch + 1, tid), step=f"fetch{n}")
        epoch += 2


def test_share_throttled_redelivery(diff_shared: Any) -> None:
    diff_shared(share_throttle_scenario)
