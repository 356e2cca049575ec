"""A flipped byte in an older topic segment stays inside its partition.

A real ``kgc serve`` holds a topic of three partitions with small segments. It stops
cleanly, one byte inside a batch of partition 1's oldest segment is flipped, and the clean-
shutdown marker is kept (the segment is trusted at open) or removed (recovery re-reads only
from the recovery point, so the older segment is still not re-read). After the restart:

* partitions 0 and 2 serve every record, and take new ones;
* partition 1 answers Fetch (from any offset) and Produce with KAFKA_STORAGE_ERROR, as
  Kafka answers for a partition whose log directory went offline after a storage error:
  serving around a hole would hand consumers a log with records silently missing, and a
  consumer cannot tell where the damage is;
* the corrupt bytes are never served, one ERROR line names the file and the position, and
  the node stays up.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from support.faultkit import report
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import create_topics, fetch
from storage.local.log import CLEAN_SHUTDOWN_FILE
from storage.record_batch import iter_batches, iter_record_tuples

pytestmark = pytest.mark.integration

TOPIC = "rot"
PARTITIONS = 3
PER_PARTITION = 40
DAMAGED = 1


def create_topic(bootstrap: str) -> None:
    with Connection.to(bootstrap) as c:
        topic = create_topics.CreatableTopic(
            name=TOPIC, num_partitions=PARTITIONS, replication_factor=1
        )
        topic.configs = [create_topics.CreatableTopicConfig(name="segment.bytes", value="1024")]
        _, resp = c.request(create_topics.API_KEY, create_topics.Request(topics=[topic]))
        assert resp.topics[0].error_code == 0, resp


def fetch_once(conn: Connection, partition: int, offset: int) -> tuple[int, int, bytes]:
    """(error code, high watermark, records) of one Fetch of one partition."""
    _, resp = conn.request(
        fetch.API_KEY,
        fetch.Request(
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 20,
            session_id=0,
            session_epoch=-1,
            topics=[
                fetch.FetchTopic(
                    topic=TOPIC,
                    partitions=[
                        fetch.FetchPartition(
                            partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20
                        )
                    ],
                )
            ],
        ),
        version=12,
    )
    pd = resp.responses[0].partitions[0]
    return int(pd.error_code), int(pd.high_watermark), bytes(pd.records or b"")


def read_partition(conn: Connection, partition: int) -> list[bytes | None]:
    out: list[bytes | None] = []
    offset = 0
    while True:
        code, hw, records = fetch_once(conn, partition, offset)
        assert code == 0, (partition, offset, code)
        if offset >= hw:
            return out
        for h, start, end in iter_batches(records):
            for off, _ts, _k, v in iter_record_tuples(records[start:end]):
                if off >= offset:
                    out.append(v)
                    offset = off + 1
            offset = max(offset, h.next_offset)


def produce(bootstrap: str, partition: int, values: list[bytes]) -> list[str | None]:
    errors: list[str | None] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "retries": 0})
    for v in values:
        p.produce(
            TOPIC,
            value=v,
            partition=partition,
            on_delivery=lambda err, _m: errors.append(None if err is None else err.name()),
        )
        p.flush(30)
    return errors


def flip_a_byte(seg: Path) -> int:
    buf = bytearray(seg.read_bytes())
    batches = list(iter_batches(bytes(buf)))
    assert len(batches) >= 3, f"{seg} holds {len(batches)} batches"
    _h, start, end = batches[1]
    pos = end - 3  # inside the record bytes of the second batch (covered by its CRC)
    buf[pos] ^= 0x40
    seg.write_bytes(bytes(buf))
    return start


@pytest.mark.parametrize("marker", [True, False], ids=["marker", "no-marker"])
def test_flipped_byte_in_an_older_topic_segment(tmp_path: Path, marker: bool) -> None:
    data = tmp_path / "data"
    kgc = KgcProcess(data)
    kgc.start()
    try:
        create_topic(kgc.bootstrap)
        vals = {
            p: [b"p%d-%03d-" % (p, i) + b"." * 60 for i in range(PER_PARTITION)] for p in range(3)
        }
        for p, vs in vals.items():
            assert produce(kgc.bootstrap, p, vs) == [None] * len(vs)
        assert kgc.stop() == 0
        pdir = data / f"{TOPIC}-{DAMAGED}"
        segs = sorted(pdir.glob("*.log"))
        assert len(segs) >= 3, segs
        bad_pos = flip_a_byte(segs[0])
        if not marker:
            (pdir / CLEAN_SHUTDOWN_FILE).unlink()
        mark = len(kgc.log_path.read_bytes())
        kgc.start()
        with Connection.to(kgc.bootstrap) as conn:
            for p in (0, 2):
                assert read_partition(conn, p) == vals[p]
            for offset in (0, PER_PARTITION - 1):
                code, _hw, records = fetch_once(conn, DAMAGED, offset)
                assert code == ErrorCode.KAFKA_STORAGE_ERROR, (offset, code)
                assert records == b""
        assert produce(kgc.bootstrap, DAMAGED, [b"more"]) == ["KAFKA_STORAGE_ERROR"]
        assert produce(kgc.bootstrap, 0, [b"more"]) == [None]
        with Connection.to(kgc.bootstrap) as conn:
            assert read_partition(conn, 0) == [*vals[0], b"more"]
        assert kgc.alive()
        text = kgc.log_path.read_bytes()[mark:].decode(errors="replace")
        errors = [line for line in text.splitlines() if " ERROR " in line and segs[0].name in line]
        assert len(errors) == 1, text
        assert f"position {bad_pos}" in errors[0], errors
        assert "Traceback" not in text, text
    finally:
        if kgc.alive():
            kgc.stop()
    report(
        f"flipped byte in an older topic segment ({'marker' if marker else 'no marker'})",
        injected=f"one bit flipped in batch 2 of {segs[0].name} of {TOPIC}-{DAMAGED}",
        verified="partitions 0 and 2 serve all and take produce; partition 1 answers "
        "KAFKA_STORAGE_ERROR to Fetch and Produce; one ERROR line with file and position",
    )
