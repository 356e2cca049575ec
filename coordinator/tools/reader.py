"""Reading one partition's records with Fetch, as a read_committed consumer sees them.

How this works: ``PartitionReader`` sends Fetch (v4-12: topics by name) to the partition's
leader with ``isolation_level=1`` and decodes the batches of the answer with
``storage.record_batch``. Control batches are left out, and so are the batches of aborted
transactions: the answer lists each aborted transaction's producer id and first offset,
a producer's batches from that offset on are skipped until its abort marker, as Kafka's
consumer does. What comes back is the data records in offset order, with the offset to
fetch next (after the last batch of the answer, control or aborted ones included).
"""

from __future__ import annotations

from coordinator.tools.admin import EARLIEST, LATEST, Admin, AdminError, check
from coordinator.tools.translate import Rec
from protocol.messages import fetch
from storage.record_batch import (
    ATTR_LOG_APPEND_TIME,
    CorruptBatchError,
    UnsupportedCompressionError,
    decode_records,
    iter_batches,
)

__all__ = ["PartitionReader"]

MAX_FETCH_VERSION = 12  # topics by name; later versions address them by id
PARTITION_MAX_BYTES = 1 << 20
READ_COMMITTED = 1


class PartitionReader:
    """Reads ``topic``-``partition`` from its leader on the cluster ``admin`` talks to."""

    def __init__(self, admin: Admin, topic: str, partition: int) -> None:
        self.admin = admin
        self.topic = topic
        self.partition = partition
        leaders = admin.partitions(topic)
        if partition not in leaders:
            raise AdminError(f"topic {topic!r} has no partition {partition}")
        self.leader = admin.broker_addr(leaders[partition])

    def bounds(self) -> tuple[int, int]:
        """The log start offset and the log end offset (high watermark)."""
        tp = (self.topic, self.partition)
        return (
            self.admin.log_offsets([tp], EARLIEST)[tp],
            self.admin.log_offsets([tp], LATEST)[tp],
        )

    def offset_for_time(self, timestamp: int) -> int:
        """The first offset whose timestamp is at or after ``timestamp``; -1 if none is."""
        tp = (self.topic, self.partition)
        return self.admin.log_offsets([tp], timestamp)[tp]

    def read(self, offset: int) -> tuple[list[Rec], int]:
        """The data records from ``offset`` that one Fetch returns, and the next offset."""
        req = fetch.Request(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            isolation_level=READ_COMMITTED,
            topics=[
                fetch.FetchTopic(
                    topic=self.topic,
                    partitions=[
                        fetch.FetchPartition(
                            partition=self.partition,
                            fetch_offset=offset,
                            partition_max_bytes=PARTITION_MAX_BYTES,
                        )
                    ],
                )
            ],
        )
        _, resp = self.admin.call(
            fetch.API_KEY, req, addr=self.leader, max_version=MAX_FETCH_VERSION
        )
        check(resp.error_code, f"Fetch for {self.topic}-{self.partition}")
        p = resp.responses[0].partitions[0]
        check(p.error_code, f"Fetch for {self.topic}-{self.partition} at offset {offset}")
        return self._decode(p, offset)

    def _decode(self, p: fetch.PartitionData, offset: int) -> tuple[list[Rec], int]:
        aborted = sorted((a.first_offset, a.producer_id) for a in (p.aborted_transactions or []))
        open_aborts: set[int] = set()
        out: list[Rec] = []
        nxt = offset
        data = p.records or b""
        try:
            for h, start, end in iter_batches(data):
                while aborted and aborted[0][0] <= h.last_offset:
                    open_aborts.add(aborted.pop(0)[1])
                nxt = max(nxt, h.next_offset)
                if h.is_control:
                    open_aborts.discard(h.producer_id)
                    continue
                if h.is_transactional and h.producer_id in open_aborts:
                    continue
                # LogAppendTime: every record has the time the broker wrote the batch
                logged = h.attributes & ATTR_LOG_APPEND_TIME
                for r in decode_records(data[start:end]):
                    if h.base_offset + r.offset_delta >= offset:
                        out.append(
                            Rec(
                                h.base_offset + r.offset_delta,
                                h.max_timestamp if logged else h.base_timestamp + r.timestamp_delta,
                                r.key,
                                r.value,
                                r.headers,
                            )
                        )
        except (CorruptBatchError, UnsupportedCompressionError) as exc:
            raise AdminError(
                f"cannot read {self.topic}-{self.partition} at offset {offset}: {exc}"
            ) from None
        if nxt == offset and offset < p.high_watermark:
            raise AdminError(
                f"Fetch for {self.topic}-{self.partition} at offset {offset} returned no whole "
                f"batch (one larger than {PARTITION_MAX_BYTES} bytes?)"
            )
        return out, nxt
