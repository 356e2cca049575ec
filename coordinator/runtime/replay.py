"""Reading an offsets partition back into the group core, every batch checked.

How this works: at start-up (and when a partition is rebuilt after a failed write) the
runtime replays each ``__consumer_offsets`` partition record by record into the shard,
in chunks so that requests are served in between. Every batch's CRC is checked: a flipped
bit must not become a wrong offset. A batch that fails, or one that overruns its file
anywhere but at the log's tail, raises ``CorruptOffsetsLog`` naming the file and position.

Offset commits are nearly every record of the log, so when the runtime hands over its
``OffsetMetadataManager`` they are applied here directly (``_apply_commits``): the key and
the usual v3 value read in place, no key or value tuple built, a group known to exist not
looked up again. It does exactly what ``GroupShard.replay`` -> ``OffsetMetadataManager.replay``
does for such a record, in log order; any other record, and any key or value it does not
recognise as regular, goes through the shard's ``replay`` (which raises the same errors as
before). A transactional batch -- a TxnOffsetCommit's offsets, or the control batch of a
transaction marker -- goes whole to ``replay_txn`` with its producer id and epoch; while
transactional offsets are pending, a plain commit or tombstone of a group holding some is
also ordered against them (``note_commit``, ``drop_pending_txn``), as the shard's path does.
The young-generation collector is paused while a chunk is applied: the objects a
load builds are long-lived and not cyclic, and scanning them again and again as the heap
grows cost a quarter of the load; it is enabled again before requests are served.
"""

from __future__ import annotations

import gc
import struct
from collections.abc import Callable, Iterator
from typing import Any

from coordinator.group.offsets import OffsetEntry, OffsetMetadataManager
from storage.interface import CorruptLogError, PartitionLog
from storage.record_batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, key_values
from storage.records import decode_offset_commit_value

__all__ = ["CorruptOffsetsLog", "TxnReplay", "replay_partition", "verified_batches"]

# (producer id, producer epoch, control batch?, the batch's (key, value) records)
TxnReplay = Callable[[int, int, bool, list[tuple[bytes | None, bytes | None]]], None]

CHUNK_RECORDS = 20000  # records replayed between two yields to the event loop

# OffsetCommitValue v3 with empty metadata (what kgc and Kafka's clients write):
# version, offset, leader_epoch, metadata length (0), commit_timestamp.
_V3_EMPTY = struct.Struct(">hqihq")
_I32 = struct.Struct(">i")
_MAX_TPS = 1 << 16  # distinct (topic, partition) key tails kept decoded


class CorruptOffsetsLog(Exception):
    """A batch of an offsets partition fails its CRC or does not parse."""


def replay_partition(
    plog: PartitionLog,
    replay: Callable[[bytes, bytes | None], None],
    offsets: OffsetMetadataManager | None = None,
    replay_txn: TxnReplay | None = None,
) -> Iterator[int]:
    """Feed an offsets partition to ``replay``; yields record counts between chunks.

    With ``offsets`` (the manager ``replay`` ends in for offset commits), regular offset
    commits are applied to it directly, with the same result. Every batch's CRC is
    checked: a flipped bit must not become a wrong offset. Raises ``CorruptOffsetsLog``
    (file and position) at the first bad batch.
    """
    if plog.damaged is not None:
        # Found damaged when it was opened: what follows the damage is gone.
        raise CorruptOffsetsLog(plog.damaged)
    batches = verified_batches(plog)
    tps: dict[bytes, tuple[str, int]] = {}  # a key's tail -> (topic, partition)
    while True:
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            n, more = _replay_chunk(batches, replay, offsets, tps, replay_txn)
        finally:
            if paused:
                gc.enable()
        yield n
        if not more:
            return


def _replay_chunk(
    batches: Iterator[tuple[Any, bytes]],
    replay: Callable[[bytes, bytes | None], None],
    offsets: OffsetMetadataManager | None,
    tps: dict[bytes, tuple[str, int]],
    replay_txn: TxnReplay | None = None,
) -> tuple[int, bool]:
    """Replay batches until ``CHUNK_RECORDS`` records are done: (records, more to come)."""
    # Groups seen to exist during this chunk, by their key bytes, with their offsets dict:
    # a record that is not a plain offset commit may delete a group, so the table is
    # emptied whenever the shard's replay runs, and it starts empty every chunk (requests
    # served in between may delete groups too).
    known: dict[bytes, dict[tuple[str, int], OffsetEntry]] = {}
    n = 0
    for header, batch in batches:
        records = key_values(batch)
        if header.attributes & ATTR_TRANSACTIONAL:
            if replay_txn is None:
                raise CorruptOffsetsLog(
                    f"transactional batch at offset {header.base_offset} and nothing to "
                    "replay it into"
                )
            control = bool(header.attributes & ATTR_CONTROL)
            replay_txn(header.producer_id, header.producer_epoch, control, records)
            n += len(records)
            known.clear()
        elif offsets is None:
            for key, value in records:
                if key is not None:
                    replay(key, value)
                    n += 1
            known.clear()
        else:
            n += _apply_commits(records, replay, offsets, tps, known)
        if n >= CHUNK_RECORDS:
            return n, True
    return n, False


def _apply_commits(
    records: list[tuple[bytes | None, bytes | None]],
    replay: Callable[[bytes, bytes | None], None],
    manager: OffsetMetadataManager,
    tps: dict[bytes, tuple[str, int]],
    known: dict[bytes, dict[tuple[str, int], OffsetEntry]],
) -> int:
    """Apply one batch's records in order; returns how many had a key.

    An offset commit key (v0/v1) is read as ``decode_key`` reads it and applied as
    ``OffsetMetadataManager.replay`` applies it: a tombstone removes the offset (and the
    group's dict once empty); a value ensures the group exists (a "simple" classic group
    when none has the id), then sets the offset. Anything else goes to ``replay``.

    Two tables keep most records to two dict lookups: ``tps`` maps a key's tail (topic
    length, topic, partition: validated and decoded once, when first seen; the same
    tuple shared by every record of that partition) to its (topic, partition), and
    ``known`` maps a group's key bytes to its offsets dict once the group is known to
    exist in this chunk. ``known`` stays exact: a tombstone that drops a group's dict
    drops its entry, and any record left to the shard's ``replay`` empties it.
    """
    offsets = manager.offsets
    # Groups with pending transactional offsets: their plain commits and tombstones are
    # ordered against them (the manager's note_commit / drop_pending_txn), as replay does.
    pending = manager.pending_txn_offsets
    find_group = manager.find_group
    create_group = manager.classic.get_or_create_group
    unpack_v3 = _V3_EMPTY.unpack
    unpack_i32 = _I32.unpack_from
    n = 0
    for key, value in records:
        if key is None:
            continue
        n += 1
        # An offset commit key: int16 version 0 or 1, group, topic (int16-length
        # strings), int32 partition; anything irregular is left to decode_key's errors.
        if len(key) >= 10 and key[0] == 0 and key[1] <= 1:
            gend = 4 + ((key[2] << 8) | key[3])
            tail = key[gend:]  # empty when the group length overruns the key
            gkey = key[4:gend]
            tp = tps.get(tail)
            if tp is None:
                tl = len(tail)
                if tl < 6 or 6 + ((tail[0] << 8) | tail[1]) != tl:
                    replay(key, value)
                    known.clear()
                    continue
                gkey.decode()  # the group first, as decode_key: its error if both are bad
                if len(tps) >= _MAX_TPS:
                    tps.clear()  # a bound on a long replay's table, never reached in practice
                tp = tps[tail] = (tail[2 : tl - 4].decode(), unpack_i32(tail, tl - 4)[0])
            by_group = known.get(gkey)
            group = "" if by_group is not None else gkey.decode()
            if value is None:
                if by_group is None:
                    by_group = offsets.get(group)
                if by_group is not None:
                    by_group.pop(tp, None)
                    if not by_group:
                        del offsets[gkey.decode()]
                        known.pop(gkey, None)
                if pending:
                    name = gkey.decode()
                    if name in pending:
                        manager.drop_pending_txn(name, tp)
                continue
            if len(value) == 24 and value[0] == 0 and value[1] == 3:
                _, offset, epoch, mlen, ts = unpack_v3(value)
                entry = OffsetEntry(offset, epoch, "", ts, None) if mlen == 0 else _entry(value)
            else:
                entry = _entry(value)
            if by_group is None:
                if find_group(group) is None:
                    create_group(group)
                by_group = offsets.get(group)
                if by_group is None:
                    by_group = offsets[group] = {}
                known[gkey] = by_group
            by_group[tp] = entry
            if pending:
                name = gkey.decode()
                if name in pending:
                    manager.note_commit(name, tp)
            continue
        replay(key, value)
        known.clear()
    return n


def _entry(value: bytes) -> OffsetEntry:
    """Any OffsetCommitValue version, as ``OffsetMetadataManager.replay`` stores it."""
    v = decode_offset_commit_value(value)
    return OffsetEntry(
        v.offset,
        v.leader_epoch,
        v.metadata,
        v.commit_timestamp,
        None if v.expire_timestamp == -1 else v.expire_timestamp,
    )


def verified_batches(plog: PartitionLog) -> Iterator[tuple[Any, bytes]]:
    """(header, bytes) of every batch from the log's start, each checked against its CRC."""
    try:
        yield from plog.verified_batches()
    except CorruptLogError as exc:
        raise CorruptOffsetsLog(exc.strerror) from None
