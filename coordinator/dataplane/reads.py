"""Reading for Fetch: how many bytes each partition may return, and batch validation.

How this works: a Fetch asks for several partitions with a byte limit each
(``partition_max_bytes``) and one for the whole response (``max_bytes``). As Kafka's
ReplicaManager.readFromLog does for v3+ requests, partitions are read in request order, each
with ``min(partition_max_bytes, what is left of max_bytes)``; the first partition that returns
data may return one whole batch larger than its limit (so a consumer can always make
progress), every later one only whole batches that fit. The log hands back whole batches,
never a torn one, so "does not fit" means "nothing from this partition this time".

``fill`` reads every partition of a Fetch (``FetchPlan``) up to its ``high_watermark``
(read_uncommitted) or its last stable offset (read_committed, with the aborted transactions
overlapping what it returns: Kafka's UnifiedLog.read with TXN_COMMITTED; aborted and control
batches are returned, clients drop them), each partition's error set as Kafka answers it (out
of range, damaged, unreadable); a long-polling Fetch calls it again on every wake-up. ``offset_for`` answers a ListOffsets query from a log. ``validate_produced`` is the per-partition check a Produce v3+ payload must pass before it is
appended: exactly one magic-2 batch, base offset 0, CRC, size, record count, no control
batch. It returns the parsed header or the Kafka error code with Kafka's message.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator.dataplane import legacy
from coordinator.dataplane.transactions import PartitionTxns
from protocol.errors import ErrorCode
from protocol.messages.fetch import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchRequest,
    PartitionData,
)
from storage.interface import CorruptLogError, PartitionLog
from storage.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptBatchError,
    iter_batches,
    parse_header,
    verify_crc,
)

_LENGTH = struct.Struct(">i")
ZSTD = 4
READ_COMMITTED = 1

log = logging.getLogger("kgc.data")

# ListOffsets' special timestamps.
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6


class ReadBudget:
    """Byte accounting across the partitions of one Fetch request."""

    __slots__ = ("min_one", "remaining")

    def __init__(self, max_bytes: int) -> None:
        self.remaining = max(max_bytes, 0)
        self.min_one = True

    def read(self, partition_max_bytes: int, reader: Callable[[int], bytes]) -> bytes:
        """Call ``reader(limit)`` (returns whole batches, at least one) and trim to the budget."""
        limit = min(max(partition_max_bytes, 0), self.remaining)
        if limit <= 0 and not self.min_one:
            return b""
        data = reader(limit)
        if not data:
            return b""
        if len(data) > limit:
            if not self.min_one:
                return b""
            # Keep only the first batch: the one the consumer needs to make progress.
            (length,) = _LENGTH.unpack_from(data, 8)
            data = data[: LOG_OVERHEAD + length]
        self.min_one = False
        self.remaining = max(0, self.remaining - len(data))
        return data


def validate_produced(
    records: bytes | None, version: int, max_message_bytes: int
) -> tuple[BatchHeader | None, int, str | None]:
    """(header, error code, error message) for one partition's Produce payload."""
    if not records or len(records) < LOG_OVERHEAD:
        return (
            None,
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} must have at least one record batch per partition",
        )
    (length,) = _LENGTH.unpack_from(records, 8)
    size = LOG_OVERHEAD + length
    if len(records) < HEADER_SIZE or length <= 0 or size > len(records):
        return (
            None,
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} must have at least one record batch per partition",
        )
    if records[16] != 2:
        return (
            None,
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain record batches with magic version 2",
        )
    if size != len(records):
        return (
            None,
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain exactly one record batch per partition",
        )
    try:
        h = parse_header(records)
    except CorruptBatchError as e:
        return None, ErrorCode.CORRUPT_MESSAGE, str(e)
    if h.compression == ZSTD and version < 7:
        return (
            None,
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {version} are not allowed to use ZStandard compression",
        )
    if h.compression > ZSTD:
        return None, ErrorCode.CORRUPT_MESSAGE, f"Unknown compression type id {h.compression}"
    if h.base_offset != 0:
        return (
            None,
            ErrorCode.INVALID_RECORD,
            f"The baseOffset of the record batch should be 0, but it is {h.base_offset}",
        )
    if size > max_message_bytes:
        return (
            None,
            ErrorCode.MESSAGE_SIZE_TOO_LARGE,
            (
                f"The record batch size is {size} bytes which exceeds the maximum configured value of {max_message_bytes}."
            ),
        )
    if not verify_crc(records, 0, size):
        return None, ErrorCode.CORRUPT_MESSAGE, f"Record batch is corrupt (stored crc = {h.crc})"
    if h.records_count <= 0 or h.last_offset_delta != h.records_count - 1:
        return (
            None,
            ErrorCode.INVALID_RECORD,
            (
                f"Inner record count {h.records_count} does not match last offset delta {h.last_offset_delta}"
            ),
        )
    if h.is_control:
        return None, ErrorCode.INVALID_RECORD, "Clients are not allowed to write control records"
    return h, ErrorCode.NO_ERROR, None


def high_watermark(plog: PartitionLog) -> int:
    """The end of what Fetch serves: with the "batch" flush policy, the durable end.

    A batch is served only once it is fsynced (as Kafka serves only up to the high
    watermark, what every in-sync replica holds), so no consumer ever reads a record that
    a failed fsync then cuts back. With "interval" / "none" the operator chose to ack
    before fsync, and the log end is served.
    """
    if plog.config.flush_policy == "batch":
        return min(plog.durable_end, plog.log_end_offset)
    return plog.log_end_offset


def last_stable_offset(plog: PartitionLog, txns: PartitionTxns | None) -> int:
    """Kafka's UnifiedLog.lastStableOffset: the first unstable offset when it is below the
    high watermark, else the high watermark."""
    hw = high_watermark(plog)
    return hw if txns is None else txns.last_stable_offset(hw, plog.log_start_offset)


def _reader(plog: PartitionLog, offset: int, high_watermark: int) -> Callable[[int], bytes]:
    return lambda limit: plog.read(offset, limit, max_offset=high_watermark)


def _next_offset(data: bytes, default: int) -> int:
    """The offset after the last whole batch of ``data``."""
    end = default
    for h, _start, _end in iter_batches(data):
        end = h.next_offset
    return end


def aborted_transactions(
    txns: PartitionTxns | None, fetch_offset: int, data: bytes
) -> list[AbortedTransaction]:
    """The aborted transactions a read_committed consumer needs for ``data`` read from
    ``fetch_offset``: those overlapping [fetch_offset, the offset after the data)."""
    if txns is None or not data or not txns.aborted:
        return []
    upper = _next_offset(data, fetch_offset)
    return [
        AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
        for a in txns.aborted_between(fetch_offset, upper)
    ]


@dataclass(slots=True)
class FetchTarget:
    """One partition of a Fetch: where to read and the response entry to fill."""

    resp: PartitionData
    log: PartitionLog | None
    fetch_offset: int = 0
    max_bytes: int = 0
    txns: Callable[[], PartitionTxns | None] = lambda: None


@dataclass(slots=True)
class FetchPlan:
    """A Fetch request and the response entries it fills, re-read on each wake-up."""

    version: int
    req: FetchRequest
    topics: list[FetchableTopicResponse] = field(default_factory=list)
    targets: list[FetchTarget] = field(default_factory=list)


def fill(plan: FetchPlan) -> tuple[int, bool]:
    """(Re)read every partition of the plan; returns (bytes returned, any partition error)."""
    budget = ReadBudget(plan.req.max_bytes)
    committed = plan.version >= 4 and plan.req.isolation_level == READ_COMMITTED
    total = 0
    errored = False
    for t in plan.targets:
        pd, plog = t.resp, t.log
        if plog is None or plog.closed:
            if plog is not None:
                pd.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            errored = True
            continue
        if plog.damaged is not None:
            # A corrupt batch was found in this partition (at open or by an earlier
            # read): like Kafka's offline log directory, it answers KAFKA_STORAGE_ERROR
            # rather than serving around a hole; other partitions are unaffected.
            pd.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            pd.high_watermark = pd.last_stable_offset = pd.log_start_offset = -1
            pd.records = b""
            errored = True
            continue
        start, end = plog.log_start_offset, plog.log_end_offset
        offset = t.fetch_offset
        if offset < start or offset > end:
            pd.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
            pd.high_watermark = pd.last_stable_offset = pd.log_start_offset = -1
            pd.records = b""
            errored = True
            continue
        hw = high_watermark(plog)
        txns = t.txns()
        lso = hw if txns is None else txns.last_stable_offset(hw, start)
        pd.error_code = ErrorCode.NO_ERROR
        pd.high_watermark, pd.last_stable_offset = hw, lso
        pd.log_start_offset = start
        limit = lso if committed else hw
        if offset >= limit:
            pd.records = b""
            if committed:
                pd.aborted_transactions = []
            continue
        try:
            # Every batch is CRC-checked on its way out (PartitionLog.read): a corrupt
            # one marks the partition damaged and is never served.
            data = budget.read(t.max_bytes, _reader(plog, offset, limit))
        except OSError as e:
            if not isinstance(e, CorruptLogError):  # that one was logged with its file
                log.error("read from %s failed: %r", plog.dir.name, e)
            pd.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            pd.high_watermark = pd.last_stable_offset = pd.log_start_offset = -1
            pd.records = b""
            errored = True
            continue
        if plan.version < 4 and data:
            # Clients before Kafka 0.11 read magic 0/1 message sets (legacy.py).
            data, code = legacy.fetch_records(data, plan.version, offset)
            if code:
                pd.error_code, pd.records = code, b""
                pd.high_watermark = pd.last_stable_offset = pd.log_start_offset = -1
                errored = True
                continue
        pd.records = data
        if committed:
            pd.aborted_transactions = aborted_transactions(txns, offset, data)
        total += len(data)
    if plan.version <= 5:
        # Kafka's maybeDownConvertStorageError: Fetch v5 and older clients may not know
        # KAFKA_STORAGE_ERROR; NOT_LEADER_OR_FOLLOWER makes them refresh and retry.
        for t in plan.targets:
            if t.resp.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
                t.resp.error_code = ErrorCode.NOT_LEADER_FOR_PARTITION
    return total, errored


def offset_for(plog: PartitionLog, timestamp: int, end: int | None = None) -> tuple[int, int]:
    """(timestamp, offset) answering a ListOffsets query; (-1, -1) when there is none.

    Like Kafka, answers stop at the last fetchable offset ``end``: the high watermark
    (read_uncommitted, the default) or the last stable offset (read_committed). "latest" is
    that offset, and a timestamp lookup that lands at or past it finds nothing, so no
    consumer is pointed at records Fetch does not serve yet.
    """
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return -1, plog.log_start_offset
    hw = high_watermark(plog) if end is None else end
    if timestamp == LATEST_TIMESTAMP:
        return -1, hw
    if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        ts, offset = plog.offset_for_max_timestamp()
    else:
        found = plog.offset_for_timestamp(timestamp)
        offset, ts = found if found is not None else (-1, -1)
    return (ts, offset) if 0 <= offset < hw else (-1, -1)
