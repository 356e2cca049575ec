"""A group's history that this process no longer writes: a worker count changed between runs.

How this works: each process of a node writes its own ``__kgc_group_history`` partition
(one process: 0; worker i of a kgc.workers node: i) and each offsets partition p is
coordinated by worker p % N, so when N changes between runs a group's older history stays
in the partition of the process that coordinated it before. ``OlderHistory`` finds it in
two places, and DescribeGroupHistory (``apis/history.py``) merges it with the coordinator's
own, oldest first:

* ``logs``: the history partitions this process opened at start but does not write --
  partition p is worker p % N's (``placement.worker_of``), so a run with fewer workers
  than the last one holds the partitions left over (on one process: every one but 0).
  They are read beside this process's own, and their retention is applied here, so they
  empty as the retention passes; an emptied one is then removed (``expired``: the log
  closed, its directory and everything in it removed by ``remove``, crash-safe as a
  topic's deletion, ``LogManager.remove_partition``) -- no process writes it, and only
  this one has it open (the others ask this one for it);
* ``ask``: the other workers' history, live or left over, asked over the inter-broker
  client with DescribeGroupHistory, which a worker answers for another worker
  (``from_worker``: the inter-broker client's client id) from its own partitions, even for
  a group it does not coordinate (to a client it answers NOT_COORDINATOR, as before).
  None on one process. Only the workers ``holders`` names are asked: those holding a
  history partition that a run of some worker count wrote the group's offsets partition
  to (``runtime.history_writers``) -- none while the count never changed, so a
  restarting worker fails no other worker's reads. A worker asked that does not answer
  fails the read with ``Unavailable`` (the answer is COORDINATOR_NOT_AVAILABLE, which
  clients retry): it may hold some.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field

from coordinator.history.store import HistoryLog
from protocol.messages import describe_group_history as dgh

__all__ = ["OlderHistory", "Unavailable"]

log = logging.getLogger("kgc.history")

# The answers of the workers named (indexes; None: every other one) to one request
# (``Unavailable`` when one does not answer).
Ask = Callable[[dgh.Request, Collection[int] | None], Awaitable[list[dgh.Response]]]


class Unavailable(Exception):
    """A worker that may hold some of the history did not answer."""


@dataclass
class OlderHistory:
    """Where the history this process does not write is (module docstring)."""

    logs: list[HistoryLog] = field(default_factory=list)
    ask: Ask | None = None
    # The other workers that may hold history of an offsets partition's groups (None:
    # every other one).
    holders: Callable[[int], Collection[int] | None] | None = None
    # The client ids the other workers' inter-broker clients send.
    worker_client_ids: Collection[str] = ()
    # Closes a log of ``logs`` and removes its partition (None: kept, e.g. in tests).
    remove: Callable[[HistoryLog], object] | None = None

    def from_worker(self, client_id: str) -> bool:
        return client_id in self.worker_client_ids

    def expired(self, history: HistoryLog) -> bool:
        """After a retention pass over ``history`` (one of ``logs``): if it holds nothing
        any more, remove it (no read sees it after this call); whether it was removed."""
        plog = history.plog
        if self.remove is None or plog.log_start_offset < plog.log_end_offset:
            return False
        self.logs = [h for h in self.logs if h is not history]
        try:
            self.remove(history)
        except OSError:
            # Left on disk, closed: the next start opens it again (empty) and retries.
            log.exception("removing the emptied history partition %d failed", history.partition)
        else:
            log.info("removed the emptied history partition %d", history.partition)
        return True
