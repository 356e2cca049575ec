"""The history in cluster mode: rows of a shared table, one per offsets partition and round.

How this works: as ``store.HistoryLog`` on one node, the runtime hands each Result's
``OffsetChange``s and its membership changes to ``add``/``add_membership``, and ``write``
runs at the end of the turn, after the offsets batches were appended. Here ``write``
encodes the turn's entries once per offsets partition (``codec``; a group's entries all sit
in its offsets partition) and hands each value to ``note``, which the cluster node wires to
the PostgreSQL journal: the value joins the round statement that makes the partition's
records durable and is inserted only if that round keeps the partition's lease
(``storage.postgres.rounds``). So a commit's reply, which waits for its records, waits for
its history too; a fenced node writes neither; a partition this node no longer holds
(``note`` says False) writes no history. ``write`` returns None: nothing more to wait for.

Reads go to the table through a ``HistoryRows`` source (``storage.postgres.history``): any
node can read any group's history, since a group's rows are those of its offsets partition
(``partition_of``), whoever wrote them; the rows come in the partition's log order (their
``after_offset``), so a failover between owners with different clocks keeps the order of
the changes. ``apply_retention`` deletes the rows older than the retention of the
partitions this node coordinates (each partition's owner cleans its own rows); a merged row
goes when its last turn is past the retention, so history is kept at most
``offsets.history.merge.lag.ms`` longer than the retention (a merged row spans at most that).

``apply_merge``: each round's row pays PostgreSQL's row header, an index entry and a value
compressed alone, so the rows of the partitions this node holds that are older than
``offsets.history.merge.lag.ms`` are merged, a run of them into one row whose value
(``codec.merge``) holds their turns compressed together, in one transaction fenced on the
partition's lease (``lease``: this node's (node id, broker epoch, lease epoch) for it, None
when it does not hold it). A read gives the same entries before and after a merge.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from coordinator.history.codec import decode, encode, merge
from coordinator.history.model import MembershipChange, OffsetChange, OffsetHistoryEntry
from coordinator.history.status import StatusSettings

__all__ = ["HistoryRows", "HistoryTable"]

log = logging.getLogger("kgc.history")

Entry = OffsetHistoryEntry | MembershipChange


class HistoryRows(Protocol):
    """The table's rows, as the storage engine reads and deletes them."""

    async def values(self, offsets_partition: int, from_ms: int, to_ms: int | None) -> list[bytes]:
        """The values of the partition written in [from_ms, to_ms], in log order."""
        ...

    async def start_ms(self, offsets_partition: int) -> int | None:
        """When the partition's oldest kept row was written (None: it has none)."""
        ...

    async def delete_before(self, offsets_partitions: list[int], before_ms: int) -> int:
        """Delete the partitions' rows written before ``before_ms``; how many."""
        ...

    async def merge(
        self,
        offsets_partition: int,
        lease: tuple[int, int, int],
        before_ms: int,
        max_span_ms: int,
        combine: Callable[[list[bytes]], bytes],
        since_ms: int | None = None,
    ) -> tuple[int, int, int, int, int | None]:
        """Merge the partition's round rows written before ``before_ms`` into rows spanning
        at most ``max_span_ms``, fenced on ``lease``; (rows replaced, rows written, their
        bytes before, after, where the next merge starts looking)."""
        ...


class HistoryTable:
    """The cluster's history table, with what the current turn has not written."""

    def __init__(
        self,
        retention_ms: int,
        rows: HistoryRows,
        note: Callable[[int, int, bytes], bool],
        partition_of: Callable[[str], int],
        coordinated: Callable[[], Iterable[int]],
        status: StatusSettings | None = None,
        poke: Callable[[], None] | None = None,
        merge_lag_ms: int = 0,
        lease: Callable[[int], tuple[int, int, int] | None] | None = None,
    ) -> None:
        """``note(offsets partition, now, value)``: add a value to the partition's next
        round (False: the partition is not this node's); ``coordinated()``: the offsets
        partitions this node holds now; ``poke``: ask for a round (history alone);
        ``merge_lag_ms`` (0: no merge) and ``lease``: ``apply_merge``."""
        self.retention_ms = retention_ms
        self.rows = rows
        self.note = note
        self.partition_of = partition_of
        self.coordinated = coordinated
        self.status = status or StatusSettings()
        self.poke = poke
        self.pending: list[OffsetChange] = []
        self.pending_membership: list[tuple[int, MembershipChange]] = []
        # Bytes of history handed to the journal (the storage figures).
        self.bytes_written = 0
        self.merge_lag_ms = merge_lag_ms
        self.lease = lease
        # Per offsets partition: where its next merge starts looking (forgotten with it).
        self.merge_since: dict[int, int | None] = {}
        # Round rows merged away, merged rows written (the storage figures).
        self.rows_merged = 0
        self.merged_rows_written = 0

    def add(self, changes: list[OffsetChange]) -> None:
        self.pending += changes

    def add_membership(self, partition: int, change: MembershipChange) -> None:
        self.pending_membership.append((partition, change))

    @property
    def waiting(self) -> bool:
        """Whether the turn gathered anything to write."""
        return bool(self.pending or self.pending_membership)

    def write(self, now_ms: int, failed: set[int], carry: bool = False) -> None:
        """Hand the turn's entries, one value per offsets partition, to the partitions'
        next round, but those in ``failed`` (their records are not in the log)."""
        changes, self.pending = self.pending, []
        membership, self.pending_membership = self.pending_membership, []
        by_partition: dict[int, list[OffsetChange | MembershipChange]] = {}
        for c in changes:
            if c.partition not in failed:
                by_partition.setdefault(c.partition, []).append(c)
        for p, m in membership:
            if p not in failed:
                by_partition.setdefault(p, []).append(m)
        noted = False
        for p, entries in by_partition.items():
            value = encode(now_ms, entries)
            if self.note(p, now_ms, value):
                self.bytes_written += len(value)
                noted = True
            else:
                log.debug("history of offsets partition %d dropped: not coordinated here", p)
        if noted and not changes and self.poke is not None:
            self.poke()  # membership alone: no reply waits for a round, start one

    async def start_ms(self, group_id: str) -> int | None:
        """When the retained history of ``group_id``'s offsets partition starts."""
        return await self.rows.start_ms(self.partition_of(group_id))

    async def read(self, group_id: str, from_ms: int = 0, to_ms: int | None = None) -> list[Entry]:
        """``group_id``'s entries written in [from_ms, to_ms], oldest first."""
        values = await self.rows.values(self.partition_of(group_id), from_ms, to_ms)
        out: list[Entry] = []
        for value in values:
            for e in decode(value, group_id):
                if from_ms <= e.timestamp_ms and (to_ms is None or e.timestamp_ms <= to_ms):
                    out.append(e)
        return out

    def apply_retention(self, now_ms: int) -> Awaitable[int]:
        """Delete the rows of this node's offsets partitions older than the retention."""
        return self.rows.delete_before(sorted(self.coordinated()), now_ms - self.retention_ms)

    async def apply_merge(self, now_ms: int) -> int:
        """Merge the round rows of this node's offsets partitions older than
        ``merge_lag_ms``; how many were replaced. A partition lost meanwhile (the fence
        refused) is left as it is, for its new owner."""
        if self.merge_lag_ms <= 0 or self.lease is None:
            return 0
        held = sorted(self.coordinated())
        for p in set(self.merge_since) - set(held):
            del self.merge_since[p]  # another node may write it meanwhile: look anew
        replaced = 0
        for p in held:
            lease = self.lease(p)
            if lease is None:
                continue
            try:
                before, after, _b, _a, since = await self.rows.merge(
                    p,
                    lease,
                    now_ms - self.merge_lag_ms,
                    self.merge_lag_ms,
                    merge,
                    self.merge_since.get(p),
                )
            except Exception as exc:  # fenced, or the database is away: the next pass
                self.merge_since.pop(p, None)
                log.warning("history merge of offsets partition %d: %r", p, exc)
                continue
            self.merge_since[p] = since
            replaced += before
            self.rows_merged += before
            self.merged_rows_written += after
        return replaced
