"""Reading an offsets partition back into the group core, every batch checked.

How this works: at start-up (and when a partition is rebuilt after a failed write) the
runtime replays each ``__consumer_offsets`` partition record by record into the shard,
in chunks so that requests are served in between. Every batch's CRC is checked: a flipped
bit must not become a wrong offset. A batch that fails, or one that overruns its file
anywhere but at the log's tail, raises ``CorruptOffsetsLog`` naming the file and position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from storage.local.log import PartitionLog
from storage.local.segment import CorruptSegmentError
from storage.record_batch import iter_record_tuples

__all__ = ["CorruptOffsetsLog", "replay_partition", "verified_batches"]

CHUNK_RECORDS = 20000  # records replayed between two yields to the event loop


class CorruptOffsetsLog(Exception):
    """A batch of an offsets partition fails its CRC or does not parse."""


def replay_partition(
    plog: PartitionLog, replay: Callable[[bytes, bytes | None], None]
) -> Iterator[int]:
    """Feed an offsets partition to ``replay``; yields record counts between chunks.

    Every batch's CRC is checked: a flipped bit must not become a wrong offset.
    Raises ``CorruptOffsetsLog`` (file and position) at the first bad batch.
    """
    if plog.damaged is not None:
        # Found damaged when it was opened: what follows the damage is gone.
        raise CorruptOffsetsLog(plog.damaged)
    n = 0
    for _header, batch in verified_batches(plog):
        for _offset, _ts, key, value in iter_record_tuples(batch):
            if key is not None:
                replay(key, value)
                n += 1
        if n >= CHUNK_RECORDS:
            yield n
            n = 0
    yield n


def verified_batches(plog: PartitionLog) -> Iterator[tuple[Any, bytes]]:
    """(header, bytes) of every batch from the log's start, each checked against its CRC."""
    start = plog.log_start_offset
    for seg in plog.segments:
        if seg.next_offset <= start:
            continue
        pos = seg.position_for(max(start, seg.base_offset))
        if pos is None:
            continue
        end = pos
        try:
            for h, at, data in seg.walk(pos, verify=True, with_data=True):
                assert data is not None
                end = at + h.size
                yield h, data
        except CorruptSegmentError as exc:
            raise CorruptOffsetsLog(
                f"{exc.damage.reason} in {seg.log_path} at position {exc.damage.position}"
            ) from None
        if end < seg.size:
            # The walk stops quietly at what looks like a partial batch; only the
            # log's tail may be one (recovery trims it), never the middle of a file.
            raise CorruptOffsetsLog(
                f"batch overrunning the file in {seg.log_path} at position {end}"
            )
