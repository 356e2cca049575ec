"""The seam between the group coordinator, the share-partition leader and the share state.

How this works: Kafka keeps a share partition's durable state (its start offset, the
AVAILABLE / ACKNOWLEDGED / ARCHIVED ranges with their delivery counts, the state and leader
epochs) in a share coordinator, reached through five inter-broker APIs. kgc serves them as
in-process calls with Kafka's per-partition error codes:

* ``SharePersister`` is what the group coordinator uses: InitializeShareGroupState,
  ReadShareGroupStateSummary and DeleteShareGroupState, per (group, topic id, partition);
* ``ShareStateStore`` adds what the share-partition leader uses: ReadShareGroupState (which
  records the reader's leader epoch) and WriteShareGroupState.

A topic id here is Kafka's ``Uuid.toString()`` form (URL-safe base64, no padding), the form
Kafka's share coordinator keys are made of (``"<group>:<topicId>:<partition>"``). A start
offset of -1 means "not set": the leader applies ``share.auto.offset.reset`` when it first
loads the partition. Every call returns once what it changed is durable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from protocol.errors import ErrorCode

# Persisted delivery states (Kafka's RecordState ids). ARCHIVING (KIP-1191): on its way to
# the group's dead-letter topic, archived once the copy is durable (or has failed).
AVAILABLE = 0
ACKNOWLEDGED = 2
ARCHIVING = 3
ARCHIVED = 4


class PersisterBatch(NamedTuple):
    """A persisted range of offsets in one delivery state (Kafka's PersisterStateBatch)."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


class ReadResult(NamedTuple):
    """ReadShareGroupState's answer for one partition."""

    error: ErrorCode
    state_epoch: int
    start_offset: int
    batches: tuple[PersisterBatch, ...]


class WriteRequest(NamedTuple):
    """WriteShareGroupState's data for one partition."""

    partition: int
    state_epoch: int
    leader_epoch: int
    start_offset: int  # -1: unchanged
    delivery_complete_count: int  # -1: unknown
    batches: Sequence[PersisterBatch]


class SharePersister(Protocol):
    """The share coordinator's state per (group, topic id, partition), as the group coordinator uses it."""

    async def initialize(
        self,
        group_id: str,
        topic_id: str,
        partitions: Sequence[int],
        state_epoch: int,
        start_offset: int,
    ) -> dict[int, ErrorCode]:
        """Kafka's InitializeShareGroupState: a fresh snapshot (no batches) per partition."""
        ...

    async def read_summary(
        self, group_id: str, topic_id: str, partitions: Sequence[int]
    ) -> dict[int, tuple[ErrorCode, int, int]]:
        """ReadShareGroupStateSummary: (error, state epoch, start offset) per partition; a
        partition never initialized answers (NONE, -1, -1)."""
        ...

    async def delete(
        self, group_id: str, topic_id: str, partitions: Sequence[int]
    ) -> dict[int, ErrorCode]:
        """DeleteShareGroupState: a tombstone per partition (a missing one succeeds)."""
        ...


class ShareStateStore(SharePersister, Protocol):
    """The persister as the share-partition leader uses it, besides the group coordinator."""

    async def read_state(
        self, group_id: str, topic_id: str, partition: int, leader_epoch: int
    ) -> ReadResult:
        """ReadShareGroupState: the merged state; records ``leader_epoch`` when it is new."""
        ...

    async def write_state(self, group_id: str, topic_id: str, request: WriteRequest) -> ErrorCode:
        """WriteShareGroupState: NONE once the new state is durable."""
        ...

    def summary(
        self, group_id: str, topic_id: str, partition: int
    ) -> tuple[int, int, int, int] | None:
        """(state epoch, leader epoch, start offset, delivery complete count) as held now,
        None when never initialized; for the admin APIs' lag."""
        ...

    def held_elsewhere(self, group_id: str, topic_id: str, partition: int) -> bool:
        """The key's state is kept by another node (cluster mode): ``summary`` cannot tell,
        ``read_summaries`` asks that node."""
        ...

    async def read_summaries(
        self, group_id: str, topic_id: str, partitions: Sequence[int]
    ) -> dict[int, tuple[ErrorCode, int, int, int, int]]:
        """ReadShareGroupStateSummary whole: (error, state epoch, leader epoch, start
        offset, delivery complete count) per partition; state epoch -1: never initialized."""
        ...
