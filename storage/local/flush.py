"""One fsync of one log: captured on the event loop, run in a worker thread.

How this works: ``PartitionLog.prepare_flush`` captures a ``FlushTicket`` (dups of the dirty
segments' descriptors, the offset they cover, the log's ``cut_backs``); the ``Flusher`` (or
the local journal's checkpoint) runs a list of them off the loop with ``run_tickets``, then
hands each back to its log (``complete_flush`` / ``abort_flush``). The ticket writes the
``recovery-point`` checkpoint after the data is durable, so the checkpoint can only lag.
This module sits below the log, the journal and the flusher, which all import it.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from storage.files import fsync_dir, write_checkpoint
from storage.local.recovery import RECOVERY_POINT_FILE

__all__ = ["RECOVERY_CHECKPOINT_INTERVAL_S", "FlushTicket", "FlushedLog", "run_tickets"]

# The ticket's warning keeps the logger name it had inside the log module.
logger = logging.getLogger("storage.local.log")

RECOVERY_CHECKPOINT_INTERVAL_S = 1.0


class FlushedLog(Protocol):
    """What a ticket touches of its log, from the worker thread."""

    checkpointed_at: float  # monotonic time of the last recovery-point checkpoint

    @property
    def dir(self) -> Path: ...


L = TypeVar("L", bound=FlushedLog)


@dataclass(slots=True)
class FlushTicket(Generic[L]):
    """Work for one fsync of one log, captured on the event loop thread.

    The descriptors are dups, so a segment closed or deleted while the fsync
    runs in a worker thread cannot make us fsync (or close) a reused fd.
    """

    log: L
    target_offset: int
    fds: list[int]
    sync_dir: bool
    bytes: int
    latency_ms: float = 0.0
    done: bool = field(default=False)
    force_checkpoint: bool = False  # synchronous flushes always checkpoint
    # The log's cut_backs when captured: a ticket that raced a cut-back proves nothing.
    generation: int = 0

    def run(self) -> None:
        start = time.perf_counter()
        try:
            for fd in self.fds:
                os.fsync(fd)
            if self.sync_dir:
                fsync_dir(self.log.dir)
            # Written after the data is durable, so it can only lag, never lead. A lagging
            # checkpoint only means a longer recovery scan, so (like Kafka's periodic
            # recovery-point checkpoint) it is rewritten at most once a second.
            now = time.monotonic()
            if (
                self.force_checkpoint
                or now - self.log.checkpointed_at >= RECOVERY_CHECKPOINT_INTERVAL_S
            ):
                try:
                    write_checkpoint(
                        self.log.dir / RECOVERY_POINT_FILE, self.target_offset, sync=False
                    )
                    self.log.checkpointed_at = now
                except OSError as e:
                    # The data is durable; only the hint for recovery lags (a full disk
                    # has no room for the small temp file). Not a reason to fail the flush.
                    logger.warning(
                        "log %s: recovery-point checkpoint not written: %r", self.log.dir.name, e
                    )
        finally:
            for fd in self.fds:
                os.close(fd)
            self.fds = []
            self.latency_ms = (time.perf_counter() - start) * 1000.0


def run_tickets(tickets: list[FlushTicket[L]]) -> list[BaseException | None]:
    """Run fsync tickets in one worker thread; an error fails only its own ticket."""
    out: list[BaseException | None] = []
    for t in tickets:
        try:
            t.run()
            out.append(None)
        except Exception as exc:
            out.append(exc)
    return out
