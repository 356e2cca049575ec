"""TxnOffsetCommit through the group runtime, verified with the transaction coordinator.

How this works (KIP-890 part 1, Kafka's CoordinatorRuntime.scheduleTransactionalWriteOperation
and AddPartitionsToTxnManager): before the group core sees a TxnOffsetCommit, the
transaction coordinator is asked whether the group's ``__consumer_offsets`` partition is
in the producer's ongoing transaction (added by AddOffsetsToTxn). The question is skipped
when that partition already has the producer's transaction open at that epoch (its
offsets were written and no marker came yet), as Kafka's log skips it for a producer with
an ongoing transaction. A refusal answers every partition the coordinator would have seen
with the translated code, in Kafka's two steps:

1. AddPartitionsToTxnManager: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH;
   TRANSACTION_ABORTABLE becomes INVALID_TXN_STATE except for v4 (the version whose
   clients handle it);
2. CoordinatorOperationExceptionHelper: NETWORK_EXCEPTION becomes
   COORDINATOR_LOAD_IN_PROGRESS; UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS and
   REQUEST_TIMED_OUT become COORDINATOR_NOT_AVAILABLE; NOT_LEADER_OR_FOLLOWER (6) and
   KAFKA_STORAGE_ERROR become NOT_COORDINATOR;

and, as for any TxnOffsetCommit error, COORDINATOR_LOAD_IN_PROGRESS is
COORDINATOR_NOT_AVAILABLE before v2. Without a verifier (no transaction coordinator on
this node) the request goes to the core unverified.

``append_with_txns`` is the runtime's append of a turn's records when transactional
Results are among them: each of those is its producer's own batch (a control batch for a
marker), the plain records between them batched as usual, all in order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from coordinator.group.offsets.txn import txn_response
from coordinator.group.shard import GroupShard
from coordinator.group.types import Result, TxnBatch
from coordinator.server.handler import ClientInfo, Deferred, HandlerResult
from coordinator.txn.verify import AddFn
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
from storage.interface import LogConfig, PartitionLog
from storage.record_batch import ATTR_CONTROL, ATTR_TRANSACTIONAL
from storage.records import OFFSETS_TOPIC

__all__ = ["Verifier", "append_with_txns", "txn_offset_commit", "verification_error"]

log = logging.getLogger("kgc.groups")


class Verifier(Protocol):
    """What ``coordinator.txn.verify.TxnVerifier`` offers (KIP-890 part 1)."""

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]: ...


@runtime_checkable
class AddingVerifier(Verifier, Protocol):
    """A verifier that can also add (TV2): ``CoordinatorVerifier`` in one process,
    ``cluster.txn_channel.RoutedVerifier`` across nodes; ``add_fn`` None: no TV2."""

    add_fn: AddFn | None

    async def add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[tuple[str, int]],
    ) -> ErrorCode: ...


class GroupRuntime(Protocol):
    """The part of ``group_runtime.GroupRuntime`` this module uses."""

    shard: GroupShard
    txn_verifier: Verifier | None
    txn_guards: dict[tuple[int, int], object]

    def call(
        self, method: Callable[..., Result], header: RequestHeader, body: Any, client: ClientInfo
    ) -> Any: ...


_HELPER = {
    ErrorCode.NETWORK_EXCEPTION: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_FOR_PARTITION: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}


def verification_error(code: ErrorCode, api_version: int) -> ErrorCode:
    """The TxnOffsetCommit answer to the transaction coordinator's refusal ``code``."""
    if code == ErrorCode.PRODUCER_FENCED:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    elif code == ErrorCode.TRANSACTION_ABORTABLE and api_version != 4:
        code = ErrorCode.INVALID_TXN_STATE
    code = _HELPER.get(code, code)
    if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and api_version < 2:
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    return code


def txn_offset_commit(
    rt: GroupRuntime, header: RequestHeader, body: TxnOffsetCommitRequest, client: ClientInfo
) -> HandlerResult:
    """The TxnOffsetCommit handler: verified first when it must be, then the group core."""
    verifier = rt.txn_verifier
    if verifier is None or not body.group_id:
        return rt.call(rt.shard.txn_offset_commit, header, body, client)  # type: ignore[no-any-return]
    offsets = rt.shard.offset_manager
    partition = rt.shard.partition_of(body.group_id)
    if offsets.txn_open(partition, body.producer_id, body.producer_epoch) or all(
        offsets.unknown_partition(t.name, p.partition_index)
        for t in body.topics
        for p in t.partitions
    ):
        return rt.call(rt.shard.txn_offset_commit, header, body, client)  # type: ignore[no-any-return]
    return Deferred.task(_verified(rt, verifier, partition, header, body, client))


async def _verified(
    rt: GroupRuntime,
    verifier: Verifier,
    partition: int,
    header: RequestHeader,
    body: TxnOffsetCommitRequest,
    client: ClientInfo,
) -> Any:
    tp = (OFFSETS_TOPIC, partition)
    key = (partition, body.producer_id)
    guard = rt.txn_guards.setdefault(key, object())
    try:
        if (
            header.api_version >= 5
            and isinstance(verifier, AddingVerifier)
            and verifier.add_fn is not None
        ):
            # TV2: the group coordinator adds the partition itself (no AddOffsetsToTxn),
            # through the transaction coordinator wherever it runs.
            added = await verifier.add(
                body.transactional_id, body.producer_id, body.producer_epoch, [tp]
            )
            codes = {tp: added}
        else:
            codes = await verifier.verify(
                body.transactional_id, body.producer_id, body.producer_epoch, [tp]
            )
    except Exception:
        # A failure of ours: Kafka's coordinator answers an unexpected exception
        # UNKNOWN_SERVER_ERROR; nothing was written and the connection stays.
        log.exception("verifying TxnOffsetCommit of %r failed", body.transactional_id)
        return _refused(rt, body, ErrorCode.UNKNOWN)
    finally:
        cleared = rt.txn_guards.get(key) is not guard
        if not cleared:
            del rt.txn_guards[key]
    code = codes.get(tp, ErrorCode.NO_ERROR)
    if code != ErrorCode.NO_ERROR:
        return _refused(rt, body, verification_error(code, header.api_version))
    if cleared:
        # A marker for the producer landed while the answer travelled (the coordinator on
        # another node): Kafka's log refuses the append whose guard is gone.
        return _refused(rt, body, ErrorCode.INVALID_TXN_STATE)
    # No await from here on: the core sees the request in this step of the loop.
    result = rt.call(rt.shard.txn_offset_commit, header, body, client)
    return await result if isinstance(result, Deferred) else result


def _refused(rt: GroupRuntime, body: TxnOffsetCommitRequest, code: ErrorCode) -> Any:
    """``code`` for every partition but those answered before the coordinator."""
    unknown = rt.shard.offset_manager.unknown_partition
    codes = {
        (i, p.partition_index): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for i, t in enumerate(body.topics)
        for p in t.partitions
        if unknown(t.name, p.partition_index)
    }
    return txn_response(body, codes, code)


# The runtime's cut of plain records into batches: (records, Result ends, config) -> batches.
Batcher = Callable[
    [list[tuple[bytes, bytes | None]], list[tuple[int, int]], LogConfig],
    Iterator[list[tuple[bytes, bytes | None]]],
]


def append_with_txns(
    plog: PartitionLog,
    records: list[tuple[bytes, bytes | None]],
    cuts: list[tuple[int, int]],
    txns: list[tuple[int, int, TxnBatch]],
    now: int,
    epoch: int,
    batches: Batcher,
) -> int:
    """Append a turn's records that hold transactional Results, in order: the plain ones
    between them batched as usual, each transactional one as its producer's batch (a
    control batch for a marker; ``batches`` cuts the plain ones under max.message.bytes).
    Returns the last offset written."""
    last = -1
    pos = 0
    size = len(records)
    for start, end, txn in [*txns, (size, size, None)]:
        if pos < start:
            part = [(e - pos, n) for e, n in cuts if pos < e <= start]
            for chunk in batches(records[pos:start], part, plog.config):
                _, last = plog.append_records(chunk, timestamp_ms=now, partition_leader_epoch=epoch)
        if txn is not None:
            _, last = plog.append_records(
                records[start:end],
                timestamp_ms=now,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                # Kafka's coordinator writes its transactional batches at sequence 0.
                base_sequence=-1 if txn.control else 0,
                attributes=ATTR_TRANSACTIONAL | (ATTR_CONTROL if txn.control else 0),
                partition_leader_epoch=epoch,
            )
        pos = end
    return last
