"""A group's history: every change of its committed offsets and its membership, kept for
``offsets.history.retention.ms``.

How this works: the group core (``group/offsets``) reports each commit that *changes* a
committed offset (and each admin delete) as an ``OffsetChange`` in its Result, and counts
the commits that change nothing; the runtime turns the core's typed events into
``MembershipChange`` entries. ``store.HistoryLog`` encodes one turn's entries of one offsets
partition as one record (``codec``: varints, the turn's strings interned once) in the
partition's log of ``__kgc_group_history``, appended beside the offsets batch and made
durable by the same journal round: a commit is acknowledged only once its history entry is
durable too. The log is deleted by time (``cleanup.policy=delete``), a segment at a time,
so old history costs nothing to drop. ``__consumer_offsets`` stays exactly what Kafka
writes. ``docs/history.md`` argues the design and gives the storage figures.

This package is pure (no asyncio); ``store`` touches storage only through
``storage.interface``.
"""

from coordinator.history.model import (
    HISTORY_TOPIC,
    MembershipChange,
    OffsetChange,
    OffsetHistoryEntry,
)

__all__ = ["HISTORY_TOPIC", "MembershipChange", "OffsetChange", "OffsetHistoryEntry"]
