"""The share coordinator's state, pure: records in, records out (Kafka's ShareCoordinatorShard).

How this works: one ``ShareState`` per share partition key (group id, topic id, partition),
rebuilt from ``__share_group_state`` by ``replay``: a ShareSnapshot (type 0) replaces the
key's state and sets its state and leader epochs, a ShareUpdate (type 1) is merged into it
(``combine``; start offset -1 keeps the old one), a tombstone removes the key. Every
operation first checks, then builds the one record it needs and applies it through
``replay`` itself, so what the shard holds is what its log rebuilds; the runtime writes the
record and answers once it is durable. The operations and their errors, as Kafka's shard:

* initialize: a new snapshot (snapshot epoch + 1, the request's state epoch and start
  offset, leader epoch 0, no batches; delivery complete count -1 when the start offset is
  -1, else 0); a state epoch below the stored one is FENCED_STATE_EPOCH;
* write: an uninitialized key is INVALID_REQUEST; a leader epoch (not -1) below the stored
  one FENCED_LEADER_EPOCH; a state epoch (not -1) below the stored one FENCED_STATE_EPOCH.
  After ``updates_per_snapshot`` updates since the key's last snapshot the write is a
  snapshot of the merged state (snapshot epoch + 1), otherwise an update holding only the
  request's batches;
* read: uninitialized is INVALID_REQUEST; a lower leader epoch FENCED_LEADER_EPOCH; a new
  one is recorded with a record of the same kind a write would make;
* read summary: never initialized answers -1/-1 with no error;
* delete: a tombstone, a missing key succeeds with nothing written.

Times are the caller's integer ms.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass, field

from coordinator.share.combine import combine
from coordinator.share.persister import PersisterBatch, ReadResult, WriteRequest
from protocol.errors import ErrorCode
from storage.records.errors import OffsetsFormatError, parse_body
from storage.records.messages import share_state as gen
from storage.records.offsets import java_string_hash

SHARE_STATE_TOPIC = "__share_group_state"
SNAPSHOT_TYPE = 0
UPDATE_TYPE = 1
_I16 = struct.Struct(">h")

Key = tuple[str, bytes, int]  # group id, raw topic id, partition
Record = tuple[bytes, bytes | None]


def topic_id_bytes(topic_id: str) -> bytes:
    """The 16 bytes of a topic id given in Kafka's ``Uuid.toString()`` form."""
    raw = base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a topic id: {topic_id!r}")
    return raw


def topic_id_str(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def partition_for(group_id: str, topic_id: str, partition: int, num_partitions: int) -> int:
    """Kafka's ShareCoordinatorService.partitionFor: abs(hash("g:topicId:p")) % n."""
    h = java_string_hash(f"{group_id}:{topic_id}:{partition}")
    return (0 if h == -(2**31) else abs(h)) % num_partitions


@dataclass(slots=True)
class ShareState:
    """A share partition's durable state, as the share coordinator holds it."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_timestamp: int
    write_timestamp: int
    batches: list[PersisterBatch] = field(default_factory=list)


def _snapshot_record(key: Key, s: ShareState) -> Record:
    out = bytearray(_I16.pack(SNAPSHOT_TYPE))
    gen.SHARE_SNAPSHOT_KEY_ENCODERS[0](gen.ShareSnapshotKey(*key), out)
    value = bytearray(_I16.pack(0))
    gen.SHARE_SNAPSHOT_VALUE_ENCODERS[0](
        gen.ShareSnapshotValue(
            s.snapshot_epoch,
            s.state_epoch,
            s.leader_epoch,
            s.start_offset,
            s.delivery_complete_count,
            s.create_timestamp,
            s.write_timestamp,
            [gen.StateBatch(*b) for b in s.batches],
        ),
        value,
    )
    return bytes(out), bytes(value)


def _update_record(
    key: Key,
    snapshot_epoch: int,
    leader_epoch: int,
    start_offset: int,
    delivery_complete_count: int,
    batches: list[PersisterBatch],
) -> Record:
    out = bytearray(_I16.pack(UPDATE_TYPE))
    gen.SHARE_UPDATE_KEY_ENCODERS[0](gen.ShareUpdateKey(*key), out)
    value = bytearray(_I16.pack(0))
    gen.SHARE_UPDATE_VALUE_ENCODERS[0](
        gen.ShareUpdateValue(
            snapshot_epoch,
            leader_epoch,
            start_offset,
            delivery_complete_count,
            [gen.ShareUpdateValueStateBatch(*b) for b in batches],
        ),
        value,
    )
    return bytes(out), bytes(value)


def tombstone(key: Key) -> Record:
    out = bytearray(_I16.pack(SNAPSHOT_TYPE))
    gen.SHARE_SNAPSHOT_KEY_ENCODERS[0](gen.ShareSnapshotKey(*key), out)
    return bytes(out), None


class ShareStateShard:
    """Every share partition's state in the ``__share_group_state`` partitions served here."""

    def __init__(self, updates_per_snapshot: int = 500) -> None:
        # share.coordinator.snapshot.update.records.per.snapshot
        self.updates_per_snapshot = updates_per_snapshot
        self.states: dict[Key, ShareState] = {}
        self.update_counts: dict[Key, int] = {}
        # The log offset of each key's latest snapshot: nothing of the key below it is
        # needed, so the log may be pruned below the lowest of them.
        self.snapshot_offsets: dict[Key, int] = {}

    # -- replay: the one way state changes
    def replay(self, key: bytes, value: bytes | None, offset: int = -1) -> None:
        """Apply one record of ``__share_group_state`` (at ``offset`` of its log, -1 while
        not appended yet); ``OffsetsFormatError`` if malformed."""
        if len(key) < 2:
            raise OffsetsFormatError("share state key shorter than its type")
        rtype = _I16.unpack_from(key)[0]
        if rtype == SNAPSHOT_TYPE:
            k = parse_body(
                gen.SHARE_SNAPSHOT_KEY_DECODERS[0],
                key,
                "ShareSnapshotKey",
                utf8_errors_are_corrupt=True,
            )
            mk: Key = (k.group_id, k.topic_id, k.partition)
            if value is None:
                self.states.pop(mk, None)
                self.update_counts.pop(mk, None)
                self.snapshot_offsets.pop(mk, None)
                return
            v = parse_body(
                gen.SHARE_SNAPSHOT_VALUE_DECODERS[0],
                value,
                "ShareSnapshotValue",
                utf8_errors_are_corrupt=True,
            )
            self.states[mk] = ShareState(
                v.snapshot_epoch,
                v.state_epoch,
                v.leader_epoch,
                v.start_offset,
                v.delivery_complete_count,
                v.create_timestamp,
                v.write_timestamp,
                [
                    PersisterBatch(
                        b.first_offset, b.last_offset, b.delivery_state, b.delivery_count
                    )
                    for b in v.state_batches
                ],
            )
            self.update_counts[mk] = 0
            if offset >= 0:
                self.snapshot_offsets[mk] = offset
        elif rtype == UPDATE_TYPE:
            uk = parse_body(
                gen.SHARE_UPDATE_KEY_DECODERS[0],
                key,
                "ShareUpdateKey",
                utf8_errors_are_corrupt=True,
            )
            mk = (uk.group_id, uk.topic_id, uk.partition)
            if value is None:
                return
            u = parse_body(
                gen.SHARE_UPDATE_VALUE_DECODERS[0],
                value,
                "ShareUpdateValue",
                utf8_errors_are_corrupt=True,
            )
            new = [
                PersisterBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                for b in u.state_batches
            ]
            s = self.states.get(mk)
            if s is None:
                # An update without its snapshot (pruned log): it is all there is.
                s = self.states[mk] = ShareState(
                    u.snapshot_epoch,
                    0,
                    u.leader_epoch,
                    u.start_offset,
                    u.delivery_complete_count,
                    0,
                    0,
                    [],
                )
            if u.start_offset != -1:
                s.start_offset = u.start_offset
            if u.leader_epoch != -1:
                s.leader_epoch = u.leader_epoch
            if u.delivery_complete_count != -1:
                s.delivery_complete_count = u.delivery_complete_count
            s.batches = combine(s.batches, new, s.start_offset)
            self.update_counts[mk] = self.update_counts.get(mk, 0) + 1
        else:
            raise OffsetsFormatError(f"unknown share state record type {rtype}")

    def _apply(self, record: Record) -> Record:
        self.replay(*record)
        return record

    # -- operations: check, build the record, apply it
    def initialize(
        self, key: Key, state_epoch: int, start_offset: int, now_ms: int
    ) -> tuple[ErrorCode, Record | None]:
        if key[2] < 0:
            return ErrorCode.INVALID_REQUEST, None
        s = self.states.get(key)
        if s is not None and state_epoch != -1 and state_epoch < s.state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH, None
        new = ShareState(
            s.snapshot_epoch + 1 if s is not None else 0,
            state_epoch,
            0,
            start_offset,
            -1 if start_offset == -1 else 0,
            now_ms,
            now_ms,
        )
        return ErrorCode.NO_ERROR, self._apply(_snapshot_record(key, new))

    def _state_record(
        self,
        key: Key,
        s: ShareState,
        leader_epoch: int,
        state_epoch: int,
        start_offset: int,
        dcc: int,
        batches: list[PersisterBatch],
        now_ms: int,
    ) -> Record:
        """A write's record: a snapshot once enough updates piled up, else an update."""
        if self.update_counts.get(key, 0) >= self.updates_per_snapshot:
            start = s.start_offset if start_offset == -1 else start_offset
            snap = ShareState(
                s.snapshot_epoch + 1,
                s.state_epoch if state_epoch == -1 else state_epoch,
                s.leader_epoch if leader_epoch == -1 else leader_epoch,
                start,
                s.delivery_complete_count if dcc == -1 else dcc,
                now_ms,
                now_ms,
                combine(s.batches, batches, start),
            )
            return _snapshot_record(key, snap)
        merged = combine((), batches, -1)
        return _update_record(key, s.snapshot_epoch, leader_epoch, start_offset, dcc, merged)

    def write(
        self, key: Key, request: WriteRequest, now_ms: int
    ) -> tuple[ErrorCode, Record | None]:
        if key[2] < 0:
            return ErrorCode.INVALID_REQUEST, None
        s = self.states.get(key)
        if s is None:
            return ErrorCode.INVALID_REQUEST, None
        if request.leader_epoch != -1 and request.leader_epoch < s.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, None
        if request.state_epoch != -1 and request.state_epoch < s.state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH, None
        record = self._state_record(
            key,
            s,
            request.leader_epoch,
            request.state_epoch,
            request.start_offset,
            request.delivery_complete_count,
            list(request.batches),
            now_ms,
        )
        return ErrorCode.NO_ERROR, self._apply(record)

    def read(self, key: Key, leader_epoch: int, now_ms: int) -> tuple[ReadResult, Record | None]:
        s = self.states.get(key)
        if s is None or key[2] < 0:
            return ReadResult(ErrorCode.INVALID_REQUEST, -1, -1, ()), None
        if leader_epoch != -1 and leader_epoch < s.leader_epoch:
            return ReadResult(ErrorCode.FENCED_LEADER_EPOCH, -1, -1, ()), None
        record = None
        if leader_epoch != -1 and leader_epoch != s.leader_epoch:
            record = self._apply(self._state_record(key, s, leader_epoch, -1, -1, -1, [], now_ms))
            s = self.states[key]
        return ReadResult(
            ErrorCode.NO_ERROR, s.state_epoch, s.start_offset, tuple(s.batches)
        ), record

    def read_summary(self, key: Key) -> tuple[ErrorCode, int, int, int, int]:
        """(error, state epoch, leader epoch, start offset, delivery complete count)."""
        s = self.states.get(key)
        if s is None:
            return ErrorCode.NO_ERROR, -1, -1, -1, 0
        return (
            ErrorCode.NO_ERROR,
            s.state_epoch,
            s.leader_epoch,
            s.start_offset,
            s.delivery_complete_count,
        )

    def delete(self, key: Key) -> Record | None:
        if key not in self.states:
            return None
        return self._apply(tombstone(key))

    # -- pruning (Kafka's ShareCoordinatorOffsetsManager and cold snapshots)
    def appended(self, record: Record, offset: int) -> None:
        """``record`` (already applied) was appended at ``offset``."""
        key, value = record
        if value is not None and _I16.unpack_from(key)[0] == SNAPSHOT_TYPE:
            k = parse_body(
                gen.SHARE_SNAPSHOT_KEY_DECODERS[0],
                key,
                "ShareSnapshotKey",
                utf8_errors_are_corrupt=True,
            )
            if (k.group_id, k.topic_id, k.partition) in self.states:
                self.snapshot_offsets[(k.group_id, k.topic_id, k.partition)] = offset

    def cold_snapshot(self, key: Key, now_ms: int) -> Record | None:
        """A fresh snapshot of a key with updates since its last one (so the log below
        can go), applied; None when its latest record is a snapshot already."""
        s = self.states.get(key)
        if s is None or not self.update_counts.get(key):
            return None
        snap = ShareState(
            s.snapshot_epoch + 1,
            s.state_epoch,
            s.leader_epoch,
            s.start_offset,
            s.delivery_complete_count,
            now_ms,
            now_ms,
            list(s.batches),
        )
        return self._apply(_snapshot_record(key, snap))

    def prunable_offset(self, log_end: int) -> int:
        """The log offset below which no record is needed any more."""
        return min((self.snapshot_offsets.get(k, 0) for k in self.states), default=log_end)
