"""The history log: one turn's entries as one record, read back by group and time,
deleted by time.

How this works: the runtime hands each Result's ``OffsetChange``s and the membership
changes it made from events to ``add``; at the end of the turn, beside the offsets batches,
``write`` appends one record holding all of them to this process's partition of
``__kgc_group_history`` (partition 0; worker i's on a kgc.workers node) and returns the
(log, last offset) pair the turn's fsync round must cover. One append a turn, however many
offsets partitions the turn touched: an append costs more than encoding a commit's
history. The log is journaled like the offsets log, so the same round makes both durable
and a commit's reply waits for its history as for its record. ``read`` walks the log from
the first batch at or after ``from_ms`` (the time index) up to its durable end, skipping
values that do not name the group. ``apply_retention`` rolls and deletes whole segments
older than the retention.

Carried values: when the round's fsync is the fdatasync of a local journal that also holds
the offsets records (``write(..., carry=True)``: the runtime's ``_journal_covers``), the
value goes only into that journal (``WriteAheadJournal.carry``: the log it belongs to, the
offset it takes there, its time), not into a record batch and a segment: an append costs
more than the value. A carried value is not compressed (``codec.PLAIN``): its batch is,
once for all its values, as Kafka's lz4 codec compresses a batch, which costs less than
compressing each value and takes out what each turn repeats of the one before (the same
keys, members and most offset bytes). The values wait here (``carried``, this store is the log's
``CarriedTail``) and go to the segment as one batch of many records, at the offsets their
journal records named, when ``CARRY_MAX_VALUES`` or ``CARRY_MAX_BYTES`` have gathered, before
anything reads the log (``read``, ``start_ms``, retention), before an append that is not
carried, and when the log fsyncs its segments for a journal checkpoint or a close (the log
calls ``spill``). A failed journal sync cuts back the log, and the values past its durable
end with it (``cut``): the runtime puts their entries back (``_history_failed``). After a
crash the journal's replay re-appends them.

Not kept: commits that change nothing (counted: the next change carries how many there
were, ``unchanged``), transactional offsets, offsets expired or removed with their topic or
group (the membership history records a group's deletion).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from coordinator.history.codec import compress, decode, encode
from coordinator.history.model import (
    HISTORY_TOPIC,
    MembershipChange,
    OffsetChange,
    OffsetHistoryEntry,
)
from coordinator.history.status import StatusSettings
from storage.interface import LogConfig, Logs, OffsetOutOfRangeError, PartitionLog
from storage.record_batch import encode_timed_values, iter_batches, key_values

__all__ = ["HistoryLog"]

log = logging.getLogger("kgc.history")

_READ_BYTES = 1 << 20
# When the carried values go to the segment (one batch): past either bound. Counted
# (bench/runs/history/18-*): the cost of a batch per round is spread over this many.
CARRY_MAX_VALUES = 256
CARRY_MAX_BYTES = 256 << 10

Entry = OffsetHistoryEntry | MembershipChange


class HistoryLog:
    """This process's history log, with what the current turn has not written."""

    def __init__(
        self,
        logs: Logs,
        config: LogConfig,
        partition: int = 0,
        status: StatusSettings | None = None,
    ) -> None:
        self.logs = logs
        self.config = config
        # How a partition's status is judged from its history (``status``).
        self.status = status or StatusSettings()
        self.partition = partition
        self.retention_ms = config.retention_ms
        # The turn's offset changes (each names its offsets partition) and membership
        # changes (with theirs): a partition whose offsets append failed writes no history.
        self.pending: list[OffsetChange] = []
        self.pending_membership: list[tuple[int, MembershipChange]] = []
        self._log: PartitionLog | None = None
        # Bytes of history written (the storage figures): values appended, carried values'
        # batches.
        self.bytes_written = 0
        # Values journaled but not yet in the log (``write(carry=True)``): their time and
        # value; the first takes the log's end offset, the next ones the offsets after it.
        self.carried: list[tuple[int, bytes]] = []
        self._carried_bytes = 0
        # Their batch must stay under the log's max.message.bytes (a value over it alone is
        # refused, as when appended at once).
        self._carry_bytes = min(CARRY_MAX_BYTES, config.max_message_bytes // 2)

    @property
    def plog(self) -> PartitionLog:
        plog = self._log
        if plog is None or plog.closed:
            plog = self._log = self.logs.get_or_create(HISTORY_TOPIC, self.partition, self.config)
            plog.carried = self
            self.carried = []  # a new log (or the same reopened): its journal replayed them
            self._carried_bytes = 0
        return plog

    # -- CarriedTail (the log calls spill and cut)
    @property
    def end(self) -> int:
        assert self._log is not None
        return self._log.log_end_offset + len(self.carried)

    def spill(self) -> None:
        """Append the carried values to the log as one batch (their journal records named
        these offsets). On OSError nothing was appended and they stay carried."""
        carried = self.carried
        if not carried:
            return
        plog = self._log
        assert plog is not None
        batch = encode_timed_values(plog.log_end_offset, carried, lz4=True)
        plog.append(batch)
        self.bytes_written += len(batch)
        self.carried = []
        self._carried_bytes = 0

    def cut(self, end: int) -> None:
        assert self._log is not None
        keep = max(0, end - self._log.log_end_offset)
        if keep < len(self.carried):
            del self.carried[keep:]
            self._carried_bytes = sum(len(v) for _, v in self.carried)

    def add(self, changes: list[OffsetChange]) -> None:
        self.pending += changes

    def add_membership(self, partition: int, change: MembershipChange) -> None:
        self.pending_membership.append((partition, change))

    def write(
        self, now_ms: int, failed: set[int], carry: bool = False
    ) -> tuple[PartitionLog, int] | None:
        """Append what the turn gathered but the offsets partitions in ``failed`` (their
        records are not in the log): (the log, the last offset), or None when nothing was
        to be appended. Raises what the append raised (nothing was appended then).
        ``carry``: the round's fsync is the fdatasync of the log's journal (the caller
        checked); the value may go only into that journal (the offset returned is then
        past the log end until the carried values are appended)."""
        changes, self.pending = self.pending, []
        membership, self.pending_membership = self.pending_membership, []
        if failed:  # rare: a failed offsets append
            changes = [c for c in changes if c.partition not in failed]
            membership = [(p, m) for p, m in membership if p not in failed]
        entries: Sequence[OffsetChange | MembershipChange] = changes
        if membership:
            entries = [*changes, *[m for _, m in membership]]
        elif not changes:
            return None
        plog = self._log
        if plog is None or plog.closed:
            plog = self.plog
        journal = plog.journal
        if carry and journal is not None:
            # Carried plain: compressed with the values of other turns when spilled.
            value = encode(now_ms, entries, compressed=False)
            size = len(value)
            # (A value over the bound alone is appended at once: refused there if too large.)
            if size <= self._carry_bytes:
                carried = self.carried
                if carried and (
                    len(carried) >= CARRY_MAX_VALUES
                    or self._carried_bytes + size > self._carry_bytes
                ):
                    self._spill_kept()
                offset = plog.log_end_offset + len(self.carried)
                if journal.carry(plog, offset, now_ms, value):  # raises: nothing journaled
                    self.carried.append((now_ms, value))
                    self._carried_bytes += size
                    return plog, offset
            value = compress(value)
        else:
            value = encode(now_ms, entries)
        if self.carried:
            self.spill()  # before this value: the offsets stay in order
        _, last = plog.append_records([(None, value)], timestamp_ms=now_ms)
        self.bytes_written += len(value)
        return plog, last

    def _spill_kept(self) -> None:
        """``spill``, keeping the values carried when it fails (the journal holds them;
        the next bound, read or checkpoint tries again)."""
        try:
            self.spill()
        except OSError as exc:
            log.error("appending %d carried history values failed: %r", len(self.carried), exc)

    @property
    def waiting(self) -> bool:
        """Whether the turn gathered anything to write."""
        return bool(self.pending or self.pending_membership)

    def start_ms(self) -> int | None:
        """When the retained history starts (None: there is none)."""
        plog = self.plog
        self._spill_kept()
        for h, _data in plog.iter_batches(plog.log_start_offset):
            return h.base_timestamp
        return None

    def read(self, group_id: str, from_ms: int = 0, to_ms: int | None = None) -> Iterator[Entry]:
        """``group_id``'s durable entries, oldest first, written at or after ``from_ms`` and
        at or before ``to_ms``."""
        plog = self.plog
        self._spill_kept()
        found = plog.offset_for_timestamp(from_ms)
        if found is None:
            return
        # What survives a crash: with the "batch" flush policy its durable end (a reply
        # waited for it); the others acknowledge before an fsync and read to the log end.
        end = plog.durable_end if plog.config.flush_policy == "batch" else plog.log_end_offset
        offset = found[0]
        while offset < end:
            try:
                data = plog.read(offset, _READ_BYTES, end)
            except OffsetOutOfRangeError:
                # retention moved the log start meanwhile
                offset = plog.log_start_offset
                if offset >= end:
                    return
                continue
            if not data:
                return
            for h, start, stop in iter_batches(data):
                offset = h.next_offset
                if h.max_timestamp < from_ms:
                    continue
                if to_ms is not None and h.base_timestamp > to_ms:
                    return
                for _key, value in key_values(data[start:stop]):
                    if value is None:
                        continue
                    for e in decode(value, group_id):
                        if from_ms <= e.timestamp_ms and (to_ms is None or e.timestamp_ms <= to_ms):
                            yield e

    def apply_retention(self, now_ms: int) -> int:
        """Roll and delete the segments past the retention; the segments deleted."""
        plog = self.plog
        try:
            self.spill()
            plog.maybe_roll_by_time()
            return plog.apply_retention(now_ms)
        except OSError:
            log.exception("retention of %s-%d failed", HISTORY_TOPIC, self.partition)
            return 0
