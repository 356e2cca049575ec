"""Running one kgc process until it is told to stop: signals, garbage collection, the loop.

How this works: ``run`` starts the event loop (uvloop) on ``serve``, which installs the
stop signals' handlers before anything is opened, assembles the node for the settings
(``embedded`` on a data directory, ``cluster`` over PostgreSQL), waits for SIGTERM/SIGINT,
and stops the node cleanly. A worker process of a kgc.workers node runs its own loop
(``workers.worker``) with the same signal and collection rules.

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

from coordinator.config import Settings
from coordinator.node import Node
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


async def start(settings: Settings) -> Node:
    """The node ``settings`` describe, built and serving: one process on a data directory,
    or a cluster node over PostgreSQL."""
    if settings.cluster_mode:
        from coordinator.node.cluster import start_cluster_node

        return await start_cluster_node(settings)
    from coordinator.node.embedded import start_embedded

    return await start_embedded(settings)


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


async def serve(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT, then stop cleanly.

    The handlers go in before anything is opened: once the port accepts connections a
    supervisor may send SIGTERM at any moment, and that must be a clean stop (exit 0), not
    the signal's default action. A signal during start-up lets the start finish, then
    stops.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    tune_gc()
    node = await start(settings)
    freezing = asyncio.ensure_future(freeze_when_loaded(node.groups))
    await stop.wait()
    freezing.cancel()
    log.info("shutting down")
    ignore_stop_signals(loop)
    try:
        await node.stop()
    finally:
        keep_ignoring_stop_signals(loop)


def run(settings: Settings) -> None:
    """One kgc process (the CLI's ``serve`` with kgc.workers = 1)."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(settings))
    else:
        uvloop.run(serve(settings))
