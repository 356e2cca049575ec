"""A partition's transactions: open ones, the last stable offset, the aborted-transaction index.

How this works
--------------
Kafka's ProducerStateManager keeps, beside each producer's sequences, the transactions of a
partition; ``PartitionTxns`` is that part, owned by the partition's ``PartitionProducers``:

* **ongoing**: producer id -> first offset of its open transaction here. The first
  transactional batch of a producer with no open transaction opens one; its COMMIT/ABORT
  marker (a control batch) closes it. Batches arrive in offset order, so the dict's
  insertion order is first-offset order and its first value is the first unstable offset.
* **unreplicated**: transactions closed by a marker that is not yet below the high
  watermark (here: not yet durable). They still pin the LSO, as Kafka's
  ``unreplicatedTxns`` do, so a read_committed consumer never sees data whose marker a
  crash could take back.
* **LSO** = the smallest first offset of those two (the first unstable offset, raised to the
  log start), else the high watermark. One open transaction pins the LSO for every producer.
* **aborted**: Kafka's ``.txnindex`` entries (producer id, first offset, marker offset, the
  LSO right after the abort), in marker order; written when an ABORT marker closes a
  non-empty transaction. A read_committed Fetch gets ``aborted_between`` (Kafka's
  ``TransactionIndex.collectAbortedTxns``) for the range it returns.
* **verifying**: KIP-890 part 1's verification guards. Before a transactional batch may open
  a transaction here, the transaction coordinator is asked whether the partition belongs
  to the producer's ongoing transaction; the guard taken before that question must still
  be the producer's current one when the batch is appended. A marker or the opening append
  clears it, so a stale "yes" (the marker landed while the answer travelled) cannot open a
  hanging transaction.

Everything here is rebuilt from the log (control batches and transactional batch headers)
when a partition is opened or taken over; nothing is stored beside the log.

Control records (Kafka's EndTransactionMarker): key = int16 version 0, int16 type (0 ABORT,
1 COMMIT); value = int16 version 0, int32 coordinator epoch; one record per control batch,
attributes TRANSACTIONAL|CONTROL, base sequence -1.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from dataclasses import dataclass, field

from storage.record_batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    CorruptBatchError,
    UnsupportedCompressionError,
    encode_batch,
    key_values,
)

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    commit: bool
    coordinator_epoch: int


def marker_batch(
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    timestamp_ms: int,
    leader_epoch: int = -1,
) -> bytes:
    """Kafka's ``MemoryRecords.withEndTransactionMarker``: one control record."""
    key = _KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _VALUE.pack(0, coordinator_epoch)
    return encode_batch(
        0,
        [(key, value)],
        timestamp_ms=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        partition_leader_epoch=leader_epoch,
        attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL,
    )


def parse_marker(batch: bytes) -> EndTxnMarker | None:
    """The end-transaction marker in a control batch; None for another control type (or an
    empty batch the cleaner left), as Kafka skips those."""
    try:
        pairs = key_values(batch)
    except (CorruptBatchError, UnsupportedCompressionError):
        return None
    if not pairs:
        return None
    key, value = pairs[0]
    if key is None or len(key) < _KEY.size:
        return None
    _version, kind = _KEY.unpack_from(key)
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    epoch = _VALUE.unpack_from(value)[1] if value is not None and len(value) >= _VALUE.size else -1
    return EndTxnMarker(kind == CONTROL_COMMIT, epoch)


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One entry of the aborted-transaction index (Kafka's ``AbortedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int


def _last_offset(a: AbortedTxn) -> int:
    return a.last_offset


class VerificationGuard:
    """A token: the producer's append must present the one taken before verification.

    It also keeps the lowest first sequence asked about at its epoch (Kafka's
    VerificationStateEntry): a later batch may not open the transaction before it.
    ``supports_epoch_bump``: taken by a TV2 request (Produce v12+), fixed at creation as
    Kafka's; a producer with no state here must then start at sequence 0.
    """

    __slots__ = ("epoch", "lowest_sequence", "supports_epoch_bump", "taken_ms")

    def __init__(
        self, epoch: int, lowest_sequence: int, taken_ms: int, supports_epoch_bump: bool = False
    ) -> None:
        self.epoch = epoch
        self.lowest_sequence = lowest_sequence
        self.taken_ms = taken_ms
        self.supports_epoch_bump = supports_epoch_bump


@dataclass(slots=True)
class PartitionTxns:
    ongoing: dict[int, int] = field(default_factory=dict)
    unreplicated: list[tuple[int, int]] = field(default_factory=list)  # (first, marker)
    aborted: list[AbortedTxn] = field(default_factory=list)
    verifying: dict[int, VerificationGuard] = field(default_factory=dict)

    def guard(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        now_ms: int,
        supports_epoch_bump: bool = False,
    ) -> VerificationGuard:
        """The producer's guard, taken (or updated) before asking the coordinator."""
        g = self.verifying.get(producer_id)
        if g is None:
            g = self.verifying[producer_id] = VerificationGuard(
                epoch, base_sequence, now_ms, supports_epoch_bump
            )
        elif epoch > g.epoch:
            g.epoch, g.lowest_sequence = epoch, base_sequence
        elif epoch == g.epoch:
            g.lowest_sequence = min(g.lowest_sequence, base_sequence)
        return g

    def begin(self, producer_id: int, first_offset: int) -> None:
        self.ongoing[producer_id] = first_offset
        self.verifying.pop(producer_id, None)

    def complete(
        self, producer_id: int, first_offset: int, marker_offset: int, abort: bool
    ) -> None:
        """A marker at ``marker_offset`` closed the producer's transaction from ``first_offset``."""
        self.ongoing.pop(producer_id, None)
        self.unreplicated.append((first_offset, marker_offset))
        if abort:
            # Kafka's lastStableOffset(CompletedTxn): the first other open transaction.
            nxt = next(iter(self.ongoing.values()), marker_offset + 1)
            self.aborted.append(AbortedTxn(producer_id, first_offset, marker_offset, nxt))

    def first_unstable_offset(self, high_watermark: int, log_start: int) -> int | None:
        if self.unreplicated and self.unreplicated[0][1] < high_watermark:
            self.unreplicated = [u for u in self.unreplicated if u[1] >= high_watermark]
        candidates = [first for first, _ in self.unreplicated]
        if self.ongoing:
            candidates.append(next(iter(self.ongoing.values())))
        if not candidates:
            return None
        return max(min(candidates), log_start)

    def last_stable_offset(self, high_watermark: int, log_start: int) -> int:
        fuo = self.first_unstable_offset(high_watermark, log_start)
        return high_watermark if fuo is None else min(fuo, high_watermark)

    def aborted_between(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Kafka's collectAbortedTxns over the whole index: the aborted transactions that
        overlap [fetch_offset, upper_bound), stopping at the first entry whose LSO reaches
        the bound (no later abort can overlap the range)."""
        out: list[AbortedTxn] = []
        # Entries are in marker order: those ending before the fetch offset are skipped at
        # once (their LSO is at most the fetch offset, so none of them could stop the walk).
        start = bisect.bisect_left(self.aborted, fetch_offset, key=_last_offset)
        for a in itertools.islice(self.aborted, start, None):
            if a.last_offset >= fetch_offset and a.first_offset < upper_bound:
                out.append(a)
            if a.last_stable_offset >= upper_bound:
                break
        return out

    def expire_guards(self, now_ms: int, expiration_ms: int) -> None:
        """Guards of producers that never appended expire after producer.id.expiration.ms
        (Kafka's VerificationStateEntry expiry), so refused producers leave nothing."""
        old = [pid for pid, g in self.verifying.items() if now_ms - g.taken_ms > expiration_ms]
        for pid in old:
            del self.verifying[pid]

    def forget_before(self, log_start: int) -> None:
        """Retention moved the log start: index entries wholly below it go."""
        if self.aborted and self.aborted[0].last_offset < log_start:
            self.aborted = [a for a in self.aborted if a.last_offset >= log_start]
