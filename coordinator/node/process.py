"""What every kgc process does the same way: its stop signals and its garbage collection.

How this works: a process (``run``: one process on a data directory or a cluster node;
``workers.worker``: a worker process) installs the stop signals' handlers before anything
is opened, stops its node once told, ignores the signals during the stop
(``ignore_stop_signals``) and after it (``keep_ignoring_stop_signals``).

Garbage collection: the young generation is collected every ``GC_THRESHOLDS[0]`` net
allocations instead of Python's 700, so the objects of requests in flight (alive for a
round of fsync, then freed by reference counting) are rarely scanned and promoted; once the
offsets log is loaded, ``gc.freeze()`` moves the loaded groups, offsets and catalog into
the permanent generation, which no later collection scans.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

from coordinator.runtime import GroupRuntime

log = logging.getLogger("kgc")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# gc.set_threshold: young generation, then how many young collections per older one.
GC_THRESHOLDS = (10_000, 10, 10)


def tune_gc() -> None:
    """Collect less often than Python's default (see the module docstring)."""
    gc.set_threshold(*GC_THRESHOLDS)


async def freeze_when_loaded(groups: GroupRuntime) -> None:
    """``gc.freeze()`` once the offsets log is loaded: what start-up built stays (groups,
    offsets, the catalog, modules) and no collection scans it again. No ``gc.collect()``
    first: on a large heap it would pause the node for as long as the load took."""
    await groups.loaded.wait()
    gc.freeze()


def ignore_stop_signals(loop: asyncio.AbstractEventLoop) -> None:
    """During a stop: a stop signal is logged and otherwise ignored (the flush cannot go
    faster)."""
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, log.info, "already shutting down")


def keep_ignoring_stop_signals(loop: asyncio.AbstractEventLoop) -> None:
    """After a stop: closing the loop would restore the signals' default action, and a late
    SIGTERM would then kill the process after "kgc stopped"."""
    for sig in STOP_SIGNALS:
        loop.remove_signal_handler(sig)
        signal.signal(sig, signal.SIG_IGN)
