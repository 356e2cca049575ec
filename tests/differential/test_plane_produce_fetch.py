"""The data plane, Kafka vs kgc: Produce (acks, versions, refusals, the idempotent producer's
sequence checks), Fetch (versions, offsets out of range, isolation levels, byte limits,
unknown topics and ids) and ListOffsets (earliest, latest, max timestamp, by timestamp).

Batches are built with fixed timestamps, so the fetched batches compare field by field
(diffkit decodes them); producer ids are normalised.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from support.diffkit import Runner, Side
from support.diffplanekit import TS
from support.diffplanekit import batch as _batch
from support.diffplanekit import list_request as _list
from support.diffplanekit import produce_request as _produce
from support.diffplanekit import topic_ready as _ready

from protocol.messages import fetch, init_producer_id, metadata

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

PRODUCE, FETCH, LIST_OFFSETS, METADATA, INIT_PRODUCER_ID = 0, 1, 2, 3, 22


def _corrupt_crc(batch: bytes) -> bytes:
    b = bytearray(batch)
    b[-1] ^= 0xFF  # the last record's last byte: the CRC no longer matches
    return bytes(b)


def _with_count(batch: bytes, count: int) -> bytes:
    """The batch claiming ``count`` records (its CRC recomputed, so only the count lies)."""
    from storage.record_batch import _crc  # the codec's CRC-32C

    b = bytearray(batch)
    b[57:61] = count.to_bytes(4, "big")
    b[17:21] = _crc(memoryview(b)[21:]).to_bytes(4, "big")
    return bytes(b)


def _wait_latest(side: Side, topic: str, partition: int, offset: int) -> None:
    deadline = time.monotonic() + side.timeout
    while time.monotonic() < deadline:
        _, resp = side.untimed().request(LIST_OFFSETS, _list(topic, (partition, -1)), version=7)
        if resp.topics[0].partitions[0].offset >= offset:
            return
        time.sleep(0.02)
    raise AssertionError(f"{side.label}: {topic}-{partition} never reached offset {offset}")


def _sorted_offsets(resp: Any) -> Any:
    """ListOffsets answers partitions in Kafka's hash-map order: compared sorted."""
    for t in getattr(resp, "topics", []):
        t.partitions.sort(key=lambda p: p.partition_index)
    return resp


def produce_scenario(side: Side) -> None:
    topic = side.name("prod")
    _ready(side, topic, 2)
    for v, acks in ((3, 1), (5, -1), (7, 1), (8, -1), (9, -1), (11, 1), (12, -1)):
        side.call(
            PRODUCE, v, _produce(topic, _batch(2, tag=f"v{v}-")), step=f"produce.v{v}.acks{acks}"
        )
    # acks=0: no answer. What it wrote is compared once visible: kgc shows records once
    # durable, a few ms after an unanswered write (argued in known_differences.toml).
    m = side.member("acks0")
    m.conn.send(PRODUCE, 9, _produce(topic, _batch(3, tag="zero"), partition=1, acks=0))
    _wait_latest(side, topic, 1, 3)
    m.call(LIST_OFFSETS, 7, _list(topic, (1, -1)), step="produce.acks0_then_latest")
    for label, req in (("bad_acks", _produce(topic, _batch(1), acks=2)),):
        side.call(PRODUCE, 9, req, step=f"produce.{label}")
    # The future: its message names the broker's clock, masked here.
    resp = side.call(
        PRODUCE,
        9,
        _produce(topic, _batch(1, ts=int(time.time() * 1000) + 86_400_000)),
        step="produce.future_timestamp",
    )
    for e in resp.responses[0].partition_responses[0].record_errors:
        e.batch_index_error_message = re.sub(r"-?\d+", "<n>", e.batch_index_error_message or "")
    _sorted_offsets(
        side.call(LIST_OFFSETS, 7, _list(topic, (0, -1), (1, -1)), step="produce.offsets_after")
    )


def produce_refusals_kgc_explains(side: Side) -> None:
    """Refused batches: the same codes; kgc also says why in error_message, where Kafka 4.4
    leaves it null (argued in known_differences.toml)."""
    topic = side.name("prod-bad")
    _ready(side, topic, 1)
    for label, req in (
        ("unknown_topic", _produce(side.name("prod-none"), _batch(1))),
        ("unknown_partition", _produce(topic, _batch(1), partition=7)),
        ("negative_partition", _produce(topic, _batch(1), partition=-1)),
        ("invalid_topic_name", _produce("bad/name", _batch(1))),
        ("corrupt_crc", _produce(topic, _corrupt_crc(_batch(2)))),
        ("count_mismatch", _produce(topic, _with_count(_batch(2), 3))),
        ("empty_records", _produce(topic, b"")),
        ("truncated_batch", _produce(topic, _batch(2)[:40])),
        ("too_large", _produce(topic, _batch(1, tag="x" * 1_100_000))),
    ):
        side.call(PRODUCE, 9, req, step=f"produce.{label}")
    side.call(LIST_OFFSETS, 7, _list(topic, (0, -1)), step="produce.nothing_written")


def idempotent_scenario(side: Side) -> None:
    topic = side.name("idem")
    _ready(side, topic, 1)
    # Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its producer id manager is ready.
    deadline = time.monotonic() + side.timeout
    while time.monotonic() < deadline:
        _, ready = side.untimed().request(
            INIT_PRODUCER_ID,
            init_producer_id.InitProducerIdRequest(
                transactional_id=None, transaction_timeout_ms=60000
            ),
            version=4,
        )
        if ready.error_code == 0:
            break
        time.sleep(0.1)
    init = side.call(
        INIT_PRODUCER_ID,
        4,
        init_producer_id.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000),
        step="idempotent.init",
    )
    pid, epoch = init.producer_id, init.producer_epoch

    def send(label: str, seq: int, n: int = 3, *, p: int = pid, e: int = epoch) -> Any:
        return side.call(
            PRODUCE,
            9,
            _produce(topic, _batch(n, pid=p, epoch=e, seq=seq, tag=label)),
            step=f"idempotent.{label}",
        )

    send("first", 0)
    send("duplicate_of_first", 0)
    send("next", 3)
    send("duplicate_of_next", 3)
    send("gap", 10)
    send("older_than_last", 1)
    send("after_gap_refused", 6)
    send("stale_epoch", 9, e=epoch - 1 if epoch > 0 else -2)
    send("unknown_producer_nonzero_seq", 5, p=pid + 1000)
    send("unknown_producer_seq0", 0, p=pid + 2000)
    side.call(LIST_OFFSETS, 7, _list(topic, (0, -1)), step="idempotent.offsets_after")
    side.call(
        INIT_PRODUCER_ID,
        4,
        init_producer_id.InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout_ms=60000,
            producer_id=pid,
            producer_epoch=epoch,
        ),
        step="idempotent.init_bump_epoch",
    )


def _fetch(
    topic: str,
    *parts: tuple[int, int],
    topic_id: bytes = bytes(16),
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 1024 * 1024,
    isolation: int = 0,
) -> fetch.FetchRequest:
    return fetch.FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=max_bytes,
        isolation_level=isolation,
        session_id=0,
        session_epoch=-1,  # sessionless: no fetch session id to compare
        topics=[
            fetch.FetchTopic(
                topic=topic,
                topic_id=topic_id,
                partitions=[
                    fetch.FetchPartition(
                        partition=p, fetch_offset=o, partition_max_bytes=partition_max_bytes
                    )
                    for p, o in parts
                ],
            )
        ],
    )


def fetch_scenario(side: Side) -> None:
    topic = side.name("fetch")
    _ready(side, topic, 2)
    side.untimed().request(PRODUCE, _produce(topic, _batch(3, tag="a")), version=9)
    side.untimed().request(PRODUCE, _produce(topic, _batch(2, ts=TS + 5000, tag="b")), version=9)
    _, meta = side.untimed().request(
        METADATA,
        metadata.MetadataRequest(topics=[metadata.MetadataRequestTopic(name=topic)]),
        version=12,
    )
    topic_id = meta.topics[0].topic_id
    for v in (4, 5, 7, 9, 11, 12):
        side.call(FETCH, v, _fetch(topic, (0, 0), (1, 0)), step=f"fetch.v{v}")
    for v in (13, 15, 16, 17):
        side.call(FETCH, v, _fetch("", (0, 0), topic_id=topic_id), step=f"fetch.v{v}")
    for label, req in (
        ("mid_batch", _fetch(topic, (0, 1))),
        ("at_end", _fetch(topic, (0, 5))),
        ("out_of_range", _fetch(topic, (0, 100))),
        ("negative_offset", _fetch(topic, (0, -1))),
        ("unknown_partition", _fetch(topic, (9, 0))),
        ("read_committed", _fetch(topic, (0, 0), isolation=1)),
        ("max_bytes_1", _fetch(topic, (0, 0), max_bytes=1)),
        ("partition_max_bytes_1", _fetch(topic, (0, 0), partition_max_bytes=1)),
        ("unknown_topic", _fetch(side.name("fetch-none"), (0, 0))),
    ):
        side.call(FETCH, 12, req, step=f"fetch.{label}")
    side.call(
        FETCH, 13, _fetch("", (0, 0), topic_id=b"\x09" * 16), step="fetch.v13_unknown_topic_id"
    )
    for label, parts in (
        ("earliest", [(0, -2), (1, -2)]),
        ("latest", [(0, -1), (1, -1)]),
        ("max_timestamp", [(0, -3), (1, -3)]),
        ("by_timestamp_first", [(0, TS)]),
        ("by_timestamp_between", [(0, TS + 1)]),
        ("by_timestamp_second", [(0, TS + 5000)]),
        ("by_timestamp_after_all", [(0, TS + 10_000)]),
        ("earliest_local", [(0, -4)]),
        ("unknown_partition", [(9, -1)]),
    ):
        _sorted_offsets(
            side.call(LIST_OFFSETS, 8, _list(topic, *parts), step=f"list_offsets.{label}")
        )
    for v in (1, 2, 4, 6, 7, 9):
        side.call(LIST_OFFSETS, v, _list(topic, (0, -1)), step=f"list_offsets.v{v}")
    side.call(
        LIST_OFFSETS, 7, _list(side.name("lo-none"), (0, -1)), step="list_offsets.unknown_topic"
    )


def test_produce(diff: Runner) -> None:
    outcome = diff(produce_scenario)
    assert outcome.kafka.exchanges[0].response.responses[0].partition_responses[0].error_code == 0
    diff(produce_refusals_kgc_explains)


def test_idempotent_produce(diff: Runner) -> None:
    diff(idempotent_scenario)


def test_fetch_and_list_offsets(diff: Runner) -> None:
    diff(fetch_scenario)
