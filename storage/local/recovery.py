"""Opening a partition directory: finish interrupted swaps, then trust or re-check segments.

How this works
--------------
Kafka's ``LogLoader``: what a crash may have left behind is put right before the log is
served, and nothing here needs a ``PartitionLog`` (the log and the cleaner both import this
module, never the reverse).

1. Leftovers of an interrupted write (``*.deleted``, ``*.tmp``) are removed.
2. ``complete_pending_swaps`` finishes a compaction swap the cleaner committed (a
   ``.swap`` file: the old segments go, the swap becomes the segment) and rolls back one it
   did not (a ``.cleaned`` file is deleted), so the log is the old group or the new one,
   never a mix. Orphan index files lose their segment and go too.
3. ``load_segments`` reads the small checkpoint files next to the segments:

* ``recovery-point``: every offset below it is known to be fsynced.  After an
  unclean shutdown only segments from the one holding the recovery point are
  re-read with CRC checks; a torn or corrupt tail is truncated and every later
  segment removed (never anything before the first bad byte).
* ``log-start-offset``: advanced by retention / ``delete_segments_before``.
  It is written before the segment files are deleted, so a crash in between
  leaves extra data, not a hole.
* ``clean-shutdown``: written by ``close()`` after a final fsync; when present
  at open the older segments and the indexes are trusted (only missing or stale
  indexes are rebuilt), and it is removed so a later crash is detected.  The
  marker cannot promise that nobody cut or changed a file since, so the active
  segment's tail (after its last index entry) is CRC-checked on every open
  anyway: a torn tail is truncated with a WARNING, never appended after.

The log then makes what was kept durable and writes its checkpoints (``PartitionLog``).
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from storage.files import fsync_dir, read_checkpoint
from storage.local.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    CorruptSegmentError,
    Damage,
    LogSegment,
    parse_segment_name,
    segment_file_name,
)
from storage.record_batch import iter_batches

__all__ = [
    "CLEANED_SUFFIX",
    "CLEAN_SHUTDOWN_FILE",
    "LOG_START_OFFSET_FILE",
    "RECOVERY_POINT_FILE",
    "SWAPINFO_SUFFIX",
    "SWAP_SUFFIX",
    "Loaded",
    "complete_pending_swaps",
    "load_segments",
    "segment_files",
]

# Log lines keep the logger names they had before this module was cut out of the log and
# the cleaner: operators' filters and the log format (``%(name)s``) see no change.
logger = logging.getLogger("storage.local.log")
swap_logger = logging.getLogger("storage.local.cleaner")

CLEAN_SHUTDOWN_FILE = "clean-shutdown"
RECOVERY_POINT_FILE = "recovery-point"
LOG_START_OFFSET_FILE = "log-start-offset"
CLEANED_SUFFIX = ".log.cleaned"
SWAP_SUFFIX = ".log.swap"
SWAPINFO_SUFFIX = ".swapinfo"

# Called with a segment and the corrupt batch found in it (the log marks itself damaged).
Report = Callable[[LogSegment, Damage], None]


def segment_files(directory: Path, base: int) -> list[Path]:
    return [
        directory / segment_file_name(base, s) for s in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX)
    ]


def _swap_next_offset(path: Path) -> int | None:
    """Next offset after the last batch of a swap file (fallback without swapinfo)."""
    data = path.read_bytes()
    nxt = None
    for h, _s, _e in iter_batches(data):
        nxt = h.next_offset
    return nxt


def complete_pending_swaps(directory: Path) -> None:
    """Roll back uncommitted cleanings and finish committed ones (run at open)."""
    names = {p.name for p in directory.iterdir()}
    changed = False
    for name in sorted(names):
        base = parse_segment_name(name, SWAP_SUFFIX)
        if base is None:
            continue
        swap = directory / name
        info = directory / segment_file_name(base, SWAPINFO_SUFFIX)
        end = read_checkpoint(info, -1)
        if end < 0:
            end = _swap_next_offset(swap) or base + 1
        old = sorted(
            b
            for n in names
            if (b := parse_segment_name(n, LOG_SUFFIX)) is not None and base <= b < end
        )
        swap_logger.warning(
            "completing interrupted compaction swap %s: replacing segments %s", name, old
        )
        for b in old:
            for p in segment_files(directory, b):
                p.unlink(missing_ok=True)
        fsync_dir(directory)
        os.replace(swap, directory / segment_file_name(base, LOG_SUFFIX))
        info.unlink(missing_ok=True)
        changed = True
    for name in sorted(names):
        base = parse_segment_name(name, CLEANED_SUFFIX)
        if base is None:
            continue
        swap_logger.warning("discarding unfinished compaction output %s", name)
        (directory / name).unlink(missing_ok=True)
        changed = True
    for p in directory.iterdir():
        b = parse_segment_name(p.name, SWAPINFO_SUFFIX)
        if b is not None and not (directory / segment_file_name(b, SWAP_SUFFIX)).exists():
            p.unlink()
            changed = True
    if changed:
        fsync_dir(directory)


@dataclass(slots=True)
class Loaded:
    """What ``load_segments`` found: the segments kept and what the log must still do."""

    clean: bool  # the clean-shutdown marker was present
    segments: list[LogSegment]
    start_checkpoint: int  # log-start-offset as read
    recovery_checkpoint: int  # recovery-point as read
    first_recovered: int  # index of the first segment re-read (unclean open)
    repaired: bool  # the active segment's tail was cut despite the marker
    dir_dirty: bool  # a segment file was created


def load_segments(directory: Path, index_interval_bytes: int, report: Report) -> Loaded:
    """Put the directory right (steps 1-2) and load its segments (step 3)."""
    clean = (directory / CLEAN_SHUTDOWN_FILE).exists()
    for p in directory.iterdir():
        if p.name.endswith((".deleted", ".tmp")):
            p.unlink()
    complete_pending_swaps(directory)
    bases = sorted(b for p in directory.iterdir() if (b := parse_segment_name(p.name)) is not None)
    for p in directory.iterdir():
        for suffix in (".index", ".timeindex"):
            b = parse_segment_name(p.name, suffix)
            if b is not None and b not in bases:
                p.unlink()
    start_ckpt = read_checkpoint(directory / LOG_START_OFFSET_FILE, 0)
    rp = read_checkpoint(directory / RECOVERY_POINT_FILE, 0)
    segs = [LogSegment(directory, b, index_interval_bytes) for b in bases]
    repaired = False
    first_to_recover = 0
    if clean:
        for seg in segs[:-1]:
            _load_trusted(seg, report)
        if segs:
            repaired = _load_active_after_clean_shutdown(directory, segs[-1], report)
    else:
        first_to_recover = max(bisect.bisect_right(bases, rp) - 1, 0)
        for i, seg in enumerate(segs):
            if i < first_to_recover:
                _load_trusted(seg, report)
                continue
            damage = seg.recover()
            if damage is not None:
                dropped = segs[i + 1 :]
                _warn_damage(directory, seg, damage, dropped)
                for d in dropped:
                    d.delete_files()
                segs = segs[: i + 1]
                break
    dir_dirty = False
    if not segs:
        segs = [LogSegment(directory, start_ckpt, index_interval_bytes)]
        dir_dirty = True
    return Loaded(clean, segs, start_ckpt, rp, first_to_recover, repaired, dir_dirty)


def _load_trusted(seg: LogSegment, report: Report) -> None:
    """Load a segment whose bytes are trusted; one that does not parse is reported."""
    try:
        seg.load(trust_index=True)
    except CorruptSegmentError as e:
        report(seg, e.damage)


def _load_active_after_clean_shutdown(directory: Path, seg: LogSegment, report: Report) -> bool:
    """CRC-check the active segment's tail despite the marker; True if it was repaired."""
    torn, corrupt = seg.load_checked()
    for d in corrupt:
        report(seg, d)
    if torn is None:
        return False
    first = torn.first_bad_offset if torn.first_bad_offset is not None else seg.next_offset
    logger.warning(
        "log %s: %s in %s at position %d although the clean-shutdown marker was present "
        "(the file changed after the clean shutdown); truncated %d bytes (offsets from %d on)",
        directory.name,
        torn.reason,
        seg.log_path.name,
        torn.position,
        torn.truncated_bytes,
        first,
    )
    return True


def _warn_damage(
    directory: Path, seg: LogSegment, damage: Damage, dropped: Sequence[LogSegment]
) -> None:
    first = damage.first_bad_offset if damage.first_bad_offset is not None else seg.next_offset
    logger.warning(
        "log %s: %s in %s at position %d; truncated %d bytes (offsets from %d on); "
        "removed %d later segment(s) %s (%d bytes, offsets up to %s)",
        directory.name,
        damage.reason,
        seg.log_path.name,
        damage.position,
        damage.truncated_bytes,
        first,
        len(dropped),
        [d.log_path.name for d in dropped],
        sum(d.size for d in dropped),
        "unknown" if not dropped else f"at least {dropped[-1].base_offset}",
    )
