"""The log's transactional duties, Kafka vs kgc: Fetch and ListOffsets with an open
transaction (the LSO, read_committed against read_uncommitted), after its abort (the aborted
transactions listed, the marker returned), transactional Produce on a partition not in the
transaction (KIP-890 verification, by Produce version), markers refused by epoch and
DescribeProducers.

The transactions run on the TV1 protocol as librdkafka drives them, request by request:
InitProducerId, AddPartitionsToTxn, transactional Produce, EndTxn (the coordinator's
helpers of test_txn_coordinator.py).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from support.diffkit import Runner, Side
from support.diffplanekit import batch as _batch
from support.diffplanekit import list_request as _list
from support.diffplanekit import produce_request as _produce
from support.diffplanekit import topic_ready as _topic_ready
from support.difftxnkit import add as _add
from support.difftxnkit import end as _end
from support.difftxnkit import init as _init
from support.difftxnkit import ready as _ready
from support.difftxnkit import settle as _settle

from protocol.messages import describe_producers, fetch, write_txn_markers
from storage.record_batch import ATTR_TRANSACTIONAL, encode_batch

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

PRODUCE, FETCH, LIST_OFFSETS, WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS = 0, 1, 2, 27, 61


def _now() -> int:
    """Batches stamped now: Kafka rolls a segment when a batch's timestamp is segment.ms
    past the segment's first one, and a read never crosses a segment."""
    return int(time.time() * 1000)


def _txn_batch(n: int, pid: int, epoch: int, seq: int, tag: str) -> bytes:
    return encode_batch(
        0,
        [(f"k{i}".encode(), f"{tag}{i}".encode()) for i in range(n)],
        timestamp_ms=_now(),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        attributes=ATTR_TRANSACTIONAL,
    )


def _txn_produce(side: Side, topic: str, txn_id: str, batch: bytes, version: int, step: str) -> Any:
    req = _produce(topic, batch)
    req.transactional_id = txn_id
    return side.call(PRODUCE, version, req, step=step)


def _fetch_both(side: Side, topic: str, offset: int, step: str) -> None:
    for level, name in ((1, "committed"), (0, "uncommitted")):
        side.call(
            FETCH,
            12,
            fetch.FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=1 << 20,
                isolation_level=level,
                session_id=0,
                session_epoch=-1,
                topics=[
                    fetch.FetchTopic(
                        topic=topic,
                        partitions=[
                            fetch.FetchPartition(
                                partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
                            )
                        ],
                    )
                ],
            ),
            step=f"{step}.fetch.{name}",
        )
        req = _list(topic, (0, -1))
        req.isolation_level = level
        side.call(LIST_OFFSETS, 7, req, step=f"{step}.latest.{name}")


def _describe_producers(side: Side, topic: str, step: str) -> None:
    side.call(
        DESCRIBE_PRODUCERS,
        0,
        describe_producers.Request(
            topics=[describe_producers.TopicRequest(name=topic, partition_indexes=[0])]
        ),
        step=step,
    )


def open_then_aborted_scenario(side: Side) -> None:
    txn = side.name("lso")
    topic = side.name("txn-lso")
    _topic_ready(side, topic, 1)
    _ready(side, txn)
    init = _init(side, txn, 4, "init")
    pid, epoch = init.producer_id, init.producer_epoch
    side.call(PRODUCE, 9, _produce(topic, _batch(2, ts=_now())), step="produce.plain")
    # Not added to the transaction yet: refused (KIP-890 part 1), by Produce version.
    _txn_produce(side, topic, txn, _txn_batch(1, pid, epoch, 0, "x"), 9, "produce.unverified.v9")
    _txn_produce(side, topic, txn, _txn_batch(1, pid, epoch, 0, "x"), 11, "produce.unverified.v11")
    _add(side, txn, pid, epoch, {topic: [0]}, 3, "add")
    _txn_produce(side, topic, txn, _txn_batch(3, pid, epoch, 0, "t"), 9, "produce.txn")
    side.call(PRODUCE, 9, _produce(topic, _batch(1, ts=_now(), tag="after")), step="produce.after")
    _fetch_both(side, topic, 0, "open")
    _describe_producers(side, topic, "producers.open")
    _end(side, txn, pid, epoch, False, 3, "abort")
    _settle(side, txn, "CompleteAbort")
    _fetch_both(side, topic, 0, "aborted")
    _fetch_both(side, topic, 3, "aborted.inside")
    _fetch_both(side, topic, 7, "aborted.past_marker")
    _fetch_both(side, topic, 6, "aborted.at_marker")
    _describe_producers(side, topic, "producers.aborted")
    # Markers as kafka-transactions.sh abort sends them: a negative epoch fails the request,
    # a marker below the producer's epoch or coordinator epoch is refused, a retry passes.
    for version, marker_epoch, coord, step in (
        (1, -1, 0, "marker.v1.negative_epoch"),
        (2, epoch + 1, 1000, "marker.v2.newer_epoch"),
        (1, epoch, 1000, "marker.v1.stale_epoch"),
        (2, epoch, 1000, "marker.v2.stale_epoch"),
        (2, epoch + 1, 999, "marker.v2.old_coordinator_epoch"),
        (1, epoch + 1, 1000, "marker.v1.retry"),
    ):
        _marker(side, topic, pid, marker_epoch, coord, version, step)
    _fetch_both(side, topic, 0, "after_admin_markers")


def _marker(
    side: Side, topic: str, pid: int, epoch: int, coordinator_epoch: int, version: int, step: str
) -> None:
    side.call(
        WRITE_TXN_MARKERS,
        version,
        write_txn_markers.Request(
            markers=[
                write_txn_markers.WritableTxnMarker(
                    producer_id=pid,
                    producer_epoch=epoch,
                    transaction_result=False,
                    topics=[
                        write_txn_markers.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])
                    ],
                    coordinator_epoch=coordinator_epoch,
                )
            ]
        ),
        step=step,
    )


def tv2_first_sequence_scenario(side: Side) -> None:
    """Produce v12 (TV2: the leader adds the partition itself) from a producer with no state
    on the partition: a first sequence other than 0 is refused (the partition is in the
    transaction by then), 0 is appended; the commit marks it."""
    txn = side.name("seq0")
    topic = side.name("txn-seq0")
    _topic_ready(side, topic, 1)
    _ready(side, txn)
    init = _init(side, txn, 4, "init")
    pid, epoch = init.producer_id, init.producer_epoch
    _txn_produce(side, topic, txn, _txn_batch(1, pid, epoch, 5, "x"), 12, "produce.v12.seq5")
    _txn_produce(side, topic, txn, _txn_batch(2, pid, epoch, 0, "t"), 12, "produce.v12.seq0")
    _describe_producers(side, topic, "producers.open")
    _end(side, txn, pid, epoch, True, 5, "commit")
    _settle(side, txn, "CompleteCommit")
    _fetch_both(side, topic, 0, "committed")


def test_tv2_first_sequence_must_be_0(diff: Runner) -> None:
    diff(tv2_first_sequence_scenario)


def test_fetch_and_list_offsets_around_a_transaction(diff: Runner) -> None:
    diff(open_then_aborted_scenario)
