"""The background compaction of a data directory: the log cleaner over every compacted log.

How this works: one task wakes every ``log.cleaner.backoff.ms``, and for each compacted log
that is open runs its ``LogCleaner`` (one per log, kept between wake-ups so a pass resumes)
in steps of ``CLEANER_STEP_BYTES``, yielding to the event loop between steps so requests
are answered while a large log is cleaned. A failed pass is logged and retried at the next
wake-up; a deleted topic's cleaner is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from storage.local.cleaner import LogCleaner
from storage.local.log import PartitionLog
from storage.local.manager import LogManager

log = logging.getLogger("kgc")

CLEANER_STEP_BYTES = 1 << 20  # work per step, so a step never holds the loop for long


class Compaction:
    """Runs the log cleaner over every compacted log, a bounded step at a time."""

    def __init__(self, logs: LogManager, backoff_ms: int) -> None:
        self.logs = logs
        self.backoff_s = backoff_ms / 1000
        self.cleaners: dict[PartitionLog, LogCleaner] = {}  # one per compacted log
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.backoff_s)
            for gone in [plog for plog in self.cleaners if plog.closed]:
                del self.cleaners[gone]  # a deleted topic's log
            for plog in self.logs.logs():
                if not plog.config.compact or plog.closed:
                    continue
                cleaner = self.cleaners.get(plog)
                if cleaner is None:
                    cleaner = self.cleaners[plog] = LogCleaner(plog)
                try:
                    while cleaner.clean_step(CLEANER_STEP_BYTES):
                        await asyncio.sleep(0)  # let requests through between steps
                except Exception:
                    log.exception("compaction of %s failed; will retry", plog.dir)
