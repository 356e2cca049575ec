"""Which offsets-log partitions this shard serves, and which partition a group belongs to.

How this works
--------------
A group lives in the ``__consumer_offsets`` partition its id hashes to (Kafka's
``partitionFor``).  ``Partitions`` maps each partition the shard owns to its load status:
LOADING while its log is replayed (its groups answer COORDINATOR_LOAD_IN_PROGRESS), LOADED
once served, FAILED if the log could not be replayed (NOT_COORDINATOR, as Kafka's
CoordinatorRuntime answers in state FAILED).  A partition that is not in the map is not
ours (NOT_COORDINATOR).  ``precheck`` is on every group request's path, so a group's
partition is remembered (bounded) instead of hashed each time.
"""

from __future__ import annotations

from enum import Enum

from protocol.errors import ErrorCode
from storage.records import partition_for

__all__ = ["LOADED", "PartitionStatus", "Partitions"]

_CACHE_MAX = 100_000


class PartitionStatus(Enum):
    LOADING = "loading"
    LOADED = "loaded"
    FAILED = "failed"


LOADED = PartitionStatus.LOADED


class Partitions(dict[int, PartitionStatus]):
    """Load status of each owned offsets partition (a dict), and group-to-partition routing."""

    __slots__ = ("_cache", "num_partitions")

    def __init__(self, num_partitions: int) -> None:
        super().__init__()
        self.num_partitions = num_partitions
        self._cache: dict[str, int] = {}

    def partition_of(self, group_id: str) -> int:
        p = self._cache.get(group_id)
        if p is None:
            if len(self._cache) > _CACHE_MAX:
                self._cache.clear()
            p = self._cache[group_id] = partition_for(group_id, self.num_partitions)
        return p

    def availability_error(self, group_id: str) -> ErrorCode | None:
        """Errors that come before any group logic, in Kafka's order (after INVALID_GROUP_ID)."""
        status = self.get(self.partition_of(group_id))
        if status is LOADED:
            return None
        if status is PartitionStatus.LOADING:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NOT_COORDINATOR

    def precheck(self, group_id: str) -> ErrorCode | None:
        """``availability_error`` after INVALID_GROUP_ID, fast for a group seen before."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        p = self._cache.get(group_id)
        if p is not None and self.get(p) is LOADED:
            return None  # the usual case, without a further call
        return self.availability_error(group_id)

    def any_loading(self) -> bool:
        return any(s is PartitionStatus.LOADING for s in self.values())
